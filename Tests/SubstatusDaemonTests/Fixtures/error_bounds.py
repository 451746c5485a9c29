"""Errors too large for a header block, against a running substatusd (issue 30, attack 3 and the
JSON part of attack 8), loopback only.

usage: error_bounds.py SCENARIO GRPC_ADDR HTTP_ADDR OPERATOR_KEY PROTOS_DIR

Scenarios:
  json_number   GetStatus in the gRPC JSON codec (application/grpc+json, raw h2) whose asOfMs has
                70,000 digits: INVALID_ARGUMENT within 5 s with a grpc-message of at most 1 KiB
                quoting a short prefix and the length; the same body over Connect (HTTP listener)
                answers 400 with a short message.
  slot_flood    2 connections x 520 such calls (ERROR_BOUNDS_CALLS per connection) against the
                budget of 1,024 calls: every call is answered INVALID_ARGUMENT (none left open),
                substatus_grpc_calls_in_flight is back to 0, and another client's call succeeds.
  violations    PutEntitlements with 300 unknown products (300 field violations, long product
                ids): INVALID_ARGUMENT within 10 s (not DEADLINE_EXCEEDED), grpc-status-details-bin
                of at most 3 KiB (grpcio refuses trailers over 8 KiB), a valid google.rpc.Status whose BadRequest keeps the first
                violations and ends with one saying how many were left out; over Connect and
                gRPC-Web on the HTTP listener, a bounded message and bounded details.
Prints `PASS SCENARIO` and a `FIGURES {...}` line; an assertion fails otherwise.
"""
import base64, glob, importlib, json, os, select, socket, sys, tempfile, time, urllib.error, urllib.parse, urllib.request

import grpc, grpc_tools
from grpc_tools import protoc
import h2.config, h2.connection, h2.events

scenario, grpc_addr, http_addr, operator_key, protos = sys.argv[1:6]
grpc_host, grpc_port = grpc_addr.rsplit(":", 1)
figures = {}
MAX_MESSAGE, MAX_DETAILS = 1024, 3072
DIGITS = 70_000


def metrics():
    with urllib.request.urlopen(f"http://{http_addr}/metrics", timeout=5) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and " " in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def load_stubs():
    out = tempfile.mkdtemp()
    files = sorted(os.path.relpath(p, protos) for p in glob.glob(os.path.join(protos, "**/*.proto"), recursive=True))
    builtin = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    assert protoc.main(["protoc", f"-I{protos}", f"-I{builtin}", f"--python_out={out}", f"--grpc_python_out={out}", *files]) == 0
    sys.path.insert(0, out)
    grpc.__path__.append(os.path.join(out, "grpc"))
    pb = type("pb", (), {})
    for f in files:
        mod = importlib.import_module(f[:-6].replace("/", ".") + "_pb2")
        for name in dir(mod):
            if not name.startswith("_"):
                setattr(pb, name, getattr(mod, name))
    grpcmods = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2_grpc") for f in files if "substatus/v1/" in f and "service" in f}
    return pb, lambda name, channel: getattr(grpcmods[f"substatus/v1/{name}.proto"], "".join(w.title() for w in name.split("_")) + "Stub")(channel)


pb, stub = load_stubs()
auth = lambda key: (("authorization", "Bearer " + key),)


def setup():
    """A tenant, an app, a READ key and the tenant's ADMIN key."""
    with grpc.insecure_channel(grpc_addr) as channel:
        admin_key = stub("tenant_service", channel).CreateTenant(pb.CreateTenantRequest(name="bounds"), metadata=auth(operator_key)).admin_key
        admin = stub("admin_service", channel)
        app_id = admin.RegisterApp(pb.RegisterAppRequest(bundle_id="com.example.bounds"), metadata=auth(admin_key)).app.app_id
        read_key = admin.CreateApiKey(pb.CreateApiKeyRequest(role=pb.API_KEY_ROLE_READ, app_ids=[app_id]), metadata=auth(admin_key)).key
    return app_id, read_key, admin_key


def big_number_body(app_id):
    return ('{"appId":"%s","userId":"u","asOfMs":%s}' % (app_id, "9" * DIGITS)).encode()


