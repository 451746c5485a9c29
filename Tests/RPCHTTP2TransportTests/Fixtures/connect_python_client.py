"""Calls the bench service with the Python `connectrpc` client over HTTP/2 (prior knowledge).

Usage: connect_python_client.py PORT PROTOS_DIR PROTOCOL CODEC CASE
  PROTOCOL: connect | grpc-web;  CODEC: proto | json;  CASE: unary | error | deadline | gzip | duplex.
Prints "PASS CASE" and exits 0, or raises. The message classes are generated from PROTOS_DIR with
grpc_tools into a temporary folder (google.protobuf, through connectrpc's compat codecs).
"""
import importlib
import sys
import tempfile
import threading

from grpc_tools import protoc

port, protos, protocol_name, codec_name, case = sys.argv[1:6]

out = tempfile.mkdtemp(prefix="connect-py-")
assert protoc.main(["protoc", f"-I{protos}", f"--python_out={out}", "subs/bench/v1/bench.proto"]) == 0
sys.path.insert(0, out)
bench = importlib.import_module("subs.bench.v1.bench_pb2")

import pyqwest  # noqa: E402
from connectrpc.client import ConnectClientSync  # noqa: E402
from connectrpc.code import Code  # noqa: E402
from connectrpc.compat import google_protobuf_binary_codec, google_protobuf_json_codec  # noqa: E402
from connectrpc.errors import ConnectError  # noqa: E402
from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType  # noqa: E402
from connectrpc.protocol import ProtocolType  # noqa: E402

protocol = {"connect": ProtocolType.CONNECT, "grpc-web": ProtocolType.GRPC_WEB}[protocol_name]
codec = google_protobuf_json_codec() if codec_name == "json" else google_protobuf_binary_codec()
http = pyqwest.SyncClient(pyqwest.SyncHTTPTransport(http_version=pyqwest.HTTPVersion.HTTP2))


def method(name, request, reply):
    return MethodInfo(
        name=name, service_name="subs.bench.v1.Bench", input=request, output=reply,
        idempotency_level=IdempotencyLevel.UNKNOWN, stream_type=StreamType.UNARY)


check = method("CheckEligibility", bench.EligibilityRequest, bench.EligibilityReply)
# No request compression here; the "gzip" case uses the client's defaults (gzip both ways).
client = ConnectClientSync(
    f"http://127.0.0.1:{port}", codec=codec, protocol=protocol, send_compression=None, http_client=http)


def expect_error(fn, code):
    try:
        fn()
    except ConnectError as error:
        assert error.code == code, f"expected {code}, got {error.code}: {error.message}"
        return error
    raise AssertionError(f"expected {code}, got OK")


if case == "unary":
    reply = client.execute_unary(
        request=bench.EligibilityRequest(app_id="a", user_id="u", product_ids=["p1", "p2"]), method=check)
    assert [r.product_id for r in reply.results] == ["p1", "p2"], reply
    assert reply.results[0].intro_eligible and not reply.results[1].intro_eligible, reply
elif case == "error":
    error = expect_error(
        lambda: client.execute_unary(request=bench.EligibilityRequest(user_id="u"), method=check),
        Code.INVALID_ARGUMENT)
    assert error.message == "app_id: must not be empty", error.message
    assert [d.type_name for d in error.details] == ["google.rpc.BadRequest"], error.details
elif case == "deadline":
    expect_error(
        lambda: client.execute_unary(request=bench.EligibilityRequest(app_id="slow"), method=check, timeout_ms=200),
        Code.DEADLINE_EXCEEDED)
elif case == "gzip":
    # The client's defaults: gzip requests, gzip accepted. 200 products make a reply over the
    # server's 1 KiB threshold (compressed), 2 one under it (sent as is).
    gzip_client = ConnectClientSync(f"http://127.0.0.1:{port}", codec=codec, protocol=protocol, http_client=http)
    for count in (200, 2):
        products = [f"com.example.product.{i}" for i in range(count)]
        reply = gzip_client.execute_unary(
            request=bench.EligibilityRequest(app_id="a", user_id="u", product_ids=products), method=check)
        assert [r.product_id for r in reply.results] == products, reply
    error = expect_error(
        lambda: gzip_client.execute_unary(request=bench.EligibilityRequest(user_id="u"), method=check),
        Code.INVALID_ARGUMENT)
    assert error.message == "app_id: must not be empty", error.message
elif case == "duplex":
    # /test.Stream/Duplex echoes each message as it arrives: the second request is sent only after
    # the first answer came back, so a server that waits for the end of the request never answers.
    from google.protobuf.wrappers_pb2 import BytesValue

    duplex = MethodInfo(
        name="Duplex", service_name="test.Stream", input=BytesValue, output=BytesValue,
        idempotency_level=IdempotencyLevel.UNKNOWN, stream_type=StreamType.BIDI_STREAM)
    answered = threading.Event()

    def requests():
        yield BytesValue(value=b"one")
        assert answered.wait(timeout=10), "no answer to the first message before the second was sent"
        yield BytesValue(value=b"two")

    received = []
    for reply in client.execute_bidi_stream(request=requests(), method=duplex):
        received.append(reply.value)
        answered.set()
    assert received == [b"one", b"two"], received
else:
    raise SystemExit(f"unknown case {case}")
print(f"PASS {case}")
