#!/usr/bin/env bash
# Send lag of a trace replay: how late each request leaves, and reaches the server, against its
# timestamp, at several arrival rates.
#
# For each rate in $RATES, writes a Mooncake trace of $DURATION seconds at that rate (Poisson gaps,
# each request $INPUT input tokens in two hash-id blocks shared by every tenth request, $OUTPUT
# output tokens), replays it with the release binary against `tokenprobe simulate` (TTFT $TTFT,
# ITL $ITL, no slot limit, --event-log), and prints:
#   - behind schedule: the report's own figure (each request's send instant minus its timestamp);
#   - at the server: the simulator's kernel receive stamp of each request minus the level's start
#     plus its timestamp (the wire's view, connection set-up included).
#
#   scripts/bench/trace-lag.sh                      # 100 and 1,000 requests/s, 10 s each
#   RATES="100 1000 2000" DURATION=20 scripts/bench/trace-lag.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

RATES="${RATES:-100 1000}"
DURATION="${DURATION:-10}"
INPUT="${INPUT:-200}"
OUTPUT="${OUTPUT:-4}"
TTFT="${TTFT:-5ms}"
ITL="${ITL:-1ms}"

bin="${TOKENPROBE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin="$repo/target/release/tokenprobe"
fi
work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

printf '%-8s %-9s %-38s %-38s\n' "rate/s" "requests" "behind schedule p50 / p99 / max (ms)" "at the server p50 / p99 / max (ms)"
for rate in $RATES; do
    python3 - "$rate" "$DURATION" "$INPUT" "$OUTPUT" > "$work/trace.jsonl" <<'PY'
import random, sys
rate, duration, inp, out = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng, t, i = random.Random(7), 0.0, 0
while t < duration:
    ids = [0, 1] if i % 10 == 0 else [2 * i + 2, 2 * i + 3]
    print('{"timestamp": %.3f, "input_length": %d, "output_length": %d, "hash_ids": [%d, %d]}'
          % (t * 1000, inp, out, ids[0], ids[1]))
    t += rng.expovariate(rate)
    i += 1
PY
    cat > "$work/replay.yml" <<YML
prompts:
  - name: replay
    trace: {file: $work/trace.jsonl, format: mooncake}
targets:
  - name: sim
    base_url: http://PLACEHOLDER/v1
    models: [sim]
    exact_output: ignore_eos
    timeouts: {connect: 5s, first_token: 10s, idle: 10s, total: 60s}
YML
    rm -f "$work/events.jsonl"
    "$bin" simulate --listen 127.0.0.1:0 --ttft "$TTFT" --itl "$ITL" --max-concurrency 100000 \
        --event-log "$work/events.jsonl" --log.level warn > "$work/sim.out" 2>/dev/null &
    server_pid=$!
    for _ in $(seq 100); do
        if grep -q "listening on" "$work/sim.out" 2>/dev/null; then break; fi
        sleep 0.05
    done
    addr="$(sed -n 's|^listening on http://||p' "$work/sim.out" | head -1)"
    sed -i "s|PLACEHOLDER|$addr|" "$work/replay.yml"
    "$bin" bench --config.file "$work/replay.yml" --no-progress --samples \
        -o "$work/report.json" > /dev/null 2>&1
    kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
    python3 - "$rate" "$work/report.json" "$work/events.jsonl" <<'PY'
import json, sys
rate, report, events = sys.argv[1], sys.argv[2], sys.argv[3]
level = json.load(open(report))["models"][0]["levels"][0]
log = {e["id"]: e for e in map(json.loads, open(events))}
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]
def row(v):
    return "%.3f / %.3f / %.3f" % (q(v, 0.5) * 1e3, q(v, 0.99) * 1e3, max(v) * 1e3)
behind = [s["behind_schedule_s"] for s in level["samples"]]
start = level["started_unix_s"]
wire = []
for s in level["samples"]:
    e = log.get(s.get("request_id"))
    if e is None:
        continue
    planned = start + s["sent_s"] - s["behind_schedule_s"]
    wire.append(e["arrival_kernel_unix_ns"] / 1e9 - planned)
errors = sum(level["errors"].values())
print("%-8s %-9s %-38s %-38s%s" % (rate, level["requests"], row(behind), row(wire),
      "  (%d errors)" % errors if errors else ""))
PY
done
