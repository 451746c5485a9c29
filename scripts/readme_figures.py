#!/usr/bin/env python3
"""Writes README.md's benchmark figures from BENCHMARKS.md, so the two can never disagree.

`scripts/bench` and `scripts/bench_e2e.py` call it after they rewrite BENCHMARKS.md; it can also be
run alone. It replaces what is between `<!-- bench-figures:begin -->` and
`<!-- bench-figures:end -->` in README.md with a paragraph built from BENCHMARKS.md's tables: the
transport ratios against grpc-go, the end-to-end CheckEligibility figures, the domain evaluation,
the store's ingest. A figure missing from BENCHMARKS.md is said to be missing, never made up.

Usage: scripts/readme_figures.py [--check]   (--check: exit 1 if README.md is not up to date)
"""
import os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- bench-figures:begin -->", "<!-- bench-figures:end -->"


def table_rows(text, header_start):
    """The rows (lists of cells) of the first markdown table whose header starts with header_start."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| " + header_start):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            return rows
    return []


def number(cell):
    return float(cell.replace(",", "").rstrip("x×"))


def figures(text):
    """The README paragraph's sentences, from BENCHMARKS.md's text."""
    out = []
    # Each section says when it was measured (`scripts/bench --only` measures some again); older files
    # dated the transport section only in the header.
    start = text.find("## gRPC runtime vs grpc-go")
    date = (re.search(r"^Measured on ([0-9-]+ [0-9:]+ UTC)", text[start:text.find("\n## ", start + 1)], re.M)
            if start >= 0 else None) or \
        re.search(r"Measured by `make bench` \(default settings\) on ([0-9-]+ [0-9:]+ UTC)", text)
    transport = table_rows(text, "load | grpc-go calls/s")
    if transport:
        # Columns: load, go calls/s, ours calls/s, ratio, go per CPU-s, ours per CPU-s, ratio, ...
        ratios = {r[0]: number(r[6]) for r in transport}
        lo, hi = min(ratios.values()), max(ratios.values())
        worst = min(ratios, key=ratios.get)
        out.append(
            f"the gRPC runtime serves {lo:.2f}×–{hi:.2f}× grpc-go's calls per server CPU-second on the "
            f"peer's four loads (worst: {worst})" + (f", measured {date.group(1)}" if date else ""))
    else:
        out.append("the transport comparison with grpc-go is missing from BENCHMARKS.md")
    e2e_date = re.search(r"^Measured on ([0-9-]+ [0-9:]+ UTC)", text[max(text.find("<!-- e2e:begin -->"), 0):], re.M)
    elig = table_rows(text, "shape | pinning")
    by_shape = {(r[0], r[1]): r for r in elig}
    one = by_shape.get(("1 user × 20 products", "CPU 0 / CPU 1"))
    fifty = by_shape.get(("50 users × 20 products", "CPU 0 / CPU 1"))
    if one:
        s = (f"end to end over a 1M-transaction SQLite store, CheckEligibility of 1 user × 20 products "
             f"costs {1e6 / number(one[8]):.0f} µs of server CPU ({one[8]} calls per server CPU-second, "
             f"p99 {one[5]} ms at 64 in flight, server pinned to one core)")
        if fifty:
            s += f" and 50 users × 20 products {fifty[8]} calls per server CPU-second (p99 {fifty[5]} ms)"
        if e2e_date:
            s += f", measured {e2e_date.group(1)}"
        out.append(s)
    else:
        out.append("the end-to-end CheckEligibility figures are missing from BENCHMARKS.md")
    ev = re.search(r"median (\d+) ns/user", text)
    if ev:
        out.append(f"evaluating one user (30 transactions, 20 products) takes {int(ev.group(1)) / 1000:.1f} µs")
    ingest = re.search(r"^ingest overall: .*= (\d+) transactions/s durably committed", text, re.M)
    if ingest:
        out.append(f"the SQLite store commits {int(ingest.group(1)):,} transactions/s durably "
                   "(1M-transaction store, 8 writers)")
    delivery = re.search(r"^### Webhook delivery through substatusd\n\nMeasured by `scripts/bench_events.py` on "
                         r"([0-9-]+ [0-9:]+ UTC): ([0-9,]+) users' histories, ([0-9,]+) events", text, re.M)
    if delivery:
        rows = {r[0]: r for r in table_rows(text[delivery.start():], "build | runs")}
        this = rows.get("this build")
        if this:
            out.append(f"webhook delivery through substatusd ({delivery.group(3)} events replayed to a local receiver"
                       f" on the other core) runs at {this[2].split(' ')[0]} events/s with {this[3].split(' ')[0]} µs of"
                       f" server CPU per event (median of {this[1]} runs, measured {delivery.group(1)})")
    out += compare_figures(text)
    return out


def compare_figures(text):
    """One sentence per ref of the Compare section (scripts/bench_compare.py), from its block on the
    largest store: this build's calls per server CPU-second over the ref's, CheckEligibility 1 x 20,
    50 x 20 and the transport, as measured."""
    best = {}
    for m in re.finditer(r"^### This build against (.+?) \(`([0-9a-f]+)`\), ([0-9,]+) transactions\n\n"
                         r"Measured on ([0-9-]+ [0-9:]+ UTC) by `([^`]+)`", text, re.M):
        size = int(m.group(3).replace(",", ""))
        if m.group(2) not in best or size > best[m.group(2)][0]:
            best[m.group(2)] = (size, m)
    out = []
    for size, m in best.values():
        end = text.find("<!-- compare ", m.end())
        block = text[m.end():end if end >= 0 else len(text)]
        rows = {r[0]: r for r in table_rows(block, "shape | this")}
        parts = []
        for label, name in [("CheckEligibility 1 user × 20 products", "CheckEligibility 1 × 20"),
                            ("CheckEligibility 50 users × 20 products", "50 × 20"),
                            ("transport: bench server, CheckEligibility 20 products", "the bare transport (Bench 20 products)")]:
            row = rows.get(label)
            if row and row[3] != "-":
                parts.append(f"{name} {row[3].replace('**', '')}")
        if parts:
            out.append(f"against {m.group(1)} (`{m.group(2)}`) on a store of {m.group(3)} transactions, this build's calls"
                       f" per server CPU-second over that commit's are {', '.join(parts)} (median of the rounds, lowest and"
                       f" highest round in brackets; `{m.group(5)}`, measured {m.group(4)})")
    return out


def paragraph(text):
    sentences = figures(text)
    body = "; ".join(sentences)
    return (f"{BEGIN}\nFrom the latest `make bench` (written by the script from "
            f"[`BENCHMARKS.md`](BENCHMARKS.md)): {body}.\n{END}")


def main():
    with open(os.path.join(ROOT, "BENCHMARKS.md")) as f:
        bench = f.read()
    path = os.path.join(ROOT, "README.md")
    with open(path) as f:
        readme = f.read()
    if BEGIN not in readme or END not in readme:
        sys.exit(f"readme_figures: README.md lacks the {BEGIN} ... {END} markers")
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    new = readme[:start] + paragraph(bench) + readme[end:]
    if "--check" in sys.argv[1:]:
        if new != readme:
            sys.exit("readme_figures: README.md's benchmark figures differ from BENCHMARKS.md; run scripts/readme_figures.py")
        return
    if new != readme:
        with open(path, "w") as f:
            f.write(new)
    print("readme_figures: README.md's benchmark figures written from BENCHMARKS.md")


if __name__ == "__main__":
    main()