class H2Client:
    """A raw HTTP/2 client that sends many calls and collects each stream's answer."""

    def __init__(self):
        self.s = socket.create_connection((grpc_host, int(grpc_port)), timeout=10)
        self.s.setblocking(False)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(16 << 20)
        self.streams = {}
        self.flush()

    def flush(self):
        """Sends what h2 has queued, reading meanwhile (the server may wait for us to read)."""
        data = self.conn.data_to_send()
        while data:
            readable, writable, _ = select.select([self.s], [self.s], [], 10)
            if not readable and not writable:
                raise AssertionError("the connection is stuck")
            if readable and not self.receive():
                raise AssertionError("the server closed the connection")
            if writable:
                try:
                    data = data[self.s.send(data):]
                except BlockingIOError:
                    pass
            data += self.conn.data_to_send()

    def receive(self):
        """Processes what the server has sent; False at EOF."""
        try:
            data = self.s.recv(1 << 20)
        except BlockingIOError:
            return True
        if not data:
            return False
        for event in self.conn.receive_data(data):
            state = self.streams.get(getattr(event, "stream_id", None))
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                state["headers"].update(dict(event.headers))
            elif isinstance(event, h2.events.DataReceived):
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                state["ended"] = time.monotonic()
            elif isinstance(event, h2.events.StreamReset) and state is not None:
                state["reset"] = int(event.error_code)
        return True

    def read(self, timeout):
        """Waits up to `timeout` for the server's bytes and processes them; False at EOF."""
        readable, _, _ = select.select([self.s], [], [], timeout)
        if not readable:
            return True
        alive = self.receive()
        self.flush()
        return alive

    def call(self, path, body, key, content_type="application/grpc+json"):
        sid = self.conn.get_next_available_stream_id()
        self.streams[sid] = {"headers": {}, "ended": None, "reset": None, "sent": time.monotonic()}
        self.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", grpc_addr),
                                     ("content-type", content_type), ("te", "trailers"), ("authorization", "Bearer " + key)])
        framed = b"\x00" + len(body).to_bytes(4, "big") + body
        offset = 0
        while offset < len(framed):
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                self.flush()
                self.read(0.5)
                continue
            chunk = framed[offset:offset + window]
            offset += len(chunk)
            self.conn.send_data(sid, chunk, end_stream=offset == len(framed))
        self.flush()
        return sid

    def wait(self, limit):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and not all(v["ended"] or v["reset"] is not None for v in self.streams.values()):
            if not self.read(0.2):
                break

    def close(self):
        self.s.close()


def check_short_message(message, label):
    text = urllib.parse.unquote(message)
    assert len(text.encode()) <= MAX_MESSAGE, (label, len(text.encode()))
    assert f"({DIGITS} bytes)" in text, (label, text[:300])
    return text


