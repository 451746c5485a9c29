#!/usr/bin/env python3
"""SQLite vs PostgreSQL: the same storage workload on both stores, for BENCHMARKS.md.

Starts a throwaway PostgreSQL server the way the tests do (Tests/SubscriptionStoragePostgresTests/
PostgresServer.swift: initdb in a temporary directory, as `nobody` when run as root, on a free
port, its unix socket in that directory) but with PostgreSQL's durable defaults (fsync on,
synchronous_commit on), runs `.build/release/substatus-storage-bench` once with SQLite
(synchronous=FULL) and once with `--store postgres://...`, and renders a comparison table.

scripts/bench calls `section(build_dir, transactions)`; run alone it measures and replaces the
"SQLite vs PostgreSQL" section of BENCHMARKS.md:

    scripts/bench_postgres.py [--transactions N] [--no-build]
"""
import argparse, glob, json, os, re, shutil, socket, statistics, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmarks_md import replace_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TITLE = "## SQLite vs PostgreSQL (storage)"


def pg_bin():
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    if not dirs or not os.path.exists(os.path.join(dirs[-1], "initdb")):
        raise RuntimeError("PostgreSQL is not installed: run scripts/install-deps --test")
    return dirs[-1]


def as_server_user(argv):
    """PostgreSQL refuses to run as root: run its tools as `nobody` then."""
    return (["/usr/sbin/runuser", "-u", "nobody", "--"] if os.getuid() == 0 else []) + argv


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """A throwaway cluster with PostgreSQL's durable defaults; `stop()` deletes it."""

    def __init__(self):
        self.bin = pg_bin()
        self.dir = tempfile.mkdtemp(prefix="substatus-bench-pg-")
        if os.getuid() == 0:
            os.chown(self.dir, 65534, 65534)
        self.data = os.path.join(self.dir, "data")
        self.started = False
        subprocess.run(as_server_user([os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres",
                                       "-A", "trust", "-E", "UTF8", "--locale=C", "--no-instructions"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        last = ""
        for _ in range(5):  # the port was free a moment ago; retry if another process took it
            self.port = free_port()
            r = subprocess.run(as_server_user([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-l",
                                               os.path.join(self.dir, "server.log"), "-w", "-t", "60", "-o",
                                               f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir}", "start"]),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode == 0:
                self.started = True
                break
            last = r.stdout
        if not self.started:
            self.stop()
            raise RuntimeError(f"cannot start PostgreSQL: {last}")
        subprocess.run([os.path.join(self.bin, "psql"), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                        "-d", "postgres", "-c", "CREATE DATABASE bench"], check=True)
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/bench"
        text = subprocess.run([os.path.join(self.bin, "postgres"), "--version"], stdout=subprocess.PIPE,
                              text=True).stdout
        self.version = "PostgreSQL " + (re.search(r"\d+(\.\d+)+", text) or re.search(r".*", text)).group(0)

    def pss_mb(self):
        """Proportional set size of the postmaster and its children (shared memory counted once)."""
        try:
            master = int(open(os.path.join(self.data, "postmaster.pid")).readline())
        except (OSError, ValueError):
            return 0.0
        total = 0
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                pid = int(stat.split("/")[2])
                ppid = int(open(stat).read().rsplit(")", 1)[1].split()[1])
                if pid != master and ppid != master:
                    continue
                for line in open(f"/proc/{pid}/smaps_rollup"):
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
            except (OSError, ValueError, IndexError):
                continue
        return total / 1024

    def stop(self):
        if self.started:
            subprocess.run(as_server_user([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "fast", "-w", "stop"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)


def run_bench(build_dir, transactions, store=None, sampler=None):
    binary = os.path.join(build_dir, "release", "substatus-storage-bench")
    d = tempfile.mkdtemp(dir=build_dir)
    argv = [binary, "--transactions", str(transactions), "--dir", d] + (["--store", store] if store else [])
    print("+", " ".join(argv), flush=True)
    peak = [0.0]
    done = threading.Event()

    def sample():
        while not done.wait(0.25):
            peak[0] = max(peak[0], sampler())

    thread = threading.Thread(target=sample, daemon=True) if sampler else None
    try:
        if thread:
            thread.start()
        text = subprocess.run(argv, check=True, text=True, stdout=subprocess.PIPE).stdout
    finally:
        done.set()
        if thread:
            thread.join()
        shutil.rmtree(d, ignore_errors=True)
    line = next(l for l in text.splitlines() if l.startswith("summary: "))
    figures = json.loads(line[len("summary: "):])
    figures["server_pss_mb"] = peak[0]
    return text.strip(), figures


def section(build_dir, transactions=100_000, reps=3):
    """Measures both stores; returns the markdown lines of the section."""
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    sqlite_runs, pg_runs = [], []
    for _ in range(reps):  # interleaved, each PostgreSQL run on a fresh server
        sqlite_text, figures = run_bench(build_dir, transactions)
        sqlite_runs.append(figures)
        server = Server()
        try:
            pg_text, figures = run_bench(build_dir, transactions, server.url, server.pss_mb)
            pg_runs.append(figures)
            version = server.version
        finally:
            server.stop()

    def medians(runs):
        return {k: statistics.median(r[k] for r in runs if k in r) for k in runs[0]}

    s, p = medians(sqlite_runs), medians(pg_runs)

    def us(x):
        return f"{x:,.0f} µs" if x >= 10 else f"{x:,.1f} µs"

    def ratio(a, b):
        return f"{a / b:.1f}×" if b else "-"

    rows = [
        ("ingest, transactions/s durably committed (8 writers, 100 tx per call)",
         f"{s['ingest_tx_per_s']:,.0f}", f"{p['ingest_tx_per_s']:,.0f}", ratio(s['ingest_tx_per_s'], p['ingest_tx_per_s'])),
        ("history of one user (10 tx + renewal info), p50", us(s["history_p50_us"]), us(p["history_p50_us"]),
         ratio(p["history_p50_us"], s["history_p50_us"])),
        ("history of one user, p99", us(s["history_p99_us"]), us(p["history_p99_us"]),
         ratio(p["history_p99_us"], s["history_p99_us"])),
        ("history reads/s, 4 concurrent readers", f"{s['concurrent_reads_per_s']:,.0f}",
         f"{p['concurrent_reads_per_s']:,.0f}", ratio(s['concurrent_reads_per_s'], p['concurrent_reads_per_s'])),
        ("histories of 10 users in one read, p50", us(s["histories10_p50_us"]), us(p["histories10_p50_us"]),
         ratio(p["histories10_p50_us"], s["histories10_p50_us"])),
        ("notification applied (new id + one user's renewal, committed), p50", us(s["notification_p50_us"]),
         us(p["notification_p50_us"]), ratio(p["notification_p50_us"], s["notification_p50_us"])),
        ("notification applied, p99", us(s["notification_p99_us"]), us(p["notification_p99_us"]),
         ratio(p["notification_p99_us"], s["notification_p99_us"])),
        ("notification id probe (isNotificationProcessed), p50", us(s["notification_seen_p50_us"]),
         us(p["notification_seen_p50_us"]), ratio(p["notification_seen_p50_us"], s["notification_seen_p50_us"])),
        ("listUsers, a page of 100, p50", us(s["list_users_p50_us"]), us(p["list_users_p50_us"]),
         ratio(p["list_users_p50_us"], s["list_users_p50_us"])),
        ("app(id:) (SQLite: read cache; PostgreSQL: a query)", us(s["app_p50_us"]), us(p["app_p50_us"]),
         ratio(p["app_p50_us"], s["app_p50_us"])),
        ("mixed 3 s: ingest tx/s while 4 readers read", f"{s['mixed_ingest_tx_per_s']:,.0f}",
         f"{p['mixed_ingest_tx_per_s']:,.0f}", ratio(s['mixed_ingest_tx_per_s'], p['mixed_ingest_tx_per_s'])),
        ("mixed 3 s: history reads/s (p99)", f"{s['mixed_reads_per_s']:,.0f} ({us(s['mixed_read_p99_us'])})",
         f"{p['mixed_reads_per_s']:,.0f} ({us(p['mixed_read_p99_us'])})", ratio(s['mixed_reads_per_s'], p['mixed_reads_per_s'])),
        ("database size (SQLite: file + WAL; PostgreSQL: pg_database_size)",
         f"{(s['db_bytes'] + s.get('wal_bytes', 0)) / 1e6:,.1f} MB", f"{p['db_bytes'] / 1e6:,.1f} MB",
         ratio(p['db_bytes'], s['db_bytes'] + s.get('wal_bytes', 0))),
        ("bench process peak RSS", f"{s['rss_mb']:,.1f} MB", f"{p['rss_mb']:,.1f} MB", "-"),
        ("PostgreSQL server peak PSS (postmaster + backends)", "-", f"{p['server_pss_mb']:,.1f} MB", "-"),
    ]
    n = int(s["transactions"])
    lines = [TITLE, "",
             f"The same workload on both stores, {n:,} transactions ({n // 10:,} users × 10 transactions + a",
             "renewal info, 10 apps), on the same machine:",
             "`.build/release/substatus-storage-bench --transactions N` (SQLite, synchronous=FULL, 4 reader",
             "connections) and `... --store postgres://...` (PostgreSQL, 4 pooled connections like substatusd)",
             f"against a throwaway {version} server on the same machine over TCP on 127.0.0.1, with its",
             "durable defaults (fsync=on, synchronous_commit=on, shared_buffers=128MB). Started by",
             f"`scripts/bench_postgres.py` (run by `scripts/bench`) on {started}, {os.cpu_count()} cores; {reps} runs of",
             "each, interleaved, medians per figure (the full output below is the last run of each). The machine",
             f"is shared with other work (load average {load:.0f} when the run started: other builds competed for",
             "the cores, and PostgreSQL's server processes suffer more from that than SQLite inside the bench",
             "process): compare the columns, not the absolute figures.",
             "Ratio: how many times better SQLite is (throughput: SQLite ÷ PostgreSQL; latency and size:",
             "PostgreSQL ÷ SQLite).", "",
             "| measure | SQLite | PostgreSQL | SQLite advantage |", "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    lines += ["", "<details><summary>Both runs' full output</summary>", "", "```", sqlite_text, "```", "", "```",
              pg_text, "```", "", "</details>", ""]
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--transactions", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    os.chdir(ROOT)
    if not args.no_build:
        subprocess.run(["swift", "build", "-c", "release", "--product", "substatus-storage-bench"], check=True)
    lines = section(os.path.join(ROOT, ".build"), args.transactions, args.reps)
    replace_section(os.path.join(ROOT, "BENCHMARKS.md"), TITLE, lines)
    print("\n".join(lines))
    print("wrote the SQLite vs PostgreSQL section of BENCHMARKS.md")


if __name__ == "__main__":
    main()
