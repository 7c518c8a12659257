#!/usr/bin/env bash
# How `tokenprobe serve`'s memory grows with its jobs: for each count in $JOBS, one target with
# that many models on `tokenprobe simulate` (16 tokens, 10 ms apart), each probed every
# $INTERVAL, for $SECONDS_TO_RUN s; then prints the process's VmRSS, its PSS (shared pages divided
# among the processes mapping them), and the RSS split into RssAnon (its own
# heap and stacks) and RssFile (mapped pages of the binary and libraries, shared and
# reclaimable), the series per job on /metrics, and the CPU the exporter used per probe (the time
# its threads ran over the run's second half, summed from /proc/PID/task/*/schedstat in
# nanoseconds rather than from 10 ms ticks, divided by the probes it ran meanwhile; the scrapes
# that count them included). Loopback only; stops itself.
#
#   scripts/bench/rss-jobs.sh                      # 1, 10, 100, 1000 jobs, every 5 s, 40 s each
#   JOBS="20" INTERVAL=1s scripts/bench/rss-jobs.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
JOBS="${JOBS:-1 10 100 1000}"
INTERVAL="${INTERVAL:-5s}"
run_for="${SECONDS_TO_RUN:-40}"
bin="${TOKENPROBE_RELEASE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin=target/release/tokenprobe
fi
tmp="$(mktemp -d)"
"$bin" simulate --listen 127.0.0.1:0 --ttft 10ms --itl 10ms --output-tokens 16 \
    --max-concurrency 100000 --log.level warn >"$tmp/stub.out" &
stub=$!
tp=""
trap 'kill $tp 2>/dev/null && wait $tp 2>/dev/null; kill $stub 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do grep -q "listening on" "$tmp/stub.out" && break; sleep 0.1; done
url="$(sed -n 's#^listening on \(http://.*\)#\1/v1#p' "$tmp/stub.out")"
kib() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$tp/status"; }
# PSS: the resident pages with the shared ones divided among the processes mapping them.
pss() { awk '$1 == "Pss:" {print $2}' "/proc/$tp/smaps_rollup"; }
mib() { echo "$(($1 / 1024)).$(( ($1 % 1024) * 10 / 1024 ))"; }
# Nanoseconds every thread of PID has run (serve's threads live as long as it does).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'; }
printf '%6s %10s %10s %10s %10s %10s %8s %12s %14s\n' jobs probes VmRSS Pss RssAnon RssFile series series/job "CPU/probe ms"
for n in $JOBS; do
    models="$(seq -s, -f 'm%g' 0 $((n - 1)))"
    {
        echo "defaults: {interval: $INTERVAL}"
        echo "prompts: [{name: p, messages: [{role: user, content: hi}], max_tokens: 16}]"
        echo "targets:"
        echo "  - {name: stub, base_url: \"$url\", models: [$models]}"
    } >"$tmp/c.yml"
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    "$bin" serve --config.file "$tmp/c.yml" --web.listen-address "127.0.0.1:$port" --log.level warn &
    tp=$!
    # CPU per probe over the run's second half (start-up, config and TLS roots, left out).
    sleep "$((run_for / 2))"
    cpu0="$(cpu_ns "$tp")"
    probes0="$(curl -fsS "http://127.0.0.1:$port/metrics" | awk '/^tokenprobe_probes_total/ {s+=$2} END {printf "%.0f", s}')"
    sleep "$((run_for - run_for / 2))"
    cpu="$(( $(cpu_ns "$tp") - cpu0 ))"
    curl -fsS "http://127.0.0.1:$port/metrics" >"$tmp/m.txt"
    probes="$(awk '/^tokenprobe_probes_total/ {s+=$2} END {printf "%.0f", s}' "$tmp/m.txt")"
    series="$(grep -c 'model="m' "$tmp/m.txt" || true)"
    per_probe="$(awk -v t="$cpu" -v p="$((probes - probes0))" 'BEGIN {printf "%.3f", (p > 0 ? t / 1e6 / p : 0)}')"
    printf '%6s %10s %10s %10s %10s %10s %8s %12s %14s\n' "$n" "$probes" "$(mib "$(kib VmRSS)") MiB" \
        "$(mib "$(pss)") MiB" "$(mib "$(kib RssAnon)") MiB" "$(mib "$(kib RssFile)") MiB" "$series" "$((series / n))" "$per_probe"
    kill "$tp"
    wait "$tp" 2>/dev/null || true
    tp=""
done
