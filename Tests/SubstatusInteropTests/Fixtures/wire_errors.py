"""Checks, byte for byte, how substatusd answers errors in each protocol, against the specifications:
Connect (connectrpc.com/docs/protocol), gRPC-Web (grpc/grpc doc/PROTOCOL-WEB.md) and gRPC
(doc/PROTOCOL-HTTP2.md). Raw requests: http.client for HTTP/1.1, the h2 library for HTTP/2.

usage: wire_errors.py GRPC_ADDR OPERATOR_KEY PROTOS_DIR ADDR HTTP
  GRPC_ADDR, OPERATOR_KEY: the setup (a tenant, an app, a read key) goes through grpcio
  ADDR, HTTP: the listener under test: h2 (the gRPC port, HTTP/2 prior knowledge) or h1 (HTTP/1.1)
Prints `ok` or `FAIL` for every check, then `N passed, N failed`.
"""
import base64, http.client, json, socket, struct, sys, time, urllib.parse

import h2.config, h2.connection, h2.events, h2.exceptions

import substatus_python

grpc_addr, operator_key, protos, addr, http_version = sys.argv[1:6]
substatus_python.generate(protos)
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from substatus.v1 import status_service_pb2 as status_pb


_, app_id, read_key = substatus_python.setup_tenant(grpc_addr, operator_key, "wire errors")
GET_STATUS = "/substatus.v1.StatusService/GetStatus"


class Response:
    def __init__(self, status, headers, body, trailers):
        self.status, self.headers, self.body, self.trailers = status, headers, body, trailers

    def __repr__(self):
        return f"HTTP {self.status} {self.headers} body {self.body[:300]!r} trailers {self.trailers}"


def h1_request(path, headers, body, delay=0.0):
    host, port = addr.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=15)
    connection.putrequest("POST", path)
    for name, value in headers.items():
        connection.putheader(name, value)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders()
    time.sleep(delay)
    try:
        connection.send(body)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered (and closed) before taking the whole body
    response = connection.getresponse()
    answer = Response(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read(), {})
    connection.close()
    return answer


def h2_request(path, headers, body, delay=0.0):
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=15)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", addr)]
                      + [(k.lower(), v) for k, v in headers.items()])
    sock.sendall(conn.data_to_send())
    status, response_headers, data, trailers, ended = None, {}, bytearray(), {}, False
    unsent, sending_after = memoryview(body), time.monotonic() + delay

    def receive():
        nonlocal status, response_headers, trailers, ended
        chunk = sock.recv(65536)
        if not chunk:
            ended = True
            return
        for event in conn.receive_data(chunk):
            if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                response_headers = dict(event.headers)
                status = int(response_headers.pop(":status"))
            elif isinstance(event, h2.events.TrailersReceived) and event.stream_id == stream:
                trailers = dict(event.headers)
            elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
                data.extend(event.data)
                conn.acknowledge_received_data(event.flow_controlled_length, stream)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)) and event.stream_id == stream:
                ended = True
            elif isinstance(event, h2.events.ConnectionTerminated):
                ended = True
        sock.sendall(conn.data_to_send())

    body_done = False
    while not ended:
        if not body_done and time.monotonic() >= sending_after:
            try:  # as much as the flow-control windows allow, then wait for WINDOW_UPDATEs
                while not body_done:
                    window = min(conn.local_flow_control_window(stream), conn.max_outbound_frame_size)
                    if window <= 0 and unsent:
                        break
                    piece, unsent = unsent[:window], unsent[window:]
                    conn.send_data(stream, bytes(piece), end_stream=not unsent)
                    body_done = not unsent
                sock.sendall(conn.data_to_send())
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                body_done = True
        waiting_to_send = not body_done and time.monotonic() < sending_after
        sock.settimeout(max(0.01, sending_after - time.monotonic()) if waiting_to_send else (0.05 if not body_done else 15))
        try:
            receive()
        except socket.timeout:
            if body_done:
                raise
    sock.close()
    return Response(status, response_headers, bytes(data), trailers)


request = h2_request if http_version == "h2" else h1_request


def frame(message, flags=0):
    return struct.pack(">BI", flags, len(message)) + message


def unframe(data):
    frames = []
    while data:
        flags, length = struct.unpack(">BI", data[:5])
        frames.append((flags, data[5:5 + length]))
        data = data[5 + length:]
    return frames


