#!/usr/bin/env bash
# Compares `tokenprobe bench` with GuideLLM and AIPerf (both from PyPI) and, when its binary is
# given, vllm-bench (vLLM's Rust benchmark client) driving the same loopback
# server (`tokenprobe simulate`) at the same closed-loop concurrency: client CPU, each tool's own
# scheduling lag, and each tool's TTFT error against the wire: a packet capture of the simulator's
# port (tcpdump), beside the simulator's event log. A level whose capture lost packets is void.
# Prints a Markdown table (docs/bench.md has the last one and how to read it).
#
#   scripts/bench/compare.sh                       # concurrency 1,4,16,64,256
#   LEVELS=1,16 TOOLS=tokenprobe,aiperf scripts/bench/compare.sh
#   TOKENPROBE_ARGS="--ramp 100ms" TOKENPROBE_CONNECTION=new TOOLS=tokenprobe scripts/bench/compare.sh
#   WARMUP_ROUNDS=1 scripts/bench/compare.sh   # one unmeasured round before each level, equal for
#                                              # the tools that have a warm-up (not GuideLLM 0.8.1)
#   VLLM_BENCH=/path/to/vllm-bench TOOLS=tokenprobe,vllm-bench,vllm-bench-warm scripts/bench/compare.sh
#     # vllm-bench on the completions API, without warm-up and with one round of it (`-warm`);
#     # with VLLM_BENCH set and TOOLS unset, both entries join the default three. Not installed
#     # here: build it from vLLM's Rust workspace (`cargo build --release -p vllm-bench`).
#
# Installs the tools into .venv-compare/ (git-ignored; created here, several GB: GuideLLM depends
# on torch, which PyPI ships with CUDA libraries) and writes a small local tokenizer for them
# (scripts/bench/compare/make_tokenizer.py: both insist on a Hugging Face tokenizer and this
# machine cannot download one). Loopback only; every run is bounded (compare.py: 600 s each).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

LEVELS="${LEVELS:-1,4,16,64,256}"
VLLM_BENCH="${VLLM_BENCH:-}"
if [ -n "$VLLM_BENCH" ]; then
    TOOLS="${TOOLS:-tokenprobe,guidellm,aiperf,vllm-bench,vllm-bench-warm}"
else
    TOOLS="${TOOLS:-tokenprobe,guidellm,aiperf}"
fi
case ",$TOOLS," in
*,vllm-bench,* | *,vllm-bench-warm,*)
    if [ -z "$VLLM_BENCH" ]; then
        echo "bench-compare: TOOLS has vllm-bench but VLLM_BENCH is not set: build vLLM's Rust" \
            "benchmark client (cargo build --release -p vllm-bench in vLLM's rust/ workspace)" \
            "and set VLLM_BENCH=/path/to/vllm-bench" >&2
        exit 2
    fi
    if [ ! -x "$VLLM_BENCH" ]; then
        echo "bench-compare: VLLM_BENCH=$VLLM_BENCH is not an executable file" >&2
        exit 2
    fi
    ;;
esac
GUIDELLM_VERSION="${GUIDELLM_VERSION:-0.8.1}"
AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"
DPKT_VERSION="${DPKT_VERSION:-1.9.8}"
venv="$repo/.venv-compare"
out="${OUT:-$repo/target/bench-compare}"

# The capture's reader (dpkt, pure Python) always; the peers only when they are compared.
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    printf '*\n' >"$venv/.gitignore"
    "$venv/bin/pip" install --quiet --upgrade pip
fi
"$venv/bin/python" -c 'import dpkt' >/dev/null 2>&1 || "$venv/bin/pip" install --quiet "dpkt==$DPKT_VERSION"
case ",$TOOLS," in
*,guidellm,* | *,aiperf,*)
    if ! "$venv/bin/guidellm" --help >/dev/null 2>&1 || ! "$venv/bin/aiperf" --help >/dev/null 2>&1 ||
        ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
        echo "bench-compare: installing guidellm==$GUIDELLM_VERSION and aiperf==$AIPERF_VERSION into $venv"
        "$venv/bin/pip" install --quiet "aiperf==$AIPERF_VERSION" "guidellm==$GUIDELLM_VERSION"
    fi
    if [ ! -f "$venv/tokenizer/tokenizer_config.json" ]; then
        "$venv/bin/python" scripts/bench/compare/make_tokenizer.py "$venv/tokenizer"
    fi
    ;;
esac
# vllm-bench reads the same tokenizer's tokenizer.json, which needs only `tokenizers`.
case ",$TOOLS," in
*,vllm-bench,* | *,vllm-bench-warm,*)
    if [ ! -f "$venv/tokenizer/tokenizer.json" ]; then
        "$venv/bin/python" -c 'import tokenizers' >/dev/null 2>&1 ||
            "$venv/bin/pip" install --quiet "tokenizers==${TOKENIZERS_VERSION:-0.23.3}"
        "$venv/bin/python" scripts/bench/compare/make_tokenizer.py "$venv/tokenizer"
    fi
    ;;
esac
# The wire's truth: Debian's tcpdump on the loopback interface (needs root, as the tests do).
command -v tcpdump >/dev/null 2>&1 || apt-get install -y -qq --no-install-recommends tcpdump >/dev/null
cargo build --release --quiet
mkdir -p "$out"
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$venv/bin/python" scripts/bench/compare/compare.py \
    --tokenprobe "$repo/target/release/tokenprobe" --venv "$venv" --tokenizer "$venv/tokenizer" \
    --out "$out" --levels "$LEVELS" --tools "$TOOLS" \
    --tokenprobe-connection "${TOKENPROBE_CONNECTION:-reuse}" --tokenprobe-args="${TOKENPROBE_ARGS:-}" \
    --warmup-rounds "${WARMUP_ROUNDS:-0}" --vllm-bench "$VLLM_BENCH"
