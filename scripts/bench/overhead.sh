#!/usr/bin/env bash
# tokenprobe's own added error (client overhead): its TTFT minus the TTFT in the event log of
# `tokenprobe simulate` (the instant the server wrote the first token event, after the request
# arrived), at 1, 100 and 1,000 concurrent streams, for both connection modes. Prints Markdown rows
# (docs/exactness.md has the last table). Loopback only; every run is bounded.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
levels="${LEVELS:-1,100,1000}"
cargo build --release --quiet
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in reuse new; do
    echo "connection: $mode"
    python3 scripts/bench/compare/compare.py --tokenprobe "$repo/target/release/tokenprobe" \
        --venv /nonexistent --tokenizer /nonexistent --out "$repo/target/bench-overhead-$mode" \
        --levels "$levels" --tools tokenprobe --tokenprobe-connection "$mode" |
        grep -E '^\| (tool|---|tokenprobe \| [0-9])'
done
