"""Attacks on a running substatusd (issue 18), each bounded to a few seconds, loopback only.

usage: abuse.py SCENARIO GRPC_ADDR HTTP_ADDR PID OPERATOR_KEY PROTOS_DIR

Scenarios:
  idle_flood     600 idle HTTP/2 connections (preface and SETTINGS, then nothing) past the gRPC
                 connection cap: the process lives, burns no CPU, and a new gRPC client and
                 /healthz are served within 2 s.
  slow_http      1,000 connections sending a header line every 0.5 s, from one address and then
                 from eight (127.0.0.2-9): /healthz and a V1 notification from 127.0.0.1 are
                 answered within 2 s; the slow connections are cut at the head deadline.
  call_flood     readers that never open their flow-control window hold the budget of calls,
                 then 3,000 concurrent GetTransactionHistory calls with a READ key (ABUSE_CALLS):
                 past the budget a call gets RESOURCE_EXHAUSTED with a google.rpc.RetryInfo; RSS
                 growth stays under 300 MB, the bytes malloc has in use after the flood
                 (substatus_heap_allocated_bytes) are within 4 MB of those before it, and a
                 malloc_trim returns memory within a few seconds.
  heavy_reads    2,000 concurrent GetTransactionHistory calls (ABUSE_HEAVY_CALLS) for one user whose
                 page is ~59 KB (350 transactions, page_size 350), over eight connections (the
                 test sets the call budget above them, so that the working-set budget alone must
                 hold, whatever the call cap): every call is answered OK, or RESOURCE_EXHAUSTED
                 with a google.rpc.RetryInfo; the peak RSS growth stays under ABUSE_HEAVY_MAX_MB
                 (default 150); once the storm is over, memory returns (a trim, and the RSS back
                 within ABUSE_HEAVY_RETURN_MB, default 40, of its level before).
  hook_trickle   (issue 30, attack 1) 24 webhook receivers (6 apps x 4) answering 200 with a
                 chunked body of one byte a second, 4 users' events each: every POST ends at its
                 10 s deadline and its connection is closed, so once the 96 first attempts have
                 ended the descriptors are back (within 16 of where they were), before the first
                 retries; then 600 idle gRPC connections (open-files limit 1024): the process
                 lives and answers.
  hook_endless   (issue 30, attack 2) receivers streaming an endless chunked body and announcing a
                 1 GB Content-Length, 8 users' events each: RSS grows less than 100 MB, /healthz
                 answers within 2 s throughout, and no receiver gets more than 16 MB read from it.
Prints `PASS SCENARIO` and a `FIGURES {...}` line; an assertion fails otherwise.
"""
import asyncio, glob, importlib, json, os, socket, sys, tempfile, threading, time, urllib.error, urllib.request

import grpc, grpc_tools
from grpc_tools import protoc

scenario, grpc_addr, http_addr, pid, operator_key, protos = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
grpc_host, grpc_port = grpc_addr.rsplit(":", 1)
http_host, http_port = http_addr.rsplit(":", 1)
figures = {}


def alive():
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def cpu_seconds():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def metrics():
    with urllib.request.urlopen(f"http://{http_addr}/metrics", timeout=5) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and " " in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def timed(fn):
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def healthz():
    with urllib.request.urlopen(f"http://{http_addr}/healthz", timeout=2) as r:
        assert r.status == 200, r.status


def v1_notification():
    # An unknown app: answered 404 by the notification endpoint (what matters is that it answers).
    body = json.dumps({"notification_type": "DID_RENEW", "password": "x", "unified_receipt": {}}).encode()
    req = urllib.request.Request(f"http://{http_addr}/v1/apps/no-such-app/apple/notifications", data=body, method="POST")
    try:
        urllib.request.urlopen(req, timeout=2).read()
    except urllib.error.HTTPError as e:
        assert e.code in (400, 401, 404), e.code


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


