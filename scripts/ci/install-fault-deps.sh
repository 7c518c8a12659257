#!/usr/bin/env bash
# Installs what the fault-injection and timing tests need into the project venv
# ($TOKENPROBE_VENV, default <repo>/.venv; created with `python3 -m venv` if
# missing):
#
#   - llmock          `llmock serve`: mock OpenAI/Anthropic server that injects
#                     HTTP errors and stream faults on request   (tests/peers/llmock.rs)
#   - guidellm        `guidellm mock-server`: streams with a configured TTFT and
#                     inter-token latency, the timing ground truth (tests/peers/guidellm.rs)
#
# Pinned and hash-checked: scripts/ci/requirements-faults.txt, installed with
# --no-deps --require-hashes --only-binary=:all: (guidellm's declared dependencies
# include torch; the mock server needs none of that). Idempotent: when the venv
# already holds this exact requirements file (stamp) and both commands start, it
# does nothing (well under a second).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${TOKENPROBE_VENV:-$repo/.venv}"
req="$repo/scripts/ci/requirements-faults.txt"
stamp="$venv/.tokenprobe-fault-deps.sha256"
t_start=$SECONDS

log() { printf 'install-fault-deps: %s\n' "$*"; }

# Cheap check that the installed packages are complete: every module the two
# servers import at start-up is findable (no import, so no second of start-up).
check() {
    [ -x "$venv/bin/llmock" ] && [ -x "$venv/bin/guidellm" ] &&
        "$venv/bin/python" - <<'EOF'
import importlib.util as u, sys
mods = ["llmock", "fastapi", "starlette", "uvicorn", "httptools", "uvloop", "typer",
        "guidellm", "sanic", "sanic_routing", "transformers", "tokenizers", "faker",
        "loguru", "pydantic_settings", "numpy", "huggingface_hub", "httpx2"]
missing = [m for m in mods if u.find_spec(m) is None]
if missing:
    print("missing modules: " + ", ".join(missing), file=sys.stderr)
    sys.exit(1)
EOF
}

want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ] && check 2>/dev/null; then
    log "up to date: $venv ($((SECONDS - t_start))s)"
    exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
    log "creating venv $venv"
    python3 -m venv "$venv"
fi

log "pip install -r scripts/ci/requirements-faults.txt (pinned, hashed, --no-deps)"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
    --no-deps --require-hashes --only-binary=:all: --no-compile -r "$req"

# Smoke test: both commands must at least parse their arguments (this imports
# each one's CLI module and its dependencies).
if ! check; then
    log "ERROR: packages missing after pip install" >&2
    exit 1
fi
"$venv/bin/llmock" serve --help >/dev/null
"$venv/bin/guidellm" mock-server --help >/dev/null 2>&1 || {
    log "ERROR: \`guidellm mock-server --help\` failed:" >&2
    "$venv/bin/guidellm" mock-server --help >&2 || true
    exit 1
}
echo "$want" >"$stamp"
log "installed into $venv in $((SECONDS - t_start))s"
