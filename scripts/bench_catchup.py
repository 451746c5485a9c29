#!/usr/bin/env python3
"""Background work yields (issue 32): CheckEligibility 1 x 20 while substatusd catches up on tens of
thousands of time-driven transitions, against the same server idle, in one run.

The e2e store of scripts/bench_e2e.py (100,000 users, 1M transactions) as its generator leaves it,
before any substatusd ran on it (kept apart from bench_e2e's cache, which is caught up): the
generator writes histories at past instants, so every time-driven transition since is due at once,
which is what a server restarted after a long outage finds. With --days N the service clock also
runs N days ahead of real time (`--clock-url` to a clock served here), making later ones due too.
For each build and round:

1. "catch-up": a fresh copy of the store, substatusd pinned to CPU 0, the e2e load generator
   (CheckEligibility 1 user x 20 products, 64 in flight) on CPU 1 from the server's start: p50/p99
   and calls/s while the scheduler appends; the transition events appended by the end of the load
   (`substatus_events_appended_total{source="transition"}`);
2. then the same server is left until its scheduler has appended nothing for 6 s (the time the
   whole catch-up took is printed), and the same load runs again: "idle";
3. "with no calls": another fresh copy, no load at all, the time until the scheduler has caught up
   (an idle server catches up flat out: its scheduler pauses only while calls are in flight).

Builds and rounds are interleaved (A B A B ...), so the machine's load falls on both alike.

Usage: scripts/bench_catchup.py [--days 0] [--rounds 2] [--duration 10] [--datagen PATH]
       [--build DIR] [--compare-build DIR]   (release directories holding substatusd)
"""
import argparse, http.server, json, os, socketserver, statistics, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_e2e  # noqa: E402  (the cached store, the server and the load generator)


def serve_clock(offset_ms):
    """A clock URL (GET answers {"now_ms": real time + offset_ms}); returns (url, server)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"now_ms": int(time.time() * 1000) + offset_ms}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/clock", server


def caught_up(http, quiet_s=6, limit_s=900):
    """Waits until the transition count stays still for quiet_s; returns (events, seconds waited)."""
    t0, last, still = time.time(), -1, 0.0
    while still < quiet_s and time.time() - t0 < limit_s:
        time.sleep(1)
        n = bench_e2e.transition_events(http)
        still = still + 1 if n == last else 0
        last = n
    return last, time.time() - t0


def fresh_data_dir(datagen, users=100_000):
    """The generator's store for `users` users, never opened by substatusd (built on first use)."""
    d = os.path.join(bench_e2e.BUILD, "bench-catchup-data", f"u{users}")
    if not os.path.exists(os.path.join(d, "bench.json")):
        bench_e2e.shutil.rmtree(d, ignore_errors=True)
        bench_e2e.sh([datagen, "--dir", d, "--users", str(users)])
    return d


def one_round(label, binary, cached, work, loadgen, clock_url, args):
    extra = ["--clock-url", clock_url] if clock_url else []
    server = bench_e2e.Server(cached, work, extra=extra, binary=binary)
    try:
        common = ["-addr", server.grpc, "-spec", server.spec, "-server-pid", str(server.pid),
                  "-warmup", "0s", "-duration", f"{args.duration}s"]
        started = time.time()
        busy = bench_e2e.load(loadgen, args, "-mode", "elig", "-users", "1", "-products", "20", *common)
        during = bench_e2e.transition_events(server.http)
        total, waited = caught_up(server.http)
        idle = bench_e2e.load(loadgen, args, "-mode", "elig", "-users", "1", "-products", "20", *common)
        # The catch-up ended about 6 s (the quiet wait) before the wait did.
        result = {"build": label, "catch_up": busy, "idle": idle, "events_during_load": during,
                  "events_total": total, "catch_up_s": time.time() - started - idle["secs"] - 6}
    finally:
        server.stop()
    # 3. The same catch-up with no calls at all, on another fresh copy: how long it takes flat out.
    server = bench_e2e.Server(cached, work, extra=extra, binary=binary)
    try:
        started = time.time()
        quiet_total, waited = caught_up(server.http)
        result["no_calls_events_total"] = quiet_total
        result["no_calls_catch_up_s"] = waited - 6
    finally:
        server.stop()
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=0, help="how far ahead the service clock runs (0: real time)")
    ap.add_argument("--datagen", default=os.path.join(bench_e2e.RELEASE, "substatus-e2e-datagen"),
                    help="the store generator (substatus-e2e-datagen)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10, help="seconds of each load")
    ap.add_argument("--build", default=bench_e2e.RELEASE, help="release directory of this build")
    ap.add_argument("--compare-build", default=None, help="release directory of another build (interleaved)")
    args = ap.parse_args()
    os.chdir(bench_e2e.ROOT)
    loadgen = os.path.join(bench_e2e.BUILD, "e2e-loadgen", "bin", "e2e-loadgen")
    if not os.path.exists(loadgen):
        loadgen = bench_e2e.build()
    cached = fresh_data_dir(args.datagen)
    clock_url, clock = serve_clock(args.days * 86_400_000) if args.days else (None, None)
    builds = [("this build", os.path.join(args.build, "substatusd"))]
    if args.compare_build:
        builds.append(("compare", os.path.join(args.compare_build, "substatusd")))
    work = tempfile.mkdtemp(dir=bench_e2e.BUILD, prefix="bench-catchup-")
    results = []
    load_start, busy_start = bench_e2e.machine_load()
    try:
        for r in range(args.rounds):
            for label, binary in builds:
                print(f"== round {r + 1}: {label} ({binary})", flush=True)
                results.append(one_round(label, binary, cached, work, loadgen, clock_url, args))
    finally:
        if clock:
            clock.shutdown()
        bench_e2e.shutil.rmtree(work, ignore_errors=True)
    load_end, busy_end = bench_e2e.machine_load()
    busy = (busy_end[0] - busy_start[0]) / max(1e-9, busy_end[1] - busy_start[1]) * 100
    print(f"\nload average {load_start:.1f} -> {load_end:.1f}; both CPUs {busy:.0f} % busy over the run")
    print("| build | round | p99 catching up (ms) | p99 idle (ms) | ratio | calls/s catching up | calls/s idle | "
          "transition events by the load's end | in all | catch-up took (s) | with no calls (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, x in enumerate(results):
        c, i = x["catch_up"], x["idle"]
        print(f"| {x['build']} | {n // len(builds) + 1} | {c['p99_us'] / 1000:.2f} | {i['p99_us'] / 1000:.2f} | "
              f"{c['p99_us'] / i['p99_us']:.2f} | {c['calls_per_s']:.0f} | {i['calls_per_s']:.0f} | "
              f"{x['events_during_load']} | {x['events_total']} | ~{x['catch_up_s']:.0f} | "
              f"~{x['no_calls_catch_up_s']:.0f} ({x['no_calls_events_total']} events) |")
    for label, _ in builds:
        ratios = [x["catch_up"]["p99_us"] / x["idle"]["p99_us"] for x in results if x["build"] == label]
        print(f"{label}: median p99 ratio (catching up / idle) {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
