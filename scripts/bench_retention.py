#!/usr/bin/env python3
"""The Retention Messaging endpoint under load: the "Retention Messaging endpoint" section of
BENCHMARKS.md (docs/architecture.md "Performance": p99 <= 5 ms).

`substatusd` (release, pinned to CPU 0, a fresh SQLite store) answers Apple's realtime requests on
`POST /v1/apps/{app_id}/apple/retention`; `appstore-sim` (release, pinned to CPU 1) plays Apple:

1. Seeds the store the way Apple does: N sandbox subscribers buy (a quarter `pro.yearly`, a
   quarter `pro.weekly`, half `pro.monthly`), the simulated clock runs 16 minutes (sandbox
   periods: a few renewals each), and every V2 notification reaches substatusd over HTTP.
2. Puts retention rules through the CLI (`substatus retention put APP --file RULES.json`): the
   monthly subscribers with 3 paid periods get a promotional offer (signed with the app's In-App
   Purchase key for each answer), the yearly ones a message, the weekly ones the default: half
   the answers are signed offers.
3. Runs the simulator's performance test (`POST /control/apps/{bundle}/retention-performance-test`,
   Apple's, going round the N subscribers) at several loads (requests in flight): each request is
   a freshly signed JWS (signed before the run starts), verified by substatusd like a V2
   notification; every answer is judged as Apple would (the offer's signature checked with the
   key's public half). Reports Apple's figures (p50, p90, p99, max, success rate) from the
   simulator's clock, the requests/s, and substatusd's CPU per request (from /proc).

The machine's load average is reported beside the figures. scripts/bench calls
`section(build_dir, quick)`; run alone it measures and replaces its section of BENCHMARKS.md:

    scripts/bench_retention.py [--quick] [--users N] [--requests N] [--loads 1,8,32] [--no-build] [--print]
                               [--configuration debug]
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmarks_md import replace_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TITLE = "## Retention Messaging endpoint"
MASTER_KEY = "5eb0" * 16  # the bench daemon's master key (the In-App Purchase key is sealed with it)
BUNDLE = "com.example.retention"
APPLE_APP_ID = 6_400_000_035
OFFER_MESSAGE = "7a1e0000-0000-4000-8000-000000000001"
THANKS_MESSAGE = "7a1e0000-0000-4000-8000-000000000002"
DEFAULT_MESSAGE = "7a1e0000-0000-4000-8000-000000000000"
RULES = {
    "defaultMessageIdentifier": DEFAULT_MESSAGE,
    "rules": [
        {"ruleId": "refunded", "when": {"refunded": True}, "message": {"messageIdentifier": THANKS_MESSAGE}},
        {"ruleId": "billing-issue", "when": {"billingIssue": True}, "message": {"messageIdentifier": THANKS_MESSAGE}},
        {"ruleId": "loyal-monthly", "when": {"productIds": ["pro.monthly"], "minPaidPeriods": 3},
         "promotionalOffer": {"messageIdentifier": OFFER_MESSAGE, "offerId": "comeback"}},
        {"ruleId": "yearly-thanks", "when": {"productIds": ["pro.yearly"]},
         "message": {"messageIdentifier": THANKS_MESSAGE}},
    ],
}
SIM_PRODUCTS = [
    {"product_id": "pro.monthly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1M",
     "level": 2, "price": 9.99, "promotional_offers": [{"id": "comeback", "type": "pay_as_you_go", "periods": 2, "price": 4.99}]},
    {"product_id": "pro.yearly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1Y",
     "level": 1, "price": 99.99},
    {"product_id": "pro.weekly", "type": "auto_renewable", "subscription_group_id": "pro", "duration": "P1W",
     "level": 3, "price": 2.99},
]
CATALOG = {"products": [
    {"productId": "pro.monthly", "type": "PRODUCT_TYPE_AUTO_RENEWABLE", "subscriptionGroupId": "pro",
     "duration": "P1M", "promotionalOfferIds": ["comeback"]},
    {"productId": "pro.yearly", "type": "PRODUCT_TYPE_AUTO_RENEWABLE", "subscriptionGroupId": "pro", "duration": "P1Y"},
    {"productId": "pro.weekly", "type": "PRODUCT_TYPE_AUTO_RENEWABLE", "subscriptionGroupId": "pro", "duration": "P1W"},
]}


def sh(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, text=True, **kw)


def build():
    for product in ["substatusd", "substatus", "appstore-sim"]:
        sh(["swift", "build", "-c", "release", "--product", product], cwd=ROOT)


def wait_file(path, proc, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"{path} never appeared")


def http(method, url, body=None, timeout=600):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        text = reply.read()
        return json.loads(text) if text else {}


def cpu_seconds(pid):
    """utime + stime of the process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(build_dir, users, requests, loads, configuration="release"):
    """Runs the whole measurement; returns a dict of the figures."""
    release = os.path.join(build_dir, configuration)
    work = tempfile.mkdtemp(prefix="bench-retention-")
    env = dict(os.environ, SUBSTATUS_MASTER_KEY=MASTER_KEY)
    procs = []
    try:
        root = os.path.join(work, "root.pem")
        sim_ready = os.path.join(work, "sim.json")
        start_ms = int(time.time() * 1000) - 3_600_000
        sim = subprocess.Popen(["taskset", "-c", "1", os.path.join(release, "appstore-sim"), "--listen", "127.0.0.1:0",
                                "--ready-file", sim_ready, "--time-scale", "0", "--start-ms", str(start_ms),
                                "--root-ca-out", root], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(sim)
        sim_addr = "http://" + wait_file(sim_ready, sim)["http"]
        ready = os.path.join(work, "ready.json")
        server = subprocess.Popen(
            ["taskset", "-c", "0", os.path.join(release, "substatusd"), "--data-dir", os.path.join(work, "data"),
             "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--ready-file", ready,
             "--operator-key-file", os.path.join(work, "operator.key"), "--refresh-interval", "0",
             "--apple-root-ca", root, "--http-max-connections-per-address", "256"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(server)
        addrs = wait_file(ready, server)

        def cli(key, *args, stdin=None):
            text = subprocess.run([os.path.join(release, "substatus"), "--addr", addrs["grpc"], "--key", key, "--json", *args],
                                  check=True, text=True, input=stdin, stdout=subprocess.PIPE).stdout
            return json.loads(text) if text.strip() else {}

        operator = open(os.path.join(work, "operator.key")).read().strip()
        admin = cli(operator, "tenant", "create", "bench-retention")["adminKey"]
        app = cli(admin, "app", "register", "--bundle-id", BUNDLE, "--apple-app-id", str(APPLE_APP_ID))["app"]["appId"]
        catalog = os.path.join(work, "catalog.json")
        json.dump(CATALOG, open(catalog, "w"))
        cli(admin, "product", "put", app, "--file", catalog)
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
        key_file = os.path.join(work, "key.p8")
        with open(key_file, "w") as f:
            f.write(pem)
        issuer = "57246542-96fe-1a63-e053-0824d011072a"
        cli(admin, "app", "set-iap-key", app, "--issuer-id", issuer, "--key-id", "RETENTION1", "--key-file", key_file)
        rules = os.path.join(work, "rules.json")
        json.dump(RULES, open(rules, "w"))
        cli(admin, "retention", "put", app, "--file", rules)

        http("POST", f"{sim_addr}/control/apps", {
            "bundle_id": BUNDLE, "apple_app_id": APPLE_APP_ID, "shared_secret": "0123456789abcdef",
            "notification_version": "v2", "notification_url": f"http://{addrs['http']}/v1/apps/{app}/apple/notifications",
            "retention_url": f"http://{addrs['http']}/v1/apps/{app}/apple/retention", "products": SIM_PRODUCTS})
        http("POST", f"{sim_addr}/control/apps/{BUNDLE}/api-keys",
             {"issuer_id": issuer, "key_id": "RETENTION1", "public_key_pem": public})

        # The seeded store: every subscriber's history arrives as Apple's signed notifications.
        t0 = time.time()
        originals = []
        for i in range(users):
            product = "pro.yearly" if i % 4 == 0 else "pro.weekly" if i % 4 == 1 else "pro.monthly"
            http("POST", f"{sim_addr}/control/users", {"user_id": f"u{i}", "environment": "sandbox"})
            bought = http("POST", f"{sim_addr}/control/apps/{BUNDLE}/users/u{i}/purchase", {"product_id": product})
            originals.append(bought["transactions"][0]["original_transaction_id"])
        http("POST", f"{sim_addr}/control/clock/advance", {"minutes": 16})
        drained = http("POST", f"{sim_addr}/control/notifications/drain", {"timeout_ms": 600_000})
        if not drained.get("drained"):
            raise RuntimeError("the seed notifications were not all delivered")
        deliveries = http("GET", f"{sim_addr}/control/notifications").get("notifications", [])
        failed = [d for d in deliveries if d.get("state") != "delivered"]
        seed_seconds = time.time() - t0
        print(f"seeded {users} subscribers, {len(deliveries)} notifications in {seed_seconds:.0f} s; not delivered: {len(failed)}", flush=True)
        if failed:
            raise RuntimeError(f"{len(failed)} seed notifications were refused, e.g. {failed[0]}")

        def run(total, in_flight):
            before, load = cpu_seconds(server.pid), os.getloadavg()[0]
            t = time.time()
            result = http("POST", f"{sim_addr}/control/apps/{BUNDLE}/retention-performance-test", {
                "original_transaction_ids": originals, "total_requests": total,
                "max_concurrent_requests": in_flight})
            wall = time.time() - t
            result["server_cpu_us"] = (cpu_seconds(server.pid) - before) / total * 1e6
            result["load"] = load
            result["wall_s"] = wall
            return result

        run(min(1000, requests), 8)  # warm-up: connections, page cache, summaries
        rows = []
        for in_flight in loads:
            result = run(requests, in_flight)
            print(f"{in_flight} in flight: {json.dumps(result)}", flush=True)
            rows.append((in_flight, result))
        return {"users": users, "notifications": len(deliveries), "seed_s": seed_seconds, "rows": rows,
                "requests": requests}
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


def section(build_dir, quick=False, users=None, requests=None, loads=None, started=None, configuration="release"):
    users = users or (500 if quick else 2_000)
    requests = requests or (3_000 if quick else 10_000)
    loads = loads or [1, 8, 32]
    started = started or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    m = measure(build_dir, users, requests, loads, configuration)
    lines = [TITLE, "",
             f"Measured on {started} by `scripts/bench_retention.py` ({'--quick' if quick else 'default settings'}). "
             f"`substatusd` ({configuration}, pinned to CPU 0, a fresh SQLite store) answers Apple's realtime requests on "
             f"`POST /v1/apps/{{app_id}}/apple/retention`; `appstore-sim` ({configuration}, pinned to CPU 1) plays Apple with its "
             f"performance test. The store was seeded through Apple's own channel: {m['users']:,} sandbox subscribers, "
             f"{m['notifications']:,} signed V2 notifications ({m['seed_s']:.0f} s). Rules put with "
             "`substatus retention put`: half the subscribers get a promotional offer (signed with the app's In-App "
             "Purchase key for each answer), a quarter a message, a quarter the default. Every request is a JWS "
             "signed for it (before the run), verified by substatusd like a V2 notification; every answer is "
             "judged as Apple would (the offer's signature checked with the key's public half).", "",
             "Target: p99 ≤ 5 ms (Apple shows its default message after about 700 ms). Latencies are the "
             "simulator's, from sending a request to the whole answer, on the same machine as the server.", "",
             "| in flight | requests | requests/s | p50 ms | p90 ms | p99 ms | max ms | success | server CPU µs/request | load avg |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for in_flight, r in m["rows"]:
        t = r["responseTimes"]
        duration = r["config"]["totalDuration"] / 1000
        lines.append(f"| {in_flight} | {r['config']['totalRequests']:,} | {r['config']['totalRequests'] / max(duration, 1e-9):,.0f} "
                     f"| {t['p50']:.2f} | {t['p90']:.2f} | {t['p99']:.2f} | {t['max']:.1f} | {r['successRate']} % "
                     f"({r['result']}) | {r['server_cpu_us']:.0f} | {r['load']:.1f} |")
    worst = max(r["responseTimes"]["p99"] for _, r in m["rows"])
    lines += ["", f"Highest p99: {worst:.2f} ms: {'meets' if worst <= 5 else 'misses'} the target.", ""]
    failures = {k: v for _, r in m["rows"] for k, v in (r.get("failures") or {}).items()}
    if failures:
        lines += [f"Failures (Apple's SendAttemptResult): {failures}; problems: {[p for _, r in m['rows'] for p in r.get('problems', [])][:5]}", ""]
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--users", type=int)
    ap.add_argument("--requests", type=int)
    ap.add_argument("--loads", default="", help="requests in flight, comma-separated (default 1,8,32)")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--print", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    ap.add_argument("--configuration", default="release", help="debug: the debug binaries (checks the script, not figures)")
    args = ap.parse_args()
    if not args.no_build:
        build()
    loads = [int(x) for x in args.loads.split(",") if x] or None
    lines = section(os.path.join(ROOT, ".build"), args.quick, args.users, args.requests, loads,
                    configuration=args.configuration)
    if args.print:
        print("\n".join(lines))
    else:
        replace_section(os.path.join(ROOT, "BENCHMARKS.md"), TITLE, lines)
        print("replaced in BENCHMARKS.md:", TITLE)


if __name__ == "__main__":
    main()
