#!/usr/bin/env python3
"""A/B of CheckEligibility (and ImportTransactions) through a real substatusd: another build's
release `substatusd` and `substatus-e2e-datagen` against this tree's, interleaved, on the same
machine with the same load generator (Benchmarks/E2ELoadgen), each on its own data directory made
by its own datagen (same generator, same seed: the same users and histories). Calls per server
CPU-second are the figures to compare on a shared machine (docs/evaluation-cache.md, "Per-user
summaries", "Measured").

  swift build -c release --product substatusd --product substatus-e2e-datagen   # this tree
  AB_BASE_SERVER=/path/to/base/substatusd AB_BASE_DATAGEN=/path/to/base/substatus-e2e-datagen \
    scripts/summary_ab.py   # AB_USERS (10000), AB_DURATION (6s), AB_ROUNDS (2), AB_INGEST=1
"""
import json, os, shutil, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_e2e as b  # noqa: E402

USERS = int(os.environ.get("AB_USERS", "10000"))
DURATION = os.environ.get("AB_DURATION", "6s")
ROUNDS = int(os.environ.get("AB_ROUNDS", "2"))
builds = {
    "base": (os.environ["AB_BASE_SERVER"], os.environ["AB_BASE_DATAGEN"]),
    "summary": (os.path.join(b.RELEASE, "substatusd"), os.path.join(b.RELEASE, "substatus-e2e-datagen")),
}


def data(label, datagen, server):
    d = os.path.join(b.BUILD, "summary-ab", f"data-{label}-u{USERS}")
    if not os.path.exists(os.path.join(d, "bench.json")):
        shutil.rmtree(d, ignore_errors=True)
        t0 = time.time()
        b.sh([datagen, "--dir", d, "--users", str(USERS)])
        print(f"built {d} in {time.time() - t0:.0f} s", flush=True)
    # The transition catch-up (as bench_e2e.catch_up), with this build's server.
    marker = os.path.join(d, "caught-up")
    if not os.path.exists(marker):
        work = tempfile.mkdtemp(prefix="ab-catchup-")
        ready = os.path.join(work, "ready.json")
        proc = subprocess.Popen([server, "--data-dir", d, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                                 "--ready-file", ready, "--operator-key-file", os.path.join(work, "op.key"),
                                 "--refresh-interval", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            http = b.wait_file(ready, proc)["http"]
            last, quiet = -1, 0
            while quiet < 3:
                time.sleep(2)
                n = b.transition_events(http)
                quiet = quiet + 1 if n == last else 0
                last = n
        finally:
            proc.terminate()
            proc.wait()
        open(marker, "w").close()
    return d


def serve(server, cached, work):
    d = os.path.join(work, "data")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(cached, d)
    ready = os.path.join(work, "ready.json")
    if os.path.exists(ready):
        os.remove(ready)
    proc = subprocess.Popen(["taskset", "-c", "0", server, "--data-dir", d, "--grpc-listen", "127.0.0.1:0",
                             "--http-listen", "127.0.0.1:0", "--ready-file", ready, "--operator-key-file",
                             os.path.join(work, "op.key"), "--refresh-interval", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = b.wait_file(ready, proc)
    return proc, r, os.path.join(d, "bench.json")


def metrics(http):
    import urllib.request
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as r:
        return [l for l in r.read().decode().splitlines() if l.startswith("substatus_summary")]


def main():
    os.chdir(ROOT)
    loadgen = b.build()
    dirs = {label: data(label, dg, srv) for label, (srv, dg) in builds.items()}
    results = {}
    load0 = b.machine_load()
    for rnd in range(ROUNDS):
        for label in (["base", "summary"] if rnd % 2 == 0 else ["summary", "base"]):
            work = tempfile.mkdtemp(prefix=f"ab-{label}-")
            proc, r, spec = serve(builds[label][0], dirs[label], work)
            try:
                common = ["-addr", r["grpc"], "-spec", spec, "-server-pid", str(proc.pid), "-warmup", "2s", "-duration", DURATION]
                for u, p in [(1, 20), (50, 20)]:
                    res = b.load(loadgen, None, "-mode", "elig", "-users", str(u), "-products", str(p), *common)
                    results.setdefault((label, u, p), []).append(res)
                if os.environ.get("AB_INGEST"):
                    res = b.load(loadgen, None, "-mode", "ingest", "-batch", "10", *common)
                    results.setdefault((label, 0, 10), []).append(res)
                if label == "summary":
                    print("\n".join(metrics(r["http"])), flush=True)
            finally:
                proc.terminate()
                proc.wait()
                shutil.rmtree(work, ignore_errors=True)
    load1 = b.machine_load()
    print(f"load average {load0[0]} at the start, {load1[0]} at the end; "
          f"both cores {100 * (load1[1][0] - load0[1][0]) / max(1, load1[1][1] - load0[1][1]):.0f}% busy")
    for (label, u, p), rs in sorted(results.items()):
        for res in rs:
            print(label, f"{u}x{p}", json.dumps({k: res.get(k) for k in ["calls_per_s", "calls_per_srv_cpu_s", "p50_us", "p99_us", "srv_cores", "rss_mb"]}))


main()
