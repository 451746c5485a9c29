"""Rewrites one section of BENCHMARKS.md in place, for the bench scripts run on their own
(scripts/bench_postgres.py, scripts/bench_events.py; scripts/bench writes the whole file)."""
import os, re

# A section ends at the next second-level heading or the next marker comment: another script's
# `<!-- name:begin -->` belongs to the section after it and must survive.
_NEXT = re.compile(r"\n(## |<!-- )")


def replace_section(path, title, lines):
    """Replaces the section headed `title` with `lines` (appends it when absent)."""
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    start = text.find(title)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    else:
        m = _NEXT.search(text, start + len(title))
        text = text[:start] + "\n".join(lines) + ("\n" + text[m.start() + 1:] if m else "\n")
    with open(path, "w") as f:
        f.write(text)
