"""Interop cases run by RPCHTTP2TransportTests: a stock Python grpcio client against our server.

Usage: grpcio_client.py PORT CASE. Prints "PASS CASE" and exits 0, or raises.
Calls use generic raw-bytes stubs (no generated code): the test service treats messages as bytes.
"""
import sys
import threading
import time

import grpc

port, case = sys.argv[1], sys.argv[2]
channel = grpc.insecure_channel(f"127.0.0.1:{port}")
grpc.channel_ready_future(channel).result(timeout=10)


def stub(method):
    return channel.unary_unary(method, request_serializer=None, response_deserializer=None)


def expect_code(fn, code):
    try:
        fn()
    except grpc.RpcError as error:
        assert error.code() == code, f"expected {code}, got {error.code()}: {error.details()}"
        return error
    raise AssertionError(f"expected {code}, got OK")


echo = stub("/interop.Test/Echo")

if case == "unary":
    assert echo(b"hello", timeout=10) == b"hello"
    assert echo(b"", timeout=10) == b""
elif case == "metadata":
    reply, call = echo.with_call(
        b"m", metadata=(("x-a", "1"), ("x-bin-bin", b"\x00\x01\xff")), timeout=10)
    initial = dict(call.initial_metadata())
    trailing = dict(call.trailing_metadata())
    assert initial.get("x-a") == "1", initial
    assert initial.get("x-bin-bin") == b"\x00\x01\xff", initial
    assert trailing.get("x-trailer") == "done", trailing
elif case == "deadline":
    start = time.monotonic()
    expect_code(lambda: stub("/interop.Test/Sleep")(b"60000", timeout=1.0), grpc.StatusCode.DEADLINE_EXCEEDED)
    assert time.monotonic() - start < 10
elif case == "cancel":
    future = stub("/interop.Test/Sleep").future(b"60000", timeout=60)
    time.sleep(1.0)
    assert future.cancel()
    time.sleep(0.3)
elif case == "unknown":
    error = expect_code(lambda: stub("/interop.Test/Nope")(b"", timeout=10), grpc.StatusCode.UNIMPLEMENTED)
    assert error.details() == "unknown method Nope for service interop.Test", error.details()
    error = expect_code(lambda: stub("/nope.Service/Echo")(b"", timeout=10), grpc.StatusCode.UNIMPLEMENTED)
    assert error.details() == "unknown service nope.Service", error.details()
elif case == "too_large":
    error = expect_code(lambda: echo(b"x" * (4 * 1024 * 1024 + 1), timeout=20), grpc.StatusCode.RESOURCE_EXHAUSTED)
    # The server keeps serving on the same channel.
    assert echo(b"after", timeout=10) == b"after"
    expect_code(lambda: stub("/interop.Test/Big")(str(4 * 1024 * 1024 + 1).encode(), timeout=20),
                grpc.StatusCode.RESOURCE_EXHAUSTED)
elif case == "large":
    payload = bytes(range(256)) * 4096  # 1 MiB
    for _ in range(3):
        assert echo(payload, timeout=20) == payload
    assert len(stub("/interop.Test/Big")(str(1024 * 1024).encode(), timeout=20)) == 1024 * 1024
elif case == "concurrent":
    futures = [echo.future(str(i).encode(), timeout=60) for i in range(2000)]
    for i, future in enumerate(futures):
        assert future.result() == str(i).encode()
elif case == "error_message":
    error = expect_code(lambda: stub("/interop.Test/Fail")(b"", timeout=10), grpc.StatusCode.INVALID_ARGUMENT)
    assert error.details() == "bad input: ü 100% \n done", repr(error.details())
    assert dict(error.trailing_metadata()).get("x-reason") == "test", error.trailing_metadata()
elif case == "compressed":
    # gzip requests, small and over the server's 1 KiB threshold (the echo comes back gzipped);
    # 4 MiB + 1 of zeros gzip to a few KiB and are still over the limit once inflated.
    for payload in (b"z" * 100, bytes(range(256)) * 64):
        assert echo(payload, timeout=10, compression=grpc.Compression.Gzip) == payload
    expect_code(lambda: echo(bytes(4 * 1024 * 1024 + 1), timeout=20, compression=grpc.Compression.Gzip),
                grpc.StatusCode.RESOURCE_EXHAUSTED)
    # Deflate is not supported: refused naming what is.
    error = expect_code(lambda: echo(b"z" * 100, timeout=10, compression=grpc.Compression.Deflate),
                        grpc.StatusCode.UNIMPLEMENTED)
elif case == "inflight":
    # Started before the server begins its graceful shutdown; must still complete.
    assert stub("/interop.Test/Sleep")(b"800", timeout=20) == b"800"
else:
    raise SystemExit(f"unknown case {case}")
print(f"PASS {case}")
