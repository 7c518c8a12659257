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
# CAPTURE=1 also captures the simulator's port with tcpdump (needs root, and Python's dpkt in
# PYTHON) and prints a third truth per level: the client's error against the capture (a
# capture's instant is the packet's as it is handed to the loopback device), with the capture's
# figure in each line about a request more than 1 ms off; a capture that dropped packets is void.
#
#   scripts/bench/wire-stamps.sh                          # 1, 64, 256 streams, 3 runs
#   LEVELS=256 REQUESTS=2048 RUNS=1 scripts/bench/wire-stamps.sh
#   CAPTURE=1 PYTHON=/path/to/venv/bin/python LEVELS=256 scripts/bench/wire-stamps.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
LEVELS="${LEVELS:-1,64,256}"
REQUESTS="${REQUESTS:-1024}"
RUNS="${RUNS:-3}"
CAPTURE="${CAPTURE:-0}"
PYTHON="${PYTHON:-python3}"
if [ "$CAPTURE" = 1 ]; then
    command -v tcpdump >/dev/null 2>&1 || { echo "CAPTURE=1 needs tcpdump (apt-get install tcpdump)" >&2; exit 1; }
    "$PYTHON" -c 'import dpkt' 2>/dev/null ||
        { echo "CAPTURE=1 needs Python's dpkt in $PYTHON (pip install dpkt; PYTHON= names the interpreter)" >&2; exit 1; }
fi
bin="${TOKENPROBE_RELEASE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin="$repo/target/release/tokenprobe"
fi
work="$(mktemp -d)"
sim=""
cap=""
trap 'for p in $sim $cap; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
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
        pcap=""
        if [ "$CAPTURE" = 1 ]; then
            pcap="$work/wire-$run-$level.pcap"
            # The capture compare.py's `Capture` makes (one command for both scripts; Python
            # execs it, so $cap is tcpdump itself and any failure lands in tcpdump.err), read by
            # its parser below.
            PYTHONPATH="$repo/scripts/bench/compare" "$PYTHON" -c \
                'import os, sys; from compare import tcpdump_command; c = tcpdump_command(*sys.argv[1:]); os.execvp(c[0], c)' \
                "${url##*:}" "$pcap" 2>"$work/tcpdump.err" &
            cap=$!
            for _ in $(seq 100); do
                grep -q 'listening on' "$work/tcpdump.err" 2>/dev/null && break
                sleep 0.05
            done
            grep -q 'listening on' "$work/tcpdump.err" ||
                { echo "tcpdump did not start:"; cat "$work/tcpdump.err"; exit 1; }
        fi
        n=$(( REQUESTS > level * 4 ? REQUESTS : level * 4 ))
        "$bin" bench --config.file "$work/c.yml" --concurrency "$level" --requests-per-level "$n" \
            --samples --accept-client-bound --no-history -o "$work/r.json" >/dev/null 2>"$work/bench.err" ||
            { echo "bench failed:"; cat "$work/bench.err"; exit 1; }
        kill "$sim"; wait "$sim" 2>/dev/null || true; sim=""
        if [ -n "$cap" ]; then
            # tcpdump writes in blocks: give the last one its timeout before stopping it.
            sleep 2; kill -INT "$cap"; wait "$cap" 2>/dev/null || true; cap=""
        fi
        "$PYTHON" - "$work/r.json" "$log" "$run" "$level" "$pcap" "$work/tcpdump.err" "${url##*:}" \
            "$repo/scripts/bench/compare" <<'PY'
import json, sys
report, log, run, level, pcap, caperr, port, compare_dir = sys.argv[1:]
wire = {}
if pcap:
    # The capture is read as compare.py reads its own (one parser for both scripts).
    sys.path.insert(0, compare_dir)
    from compare import dropped_by_kernel, read_capture
    dropped = dropped_by_kernel(open(caperr).read())
    done, _ = read_capture(pcap, int(port))
    wire = {rid: ttft * 1e3 for _, ttft, rid, _ in done if rid}
# Per request id, the server's record and its first token event (with its send stamp).
rec = {}
for line in open(log):
    r = json.loads(line)
    first = next((e for e in r["events"] if e["token"]), None)
    if first is not None and first.get("tx_s") is not None:
        rec[r["id"]] = (r, first)
server = {i: first["tx_s"] for i, (_, first) in rec.items()}
samples = json.load(open(report))["models"][0]["levels"][0]["samples"]
errs, lags, shared_off, shared = [], [], 0, 0
unmatched, unmarked = [], []
def ms(v):
    return "null" if v is None else f"{v * 1e3:.3f}"
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
            capt = wire.get(s["request_id"])
            unmarked.append(
                f"{s['request_id']}: {err:+.3f} ms; client: wire TTFT {ms(s['wire_ttft_s'])}, read lag"
                f" {ms(s.get('read_lag_s'))}, send lag {ms(s.get('send_lag_s'))}, unstamped"
                f" {bool(s.get('unstamped'))}; server: first token written {ms(first['t_s'])}, left"
                f" {ms(first['tx_s'])} after arrival (ms), conn {r.get('conn')}"
                + (f"; capture: {capt:.3f} ms" if capt is not None else ""))
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
if pcap:
    cerr = [(s["wire_ttft_s"] * 1e3 - wire[s["request_id"]]) for s in samples
            if s.get("wire_ttft_s") is not None and s.get("request_id") in wire]
    serr = [(server[i] * 1e3 - w) for i, w in wire.items() if i in server]
    void = "" if dropped == 0 else f"  VOID: the capture dropped {dropped} packets"
    print(f"     capture: {len(cerr)}/{len(samples)} matched; client minus capture {three(cerr)} ms,"
          f" > 1 ms off {sum(abs(e) > 1 for e in cerr)}; server minus capture {three(serr)} ms{void}")
PY
    done
done
