#!/usr/bin/env bash
# The run store end to end: $RUNS runs of the same bench against `tokenprobe simulate`, recorded
# in a fresh store, each compared with the one before by `--baseline last`; before the last run
# the simulator restarts with a slower first token ($SLOW_TTFT instead of $TTFT), so that run is
# the one regression. Prints each run's exit code, then `bench history` and the model's trend, and
# writes the trend's page to $OUT/trend.html.
#
#   scripts/bench/history.sh                       # 5 runs, TTFT 50 ms, then 80 ms
#   RUNS=8 SLOW_TTFT=60ms scripts/bench/history.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

RUNS="${RUNS:-5}"
TTFT="${TTFT:-50ms}"
SLOW_TTFT="${SLOW_TTFT:-80ms}"
OUT="${OUT:-$(mktemp -d)}"

bin="${TOKENPROBE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin="$repo/target/release/tokenprobe"
fi
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
store="$OUT/runs.sqlite3"
cat > "$OUT/bench.yml" <<YML
prompts:
  - name: hello
    messages: [{role: user, content: "Say hello"}]
    max_tokens: 16
targets:
  - name: sim
    base_url: http://127.0.0.1:$port/v1
    models: [sim-a]
YML

sim=""
start_sim() {
    [ -n "$sim" ] && kill "$sim" && wait "$sim" 2>/dev/null || true
    "$bin" simulate --listen "127.0.0.1:$port" --ttft "$1" --itl 5ms --output-tokens 16 \
        --max-concurrency 8 >/dev/null 2>&1 &
    sim=$!
    for _ in $(seq 100); do
        curl -fsS "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && return
        sleep 0.05
    done
    echo "the simulator did not start" >&2
    exit 1
}
trap '[ -n "$sim" ] && kill "$sim" 2>/dev/null || true' EXIT

start_sim "$TTFT"
for i in $(seq "$RUNS"); do
    if [ "$i" = "$RUNS" ]; then
        start_sim "$SLOW_TTFT"
    fi
    baseline=()
    [ "$i" -gt 1 ] && baseline=(--baseline last)
    rc=0
    "$bin" bench --config.file "$OUT/bench.yml" --concurrency 1,4 --requests-per-level 40 \
        --history "$store" --no-progress "${baseline[@]}" >"$OUT/run$i.txt" 2>"$OUT/run$i.err" || rc=$?
    echo "run $i (TTFT $([ "$i" = "$RUNS" ] && echo "$SLOW_TTFT" || echo "$TTFT")): exit $rc"
done
echo
"$bin" bench history --history "$store" --model sim-a -o "$OUT/trend.html"
echo
echo "store: $store; the trend's page: $OUT/trend.html"
