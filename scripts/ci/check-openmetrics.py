#!/usr/bin/env python3
"""Strict OpenMetrics 1.0 check of an exposition read from stdin.

Parses with prometheus_client.openmetrics.parser.text_string_to_metric_families
(which rejects anything the OpenMetrics text format does not allow, including a
missing `# EOF`). Exits 0 and prints a one-line summary per family when the
text parses; exits 1 with the parser's error otherwise.

    curl -sH 'Accept: application/openmetrics-text; version=1.0.0' \
        http://127.0.0.1:9464/metrics | .venv/bin/python scripts/ci/check-openmetrics.py \
        [--expect FAMILY ...]

--expect NAME makes a family that is absent (or has no samples) an error too.
Run with the test venv's python (scripts/ci/install-test-deps.sh).
"""

import argparse
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--expect", action="append", default=[], metavar="FAMILY")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()

    text = sys.stdin.buffer.read().decode("utf-8")  # OpenMetrics is UTF-8; bad bytes fail here
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and friends
        print(f"check-openmetrics: PARSE ERROR: {type(e).__name__}: {e}", file=sys.stderr)
        return 1

    seen = {}
    for fam in families:
        seen[fam.name] = fam
        if not args.quiet:
            print(f"{fam.type:15} {fam.name} ({len(fam.samples)} samples)")
    bad = False
    for name in args.expect:
        fam = seen.get(name)
        if fam is None:
            print(f"check-openmetrics: expected family {name!r} is absent", file=sys.stderr)
            bad = True
        elif not fam.samples:
            print(f"check-openmetrics: expected family {name!r} has no samples", file=sys.stderr)
            bad = True
    if bad:
        return 1
    print(f"check-openmetrics: OK: {len(families)} families")
    return 0


if __name__ == "__main__":
    sys.exit(main())
