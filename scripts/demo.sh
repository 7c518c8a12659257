#!/usr/bin/env bash
# The README's first command: start a real local model server (llama.cpp's server with
# SmolLM2-135M-Instruct, from PyPI) on 127.0.0.1:8080, then `tokenprobe serve` against it with
# config/tokenprobe.yml on 127.0.0.1:9464. /metrics fills within seconds. Ctrl-C stops both.
#
# Environment: LLAMA_PORT (8080), LISTEN (127.0.0.1:9464), CONFIG (config/tokenprobe.yml).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
llama_port="${LLAMA_PORT:-8080}"
listen="${LISTEN:-127.0.0.1:9464}"
config="${CONFIG:-config/tokenprobe.yml}"

bash scripts/install-test-deps.sh
cargo build --release --quiet

echo "demo: starting llama.cpp server on 127.0.0.1:$llama_port"
bash scripts/llama-server.sh --port "$llama_port" &
llama_pid=$!
cleanup() { kill "$llama_pid" 2>/dev/null || true; wait "$llama_pid" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
for _ in $(seq 1 120); do
    if curl -fsS "http://127.0.0.1:$llama_port/health" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$llama_pid" 2>/dev/null; then echo "demo: llama server exited" >&2; exit 1; fi
    sleep 0.5
done
echo "demo: tokenprobe serving on http://$listen/metrics (Ctrl-C to stop)"
./target/release/tokenprobe serve --config.file "$config" --web.listen-address "$listen"
