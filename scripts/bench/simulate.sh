#!/usr/bin/env bash
# Send-jitter of `tokenprobe simulate`: how late each event's write returns against its schedule
# (`t_s - due_s` in the event log), at several numbers of concurrent streams.
#
# For each level N in $CONCURRENCY, starts the release binary with --event-log, runs N closed-loop
# users for $DURATION seconds (each: new connection, POST /v1/chat/completions with stream and
# usage, read to the end, repeat) from a small Python asyncio client that reads lazily (a pause of
# $READ_PAUSE s between reads, so the client costs little CPU; the socket buffers hold the events
# meanwhile), then prints percentiles of the lateness of token events and of the first token event,
# and the CPU use of server and client. Users start at uniformly random instants within the first
# $STAGGER s (about one request's duration) so that arrivals are spread as in steady state rather
# than all at once; STAGGER=0 starts them together (every stream then has the same phase and the
# server writes N events in one burst every ITL: the worst case).
#
#   scripts/bench/simulate.sh                         # 1 and 500 streams, 10 s each
#   CONCURRENCY="1 500 1000 2000" DURATION=20 scripts/bench/simulate.sh
#   TTFT=100ms ITL=10ms TOKENS=128 scripts/bench/simulate.sh
#   TIMER=tokio scripts/bench/simulate.sh             # tokio's 1 ms timer instead of the timerfd
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

CONCURRENCY="${CONCURRENCY:-1 500}"
DURATION="${DURATION:-10}"
TTFT="${TTFT:-200ms}"
ITL="${ITL:-20ms}"
TOKENS="${TOKENS:-64}"
READ_PAUSE="${READ_PAUSE:-0.25}"
STAGGER="${STAGGER:-1.5}"
TIMER="${TIMER:-precise}"
TIMER_SLACK="${TIMER_SLACK:-auto}"

cargo build --release --quiet
bin="$repo/target/release/tokenprobe"
work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

echo "tokenprobe simulate --ttft $TTFT --itl $ITL --output-tokens $TOKENS --timer $TIMER --timer-slack $TIMER_SLACK; ${DURATION}s per level, users start within ${STAGGER}s; $(nproc) CPUs"
for n in $CONCURRENCY; do
    log="$work/events-$n.jsonl"
    "$bin" simulate --listen 127.0.0.1:0 --ttft "$TTFT" --itl "$ITL" --output-tokens "$TOKENS" \
        --timer "$TIMER" --timer-slack "$TIMER_SLACK" --event-log "$log" --log.level warn >"$work/stdout-$n" 2>"$work/stderr-$n" &
    server_pid=$!
    for _ in $(seq 100); do
        [ -s "$work/stdout-$n" ] && break
        sleep 0.05
    done
    addr="$(head -n1 "$work/stdout-$n" | sed 's/^listening on //')"
    python3 - "$addr" "$n" "$DURATION" "$server_pid" "$log" "$READ_PAUSE" "$STAGGER" <<'EOF'
import asyncio, json, os, random, sys, time

addr, n, duration, pid, logpath, pause, stagger = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], float(sys.argv[6]), float(sys.argv[7])
host, port = addr.split("//", 1)[1].rsplit(":", 1)
body = json.dumps({"model": "m", "stream": True, "stream_options": {"include_usage": True},
                   "messages": [{"role": "user", "content": "Say hello."}]}).encode()
request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body

def cpu_seconds():
    """(user, system) CPU seconds of the server."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck

async def user(end, stats):
    await asyncio.sleep(random.uniform(0, stagger))
    while time.monotonic() < end:
        try:
            r, w = await asyncio.open_connection(host, int(port))
            w.write(request)
            await w.drain()
            while await r.read(1 << 20):
                await asyncio.sleep(pause)
            w.close()
            stats["ok"] += 1
        except OSError as e:
            stats["err"] += 1
            await asyncio.sleep(0.1)

async def main():
    stats = {"ok": 0, "err": 0}
    cpu0, own0, t0 = cpu_seconds(), time.process_time(), time.monotonic()
    await asyncio.gather(*(user(t0 + duration, stats) for _ in range(n)))
    wall = time.monotonic() - t0
    cpu1 = cpu_seconds()
    cpu = (cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])
    stats["client_cpu"] = (time.process_time() - own0) / wall
    return stats, wall, cpu

stats, wall, cpu = asyncio.run(main())
time.sleep(0.5)  # the log thread flushes once it has caught up

def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]

late, first, head = [], [], []
with open(logpath) as f:
    for line in f:
        r = json.loads(line)
        if r["end"] != "complete":
            continue
        if r["head_written_s"] is not None:
            head.append(r["head_written_s"])
        toks = [e for e in r["events"] if e["token"]]
        late += [e["t_s"] - e["due_s"] for e in toks]
        if toks:
            first.append(toks[0]["t_s"] - toks[0]["due_s"])
us = lambda x: f"{x * 1e6:8.0f}"
print(f"\n== {n} concurrent streams: {stats['ok']} requests ({stats['err']} client errors), "
      f"{len(late)} token events ({len(late) / wall:.0f}/s), CPU (% of one core): server {100 * sum(cpu) / wall:.0f}% "
      f"({100 * cpu[0] / wall:.0f}% user, {100 * cpu[1] / wall:.0f}% system; {1e6 * sum(cpu) / max(len(late), 1):.1f} us per event), "
      f"client {100 * stats['client_cpu']:.0f}%; load average {os.getloadavg()[0]:.1f}")
print(f"   lateness (write returned - due), us:   p50     p90     p99   p99.9     max")
print(f"   every token event            {us(pct(late, 50))}{us(pct(late, 90))}{us(pct(late, 99))}{us(pct(late, 99.9))}{us(max(late, default=float('nan')))}")
print(f"   first token event (TTFT)     {us(pct(first, 50))}{us(pct(first, 90))}{us(pct(first, 99))}{us(pct(first, 99.9))}{us(max(first, default=float('nan')))}")
print(f"   head written after arrival   {us(pct(head, 50))}{us(pct(head, 90))}{us(pct(head, 99))}{us(pct(head, 99.9))}{us(max(head, default=float('nan')))}")
EOF
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
done
