#!/usr/bin/env bash
# tokenprobe's own added error (client overhead) at 1, 100 and 1,000 concurrent streams, for both
# connection modes: each request's TTFT against the wire's (a packet capture of the simulator's
# port, matched by x-request-id), and beside it the TTFT percentiles minus those in the event log of
# `tokenprobe simulate` (a difference of percentiles, not a per-request figure). Runs
# scripts/bench/compare.sh with TOOLS=tokenprobe (its venv holds only the capture's reader) and
# prints its rows and its per-request lines (requests more than 1 ms off, how many of them were
# first tokens read with a later packet); docs/exactness.md has the last table. Loopback only;
# every run is bounded.
#
#   scripts/bench/overhead.sh                  # 1, 100, 1000 streams, reuse then new
#   LEVELS=1000 MODES=reuse scripts/bench/overhead.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
levels="${LEVELS:-1,100,1000}"
for mode in ${MODES:-reuse new}; do
    echo "connection: $mode"
    TOOLS=tokenprobe LEVELS="$levels" TOKENPROBE_CONNECTION="$mode" \
        OUT="$repo/target/bench-overhead-$mode" scripts/bench/compare.sh |
        grep -E '^(machine|tokenprobe @ [0-9]+: (TTFT vs|own wire|client-bound))|^\|(---| tool | tokenprobe \| [0-9])'
done
