#!/usr/bin/env python3
"""The measured figures the README quotes, kept in one table: docs/figures.md.

The scripts that measure a figure record it here (with the date, the machine and the script),
and the README's block between `<!-- figures -->` and `<!-- /figures -->` is generated from
that table, so a number in the README always names when, where and by what it was measured.
tests/e2e/readme_figures.rs checks that README.md and docs/figures.md agree.

    python3 scripts/bench/figures.py set KEY VALUE --what TEXT --by SCRIPT   # record, then update README
    python3 scripts/bench/figures.py readme                                  # regenerate README's block
    python3 scripts/bench/figures.py check                                   # exit 1 if they disagree
    python3 scripts/bench/figures.py near KEY NUMBER --within 0.05           # exit 1 if the recorded
                                                                             # figure is off NUMBER
"""

import argparse
import datetime
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURES = os.path.join(REPO, "docs", "figures.md")
README = os.path.join(REPO, "README.md")
BEGIN = "<!-- figures -->"
END = "<!-- /figures -->"
HEADER = """# Measured figures

Each row is written by the script named in it (`scripts/bench/figures.py set`), with the date (UTC) and
the machine it ran on; README.md's "Measured" list is generated from this table
(`scripts/bench/figures.py readme`) and `tests/e2e/readme_figures.rs` checks that the two agree. Re-run the
script to update a figure; do not edit the rows by hand.

| key | what | value | measured | machine | by |
|---|---|---|---|---|---|
"""
COLUMNS = ["key", "what", "value", "measured", "machine", "by"]


def read_rows():
    rows = []
    if not os.path.exists(FIGURES):
        return rows
    with open(FIGURES, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != len(COLUMNS) or cells[0] in ("key", "---") or not line.startswith("|"):
                continue
            rows.append(dict(zip(COLUMNS, cells)))
    return rows


def write_rows(rows):
    os.makedirs(os.path.dirname(FIGURES), exist_ok=True)
    with open(FIGURES, "w", encoding="utf-8") as f:
        f.write(HEADER)
        for r in rows:
            f.write("| " + " | ".join(r[c] for c in COLUMNS) + " |\n")


def render_block(rows):
    lines = [BEGIN]
    for r in rows:
        lines.append(f"- {r['what']}: **{r['value']}** ({r['measured']}, {r['machine']}, `{r['by']}`)")
    lines.append(END)
    return "\n".join(lines)


def readme_with_block(text, rows):
    pat = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pat.search(text):
        sys.exit(f"figures.py: README.md has no {BEGIN} ... {END} block")
    return pat.sub(lambda _: render_block(rows), text, count=1)


def machine():
    try:
        with open("/proc/loadavg", encoding="utf-8") as f:
            load = f.read().split()[0]
    except OSError:
        load = "?"
    return f"{os.cpu_count()} CPUs, load {load}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("set")
    s.add_argument("key")
    s.add_argument("value")
    s.add_argument("--what", required=True)
    s.add_argument("--by", required=True)
    sub.add_parser("readme")
    sub.add_parser("check")
    n = sub.add_parser("near")
    n.add_argument("key")
    n.add_argument("number", type=float)
    n.add_argument("--within", type=float, required=True, help="relative tolerance, e.g. 0.05")
    a = ap.parse_args()

    rows = read_rows()
    if a.cmd == "near":
        row = next((r for r in rows if r["key"] == a.key), None)
        if row is None:
            sys.exit(f"figures.py: no figure {a.key} in docs/figures.md")
        m = re.search(r"[0-9]+(?:\.[0-9]+)?", row["value"])
        if m is None:
            sys.exit(f"figures.py: {a.key} = {row['value']!r} holds no number")
        recorded = float(m.group(0))
        off = abs(a.number - recorded) / recorded
        verdict = "holds" if off <= a.within else "does NOT hold"
        print(f"figures: {a.key} recorded {row['value']} ({row['measured']}); measured now {a.number}: "
              f"off by {off * 100:.1f}% (allowed {a.within * 100:.0f}%): {verdict}")
        if off > a.within:
            sys.exit(1)
        return
    if a.cmd == "set":
        for field in (a.key, a.value, a.what, a.by):
            if "|" in field or "\n" in field:
                sys.exit(f"figures.py: {field!r}: no '|' or newline in a figure")
        row = {
            "key": a.key,
            "what": a.what,
            "value": a.value,
            "measured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "machine": machine(),
            "by": a.by,
        }
        rows = [r for r in rows if r["key"] != a.key] + [row]
        rows.sort(key=lambda r: r["key"])
        write_rows(rows)
        print(f"figures: {a.key} = {a.value} (docs/figures.md, README.md)")
    with open(README, encoding="utf-8") as f:
        text = f.read()
    new = readme_with_block(text, rows)
    if a.cmd == "check":
        if new != text:
            sys.exit("figures.py: README.md's figures block differs from docs/figures.md; run scripts/bench/figures.py readme")
        return
    if new != text:
        with open(README, "w", encoding="utf-8") as f:
            f.write(new)


if __name__ == "__main__":
    main()
