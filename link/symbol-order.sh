#!/usr/bin/env bash
# Writes link/symbol-order.txt, the order build.rs hands the linker: the functions a release
# `tokenprobe serve` runs, as callgrind saw them (valgrind, Debian's package), so they sit
# together in the binary and serve keeps ~2 MiB of code resident instead of most of its 13 MiB.
#
#   1. serve, 20 jobs every 1 s against `tokenprobe simulate`, scraped every 2 s: the functions
#      of its steady state (the second 30 s) first, then those its start-up ran;
#   2. bench, 1 and 8 streams over kept connections: the functions it added.
#
# Names are the release build's own (the profile keeps its symbol table, `strip = "debuginfo"`);
# they hold while Cargo.lock, the release profile and the toolchain do. Re-run after any of them
# changes, then rebuild; a stale list only costs the layout, never the build. Loopback only;
# takes about two minutes.
#
#   link/symbol-order.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release --quiet
bin="$repo/target/release/tokenprobe"
work="$(mktemp -d)"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin" simulate --listen 127.0.0.1:0 --ttft 10ms --itl 10ms --output-tokens 16 \
    --max-concurrency 100000 --log.level warn >"$work/sim.out" &
pids+=($!)
for _ in $(seq 100); do grep -q '^listening on ' "$work/sim.out" 2>/dev/null && break; sleep 0.05; done
url="$(sed -n 's/^listening on //p' "$work/sim.out")/v1"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

cat >"$work/serve.yml" <<EOF
defaults: {interval: 1s}
prompts: [{name: p, messages: [{role: user, content: hi}], max_tokens: 16}]
targets:
  - {name: stub, base_url: "$url", models: [$(seq -s, -f 'm%g' 0 19)]}
EOF
valgrind --tool=callgrind --demangle=no --compress-strings=no --compress-pos=no \
    --callgrind-out-file="$work/serve.cg" "$bin" serve --config.file "$work/serve.yml" \
    --web.listen-address "127.0.0.1:$port" --log.level warn 2>"$work/serve.vg" &
vg=$!
pids+=("$vg")
scrape() { curl -fsS "http://127.0.0.1:$port/metrics" >/dev/null; curl -fsS "http://127.0.0.1:$port/" >/dev/null; }
for _ in $(seq 15); do sleep 2; scrape || true; done
callgrind_control -d "$vg" >/dev/null 2>&1 # start-up and the first 30 s
for _ in $(seq 15); do sleep 2; scrape; done
callgrind_control -d "$vg" >/dev/null 2>&1 # the steady state alone
kill -TERM "$vg"
wait "$vg" || true

cat >"$work/bench.yml" <<EOF
prompts: [{name: p, messages: [{role: user, content: "Say hello"}], max_tokens: 64}]
targets:
  - {name: stub, base_url: "$url", models: [sim], connection: reuse}
EOF
valgrind --tool=callgrind --demangle=no --compress-strings=no --compress-pos=no \
    --callgrind-out-file="$work/bench.cg" "$bin" bench --config.file "$work/bench.yml" \
    --concurrency 1,8 --duration-per-level 8s --samples --no-progress -o "$work/bench.json" \
    >/dev/null 2>"$work/bench.vg"

nm --defined-only "$bin" >"$work/nm.txt"
python3 - "$work" "$bin" >link/symbol-order.txt <<'EOF'
import re, sys
work, binary = sys.argv[1], sys.argv[2]
text = {l.split()[2] for l in open(f"{work}/nm.txt") if len(l.split()) == 3 and l.split()[1] in "tT"}

def functions(path):
    """The functions of the binary itself with any cost in one callgrind dump."""
    names, ours = [], False
    for line in open(path):
        if line.startswith("ob="):
            ours = line[3:].strip() == binary
        elif ours and line.startswith("fn="):
            names.append(re.sub(r"'\d+$", "", line[3:].strip()))
    return names

# Tier by tier (serve's steady state, its start-up, its stop, then bench), each sorted by name so
# that two runs give nearly the same file.
order, seen = [], set()
for dump in ("serve.cg.2", "serve.cg.1", "serve.cg", "bench.cg"):
    tier = sorted({name for name in functions(f"{work}/{dump}") if name in text} - seen)
    seen.update(tier)
    order.extend(tier)
print("\n".join(order))
print(f"{len(order)} functions ordered", file=sys.stderr)
EOF
