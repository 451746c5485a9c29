"""grpc.health.v1.Health/Watch over grpcio against our server.

Usage: health_watch_client.py PORT PROTOS_DIR. Compiles health.proto from PROTOS_DIR with grpc_tools
(into a temporary directory). Watches the whole server and expects SERVING at once; watches an
unknown service and expects SERVICE_UNKNOWN with the stream left open; calls /test.Health/Drain (the
test server's handler calls markAllNotServing) and expects NOT_SERVING on the first stream.
"""
import importlib.util
import os
import sys
import tempfile
import time

import grpc
from grpc_tools import protoc

port, protos = sys.argv[1], sys.argv[2]
out = tempfile.mkdtemp()
assert protoc.main(["protoc", f"-I{protos}", f"--python_out={out}", "grpc/health/v1/health.proto"]) == 0
spec = importlib.util.spec_from_file_location("health_pb2", os.path.join(out, "grpc", "health", "v1", "health_pb2.py"))
pb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pb)
Status = pb.HealthCheckResponse.ServingStatus

channel = grpc.insecure_channel(f"127.0.0.1:{port}")
watch = channel.unary_stream("/grpc.health.v1.Health/Watch",
                             request_serializer=pb.HealthCheckRequest.SerializeToString,
                             response_deserializer=pb.HealthCheckResponse.FromString)
server = watch(pb.HealthCheckRequest(service=""), timeout=20)
first = next(server)
assert first.status == Status.Value("SERVING"), first
print("server: SERVING", flush=True)

unknown = watch(pb.HealthCheckRequest(service="nope.Svc"), timeout=20)
assert next(unknown).status == Status.Value("SERVICE_UNKNOWN")
print("nope.Svc: SERVICE_UNKNOWN", flush=True)

drain = channel.unary_unary("/test.Health/Drain", request_serializer=lambda b: b, response_deserializer=lambda b: b)
drain(b"", timeout=10)
second = next(server)
assert second.status == Status.Value("NOT_SERVING"), second
print("server: NOT_SERVING", flush=True)

time.sleep(0.2)
assert unknown.is_active(), "the stream for an unknown service ended"
server.cancel()
unknown.cancel()
print("PASS health watch", flush=True)
