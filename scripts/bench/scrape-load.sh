#!/usr/bin/env bash
# Do scrapes bend probe timestamps? Starts `tokenprobe simulate` (TTFT 200 ms,
# 16 tokens 10 ms apart, with its event log of send instants) and `tokenprobe serve` with 5 jobs
# probing it every 500 ms, all on loopback; measures an idle phase, then hammers /metrics with
# SCRAPERS concurrent scrapers (examples/scrape_load.rs: Prometheus's Accept and gzip, each
# scraper fetching again as soon as an answer is read) for DURATION seconds. For every probe, the
# TTFT error is tokenprobe's TTFT minus the instant the simulator wrote the first token event
# (after the request arrived), paired per job by `x-request-id` and order. Prints, per phase, the
# probes, TTFT error p50/p99/max and skipped ticks. Stops by itself; cleans up on exit.
#
#   scripts/bench/scrape-load.sh                     # 200 scrapers, 60 s, idle phase 20 s
#   SCRAPERS=50 DURATION=30 IDLE=10 PROFILE=debug scripts/bench/scrape-load.sh
#
# WRONG_PASSWORDS=1 protects the endpoints with basic auth (bcrypt cost 10) and has every scraper
# send a wrong password (bcrypt must not delay probes).
# SERVE_BIN: see below. LOAD_NICE (default 0) runs the scrapers at a lower CPU priority, to stand in for scrapers on
# another machine when the 2 cores here are shared.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
scrapers="${SCRAPERS:-200}"
duration="${DURATION:-60}"
idle="${IDLE:-20}"
profile="${PROFILE:-release}"
load_nice="${LOAD_NICE:-0}"
wrong="${WRONG_PASSWORDS:-0}"
# SERVE_BIN runs another tokenprobe build as the exporter (e.g. one from before a change); the
# simulator and the scrapers stay this checkout's.
if [[ "$profile" == release ]]; then
    cargo build --release --quiet --bin tokenprobe --example scrape_load
    bin="$repo/target/release/tokenprobe"
    load="$repo/target/release/examples/scrape_load"
else
    cargo build --quiet --bin tokenprobe --example scrape_load
    bin="$repo/target/debug/tokenprobe"
    load="$repo/target/debug/examples/scrape_load"
fi
work="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

"$bin" simulate --listen 127.0.0.1:0 --ttft 200ms --itl 10ms --output-tokens 16 \
    --event-log "$work/events.jsonl" --log.level warn >"$work/sim.out" 2>"$work/sim.err" &
sim_pid=$!
pids+=("$sim_pid")
for _ in $(seq 100); do grep -q listening "$work/sim.out" 2>/dev/null && break; sleep 0.1; done
sim="$(sed -n 's#^listening on http://##p' "$work/sim.out")"
[[ -n "$sim" ]] || { echo "simulate did not start" >&2; exit 1; }

{
    echo "defaults: {interval: 500ms}"
    echo "prompts: [{name: p, messages: [{role: user, content: hi}], max_tokens: 16}]"
    echo "targets:"
    for i in 1 2 3 4 5; do
        echo "  - {name: t$i, base_url: \"http://$sim/v1\", models: [m], proxy: none, headers: {x-request-id: t$i}}"
    done
} >"$work/c.yml"
web_args=()
load_args=()
if [[ "$wrong" == 1 ]]; then
    printf 'basic_auth_users:\n  prom: "%s"\n' "$("$load" --bcrypt-hash right)" >"$work/web.yml"
    web_args=(--web.config.file "$work/web.yml")
    load_args=(--basic prom:wrong)
fi
"${SERVE_BIN:-$bin}" serve --config.file "$work/c.yml" --web.listen-address 127.0.0.1:0 --log.format json \
    --log.level tokenprobe=debug "${web_args[@]}" 2>"$work/serve.log" &
