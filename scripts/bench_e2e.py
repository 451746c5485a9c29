#!/usr/bin/env python3
"""End-to-end benchmarks of substatusd (issue #11), run by scripts/bench or on their own.

A real `substatusd` (release build) serves a SQLite data directory of 1,000,000 transactions /
100,000 users / 10 apps made by `substatus-e2e-datagen` (through the store's API; cached under
.build/bench-e2e-data/, keyed by a hash of the generator's source and the schema's migrations). The server is pinned to CPU 0,
the load generator (Benchmarks/E2ELoadgen: grpc-go 1.33 and net/http, built in GOPATH mode against
Debian's packages like ../shared/peer-bench) to CPU 1. Sections:

1. CheckEligibility, 64 calls in flight: 1 and 50 users x 1 and 20 products, random users (version-4 UUID ids, as apps send) of
   random apps; calls/s, answers/s, p50/p99/p99.9, server CPU and RSS; plus 1x20 unpinned.
2. Ingest: ImportTransactions (one new user, 10 transactions + a renewal info per call; the call
   returns after the commit, synchronous=FULL).
3. Notifications: V1 DID_RENEW bodies POSTed to /v1/apps/{app}/apple/notifications (each answered
   200 after its commit).
4. The naive approach: per check a verifyReceipt round trip to appstore-sim plus local
   evaluation, next to CheckEligibility for the same users (SubmitReceipt'ed from the simulator).
5. Latency flatness: CheckEligibility 1x20 at 10k, 100k and 1M transactions.

Standalone: scripts/bench_e2e.py [--quick] [--duration S] replaces the section between the
e2e markers of BENCHMARKS.md (or appends it).
"""
import argparse, hashlib, json, os, shutil, socket, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The history cache size the "History cache" rows turn on (MiB).
HISTORY_MB = 32
BUILD = os.path.join(ROOT, ".build")
RELEASE = os.path.join(BUILD, "release")
BEGIN, END = "<!-- e2e:begin -->", "<!-- e2e:end -->"


def sh(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, text=True, **kw)


def out(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE, **kw).stdout


def build():
    for product in ["substatusd", "appstore-sim", "substatus-e2e-datagen"]:
        sh(["swift", "build", "-c", "release", "--product", product])
    return build_loadgen()


def build_loadgen():
    """Benchmarks/E2ELoadgen (every .go file of it) built in GOPATH mode into .build/e2e-loadgen;
    rebuilt when a source is newer than the binary."""
    src_dir = os.path.join(ROOT, "Benchmarks", "E2ELoadgen")
    sources = sorted(os.path.join(src_dir, n) for n in os.listdir(src_dir) if n.endswith(".go"))
    dest = os.path.join(BUILD, "e2e-loadgen")
    binary = os.path.join(dest, "bin", "e2e-loadgen")
    if not os.path.exists(binary) or os.path.getmtime(binary) < max(os.path.getmtime(s) for s in sources):
        pkg = os.path.join(dest, "src", "e2eloadgen")
        shutil.rmtree(pkg, ignore_errors=True)
        os.makedirs(pkg, exist_ok=True)
        for source in sources:
            shutil.copy(source, pkg)
        env = dict(os.environ, GO111MODULE="off", GOPATH=f"{dest}:/usr/share/gocode", GOFLAGS="", GOPROXY="off",
                   GOCACHE=os.path.join(dest, ".cache"))
        sh(["go", "build", "-trimpath", "-o", binary, "e2eloadgen"], cwd=dest, env=env)
    return binary


def build_peer(build_dir):
    """../shared/peer-bench (PEER_BENCH overrides it, e.g. from a worktree outside /work/main), copied
    into build_dir/peer-bench and built there once (its grpc-go server and load generator)."""
    peer_src = os.environ.get("PEER_BENCH", os.path.join(os.path.dirname(ROOT), "shared", "peer-bench"))
    dest = os.path.join(build_dir, "peer-bench")
    if not os.path.exists(os.path.join(dest, "bin", "server")):
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(peer_src, dest)
        for root, dirs, files in os.walk(dest):
            for n in dirs + files:
                os.chmod(os.path.join(root, n), 0o755)
        os.makedirs(os.path.join(dest, "src", "peerbench", "benchpb"), exist_ok=True)  # protoc writes here
        sh(["./build.sh"], cwd=dest, env=dict(os.environ, SKIP_PY="1"))
    return dest


def data_as_of_ms():
    """The instant the data set is built around and written at: the start of today (UTC), so that
    the summaries written with the data answer the loads, which ask at the server's clock (`-now`)
    as apps do (scripts/bench_compare.py seeds its stores the same way)."""
    now = int(time.time())
    return (now - now % 86_400) * 1000


def data_dir(users):
    """The cached data directory for `users` users (10 transactions each), built on first use."""
    # Keyed by the generator's source, the SQLite schema's migrations and the day it is built around.
    digest = hashlib.sha256()
    for part in [("Benchmarks", "E2EData", "main.swift"), ("Sources", "SubscriptionStorageSQLite", "Migrations.swift")]:
        with open(os.path.join(ROOT, *part), "rb") as f:
            digest.update(f.read())
    version = digest.hexdigest()[:12]
    as_of = data_as_of_ms()
    d = os.path.join(BUILD, "bench-e2e-data", f"{version}-u{users}-{time.strftime('%Y%m%d', time.gmtime(as_of / 1000))}")
    if not os.path.exists(os.path.join(d, "bench.json")):
        shutil.rmtree(d, ignore_errors=True)
        t0 = time.time()
        sh([os.path.join(RELEASE, "substatus-e2e-datagen"), "--dir", d, "--users", str(users), "--as-of", str(as_of)])
        print(f"built {d} in {time.time() - t0:.1f} s", flush=True)
    catch_up(d)
    return d


