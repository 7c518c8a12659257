#!/usr/bin/env bash
# /metrics encode time by series count (`cargo bench --bench metrics_encode`: 200 encodes per
# size, both formats), then records the largest size's text-format p50/p99 in docs/figures.md
# and README.md (scripts/bench/figures.py).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
out="$(cargo bench --quiet --bench metrics_encode)"
echo "$out"
# Rows: jobs series p50 ms p99 ms om-p50 ms om-p99 ms; the last row is the largest.
last="$(echo "$out" | awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ { row = $0 } END { print row }')"
[ -n "$last" ] || { echo "bench-encode.sh: no result row in the output above" >&2; exit 1; }
read -r jobs series p50 _ p99 _ <<<"$last"
series_fmt="$(printf "%'d" "$series" 2>/dev/null || echo "$series")"
python3 scripts/bench/figures.py set metrics_encode "$p50 ms p50, $p99 ms p99" \
    --what "\`/metrics\` encode (text format), $series_fmt series ($jobs jobs)" --by scripts/bench/encode.sh
