#!/usr/bin/env python3
"""Drives tokenprobe bench, GuideLLM, AIPerf and vllm-bench against the same `tokenprobe simulate`
server at the same closed-loop concurrency, and compares what each costs and how exactly each
measures.

For every (tool, concurrency) it starts a fresh simulator on loopback with `--event-log`, runs the
tool for N = max(MIN_REQUESTS, ROUNDS x concurrency) requests, stops the simulator, and reads:

- client CPU: user + system seconds of the tool's process tree (/usr/bin/time, children included),
  and the marginal CPU per request between the two largest levels (start-up cancels out);
- the tool's own scheduling lag, as the tool itself reports it: tokenprobe `lag_s` (send instant
  minus intended send instant), GuideLLM `root_dispatch_delay` (request_start - targeted_start),
  AIPerf `request_start_ns - credit_issued_ns`; vllm-bench reports none (its closed loop has no
  intended instant to be late against), so its column stays empty;
- TTFT error against the server: the simulator logs, per request, the instant at which it wrote
  the first token event, after the kernel received the request's last bytes (SO_TIMESTAMPNS; the
  simulator's own delay in reading the request is the server's); the error is the client's TTFT percentile minus
  the server's at p50 and p99 (no jitter is configured, so the server's TTFT is nearly constant and
  the error is what the client added: connection set-up and request write before the server saw
  the request, plus any lateness of the client in reading).

- TTFT error against the wire: tcpdump captures the simulator's port on loopback during each run
  (`Capture`), and each request's TTFT as the tool reports it is compared with the wire's (its
  request's last segment to the first segment holding a token: a non-empty chat `content` or
  completions `text`); tokenprobe's and AIPerf's requests are matched by the `x-request-id` they
  send and record, GuideLLM's by the response id it records (read from each response's first chunk
  on the wire), vllm-bench's by the `x-request-id` it sends (its prefix, which we choose, and the
  request's index: its saved result lists the requests in that order); a tool without either
  would be paired in send order. Where one id went out more than once (vllm-bench's warm-up
  repeats its first request, id and all), the last request with it on the wire is the measured
  one. The capture also shows how many connections each tool opened, and a capture that lost
  packets makes its level void.

- decode span error, for every per-event instant after the first: each request's first-to-last
  token time as the client saw it (tokenprobe TPOT x (N - 1), GuideLLM last_token_iteration -
  first_token_iteration, AIPerf decode_duration, vllm-bench the sum of its per-request ITLs) minus
  the server's (its last token event's write instant minus its first's), at p50 and p99 of the two
  distributions.

The highest concurrency a tool "sustains" is the highest level with no errors whose own lag p99
and TTFT error p50 both stay at or under 1 ms. (The p99 error is printed too; in a closed loop
against a server without jitter every worker starts at once and stays in step, so the p99 is the
burst of simultaneous connections, on both ends, more than the tool.)

Connections, as the capture shows them: tokenprobe runs with `connection: reuse` here, its
connections opened before the level; AIPerf and vllm-bench keep one connection per worker, opened
by their first requests (in their warm-up when they have one); GuideLLM 0.8.1 opens a new
connection for every request (N + 1 for N: one more for its health check) and has no option to
keep them, so like for like with it is tokenprobe's default, `new` (a cold connection per request,
as `serve` measures: the TCP connect is inside its TTFT and so in the error;
`--tokenprobe-connection new`).

vllm-bench (vLLM's Rust benchmark client, a drop-in for `vllm bench serve`; not installed here:
give its binary with `--vllm-bench`) runs on the completions API (`--backend vllm`): on chat its
client takes the first chunk with a choice, the role-only one, as the first token. Two entries:
`vllm-bench`, no warm-up (its first round opens the connections, inside those requests' TTFT), and
`vllm-bench-warm`, with `--num-warmups` of one round (concurrency x max(1, --warmup-rounds)
requests, at the level's concurrency), which opens and leaves in its pool one kept connection per
worker before the measured requests: the nearest its options come to tokenprobe's pre-opened
`reuse`. It reads the same local tokenizer (`--tokenizer DIR`, the directory's tokenizer.json).

    compare.py --tokenprobe BIN --venv DIR --tokenizer DIR --out DIR [--levels 1,4,16,64,256]
               [--tools tokenprobe,vllm-bench,vllm-bench-warm --vllm-bench BIN]
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

TTFT = "100ms"
ITL = "10ms"
TOKENS = 64
ROUNDS = 4
MIN_REQUESTS = 20
RUN_LIMIT_S = 600


def quantile(values, q):
    v = sorted(values)
    if not v:
        return float("nan")
    h = (len(v) - 1) * q
    lo = int(h)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (h - lo)


class Simulator:
    def __init__(self, bin_path: str, log: Path):
        self.log = log
        self.skip = 0
        self.proc = subprocess.Popen(
            [bin_path, "simulate", "--listen", "127.0.0.1:0", "--ttft", TTFT, "--itl", ITL,
             "--output-tokens", str(TOKENS), "--seed", "1", "--event-log", str(log)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"simulate did not start: {line!r}")
        self.url = line.removeprefix("listening on ")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def streamed(self):
        """(record, token instants) of each successful streamed request in the event log, the
        first `self.skip` by arrival (a warm-up) left out."""
        with open(self.log) as f:
            rows = [json.loads(line) for line in f]
        rows = [r for r in rows if r.get("status") == 200 and r.get("stream")]
        rows.sort(key=lambda r: r["arrival_unix_ns"])
        for r in rows[self.skip:]:
            yield r, [e["t_s"] for e in r["events"] if e.get("token")]

    def server_spans(self):
        return [t[-1] - t[0] for _, t in self.streamed() if len(t) >= 2]

    def server_ttfts(self):
        out = []
        for r, t in self.streamed():
            if t:
                # From the kernel's receive instant of the request where the simulator knows
                # it, so the simulator's own lateness in reading counts as the server's.
                k = r.get("arrival_kernel_unix_ns")
                late = (r["arrival_unix_ns"] - k) / 1e9 if k else 0.0
                out.append(t[0] + late)
        return out


# A token event on the wire: a non-empty chat `content` or completions `text` (the simulator's chat
# stream starts with the role alone, and its completions stream ends with an empty `text`).
TOKEN_SEGMENT = re.compile(rb'"(?:content|text)":"[^"]')
REQUEST_ID = re.compile(rb"(?i)\r\nx-request-id: *([^\r]+)\r\n")
# The response's own id, in its first chunk (GuideLLM records it as `response_id`).
RESPONSE_ID = re.compile(rb'"id":"([^"]+)"')


def tcpdump_command(port, path):
    """The capture of one level: the loopback interface, `port` only, nanosecond stamps, into
    `path`. Headers and the start of each segment are enough (a request's head, one event);
    packets are read in blocks (cheaper than one by one at 256 streams), so whoever stops it
    waits for the last block's timeout first. `scripts/bench/wire-stamps.sh` runs the same."""
    return ["tcpdump", "-i", "lo", "-n", "-s", "600", "-B", "131072",
            "--time-stamp-precision", "nano", "-w", str(path), f"tcp port {port}"]


class Capture:
    """tcpdump on the loopback interface, the simulator's port only: the wire's truth of one level.

    Per request (an HTTP/1.1 request starts with a client segment beginning `POST `), the wire's
    TTFT runs from the request's last client segment to the first server segment holding a token
    (a non-empty `"content":"` or `"text":"`; the simulator's first chat event is the role alone),
    on the capture's
    own clock (the kernel's instant as the packet is handed to the loopback device). The capture
    also counts the connections the tool opened (client SYNs). A capture that lost packets
    (tcpdump's "dropped by kernel") is void.
    """

    def __init__(self, port: int, path: Path):
        self.port, self.path = port, path
        self.proc = subprocess.Popen(
            tcpdump_command(port, path),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        if "listening on" not in line:
            raise RuntimeError(f"tcpdump did not start: {line!r}")
        self.dropped = None

    def stop(self):
        time.sleep(2.0)
        self.proc.send_signal(signal.SIGINT)
        err = self.proc.stderr.read()
        self.proc.wait(timeout=30)
        self.dropped = dropped_by_kernel(err)

    def requests(self):
        """([(start s, wire TTFT s, x-request-id or None, response id or None)] in start order,
        connections opened)."""
        return read_capture(self.path, self.port)


def dropped_by_kernel(tcpdump_stderr):
    """The packets a capture lost, from what tcpdump printed as it stopped (None: not said)."""
    m = re.search(r"(\d+) packets? dropped by kernel", tcpdump_stderr)
    return int(m.group(1)) if m else None


def read_capture(path, port):
    """Per request in a capture of `port` (an HTTP/1.1 request starts with a client segment
    beginning `POST `): ([(start s, wire TTFT s, x-request-id or None, response id or None)] in
    start order, connections opened). The wire's TTFT runs from the request's last client segment
    to the first server segment holding a token, on the capture's own clock."""
    import dpkt
    done, open_, syns = [], {}, 0
    with open(path, "rb") as f:
        for ts, buf in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(buf).data
            tcp = getattr(ip, "data", None)
            if not isinstance(tcp, dpkt.tcp.TCP):
                continue
            up = tcp.dport == port
            client = tcp.sport if up else tcp.dport
            if up and tcp.flags & dpkt.tcp.TH_SYN and not tcp.flags & dpkt.tcp.TH_ACK:
                syns += 1
            data = bytes(tcp.data)
            if not data:
                continue
            if up and data.startswith(b"POST "):
                m = REQUEST_ID.search(data)
                open_[client] = [ts, ts, m.group(1).decode() if m else None]
            elif up and client in open_:
                open_[client][1] = ts
            elif not up and client in open_ and TOKEN_SEGMENT.search(data):
                start, last_up, rid = open_.pop(client)
                m = RESPONSE_ID.search(data)
                # dpkt gives a nanosecond capture's instants as Decimal: exact differences.
                done.append((float(start), float(ts - last_up), rid,
                             m.group(1).decode() if m else None))
    done.sort()
    return done, syns


def wire_by(wire, col):
    """The wire's TTFT by the request's id in column `col` of `wire` (2: x-request-id, 3: the
    response id); an id seen more than once stands for its last request (`wire` is in start
    order)."""
    return {w[col]: w[1] for w in wire if w[col]}


def per_request_errors(res, wire):
    """Each request's TTFT minus the wire's: matched by x-request-id where the tool sent one
    (tokenprobe, AIPerf, vllm-bench) or by the response id it recorded (GuideLLM), else paired in
    send order (the tool's own start instants against the wire's, after the wire's first `warmup`
    requests, the tool's unmeasured warm-up). An id seen on the wire more than once (vllm-bench's
    warm-up sends copies of its first request, id and all) stands for the last request with it:
    `wire` is in start order, so the later request overwrites the earlier ones."""
    for key, col in (("ids", 2), ("response_ids", 3)):
        by_id = wire_by(wire, col)
        if res.get(key):
            got = [t - by_id[i] for i, t in zip(res[key], res["ttft"]) if i in by_id]
            # An id the tool records but the wire does not carry: the next way of pairing.
            if len(got) * 2 >= len(res["ttft"]):
                return got, "id" if col == 2 else "response id"
    wire = wire[res.get("warmup", 0):]
    starts = res.get("starts")
    if not starts or len(starts) != len(res["ttft"]):
        return [], "-"
    ordered = [t for _, t in sorted(zip(starts, res["ttft"]))]
    n = min(len(ordered), len(wire))
    return [ordered[i] - wire[i][1] for i in range(n)], "order"


def off_by_mark(res, wire, key, limit=0.001):
    """tokenprobe's requests more than `limit` s off the wire (by `res[key]`, its TTFT or its own
    wire TTFT), split by the mark of a first token read together with the event after it
    (`first_token_shared_read`: the kernel stamps such a read with its last packet, ruling 28):
    (marked in all, off, off and marked, largest error of a marked request, largest of the
    others), s."""
    by_id = wire_by(wire, 2)
    errs = [(t - by_id[i], m) for i, t, m in zip(res["ids"], res[key], res["shared"])
            if i in by_id and t is not None]
    off = [m for e, m in errs if abs(e) > limit]
    largest = lambda marked: max((e for e, m in errs if m == marked), key=abs,
                                 default=float("nan"))
    return sum(res["shared"]), len(off), sum(off), largest(True), largest(False)


def tree_rss_kib(root):
    """Resident memory of `root` and all its descendants, KiB: a walk down /proc's `children`
    lists (cheap: no scan of every process, so the sampling costs the run little)."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            status = open(f"/proc/{pid}/status").read()
            for tid in os.listdir(f"/proc/{pid}/task"):
                todo.extend(int(c) for c in open(f"/proc/{pid}/task/{tid}/children").read().split())
        except (OSError, ValueError):
            continue
        m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        total += int(m.group(1)) if m else 0
    return total


def timed(cmd, env, cwd):
    """Runs cmd under /usr/bin/time, sampling the resident memory of its whole process tree every
    200 ms; returns (rc, cpu_s, wall_s, peak tree RSS in MiB, output tail)."""
    tfile = Path(cwd) / "time.txt"
    full = ["/usr/bin/time", "-f", "%U %S %e", "-o", str(tfile), *cmd]
    out = open(Path(cwd) / "output.txt", "w+")
    p = subprocess.Popen(full, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True)
    peak, start = 0, time.monotonic()
    while p.poll() is None:
        if time.monotonic() - start > RUN_LIMIT_S:
            p.kill()
            p.wait()
            raise subprocess.TimeoutExpired(full, RUN_LIMIT_S)
        peak = max(peak, tree_rss_kib(p.pid))
        time.sleep(0.2)
    try:
        u, s, e = open(tfile).read().split()[-3:]
        cpu, wall = float(u) + float(s), float(e)
    except (OSError, ValueError):
        cpu, wall = float("nan"), float("nan")
    out.seek(0)
    return p.returncode, cpu, wall, peak / 1024, "\n".join(out.read().splitlines()[-15:])


def run_tokenprobe(a, url, c, n, work):
    cfg = work / "tp.yml"
    cfg.write_text(
        "prompts:\n  - name: p\n    messages: [{role: user, content: \"Say hello\"}]\n"
        f"    max_tokens: {TOKENS}\n"
        f"targets:\n  - name: sim\n    base_url: {url}/v1\n    models: [sim]\n"
        f"    connection: {a.tp_connection}\n")
    out = work / "tp.json"
    rc, cpu, wall, peak, tail = timed(
        # A level the client could not measure is measured all the same (it says why, in
        # `client_bound`, printed below): the capture is the judge here.
        [a.tokenprobe, "bench", "--config.file", str(cfg), "--concurrency", str(c),
         "--requests-per-level", str(n), "--no-progress", "--samples", "-o", str(out),
         "--accept-client-bound", "--history", str(work / "runs.sqlite3"),
         *(["--warmup", str(a.warmup_rounds * c)] if a.warmup_rounds else []),
         *a.tp_args.split()],
        a.env, work)
    if rc != 0:
        return {"error": f"exit {rc}: {tail}"}
    lv = json.load(open(out))["models"][0]["levels"][0]
    s = lv["samples"]
    ok = [x for x in s if x["ttft_s"] is not None]
    return {
        "warmup": a.warmup_rounds * c,
        "cpu_s": cpu, "wall_s": wall, "peak_mib": peak, "requests": lv["requests"],
        "errors": lv["requests"] - lv["successes"],
        "ttft": [x["ttft_s"] for x in ok],
        "ids": [x.get("request_id") for x in ok],
        "wire_ttft": [x.get("wire_ttft_s") for x in ok],
        "shared": [bool(x.get("first_token_shared_read")) for x in ok],
        "client_bound": lv.get("client_bound"),
        "lag": [x["lag_s"] for x in s if not x.get("first")],
        "span": [x["tpot_s"] * (x["output_tokens"] - 1) for x in s
                 if x.get("tpot_s") is not None and x["output_tokens"] >= 2],
    }


def run_guidellm(a, url, c, n, work):
    out = work / "guidellm.json"
    rc, cpu, wall, peak, tail = timed(
        [str(Path(a.venv) / "bin" / "guidellm"), "run",
         "--backend", f"kind=openai_http,target={url},model=sim",
         "--profile", f"kind=concurrent,streams={c}",
         "--constraint", f"kind=max_requests,count={n}",
         "--data", f"kind=synthetic_text,prompt_tokens=32,output_tokens={TOKENS}",
         "--tokenizer", f"kind=hf_auto,model={a.tokenizer}",
         "--output", f"kind=json,path={out}", "--disable-progress"],
        a.env, work)
    if rc != 0 or not out.exists():
        return {"error": f"exit {rc}: {tail}"}
    b = json.load(open(out))["benchmarks"][0]
    ok = b["requests"]["successful"]
    ttft, lag, span, starts, rids = [], [], [], [], []
    for r in ok:
        t = r["info"]["timings"]
        if t.get("first_token_iteration") and t.get("last_token_iteration"):
            span.append(t["last_token_iteration"] - t["first_token_iteration"])
        if t.get("first_token_iteration") and t.get("request_start"):
            ttft.append(t["first_token_iteration"] - t["request_start"])
            starts.append(t["request_start"])
            rids.append(r.get("response_id"))
        if t.get("targeted_start") is not None and t.get("request_start"):
            lag.append(t["request_start"] - t["targeted_start"])
    errors = len(b["requests"]["errored"]) + len(b["requests"]["incomplete"])
    # GuideLLM 0.8.1 has no warm-up (and keeps no connection a warm-up could open).
    return {"warmup": 0, "cpu_s": cpu, "wall_s": wall, "peak_mib": peak,
            "requests": len(ok) + errors,
            "errors": errors, "response_ids": rids if all(rids) else None,
            "ttft": ttft, "lag": lag, "span": span, "starts": starts}


def run_aiperf(a, url, c, n, work):
    art = work / "aiperf"
    rc, cpu, wall, peak, tail = timed(
        [str(Path(a.venv) / "bin" / "aiperf"), "profile", "--model", "sim", "--url", url,
         "--endpoint-type", "chat", "--streaming", "--concurrency", str(c),
         "--request-count", str(n), "--tokenizer", a.tokenizer, "--isl", "32",
         "--osl", str(TOKENS), "--artifact-dir", str(art), "--ui", "none",
         *(["--warmup-request-count", str(a.warmup_rounds * c)] if a.warmup_rounds else [])],
        a.env, work)
    recs = art / "profile_export.jsonl"
    if rc != 0 or not recs.exists():
        return {"error": f"exit {rc}: {tail}"}
    ttft, lag, span, starts, ids, errors, total = [], [], [], [], [], 0, 0
    for line in open(recs):
        r = json.loads(line)
        if r.get("metadata", {}).get("benchmark_phase") == "warmup":
            continue  # its warm-up's records are in the same export
        total += 1
        if r.get("error"):
            errors += 1
            continue
        m, md = r.get("metrics", {}), r.get("metadata", {})
        if "time_to_first_token" in m:
            ttft.append(m["time_to_first_token"]["value"] / 1e3)
            starts.append(md.get("request_start_ns", 0) / 1e9)
            ids.append(md.get("x_request_id"))
        if "decode_duration" in m:
            span.append(m["decode_duration"]["value"] / 1e3)
        if md.get("credit_issued_ns") and md.get("request_start_ns"):
            lag.append((md["request_start_ns"] - md["credit_issued_ns"]) / 1e9)
    return {"warmup": a.warmup_rounds * c,
            "cpu_s": cpu, "wall_s": wall, "peak_mib": peak, "requests": total, "errors": errors,
            "ttft": ttft, "ids": ids if all(ids) else None,
            "lag": lag, "span": span, "starts": starts}


def vllm_bench_missing(path):
    """Why the vllm-bench binary cannot be run (None: it can)."""
    if not path:
        return ("no vllm-bench binary given: build vLLM's Rust benchmark client and pass "
                "--vllm-bench BIN (compare.sh: VLLM_BENCH=BIN)")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return f"the vllm-bench binary {path} does not exist or is not executable"
    return None


def run_vllm_bench(a, url, c, n, work, warm=False):
    """vLLM's Rust benchmark client on the completions API, closed loop at concurrency c. Its saved
    result (`--save-detailed`) lists per request, in request order, its TTFT, ITLs, errors and
    start instant; request i went out with the `x-request-id` PREFIX + i (the random dataset numbers
    them so), so each is matched to the wire by that id."""
    why = vllm_bench_missing(a.vllm_bench)
    if why:
        return {"error": why}
    warmup = max(1, a.warmup_rounds) * c if warm else 0
    prefix = f"vb{'w' if warm else ''}-{c}-"
    out = work / "vllm-bench.json"
    rc, cpu, wall, peak, tail = timed(
        [a.vllm_bench, "--backend", "vllm", "--base-url", url, "--model", "sim",
         "--tokenizer", a.tokenizer, "--dataset-name", "random", "--random-input-len", "32",
         "--random-output-len", str(TOKENS), "--num-prompts", str(n), "--max-concurrency", str(c),
         "--request-id-prefix", prefix, "--seed", "1", "--disable-tqdm",
         "--save-result", "--save-detailed", "--result-dir", str(work),
         "--result-filename", out.name,
         *(["--num-warmups", str(warmup)] if warmup else [])],
        a.env, work)
    if rc != 0 or not out.exists():
        return {"error": f"exit {rc}: {tail}"}
    r = json.load(open(out))
    ttfts, itls, starts, errs = r["ttfts"], r["itls"], r["start_times"], r["errors"]
    ttft, span, ok_starts, ids, errors = [], [], [], [], 0
    for i, (t, itl, st, e) in enumerate(zip(ttfts, itls, starts, errs)):
        if e or not t:
            errors += 1
            continue
        ttft.append(t)
        ok_starts.append(st)
        ids.append(f"{prefix}{i}")
        if itl:
            span.append(sum(itl))
    return {"warmup": warmup, "cpu_s": cpu, "wall_s": wall, "peak_mib": peak,
            "requests": len(ttfts), "errors": errors, "ttft": ttft, "ids": ids,
            "lag": [], "span": span, "starts": ok_starts}


def run_vllm_bench_warm(a, url, c, n, work):
    return run_vllm_bench(a, url, c, n, work, warm=True)


TOOLS = {"tokenprobe": run_tokenprobe, "guidellm": run_guidellm, "aiperf": run_aiperf,
         "vllm-bench": run_vllm_bench, "vllm-bench-warm": run_vllm_bench_warm}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenprobe", required=True)
    ap.add_argument("--venv", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--levels", default="1,4,16,64,256")
    ap.add_argument("--tools", default="tokenprobe,guidellm,aiperf")
    ap.add_argument("--tokenprobe-connection", dest="tp_connection", default="reuse",
                    choices=["new", "reuse"],
                    help="tokenprobe's connection mode (AIPerf and vllm-bench keep a connection per "
                         "worker; GuideLLM 0.8.1 opens one per request: like for like with it "
                         "is `new`)")
    ap.add_argument("--tokenprobe-args", dest="tp_args", default="",
                    help="extra `tokenprobe bench` arguments, e.g. \"--ramp 10ms --warmup 64\"")
    ap.add_argument("--warmup-rounds", dest="warmup_rounds", type=int, default=0,
                    help="unmeasured rounds (concurrency x N requests) before each level, for "
                         "the tools that have a warm-up (tokenprobe --warmup, AIPerf "
                         "--warmup-request-count; GuideLLM 0.8.1 has none; vllm-bench never, "
                         "vllm-bench-warm always at least one round: --num-warmups)")
    ap.add_argument("--vllm-bench", dest="vllm_bench", default=os.environ.get("VLLM_BENCH"),
                    help="vLLM's Rust benchmark client (the tools vllm-bench and vllm-bench-warm; "
                         "default: $VLLM_BENCH)")
    ap.add_argument("--no-capture", dest="capture", action="store_false",
                    help="no packet capture (tcpdump needs root); the simulator's log only")
    a = ap.parse_args()
    tools = a.tools.split(",")
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        ap.error(f"unknown tool(s) {', '.join(unknown)} (known: {', '.join(TOOLS)})")
    if any(t.startswith("vllm-bench") for t in tools) and vllm_bench_missing(a.vllm_bench):
        ap.error(vllm_bench_missing(a.vllm_bench))
    if a.capture and not shutil.which("tcpdump"):
        ap.error("tcpdump is not installed (or pass --no-capture)")
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "hf_hub_offline",
                                "transformers_offline")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    a.env = env
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    levels = [int(x) for x in a.levels.split(",")]
    rows = []
    for tool in tools:
        for c in levels:
            n = max(MIN_REQUESTS, ROUNDS * c)
            work = out / f"{tool}-{c}"
            work.mkdir(parents=True, exist_ok=True)
            sim = Simulator(a.tokenprobe, work / "events.jsonl")
            load = open("/proc/loadavg").read().split()[0]
            cap = Capture(int(sim.url.rsplit(":", 1)[1]), work / "wire.pcap") if a.capture else None
            try:
                res = TOOLS[tool](a, sim.url, c, n, work)
            except subprocess.TimeoutExpired:
                res = {"error": f"did not finish within {RUN_LIMIT_S} s"}
            finally:
                if cap:
                    cap.stop()
                sim.stop()
            res.update(tool=tool, concurrency=c, planned=n, load=float(load))
            if cap and "error" not in res:
                if cap.dropped != 0:
                    res["error"] = f"void: the capture lost {cap.dropped} packets"
                else:
                    wire, syns = cap.requests()
                    errs, how = per_request_errors(res, wire)
                    if res.get("wire_ttft"):
                        # tokenprobe's own wire TTFT (send stamp to first token), per request.
                        own, _ = per_request_errors(dict(res, ttft=res["wire_ttft"]), wire)
                        res.update(own_wire_err_p50=quantile(own, 0.5),
                                   own_wire_err_p99=quantile(own, 0.99),
                                   own_wire_err_max=max(own, key=abs, default=float("nan")))
                        for key, name in (("ttft", "ttft"), ("wire_ttft", "own_wire")):
                            n, off, off_m, big_m, big_u = off_by_mark(res, wire, key)
                            res[f"{name}_marks"] = dict(marked=n, off_1ms=off, off_marked=off_m,
                                                        largest_marked=big_m,
                                                        largest_unmarked=big_u)
                    res.update(connections=syns, wire_requests=len(wire), matched=how,
                               matched_n=len(errs), measured_n=len(res["ttft"]),
                               wire_ttft_p50=quantile([w[1] for w in wire], 0.5),
                               wire_err_p50=quantile(errs, 0.5),
                               wire_err_p99=quantile(errs, 0.99),
                               wire_err_max=max(errs, default=float("nan")))
            if "error" not in res:
                sim.skip = res.get("warmup", 0)
                srv = sim.server_ttfts()
                res["server_ttft_p50"] = quantile(srv, 0.5)
                res["server_ttft_p99"] = quantile(srv, 0.99)
                res["ttft_p50"] = quantile(res["ttft"], 0.5)
                res["ttft_p99"] = quantile(res["ttft"], 0.99)
                res["err_p50"] = res["ttft_p50"] - res["server_ttft_p50"]
                res["err_p99"] = res["ttft_p99"] - res["server_ttft_p99"]
                res["lag_p99"] = quantile(res["lag"], 0.99) if res["lag"] else float("nan")
                spans = sim.server_spans()
                res["span_err_p50"] = quantile(res["span"], 0.5) - quantile(spans, 0.5)
                res["span_err_p99"] = quantile(res["span"], 0.99) - quantile(spans, 0.99)
                for k in ("ttft", "lag", "span", "ids", "response_ids", "starts", "wire_ttft",
                          "shared"):
                    res.pop(k, None)
                if "wire_err_p50" in res:
                    print(f"{tool} @ {c}: the wire: {res['wire_requests']} requests on "
                          f"{res['connections']} new connections, wire TTFT p50 "
                          f"{res['wire_ttft_p50'] * 1e3:.2f} ms; per-request error (by "
                          f"{res['matched']}, {res['matched_n']} of {res['measured_n']} "
                          f"requests) p50 {res['wire_err_p50'] * 1e3:+.3f} ms p99 "
                          f"{res['wire_err_p99'] * 1e3:+.3f} ms max "
                          f"{res['wire_err_max'] * 1e3:+.3f} ms", flush=True)
                for name, what in (("ttft", "TTFT"), ("own_wire", "own wire TTFT")):
                    if f"{name}_marks" in res:
                        m = res[f"{name}_marks"]
                        print(f"{tool} @ {c}: {what} vs the wire: {m['off_1ms']} requests > 1 ms "
                              f"off, {m['off_marked']} of them marked shared reads "
                              f"({m['marked']} marked in all); largest marked "
                              f"{m['largest_marked'] * 1e3:+.3f} ms, largest unmarked "
                              f"{m['largest_unmarked'] * 1e3:+.3f} ms", flush=True)
                if res.get("client_bound"):
                    print(f"{tool} @ {c}: client-bound: {res['client_bound']}", flush=True)
                print(f"{tool} @ {c}: {res['requests']} requests, {res['errors']} errors, "
                      f"CPU {res['cpu_s']:.1f} s, TTFT p50 {res['ttft_p50'] * 1e3:.2f} ms "
                      f"(server {res['server_ttft_p50'] * 1e3:.2f}), error p50 "
                      f"{res['err_p50'] * 1e3:+.2f} ms p99 {res['err_p99'] * 1e3:+.2f} ms, "
                      f"own lag p99 {res['lag_p99'] * 1e3:.2f} ms, decode span error p50 "
                      f"{res['span_err_p50'] * 1e3:+.2f} ms p99 {res['span_err_p99'] * 1e3:+.2f} ms",
                      flush=True)
            else:
                print(f"{tool} @ {c}: FAILED: {res['error']}", flush=True)
            rows.append(res)
    json.dump(rows, open(out / "compare.json", "w"), indent=1)
    print()
    print(render(rows, levels))


def ms(x):
    return "-" if x != x else f"{x * 1e3:.2f}"


def own_wire(r):
    """A tool's own wire TTFT (tokenprobe's `wire_ttft_s`) against the capture's, if it has one."""
    if "own_wire_err_p50" not in r:
        return "-"
    return " / ".join(f"{r[k] * 1e3:.3f}" for k in
                      ("own_wire_err_p50", "own_wire_err_p99", "own_wire_err_max"))


def render(rows, levels):
    lines = [
        f"Server: tokenprobe simulate --ttft {TTFT} --itl {ITL} --output-tokens {TOKENS}; "
        f"closed loop, max({MIN_REQUESTS}, {ROUNDS} x concurrency) requests per level; "
        f"{os.cpu_count()} CPUs shared by client and server.",
        "",
        "| tool | concurrency | load | warm-up | requests | new connections | errors | client CPU (s) "
        "| peak RSS of its processes (MiB) "
        "| TTFT p50 client / wire (ms) | error vs wire p50 / p99 / max (ms), matched by "
        "| its wire TTFT vs wire p50 / p99 / max (ms) "
        "| error vs log p50 / p99 (ms) | own lag p99 (ms) | decode span error p50 / p99 (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['tool']} | {r['concurrency']} | failed: "
                         f"{r['error'].splitlines()[-1][:80] if r['error'] else ''} |||||||")
            continue
        nan = float("nan")
        wire = (f"{ms(r.get('wire_err_p50', nan))} / {ms(r.get('wire_err_p99', nan))} / "
                f"{ms(r.get('wire_err_max', nan))}, {r.get('matched', '-')}")
        lines.append(
            f"| {r['tool']} | {r['concurrency']} | {r['load']:.1f} | {r.get('warmup', 0)} | "
            f"{r['requests']} | "
            f"{r.get('connections', '-')} | {r['errors']} | {r['cpu_s']:.1f} | "
            f"{r.get('peak_mib', nan):.0f} | "
            f"{ms(r['ttft_p50'])} / {ms(r.get('wire_ttft_p50', nan))} | {wire} | "
            f"{own_wire(r)} | "
            f"{ms(r['err_p50'])} / {ms(r['err_p99'])} | {ms(r['lag_p99'])} | "
            f"{ms(r['span_err_p50'])} / {ms(r['span_err_p99'])} |")
    lines += ["", "| tool | highest concurrency with own lag p99 and TTFT error p50 <= 1 ms "
              "| marginal client CPU per request (ms) |", "|---|---:|---:|"]
    for tool in dict.fromkeys(r["tool"] for r in rows):
        ok = [r for r in rows if r["tool"] == tool and "error" not in r]
        good = [r["concurrency"] for r in ok
                if r["errors"] == 0 and r["err_p50"] <= 0.001
                and (r["lag_p99"] != r["lag_p99"] or r["lag_p99"] <= 0.001)]
        best = max(good) if good else "none"
        ok.sort(key=lambda r: r["requests"])
        if len(ok) >= 2 and ok[-1]["requests"] > ok[-2]["requests"]:
            d = (ok[-1]["cpu_s"] - ok[-2]["cpu_s"]) / (ok[-1]["requests"] - ok[-2]["requests"])
            marginal = f"{d * 1e3:.2f}"
        else:
            marginal = "-"
        lines.append(f"| {tool} | {best} | {marginal} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
