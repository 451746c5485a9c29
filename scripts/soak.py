"""Soak test of substatusd (driven by scripts/soak; see RELIABILITY.md).

usage: soak.py SUBSTATUSD SECONDS CLIENTS WORKDIR [ABUSE]

Starts substatusd on free ports with a fresh data directory, under an open-files limit of 1024
(prlimit), sets up a tenant, an app, its secret and catalog, then runs CLIENTS processes of mixed
load for SECONDS: CheckEligibility, GetStatus, GetTransactionHistory, ImportTransactions, V1
notifications over HTTP, plus bad inputs, calls cancelled at a random instant and calls with
deadlines shorter than the work. Every call's status is checked against what that kind of call
may answer. With ABUSE=1 (the default) one more process is abusive next to them (see `abuser`).
The server's RSS, open descriptors and threads are sampled every 2 s. Prints a table per minute
and the verdict; exits 1 on failure.
"""
import glob, importlib, json, multiprocessing as mp, os, random, signal, socket, statistics, subprocess, sys, tempfile, time
import urllib.error, urllib.request

import grpc, grpc_tools
from grpc_tools import protoc

substatusd, seconds, clients, workdir = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
abuse = (sys.argv[5] if len(sys.argv) > 5 else "1") != "0"
OPEN_FILES = 1024
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
protos = os.path.join(root, "Protos")
fixtures = os.path.join(root, "Tests/SubstatusDaemonTests/Fixtures")

out = tempfile.mkdtemp()
files = sorted(os.path.relpath(p, protos) for p in glob.glob(os.path.join(protos, "**/*.proto"), recursive=True))
builtin = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
assert protoc.main(["protoc", f"-I{protos}", f"-I{builtin}", f"--python_out={out}", f"--grpc_python_out={out}", *files]) == 0
sys.path.insert(0, out)
grpc.__path__.append(os.path.join(out, "grpc"))
mods = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2") for f in files}
grpcmods = {f: importlib.import_module(f[:-6].replace("/", ".") + "_pb2_grpc") for f in files if "substatus/v1/" in f and "service" in f}
pb = type("pb", (), {})
for mod in mods.values():
    for name in dir(mod):
        if not name.startswith("_"):
            setattr(pb, name, getattr(mod, name))
from google.protobuf import json_format

def stubs(channel):
    s = lambda n: getattr(grpcmods[f"substatus/v1/{n}.proto"], "".join(w.title() for w in n.split("_")) + "Stub")(channel)
    return {n: s(n) for n in ["tenant_service", "admin_service", "ingest_service", "eligibility_service", "status_service"]}

def auth(key):
    return (("authorization", "Bearer " + key),)

C = grpc.StatusCode
DAY = 86400000
T0 = 1711324800000
PRODUCTS = ["premium.monthly", "premium.yearly", "pro.monthly", "lifetime", "unknown.product"]

IDS_PER_USER = 60  # bounded data: after warm-up imports update existing rows, so the store stops growing

def txn(i, user, k):
    base = T0 - 60 * DAY + k * DAY
    i %= IDS_PER_USER
    return pb.Transaction(transaction_id=f"{user}-{i}", original_transaction_id=f"{user}-0", product_id="pro.monthly",
                          purchase_date_ms=base, expires_date_ms=base + 30 * DAY, is_trial_period=(i == 0))

def v1(password, user_n, renew):
    otid = f"n{user_n}"
    info = {"quantity": "1", "product_id": "premium.monthly", "transaction_id": f"{otid}-{renew}", "original_transaction_id": otid,
            "purchase_date_ms": str(T0 + renew * DAY), "expires_date_ms": str(T0 + (renew + 30) * DAY),
            "is_trial_period": "false", "subscription_group_identifier": "20001001"}
    return {"notification_type": "DID_RENEW", "password": password, "environment": "PROD",
            "unified_receipt": {"status": 0, "environment": "Production", "latest_receipt": "eA==", "latest_receipt_info": [info],
                                "pending_renewal_info": [{"product_id": "premium.monthly", "auto_renew_product_id": "premium.monthly",
                                                          "original_transaction_id": otid, "auto_renew_status": "1"}]}}

