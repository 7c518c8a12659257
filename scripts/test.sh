#!/usr/bin/env bash
# The project's test command: installs what the end-to-end tests need
# (scripts/ci/install-test-deps.sh, idempotent: ~0.2 s when already done), then
# formatting, lints and every test target. The end-to-end tests fail (never
# skip) when what they need is missing. TOKENPROBE_NO_INSTALL=1 skips the
# install step.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

export TOKENPROBE_VENV="${TOKENPROBE_VENV:-$repo/.venv}"
if [ "${TOKENPROBE_NO_INSTALL:-0}" != 1 ]; then
    bash "$repo/scripts/ci/install-test-deps.sh"
fi
if [ ! -x "$TOKENPROBE_VENV/bin/python" ]; then
    echo "scripts/test.sh: no Python venv at $TOKENPROBE_VENV: run scripts/ci/install-test-deps.sh first" >&2
    exit 1
fi
for tool in prometheus promtool chromium; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "scripts/test.sh: $tool not found: run scripts/ci/install-test-deps.sh first" >&2
        exit 1
    fi
done
# The venv's bin first, so tests find its python; prometheus/promtool/chromium are in /usr/bin.
export PATH="$TOKENPROBE_VENV/bin:$PATH"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# The runs the tests make go to a scratch run store, not the user's (tests of the store give
# their own --history).
history_dir="$(mktemp -d)"
trap 'rm -rf "$history_dir"' EXIT
export TOKENPROBE_HISTORY="${TOKENPROBE_HISTORY:-$history_dir/runs.sqlite3}"

step() {
    local name="$1"
    shift
    local t=$SECONDS st=0
    echo "==> $name: $*"
    "$@" || st=$?
    if [ "$st" -ne 0 ]; then
        echo "==> $name: FAILED (exit $st, $((SECONDS - t))s)"
        return "$st"
    fi
    echo "==> $name: ok ($((SECONDS - t))s)"
}

step fmt cargo fmt --check
step clippy cargo clippy --all-targets -- -D warnings
# The release binary: the figures in README.md and docs/figures.md are checked against it.
step release cargo build --release
export TOKENPROBE_RELEASE_BIN="$repo/target/release/tokenprobe"
# Every test target; the end-to-end tests bound their own run time, and this
# bounds the whole run in case something hangs anyway. The e2e binary runs one
# test at a time: its tests time things on a 2-core machine and ran alone when
# each file was a binary of its own (bench's 80 kept-alive workers see another
# test's load as extra connections). Both steps run; either failing fails.
rc=0
step test timeout --kill-after=30s 1200s cargo test --no-fail-fast \
    --lib --bins --examples --benches --test core --test peers --test fd_exhaustion || rc=1
step test-e2e timeout --kill-after=30s 900s cargo test --test e2e --no-fail-fast -- --test-threads=1 || rc=1
exit "$rc"
