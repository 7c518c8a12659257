#!/usr/bin/env bash
# How much load `tokenprobe bench` itself sustains on this machine: closed-loop levels up to 2,000
# concurrent streams against `tokenprobe simulate` (release builds, loopback), aiming at 2,000
# streams, 100,000 output tokens/s and the load generator's own lag p99 under 2 ms. Prints, per
# level, what was reached (streams, aggregate tokens/s, events/s), how late the generator ran
# (send lag, runtime loop lag, ramp-up), how far TTFT/TPOT drifted from what the simulator was told
# to do, and the CPU each process used; then whether the goal was met or how far it got.
#
#   scripts/bench/load.sh                                  # 500,1000,2000 streams, 20 s each
#   CONCURRENCY=2000 DURATION=20s scripts/bench/load.sh
#   CHUNKS=1 scripts/bench/load.sh                         # only 1 token per event (default: 1, then 4)
#   RAMP=1s CONNECTION=reuse scripts/bench/load.sh         # spread first sends; keep connections
#
# The simulator writes an event log, stamped with the kernel's receive instant of each request
# (SO_TIMESTAMPNS); per level the script prints the client's TTFT error against the server's TTFT
# counted from that instant, and how late the simulator itself read its requests (user − kernel).
# The client stamps its reads the same way: the level's `read_lag_s` (how long after the kernel
# received the first token the client read it, i.e. what the stamps took out of its TTFT) is
# printed as "client kernel-vs-user", with the count of requests that had an unstamped read.
# Then, per request (matched by the `x-request-id` the bench sends, which the simulator logs), the
# client's TTFT and wire TTFT against the server's wire TTFT (its kernel receive stamp of the
# request to its kernel send stamp of the first token): p50, p99 and the largest; then how many
# first tokens came in one read with the next event (`first_token_shared_read`: their stamp is the
# later packet's) and the wire error of the other requests.
#
# Not a CI test: it takes a few minutes and its numbers depend on what else the machine runs.
# Bounded: each level sends for DURATION, every request has a 60 s deadline, the whole run 15 min.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

# 300 tokens 15 ms apart after a 100 ms TTFT: ~65 tokens/s per stream, so 2,000 streams offer
# ~130,000 tokens/s; a level's wall time includes the last requests' drain after DURATION.
CONCURRENCY="${CONCURRENCY:-500,1000,2000}"
DURATION="${DURATION:-20s}"
TTFT="${TTFT:-100ms}"
ITL="${ITL:-15ms}"
TOKENS="${TOKENS:-300}"
CHUNKS="${CHUNKS:-1 4}"
# Extra simulate flags, e.g. SIM_ARGS="--output-tokens-jitter 100" so the workers fall out of step.
SIM_ARGS="${SIM_ARGS:-}"
RAMP="${RAMP:-0s}"
CONNECTION="${CONNECTION:-new}"

# TOKENPROBE_RELEASE_BIN: another build to measure (e.g. an older one, for a before/after).
bin="${TOKENPROBE_RELEASE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin="$repo/target/release/tokenprobe"
fi
work="$(mktemp -d)"
sim_pid=""
cleanup() {
    if [ -n "$sim_pid" ]; then kill "$sim_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
# Both ends hold one socket per stream.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz="$(getconf CLK_TCK)"

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine slows both ends)"
for chunk in $CHUNKS; do
    "$bin" simulate --listen 127.0.0.1:0 --ttft "$TTFT" --itl "$ITL" --output-tokens "$TOKENS" \
        --tokens-per-chunk "$chunk" --event-log "$work/events-$chunk.jsonl" $SIM_ARGS \
        >"$work/sim.out" 2>"$work/sim.err" &
    sim_pid=$!
    for _ in $(seq 100); do
        grep -q '^listening on ' "$work/sim.out" 2>/dev/null && break
        sleep 0.05
    done
    url="$(sed -n 's/^listening on //p' "$work/sim.out")"
    [ -n "$url" ] || { echo "simulate did not start:"; cat "$work/sim.err"; exit 1; }
    cat >"$work/load.yml" <<EOF
defaults:
  timeouts: {connect: 10s, first_token: 60s, idle: 30s, total: 60s}
prompts:
  - name: load
    messages: [{role: user, content: "Say hello"}]
    max_tokens: $TOKENS
targets:
  - name: simulate
    base_url: $url/v1
    models: [sim]
    connection: $CONNECTION