def decode_text(body):
    """A grpc-web-text body: base64 that may be padded at each flush, so decoded 4 characters at a time."""
    body = body.strip()
    assert len(body) % 4 == 0, f"base64 body of {len(body)} characters"
    return b"".join(base64.b64decode(body[i:i + 4]) for i in range(0, len(body), 4))


def b64decode_any(text):
    return base64.b64decode(text + "=" * (-len(text) % 4))


def bad_request_fields(status_bytes):
    fields = []
    for detail in status_pb2.Status.FromString(status_bytes).details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            fields += [v.field for v in bad.field_violations]
    return fields


class Protocol:
    """How one protocol sends a GetStatus request and what its answer must look like."""

    def __init__(self, name, content_type, text=False):
        self.name, self.content_type, self.text = name, content_type, text

    def encode(self, message):
        if self.name == "connect+json":
            return json_format.MessageToJson(message).encode()
        if self.name == "connect+proto":
            return message.SerializeToString()
        framed = frame(message.SerializeToString())
        return base64.b64encode(framed) if self.text else framed

    def headers(self, key, timeout_ms=None):
        headers = {"content-type": self.content_type}
        if key:
            headers["authorization"] = f"Bearer {key}"
        if self.name.startswith("connect"):
            headers["connect-protocol-version"] = "1"
            if timeout_ms:
                headers["connect-timeout-ms"] = str(timeout_ms)
        else:
            if timeout_ms:
                headers["grpc-timeout"] = f"{timeout_ms}m"
            if self.name == "grpc":
                headers["te"] = "trailers"
            else:
                headers["x-grpc-web"] = "1"
                if self.text:
                    headers["accept"] = "application/grpc-web-text"
        return headers

    def call(self, path, message_bytes, key=read_key, timeout_ms=None, delay=0.0):
        return request(path, self.headers(key, timeout_ms), message_bytes, delay)

    def error(self, response):
        """(code name, message, BadRequest fields) of an error answer; asserts its form."""
        if self.name.startswith("connect"):
            assert response.status != 200, f"an error with HTTP 200: {response}"
            content_type = response.headers.get("content-type", "").split(";")[0].strip()
            if response.status == 404 and content_type != "application/json":
                return "unimplemented", "", []  # no Connect error: the spec's HTTP-to-code table says 404 is unimplemented
            assert content_type == "application/json", f"error content-type {content_type!r}: {response}"
            body = json.loads(response.body)
            code = body.get("code")
            assert substatus_python.HTTP_STATUS.get(code) == response.status, f"HTTP {response.status} for code {code!r}: {response}"
            fields = []
            for detail in body.get("details", []):
                assert set(detail) >= {"type", "value"}, detail
                if detail["type"] == "google.rpc.BadRequest":
                    bad = error_details_pb2.BadRequest.FromString(b64decode_any(detail["value"]))
                    fields += [v.field for v in bad.field_violations]
            return code, body.get("message", ""), fields
        assert response.status == 200, f"gRPC{'-Web' if self.name != 'grpc' else ''} error with HTTP {response.status}: {response}"
        content_type = response.headers.get("content-type", "")
        assert content_type.startswith(self.content_type.split("+")[0]), f"content-type {content_type!r}: {response}"
        metadata = dict(response.headers)
        if self.name == "grpc":
            metadata.update(response.trailers)
        elif response.body:
            body = decode_text(response.body) if self.text else response.body
            frames = unframe(body)
            assert frames and frames[-1][0] & 0x80, f"no trailer frame last: {frames}"
            assert all(not f & 0x80 for f, _ in frames[:-1]), f"a trailer frame before the last: {frames}"
            for line in frames[-1][1].decode().split("\r\n"):
                if line:
                    name, _, value = line.partition(":")
                    assert name == name.lower(), f"trailer name not lower case: {name}"
                    metadata[name] = value.strip()
        assert "grpc-status" in metadata, f"no grpc-status: {response}"
        code = {v: k for k, v in substatus_python.GRPC_CODE.items()}.get(int(metadata["grpc-status"]), "?")
        fields = []
        if "grpc-status-details-bin" in metadata:
            fields = bad_request_fields(b64decode_any(metadata["grpc-status-details-bin"]))
        return code, urllib.parse.unquote(metadata.get("grpc-message", "")), fields


def get_status(user_id, app=None):
    return status_pb.GetStatusRequest(app_id=app or app_id, user_id=user_id)