def worker(index, grpc_addr, http_addr, app_id, keys, secret, deadline, start, results):
    rnd = random.Random(index)
    channel = grpc.insecure_channel(grpc_addr)
    st = stubs(channel)
    elig, status, ingest = st["eligibility_service"], st["status_service"], st["ingest_service"]
    stats = {}  # (minute, op) -> {"lat": [...], "codes": {code: n}, "unexpected": [...]}
    imported = 0

    def record(op, t, code, ok_codes):
        minute = int((time.time() - start) // 60)
        entry = stats.setdefault((minute, op), {"lat": [], "codes": {}, "unexpected": []})
        entry["lat"].append(t * 1000)
        entry["codes"][code] = entry["codes"].get(code, 0) + 1
        if code not in ok_codes and len(entry["unexpected"]) < 5:
            entry["unexpected"].append(code)
        if code not in ok_codes:
            entry.setdefault("unexpected_count", 0)
            entry["unexpected_count"] += 1

    def call(op, fn, ok_codes=("OK",)):
        t = time.perf_counter()
        try:
            fn()
            code = "OK"
        except grpc.FutureCancelledError:
            code = "CANCELLED"
        except grpc.RpcError as e:
            code = e.code().name
        except urllib.error.HTTPError as e:
            code = f"HTTP{e.code}"
        except Exception as e:  # a transport failure: unexpected
            code = type(e).__name__
        record(op, time.perf_counter() - t, code, ok_codes)

    def http(body, raw=None):
        data = raw if raw is not None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://{http_addr}/v1/apps/{app_id}/apple/notifications", data=data, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    read, admin, ingest_key = keys["read"], keys["admin"], keys["ingest"]
    while time.time() < deadline:
        user = f"u{index}-{rnd.randrange(200)}"
        r = rnd.random()
        if r < 0.30:
            q = [pb.EligibilityQuery(user_id=f"u{index}-{rnd.randrange(200)}", product_ids=rnd.sample(PRODUCTS, 3)) for _ in range(rnd.randrange(1, 8))]
            call("CheckEligibility", lambda: elig.CheckEligibility(pb.CheckEligibilityRequest(app_id=app_id, queries=q), metadata=auth(read), timeout=10))
        elif r < 0.50:
            call("GetStatus", lambda: status.GetStatus(pb.GetStatusRequest(app_id=app_id, user_id=user), metadata=auth(read), timeout=10))
        elif r < 0.58:
            call("GetTransactionHistory", lambda: status.GetTransactionHistory(pb.GetTransactionHistoryRequest(app_id=app_id, user_id=user, page_size=20), metadata=auth(read), timeout=10))
        elif r < 0.73:
            n = rnd.randrange(1, 20)
            batch = [txn(imported + i, user, rnd.randrange(60)) for i in range(n)]
            imported += n
            call("ImportTransactions", lambda: ingest.ImportTransactions(pb.ImportTransactionsRequest(app_id=app_id, user_id=user, transactions=batch), metadata=auth(ingest_key), timeout=10))
        elif r < 0.81:
            kind = rnd.random()
            if kind < 0.6:
                call("Notification", lambda: http(v1(secret, rnd.randrange(400), rnd.randrange(5))))
            elif kind < 0.8:
                call("Notification(bad password)", lambda: http(v1("wrong", 1, 1)), ("HTTP401",))
            else:
                call("Notification(malformed)", lambda: http(None, raw=b'{"notification_type": [1,'), ("HTTP400",))
        elif r < 0.88:
            bad = rnd.randrange(4)
            if bad == 0:
                call("bad: empty user_id", lambda: status.GetStatus(pb.GetStatusRequest(app_id=app_id, user_id=""), metadata=auth(read), timeout=10), ("INVALID_ARGUMENT",))
            elif bad == 1:
                call("bad: unknown app", lambda: status.GetStatus(pb.GetStatusRequest(app_id="app_nope", user_id=user), metadata=auth(read), timeout=10), ("NOT_FOUND", "PERMISSION_DENIED"))
            elif bad == 2:
                call("bad: wrong key", lambda: status.GetStatus(pb.GetStatusRequest(app_id=app_id, user_id=user), metadata=auth("sk_wrong"), timeout=10), ("UNAUTHENTICATED",))
            else:
                q = [pb.EligibilityQuery(user_id="u", product_ids=["p"])] * 1001
                call("bad: too many queries", lambda: elig.CheckEligibility(pb.CheckEligibilityRequest(app_id=app_id, queries=q), metadata=auth(read), timeout=10), ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"))
        elif r < 0.94:
            # A deadline shorter than (or close to) the call itself.
            t = rnd.choice([0.0002, 0.001, 0.003])
            q = [pb.EligibilityQuery(user_id=f"u{index}-{i}", product_ids=PRODUCTS) for i in range(50)]
            call("short deadline", lambda: elig.CheckEligibility(pb.CheckEligibilityRequest(app_id=app_id, queries=q), metadata=auth(read), timeout=t), ("OK", "DEADLINE_EXCEEDED"))
        else:
            # Cancelled at a random instant, possibly mid-flight.
            def cancelled():
                batch = [txn(imported + i, user, rnd.randrange(60)) for i in range(20)]
                fut = ingest.ImportTransactions.future(pb.ImportTransactionsRequest(app_id=app_id, user_id=user, transactions=batch), metadata=auth(ingest_key), timeout=10)
                time.sleep(rnd.uniform(0, 0.003))
                fut.cancel()
                fut.result()
            imported += 20
            call("cancelled", cancelled, ("OK", "CANCELLED"))
    channel.close()
    results.put({f"{m}|{op}": v for (m, op), v in stats.items()})

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"

def abuser(grpc_addr, http_addr, app_id, read_key, deadline, results):
    """Abusive clients next to the normal load, in 17-second rounds until 10 s before the end:
    400 idle HTTP/2 connections (preface and SETTINGS, then nothing), a reader that never opens
    its flow-control window holding 100 GetTransactionHistory calls, a connection announcing
    4 MiB messages on 50 streams and sending 1 KiB of each, and 100 HTTP connections trickling a
    header line a second from 127.0.0.2-5 (16 per address are admitted, and cut at the 10 s head
    deadline). Each round holds them 12 s, then closes them and rests 5 s."""
    import h2.config, h2.connection, h2.settings
    host, port = grpc_addr.rsplit(":", 1)
    http_host, http_port = http_addr.rsplit(":", 1)
    request = pb.GetTransactionHistoryRequest(app_id=app_id, user_id="u0-1", page_size=20).SerializeToString()
    headers = [(":method", "POST"), (":scheme", "http"), (":path", "/substatus.v1.StatusService/GetTransactionHistory"),
               (":authority", grpc_addr), ("content-type", "application/grpc"), ("te", "trailers"), ("authorization", "Bearer " + read_key)]
    counts = {"rounds": 0, "idle_connections": 0, "stalled_calls": 0, "partial_messages": 0, "slow_http": 0}

    def h2_socket(window=None):
        s = socket.create_connection((host, int(port)), timeout=5)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        if window is not None:
            conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        return s, conn

    while time.time() < deadline - 10:
        held = []
        try:
            for _ in range(400):
                s = socket.create_connection((host, int(port)), timeout=2)
                s.sendall(PREFACE)
                held.append(s)
                counts["idle_connections"] += 1
            s, conn = h2_socket(window=0)
            for _ in range(100):
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, headers)
                conn.send_data(sid, b"\x00" + len(request).to_bytes(4, "big") + request, end_stream=True)
                counts["stalled_calls"] += 1
            s.sendall(conn.data_to_send())
            held.append(s)
            s, conn = h2_socket()
            for _ in range(50):
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, headers)
                conn.send_data(sid, b"\x00" + (4 << 20).to_bytes(4, "big") + b"x" * 1024)
                counts["partial_messages"] += 1
            s.sendall(conn.data_to_send())
            held.append(s)
            slow = []
            for i in range(100):
                s = socket.socket()
                s.settimeout(1)
                s.bind((f"127.0.0.{2 + i % 4}", 0))
                s.connect((http_host, int(http_port)))
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                slow.append(s)
                counts["slow_http"] += 1
            held += slow
            for _ in range(12):
                for s in slow:
                    try:
                        s.send(b"X-Slow: 1\r\n")
                    except OSError:
                        pass
                time.sleep(1)
        except OSError:
            pass
        for s in held:
            s.close()
        counts["rounds"] += 1
        time.sleep(max(0, min(5, deadline - 10 - time.time())))
    results.put(counts)

