#!/usr/bin/env python3
"""make bench COMPARE=<git ref>: this build against an earlier commit's, interleaved in one run.

The ref's source is exported (`git archive`) to .build/compare/<sha>/src and its release
`substatusd` and `substatus-bench-server` (when it has one) built there with its own Package.swift;
both are cached by the commit's sha, so a second run does not rebuild. Each build then stores the
same data its own way: a fresh `substatusd` of that build imports it through the API
(`e2e-loadgen -mode seed`: a tenant, 10 apps with 20-product catalogs, READ and INGEST keys, the
histories of substatus-e2e-datagen for N users, 10 transactions each, through ImportTransactions),
so a build with another schema, or without a data tool that fits today's store, still gets the same
users, products and transactions. Those stores are cached too (by the ref's sha, or this build's
binary hash, the seed's source, the size and the day the histories are built around).

Then, round by round (the order of the two builds alternating: this, ref; ref, this; ...), the same
shapes run against both builds, the server pinned to CPU 0, the load generator to CPU 1, 64 calls in
flight, every answer checked, asking at the server's clock as apps do:

- elig1x20, elig50x20: CheckEligibility, 1 and 50 random users x 20 products (e2e-loadgen -mode elig);
- status: GetStatus of one random user;
- ingest: ImportTransactions of the first users' histories into a fresh store (server CPU per
  transaction, measured over the import alone);
- transport: each build's substatus-bench-server (one event loop) under the peer's grpc-go load
  generator, Bench CheckEligibility of 20 products and Echo of 64 bytes (skipped, saying so, when the
  ref has no bench server).

Per shape it reports calls per server CPU-second of each build (medians over the rounds), their
ratio this/ref per round (median, and min-max across rounds: the spread), and the p99 of each.
Both builds see the same machine load within a round, so the ratio stays fair on a loaded machine;
the section says what the load was.

Usage: scripts/bench_compare.py REF [--quick] [--rounds N] [--duration S] [--shapes a,b]
           [--users N] [--nice N] [--this REF2] [--print]
       (scripts/bench --compare REF [...] and make bench COMPARE=REF [QUICK=1] [SHAPES=...] run it.)
Writes its block of the "Compare" section of BENCHMARKS.md (one block per ref, replaced on the
next run against the same commit), then README's figures (scripts/readme_figures.py).
"""
import argparse, hashlib, json, os, shutil, socket, statistics, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, ".build")
COMPARE = os.path.join(BUILD, "compare")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
import bench_e2e  # noqa: E402  (the load generator's build, the ready file, /proc readings)

SHAPES = ["elig1x20", "elig50x20", "status", "ingest", "transport"]
SHAPE_LABELS = {
    "elig1x20": "CheckEligibility 1 user × 20 products",
    "elig50x20": "CheckEligibility 50 users × 20 products",
    "status": "GetStatus",
    "ingest": "ImportTransactions into a fresh store (per transaction)",
    "transport/elig20": "transport: bench server, CheckEligibility 20 products",
    "transport/echo64": "transport: bench server, Echo 64 bytes",
}
# Refs the section names in words (the first 7 hex digits of the commit).
KNOWN_REFS = {
    "fb4219e": "the first wave",
    "db3c17a": "main when issue 31 started",
    "056961b": "main when session 13 started",
}
# The smallest change that lets a ref build with this machine's toolchain, applied to the exported
# copy only (never to the ref): {sha prefix: (extra `swift build` arguments, why)}. Empty while
# every ref builds as it is.
BUILD_FIXES = {}
SECTION = "## Compare: this build against earlier commits"
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"


def sh(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, text=True, **kw)


def out(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE, **kw).stdout


def file_hash(*paths):
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


class Build:
    """A build's binaries and where its cached stores go."""

    def __init__(self, name, describe, release, cache_key, cache_dir, notes=()):
        self.name, self.describe, self.release = name, describe, release
        self.substatusd = os.path.join(release, "substatusd")
        server = os.path.join(release, "substatus-bench-server")
        self.bench_server = server if os.path.exists(server) else None
        self.cache_key, self.cache_dir, self.notes = cache_key, cache_dir, list(notes)