def transition_events(http):
    """substatusd's count of events appended by its transition scheduler (from /metrics)."""
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('substatus_events_appended_total{source="transition"}'):
                return int(float(line.split()[-1]))
    return 0


def metric_values(http):
    """substatusd's /metrics as {name: value} for the unlabelled series."""
    values = {}
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            parts = line.split()
            if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
                try:
                    values[parts[0]] = float(parts[1])
                except ValueError:
                    pass
    return values


# (label, metric, scale): what the RSS is made of, read from /metrics after the CheckEligibility runs.
MEMORY_PARTS = [
    ("SQLite heap (page caches of every connection, schemas, statements)", "substatus_sqlite_memory_bytes", 1 / 2**20),
    ("user-key cache (users whose internal key is held; entries, not MB)", "substatus_user_key_cache_entries", 1),
    ("history cache (estimated)", "substatus_history_cache_bytes", 1 / 2**20),
    ("malloc: allocated and not freed (everything above included)", "substatus_heap_allocated_bytes", 1 / 2**20),
    ("malloc: freed, kept in its arenas", "substatus_heap_free_bytes", 1 / 2**20),
]


def catch_up(d):
    """Brings the cached store's event log up to date once: the generator writes histories at past
    instants, so a fresh substatusd finds the time transitions of every user due and its scheduler
    appends them on the pinned core while the loads run (tens of thousands of events in the first
    seconds), which the CheckEligibility rows would measure. Runs substatusd on the cache itself
    until its scheduler has appended nothing for 6 s, once per cached store (a marker file)."""
    marker = os.path.join(d, "caught-up")
    if os.path.exists(marker):
        return
    work = tempfile.mkdtemp(prefix="bench-e2e-catchup-")
    ready = os.path.join(work, "ready.json")
    cmd = [os.path.join(RELEASE, "substatusd"), "--data-dir", d, "--grpc-listen", "127.0.0.1:0",
           "--http-listen", "127.0.0.1:0", "--ready-file", ready, "--operator-key-file",
           os.path.join(work, "operator.key"), "--refresh-interval", "0"]
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        http = wait_file(ready, proc)["http"]
        t0, last, quiet = time.time(), -1, 0
        while quiet < 3:
            time.sleep(2)
            n = transition_events(http)
            quiet = quiet + 1 if n == last else 0
            last = n
        print(f"caught up {d}: {last} transition events in {time.time() - t0:.0f} s", flush=True)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    open(marker, "w").close()


