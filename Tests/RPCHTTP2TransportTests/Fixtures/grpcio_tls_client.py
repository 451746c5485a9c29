"""TLS interop cases run by RPCHTTP2TransportTests: a stock Python grpcio client with a secure
channel against our server.

Usage: grpcio_tls_client.py PORT CASE CA_FILE [CERT KEY]. Prints "PASS CASE" and exits 0, or raises.
Cases: unary, concurrent (100 calls at once), large (1 MiB both ways), refused (the handshake must
fail: the call ends UNAVAILABLE).
"""
import sys

import grpc

port, case, ca_file = sys.argv[1], sys.argv[2], sys.argv[3]
cert = key = None
if len(sys.argv) > 5:
    cert = open(sys.argv[4], "rb").read()
    key = open(sys.argv[5], "rb").read()
credentials = grpc.ssl_channel_credentials(
    root_certificates=open(ca_file, "rb").read(), private_key=key, certificate_chain=cert)
channel = grpc.secure_channel(f"localhost:{port}", credentials)


def stub(method):
    return channel.unary_unary(method, request_serializer=None, response_deserializer=None)


echo = stub("/interop.Test/Echo")

if case == "refused":
    try:
        echo(b"hello", timeout=5)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.UNAVAILABLE, f"{error.code()}: {error.details()}"
    else:
        raise AssertionError("the call succeeded over a connection that should have been refused")
else:
    grpc.channel_ready_future(channel).result(timeout=10)
    if case == "unary":
        assert echo(b"hello", timeout=10) == b"hello"
        assert echo(b"", timeout=10) == b""
    elif case == "concurrent":
        futures = [echo.future(str(i).encode(), timeout=60) for i in range(100)]
        for i, future in enumerate(futures):
            assert future.result() == str(i).encode()
    elif case == "large":
        payload = bytes(range(256)) * 4096  # 1 MiB
        for _ in range(3):
            assert echo(payload, timeout=20) == payload
        assert len(stub("/interop.Test/Big")(str(1024 * 1024).encode(), timeout=20)) == 1024 * 1024
    else:
        raise SystemExit(f"unknown case {case}")
print(f"PASS {case}", flush=True)