def this_build():
    # The Makefile's flags (`make release`): other flags would rebuild every module.
    for product in ["substatusd", "substatus-bench-server"]:
        sh(["swift", "build", "-c", "release", "--product", product, "-Xswiftc", "-warnings-as-errors"], cwd=ROOT)
    release = os.path.join(BUILD, "release")
    describe = out(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=7"]).strip()
    key = "this-" + file_hash(os.path.join(release, "substatusd"))
    cache = os.path.join(COMPARE, "this")
    # Only the stores of the current binary are kept (each rebuild may change the schema).
    if os.path.isdir(cache):
        for name in os.listdir(cache):
            if not name.startswith(key):
                shutil.rmtree(os.path.join(cache, name), ignore_errors=True)
    return Build("this", describe, release, key, cache)


def ref_build(ref, name="ref"):
    sha = out(["git", "-C", ROOT, "rev-parse", "--verify", ref + "^{commit}"]).strip()
    base = os.path.join(COMPARE, sha)
    src = os.path.join(base, "src")
    marker = os.path.join(base, "built.json")
    if not os.path.exists(marker):
        if not os.path.exists(os.path.join(src, "Package.swift")):
            shutil.rmtree(src, ignore_errors=True)
            os.makedirs(src)
            archive = subprocess.Popen(["git", "-C", ROOT, "archive", sha], stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", src], stdin=archive.stdout, check=True)
            if archive.wait() != 0:
                raise RuntimeError(f"git archive {sha} failed")
        flags, why = next((v for k, v in BUILD_FIXES.items() if sha.startswith(k)), ([], ""))
        package = open(os.path.join(src, "Package.swift")).read()
        products = ["substatusd"] + (["substatus-bench-server"] if '"substatus-bench-server"' in package else [])
        for product in products:
            sh(["swift", "build", "-c", "release", "--product", product] + flags, cwd=src)
        with open(marker, "w") as f:
            json.dump({"sha": sha, "products": products, "flags": flags, "fix": why,
                       "built": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f)
    info = json.load(open(marker))
    notes = [f"built with `{' '.join(info['flags'])}` ({info['fix']})"] if info["flags"] else []
    subject = out(["git", "-C", ROOT, "log", "-1", "--format=%h %ad", "--date=format:%b %d", sha]).strip()
    return sha, Build(name, subject, os.path.join(src, ".build", "release"), sha, base, notes)


def pinned(cpus, nice=0):
    """The command prefix that pins to `cpus` (None: anywhere) at niceness `nice` (0: as is)."""
    return (["nice", "-n", str(nice)] if nice else []) + (["taskset", "-c", cpus] if cpus else [])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never accepted")


class Daemon:
    """A substatusd of `build` on data directory `data` (created when absent), pinned to `cpus`
    (None: not pinned). Only flags every build since the first wave knows."""

    def __init__(self, build, data, work, cpus="0", nice=0):
        os.makedirs(work, exist_ok=True)
        self.ready = os.path.join(work, "ready.json")
        self.operator_key = os.path.join(work, "operator.key")
        for f in [self.ready, self.operator_key]:
            if os.path.exists(f):
                os.remove(f)
        cmd = pinned(cpus, nice) + [
            build.substatusd, "--data-dir", data, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
            "--ready-file", self.ready, "--operator-key-file", self.operator_key, "--refresh-interval", "0"]
        print("+", " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = bench_e2e.wait_file(self.ready, self.proc)
        self.grpc, self.http, self.pid = r["grpc"], r["http"], self.proc.pid

    def transition_events(self):
        try:
            return bench_e2e.transition_events(self.http)
        except OSError:
            return 0

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def loadgen(args, flags, cpu="1"):
    cmd = pinned(cpu, args.nice if cpu else 0) + [args.loadgen] + flags
    print("+", " ".join(cmd), flush=True)
    text = out(cmd)
    lines = text.strip().splitlines()
    print(lines[-2], flush=True)
    r = json.loads(lines[-1].split(" ", 1)[1])
    if r.get("errors"):
        raise RuntimeError(f"{' '.join(flags)}: {r['errors']} errors, first: {r.get('first_error')}")
    return r


def as_of_ms():
    """UTC midnight of today: the instant the seeded histories are built around (both builds')."""
    now = int(time.time())
    return (now - now % 86_400) * 1000


def seeded_store(build, args, users, as_of):
    """The cached data directory of `build` holding the seeded users (made on first use)."""
    seed_src = os.path.join(ROOT, "Benchmarks", "E2ELoadgen", "seed.go")
    name = f"{build.cache_key}-seed{file_hash(seed_src)}-u{users}-{time.strftime('%Y%m%d', time.gmtime(as_of / 1000))}"
    d = os.path.join(build.cache_dir, name if build.cache_dir == os.path.join(COMPARE, "this") else "data-" + name)
    if os.path.exists(os.path.join(d, "bench.json")):
        return d
    tmp = d + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    work = tempfile.mkdtemp(dir=BUILD, prefix="compare-seed-")
    t0 = time.time()
    daemon = Daemon(build, tmp, work, cpus=None)
    try:
        loadgen(args, ["-mode", "seed", "-addr", daemon.grpc, "-operator-key-file", daemon.operator_key, "-out", tmp,
                       "-count", str(users), "-as-of", str(as_of), "-concurrency", "32"], cpu=None)
        # Builds with an event log append the time transitions now due; let that finish here rather
        # than on the pinned core while a shape is measured.
        last, quiet = -1, 0
        while quiet < 3:
            time.sleep(1)
            n = daemon.transition_events()
            quiet = quiet + 1 if n == last else 0
            last = n
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    os.rename(tmp, d)
    print(f"seeded {d} in {time.time() - t0:.0f} s", flush=True)
    return d


def peer_loadgen():
    """The peer's grpc-go load generator (../shared/peer-bench, built once into .build/peer-bench)."""
    return os.path.join(bench_e2e.build_peer(BUILD), "bin", "loadgen")


def peer_load(args, addr, pid, flags):
    cmd = pinned("1", args.nice) + [args.peer_loadgen, "-addr", addr, "-duration", f"{args.duration}s", "-warmup",
           f"{args.warmup}s", "-conns", "4", "-concurrency", "64", "-server-pid", str(pid)] + flags
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        raise RuntimeError(f"peer load generator failed: {p.stdout}\n{p.stderr}")
    d = {}
    for kv in line.split()[1:]:
        k, _, v = kv.partition("=")
        try:
            d[k] = float(v)
        except ValueError:
            d[k] = v
    print(f"  {flags[1]}: {d['qps']:,.0f} calls/s, {d.get('calls_per_srv_cpu_s', 0):,.0f} per server CPU-s, "
          f"p99 {d['p99_us']:,.0f} µs", flush=True)
    return {"calls_per_s": d["qps"], "calls_per_srv_cpu_s": d.get("calls_per_srv_cpu_s"), "p99_us": d["p99_us"],
            "srv_cores": d.get("srv_cores")}


def run_rounds(args, builds, stores, results, order_of):
    timing = ["-warmup", f"{args.warmup}s", "-duration", f"{args.duration}s"]
    read_shapes = [s for s in ["elig1x20", "elig50x20", "status"] if s in args.shapes]
    for rnd in range(args.rounds):
        order = order_of(rnd)
        print(f"== round {rnd + 1} of {args.rounds}: {' then '.join(b.name for b in order)}", flush=True)
        work = tempfile.mkdtemp(dir=BUILD, prefix="compare-round-")
        try:
            if read_shapes:
                daemons = {}
                try:
                    for b in order:  # a fresh copy of each build's store, both servers up
                        data = os.path.join(work, b.name, "data")
                        shutil.copytree(stores[b.name], data)
                        daemons[b.name] = Daemon(b, data, os.path.join(work, b.name), nice=args.nice)
                    for shape in read_shapes:
                        for b in order:
                            d = daemons[b.name]
                            spec = os.path.join(stores[b.name], "bench.json")
                            flags = ["-addr", d.grpc, "-spec", spec, "-server-pid", str(d.pid), "-now"] + timing
                            if shape == "status":
                                flags = ["-mode", "status"] + flags
                            else:
                                flags = ["-mode", "elig", "-users", "1" if shape == "elig1x20" else "50", "-products", "20"] + flags
                            results.append({"round": rnd, "build": b.name, "shape": shape, **loadgen(args, flags)})
                finally:
                    for d in daemons.values():
                        d.stop()
            if "ingest" in args.shapes:
                for b in order:
                    data = os.path.join(work, b.name, "fresh")
                    os.makedirs(data)
                    d = Daemon(b, data, os.path.join(work, b.name, "fresh-run"), nice=args.nice)
                    try:
                        r = loadgen(args, ["-mode", "seed", "-addr", d.grpc, "-operator-key-file", d.operator_key,
                                           "-out", os.path.join(work, b.name, "fresh-spec"), "-count", str(args.ingest_users),
                                           "-as-of", str(args.as_of), "-concurrency", "64", "-server-pid", str(d.pid)])
                    finally:
                        d.stop()
                    # Per transaction: the import's calls are users.
                    tx = r["transactions"]
                    r["calls_per_srv_cpu_s"] = tx / r["srv_cpu_s"] if r.get("srv_cpu_s") else None
                    r["calls_per_s"] = r["items_per_s"]
                    results.append({"round": rnd, "build": b.name, "shape": "ingest", **r})
            if "transport" in args.shapes and all(b.bench_server for b in builds):
                servers = {}
                try:
                    for b in order:
                        port = free_port()
                        servers[b.name] = (subprocess.Popen(pinned("0", args.nice) + [b.bench_server, "--listen",
                                                             f"127.0.0.1:{port}", "--threads", "1"],
                                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
                        wait_port(port)
                    for load, flags in [("elig20", ["-method", "elig", "-products", "20"]),
                                        ("echo64", ["-method", "echo", "-payload", "64"])]:
                        for b in order:
                            proc, port = servers[b.name]
                            r = peer_load(args, f"127.0.0.1:{port}", proc.pid, flags)
                            results.append({"round": rnd, "build": b.name, "shape": f"transport/{load}", **r})
                finally:
                    for proc, _ in servers.values():
                        proc.terminate()
                        proc.wait()
        finally:
            shutil.rmtree(work, ignore_errors=True)


def summarize(results):
    """{shape: {"this": {...medians}, "ref": {...}, "ratios": [per round], "p99_ratios": [...]}}."""
    table = {}
    for shape in dict.fromkeys(r["shape"] for r in results):
        rows = [r for r in results if r["shape"] == shape]
        entry = {"ratios": [], "p99_ratios": []}
        for name in ["this", "ref"]:
            mine = [r for r in rows if r["build"] == name]

            def med(k):
                vals = [r[k] for r in mine if isinstance(r.get(k), (int, float))]
                return statistics.median(vals) if vals else None
            entry[name] = {k: med(k) for k in ["calls_per_srv_cpu_s", "calls_per_s", "p99_us", "srv_cores"]}
        for rnd in sorted({r["round"] for r in rows}):
            a = next((r for r in rows if r["round"] == rnd and r["build"] == "this"), None)
            b = next((r for r in rows if r["round"] == rnd and r["build"] == "ref"), None)
            if a and b and a.get("calls_per_srv_cpu_s") and b.get("calls_per_srv_cpu_s"):
                entry["ratios"].append(a["calls_per_srv_cpu_s"] / b["calls_per_srv_cpu_s"])
            if a and b and a.get("p99_us") and b.get("p99_us"):
                entry["p99_ratios"].append(a["p99_us"] / b["p99_us"])
        table[shape] = entry
    return table


def machine_load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def section_block(args, sha, ref_label, this, ref, results, started, elapsed, load_start, load_end, busy, skipped):
    table = summarize(results)
    short = sha[:7]

    def f(x, digits=0):
        return "-" if x is None or x != x else f"{x:,.{digits}f}"

    def us(calls_per_cpu_s):
        return "-" if not calls_per_cpu_s else f"{1e6 / calls_per_cpu_s:,.1f}"

    command = f"make bench COMPARE={args.ref}" + (" QUICK=1" if args.quick else "")
    extra = [x for x in [f"--this {args.this}" if args.this else "",
                         f"--nice {args.nice}" if args.nice else "",
                         f"--rounds {args.rounds}" if args.rounds_given else "",
                         f"--duration {args.duration}" if args.duration_given else "",
                         f"--shapes {','.join(args.shapes)}" if args.shapes_given else "",
                         f"--users {args.users}" if args.users_given else ""] if x]
    invocation = f"scripts/bench --compare {args.ref}" + (" --quick" if args.quick else "") + "".join(" " + x for x in extra)
    # One block per ref and store size (a quick run does not replace a full one).
    key = (sha if not args.this else f"{args.this_sha}-vs-{sha}") + f"-u{args.users}"
    size = f"{args.users * 10:,} transactions"
    lines = [f"<!-- compare {key} begin -->",
             (f"### This build against {ref_label} (`{short}`), {size}" if not args.this
              else f"### `{args.this_sha[:7]}` against {ref_label} (`{short}`), {size}"), "",
             f"Measured on {started} by `{invocation}`" + ("" if extra else f" (`{command}`)") +
             f": {'this build' if not args.this else 'the commit'} `{this.describe}` against `{ref.describe}`; {args.rounds} rounds of"
             f" {args.duration} s per shape (after {args.warmup} s of warm-up), the two builds' order alternating"
             f" round by round; {elapsed / 60:.0f} min in all (builds and stores cached). Machine load"
             f" (`uptime` load averages, 1, 5, 15 min): {load_start} at the start, {load_end} at the end; both cores"
             f" {busy:.0f}% busy on average (this run and everything else).", "",
             f"Each build imported the same {args.users:,} users ({args.users * 10:,} transactions, 10 apps) through"
             " `ImportTransactions` into its own store; reads ask at the server's clock. Ratio = "
             + ("this build's" if not args.this else f"`{args.this_sha[:7]}`'s") + " calls"
             " per server CPU-second over the ref's, per round: the median, and the lowest and highest round"
             " (the spread). µs = server CPU per call (per transaction for ingest).", ""]
    lines += [f"Ref build: {n}." for n in ref.notes]
    lines += [f"Not measured: {s}." for s in skipped]
    if ref.notes or skipped:
        lines.append("")
    lines += ["| shape | this: calls per server CPU-s | ref: calls per server CPU-s | ratio this/ref (min-max) |"
              " this µs | ref µs | this p99 ms | ref p99 ms |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for shape in ["elig1x20", "elig50x20", "status", "ingest", "transport/elig20", "transport/echo64"]:
        e = table.get(shape)
        if not e:
            continue
        ratios = e["ratios"]
        ratio = (f"**{statistics.median(ratios):.2f}×** ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-")
        p99 = lambda r: "-" if r.get("p99_us") is None or shape == "ingest" else f"{r['p99_us'] / 1000:.2f}"
        lines.append(f"| {SHAPE_LABELS[shape]} | {f(e['this']['calls_per_srv_cpu_s'])} | {f(e['ref']['calls_per_srv_cpu_s'])} |"
                     f" {ratio} | {us(e['this']['calls_per_srv_cpu_s'])} | {us(e['ref']['calls_per_srv_cpu_s'])} |"
                     f" {p99(e['this'])} | {p99(e['ref'])} |")
    lines += ["", "<details><summary>Every round (server cores: how much of CPU 0 the server got)</summary>", "",
              "| shape | round | first | this: calls per server CPU-s | ref: calls per server CPU-s | ratio |"
              " this p99 ms | ref p99 ms | this server cores | ref server cores |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for shape in ["elig1x20", "elig50x20", "status", "ingest", "transport/elig20", "transport/echo64"]:
        for rnd in sorted({r["round"] for r in results if r["shape"] == shape}):
            a = next((r for r in results if r["shape"] == shape and r["round"] == rnd and r["build"] == "this"), {})
            b = next((r for r in results if r["shape"] == shape and r["round"] == rnd and r["build"] == "ref"), {})
            ratio = (f"{a['calls_per_srv_cpu_s'] / b['calls_per_srv_cpu_s']:.2f}×"
                     if a.get("calls_per_srv_cpu_s") and b.get("calls_per_srv_cpu_s") else "-")
            ms = lambda r: "-" if r.get("p99_us") is None or shape == "ingest" else f"{r['p99_us'] / 1000:.2f}"
            lines.append(f"| {SHAPE_LABELS[shape]} | {rnd + 1} | {'this' if rnd % 2 == 0 else 'ref'} |"
                         f" {f(a.get('calls_per_srv_cpu_s'))} | {f(b.get('calls_per_srv_cpu_s'))} | {ratio} | {ms(a)} | {ms(b)} |"
                         f" {f(a.get('srv_cores'), 2)} | {f(b.get('srv_cores'), 2)} |")
    lines += ["", "</details>", "", f"<!-- compare {key} end -->"]
    return key, lines


def write_section(path, key, block):
    """Replaces (or adds) this ref's block inside the Compare section of BENCHMARKS.md."""
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + "\n\n" + "\n".join([
            BEGIN, SECTION, "",
            "Written by `make bench COMPARE=<git ref>` (`scripts/bench_compare.py`), never by hand: each block is"
            " this build against one commit, measured interleaved in one run (see README, \"Comparing with an"
            " earlier commit\"). Each run replaces its ref's block of the same store size.", "", END]) + "\n"
    start, end = text.index(BEGIN), text.index(END)
    inner = text[start:end]
    b, e = f"<!-- compare {key} begin -->", f"<!-- compare {key} end -->"
    body = "\n".join(block)
    if b in inner and e in inner:
        inner = inner[:inner.index(b)] + body + inner[inner.index(e) + len(e):]
    else:
        inner = inner.rstrip("\n") + "\n\n" + body + "\n\n"
    text = text[:start] + inner + text[end:]
    with open(path, "w") as f:
        f.write(text)


def add_arguments(ap):
    ap.add_argument("--quick", action="store_true",
                    help="a store of 10,000 users, 3 rounds of 3 s (default: 100,000 users, 5 rounds of 5 s)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--duration", type=int, default=None, help="measured seconds per shape and build")
    ap.add_argument("--users", type=int, default=None, help="users in the store (10 transactions each)")
    ap.add_argument("--shapes", default=None, help="comma-separated, of: " + ", ".join(SHAPES))
    ap.add_argument("--this", default=None, metavar="REF2",
                    help="measure the commit REF2 (built like REF, cached) in place of this working tree's build")
    ap.add_argument("--nice", type=int, default=0,
                    help="run the servers and load generators at this niceness (e.g. -10 on a machine busy with"
                    " builds, so that the pinned server gets enough of its core for the short rounds; both builds alike)")


def run(args):
    args.rounds_given, args.duration_given = args.rounds is not None, args.duration is not None
    args.users_given, args.shapes_given = args.users is not None, args.shapes is not None
    args.rounds = args.rounds or (3 if args.quick else 5)
    args.duration = args.duration or (3 if args.quick else 5)
    args.warmup = 1 if args.quick else 2
    args.users = args.users or (10_000 if args.quick else 100_000)
    args.ingest_users = 5_000 if args.quick else 20_000
    args.shapes = [s for s in (args.shapes or ",".join(SHAPES)).split(",") if s]
    unknown = [s for s in args.shapes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shapes: {', '.join(unknown)} (known: {', '.join(SHAPES)})")
    args.as_of = as_of_ms()
    t0 = time.time()
    if args.this:
        args.this_sha, this = ref_build(args.this, name="this")
    else:
        this = this_build()
    sha, ref = ref_build(args.ref)
    args.loadgen = bench_e2e.build_loadgen()
    skipped = []
    if "transport" in args.shapes:
        if ref.bench_server and this.bench_server:
            args.peer_loadgen = peer_loadgen()
        else:
            skipped.append(f"the transport (`{sha[:7]}` has no substatus-bench-server)")
    stores = {}
    if any(s in args.shapes for s in ["elig1x20", "elig50x20", "status"]):
        for b in [this, ref]:
            stores[b.name] = seeded_store(b, args, args.users, args.as_of)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_start, (busy0, total0) = machine_load(), bench_e2e.machine_load()[1]
    results = []
    run_rounds(args, [this, ref], stores, results, lambda rnd: [this, ref] if rnd % 2 == 0 else [ref, this])
    load_end, (busy1, total1) = machine_load(), bench_e2e.machine_load()[1]
    busy = (busy1 - busy0) / max(1, total1 - total0) * 100
    os.makedirs(COMPARE, exist_ok=True)
    log = os.path.join(COMPARE, f"results-{sha[:12]}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    with open(log, "w") as fo:
        for r in results:
            fo.write(json.dumps(r) + "\n")
    label = KNOWN_REFS.get(sha[:7], f"`{args.ref}`")
    key, block = section_block(args, sha, label, this, ref, results, started, time.time() - t0, load_start, load_end, busy, skipped)
    print("\n".join(block))
    print(f"every measurement: {log}")
    return key, block


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ref", help="a git ref: commit, branch or tag")
    ap.add_argument("--print", action="store_true", help="print the block instead of writing BENCHMARKS.md")
    add_arguments(ap)
    args = ap.parse_args()
    os.chdir(ROOT)
    key, block = run(args)
    if args.print:
        return
    write_section(os.path.join(ROOT, "BENCHMARKS.md"), key, block)
    print("wrote its block of the Compare section of BENCHMARKS.md")
    import readme_figures  # README's figures follow BENCHMARKS.md
    readme_figures.main()


if __name__ == "__main__":
    main()
