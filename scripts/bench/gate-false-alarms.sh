#!/usr/bin/env bash
# The regression gate's false alarms, measured: one bench run against `tokenprobe simulate` is
# kept as the baseline; then, with CPU load beside them (stress-ng when installed, else a busy
# loop pinned to one core), $RERUNS unchanged re-runs are each compared with it by `--baseline`,
# and every exit 3 among them is a false alarm; last, against a simulator whose TTFT is 30%
# higher ($SLOW_TTFT), one run that must exit 3. Prints each run's exit code and verdict counts,
# then the totals, beside what the tolerance alone (the gate before issue 40: any compared value
# worse than the tolerance allows) would have failed. The simulator's TTFT is jittered by
# ±$TTFT_JITTER, so that two runs' percentiles differ by as much as the tolerance now and then.
#
#   scripts/bench/gate-false-alarms.sh                 # 20 re-runs, TTFT 100 ms, then 130 ms
#   RERUNS=40 TOKENPROBE_BIN=target/release/tokenprobe scripts/bench/gate-false-alarms.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

RERUNS="${RERUNS:-20}"
TTFT="${TTFT:-100ms}"
SLOW_TTFT="${SLOW_TTFT:-130ms}"
TTFT_JITTER="${TTFT_JITTER:-50ms}"
# Each run: 160 requests at 8 and at 16 streams (about 4 s in all).
LEVELS="${LEVELS:-8,16}"
REQUESTS="${REQUESTS:-160}"
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"

bin="${TOKENPROBE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --quiet
    bin="$repo/target/debug/tokenprobe"
fi
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
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
load=""
cleanup() {
    [ -n "$sim" ] && kill "$sim" 2>/dev/null || true
    [ -n "$load" ] && kill "$load" 2>/dev/null || true
}
trap cleanup EXIT

start_sim() {
    if [ -n "$sim" ]; then
        kill "$sim" && wait "$sim" 2>/dev/null || true
    fi
    "$bin" simulate --listen "127.0.0.1:$port" --ttft "$1" --ttft-jitter "$TTFT_JITTER" --itl 5ms \
        --itl-jitter 1ms --output-tokens 8 >/dev/null 2>&1 &
    sim=$!
    for _ in $(seq 100); do
        curl -fsS "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && return
        sleep 0.05
    done
    echo "the simulator did not start" >&2
    exit 1
}

# One run: its exit code, and its JSON report as $OUT/$1.json.
run() {
    local name="$1"
    shift
    local rc=0
    "$bin" bench --config.file "$OUT/bench.yml" --concurrency "$LEVELS" \
        --requests-per-level "$REQUESTS" --no-history --no-progress -o "$OUT/$name.json" "$@" \
        >"$OUT/$name.txt" 2>"$OUT/$name.err" || rc=$?
    echo "$rc"
}

# The verdicts of a run's comparison: "regression R, inconclusive I, within tolerance W, not
# judged N".
verdicts() {
    jq -r '[.comparison.values[].verdict] as $v
        | "regression \([$v[] | select(. == "regression")] | length), inconclusive \([$v[] | select(. == "inconclusive")] | length), within tolerance \([$v[] | select(. == "within_tolerance")] | length), not judged \([$v[] | select(. == "not_judged")] | length)"' "$1"
}

# Whether the tolerance alone would have failed a run: a value of the metrics it compared worse
# than 10% (the error rate: +1 point).
tolerance_alone() {
    jq '[.comparison.values[]
        | select(.metric != "e2e_p50")
        | select(if .metric == "error_rate" then .change > 0.01
                 elif (.metric | test("^(tps_|agg_tps|rps|goodput)")) then .change < -0.1
                 else .change > 0.1 end)]
        | length > 0' "$1"
}

start_sim "$TTFT"
rc="$(run baseline)"
echo "baseline (TTFT $TTFT, no load): exit $rc"

if command -v stress-ng >/dev/null; then
    stress-ng --cpu 1 --quiet >/dev/null 2>&1 &
    load=$!
    echo "CPU load: stress-ng --cpu 1 (pid $load)"
else
    taskset -c 0 bash -c 'while :; do :; done' &
    load=$!
    echo "CPU load: a busy loop pinned to CPU 0 (pid $load)"
fi

alarms=0
old_alarms=0
inconclusive_runs=0
judged=0
inconclusive=0
for i in $(seq "$RERUNS"); do
    rc="$(run "rerun$i" --baseline "$OUT/baseline.json")"
    v="$(verdicts "$OUT/rerun$i.json")"
    echo "re-run $i (TTFT $TTFT, CPU load): exit $rc; $v"
    [ "$rc" = 3 ] && alarms=$((alarms + 1))
    [ "$(tolerance_alone "$OUT/rerun$i.json")" = true ] && old_alarms=$((old_alarms + 1))
    n_inc="$(jq '[.comparison.values[] | select(.verdict == "inconclusive")] | length' "$OUT/rerun$i.json")"
    [ "$n_inc" -gt 0 ] && inconclusive_runs=$((inconclusive_runs + 1))
    inconclusive=$((inconclusive + n_inc))
    judged=$((judged + $(jq '.comparison.judged' "$OUT/rerun$i.json")))
done

start_sim "$SLOW_TTFT"
rc="$(run slow --baseline "$OUT/baseline.json")"
echo "slower (TTFT $SLOW_TTFT, CPU load): exit $rc; $(verdicts "$OUT/slow.json")"
echo
echo "false alarms: $alarms of $RERUNS unchanged re-runs exited 3 ($judged values judged in all; $inconclusive inconclusive, in $inconclusive_runs runs)"
echo "the tolerance alone would have failed $old_alarms of them"
echo "TTFT +30%: exit $rc"
echo "reports: $OUT"
