#!/usr/bin/env python3
"""Events out (docs/architecture.md "Performance", the events targets): the "Events" section of BENCHMARKS.md.

Runs `.build/release/substatus-webhook-bench` (Benchmarks/WebhookBench) pinned to one core:

1. Derivation overhead on ingest: the same histories ingested into a fresh SQLite store with the
   event log on and with it off (`--ingest`: the store's bench-only `logsEvents = false`), CPU
   per transaction of the process; target: deriving adds <= 10 %.
2. Webhook delivery throughput to a local receiver (the project's HTTP server in a child process
   on the same core, answering 204): events/s from the dispatcher's start until every delivery is
   recorded DELIVERED, and CPU per event of the sender and of the receiver; target >= 5,000 events/s.
   The sender in its parts: the dispatcher and the store with a poster that answers at once
   (`--null-poster`), and the outbound HTTP client (libcurl) alone POSTing the same requests (`--client-only`).
3. WatchEvents fan-out (`--watch`): 100 streams on one app over the HTTP/2 transport, N events
   appended 100 per commit; events/s delivered to every watcher, lag from commit to receipt
   (p50/p99), CPU per delivered event (server and watchers, one process) and peak RSS.
4. Derivation at the service level: `substatusd` (release, pinned to CPU 0) on the end-to-end
   benchmark's 100,000-user store (its event log already holds about a million events) under
   ImportTransactions from the grpc-go load generator on CPU 1, profiled with perf: the share of
   the server's CPU spent deriving, logging and scheduling events (`SQLiteStore.logEvents` and what
   it calls), and the overhead that share means against ingest without it (share / (1 - share)).
5. Webhook delivery through substatusd, as a user measures it (`daemon_delivery`): 4,000 users'
   histories imported, then `substatus events replay APP --since "" --webhook ID` to the load
   generator's receiver on the other core; events/s and the server's CPU per event.

Each figure is the median of `reps` runs; the machine's load average is reported beside it.
scripts/bench calls `section(build_dir)`; run alone it measures and replaces the section:

    scripts/bench_events.py [--reps N] [--no-build]

`--delivery` measures only item 5 and rewrites only its subsection ("Webhook delivery through
substatusd"), `reps` runs, interleaved run by run with another build's substatusd when given one:
`--compare REF` (built as scripts/bench_compare.py builds a ref, under .build/compare/<sha>) or
`--baseline DIR` (a directory with a release substatusd); `--users N` (4,000), `--print`:

    scripts/bench_events.py --delivery --reps 4 --compare main
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmarks_md import replace_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TITLE = "## Events out: derivation on ingest, webhook delivery"
PRODUCT = "substatus-webhook-bench"


def run(build_dir, args, core):
    argv = ["taskset", "-c", str(core), os.path.join(build_dir, "release", PRODUCT)] + args + ["--json"]
    print("+", " ".join(argv), flush=True)
    text = subprocess.run(argv, check=True, text=True, stdout=subprocess.PIPE).stdout
    return json.loads(text.strip().splitlines()[-1])


# The frame of the SQLite store's function that derives, appends and schedules one user's events
# in the ingest's commit (SQLiteStore.logEvents(_:user:key:before:after:atMs:catalogs:...)).
EVENTS_FRAME = "SubscriptionStorageSQLite0C5StoreC9logEvents"


def service_share(seconds=6):
    """ImportTransactions into substatusd on the end-to-end store, perf-profiled: returns a dict with
    the events' share of the server's CPU samples, tx/s and the load, or None without perf."""
    import bench_e2e  # the end-to-end harness: its data set, server and load generator
    bench_e2e.build()
    loadgen = os.path.join(bench_e2e.BUILD, "e2e-loadgen", "bin", "e2e-loadgen")
    work = tempfile.mkdtemp(dir=bench_e2e.BUILD, prefix="bench-events-")
    try:
        server = bench_e2e.Server(bench_e2e.data_dir(100_000), work)
        try:
            load = subprocess.Popen(["taskset", "-c", "1", loadgen, "-mode", "ingest", "-batch", "10", "-addr", server.grpc,
                                     "-spec", server.spec, "-server-pid", str(server.pid), "-warmup", "2s",
                                     "-duration", f"{seconds + 3}s"], stdout=subprocess.PIPE, text=True)
            time.sleep(3)
            loadavg = os.getloadavg()[0]
            data = os.path.join(work, "perf.data")
            try:
                subprocess.run(["perf", "record", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,16384", "-p",
                                str(server.pid), "-o", data, "--", "sleep", str(seconds)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                text = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym"], check=True, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
            except (OSError, subprocess.CalledProcessError):
                text = None
            result = json.loads(load.communicate()[0].strip().splitlines()[-1].split(" ", 1)[1])
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not text:
        return None
    samples = [b for b in text.split("\n\n") if b.strip()]
    events = sum(1 for b in samples if EVENTS_FRAME in b)
    return {"samples": len(samples), "event_samples": events, "share": events / max(len(samples), 1),
            "tx_per_s": result["items_per_s"], "load": loadavg}


MASTER_KEY = "5eb0" * 16  # the bench daemon's master key (webhook secrets are sealed with it)


def daemon_delivery(release, loadgen, users=4_000, server_core=0, receiver_core=1, server=None):
    """Webhook delivery through a real substatusd, as a user measures it (issue 32): `substatusd`
    (`release`: its directory of release binaries; `server`: another build's substatusd, driven by
    this build's CLI) pinned to `server_core` on a fresh SQLite data
    directory; `users` users' histories (10 monthly transactions and a renewal info each) imported
    through ImportTransactions by the load generator; then a webhook to the load generator's
    receiver (net/http, answering 204, checking every signature) on `receiver_core`, and
    `substatus events replay APP --since "" --webhook ID`. Returns events/s from the replay call
    until the receiver has the last event, the server's CPU per event until every delivery is
    recorded, and the receiver's counts (distinct events, repeats, bad signatures, out of order)."""
    work = tempfile.mkdtemp(prefix="bench-events-daemon-")
    env = dict(os.environ, SUBSTATUS_MASTER_KEY=MASTER_KEY)
    procs = []
    try:
        ready = os.path.join(work, "ready.json")
        server = subprocess.Popen(
            ["taskset", "-c", str(server_core), server or os.path.join(release, "substatusd"), "--data-dir",
             os.path.join(work, "data"), "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
             "--ready-file", ready, "--operator-key-file", os.path.join(work, "operator.key"),
             "--refresh-interval", "0", "--allow-private-webhooks"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(server)
        end = time.time() + 60
        while not os.path.exists(ready) and time.time() < end and server.poll() is None:
            time.sleep(0.05)
        addrs = json.load(open(ready))
        grpc, http = addrs["grpc"], addrs["http"]

        def cli(key, *args):
            text = subprocess.run([os.path.join(release, "substatus"), "--addr", grpc, "--key", key, "--json", *args],
                                  check=True, text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
            return json.loads(text)

        operator = open(os.path.join(work, "operator.key")).read().strip()
        admin = cli(operator, "tenant", "create", "bench")["adminKey"]
        app = cli(admin, "app", "register", "--bundle-id", "com.example.bench")["app"]["appId"]
        products = [{"productId": f"bench.g{g}.monthly", "type": "PRODUCT_TYPE_AUTO_RENEWABLE",
                     "subscriptionGroupId": f"g{g}", "duration": "P1M"} for g in range(4)]
        catalog = os.path.join(work, "catalog.json")
        json.dump({"products": products}, open(catalog, "w"))
        cli(admin, "product", "put", app, "--file", catalog)
        ingest_key = cli(admin, "key", "create", "--role", "ingest", "--app", app)["key"]
        # The load generator's data-set description: one app, its products; histories that end 15
        # days from now (every user active: nothing comes due by time during the run).
        spec = os.path.join(work, "spec.json")
        json.dump({"users": users, "apps": 1, "as_of_ms": int(time.time() * 1000) + 15 * 86_400_000,
                   "keys": {"ingest": ingest_key},
                   "apps_detail": [{"app_id": app, "products": [
                       {"product_id": p["productId"], "subscription_group_id": p["subscriptionGroupId"]}
                       for p in products]}]}, open(spec, "w"))
        subprocess.run(["taskset", "-c", str(receiver_core), loadgen, "-mode", "ingest", "-calls", str(users),
                        "-batch", "10", "-concurrency", "16", "-addr", grpc, "-spec", spec],
                       check=True, stdout=subprocess.DEVNULL)
        addr_file, secret_file = os.path.join(work, "receiver.addr"), os.path.join(work, "secret")
        receiver = subprocess.Popen(["taskset", "-c", str(receiver_core), loadgen, "-mode", "receive",
                                     "-addr-file", addr_file, "-secret-file", secret_file],
                                    stdout=subprocess.PIPE, text=True)
        procs.append(receiver)
        while not os.path.exists(addr_file) or not open(addr_file).read():
            time.sleep(0.05)
        hook = cli(admin, "webhook", "add", app, "--url", f"http://{open(addr_file).read()}/hook")
        open(secret_file, "w").write(hook["signingSecret"])
        load = os.getloadavg()[0]
        cpu0, t0 = proc_cpu(server.pid), time.time()
        created = int(cli(admin, "events", "replay", app, "--since", "", "--webhook",
                          hook["webhook"]["webhookId"]).get("deliveriesCreated", 0))
        while delivered_attempts(http) < created:
            time.sleep(0.1)  # not often: rendering /metrics costs the server CPU too
        cpu = proc_cpu(server.pid) - cpu0
        load = max(load, os.getloadavg()[0])
        receiver.terminate()
        got = json.loads(receiver.communicate()[0].strip().splitlines()[-1].split(" ", 1)[1])
        seconds = got["last_unix_ns"] / 1e9 - t0
        return {"users": users, "events": created, "seconds": seconds, "events_per_s": got["events"] / seconds,
                "server_cpu_us_per_event": cpu * 1e6 / max(created, 1), "load": load,
                "received": got["events"], "posts": got["posts"], "repeats": got["repeats"],
                "bad_signatures": got["bad_signatures"], "bad_event_ids": got.get("bad_event_ids"),
                "out_of_order": got["out_of_order"],
                "receiver_cpu_us_per_event": got["cpu_s"] * 1e6 / max(got["posts"], 1)}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def proc_cpu(pid):
    """A process's user + system CPU seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def delivered_attempts(http):
    """substatusd's count of webhook attempts recorded as delivered (from /metrics)."""
    import urllib.request
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('substatus_webhook_delivery_attempts_total{outcome="delivered"}'):
                return int(float(line.split()[-1]))
    return 0


def section(build_dir, reps=3, core=1, events=5_000, users=2_000, per_user=10, watchers=100, watched=2_000):
    """Measures; returns the markdown lines of the section."""
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    service = service_share()
    import bench_e2e  # built by service_share(): substatusd and the load generator (its receiver too)
    subprocess.run(["swift", "build", "-c", "release", "--product", "substatus"], check=True)
    loadgen = os.path.join(bench_e2e.BUILD, "e2e-loadgen", "bin", "e2e-loadgen")
    daemon = [daemon_delivery(bench_e2e.RELEASE, loadgen) | {"build": "this"} for _ in range(reps)]
    loads = []
    on, off, delivery, ordered, fanout = [], [], [], [], []
    dispatcher_only, client_only = [], []  # the delivery's sender in its two parts
    for _ in range(reps):  # interleaved, so load changes hit both sides alike
        loads.append(os.getloadavg()[0])
        ingest = ["--ingest", "--users", str(users), "--per-user", str(per_user)]
        on.append(run(build_dir, ingest, core))
        off.append(run(build_dir, ingest + ["--no-events"], core))
        delivery.append(run(build_dir, ["--events", str(events)], core))
        ordered.append(run(build_dir, ["--events", str(events), "--per-user", "4"], core))
        dispatcher_only.append(run(build_dir, ["--events", str(events), "--null-poster"], core))
        client_only.append(run(build_dir, ["--events", str(events), "--client-only"], core))
        fanout.append(run(build_dir, ["--watch", "--watchers", str(watchers), "--events", str(watched)], core))
    loads.append(os.getloadavg()[0])

    def med(runs, f):
        return statistics.median(f(r) for r in runs)

    us_on = med(on, lambda r: r["cpu_seconds"] * 1e6 / r["transactions"])
    us_off = med(off, lambda r: r["cpu_seconds"] * 1e6 / r["transactions"])
    overhead = (us_on / us_off - 1) * 100 if us_off else float("nan")
    events_per_tx = med(on, lambda r: r["events"] / r["transactions"])

    def rate(runs):
        return med(runs, lambda r: r["delivered"] / r["seconds"])

    def cpu_per_event(runs):
        return med(runs, lambda r: r["cpu_seconds"] * 1e6 / max(r["delivered"], 1))

    def receiver_per_event(runs):
        return med(runs, lambda r: (r.get("receiver_cpu_seconds") or 0) * 1e6 / max(r["delivered"], 1))

    w_rate = med(fanout, lambda r: r["events"] / r["seconds"])
    w_p50, w_p99 = med(fanout, lambda r: r["lag_p50_ms"]), med(fanout, lambda r: r["lag_p99_ms"])
    w_cpu = med(fanout, lambda r: r["cpu_seconds"] * 1e6 / (r["events"] * r["watchers"]))
    w_rss = max(r["peak_rss_mb"] for r in fanout)

    def verdict(ok):
        return "met" if ok else "**not met**"

    d, o = rate(delivery), rate(ordered)
    lines = [TITLE, "",
             f"Measured by `scripts/bench_events.py` on {started}: `.build/release/{PRODUCT}` pinned to CPU {core},",
             f"medians of {reps} interleaved runs; load average (1 min) during the runs "
             f"{min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} cores (the machine is shared: compare the rows"
             " of one run, not runs of different days).", "",
             "| measure | result | target | |", "| --- | --- | --- | --- |",
             f"| ingest CPU per transaction, event log on (derivation, log, schedules) | {us_on:.1f} µs | | |",
             f"| ingest CPU per transaction, event log off (`logsEvents = false`) | {us_off:.1f} µs | | |",
             f"| derivation overhead on ingest | +{overhead:.0f} % | ≤ +10 % | {verdict(overhead <= 10)} |",
             (f"| events' share of substatusd's CPU during ImportTransactions (perf; log of about a million events) "
              f"| {100 * service['share']:.1f} % of {service['samples']:,} samples ({service['tx_per_s']:,.0f} tx/s, load "
              f"{service['load']:.1f}) | | |" if service else
              "| events' share of substatusd's CPU during ImportTransactions | not measured (no perf) | | |"),
             (f"| derivation overhead on ingest, service level (share / (1 − share)) "
              f"| +{100 * service['share'] / (1 - service['share']):.0f} % | ≤ +10 % "
              f"| {verdict(service['share'] / (1 - service['share']) <= 0.10)} |" if service else
              "| derivation overhead on ingest, service level | not measured | ≤ +10 % | |"),
             f"| webhook delivery, one event per user | {d:,.0f} events/s (CPU per event: sender {cpu_per_event(delivery):.0f} µs, "
             f"receiver {receiver_per_event(delivery):.0f} µs) | ≥ 5,000 events/s | {verdict(d >= 5000)} |",
             f"| webhook delivery, 4 events per user (in order: each waits for the previous one's record) "
             f"| {o:,.0f} events/s (CPU per event: sender {cpu_per_event(ordered):.0f} µs, receiver "
             f"{receiver_per_event(ordered):.0f} µs) | ≥ 5,000 events/s | {verdict(o >= 5000)} |",
             f"| webhook delivery, its parts: the dispatcher and the store alone (a poster answering at once, no I/O) "
             f"| {rate(dispatcher_only):,.0f} events/s ({cpu_per_event(dispatcher_only):.0f} µs CPU per event) | | |",
             f"| webhook delivery, its parts: the HTTP client (libcurl) alone (the same requests, {events:,} POSTs, 16 in flight) "
             f"| {rate(client_only):,.0f} POSTs/s (CPU per POST: sender {cpu_per_event(client_only):.0f} µs, receiver "
             f"{receiver_per_event(client_only):.0f} µs) | | |",
             f"| WatchEvents fan-out to {watchers} watchers of one app | {w_rate:,.0f} events/s to every watcher "
             f"({w_rate * watchers:,.0f} messages/s), lag p50 {w_p50:.1f} ms, p99 {w_p99:.1f} ms; {w_cpu:.1f} µs CPU per "
             f"message; peak RSS {w_rss:.0f} MB | (none set) | |",
             "",
             f"Ingest: {users:,} users × {per_user} monthly transactions (a purchase, then renewals), 100 users per"
             f" `ingest` commit into a fresh SQLite store (synchronous=FULL), {events_per_tx:.2f} events per transaction;"
             " CPU of the whole process per transaction. Store level: ImportTransactions adds the RPC's own cost,"
             " the same with and without the log, so its relative overhead is somewhat smaller than this row's"
             " (the service-level rows: the same substatusd and 100,000-user store as the end-to-end section, each"
             " ImportTransactions call a new user with 10 transactions, perf with DWARF call graphs for 6 s; a sample"
             " counts for the events when `SQLiteStore.logEvents` is on its stack).", "",
             f"Delivery: {events:,} events logged in a SQLite store, one webhook at `http://127.0.0.1` (the project's"
             " HTTP server in a child process pinned to the same core, answering 204 at once), the dispatcher with its"
             " default settings; time from its start until every delivery is recorded DELIVERED. Sender: the"
             " dispatcher, the store and the outbound HTTP client (libcurl's multi interface) in the bench process; receiver: the child's CPU. Its parts"
             " (`--null-poster`, `--client-only`): the dispatcher and store with a poster that answers 204 at once;"
             " then the HTTP client alone POSTing the requests the dispatcher made, as many in flight (see"
             " docs/webhook-delivery.md).", "",
             f"WatchEvents: {watchers} streams of one app over one HTTP/2 connection (server, service on a SQLite"
             f" store, and the watching client in one process on one core), then {watched:,} first purchases ingested"
             " 100 users per commit as fast as the store takes them; events/s from the first commit to the last"
             " watcher's last event; lag from each commit's return to each watcher's receipt (the events come faster"
             " than 100 streams take them, so the lag is mostly the time the burst takes to drain, not a quiet"
             " stream's latency); CPU of the whole process (ingest included) per message delivered.", "",
             "<details><summary>Every run</summary>", "", "```"]
    lines += [json.dumps(r) for r in on + off + delivery + ordered + fanout]
    lines += [json.dumps(r) for r in dispatcher_only + client_only]
    lines += ["```", "", "</details>", ""]
    return lines + delivery_lines(daemon, [])

DELIVERY_TITLE = "### Webhook delivery through substatusd"


def delivery_lines(this, ref, ref_name=None):
    """The subsection of the delivery through substatusd: the runs of this build (`this`) and, when
    compared, of another build (`ref`, interleaved with them; `ref_name` says which)."""
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = this + ref
    loads = [r["load"] for r in runs]

    def med(rs, key):
        return statistics.median(r[key] for r in rs)

    def verdict(ok):
        return "met" if ok else "**not met**"

    def row(name, rs):
        return (f"| {name} | {len(rs)} | {med(rs, 'events_per_s'):,.0f} ({min(r['events_per_s'] for r in rs):,.0f}–"
                f"{max(r['events_per_s'] for r in rs):,.0f}) | {med(rs, 'server_cpu_us_per_event'):.0f} "
                f"({min(r['server_cpu_us_per_event'] for r in rs):.0f}–{max(r['server_cpu_us_per_event'] for r in rs):.0f}) | "
                f"{sum(r['received'] for r in rs):,} of {sum(r['events'] for r in rs):,}; {sum(r['repeats'] for r in rs)} repeated, "
                f"{sum(r['bad_signatures'] for r in rs)} bad signatures, "
                f"{sum(r.get('bad_event_ids') or 0 for r in rs)} `Substatus-Event-Id` not the body's, "
                f"{sum(r['out_of_order'] for r in rs)} out of order |")

    rate, cpu = med(this, "events_per_s"), med(this, "server_cpu_us_per_event")
    lines = [DELIVERY_TITLE, "",
             f"Measured by `scripts/bench_events.py` on {started}: {this[0]['users']:,} users' histories, "
             f"{this[0]['events']:,} events, load average (1 min) {min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} cores"
             + (f"; this build interleaved with {ref_name}, run by run." if ref else "."), "",
             "| build | runs | events/s (min–max) | µs of server CPU per event (min–max) | received |",
             "| --- | --- | --- | --- | --- |", row("this build", this)]
    if ref:
        lines.append(row(ref_name, ref))
    lines += ["",
              f"Against the targets (≥ 5,000 events/s, ≤ 100 µs of server CPU per event): {rate:,.0f} events/s "
              f"{verdict(rate >= 5000)}, {cpu:.0f} µs {verdict(cpu <= 100)}"
              + (f"; this build's server CPU per event is {cpu / med(ref, 'server_cpu_us_per_event'):.2f}× and its events/s "
                 f"{rate / med(ref, 'events_per_s'):.2f}× {ref_name}'s (medians)." if ref else "."), "",
              "A release `substatusd` pinned to CPU 0 on a fresh SQLite data directory; the users' histories (10 monthly"
              " transactions and a renewal info each) imported with ImportTransactions by the end-to-end load generator;"
              " then `substatus webhook add` to the load generator's receiver (Go net/http on CPU 1, answering 204,"
              " checking every signature and `Substatus-Event-Id`, each user's order and repeats) and"
              " `substatus events replay APP --since \"\" --webhook ID`; events/s from the replay call to the receiver's"
              " last event; the server's CPU from the replay call until /metrics counts every delivery recorded"
              " (`daemon_delivery` in scripts/bench_events.py; `--delivery [--compare REF]` measures only this part).", "",
              "<details><summary>Every run</summary>", "", "```"]
    lines += [json.dumps(r) for r in runs]
    lines += ["```", "", "</details>", ""]
    return lines


def replace_delivery(path, lines):
    """Replaces the delivery subsection (from DELIVERY_TITLE to the end of the events section) in
    BENCHMARKS.md, or appends it to the events section."""
    text = open(path).read()
    start = text.find(TITLE)
    if start < 0:
        replace_section(path, TITLE, [TITLE, ""] + lines)
        return
    end = len(text)
    for marker in ("\n## ", "\n<!-- "):
        i = text.find(marker, start + len(TITLE))
        if i >= 0:
            end = min(end, i + 1)
    sub = text.find(DELIVERY_TITLE, start, end)
    cut = sub if sub >= 0 else end
    with open(path, "w") as f:
        f.write(text[:cut].rstrip("\n") + "\n\n" + "\n".join(lines) + "\n" + text[end:])


def delivery_only(args):
    """`--delivery`: the delivery through substatusd alone, `reps` runs, interleaved with a build of
    `--compare REF` (scripts/bench_compare.py's build of the ref's substatusd, cached by its sha) or
    the substatusd in `--baseline DIR`; writes the subsection of BENCHMARKS.md unless `--print`."""
    import bench_e2e
    for product in [] if args.no_build else ["substatusd", "substatus"]:
        subprocess.run(["swift", "build", "-c", "release", "--product", product], check=True)
    loadgen = bench_e2e.build_loadgen()
    ref_server, ref_name = None, None
    if args.compare:
        import bench_compare
        sha, build = bench_compare.ref_build(args.compare)
        ref_server, ref_name = os.path.join(build.release, "substatusd"), f"`{sha[:7]}`"
    elif args.baseline:
        ref_server = os.path.join(args.baseline, "substatusd")
        ref_name = args.baseline_name or f"`{args.baseline}/substatusd`"
    this, ref = [], []
    for i in range(args.reps):
        order = [None] if not ref_server else [None, ref_server] if i % 2 == 0 else [ref_server, None]
        for server in order:
            if server is None:
                this.append(daemon_delivery(bench_e2e.RELEASE, loadgen, users=args.users) | {"build": "this"})
                print(json.dumps(this[-1]), flush=True)
            elif ref_server:
                ref.append(daemon_delivery(bench_e2e.RELEASE, loadgen, users=args.users, server=ref_server)
                           | {"build": ref_name})
                print(json.dumps(ref[-1]), flush=True)
    lines = delivery_lines(this, ref, ref_name)
    print("\n".join(lines))
    if not args.print:
        replace_delivery(os.path.join(ROOT, "BENCHMARKS.md"), lines)
        import readme_figures
        readme_figures.main()
        print("wrote the webhook delivery part of BENCHMARKS.md's events section")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--delivery", action="store_true", help="only the webhook delivery through substatusd")
    ap.add_argument("--users", type=int, default=4_000, help="--delivery: users imported (10 events each)")
    ap.add_argument("--compare", help="--delivery: interleave with this git ref's substatusd")
    ap.add_argument("--baseline", help="--delivery: interleave with the substatusd in this directory")
    ap.add_argument("--baseline-name", help="--delivery: what the baseline is, in the table")
    ap.add_argument("--print", action="store_true", help="--delivery: print, do not write BENCHMARKS.md")
    args = ap.parse_args()
    os.chdir(ROOT)
    if args.delivery:
        return delivery_only(args)
    if not args.no_build:
        subprocess.run(["swift", "build", "-c", "release", "--product", PRODUCT], check=True)
    lines = section(os.path.join(ROOT, ".build"), args.reps, args.core)
    replace_section(os.path.join(ROOT, "BENCHMARKS.md"), TITLE, lines)
    print("\n".join(lines))
    print("wrote the events section of BENCHMARKS.md")


if __name__ == "__main__":
    main()