def health_check(timeout=2):
    from grpc.health.v1 import health_pb2, health_pb2_grpc
    with grpc.insecure_channel(grpc_addr) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def idle_flood(count=600):
    load_stubs()  # for grpc.health
    cap = metrics()["substatus_grpc_connections_limit"]
    assert 0 < cap < count, f"the cap {cap} must be below the flood"
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect((grpc_host, int(grpc_port)))
            s.sendall(PREFACE)
            socks.append(s)
        except OSError:
            s.close()
    figures["connected"] = len(socks)
    time.sleep(0.5)
    before = cpu_seconds()
    time.sleep(3)
    figures["cpu_seconds_in_3s"] = round(cpu_seconds() - before, 3)
    assert alive(), "substatusd died"
    assert figures["cpu_seconds_in_3s"] < 0.6, f"substatusd burns CPU while flooded: {figures}"
    figures["grpc_health_s"] = round(timed(health_check), 3)
    figures["healthz_s"] = round(timed(healthz), 3)
    m = metrics()
    figures["connections_open"] = m["substatus_grpc_connections_open"]
    figures["evicted"] = m["substatus_grpc_connections_evicted_total"]
    assert m["substatus_grpc_connections_open"] <= cap, m
    assert m["substatus_grpc_connections_evicted_total"] > 0, m
    for s in socks:
        s.close()
    assert alive(), "substatusd died"


def slow_http(count=1000):
    def attack(addresses, seconds=4.0):
        socks = []
        for i in range(count):
            s = socket.socket()
            s.settimeout(0.2)
            try:
                s.bind((addresses[i % len(addresses)], 0))
                s.connect((http_host, int(http_port)))
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            except OSError:
                s.close()
        started = time.monotonic()
        probes = {"healthz": [], "notification": []}
        while time.monotonic() - started < seconds:
            for s in socks:
                try:
                    s.send(b"X-Slow: 1\r\n")
                except OSError:
                    pass
            probes["healthz"].append(timed(healthz))
            probes["notification"].append(timed(v1_notification))
            time.sleep(0.5)
        # Refused over the per-address cap, or cut at the head deadline: they read an end (or a reset).
        cut = 0
        for s in socks:
            s.settimeout(0.01)
            try:
                if s.recv(1024) == b"":
                    cut += 1
            except socket.timeout:
                pass
            except OSError:
                cut += 1
            s.close()
        return len(socks), cut, max(probes["healthz"]), max(probes["notification"])

    for name, addresses in [("one_address", ["127.0.0.2"]), ("eight_addresses", [f"127.0.0.{i}" for i in range(2, 10)])]:
        connected, cut, healthz_s, notification_s = attack(addresses)
        figures[name] = {"connected": connected, "closed_by_server": cut, "healthz_max_s": round(healthz_s, 3),
                         "notification_max_s": round(notification_s, 3)}
        assert alive(), "substatusd died"
        assert healthz_s < 2 and notification_s < 2, figures
        assert cut == connected, f"slow connections outlived the head deadline: {figures}"
    m = metrics()
    figures["head_timeouts"] = m["substatus_http_request_head_timeouts_total"]
    assert m["substatus_http_request_head_timeouts_total"] > 0, m


