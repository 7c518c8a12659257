#!/usr/bin/env bash
# Memory of one probe on an endless stream at full speed (issue: "one fast stream can use hundreds
# of MB"). Starts `tokenprobe simulate` on loopback with no inter-token gap and an output length
# that never ends, runs one `tokenprobe probe` against it until its total deadline (SECONDS_RUN,
# default 40), samples the prober's VmHWM every 0.5 s and prints its peak with the bytes its
# connection received (ss's bytes_received).
# Stops by itself. Usage: scripts/bench/probe-memory.sh [BIN]  (default target/release/tokenprobe)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${1:-$repo/target/release/tokenprobe}"
secs="${SECONDS_RUN:-40}"
[ -x "$bin" ] || { echo "probe-memory: no binary at $bin (cargo build --release)" >&2; exit 2; }
work="$(mktemp -d)"
cleanup() { kill "${sim:-}" "${probe:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$bin" simulate --listen 127.0.0.1:0 --ttft 0ms --itl 0ms --output-tokens 4000000000 \
    --log.level warn >"$work/sim.out" 2>&1 &
sim=$!
for _ in $(seq 1 50); do grep -q listening "$work/sim.out" && break; sleep 0.1; done
addr="$(sed -n 's#.*listening on http://##p' "$work/sim.out" | head -1)"
[ -n "$addr" ] || { echo "probe-memory: simulate did not start" >&2; cat "$work/sim.out" >&2; exit 1; }
"$bin" probe --base-url "http://$addr/v1" --model m --max-tokens 4000000000 --proxy none \
    --timeout-total "${secs}s" --timeout-idle 10s --format json >"$work/probe.json" 2>/dev/null &
probe=$!
port="${addr##*:}"
peak=0
read_bytes=0
while kill -0 "$probe" 2>/dev/null; do
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$probe/status" 2>/dev/null || echo 0)
    got=$(ss -tinH "dport = :$port" 2>/dev/null | grep -o 'bytes_received:[0-9]*' | cut -d: -f2 | sort -n | tail -1 || true)
    [ -n "$got" ] && read_bytes=$got
    [ "${hwm:-0}" -gt "$peak" ] && peak=$hwm
    sleep 0.5
done
wait "$probe" || true
outcome="$(sed -n 's/.*"error_type":"\([a-z_]*\)".*/\1/p' "$work/probe.json")"
printf 'probe-memory: %s s endless stream, %s MiB read (%.1f MiB/s), peak RSS (VmHWM) %.1f MiB, outcome %s\n' \
    "$secs" "$((read_bytes / 1048576))" "$(echo "$read_bytes / 1048576 / $secs" | bc -l)" \
    "$(echo "$peak / 1024" | bc -l)" "${outcome:-success}"
