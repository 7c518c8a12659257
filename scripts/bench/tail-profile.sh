#!/usr/bin/env bash
# Where the CPU goes while `tokenprobe bench` holds $STREAMS kept streams against `tokenprobe
# simulate` on this machine (default 1,000; `--ttft 100ms --itl 10ms --output-tokens 64`,
# 4 x STREAMS requests): `perf record -a` samples every CPU at 1,999 Hz, and the samples are cut
# into 5 ms windows. It prints the share of samples that were idle, the simulator's and the
# bench's, how many windows had no idle sample at all (both cores busy) and the longest run of
# them, who ran inside those windows, and the level's own figures: first tokens that shared a
# read with a later packet, the bench's CPU wait, and `client_bound`. docs/exactness.md ("The
# tail at 1,000 streams") has a run. Needs perf (Debian's linux-perf) and root; loopback only.
#
#   scripts/bench/tail-profile.sh
#   STREAMS=256 scripts/bench/tail-profile.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
command -v perf >/dev/null || { echo "tail-profile.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
streams="${STREAMS:-1000}"
bin="${TOKENPROBE_RELEASE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin=target/release/tokenprobe
fi
tmp="$(mktemp -d)"
"$bin" simulate --listen 127.0.0.1:0 --ttft 100ms --itl 10ms --output-tokens 64 \
    --max-concurrency 100000 --log.level warn >"$tmp/sim.out" &
sim=$!
trap 'kill $sim 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do grep -q "listening on" "$tmp/sim.out" && break; sleep 0.1; done
url="$(sed -n 's#^listening on \(http://.*\)#\1/v1#p' "$tmp/sim.out")"
cat >"$tmp/c.yml" <<EOF
prompts:
  - {name: p, messages: [{role: user, content: "Say hello"}], max_tokens: 64}
targets:
  - {name: sim, base_url: "$url", models: [sim], connection: reuse}
EOF
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $streams streams"
perf record -q -a -F 1999 -o "$tmp/perf.data" -- "$bin" bench --config.file "$tmp/c.yml" \
    --concurrency "$streams" --requests-per-level "$((4 * streams))" --no-progress \
    -o "$tmp/level.json" --accept-client-bound --history "$tmp/runs.sqlite3" >"$tmp/bench.out" 2>&1
perf script -i "$tmp/perf.data" -F pid,time 2>/dev/null >"$tmp/samples.txt"
python3 - "$tmp/samples.txt" "$sim" "$tmp/level.json" <<'EOF'
import collections, json, sys
samples, sim, level = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = []
for line in open(samples):
    f = line.split()
    if len(f) >= 2:
        rows.append((int(f[0]), float(f[1].rstrip(":"))))
# By process (perf's pid is the thread group): 0 is the idle task, the simulator is known, and
# the bench is the busiest of the others (kernel threads and the rest stay "other").
others = collections.Counter(p for p, _ in rows if p not in (0, sim))
bench = others.most_common(1)[0][0] if others else -1
def owner(pid):
    return {0: "idle", sim: "simulator", bench: "bench"}.get(pid, "other")
t0 = min(t for _, t in rows)
W = 0.005
win = collections.defaultdict(collections.Counter)
for pid, t in rows:
    win[int((t - t0) / W)][owner(pid)] += 1
total = collections.Counter()
for c in win.values():
    total.update(c)
n = sum(total.values())
print("samples: " + ", ".join(f"{k} {v / n:.0%}" for k, v in total.most_common()))
busy = sorted(k for k, c in win.items() if c["idle"] == 0)
run = best = 0
prev = None
for k in busy:
    run = run + 1 if prev == k - 1 else 1
    best, prev = max(best, run), k
print(f"5 ms windows: {len(win)}, with no idle sample (every core busy): {len(busy)}, "
      f"the longest run of them {best * W * 1e3:.0f} ms")
inside = collections.Counter()
for k in busy:
    inside.update(win[k])
m = sum(inside.values()) or 1
print("inside those windows: " + ", ".join(f"{k} {v / m:.0%}" for k, v in inside.most_common()))
l = json.load(open(level))["models"][0]["levels"][0]
print(f"level: {l['successes']} successes, {l.get('first_token_shared_read', 0)} first tokens "
      f"read with a later packet, CPU wait {l.get('cpu_wait_s') or 0:.2f} s in {l['wall_s']:.2f} s; "
      f"client_bound: {l.get('client_bound') or 'no'}")
EOF