def machine_load():
    """The 1-minute load average and (busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/loadavg") as f:
        load1 = float(f.read().split()[0])
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return load1, (sum(v) - idle, sum(v))


def wait_file(path, proc, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"{path} never appeared")


class Server:
    """substatusd on a copy of a cached data directory, pinned to `cpus` (None: not pinned). Its gRPC
    event loops default to one per CPU it may run on, so pinned to one CPU it runs one loop."""

    def __init__(self, cached, work, sim=None, cpus="0", extra=(), binary=None):
        self.dir = os.path.join(work, "data")
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.copytree(cached, self.dir)
        ready = os.path.join(work, "ready.json")
        if os.path.exists(ready):
            os.remove(ready)
        cmd = (["taskset", "-c", cpus] if cpus else []) + [binary or os.path.join(RELEASE, "substatusd"), "--data-dir", self.dir,
               "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--ready-file", ready,
               "--operator-key-file", os.path.join(work, "operator.key"), "--refresh-interval", "0",
               # The load generator is one address with 64 connections in flight: above the default
               # per-address HTTP cap (16), which would close its notification connections.
               "--http-max-connections-per-address", "256", *extra]
        if sim:
            cmd += ["--verify-receipt-production-url", f"http://{sim}/production/verifyReceipt",
                    "--verify-receipt-sandbox-url", f"http://{sim}/sandbox/verifyReceipt"]
        print("+", " ".join(cmd), flush=True)
        # The access log (one JSON line per call) is written, as in production, to a discarded stderr.
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = wait_file(ready, self.proc)
        self.grpc, self.http, self.pid = r["grpc"], r["http"], self.proc.pid
        self.spec = os.path.join(self.dir, "bench.json")

    def rss_mb(self):
        for line in open(f"/proc/{self.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


PROFILE_CATEGORIES = [
    # (label, substrings of a frame's symbol); a sample counts for the category of its innermost
    # frame that matches one, so runtime work (retain/release, malloc) counts where it was done.
    ("SQLite: page reads (pread system calls, kernel page cache copies)", ["pread"]),
    ("SQLite: file locks of read transactions (fcntl)", ["fcntl"]),
    ("SQLite: the engine (statement steps, B-tree seeks)", ["sqlite3"]),
    ("store: decoding stored transactions and renewal infos", ["PayloadCodec", "BinaryReader"]),
    ("store: rows to values, user key lookup, sorting", ["SubscriptionStorageSQLite"]),
    ("domain: copying and freeing transactions", ["TransactionVw", "TransactionVWO", "RenewalInfoVw", "RenewalInfoVWO"]),
    ("domain: evaluation and eligibility answers", ["SubscriptionDomain"]),
    ("protobuf: encoding the response (protobuf-c)", ["6encode", "CArena", "CMessageWriter", "protobuf_c_message_pack", "get_packed_size"]),
    ("protobuf: decoding the request (protobuf-c)", ["6decode", "CMessageReader", "protobuf_c_message_unpack", "free_unpacked"]),
    ("access log line and metrics", ["AccessLogInterceptor", "JSONLine", "SubstatusJSON", "BufferedLineWriter", "ServiceMetrics"]),
    ("API key check and rate limit", ["AuthInterceptor", "lookUpKey", "SHA256", "RateLimiter"]),
    ("CheckEligibility handler: request checks, response building", ["SubstatusService"]),
    ("RPC dispatch and call context (RPCCore)", ["RPCCore"]),
    ("TCP send and receive (kernel loopback)", ["tcp_", "sendto", "recvfrom", "__send", "__libc_recv", "sock_"]),
    ("HTTP/2 framing and headers (nghttp2, transport)", ["nghttp2", "RPCHTTP2Transport"]),
    ("thread wake-ups and waits (epoll, futex, scheduler)", ["epoll", "futex", "schedule", "eventfd"]),
]


def profile(pid, seconds, work):
    """perf record (cpu-clock, DWARF call graphs) of the server for `seconds`; returns
    [(share, label)] or None when perf cannot record here."""
    data = os.path.join(work, "perf.data")
    try:
        subprocess.run(["perf", "record", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,16384", "-p", str(pid),
                        "-o", data, "--", "sleep", str(seconds)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        text = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym"], check=True, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    other = "Swift runtime, malloc (no component frame)"
    counts = {label: 0 for label, _ in PROFILE_CATEGORIES}
    counts[other] = 0
    total = 0
    for block in text.split("\n\n"):
        lines = [l.strip() for l in block.splitlines()[1:] if l.strip()]
        if not lines:
            continue
        total += 1
        label = other
        for frame in (l.split(None, 1)[1] if len(l.split(None, 1)) > 1 else "" for l in lines):
            match = next((name for name, keys in PROFILE_CATEGORIES if any(k in frame for k in keys)), None)
            if match:
                label = match
                break
        counts[label] += 1
    if total == 0:
        return None
    return sorted(((100 * n / total, label) for label, n in counts.items() if n), reverse=True)


# (label, the load generator's -protocol): CheckEligibility 1 x 20 beside gRPC, same server, same users.
PROTOCOLS = [
    ("Connect binary (`application/proto`), HTTP/2", "connect-proto"),
    ("Connect JSON (`application/json`), HTTP/2", "connect-json"),
    ("gRPC-Web (`application/grpc-web+proto`), HTTP/2", "grpc-web"),
    ("Connect JSON (`application/json`), HTTP/1.1 listener", "connect-json-h1"),
    ("Connect binary (`application/proto`), HTTP/1.1 listener", "connect-proto-h1"),
]


def load(loadgen, args, *flags, cpu="1"):
    cmd = (["taskset", "-c", cpu] if cpu else []) + [loadgen] + list(flags)
    text = out(cmd)
    print(text.strip().splitlines()[-2], flush=True)
    r = json.loads(text.strip().splitlines()[-1].split(" ", 1)[1])
    if r.get("errors"):
        raise RuntimeError(f"{' '.join(flags)}: {r['errors']} errors, first: {r.get('first_error')}")
    return r


def load_together(loadgen, args, *flag_lists, cpu="1"):
    """Runs a load generator per flag list at the same time; their results, in order."""
    procs = [subprocess.Popen((["taskset", "-c", cpu] if cpu else []) + [loadgen] + list(flags),
                              stdout=subprocess.PIPE, text=True) for flags in flag_lists]
    results = []
    for flags, proc in zip(flag_lists, procs):
        text, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(flags)}: exit {proc.returncode}")
        print(text.strip().splitlines()[-2], flush=True)
        r = json.loads(text.strip().splitlines()[-1].split(" ", 1)[1])
        if r.get("errors"):
            raise RuntimeError(f"{' '.join(flags)}: {r['errors']} errors, first: {r.get('first_error')}")
        # The server's CPU is shared by both loads: no per-call figure for one of them.
        r["calls_per_srv_cpu_s"] = None
        results.append(r)
    return results


def timing(args):
    return ["-warmup", f"{args.e2e_warmup}s", "-duration", f"{args.e2e_duration}s"]


def naive_setup(sim_addr, spec, users, work):
    """Registers app-naive's catalog in appstore-sim, creates `users` production users who buy a
    monthly subscription (two thirds with the free trial) 150 days before the data set's as_of,
    lets them renew, and writes their receipts as JSON lines."""
    naive = next(a for a in spec["apps_detail"] if a["app_id"] == "app-naive")

    def call(method, path, body=None):
        req = urllib.request.Request(f"http://{sim_addr}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read() or b"{}")

    products = []
    for p in naive["products"]:
        kind = {"AUTO_RENEWABLE": "auto_renewable", "NON_RENEWING": "non_renewing", "NON_CONSUMABLE": "non_consumable"}[p["type"]]
        o = {"product_id": p["product_id"], "type": kind}
        if kind == "auto_renewable":
            o.update(subscription_group_id=p["subscription_group_id"], duration=p["duration"])
            if p["intro"]:
                o["introductory_offer"] = {"type": "free_trial", "duration": "P1W"}
        elif "duration" in p:
            o["duration"] = p["duration"]
        products.append(o)
    call("POST", "/control/apps", {"bundle_id": naive["bundle_id"], "shared_secret": naive["shared_secret"], "products": products})
    monthly = [p["product_id"] for p in naive["products"] if p["product_id"].endswith(".monthly")]
    lifetime = next(p["product_id"] for p in naive["products"] if p["product_id"].endswith(".lifetime"))
    receipts = {}
    for k in range(users):
        uid = f"naive-{k}"
        call("POST", "/control/users", {"user_id": uid, "environment": "production"})
        base = f"/control/apps/{naive['bundle_id']}/users/{uid}"
        body = {"product_id": monthly[k % len(monthly)]}
        if k % 3:
            body["offer"] = {"type": "introductory"}
        receipts[uid] = call("POST", base + "/purchase", body)["receipt"]
        if k % 5 == 0:
            receipts[uid] = call("POST", base + "/purchase", {"product_id": lifetime})["receipt"]
    call("POST", "/control/clock/set", {"now_ms": spec["as_of_ms"]})
    path = os.path.join(work, "naive-users.jsonl")
    with open(path, "w") as f:
        for uid, receipt in receipts.items():
            f.write(json.dumps({"user_id": uid, "receipt": receipt}) + "\n")
    return path


def run(args):
    """Runs every section; returns the markdown lines for BENCHMARKS.md."""
    os.chdir(ROOT)
    loadgen = build()
    main_users = 10_000 if args.quick else 100_000
    sizes = [1_000, 10_000] + ([] if args.quick else [100_000])
    cached = {u: data_dir(u) for u in sizes}
    work = tempfile.mkdtemp(dir=BUILD, prefix="bench-e2e-")
    t_start = time.time()
    load_start, busy_start = machine_load()
    rows, phases, flat, protocol_rows, history_rows = [], [], [], [], []
    memory_parts = {}
    sim = None
    try:
        # The App Store simulator, its clock frozen at the data set's as_of (moved by naive_setup).
        spec = json.load(open(os.path.join(cached[main_users], "bench.json")))
        sim_ready = os.path.join(work, "sim.json")
        sim = subprocess.Popen(["taskset", "-c", "0", os.path.join(RELEASE, "appstore-sim"), "--listen", "127.0.0.1:0",
                                "--ready-file", sim_ready, "--time-scale", "0",
                                "--start-ms", str(spec["as_of_ms"] - 150 * 86_400_000)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sim_addr = wait_file(sim_ready, sim)["http"]

        server = Server(cached[main_users], work, sim=sim_addr)
        try:
            phases.append(("started (store opened, nothing read yet)", server.rss_mb()))
            common = ["-addr", server.grpc, "-spec", server.spec, "-server-pid", str(server.pid)] + timing(args)
            for u, p in [(1, 1), (1, 20), (50, 1), (50, 20)]:
                r = load(loadgen, args, "-mode", "elig", "-now", "-users", str(u), "-products", str(p), *common)
                rows.append((f"{u} user{'s' if u > 1 else ''} × {p} product{'s' if p > 1 else ''}", "CPU 0 / CPU 1", r))
            # The same 1 x 20 call asking a day before the data's instant: before every summary, so
            # each user is answered from the history (what a past `as_of_ms` costs).
            past_spec = os.path.join(work, "bench-past.json")
            with open(past_spec, "w") as f:
                json.dump(dict(spec, as_of_ms=spec["as_of_ms"] - 86_400_000), f)
            r = load(loadgen, args, "-mode", "elig", "-users", "1", "-products", "20", "-addr", server.grpc,
                     "-spec", past_spec, "-server-pid", str(server.pid), *timing(args))
            rows.append(("1 user × 20 products, `as_of_ms` a day back (from the history)", "CPU 0 / CPU 1", r))
            # Both shapes at once (48 + 16 in flight): how long big batches make small calls wait.
            small, big = load_together(
                loadgen, args,
                ["-mode", "elig", "-now", "-users", "1", "-products", "20", "-concurrency", "48", *common],
                ["-mode", "elig", "-now", "-users", "50", "-products", "20", "-concurrency", "16", *common])
            rows.append(("mix: 1 user × 20 products, 48 in flight", "CPU 0 / CPU 1", small))
            rows.append(("mix: 50 users × 20 products, 16 in flight at once", "CPU 0 / CPU 1", big))
            # The same 1 x 20 call in the other protocols the server speaks (Connect, gRPC-Web).
            for label, proto in PROTOCOLS:
                r = load(loadgen, args, "-mode", "elig", "-now", "-users", "1", "-products", "20", "-protocol", proto,
                         "-http", server.http, *common)
                protocol_rows.append((label, r))
            phases.append(("after the CheckEligibility runs", server.rss_mb()))
            memory_parts = metric_values(server.http)
            r = load(loadgen, args, "-mode", "ingest", "-batch", "10", *common)
            ingest = r
            phases.append(("after the ingest run", server.rss_mb()))
            r = load(loadgen, args, "-mode", "notify", "-http", server.http, *common)
            notify = r
            phases.append(("after the notification run", server.rss_mb()))

            # The naive approach, for the same users.
            users_file = naive_setup(sim_addr, spec, 100 if args.quick else 300, work)
            load(loadgen, args, "-mode", "submit", "-app", "app-naive", "-userfile", users_file, "-concurrency", "8",
                 "-addr", server.grpc, "-spec", server.spec)
            ours = load(loadgen, args, "-mode", "elig", "-now", "-app", "app-naive", "-userfile", users_file, "-users", "1",
                        "-products", "20", *common)
            naive = load(loadgen, args, "-mode", "naive", "-app", "app-naive", "-userfile", users_file, "-verify-url",
                         f"http://{sim_addr}/production/verifyReceipt", "-spec", server.spec, "-server-pid", str(sim.pid),
                         *timing(args))

            # Where the server's CPU goes in CheckEligibility 1 x 20 (a separate, profiled run).
            prof_args = argparse.Namespace(**vars(args))
            prof_args.e2e_duration = args.e2e_duration + 2
            prof_load = subprocess.Popen(["taskset", "-c", "1", loadgen, "-mode", "elig", "-now", "-users", "1", "-products", "20",
                                          "-addr", server.grpc, "-spec", server.spec, *timing(prof_args)],
                                         stdout=subprocess.DEVNULL)
            time.sleep(args.e2e_warmup + 1)
            breakdown = profile(server.pid, min(args.e2e_duration, 5), work)
            prof_load.wait()

            phases.append(("at the end", server.rss_mb()))
            peak = float(next(l.split()[1] for l in open(f"/proc/{server.pid}/status") if l.startswith("VmHWM:"))) / 1024
            db = os.path.getsize(os.path.join(server.dir, "substatus.sqlite")) / 1e6
        finally:
            server.stop()

        # Nothing pinned: a fresh server (one event loop per core) and the generator share both cores.
        free_server = Server(cached[main_users], work, cpus=None)
        try:
            r = load(loadgen, args, "-mode", "elig", "-now", "-users", "1", "-products", "20", "-addr", free_server.grpc,
                     "-spec", free_server.spec, "-server-pid", str(free_server.pid), *timing(args), cpu=None)
            rows.append(("1 user × 20 products", "nothing pinned", r))
        finally:
            free_server.stop()

        # The history cache, on random users (the rows above, at its default) and on a load with
        # locality (every call among HOT users), each with the cache off and at HISTORY_MB.
        hot = max(10, main_users // 50)
        for label, flags, extra in [
                (f"random users, cache off", [], ["--history-cache-mb", "0"]),
                (f"random users, cache {HISTORY_MB} MiB", [], ["--history-cache-mb", str(HISTORY_MB)]),
                (f"{hot:,} hot users, cache off", ["-hot-users", str(hot)], ["--history-cache-mb", "0"]),
                (f"{hot:,} hot users, cache {HISTORY_MB} MiB", ["-hot-users", str(hot)], ["--history-cache-mb", str(HISTORY_MB)])]:
            s = Server(cached[main_users], work, extra=extra)
            try:
                r = load(loadgen, args, "-mode", "elig", "-now", "-users", "1", "-products", "20", *flags, "-addr", s.grpc,
                         "-spec", s.spec, "-server-pid", str(s.pid), *timing(args))
                m = metric_values(s.http)
                r["hit_ratio"] = (m.get("substatus_history_cache_hits_total", 0)
                                  / max(1, m.get("substatus_history_cache_hits_total", 0) + m.get("substatus_history_cache_misses_total", 0)))
                r["cache_mb"] = m.get("substatus_history_cache_bytes", 0) / 2**20
                history_rows.append((label, r))
            finally:
                s.stop()

        for u in sizes:
            if u == main_users:
                flat.append((u * 10, next(r for name, pin, r in rows if name.startswith("1 user × 20") and pin.startswith("CPU"))))
                continue
            s = Server(cached[u], work)
            try:
                r = load(loadgen, args, "-mode", "elig", "-now", "-users", "1", "-products", "20", "-addr", s.grpc, "-spec", s.spec,
                         "-server-pid", str(s.pid), *timing(args))
                flat.append((u * 10, r))
            finally:
                s.stop()
    finally:
        if sim:
            sim.terminate()
            sim.wait()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.time() - t_start
    load_end, busy_end = machine_load()
    busy = (busy_end[0] - busy_start[0]) / max(1e-9, busy_end[1] - busy_start[1]) * 100

    def f(x, digits=0):
        return "-" if x is None or x != x else f"{x:,.{digits}f}"

    def ms(us):
        return "-" if us is None else f"{us / 1000:.2f}"

    go = out(["go", "version"]).strip()
    db_start = os.path.getsize(os.path.join(cached[main_users], "substatus.sqlite")) / 1e6
    tx = main_users * 10
    lines = [BEGIN, "## End to end: substatusd over a SQLite store", "",
             f"A release `substatusd` serves a SQLite data directory of {tx:,} transactions / {main_users:,} users /"
             " 10 apps (20-product catalogs in 4 subscription groups; histories of 3 to 17 transactions: trials,",
             "renewals, lapses, billing retry, refunds, one-time purchases), built through the store's API by",
             "`substatus-e2e-datagen` and cached under `.build/bench-e2e-data/`. The server runs pinned to CPU 0",
             "(so with one event loop; store threads included), except in the row \"nothing pinned\" (a fresh",
             "server with two loops, sharing both cores with the generator); the load generator",
             "`Benchmarks/E2ELoadgen` is an independent client,",
             f"grpc-go 1.33.3 and net/http ({go}, built offline against Debian's packages like the peer),",
             f"pinned to CPU 1, 4 HTTP/2 connections, 64 calls in flight, {args.e2e_warmup} s warm-up then"
             f" {args.e2e_duration} s measured,",
             "random users of random apps, asking at the server's clock (no `as_of_ms`) as apps do, so answered from",
             "the per-user summaries written with the data (built around the start of the day the run is on), except",
             "the row that asks a day back, which the histories answer. Every answer is checked (users × products count);",
             "any error fails the run. Server CPU and RSS from `/proc`. These sections took"
             f" {elapsed:.0f} s (data cached).", "",
             f"Measured on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t_start))}. "
             f"Machine load during these sections: 1-minute load average {load_start:.1f} at the start and"
             f" {load_end:.1f} at the end, both cores {busy:.0f}% busy on average (this run and everything else)."
             + (" The machine was shared with other work: the pinned server did not always get a whole core (see"
                " the server-cores column), so calls/s and latencies are lower bounds; calls per server CPU-second"
                " is the steadier figure." if load_end > 2.5 or load_start > 2.5 else ""), "",
             "### CheckEligibility", "",
             "Target (docs/architecture.md \"Performance\"): 1 user × 20 products ≥ 25,000 calls/s with p99 ≤ 5 ms at 64 in flight.", "",
             "| shape | pinning | calls/s | user·products/s | p50 ms | p99 ms | p99.9 ms | server cores | calls per server CPU-s | server RSS MB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, pin, r in rows:
        lines.append(f"| {name} | {pin} | {f(r['calls_per_s'])} | {f(r['items_per_s'])} | {ms(r['p50_us'])} | {ms(r['p99_us'])} | "
                     f"{ms(r['p999_us'])} | {f(r.get('srv_cores'), 2)} | {f(r.get('calls_per_srv_cpu_s'))} | {f(r.get('rss_mb'), 1)} |")
    grpc_row = next(r for name, pin, r in rows if name.startswith("1 user × 20") and pin.startswith("CPU"))
    lines += ["", "### Protocols", "",
              "CheckEligibility 1 user × 20 products in each protocol the server speaks, on the same pinned server",
              "and users, 64 calls in flight. The gRPC row is grpc-go over 4 HTTP/2 connections (the row above); the",
              "others are Go's `net/http` (HTTP/2 cleartext with prior knowledge over 1 connection, to the gRPC port;",
              "or HTTP/1.1 keep-alive, 64 connections, to the HTTP listener), building each request as a backend",
              "would (JSON with `encoding/json`). Every answer is checked (status, and users × products).", "",
              "| protocol | calls/s | p50 ms | p99 ms | server cores | calls per server CPU-s | vs gRPC (per server CPU-s) |",
              "| --- | --- | --- | --- | --- | --- | --- |",
              f"| gRPC (`application/grpc`), HTTP/2 | {f(grpc_row['calls_per_s'])} | {ms(grpc_row['p50_us'])} | {ms(grpc_row['p99_us'])} | "
              f"{f(grpc_row.get('srv_cores'), 2)} | {f(grpc_row.get('calls_per_srv_cpu_s'))} | 1.00 |"]
    for label, r in protocol_rows:
        ratio = (r["calls_per_srv_cpu_s"] / grpc_row["calls_per_srv_cpu_s"]
                 if r.get("calls_per_srv_cpu_s") and grpc_row.get("calls_per_srv_cpu_s") else None)
        lines.append(f"| {label} | {f(r['calls_per_s'])} | {ms(r['p50_us'])} | {ms(r['p99_us'])} | {f(r.get('srv_cores'), 2)} | "
                     f"{f(r.get('calls_per_srv_cpu_s'))} | {f(ratio, 2)} |")
    lines += ["", "### Ingest and notifications", "",
              "Ingest: `ImportTransactions`, each call one new user with 10 transactions and a renewal info,",
              "answered after the commit (synchronous=FULL, group commit). Notifications: V1 `DID_RENEW` bodies",
              "(each a new transaction of an existing subscription) POSTed over HTTP/1.1 keep-alive to",
              "`/v1/apps/{app}/apple/notifications`, authenticated by the shared secret, routed by original",
              "transaction id, deduplicated and applied, answered 200 after the commit. Target: ingest ≥ 5,000",
              "transactions/s durably committed.", "",
              "| load | calls/s | transactions/s | p50 ms | p99 ms | p99.9 ms | server cores | server RSS MB |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |",
              f"| ImportTransactions (10 tx per call) | {f(ingest['calls_per_s'])} | {f(ingest['items_per_s'])} | {ms(ingest['p50_us'])} | "
              f"{ms(ingest['p99_us'])} | {ms(ingest['p999_us'])} | {f(ingest.get('srv_cores'), 2)} | {f(ingest.get('rss_mb'), 1)} |",
              f"| V1 notification (1 tx each) | {f(notify['calls_per_s'])} | {f(notify['items_per_s'])} | {ms(notify['p50_us'])} | "
              f"{ms(notify['p99_us'])} | {ms(notify['p999_us'])} | {f(notify.get('srv_cores'), 2)} | {f(notify.get('rss_mb'), 1)} |",
              "", "### Memory", "",
              f"Target: RSS ≤ 128 MB at {tx:,} transactions with every cache at its default size (the first wave's: 100 MB). Database file after the runs: {db:,.0f} MB (the ingest and"
              f" notification runs added more than {ingest['calls'] * 10 + notify['calls']:,} transactions).", "",
              "| substatusd | RSS MB |", "| --- | --- |"]
    lines += [f"| {name} | {rss:.1f} |" for name, rss in phases]
    lines += [f"| peak (VmHWM) | {peak:.1f} |", "",
              "What it is made of after the CheckEligibility runs (`/metrics`; the rest of the RSS is the binary and",
              "its libraries' resident pages, about 39 MB, thread stacks and the kernel's view of freed pages):", "",
              "| part | MB |", "| --- | --- |"]
    lines += [f"| {label} | {f(memory_parts[name] * scale, 1 if scale != 1 else 0)} |" for label, name, scale in MEMORY_PARTS
              if name in memory_parts]
    lines += ["", "### History cache", "",
              "CheckEligibility 1 user × 20 products, pinned as above, each row a fresh server: random users over",
              "all of them (the rows above), and a load with locality (each call's user drawn from the first",
              "users of each app's list, `-hot-users`). A history is kept on its user's second miss; hit ratio",
              "and size from `/metrics` at the end of the run (warm-up included).", "",
              "| load | calls per server CPU-s | p99 ms | hit ratio | cache MB | server RSS MB |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {label} | {f(r.get('calls_per_srv_cpu_s'))} | {ms(r['p99_us'])} | {r['hit_ratio'] * 100:.0f}% | "
              f"{r['cache_mb']:.1f} | {f(r.get('rss_mb'), 1)} |" for label, r in history_rows]
    lines += ["",
              "### The naive approach: verifyReceipt per check", "",
              "What an app backend without substatus does: for each check, POST the user's receipt to",
              "verifyReceipt (here `appstore-sim`, pinned to CPU 0 in place of Apple, answering from memory),",
              "parse Apple's JSON and decide intro eligibility of the 20 products locally (a group's intro is used",
              f"once any of its transactions was a trial or intro period). The same {300 if not args.quick else 100} users",
              "(monthly subscriptions, two thirds with a free trial, 5 renewals, some with a lifetime unlock) were",
              "first `SubmitReceipt`ed to substatusd, which verified them against the same simulator; then both",
              "answered 1 user × 20 products per check, 64 in flight, generator on CPU 1.", "",
              "| per check | calls/s | p50 ms | p99 ms | p99.9 ms | server cores |", "| --- | --- | --- | --- | --- | --- |",
              f"| substatus CheckEligibility | {f(ours['calls_per_s'])} | {ms(ours['p50_us'])} | {ms(ours['p99_us'])} | "
              f"{ms(ours['p999_us'])} | {f(ours.get('srv_cores'), 2)} |",
              f"| verifyReceipt + local evaluation | {f(naive['calls_per_s'])} | {ms(naive['p50_us'])} | {ms(naive['p99_us'])} | "
              f"{ms(naive['p999_us'])} | {f(naive.get('srv_cores'), 2)} (simulator) |", "",
              f"The simulator answers from memory on the same host ({1e6 * (naive.get('srv_cores') or 0) / naive['calls_per_s']:.0f} µs of its CPU per verifyReceipt);"
              " Apple's verifyReceipt is an",
              "Internet round trip (typically 100-500 ms, rate-limited, sometimes down), so the naive row is a",
              "lower bound on its cost, while substatus's answer does not depend on Apple being reachable.", "",
              "### Latency as the store grows", "",
              "CheckEligibility 1 user × 20 products, 64 in flight, pinned as above, each size a fresh server on",
              "its own cached data directory. Target: flat from 10k to 1M transactions.", "",
              "Under 64 calls in flight the latency is set by throughput, so the column that shows what the store's",
             "size costs is the server CPU per call (the reads are B-tree lookups: more levels, fewer cached pages).", "",
             "| transactions | users | calls/s | p50 ms | p99 ms | p99.9 ms | server CPU µs per call |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {n:,} | {n // 10:,} | {f(r['calls_per_s'])} | {ms(r['p50_us'])} | {ms(r['p99_us'])} | {ms(r['p999_us'])} | "
              f"{f(1e6 / r['calls_per_srv_cpu_s']) if r.get('calls_per_srv_cpu_s') else '-'} |" for n, r in flat]
    pinned = next(r for name, pin, r in rows if name.startswith("1 user × 20") and pin.startswith("CPU"))
    free = next(r for name, pin, r in rows if name.startswith("1 user × 20") and pin == "nothing pinned")
    cpu_us = 1e6 / pinned["calls_per_srv_cpu_s"] if pinned.get("calls_per_srv_cpu_s") else float("nan")
    free_cpu_us = 1e6 / free["calls_per_srv_cpu_s"] if free.get("calls_per_srv_cpu_s") else float("nan")
    gen_us = 1e6 * free["cli_cores"] / free["calls_per_s"]
    cpu_per_call = [1e6 / r["calls_per_srv_cpu_s"] for _, r in flat if r.get("calls_per_srv_cpu_s")]
    growth = (cpu_per_call[-1] / cpu_per_call[0] - 1) * 100 if len(cpu_per_call) > 1 else float("nan")

    def verdict(ok):
        return "met" if ok else "**missed**"

    def meets(r):
        return r["calls_per_s"] >= 25000 and r["p99_us"] <= 5000

    both = meets(pinned) or meets(free)
    parts = []
    for r, where in [(pinned, "pinned"), (free, "unpinned")]:
        parts.append(f"{f(r['calls_per_s'])} calls/s, p99 {ms(r['p99_us'])} ms {where}")
    partial = ""
    if not both:
        rate = [w for r, w in [(pinned, "pinned"), (free, "unpinned")] if r["calls_per_s"] >= 25000]
        tail = [w for r, w in [(pinned, "pinned"), (free, "unpinned")] if r["p99_us"] <= 5000]
        partial = " (" + "; ".join(x for x in [
            f"the rate only {' and '.join(rate)}" if rate else "",
            f"the p99 only {' and '.join(tail)}" if tail else ""] if x) + ")" if rate or tail else ""
    lines += ["", "### Against the targets", "",
              "| target (docs/architecture.md \"Performance\") | measured | |", "| --- | --- | --- |",
              f"| CheckEligibility 1 × 20 ≥ 25,000 calls/s with p99 ≤ 5 ms at 64 in flight | {'; '.join(parts)} |"
              f" {verdict(both)}{partial} |",
              f"| ingest ≥ 5,000 transactions/s durably committed | {f(ingest['items_per_s'])} | {verdict(ingest['items_per_s'] >= 5000)} |",
              f"| RSS ≤ 128 MB at {tx:,} transactions | {peak:.1f} MB peak | {verdict(peak <= 128)} |",
              f"| eligibility latency flat 10k → {tx // 1000:,}k | server CPU per call {growth:+.0f}% from {flat[0][0] // 1000:,}k to {tx // 1000:,}k"
              f" (p50 {ms(flat[0][1]['p50_us'])} → {ms(flat[-1][1]['p50_us'])} ms under load) | {verdict(growth <= 25)} |", ""]
    if growth > 25:
        sizes_text = ", ".join(f"{n // 1000:,}k: {c:.0f} µs" for (n, _), c in zip(flat, cpu_per_call))
        lines += [f"Why the CPU per call grows with the store ({sizes_text}): every read is an index lookup (the",
                  "query-plan tests in `SQLiteStoreTests` keep it so; nothing scans), but at 10k transactions the whole",
                  "database fits the readers' page caches, while at 1M (a file of"
                  f" {db_start:,.0f} MB, users drawn at random) the leaf pages of each call's user are read",
                  "from the OS with `pread` (a system call and a 4 KiB copy each) and the B-trees are one level",
                  "deeper. That cost is bounded per call (a few pages, whatever the size beyond the cache) and is",
                  "paid in CPU, not in waiting: the database file stays in the OS page cache. Keeping it in the",
                  "process (a larger page cache, or `mmap`) would flatten the line at the cost of RSS growing with",
                  "the store, which the memory target rules out.", ""]
    lines += ["How a 1 × 20 call is served: the event loop that reads it runs the whole call (the method is",
              "registered on the transport thread): API key and app from in-memory caches, the user's history read",
              "from SQLite on that thread (a connection borrowed from a small pool, one statement; the user's",
              "internal key cached after the first read), evaluation, encoding, and the response in the loop's",
              "next write. No thread hand-over; one event loop per CPU the process may run on.", "",
              f"CPU budget: pinned, the server spends {cpu_us:.0f} µs of CPU per call ({f(pinned.get('calls_per_srv_cpu_s'))}"
              " calls per server CPU-second), and 25,000 calls/s on its one core needs ≤ 40 µs. Unpinned, the grpc-go"
              f" generator itself uses {gen_us:.0f} µs of CPU per call on the same two cores and the server"
              f" {free_cpu_us:.0f} µs (two loops, sharing the cores with the generator: more migrations and cache"
              " misses than pinned). At 64 calls in flight the latency follows from the throughput (Little's law:"
              " p50 ≈ 64 / calls/s), so p99 ≤ 5 ms needs about the same budget."]
    if breakdown:
        lines += ["", f"Where the pinned server's CPU goes in this load (perf record, cpu-clock at 499 Hz with DWARF call"
                  " graphs, 5 s; each sample counted for the innermost frame that names a component, so reference",
                  "counting and malloc count where they were done):", "",
                  "| share | what |", "| --- | --- |"]
        lines += [f"| {share:.1f}% | {label} |" for share, label in breakdown]
        lines += ["", "For scale: the bare transport serving the in-memory `Bench` CheckEligibility (20 products, no auth,",
                  "no store) uses about 13 µs per call (first section). The SQLite share is mostly the B-tree seeks and",
                  "the `pread` of leaf pages that the 2 MiB per-connection page cache does not hold (users are random",
                  f"over a {db_start:,.0f} MB file). `mmap` would turn those system calls into memory reads, but the mapped pages",
                  "count in RSS and would take it towards the file's size, against the 100 MB target."]
    many = next((r for name, pin, r in rows if name.startswith("50 users × 1 ")), None)
    if many and many.get("calls_per_srv_cpu_s"):
        per_user = 1e6 / many["calls_per_srv_cpu_s"] / 50
        lines += ["", f"The 50-user shapes read 50 histories per call: {per_user:.0f} µs of server CPU per user at this size"
                  " (one read transaction per call, one statement per user)."]
    lines += ["", f"Command: `scripts/bench` (this part: `scripts/bench_e2e.py{' --quick' if args.quick else ''}"
              f" --duration {args.e2e_duration}`).", END, ""]
    return lines


def add_arguments(ap):
    ap.add_argument("--e2e-duration", dest="e2e_duration", type=int, default=None,
                    help="measured seconds per end-to-end load (default 8, 4 with --quick)")
    ap.add_argument("--e2e-warmup", dest="e2e_warmup", type=int, default=2)


def settle(args):
    if args.e2e_duration is None:
        args.e2e_duration = 4 if args.quick else 8


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="100,000 transactions, shorter runs")
    ap.add_argument("--duration", dest="e2e_duration", type=int, default=None)
    ap.add_argument("--warmup", dest="e2e_warmup", type=int, default=2)
    ap.add_argument("--print", action="store_true", help="print the section instead of updating BENCHMARKS.md")
    args = ap.parse_args()
    settle(args)
    lines = run(args)
    text = "\n".join(lines)
    if args.print:
        print(text)
        return
    path = os.path.join(ROOT, "BENCHMARKS.md")
    old = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + text.rstrip("\n") + old[old.index(END) + len(END):]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(new)
    print("updated the end-to-end section of BENCHMARKS.md")
    import readme_figures  # README's figures follow BENCHMARKS.md
    readme_figures.main()


if __name__ == "__main__":
    main()