def server_metrics(http_addr):
    values = {}
    try:
        with urllib.request.urlopen(f"http://{http_addr}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("substatus_grpc_") or line.startswith("substatus_http_") or line.startswith("substatus_memory_"):
                    name, value = line.rsplit(" ", 1)
                    values[name] = float(value)
    except OSError:
        pass
    return values

def data_size(directory):
    total = 0
    for dirpath, _, names in os.walk(directory):
        for n in names:
            try:
                total += os.path.getsize(os.path.join(dirpath, n))
            except OSError:
                pass
    return total / (1 << 20)

def sample(pid):
    rss = threads = None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads

def main():
    data = os.path.join(workdir, "data")
    os.makedirs(workdir, exist_ok=True)
    ready, keyfile, logpath = (os.path.join(workdir, n) for n in ["ready.json", "operator.key", "substatusd.log"])
    log = open(logpath, "wb")
    server = subprocess.Popen(["prlimit", f"--nofile={OPEN_FILES}:{OPEN_FILES}", "--", substatusd, "--data-dir", data, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                               "--ready-file", ready, "--operator-key-file", keyfile, "--refresh-interval", "0"],
                              stdout=subprocess.DEVNULL, stderr=log)
    until = time.time() + 60
    while not os.path.exists(ready):
        assert server.poll() is None and time.time() < until, "substatusd did not become ready"
        time.sleep(0.05)
    time.sleep(0.05)
    addrs = json.load(open(ready))
    operator = open(keyfile).read().strip()
    st = stubs(grpc.insecure_channel(addrs["grpc"]))
    tenant = st["tenant_service"].CreateTenant(pb.CreateTenantRequest(name="soak"), metadata=auth(operator))
    admin_key = tenant.admin_key
    app_id = st["admin_service"].RegisterApp(pb.RegisterAppRequest(bundle_id="com.example.soak"), metadata=auth(admin_key)).app.app_id
    secret = "soak-shared-secret-0123456789abcdef"
    st["admin_service"].SetSharedSecret(pb.SetSharedSecretRequest(app_id=app_id, shared_secret=secret), metadata=auth(admin_key))
    put = json_format.Parse(open(os.path.join(fixtures, "catalog.json")).read(), pb.PutProductsRequest())
    put.app_id = app_id
    st["admin_service"].PutProducts(put, metadata=auth(admin_key))
    keys = {"admin": admin_key}
    for role, name in [(pb.API_KEY_ROLE_READ, "read"), (pb.API_KEY_ROLE_INGEST, "ingest")]:
        keys[name] = st["admin_service"].CreateApiKey(pb.CreateApiKeyRequest(role=role, app_ids=[app_id]), metadata=auth(admin_key)).key

    start = time.time()
    deadline = start + seconds
    results = mp.Queue()
    procs = [mp.Process(target=worker, args=(i, addrs["grpc"], addrs["http"], app_id, keys, secret, deadline, start, results)) for i in range(clients)]
    abuse_results = mp.Queue()
    if abuse:
        procs.append(mp.Process(target=abuser, args=(addrs["grpc"], addrs["http"], app_id, keys["read"], deadline, abuse_results)))
    for p in procs:
        p.start()
    samples = []  # (t, rss MB, fds, threads)
    crashed = None
    while time.time() < deadline + 2:
        if server.poll() is not None:
            crashed = server.returncode
            break
        rss, fds, threads = sample(server.pid)
        samples.append((time.time() - start, rss, fds, threads, data_size(data)))
        time.sleep(2)
    limits = server_metrics(addrs["http"])
    abuse_counts = abuse_results.get(timeout=60) if abuse else {}
    merged = {}
    for _ in range(clients):
        try:
            part = results.get(timeout=120)
        except Exception:
            part = {}
        for k, v in part.items():
            e = merged.setdefault(k, {"lat": [], "codes": {}, "unexpected": [], "unexpected_count": 0})
            e["lat"] += v["lat"]
            e["unexpected"] += v["unexpected"]
            e["unexpected_count"] += v.get("unexpected_count", 0)
            for c, n in v["codes"].items():
                e["codes"][c] = e["codes"].get(c, 0) + n
    for p in procs:
        p.join(timeout=30)
    if crashed is None:
        server.send_signal(signal.SIGTERM)
        try:
            exit_status = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            exit_status = "did not stop within 30 s of SIGTERM"
    else:
        exit_status = crashed
    log.close()

    # Per-minute table.
    minutes = sorted({int(k.split("|")[0]) for k in merged})
    def pct(values, p):
        values = sorted(values)
        return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")
    rows = []
    print("| minute | calls | calls/s | OK | expected errors | unexpected | p50 ms | p99 ms | RSS MB (max) | fds (max) | threads (max) | data dir MB |")
    print("| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m in minutes:
        entries = [v for k, v in merged.items() if int(k.split("|")[0]) == m]
        lat = [x for v in entries for x in v["lat"]]
        codes = {}
        for v in entries:
            for c, n in v["codes"].items():
                codes[c] = codes.get(c, 0) + n
        unexpected = sum(v["unexpected_count"] for v in entries)
        ok = codes.pop("OK", 0)
        window = [s for s in samples if m * 60 <= s[0] < (m + 1) * 60]
        span = min(60, max(1, seconds - m * 60))
        row = (m + 1, len(lat), len(lat) / span, ok, ", ".join(f"{c} {n}" for c, n in sorted(codes.items())), unexpected,
               pct(lat, 50), pct(lat, 99), max((s[1] for s in window), default=0), max((s[2] for s in window), default=0),
               max((s[3] for s in window), default=0), max((s[4] for s in window), default=0))
        rows.append(row)
        print("| %d | %d | %.0f | %d | %s | %d | %.1f | %.1f | %.1f | %d | %d | %.1f |" % row)
    print()
    print("| call | count | p50 ms | p99 ms | statuses |")
    print("| --- | ---: | ---: | ---: | --- |")
    for op in sorted({k.split("|", 1)[1] for k in merged}):
        entries = [v for k, v in merged.items() if k.split("|", 1)[1] == op]
        lat = [x for v in entries for x in v["lat"]]
        codes = {}
        for v in entries:
            for c, n in v["codes"].items():
                codes[c] = codes.get(c, 0) + n
        print("| %s | %d | %.1f | %.1f | %s |" % (op, len(lat), pct(lat, 50), pct(lat, 99), ", ".join(f"{c} {n}" for c, n in sorted(codes.items()))))

    if abuse:
        print(f"\nabuse: {json.dumps(abuse_counts)}")
        print("limits: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(limits.items())))

    # Verdict.
    failures = []
    if crashed is not None:
        failures.append(f"substatusd died during the run (exit {crashed}); log: {logpath}")
    elif exit_status != 0:
        failures.append(f"substatusd exited {exit_status} on SIGTERM")
    unexpected = {k: v["unexpected"] for k, v in merged.items() if v["unexpected_count"]}
    if unexpected:
        failures.append(f"unexpected statuses: {unexpected}")
    # Flatness: after the first minute of warm-up, RSS may grow by at most 50% + 32 MB and
    # descriptors by at most 2 per client + 16 over their level at the end of that minute; with
    # the abusive clients, descriptors stay 64 below the open-files limit during their rounds and
    # come back to that bound once they have stopped (the last 10 s).
    warm = [s for s in samples if s[0] >= min(60, seconds / 3)]
    if warm:
        rss0, fd0 = warm[0][1], warm[0][2]
        if abuse:
            fd0 = min(s[2] for s in warm)
            fd_peak = max(s[2] for s in warm)
            print(f"fds during abuse max {fd_peak} (bound {OPEN_FILES - 64})")
            if fd_peak > OPEN_FILES - 64:
                failures.append(f"open descriptors reached {fd_peak}, near the limit of {OPEN_FILES}")
        rss_max = max(s[1] for s in warm)
        fd_max = max(s[2] for s in (warm if not abuse else [s for s in warm if s[0] >= seconds - 4] or warm))
        rss_bound, fd_bound = rss0 * 1.5 + 32, fd0 + 2 * clients + 16
        print(f"\nRSS after warm-up {rss0:.1f} MB, max {rss_max:.1f} MB (bound {rss_bound:.1f}); "
              f"fds after warm-up {fd0}, max {fd_max} (bound {fd_bound}); samples {len(samples)}")
        if rss_max > rss_bound:
            failures.append(f"RSS grew from {rss0:.1f} MB to {rss_max:.1f} MB (bound {rss_bound:.1f})")
        if fd_max > fd_bound:
            failures.append(f"open descriptors grew from {fd0} to {fd_max} (bound {fd_bound})")
    total = sum(len(v["lat"]) for v in merged.values())
    print(f"soak: {total} calls from {clients} clients in {seconds:.0f} s; substatusd exit status {exit_status}")
    if failures:
        print("soak: FAILED\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("soak: PASSED (no crash, only expected statuses, RSS and descriptors flat)")

if __name__ == "__main__":
    main()
