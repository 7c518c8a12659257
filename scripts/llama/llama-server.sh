#!/usr/bin/env bash
# Starts llama.cpp's server with SmolLM2-135M on 127.0.0.1:${1:-8080}; see
# scripts/llama/llama-server.py --help. Needs scripts/ci/install-test-deps.sh first.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${TOKENPROBE_VENV:-$repo/.venv}"
if [ ! -x "$venv/bin/python" ]; then
    echo "llama-server.sh: no venv at $venv; run scripts/ci/install-test-deps.sh" >&2
    exit 1
fi
exec "$venv/bin/python" "$repo/scripts/llama/llama-server.py" "$@"