def call_flood(calls=int(os.environ.get("ABUSE_CALLS", "3000"))):
    import h2.config, h2.connection, h2.events, h2.settings
    pb, stub = load_stubs()
    from google.rpc import status_pb2, error_details_pb2
    auth = lambda key: (("authorization", "Bearer " + key),)
    with grpc.insecure_channel(grpc_addr) as channel:
        admin_key = stub("tenant_service", channel).CreateTenant(pb.CreateTenantRequest(name="abuse"), metadata=auth(operator_key)).admin_key
        admin = stub("admin_service", channel)
        app_id = admin.RegisterApp(pb.RegisterAppRequest(bundle_id="com.example.abuse"), metadata=auth(admin_key)).app.app_id
        read_key = admin.CreateApiKey(pb.CreateApiKeyRequest(role=pb.API_KEY_ROLE_READ, app_ids=[app_id]), metadata=auth(admin_key)).key
        ingest_key = admin.CreateApiKey(pb.CreateApiKeyRequest(role=pb.API_KEY_ROLE_INGEST, app_ids=[app_id]), metadata=auth(admin_key)).key
        day, t0 = 86400000, 1711324800000
        batch = [pb.Transaction(transaction_id=f"t-{i}", original_transaction_id="t-0", product_id="pro.monthly",
                                purchase_date_ms=t0 + i * day, expires_date_ms=t0 + (i + 30) * day) for i in range(100)]
        stub("ingest_service", channel).ImportTransactions(pb.ImportTransactionsRequest(app_id=app_id, user_id="victim", transactions=batch), metadata=auth(ingest_key))
    request = pb.GetTransactionHistoryRequest(app_id=app_id, user_id="victim", page_size=100).SerializeToString()
    budget = metrics()["substatus_grpc_calls_in_flight_limit"]
    assert budget > 0
    time.sleep(0.5)
    rss_before = rss_mb()
    m = metrics()
    heap_before, trims_before = m["substatus_heap_allocated_bytes"], m["substatus_memory_trims_total"]
    trimmed_before = m["substatus_memory_trimmed_bytes_total"]

    # Stalled readers: two connections that never open their window hold budget/2 + 50 calls each.
    stalled = []
    for _ in range(2):
        s = socket.create_connection((grpc_host, int(grpc_port)), timeout=5)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        for _ in range(int(budget) // 2 + 50):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", "/substatus.v1.StatusService/GetTransactionHistory"),
                                    (":authority", grpc_addr), ("content-type", "application/grpc"), ("te", "trailers"),
                                    ("authorization", "Bearer " + read_key)])
            conn.send_data(sid, b"\x00" + len(request).to_bytes(4, "big") + request, end_stream=True)
        s.sendall(conn.data_to_send())
        stalled.append(s)

    deadline = time.monotonic() + 10
    while metrics()["substatus_grpc_calls_in_flight"] < budget and time.monotonic() < deadline:
        time.sleep(0.1)
    figures["calls_in_flight_stalled"] = metrics()["substatus_grpc_calls_in_flight"]
    assert figures["calls_in_flight_stalled"] >= budget, figures

    # Over the budget: RESOURCE_EXHAUSTED with RetryInfo.
    with grpc.insecure_channel(grpc_addr) as channel:
        try:
            stub("status_service", channel).GetTransactionHistory(pb.GetTransactionHistoryRequest(app_id=app_id, user_id="victim"), metadata=auth(read_key), timeout=5)
            raise AssertionError("a call over the budget succeeded")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (e.code(), e.details())
            details = dict(e.trailing_metadata()).get("grpc-status-details-bin")
            assert details, "no grpc-status-details-bin"
            retry = error_details_pb2.RetryInfo()
            assert status_pb2.Status.FromString(details).details[0].Unpack(retry)
            figures["retry_delay_ms"] = retry.retry_delay.ToMilliseconds()
            assert figures["retry_delay_ms"] > 0

    # The stalled readers go; the budget comes back.
    for s in stalled:
        s.close()
    deadline = time.monotonic() + 5
    while metrics()["substatus_grpc_calls_in_flight"] > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert metrics()["substatus_grpc_calls_in_flight"] == 0, metrics()
    assert metrics()["substatus_grpc_reply_bytes_in_flight"] == 0, metrics()

    # The flood: thousands of concurrent calls over four connections, answered or refused.
    peak = [rss_before]
    sampling = [True]
    def sample():
        while sampling[0]:
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.05)
    sampler = threading.Thread(target=sample)
    sampler.start()

    async def flood():
        channels = [grpc.aio.insecure_channel(grpc_addr, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(4)]
        stubs = [stub("status_service", c) for c in channels]
        req = pb.GetTransactionHistoryRequest(app_id=app_id, user_id="victim", page_size=100)
        async def one(i):
            try:
                await stubs[i % 4].GetTransactionHistory(req, metadata=auth(read_key), timeout=20)
                return "OK"
            except grpc.aio.AioRpcError as e:
                return e.code().name
        codes = await asyncio.gather(*(one(i) for i in range(calls)))
        for c in channels:
            await c.close()
        return codes
    codes = asyncio.run(flood())
    figures["flood_codes"] = {c: codes.count(c) for c in set(codes)}
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, figures
    assert codes.count("OK") > 0, figures

    sampling[0] = False
    sampler.join()
    with grpc.insecure_channel(grpc_addr) as channel:
        stub("status_service", channel).GetTransactionHistory(pb.GetTransactionHistoryRequest(app_id=app_id, user_id="victim"), metadata=auth(read_key), timeout=5)
    # What the flood leaves behind is measured as malloc's bytes in use (mallinfo2, /metrics), not as
    # RSS: RSS after the flood is 50-67 MB against 47-55 before, depending on when malloc_trim ran,
    # because the arenas keep 20-28 MB of freed memory (substatus_heap_free_bytes). Four floods in
    # one process (2026-12-02, load 13 on 2 cores) left 3.66, 3.81, 3.90, 3.96 MB in use (3.03 at
    # start, each flood with its own tenant and app): no growth per flood beyond caches filling.
    # Measured here, from before the stalled readers to after the flood: +0.28, +0.14, +0.04 MB in
    # three floods in a row. A leak of 1.4 KB or more per call (3,000 calls) fails the 4 MB bound.
    # Memory returns: once the load has fallen, malloc_trim hands freed pages back (MemoryReturn,
    # every 0.5 s here); the flood's RSS growth (about 25 MB) is past its 8 MB threshold.
    deadline = time.monotonic() + 6
    while metrics()["substatus_memory_trims_total"] <= trims_before and time.monotonic() < deadline:
        time.sleep(0.25)
    m = metrics()
    heap_after = m["substatus_heap_allocated_bytes"]
    figures["rss_mb"] = {"before": round(rss_before, 1), "peak": round(peak[0], 1), "after": round(rss_mb(), 1)}
    figures["heap_allocated_mb"] = {"before": round(heap_before / 2**20, 2), "after": round(heap_after / 2**20, 2)}
    figures["trims"] = m["substatus_memory_trims_total"] - trims_before
    figures["trimmed_mb"] = round((m["substatus_memory_trimmed_bytes_total"] - trimmed_before) / 2**20, 1)
    assert alive(), "substatusd died"
    assert peak[0] - rss_before < 300, figures
    assert heap_after - heap_before < 4 * 2**20, figures
    assert figures["trims"] >= 1, figures


def descriptors():
    return len(os.listdir(f"/proc/{pid}/fd"))


class Receivers:
    """HTTP/1.1 webhook receivers on 127.0.0.1, port 0, each connection served by a thread.

    `behaviour(conn, path)` answers one request; the bytes each connection got sent out are kept
    (the most in `max_sent`)."""

    def __init__(self, count, behaviour):
        self.behaviour = behaviour
        self.ports = []
        self.connections = 0
        self.max_sent = 0
        self.lock = threading.Lock()
        for _ in range(count):
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(256)
            self.ports.append(listener.getsockname()[1])
            threading.Thread(target=self.accept, args=(listener,), daemon=True).start()

    def accept(self, listener):
        while True:
            conn, _ = listener.accept()
            with self.lock:
                self.connections += 1
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        sent = [0]

        def send(data):
            conn.sendall(data)
            sent[0] += len(data)
            with self.lock:
                self.max_sent = max(self.max_sent, sent[0])

        try:
            f = conn.makefile("rb")
            while True:
                line = f.readline()
                if not line:
                    return
                path = line.split(b" ")[1].decode()
                length = 0
                while True:
                    h = f.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    if h.lower().startswith(b"content-length:"):
                        length = int(h.split(b":")[1])
                f.read(length)
                self.behaviour(send, path)
        except OSError:
            pass
        finally:
            with self.lock:
                self.max_sent = max(self.max_sent, sent[0])
            conn.close()


def trickle(send, path):
    send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    while True:
        send(b"1\r\nx\r\n")
        time.sleep(1)


def endless(send, path):
    if path.endswith("/huge"):
        send(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
        chunk = b"z" * 65536
    else:
        send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n" % 65536 + b"y" * 65536 + b"\r\n"
    while True:
        send(chunk)


def webhooks_with_events(urls_per_app, users):
    """A tenant, one app per list of URLs with a webhook for each URL, and `users` users' purchases
    in each app (events to deliver to every webhook of the app)."""
    pb, stub = load_stubs()
    auth = lambda key: (("authorization", "Bearer " + key),)
    day, t0 = 86400000, int(time.time() * 1000) - 40 * 86400000
    with grpc.insecure_channel(grpc_addr) as channel:
        admin_key = stub("tenant_service", channel).CreateTenant(pb.CreateTenantRequest(name="hooks"), metadata=auth(operator_key)).admin_key
        admin, events, ingest = stub("admin_service", channel), stub("event_service", channel), stub("ingest_service", channel)
        for a, urls in enumerate(urls_per_app):
            app_id = admin.RegisterApp(pb.RegisterAppRequest(bundle_id=f"com.example.hooks{a}"), metadata=auth(admin_key)).app.app_id
            admin.PutProducts(pb.PutProductsRequest(app_id=app_id, products=[pb.Product(
                product_id="pro.monthly", type=pb.PRODUCT_TYPE_AUTO_RENEWABLE, subscription_group_id="pro")]), metadata=auth(admin_key))
            for url in urls:
                events.CreateWebhook(pb.CreateWebhookRequest(app_id=app_id, url=url), metadata=auth(admin_key))
            for u in range(users):
                batch = [pb.Transaction(transaction_id=f"t-{a}-{u}-{i}", original_transaction_id=f"t-{a}-{u}-0", product_id="pro.monthly",
                                        type=pb.PRODUCT_TYPE_AUTO_RENEWABLE, subscription_group_id="pro", environment=pb.ENVIRONMENT_PRODUCTION,
                                        purchase_date_ms=t0 + i * 30 * day, original_purchase_date_ms=t0, signed_date_ms=t0 + i * 30 * day,
                                        expires_date_ms=t0 + (i + 1) * 30 * day) for i in range(2)]
                ingest.ImportTransactions(pb.ImportTransactionsRequest(app_id=app_id, user_id=f"user-{u}", transactions=batch), metadata=auth(admin_key))
            listed = events.ListEvents(pb.ListEventsRequest(app_id=app_id, limit=1000), metadata=auth(admin_key)).events
            assert len(listed) >= users, f"no events to deliver: {len(listed)}"


def hook_trickle():
    receivers = Receivers(24, trickle)
    baseline = descriptors()
    figures["descriptors_before"] = baseline
    started = time.monotonic()
    webhooks_with_events([[f"http://127.0.0.1:{p}/hook" for p in receivers.ports[i:i + 4]] for i in range(0, 24, 4)], users=4)
    peak = baseline
    # 96 first attempts (24 webhooks x 4 users), 64 at once: the first wave ends at 10 s, the rest
    # at about 20 s; the first retries come 30 s (-20 %) after a failure. Wait until every first
    # attempt has started and none is in flight (at most 45 s).
    def webhook_metric(name, outcome=None):
        return sum(v for k, v in metrics().items() if k.startswith(name + '{pool="webhooks"')
                   and (outcome is None or f'outcome="{outcome}"' in k))
    while time.monotonic() - started < 45:
        peak = max(peak, descriptors())
        if receivers.connections >= 96 and webhook_metric("substatus_outbound_requests_in_flight") == 0:
            break
        time.sleep(0.5)
    time.sleep(0.5)
    figures["seconds_until_all_ended"] = round(time.monotonic() - started, 1)
    figures["outbound"] = {k.split("{", 1)[1]: v for k, v in metrics().items() if k.startswith("substatus_outbound_requests") and 'pool="webhooks"' in k and v}
    figures["receiver_connections"] = receivers.connections
    figures["descriptors_peak"] = peak
    figures["descriptors_after_deadline"] = descriptors()
    assert alive(), "substatusd died"
    assert receivers.connections >= 48, f"the POSTs did not start: {figures}"
    assert figures["descriptors_after_deadline"] - baseline < 16, f"connections outlived their deadline: {figures}"
    # Ended at their deadline: by the client's (timeout), or by the dispatcher's just after it
    # (cancelled) when the client's loop was not scheduled in time.
    figures["outbound_ended_at_deadline"] = (webhook_metric("substatus_outbound_requests_total", "timeout")
                                             + webhook_metric("substatus_outbound_requests_total", "cancelled"))
    assert figures["outbound_ended_at_deadline"] >= 96, figures
    # 600 idle HTTP/2 connections, below the gRPC cap (672 with 1,024 descriptors): with the
    # receivers' connections leaked they would run the process out of descriptors.
    socks = []
    for _ in range(600):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect((grpc_host, int(grpc_port)))
            s.sendall(PREFACE)
            socks.append(s)
        except OSError:
            s.close()
    figures["idle_grpc_connections"] = len(socks)
    time.sleep(1)
    assert alive(), "substatusd died"
    figures["grpc_health_s"] = round(timed(health_check), 3)
    figures["healthz_s"] = round(timed(healthz), 3)
    figures["descriptors_flooded"] = descriptors()
    for s in socks:
        s.close()
    assert alive(), "substatusd died"


def hook_endless():
    receivers = Receivers(1, endless)
    port = receivers.ports[0]
    time.sleep(0.5)
    rss_before = rss_mb()
    webhooks_with_events([[f"http://127.0.0.1:{port}/endless", f"http://127.0.0.1:{port}/huge"]], users=8)
    started = time.monotonic()
    peak, slowest = rss_before, 0.0
    while time.monotonic() - started < 12:
        peak = max(peak, rss_mb())
        try:
            slowest = max(slowest, timed(healthz))
        except OSError:
            slowest = 99.0  # no answer within its 2 s
        time.sleep(0.25)
    figures["rss_mb"] = {"before": round(rss_before, 1), "peak": round(peak, 1), "after": round(rss_mb(), 1)}
    figures["healthz_max_s"] = round(slowest, 3)
    figures["receiver_connections"] = receivers.connections
    figures["most_read_from_one_connection_mb"] = round(receivers.max_sent / 2**20, 1)
    assert alive(), "substatusd died"
    assert receivers.connections >= 2, f"the POSTs did not start: {figures}"
    assert slowest < 2, figures
    assert peak - rss_before < 100, f"the answers' bodies are being read: {figures}"
    assert receivers.max_sent < 16 * 2**20, f"a body was read past its limit: {figures}"


def heavy_reads(calls=int(os.environ.get("ABUSE_HEAVY_CALLS", "2000")), transactions=350,
                max_growth_mb=float(os.environ.get("ABUSE_HEAVY_MAX_MB", "150")),
                return_mb=float(os.environ.get("ABUSE_HEAVY_RETURN_MB", "40"))):
    pb, stub = load_stubs()
    from google.rpc import status_pb2, error_details_pb2
    auth = lambda key: (("authorization", "Bearer " + key),)
    with grpc.insecure_channel(grpc_addr) as channel:
        admin_key = stub("tenant_service", channel).CreateTenant(pb.CreateTenantRequest(name="heavy"), metadata=auth(operator_key)).admin_key
        admin = stub("admin_service", channel)
        app_id = admin.RegisterApp(pb.RegisterAppRequest(bundle_id="com.example.heavy"), metadata=auth(admin_key)).app.app_id
        read_key = admin.CreateApiKey(pb.CreateApiKeyRequest(role=pb.API_KEY_ROLE_READ, app_ids=[app_id]), metadata=auth(admin_key)).key
        ingest_key = admin.CreateApiKey(pb.CreateApiKeyRequest(role=pb.API_KEY_ROLE_INGEST, app_ids=[app_id]), metadata=auth(admin_key)).key
        day, t0 = 86400000, 1500000000000
        batch = [pb.Transaction(transaction_id=f"2000000{i:09d}", original_transaction_id="2000000000000000",
                                product_id="com.example.heavy.pro.monthly", purchase_date_ms=t0 + i * day,
                                original_purchase_date_ms=t0, expires_date_ms=t0 + (i + 30) * day,
                                web_order_line_item_id=f"3000000{i:09d}", currency="EUR", price_milliunits=9990,
                                app_account_token="6f2c3b1e-8a4d-4c7e-9b1a-2d3e4f5a6b7c")
                 for i in range(transactions)]
        stub("ingest_service", channel).ImportTransactions(pb.ImportTransactionsRequest(app_id=app_id, user_id="heavy", transactions=batch), metadata=auth(ingest_key))
        reply = stub("status_service", channel).GetTransactionHistory(
            pb.GetTransactionHistoryRequest(app_id=app_id, user_id="heavy", page_size=transactions), metadata=auth(read_key), timeout=10)
        figures["reply_bytes"] = reply.ByteSize()
        assert len(reply.transactions) == transactions, len(reply.transactions)
    m = metrics()
    figures["call_budget"] = m["substatus_grpc_calls_in_flight_limit"]
    trims_before = m["substatus_memory_trims_total"]
    time.sleep(1.0)
    rss_before = rss_mb()
    peak = [rss_before]
    sampling = [True]
    def sample():
        while sampling[0]:
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.02)
    sampler = threading.Thread(target=sample)
    sampler.start()

    async def flood():
        channels = [grpc.aio.insecure_channel(grpc_addr, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(8)]
        stubs = [stub("status_service", c) for c in channels]
        req = pb.GetTransactionHistoryRequest(app_id=app_id, user_id="heavy", page_size=transactions)
        async def one(i):
            try:
                await stubs[i % len(stubs)].GetTransactionHistory(req, metadata=auth(read_key), timeout=30)
                return "OK"
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    details = dict(e.trailing_metadata() or ()).get("grpc-status-details-bin")
                    if not details:
                        return "RESOURCE_EXHAUSTED without details"
                    retry = error_details_pb2.RetryInfo()
                    if not status_pb2.Status.FromString(details).details[0].Unpack(retry) or retry.retry_delay.ToMilliseconds() <= 0:
                        return "RESOURCE_EXHAUSTED without RetryInfo"
                return e.code().name
        started = time.monotonic()
        codes = await asyncio.gather(*(one(i) for i in range(calls)))
        figures["flood_seconds"] = round(time.monotonic() - started, 2)
        for c in channels:
            await c.close()
        return codes
    codes = asyncio.run(flood())
    sampling[0] = False
    sampler.join()
    figures["flood_codes"] = {c: codes.count(c) for c in set(codes)}
    # The bound is half the 300 MB, so that the test tells the budget from the cheaper
    # first page alone: measured on the debug build (2026-12-05, 2-core machine under load), the
    # peak grew by 32 MB with the working-set budget, by 249 MB with the budget off
    # (--max-working-set-bytes 0), and by 484 MB on main before it (whole histories decoded for
    # every first page, 289 calls past their 30 s deadline).
    rss_peak = peak[0]
    figures["rss_mb"] = {"before": round(rss_before, 1), "peak": round(rss_peak, 1)}
    m = metrics()
    figures["working_set"] = {k.replace("substatus_working_set_", ""): v for k, v in m.items() if k.startswith("substatus_working_set_")}
    assert alive(), "substatusd died"
    assert rss_peak - rss_before < max_growth_mb, figures
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, figures
    assert codes.count("OK") > 0, figures
    # Memory returns: MemoryReturn trims once the storm has passed.
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and (metrics()["substatus_memory_trims_total"] <= trims_before or rss_mb() - rss_before > return_mb):
        time.sleep(0.25)
    figures["rss_mb"] = {"before": round(rss_before, 1), "peak": round(rss_peak, 1), "after": round(rss_mb(), 1)}
    figures["trims"] = metrics()["substatus_memory_trims_total"] - trims_before
    assert figures["trims"] >= 1, figures
    assert figures["rss_mb"]["after"] - rss_before < return_mb, figures


{"idle_flood": idle_flood, "slow_http": slow_http, "call_flood": call_flood, "heavy_reads": heavy_reads,
 "hook_trickle": hook_trickle, "hook_endless": hook_endless}[scenario]()
print("FIGURES " + json.dumps(figures), flush=True)
print(f"PASS {scenario}", flush=True)
