"""A stock Python grpcio server for the client interop tests, over raw bytes (generic handlers).

Usage: grpcio_server.py. Binds 127.0.0.1:0, prints "PORT <n>", serves until stdin closes.
Methods of /interop.Test: Echo (echoes the message, x- metadata back as initial metadata, and
trailer x-trailer: done), Fail (INVALID_ARGUMENT), Sleep (payload = milliseconds).
Server streaming: Stream (payload "N", "N:fail" or "N:early": N messages "m<i>", then OK, or
RESOURCE_EXHAUSTED "quota" with a google.rpc.Status in grpc-status-details-bin; or at once a
Trailers-Only FAILED_PRECONDITION), Flood (payload =
message size: messages until the call ends; each one counted), Ticks (one message "first", then
waits for the call to end and counts it as cancelled), and the unary Stats ("<flood messages sent>
<ticks cancelled>").
"""
import sys
import threading
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


def stream(request, context):
    count, _, mode = request.decode().partition(":")
    if mode == "early":
        context.set_trailing_metadata([("x-reason", "early")])
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "refused before any message")
    context.send_initial_metadata([("x-initial", "i")])
    for i in range(int(count)):
        yield f"m{i}".encode()
    if mode == "fail":
        # google.rpc.Status{code: 8, message: "quota"}, encoded by hand (no grpcio-status here).
        details = b"\x08\x08\x12\x05quota"
        context.set_trailing_metadata([("grpc-status-details-bin", details), ("x-reason", "quota")])
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "quota")
    context.set_trailing_metadata([("x-trailer", "done")])


stats_lock = threading.Lock()
stats = {"flood": 0, "cancelled": 0}


def flood(request, context):
    message = b"f" * int(request.decode())
    while context.is_active():
        with stats_lock:
            stats["flood"] += 1
        yield message


def ticks(request, context):
    yield b"first"
    while context.is_active():
        time.sleep(0.01)
    with stats_lock:
        stats["cancelled"] += 1


def get_stats(request, context):
    with stats_lock:
        return f"{stats['flood']} {stats['cancelled']}".encode()


def streaming(fn):
    return grpc.unary_stream_rpc_method_handler(fn, request_deserializer=None, response_serializer=None)


def handler(fn):
    return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=None, response_serializer=None)


server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
    "interop.Test", {"Echo": handler(echo), "Fail": handler(fail), "Sleep": handler(sleep), "Stats": handler(get_stats),
     "Stream": streaming(stream), "Flood": streaming(flood), "Ticks": streaming(ticks)})])
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(f"PORT {port}", flush=True)
sys.stdin.read()
server.stop(0)
