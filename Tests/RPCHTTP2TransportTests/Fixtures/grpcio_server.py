"""A stock Python grpcio server for the client interop tests, over raw bytes (generic handlers).

Usage: grpcio_server.py. Binds 127.0.0.1:0, prints "PORT <n>", serves until stdin closes.
Methods of /interop.Test: Echo (echoes the message, x- metadata back as initial metadata, and
trailer x-trailer: done), Fail (INVALID_ARGUMENT), Sleep (payload = milliseconds).
"""
import sys
import time
from concurrent import futures

import grpc


def echo(request, context):
    context.send_initial_metadata([(k, v) for k, v in context.invocation_metadata() if k.startswith("x-")])
    context.set_trailing_metadata([("x-trailer", "done")])
    return request


def fail(request, context):
    context.set_trailing_metadata([("x-reason", "test")])
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad input: ü 100%")


def sleep(request, context):
    deadline = time.monotonic() + int(request.decode() or "0") / 1000
    while time.monotonic() < deadline and context.is_active():
        time.sleep(0.01)
    return request


def handler(fn):
    return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=None, response_serializer=None)


server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
    "interop.Test", {"Echo": handler(echo), "Fail": handler(fail), "Sleep": handler(sleep)})])
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(f"PORT {port}", flush=True)
sys.stdin.read()
server.stop(0)
