#!/usr/bin/env bash
# What answered, measured (docs/measurement.md, "What answered"), recorded in docs/figures.md and
# README.md (scripts/bench/figures.py):
#
#   substitution_detection  `serve` probing every 10 s: from a substitution (an honest
#                           `tokenprobe simulate` replaced on its port by one with
#                           `--served-model gpt-4o-mini`, SUBSTITUTIONS times, each after the
#                           job's first probe and a random 2-12 s) to the first probe flagged
#                           `model_mismatch` (/metrics read every 50 ms);
#   honest_false_mismatch   `serve` probing the real llama.cpp server (SmolLM2-135M, one thread,
#                           scripts/llama/llama-server.py) PROBES times with a calibrated 64-token
#                           prompt and 16 output tokens, the usage audit learning one token per
#                           event from the server's own usage: the probes flagged `model_mismatch`
#                           or `usage_mismatch` (none is true: the server is honest).
#
# Environment: TOKENPROBE_BIN (default target/release/tokenprobe), PROBES (1000), SUBSTITUTIONS
# (8), TOKENPROBE_VENV (the venv with llama.cpp; default <repo>/.venv).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
bin="$(realpath "${TOKENPROBE_BIN:-target/release/tokenprobe}")"
venv="${TOKENPROBE_VENV:-$repo/.venv}"
probes="${PROBES:-1000}"
subs="${SUBSTITUTIONS:-8}"
work="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# ---- substitution to the first flagged probe --------------------------------------------------
detect="$(python3 - "$bin" "$subs" "$work" <<'PY'
import random, signal, subprocess, sys, time, urllib.request
BIN, TRIALS, WORK = sys.argv[1], int(sys.argv[2]), sys.argv[3]
SIM, WEB = 18123, 19469
open(f"{WORK}/relay.yml", "w").write(f"""defaults:
  interval: 10s
prompts:
  - name: hello
    messages: [{{role: user, content: "Say hello"}}]
    max_tokens: 16
targets:
  - name: relay
    base_url: http://127.0.0.1:{SIM}/v1
    models: [gpt-4o]
""")
def sim(*extra):
    p = subprocess.Popen([BIN, "simulate", "--listen", f"127.0.0.1:{SIM}", "--ttft", "100ms",
                          "--itl", "10ms", "--output-tokens", "16", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert p.stdout.readline().startswith("listening on")
    return p, time.monotonic()
def metric(prefix, want=""):
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{WEB}/metrics", timeout=2).read().decode()
    except OSError:
        return 0.0
    return sum(float(l.rsplit(" ", 1)[1]) for l in body.splitlines()
               if l.startswith(prefix + "{") and want in l)
rng, out = random.Random(43), []
for t in range(TRIALS):
    honest, _ = sim()
    serve = subprocess.Popen([BIN, "serve", "--config.file", f"{WORK}/relay.yml",
                              "--web.listen-address", f"127.0.0.1:{WEB}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while metric("tokenprobe_probes_total") < 1:
        time.sleep(0.1)
    time.sleep(rng.uniform(2, 12))
    honest.send_signal(signal.SIGTERM); honest.wait()
    relay, t_sub = sim("--served-model", "gpt-4o-mini")
    while metric("tokenprobe_probe_flags_total", 'flag="model_mismatch"') < 1:
        time.sleep(0.05)
    out.append(time.monotonic() - t_sub)
    print(f"substitution {t + 1}: first flagged probe after {out[-1]:.2f} s", file=sys.stderr)
    for p in (serve, relay):
        p.send_signal(signal.SIGTERM); p.wait()
out.sort()
print(f"{out[len(out) // 2]:.1f} s median, {out[-1]:.1f} s max ({out[0]:.1f} s min, {len(out)} substitutions)")
PY
)"
echo "what-answered: substitution to the first flagged probe: $detect"

# ---- honest probes of llama.cpp ---------------------------------------------------------------
"$venv/bin/python" scripts/llama/llama-server.py --port 0 --threads 1 --die-with-parent \
    >"$work/llama.out" 2>"$work/llama.err" &
pids+=($!)
for _ in $(seq 1 900); do
    url="$(sed -n 's/^LLAMA_SERVER_URL=//p' "$work/llama.out")"
    [ -n "$url" ] && break
    sleep 0.1
done
[ -n "$url" ] || { echo "what-answered: llama-server did not start" >&2; exit 1; }
cat >"$work/honest.yml" <<EOF
defaults:
  interval: 200ms
  timeouts: {connect: 5s, first_token: 30s, idle: 30s, total: 60s}
prompts:
  - name: filler
    synthetic: {input_tokens: 64, output_tokens: 16}
targets:
  - name: llama
    base_url: $url/v1
    models: [smollm2]
EOF
"$bin" serve --config.file "$work/honest.yml" --web.listen-address 127.0.0.1:19466 \
    >/dev/null 2>"$work/serve.err" &
pids+=($!)
start=$SECONDS
sum() { # sum <metrics file> <series prefix> [label filter]
    awk -v p="$2{" -v f="${3:-}" 'index($0, p) == 1 && (f == "" || index($0, f)) { s += $NF } END { print s + 0 }' "$1"
}
while true; do
    curl -s http://127.0.0.1:19466/metrics >"$work/m.txt" || true
    n="$(sum "$work/m.txt" tokenprobe_probes_total)"
    [ "${n%.*}" -ge "$probes" ] && break
    sleep 2
done
m="$work/m.txt"
flagged_model="$(sum "$m" tokenprobe_probe_flags_total 'flag="model_mismatch"')"
flagged_usage="$(sum "$m" tokenprobe_probe_flags_total 'flag="usage_mismatch"')"
unconfirmed="$(sum "$m" tokenprobe_usage_audits_total 'result="unconfirmed"')"
within="$(sum "$m" tokenprobe_usage_audits_total 'result="within"')"
errors="$(sum "$m" tokenprobe_probe_errors_total)"
echo "what-answered: $n honest probes in $((SECONDS - start)) s: model_mismatch $flagged_model, usage_mismatch $flagged_usage, audits within $within, unconfirmed $unconfirmed, errors $errors"
flagged=$((${flagged_model%.*} + ${flagged_usage%.*}))

python3 scripts/bench/figures.py set substitution_detection "$detect" \
    --what "\`serve\` at a 10 s interval: from another model answering (\`simulate --served-model\`) to the first probe flagged \`model_mismatch\`" \
    --by scripts/bench/what-answered.sh
python3 scripts/bench/figures.py set honest_false_mismatch \
    "$flagged of ${n%.*} ($unconfirmed outputs off once, unconfirmed; $errors errors)" \
    --what "probes of the real llama.cpp server (SmolLM2-135M) flagged \`model_mismatch\` or \`usage_mismatch\`, usage audited by learned events" \
    --by scripts/bench/what-answered.sh
