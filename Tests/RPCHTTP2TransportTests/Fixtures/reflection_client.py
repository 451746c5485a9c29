"""Server reflection and health over grpcio against our server.

Usage: reflection_client.py PORT PROTOS_DIR. Compiles the reflection protos from PROTOS_DIR with
grpc_tools (into a temporary directory), then checks list_services, file_containing_symbol,
file_by_filename and a NOT_FOUND error on v1 and v1alpha, and Health/Check over raw bytes.
"""
import importlib.util
import os
import sys
import tempfile

import grpc
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

port, protos = sys.argv[1], sys.argv[2]
out = tempfile.mkdtemp()
for version in ("v1", "v1alpha"):
    assert protoc.main(["protoc", f"-I{protos}", f"--python_out={out}",
                        f"grpc/reflection/{version}/reflection.proto"]) == 0
sys.path.insert(0, out)

channel = grpc.insecure_channel(f"127.0.0.1:{port}")
for version in ("v1", "v1alpha"):
    spec = importlib.util.spec_from_file_location(
        f"reflection_{version}", os.path.join(out, "grpc", "reflection", version, "reflection_pb2.py"))
    pb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pb)
    info = channel.stream_stream(f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                                 request_serializer=pb.ServerReflectionRequest.SerializeToString,
                                 response_deserializer=pb.ServerReflectionResponse.FromString)
    requests = [
        pb.ServerReflectionRequest(list_services=""),
        pb.ServerReflectionRequest(file_containing_symbol="subs.bench.v1.Bench"),
        pb.ServerReflectionRequest(file_containing_symbol="subs.bench.v1.Bench.Echo"),
        pb.ServerReflectionRequest(file_by_filename="grpc/health/v1/health.proto"),
        pb.ServerReflectionRequest(file_containing_symbol="nope.Nothing"),
    ]
    responses = list(info(iter(requests), timeout=10))
    assert len(responses) == len(requests), responses
    services = [s.name for s in responses[0].list_services_response.service]
    for expected in ("subs.bench.v1.Bench", "grpc.health.v1.Health", f"grpc.reflection.{version}.ServerReflection"):
        assert expected in services, services
    for response in responses[1:3]:
        files = [descriptor_pb2.FileDescriptorProto.FromString(b) for b in response.file_descriptor_response.file_descriptor_proto]
        assert files and files[0].name == "subs/bench/v1/bench.proto", [f.name for f in files]
        assert files[0].service[0].name == "Bench"
    files = [descriptor_pb2.FileDescriptorProto.FromString(b) for b in responses[3].file_descriptor_response.file_descriptor_proto]
    assert files[0].name == "grpc/health/v1/health.proto", files
    assert responses[4].error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0], responses[4]

check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None)
assert check(b"", timeout=10) == b"\x08\x01"  # status: SERVING
try:
    check(b"\x0a\x04nope", timeout=10)
    raise AssertionError("expected NOT_FOUND")
except grpc.RpcError as error:
    assert error.code() == grpc.StatusCode.NOT_FOUND, error
print("PASS reflection", flush=True)