EOF
    echo
    echo "== simulate --ttft $TTFT --itl $ITL --output-tokens $TOKENS --tokens-per-chunk $chunk $SIM_ARGS; bench --concurrency $CONCURRENCY --duration-per-level $DURATION --ramp $RAMP (connection: $CONNECTION)"
    s0="$(ticks "$sim_pid")"
    t0="$(date +%s.%N)"
    timeout --kill-after=10s 900s /usr/bin/time -f '%U %S %e %M' -o "$work/time" \
        "$bin" bench --config.file "$work/load.yml" --concurrency "$CONCURRENCY" \
        --duration-per-level "$DURATION" --ramp "$RAMP" --samples --no-progress -o "$work/load-$chunk.json" \
        --accept-client-bound \
        >"$work/table.txt" 2>"$work/bench.err" || { cat "$work/bench.err"; exit 1; }
    t1="$(date +%s.%N)"
    s1="$(ticks "$sim_pid")"
    kill "$sim_pid" 2>/dev/null || true
    wait "$sim_pid" 2>/dev/null || true
    sim_pid=""
    cat "$work/table.txt"
    python3 - "$work/load-$chunk.json" "$work/time" "$s0" "$s1" "$hz" "$t0" "$t1" "$chunk" "$TTFT" "$ITL" "$work/events-$chunk.jsonl" <<'PY'
import json, sys
import re

def secs(s):
    m = re.fullmatch(r"([\d.]+)(ms|s|us)", s)
    return float(m.group(1)) * {"s": 1, "ms": 1e-3, "us": 1e-6}[m.group(2)]

path, timef, s0, s1, hz, t0, t1, chunk, ttft, itl, events = sys.argv[1:]
r = json.load(open(path))

def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")

# The server's side from the event log, by arrival (kernel instant where stamped): its TTFT from
# the request's arrival in the kernel, and how late it read the request.
srv = []
# Per request, by the id the bench sends (`x-request-id`): the server's TTFT on the wire, from the
# kernel's receive instant of the request to its kernel-stamped send of the first token (`tx_s`).
wire_by_id = {}
for line in open(events):
    e = json.loads(line)
    if e.get("status") != 200 or not e.get("stream"):
        continue
    tx = next((x.get("tx_s") for x in e["events"] if x.get("token")), None)
    if tx is not None:
        wire_by_id[e["id"]] = tx
    first = next((x["t_s"] for x in e["events"] if x.get("token")), None)
    k = e.get("arrival_kernel_unix_ns")
    late = (e["arrival_unix_ns"] - k) / 1e9 if k else 0.0
    arrival = (k or e["arrival_unix_ns"]) / 1e9
    if first is not None:
        srv.append((arrival, first + late, late))
user, system, elapsed, rss = open(timef).read().split()
wall = float(t1) - float(t0)
bench_cpu = float(user) + float(system)
sim_cpu = (float(s1) - float(s0)) / float(hz)
ttft, itl, chunk = secs(ttft), secs(itl), int(chunk)
# A level the bench could not measure is still printed (this script measures the bench), with why.
for l in r["models"][0]["levels"]:
    if l.get("client_bound"):
        print(f"{l['concurrency']} streams: client-bound: {l['client_bound']}")
print(f"CPU over {wall:.0f} s: bench {bench_cpu:.1f} s ({100 * bench_cpu / wall:.0f}% of one core), "
      f"simulate {sim_cpu:.1f} s ({100 * sim_cpu / wall:.0f}%); bench max RSS {int(rss) / 1024:.0f} MiB")
# The bench's whole CPU (start-up and connection set-up included) over every event it read.
events_read = sum(l["output_tokens"] for l in r["models"][0]["levels"]) / chunk
if events_read:
    print(f"bench CPU per event: {bench_cpu / events_read * 1e6:.2f} us (user {float(user) / events_read * 1e6:.2f}, "
          f"system {float(system) / events_read * 1e6:.2f}) over {events_read:.0f} events")
print(f"{'streams':>8} {'agg tok/s':>10} {'events/s':>9} {'TTFT p50 (+drift)':>18} {'TPOT p50 (+drift)':>18} "
      f"{'send lag p99':>8} {'loop lag p99':>12} {'ramp':>8} {'errors':>7} "
      f"{'TTFT err p50/p99 vs server':>26} {'server read lag p50/p99':>24} "
      f"{'client kernel-vs-user p50/p99':>30} {'unstamped':>9}")