protocols = [Protocol("connect+json", "application/json"), Protocol("connect+proto", "application/proto"),
             Protocol("grpc-web", "application/grpc-web+proto"),
             Protocol("grpc-web-text", "application/grpc-web-text", text=True)]
if http_version == "h2":
    protocols.append(Protocol("grpc", "application/grpc"))

passed = failed = 0


def check(label, fn):
    global passed, failed
    try:
        fn()
        print(f"ok {label}")
        passed += 1
    except Exception as e:
        print(f"FAIL {label}: {type(e).__name__}: {e}")
        failed += 1


def expect(p, response, code, field=None):
    got, message, fields = p.error(response)
    assert got == code, f"code {got!r} ({message!r}), expected {code}: {response}"
    if field:
        assert field in fields, f"BadRequest field violations {fields}, expected {field}"


def success(p):
    response = p.call(GET_STATUS, p.encode(get_status("user-1")))
    assert response.status == 200, response
    if p.name.startswith("connect"):
        assert response.headers.get("content-type", "").split(";")[0].strip() == p.content_type, response
        answer = (json_format.Parse(response.body, status_pb.GetStatusResponse()) if p.name == "connect+json"
                  else status_pb.GetStatusResponse.FromString(response.body))
    else:
        assert response.headers.get("content-type", "").startswith(p.content_type.split("+")[0]), response
        if p.name == "grpc":
            frames = unframe(response.body)
            assert response.trailers.get("grpc-status") == "0", response
        else:
            frames = unframe(decode_text(response.body) if p.text else response.body)
            assert frames[-1][0] == 0x80 and b"grpc-status:0" in frames[-1][1].replace(b" ", b""), frames
            frames = frames[:-1]
        assert len(frames) == 1 and frames[0][0] == 0, frames
        answer = status_pb.GetStatusResponse.FromString(frames[0][1])
    assert answer.user_id == "user-1", answer


for p in protocols:
    check(f"{p.name}: a call succeeds", lambda: success(p))
    check(f"{p.name}: an unknown key is unauthenticated",
          lambda: expect(p, p.call(GET_STATUS, p.encode(get_status("u")), key="sk_not_a_key"), "unauthenticated"))
    check(f"{p.name}: no key is unauthenticated",
          lambda: expect(p, p.call(GET_STATUS, p.encode(get_status("u")), key=None), "unauthenticated"))
    check(f"{p.name}: a bad argument is invalid_argument with a BadRequest naming the field",
          lambda: expect(p, p.call(GET_STATUS, p.encode(get_status(""))), "invalid_argument", "user_id"))
    check(f"{p.name}: an unknown method is unimplemented",
          lambda: expect(p, p.call("/substatus.v1.StatusService/NoSuchMethod", p.encode(get_status("u"))), "unimplemented"))
    check(f"{p.name}: an unknown service is unimplemented",
          lambda: expect(p, p.call("/nope.v1.NoService/Call", p.encode(get_status("u"))), "unimplemented"))
    check(f"{p.name}: a body over 4 MiB is resource_exhausted",
          lambda: expect(p, p.call(GET_STATUS, p.encode(get_status("x" * (5 << 20)))), "resource_exhausted"))
    check(f"{p.name}: a call past its deadline is deadline_exceeded",
          lambda: expect(p, p.call(GET_STATUS, p.encode(get_status("u")), timeout_ms=200, delay=1.0), "deadline_exceeded"))

connect = protocols[0]


def unsupported_codec():
    headers = dict(connect.headers(read_key), **{"content-type": "application/x-nope"})
    response = request(GET_STATUS, headers, b"{}")
    assert response.status == 415, response


def unsupported_encoding():
    headers = dict(connect.headers(read_key), **{"content-encoding": "x-nope"})
    expect(connect, request(GET_STATUS, headers, connect.encode(get_status("u"))), "unimplemented")


def plain_json():
    headers = {"content-type": "application/json", "authorization": f"Bearer {read_key}"}
    response = request(GET_STATUS, headers, json.dumps({"appId": app_id, "userId": "user-1"}).encode())
    assert response.status == 200 and json.loads(response.body)["userId"] == "user-1", response


check("connect: an unsupported codec is HTTP 415", unsupported_codec)
check("connect: an unsupported content-encoding is unimplemented", unsupported_encoding)
check("connect: JSON without Connect-Protocol-Version (plain curl) works", plain_json)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
