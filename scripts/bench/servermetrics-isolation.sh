#!/usr/bin/env bash
# Does scraping server metrics bend a bench's TTFT? Starts `tokenprobe simulate`
# (TTFT 100 ms, 8 tokens 10 ms apart, with its event log of send instants) and a metrics server
# (Python, loopback) with /ok (the vLLM fixture), /slow (answers after 3 s), /garbage (HTML) and
# /huge (40 MiB); then runs `tokenprobe bench` at concurrency 1 (so requests arrive in the order
# they were sent and pair exactly with the event log) with REQUESTS requests, once per scenario:
#   none    no server metrics
#   ok4     four healthy endpoints, each scraped every 100 ms
#   bad4    slow, garbage, huge and a closed port, each scraped every 100 ms (timeout 100 ms)
# The TTFT error of a request is bench's TTFT minus the simulator's first-token write instant.
# Prints, per scenario: requests, scrapes (failed), TTFT error p50/p99/max.
#
#   scripts/bench/servermetrics-isolation.sh              # release build, 200 requests
#   PROFILE=debug REQUESTS=100 scripts/bench/servermetrics-isolation.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
requests="${REQUESTS:-200}"
profile="${PROFILE:-release}"
if [[ "$profile" == release ]]; then
    cargo build --release --quiet --bin tokenprobe
    bin="$repo/target/release/tokenprobe"
else
    cargo build --quiet --bin tokenprobe
    bin="$repo/target/debug/tokenprobe"
fi
work="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

python3 - "$repo/tests/fixtures/servermetrics/vllm.after.prom" >"$work/metrics.out" 2>/dev/null <<'EOF' &
import http.server, sys, time
fixture = open(sys.argv[1], "rb").read()
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def send(self, ctype, body):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        try:
            if self.path == "/ok":
                self.send("text/plain; version=0.0.4", fixture)
            elif self.path == "/slow":
                time.sleep(3)
                self.send("text/plain", b"slow 1\n")
            elif self.path == "/garbage":
                self.send("text/html", b"<html><body>502 Bad Gateway</body></html>")
            elif self.path == "/huge":
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                line = b'huge{a="aaaaaaaaaaaaaaaaaaaaaaaa"} 1\n' * 1000
                for _ in range(40 * 1024 * 1024 // len(line)):
                    self.wfile.write(line)
        except (BrokenPipeError, ConnectionResetError):
            pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(f"http://127.0.0.1:{s.server_address[1]}", flush=True)
s.serve_forever()
EOF
pids+=("$!")
for _ in $(seq 100); do [[ -s "$work/metrics.out" ]] && break; sleep 0.1; done
m="$(head -1 "$work/metrics.out")"
down="http://127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')/metrics"

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); profile $profile; $requests requests per scenario"
echo "| scenario | requests | scrapes (failed) | TTFT error p50 ms | p99 ms | max ms |"
echo "|---|---|---|---|---|---|"
for scenario in none ok4 bad4; do
    log="$work/events-$scenario.jsonl"
    "$bin" simulate --listen 127.0.0.1:0 --ttft 100ms --itl 10ms --output-tokens 8 \
        --event-log "$log" --log.level warn >"$work/sim.out" 2>"$work/sim.err" &
    sim_pid=$!
    for _ in $(seq 100); do grep -q listening "$work/sim.out" 2>/dev/null && break; sleep 0.1; done
    sim="$(sed -n 's#^listening on http://##p' "$work/sim.out")"
    printf 'prompts: [{name: p, messages: [{role: user, content: hi}], max_tokens: 8}]\ntargets:\n  - {name: sim, base_url: "http://%s/v1", models: [m], proxy: none}\n' "$sim" >"$work/c.yml"
    args=()
    case "$scenario" in
        ok4) args=(--server-metrics "$m/ok" --server-metrics "$m/ok" --server-metrics "$m/ok" --server-metrics "$m/ok") ;;
        bad4) args=(--server-metrics "$m/slow" --server-metrics "$m/garbage" --server-metrics "$m/huge" --server-metrics "$down") ;;
    esac
    "$bin" bench --config.file "$work/c.yml" --concurrency 1 --requests-per-level "$requests" \
        --server-metrics-interval 100ms "${args[@]}" --samples -o "$work/r.json" >/dev/null 2>"$work/bench.err"
    sleep 0.5 # the event log's last line
    kill -TERM "$sim_pid"; wait "$sim_pid" || true
    python3 - "$work/r.json" "$log" "$scenario" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
level = r["models"][0]["levels"][0]
samples = sorted(level["samples"], key=lambda s: s["sent_s"])
events = [json.loads(l) for l in open(sys.argv[2])]
events.sort(key=lambda e: e["arrival_unix_ns"])
errs = []
for s, e in zip(samples, events):
    first = next((x["t_s"] for x in e["events"] if x["token"]), None)
    if s["ttft_s"] is not None and first is not None:
        errs.append((s["ttft_s"] - first) * 1000.0)
errs.sort()
q = lambda p: errs[min(len(errs) - 1, round((len(errs) - 1) * p))]
srv = level.get("server") or {}
scr = f'{srv.get("scrapes", 0)} ({srv.get("scrape_errors", 0)})'
print(f"| {sys.argv[3]} | {len(errs)} | {scr} | {q(0.5):.2f} | {q(0.99):.2f} | {errs[-1]:.2f} |")
EOF
done