serve_pid=$!
pids+=("$serve_pid")
for _ in $(seq 100); do grep -q '"address"' "$work/serve.log" 2>/dev/null && break; sleep 0.1; done
addr="$(grep -o '"address":"[^"]*"' "$work/serve.log" | head -1 | cut -d'"' -f4)"
[[ -n "$addr" ]] || { echo "serve did not start" >&2; cat "$work/serve.log" >&2; exit 1; }
metrics="http://$addr/metrics"
snap() {
    python3 -c 'import sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Basic cHJvbTpyaWdodA=="})  # prom:right
sys.stdout.write(urllib.request.urlopen(req, timeout=30).read().decode())' "$metrics" >"$1"
}

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); profile $profile; serve: ${SERVE_BIN:-$bin}"
sleep 2 # first ticks (offsets below 500 ms) and connection warm-up
t_idle=$(date +%s%N); snap "$work/m0.txt"
sleep "$idle"
t_load=$(date +%s%N); snap "$work/m1.txt"
timeout $((duration + 30)) nice -n "$load_nice" "$load" "$metrics" "$scrapers" "${duration}s" "${load_args[@]}" | tee "$work/load.txt"
t_end=$(date +%s%N); snap "$work/m2.txt"
sleep 1 # let the last probes finish and the event log be written
kill -TERM "$serve_pid"; wait "$serve_pid" || true
kill -TERM "$sim_pid"; wait "$sim_pid" || true

python3 - "$work" "$t_idle" "$t_load" "$t_end" "$scrapers" <<'EOF'
import json, sys, re, collections
work, t_idle, t_load, t_end, scrapers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
probes = collections.defaultdict(list)  # job -> [ttft_s or None], in finish order
for line in open(f"{work}/serve.log"):
    try:
        v = json.loads(line)
    except ValueError:
        continue
    msg = v.get("msg", v.get("message"))  # the key's name differs between log formats/versions
    if msg == "probe succeeded":
        probes[v["job"].split("/")[0]].append(v.get("ttft_s"))
    elif msg == "probe failed":
        probes[v["job"].split("/")[0]].append(None)
events = collections.defaultdict(list)  # id -> [(arrival_ns, first token t_s)]
for line in open(f"{work}/events.jsonl"):
    r = json.loads(line)
    first = next((e["t_s"] for e in r["events"] if e["token"]), None)
    events[r["id"]].append((r["arrival_unix_ns"], first))
def skipped(path):
    s = 0.0
    for l in open(path):
        if l.startswith("tokenprobe_probes_skipped_total{"):
            s += float(l.rsplit(" ", 1)[1])
    return s
phases = {"idle": (t_idle, t_load, 0), f"{scrapers} scrapers": (t_load, t_end, 0)}
errs = {p: [] for p in phases}
failed = {p: 0 for p in phases}
unpaired = 0
for job, ps in probes.items():
    ev = events.get(job, [])
    if len(ev) != len(ps):
        unpaired += abs(len(ev) - len(ps))
    for ttft, (arr, first) in zip(ps, ev):
        for name, (a, b, _) in phases.items():
            if a <= arr < b:
                if ttft is None or first is None:
                    failed[name] += 1
                else:
                    errs[name].append((ttft - first) * 1000.0)
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, round((len(v) - 1) * p))] if v else float("nan")
sk = [skipped(f"{work}/m{i}.txt") for i in range(3)]
print("| phase | probes | failed | TTFT error p50 ms | p90 ms | p99 ms | max ms | over 2 ms | skipped ticks |")
print("|---|---|---|---|---|---|---|---|---|")
for i, name in enumerate(phases):
    e = errs[name]
    over = sum(1 for x in e if x > 2.0)
    print(f"| {name} | {len(e)} | {failed[name]} | {q(e, .5):.3f} | {q(e, .9):.3f} | {q(e, .99):.3f} | {max(e) if e else float('nan'):.3f} | {over} | {sk[i + 1] - sk[i]:.0f} |")
if unpaired:
    print(f"warning: {unpaired} probes/requests could not be paired", file=sys.stderr)
EOF
