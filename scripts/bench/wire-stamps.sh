#!/usr/bin/env bash
# Issue 26 item 2: how exact tokenprobe's TTFT is against the wire, by kernel stamps at both ends
# of the same request. `tokenprobe bench` (closed loop, kept connections) against `tokenprobe
# simulate --event-log`; per request it compares
#   the client's wire TTFT  (its request's last byte leaving -> the first token's bytes arriving,
#                            both the client kernel's stamps), with
#   the server's wire TTFT  (the request's last bytes arriving -> the first token's write leaving,
#                            both the server kernel's stamps: the log's `tx_s`),
# and prints, per level, the error's p50 / p99 / largest, how many requests were more than 1 ms
# off, "shared" (of those more than 1 ms off, how many the bench marked
# `first_token_shared_read`, over how many it marked in all: a first token read in one read with
# the event after it, so the read's stamp is the later packet's), and how late requests left
# after their start instant (send lag p50 / p99 / largest); then, for up to five requests that
# could not be compared, why (no wire TTFT on the client, or no send stamp in the server's log),
# and for up to five more than 1 ms off without the mark, the client's and the server's stamps.
# Runs RUNS times (default 3). Loopback only; each level is bounded by its request count.
#
#   scripts/bench/wire-stamps.sh                          # 1, 64, 256 streams, 3 runs
#   LEVELS=256 REQUESTS=2048 RUNS=1 scripts/bench/wire-stamps.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
LEVELS="${LEVELS:-1,64,256}"
REQUESTS="${REQUESTS:-1024}"
RUNS="${RUNS:-3}"
bin="${TOKENPROBE_RELEASE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin="$repo/target/release/tokenprobe"
fi
work="$(mktemp -d)"
sim=""
trap 'if [ -n "$sim" ]; then kill "$sim" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%4s %8s %9s %26s %6s %9s %26s\n' run streams requests "wire error p50/p99/max ms" ">1ms" "shared" "send lag p50/p99/max ms"
for run in $(seq "$RUNS"); do
    for level in ${LEVELS//,/ }; do
        log="$work/events-$run-$level.jsonl"
        "$bin" simulate --listen 127.0.0.1:0 --ttft 50ms --itl 10ms --output-tokens 16 \
            --event-log "$log" --log.level warn >"$work/sim.out" 2>"$work/sim.err" &
        sim=$!
        for _ in $(seq 100); do
            grep -q '^listening on ' "$work/sim.out" 2>/dev/null && break
            sleep 0.05
        done
        url="$(sed -n 's/^listening on //p' "$work/sim.out")"
        cat >"$work/c.yml" <<YML
defaults:
  timeouts: {connect: 10s, first_token: 60s, idle: 30s, total: 60s}
prompts:
  - {name: p, messages: [{role: user, content: "Say hello"}], max_tokens: 16}
targets:
  - {name: sim, base_url: "$url/v1", models: [sim], connection: reuse}
YML
        n=$(( REQUESTS > level * 4 ? REQUESTS : level * 4 ))
        "$bin" bench --config.file "$work/c.yml" --concurrency "$level" --requests-per-level "$n" \
            --samples --accept-client-bound --no-history -o "$work/r.json" >/dev/null 2>"$work/bench.err" ||
            { echo "bench failed:"; cat "$work/bench.err"; exit 1; }
        kill "$sim"; wait "$sim" 2>/dev/null || true; sim=""
        python3 - "$work/r.json" "$log" "$run" "$level" <<'PY'
import json, sys
report, log, run, level = sys.argv[1:]
server, rec = {}, {}
for line in open(log):
    r = json.loads(line)
    first = next((e for e in r["events"] if e["token"]), None)
    if first is not None and first.get("tx_s") is not None:
        server[r["id"]] = first["tx_s"]
        rec[r["id"]] = (r, first)
samples = json.load(open(report))["models"][0]["levels"][0]["samples"]
errs, lags, shared_off, shared = [], [], 0, 0
unmatched, unmarked = [], []
for s in samples:
    if s.get("send_lag_s") is not None:
        lags.append(s["send_lag_s"] * 1e3)
    if s.get("wire_ttft_s") is None or s.get("request_id") not in server:
        why = "no client wire TTFT" if s.get("wire_ttft_s") is None else "no server send stamp"
        unmatched.append(f"{s.get('request_id')}: {why} (error_type {s.get('error_type')}, send lag {s.get('send_lag_s')})")
    else:
        err = (s["wire_ttft_s"] - server[s["request_id"]]) * 1e3
        errs.append(err)
        marked = bool(s.get("first_token_shared_read"))
        shared += marked
        shared_off += marked and abs(err) > 1
        if abs(err) > 1 and not marked:
            r, first = rec[s["request_id"]]
            ms = lambda v: "null" if v is None else f"{v * 1e3:.3f}"
            unmarked.append(
                f"{s['request_id']}: {err:+.3f} ms; client: wire TTFT {ms(s['wire_ttft_s'])}, read lag"
                f" {ms(s.get('read_lag_s'))}, send lag {ms(s.get('send_lag_s'))}, unstamped"
                f" {bool(s.get('unstamped'))}; server: first token written {ms(first['t_s'])}, left"
                f" {ms(first['tx_s'])} after arrival (ms), conn {r.get('conn')}")
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
def three(v):
    return f"{q(v, .5):+.4f} / {q(v, .99):+.4f} / {max(v, key=abs) if v else float('nan'):+.4f}"
lagtxt = f"{q(lags, .5):.4f} / {q(lags, .99):.4f} / {max(lags) if lags else float('nan'):.4f}"
off = sum(abs(e) > 1 for e in errs)
print(f"{run:>4} {level:>8} {len(errs):>4}/{len(samples):<4} {three(errs):>26} {off:>6} {f'{shared_off}/{shared}':>9} {lagtxt:>26}")
for u in unmatched[:5]:
    print(f"     not compared: {u}")
for u in unmarked[:5]:
    print(f"     > 1 ms, unmarked: {u}")
PY
    done
done
