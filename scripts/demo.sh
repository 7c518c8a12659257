#!/usr/bin/env bash
# The README's first command: start a real local model server (llama.cpp's server with
# SmolLM2-135M-Instruct, from PyPI) on 127.0.0.1:8080, then `tokenprobe serve` against it with
# config/tokenprobe.yml on 127.0.0.1:9464. /metrics fills within seconds. Ctrl-C (or SIGTERM to
# this script) stops both. llama.cpp's own log goes to target/demo-llama.log.
#
# Needs: Rust (cargo), python3 with venv, curl. Environment: LLAMA_PORT (8080),
# LISTEN (127.0.0.1:9464), CONFIG (config/tokenprobe.yml).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
llama_port="${LLAMA_PORT:-8080}"
listen="${LISTEN:-127.0.0.1:9464}"
config="${CONFIG:-config/tokenprobe.yml}"

bash scripts/install-test-deps.sh --model-only
echo "demo: building the release binary (the first build takes a few minutes)"
cargo build --release
mkdir -p target

pids=()
cleanup() {
    trap - EXIT INT TERM
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

echo "demo: starting llama.cpp server on 127.0.0.1:$llama_port (log: target/demo-llama.log)"
bash scripts/llama-server.sh --port "$llama_port" >target/demo-llama.log 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do
    if curl -fsS "http://127.0.0.1:$llama_port/health" >/dev/null 2>&1; then break; fi
    if ! kill -0 "${pids[0]}" 2>/dev/null; then
        echo "demo: llama server exited; see target/demo-llama.log" >&2
        exit 1
    fi
    sleep 0.5
done
echo "demo: tokenprobe serving on http://$listen/metrics (Ctrl-C to stop)"
./target/release/tokenprobe serve --config.file "$config" --web.listen-address "$listen" &
pids+=($!)
wait "${pids[1]}"