def connect_post(path, body, key, content_type="application/json"):
    req = urllib.request.Request(f"http://{http_addr}{path}", data=body, method="POST",
                                 headers={"Content-Type": content_type, "Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def json_number():
    app_id, read_key, _ = setup()
    client = H2Client()
    sid = client.call("/substatus.v1.StatusService/GetStatus", big_number_body(app_id), read_key)
    client.wait(5)
    client.close()
    state = client.streams[sid]
    figures["grpc"] = {"ended": state["ended"] is not None, "reset": state["reset"], "grpc_status": state["headers"].get("grpc-status")}
    assert state["ended"], f"no answer within 5 s: {figures}"
    figures["grpc"]["seconds"] = round(state["ended"] - state["sent"], 3)
    assert state["headers"].get("grpc-status") == "3", state["headers"]
    text = check_short_message(state["headers"].get("grpc-message", ""), "grpc")
    figures["grpc"]["message_bytes"] = len(text.encode())
    figures["grpc"]["message"] = text

    status, _, body = connect_post("/substatus.v1.StatusService/GetStatus", big_number_body(app_id), read_key)
    error = json.loads(body)
    figures["connect"] = {"status": status, "body_bytes": len(body), "message_bytes": len(error.get("message", "").encode())}
    assert status == 400 and error["code"] == "invalid_argument", (status, body[:300])
    check_short_message(error["message"], "connect")
    assert len(body) < 4096, figures


def slot_flood():
    app_id, read_key, _ = setup()
    per_connection = int(os.environ.get("ERROR_BOUNDS_CALLS", "520"))
    budget = metrics()["substatus_grpc_calls_in_flight_limit"]
    figures["budget"] = budget
    body = big_number_body(app_id)
    started = time.monotonic()
    clients = [H2Client(), H2Client()]
    for client in clients:
        for _ in range(per_connection):
            client.call("/substatus.v1.StatusService/GetStatus", body, read_key)
            client.read(0)
    for client in clients:
        client.wait(30)
    figures["seconds"] = round(time.monotonic() - started, 2)
    states = [v for c in clients for v in c.streams.values()]
    figures["answers"] = {}
    for v in states:
        key = "open" if not v["ended"] and v["reset"] is None else ("reset %s" % v["reset"] if v["reset"] is not None else "grpc-status " + v["headers"].get("grpc-status", "?"))
        figures["answers"][key] = figures["answers"].get(key, 0) + 1
    in_flight_while_held = metrics()["substatus_grpc_calls_in_flight"]
    figures["calls_in_flight_after_answers"] = in_flight_while_held
    # Another client, on its own connection, while the flood's connections are still open.
    with grpc.insecure_channel(grpc_addr) as channel:
        try:
            stub("status_service", channel).GetStatus(pb.GetStatusRequest(app_id=app_id, user_id="someone"), metadata=auth(read_key), timeout=5)
            figures["other_client"] = "OK"
        except grpc.RpcError as e:
            figures["other_client"] = e.code().name
    for client in clients:
        client.close()
    assert figures["answers"] == {"grpc-status 3": 2 * per_connection}, figures
    assert in_flight_while_held == 0, figures
    assert figures["other_client"] == "OK", figures
    deadline = time.monotonic() + 5
    while metrics()["substatus_grpc_calls_in_flight"] > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert metrics()["substatus_grpc_calls_in_flight"] == 0, metrics()


def check_details(raw, label, total):
    from google.rpc import status_pb2, error_details_pb2
    assert len(raw) <= MAX_DETAILS, (label, len(raw))
    status = status_pb2.Status.FromString(raw)
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad), label
    note = bad.field_violations[-1]
    kept = len(bad.field_violations) - 1
    assert kept > 0, (label, kept)
    assert note.description == f"{total - kept} more field violations left out ({total} in all)", (label, note)
    for i, v in enumerate(bad.field_violations[:-1]):
        assert v.field == f"entitlements[0].product_ids[{i}]", (label, v.field)
    return {"details_bytes": len(raw), "kept": kept, "note": note.description}


def violations():
    app_id, _, admin_key = setup()
    total = 300
    products = [f"p-{i:03d}-" + "x" * 190 for i in range(total)]
    request = pb.PutEntitlementsRequest(app_id=app_id, entitlements=[pb.EntitlementDefinition(entitlement_id="pro", product_ids=products)])
    started = time.monotonic()
    with grpc.insecure_channel(grpc_addr) as channel:
        try:
            stub("admin_service", channel).PutEntitlements(request, metadata=auth(admin_key), timeout=10)
            raise AssertionError("PutEntitlements with 300 unknown products succeeded")
        except grpc.RpcError as e:
            figures["grpc"] = {"code": e.code().name, "seconds": round(time.monotonic() - started, 3)}
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), (e.details() or "")[:300])
            assert len((e.details() or "").encode()) <= MAX_MESSAGE, len(e.details().encode())
            raw = dict(e.trailing_metadata()).get("grpc-status-details-bin")
            assert raw, "no grpc-status-details-bin"
            figures["grpc"].update(check_details(raw, "grpc", total))

    # Connect (JSON) on the HTTP listener.
    body = json.dumps({"appId": app_id, "entitlements": [{"entitlementId": "pro", "productIds": products}]}).encode()
    status, _, answer = connect_post("/substatus.v1.AdminService/PutEntitlements", body, admin_key)
    error = json.loads(answer)
    figures["connect"] = {"status": status, "body_bytes": len(answer)}
    assert status == 400 and error["code"] == "invalid_argument", (status, answer[:300])
    assert len(error["message"].encode()) <= MAX_MESSAGE
    detail = error["details"][0]
    figures["connect"].update(check_details(
        status_pb2_bytes(detail["type"], detail["value"]), "connect", total))

    # gRPC-Web (binary) on the HTTP listener: the status in the head (Trailers-Only) or the body.
    framed = request.SerializeToString()
    framed = b"\x00" + len(framed).to_bytes(4, "big") + framed
    status, headers, answer = connect_post("/substatus.v1.AdminService/PutEntitlements", framed, admin_key, "application/grpc-web+proto")
    fields = {k.lower(): v for k, v in headers.items()}
    if "grpc-status" not in fields:
        i = 0
        while i + 5 <= len(answer):
            n = int.from_bytes(answer[i + 1:i + 5], "big")
            if answer[i] & 0x80:
                for line in answer[i + 5:i + 5 + n].decode().split("\r\n"):
                    if ":" in line:
                        k, v = line.split(":", 1)
                        fields[k.strip().lower()] = v.strip()
            i += 5 + n
    figures["grpc_web"] = {"status": status, "grpc_status": fields.get("grpc-status")}
    assert fields.get("grpc-status") == "3", fields.get("grpc-status")
    assert len(urllib.parse.unquote(fields.get("grpc-message", "")).encode()) <= MAX_MESSAGE
    raw = base64.b64decode(fields["grpc-status-details-bin"] + "=" * (-len(fields["grpc-status-details-bin"]) % 4))
    figures["grpc_web"].update(check_details(raw, "grpc-web", total))
    # Cut once per call, where the violations were built (three calls).
    figures["details_cut"] = metrics()['substatus_status_cut_total{part="details"}']
    assert figures["details_cut"] == 3, figures


def status_pb2_bytes(type_name, value):
    """Connect's detail (type and base64 value, a BadRequest) wrapped back into a Status."""
    from google.rpc import status_pb2
    from google.protobuf import any_pb2
    assert type_name == "google.rpc.BadRequest", type_name
    any_ = any_pb2.Any(type_url="type.googleapis.com/" + type_name, value=base64.b64decode(value + "=" * (-len(value) % 4)))
    return status_pb2.Status(code=3, details=[any_]).SerializeToString()


{"json_number": json_number, "slot_flood": slot_flood, "violations": violations}[scenario]()
print("FIGURES " + json.dumps(figures), flush=True)
print(f"PASS {scenario}", flush=True)