best = None
per_req = []
for l in r["models"][0]["levels"]:
    c = l["concurrency"]
    tps = l["output_tokens_per_s"]
    ev = tps / chunk
    t = l["ttft_s"] or {}
    p = l["tpot_s"] or {}
    lag = (l["lag_s"] or {}).get("p99", float("nan"))
    loop = (l["loop_lag_s"] or {}).get("p99", float("nan"))
    ramp = l.get("ramp_s") or 0.0
    # This level's requests on the server: those that arrived between its first send and its end.
    start = l.get("started_unix_s") or 0.0
    samples = l.get("samples") or []
    lo = start + min((s["sent_s"] for s in samples), default=0.0) - 0.001
    hi = start + max((s["end_s"] for s in samples), default=0.0)
    mine = [x for x in srv if lo <= x[0] <= hi]
    client = [s["ttft_s"] for s in samples if s.get("ttft_s") is not None]
    err50 = q(client, 0.5) - q([x[1] for x in mine], 0.5)
    err99 = q(client, 0.99) - q([x[1] for x in mine], 0.99)
    rl50, rl99 = q([x[2] for x in mine], 0.5), q([x[2] for x in mine], 0.99)
    # What the client's kernel stamps took out of its TTFT: first token read minus its arrival.
    # Per request against the server's wire TTFT: the client's TTFT (from its start instant) and
    # its wire TTFT (from its request's kernel send stamp).
    # A first token read in one read with the next event carries the later packet's stamp
    # (`first_token_shared_read`): the wire error is also shown without those requests.
    per = [(s["ttft_s"] - wire_by_id[s["request_id"]], s.get("wire_ttft_s"), wire_by_id[s["request_id"]],
            bool(s.get("first_token_shared_read")))
           for s in samples if s.get("ttft_s") is not None and s.get("request_id") in wire_by_id]
    pe = [x[0] for x in per]
    pw = [x[1] - x[2] for x in per if x[1] is not None]
    pu = [x[1] - x[2] for x in per if x[1] is not None and not x[3]]
    per_req.append((c, len(per), len(samples), pe, pw, pu, sum(x[3] for x in per)))
    kv = l.get("read_lag_s") or {}
    kv50, kv99 = kv.get("p50", float("nan")), kv.get("p99", float("nan"))
    print(f"{c:>8} {tps:>10.0f} {ev:>9.0f} {t.get('p50', float('nan')) * 1e3:>9.1f} ms ({(t.get('p50', 0) - ttft) * 1e3:+.1f}) "
          f"{p.get('p50', float('nan')) * 1e3:>9.2f} ms ({(p.get('p50', 0) - itl) * 1e3:+.2f}) "
          f"{lag * 1e3:>5.2f} ms {loop * 1e3:>9.2f} ms {ramp * 1e3:>5.0f} ms {l['error_rate'] * 100:>6.2f}% "
          f"{err50 * 1e3:>10.2f} / {err99 * 1e3:.2f} ms {rl50 * 1e3:>12.2f} / {rl99 * 1e3:.2f} ms "
          f"{kv50 * 1e3:>17.2f} / {kv99 * 1e3:.2f} ms {l.get('unstamped', 0):>9}")
    if lag < 0.002 and l["error_rate"] == 0 and (best is None or c > best[0]):
        best = (c, tps, loop, t.get("p50", 0) - ttft)
print("per request against the server's kernel-stamped TTFT (matched by request id):")
print(f"{'streams':>8} {'matched':>9} {'TTFT error p50 / p99 / max':>30} {'wire TTFT error p50 / p99 / max':>34} "
      f"{'shared reads':>12} {'wire error, the others':>34}")
for c, n, of, pe, pw, pu, shared in per_req:
    f = lambda v: " / ".join(f"{x * 1e3:.3f}" for x in (q(v, 0.5), q(v, 0.99), max(v, default=float("nan")))) + " ms"
    print(f"{c:>8} {n:>4}/{of:<4} {f(pe):>30} {f(pw):>34} {shared:>12} {f(pu):>34}")
goal = "2,000 streams, 100,000 tokens/s, send lag p99 < 2 ms"
if best:
    met = best[0] >= 2000 and best[1] >= 100000
    print(f"goal ({goal}): {'met' if met else 'not met'}: {best[0]} streams at {best[1]:.0f} tokens/s "
          f"with send lag p99 < 2 ms; meanwhile the runtime's loop lag p99 was {best[2] * 1e3:.1f} ms "
          f"and TTFT p50 {best[3] * 1e3:+.1f} ms off the simulator's (both ends share {__import__('os').cpu_count()} CPUs)")
else:
    print(f"goal ({goal}): no level kept send lag p99 under 2 ms without errors")
PY
done
