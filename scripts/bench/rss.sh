#!/usr/bin/env bash
# Memory of `tokenprobe serve` with 10 jobs (target: under 10 MiB RSS), plus the release binary's
# size (debug info stripped, the symbol table kept: link/symbol-order.sh profiles this very build).
# Probes `tokenprobe simulate` (16 tokens, 10 ms apart) every second for
# ${SECONDS_TO_RUN:-30} s, then prints VmRSS, PSS and the anonymous part (/proc/PID/smaps_rollup),
# VmHWM and the probe count, and records them in
# docs/figures.md and README.md (scripts/bench/figures.py). Loopback only; stops itself.
# `--check`: measure the same way and compare with the recorded figures instead (the binary's size
# within 5%, the RSS within 30%: it depends on the run's length and the allocator); exit 1 if a
# figure does not hold. tests/e2e/readme_figures.rs runs it against the release binary.
set -euo pipefail
check=0
[ "${1:-}" = "--check" ] && check=1
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
run_for="${SECONDS_TO_RUN:-30}"
# TOKENPROBE_RELEASE_BIN: a release binary built already (scripts/test.sh builds one).
bin="${TOKENPROBE_RELEASE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin=target/release/tokenprobe
fi
tmp="$(mktemp -d)"
"$bin" simulate --listen 127.0.0.1:0 --ttft 10ms --itl 10ms --output-tokens 16 \
    --log.level warn >"$tmp/stub.out" &
stub=$!
tp=""
# tokenprobe first, so stopping does not cut a probe's stream (a `truncated` warning).
trap 'kill $tp 2>/dev/null && wait $tp 2>/dev/null; kill $stub 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do grep -q "listening on" "$tmp/stub.out" && break; sleep 0.1; done
url="$(sed -n 's#^listening on \(http://.*\)#\1/v1#p' "$tmp/stub.out")"
{
  echo "defaults: {interval: 1s}"
  echo "prompts: [{name: p, messages: [{role: user, content: hi}], max_tokens: 16}]"
  echo "targets:"
  echo "  - {name: stub, base_url: \"$url\", models: [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9]}"
} >"$tmp/c.yml"
port=$((20000 + RANDOM % 20000))
"$bin" serve --config.file "$tmp/c.yml" --web.listen-address "127.0.0.1:$port" --log.level warn &
tp=$!
sleep "$run_for"
probes="$(curl -fsS "http://127.0.0.1:$port/metrics" | awk '/^tokenprobe_probes_total/ {s+=$2} END {printf "%.0f", s}')"
errors="$(curl -fsS "http://127.0.0.1:$port/metrics" | awk '/^tokenprobe_probe_errors_total/ {s+=$2} END {printf "%.0f", s}')"
rss="$(awk '/VmRSS/ {print $2}' /proc/$tp/status)"
hwm="$(awk '/VmHWM/ {print $2}' /proc/$tp/status)"
# RSS counts every mapped page of the binary that is resident, shared or not, and which are
# differs from one machine to another; PSS shares them out between the processes mapping them,
# and the anonymous part (heap, stacks) is the process's own.
pss="$(awk '$1 == "Pss:" {print $2}' /proc/$tp/smaps_rollup)"
anon="$(awk '$1 == "Anonymous:" {print $2}' /proc/$tp/smaps_rollup)"
size="$(stat -c %s "$bin")"
mib() { echo "$(($1 / 1024)).$(( ($1 % 1024) * 10 / 1024 ))"; }
echo "serve, 10 jobs, ${run_for}s: probes=$probes errors=$errors VmRSS=$(mib "$rss") MiB Pss=$(mib "$pss") MiB Anonymous=$(mib "$anon") MiB VmHWM=$(mib "$hwm") MiB"
echo "release binary: $size bytes ($(( size / 1000000 )).$(( (size % 1000000) / 100000 )) MB)"
# The layout build.rs asks for: how many of link/symbol-order.txt's functions the binary has by
# those names (they change with Cargo.lock, the release profile or the toolchain).
order=link/symbol-order.txt
wanted="$(wc -l <"$order")"
laid="$(nm --defined-only "$bin" 2>/dev/null | awk 'NR == FNR {want[$1] = 1; next}
    ($3 in want) && !($3 in seen) {seen[$3] = 1; n++} END {print n + 0}' "$order" -)"
echo "laid out: $laid of the $wanted functions of $order are in the binary by name"
if [ "$check" = 1 ]; then
    ok=0
    if [ $((laid * 10)) -lt $((wanted * 9)) ]; then
        echo "the layout does not hold: Cargo.lock, the release profile or the toolchain changed;" \
            "run link/symbol-order.sh and rebuild"
        ok=1
    fi
    python3 scripts/bench/figures.py near binary_size "$(( size / 1000000 )).$(( (size % 1000000) / 100000 ))" --within 0.05 || ok=1
    python3 scripts/bench/figures.py near serve_rss "$(mib "$rss")" --within 0.30 || ok=1
    exit "$ok"
fi
# Record both in docs/figures.md and README.md (scripts/bench/figures.py).
python3 scripts/bench/figures.py set binary_size "$(( size / 1000000 )).$(( (size % 1000000) / 100000 )) MB" \
    --what "release binary (symbol table kept)" --by scripts/bench/rss.sh
python3 scripts/bench/figures.py set serve_rss "$(mib "$rss") MiB RSS (PSS $(mib "$pss") MiB, anonymous $(mib "$anon") MiB; peak RSS $(mib "$hwm") MiB)" \
    --what "\`serve\` with 10 jobs probing every second, after ${run_for} s ($probes probes)" --by scripts/bench/rss.sh
