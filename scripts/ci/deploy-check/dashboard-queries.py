#!/usr/bin/env python3
"""Runs every query of Grafana dashboards and Grafana alert rules against a real Prometheus.

    dashboard-queries.py --prometheus http://127.0.0.1:9090 grafana/dashboards/*.json \
        grafana/provisioning/alerting/*.yml
    dashboard-queries.py --list FILES...        # print the substituted queries, query nothing

For each panel target (`expr`), each query variable (`label_values(EXPR, label)` becomes
`count by (label) (EXPR)`) and each alert rule query: Grafana's macros are substituted
($__rate_interval and $__interval -> --rate-interval, $__range -> --range), the dashboard's template
variables become `.*` (a `="$var"` matcher becomes `=~".*"`), and the query is sent to
/api/v1/query. It fails when a query errors, returns nothing, or returns only NaN, unless the query
reads a metric of ALLOWED_EMPTY (a model server's own, or a count of what an honest server never causes), which
is reported as such.

Python standard library only. YAML alert files are read with PyYAML when it is importable, else
by a line-based reader that needs each `expr:` as a double-quoted scalar (as written in
grafana/provisioning/alerting); scripts/ci/check-deploy.sh checks that both readers agree.
"""

import argparse
import json
import math
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

# Metrics whose queries may legitimately be empty: the model servers' and the GPU exporter's own
# metrics (the dashboard's server rows), which the test's Prometheus does not scrape (it scrapes
# only tokenprobe), and tokenprobe's counts of events an honest server never causes. Keys are
# regular expressions.
_SERVER = "a model server's or GPU exporter's own metric, not scraped by the test's Prometheus"
ALLOWED_EMPTY = {
    r"vllm:[a-z_]+": _SERVER,
    r"sglang:[a-z_]+": _SERVER,
    r"llamacpp:[a-z_]+": _SERVER,
    r"tgi_[a-z_]+": _SERVER,
    r"DCGM_FI_[A-Z_]+": _SERVER,
    # What answered: series that exist once what they count happened (another model answered, a
    # drift: true prompt's answer changed) or for the jobs that ask (a prompt with expect:); the
    # test's honest llama.cpp server and its story prompt have none.
    r"tokenprobe_model_mismatch_total": "counts substitutions: none while the model asked for answers",
    r"tokenprobe_answer_drift_total": "counts drifts of a drift: true prompt: the test's prompt has none",
    r"tokenprobe_expect_checks_total": "only jobs whose prompt has expect: have it; the test's has none",
}


class Query:
    def __init__(self, source, where, expr):
        self.source = source
        self.where = where
        self.expr = expr

    def allowed_empty(self):
        for metric, why in ALLOWED_EMPTY.items():
            if re.search(rf"\b{metric}(_bucket|_count|_sum)?\b", self.expr):
                return why
        return None


def substitute(expr, variables, rate_interval, rng):
    expr = re.sub(r"\$\{?__rate_interval\}?", rate_interval, expr)
    expr = re.sub(r"\$\{?__interval\}?", rate_interval, expr)
    expr = re.sub(r"\$\{?__range\}?", rng, expr)
    for v in variables:
        # label="$v" -> label=~".*" (an equality matcher would match the literal ".*")
        expr = re.sub(rf'(=)"\$\{{?{v}(:[a-z]+)?\}}?"', r'=~".*"', expr)
        expr = re.sub(rf'=~"\$\{{?{v}(:[a-z]+)?\}}?"', r'=~".*"', expr)
        expr = re.sub(rf"\$\{{{v}(:[a-z]+)?\}}|\${v}\b", ".*", expr)
    return expr


def label_values_query(q):
    m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", q, re.S)
    if m:
        return f"count by ({m.group(2)}) ({m.group(1)})"
    m = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", q)
    if m:
        return f'count by ({m.group(1)}) ({{__name__=~"tokenprobe_.+"}})'
    return q


def dashboard_queries(path, d, args):
    variables = [v["name"] for v in d.get("templating", {}).get("list", [])]
    out = []
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query", "")
        out.append(Query(path, f"variable ${v['name']}",
                         substitute(label_values_query(q), variables, args.rate_interval, args.range)))

    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(d.get("panels", [])):
        for t in p.get("targets", []) or []:
            if "expr" not in t:
                continue
            where = f"panel {p.get('id')} \"{p.get('title', '')}\" {t.get('refId', '')}"
            out.append(Query(path, where, substitute(t["expr"], variables, args.rate_interval, args.range)))
    return out


def load_yaml_exprs(path, text):
    """(rule title, refId, expr) of every Prometheus query in a Grafana alerting file."""
    try:
        import yaml  # noqa: PLC0415
    except ImportError:
        yaml = None
    found = []
    if yaml is not None:
        doc = yaml.safe_load(text)
        for group in doc.get("groups", []):
            for rule in group.get("rules", []):
                for data in rule.get("data", []):
                    expr = (data.get("model") or {}).get("expr")
                    if data.get("datasourceUid") != "__expr__" and expr:
                        found.append((rule.get("title", rule.get("uid")), data.get("refId"), expr))
        return found
    # Without PyYAML: `title:` and `expr:` must be double-quoted scalars (an expr may continue on
    # the following lines; YAML folds those line breaks into single spaces).
    closed = re.compile(r'^"(?:[^"\\]|\\.)*"$')
    title = ref = None
    lines = iter(text.splitlines())
    for line in lines:
        m = re.match(r"\s*title:\s*(.*)$", line)
        if m:
            raw = m.group(1).strip()
            title = json.loads(raw) if raw.startswith('"') else raw
        m = re.match(r"\s*- refId:\s*(\S+)", line)
        if m:
            ref = m.group(1)
        m = re.match(r"\s*expr:\s*(.*)$", line)
        if m:
            raw = m.group(1).strip()
            if not raw.startswith('"'):
                raise SystemExit(f"{path}: without PyYAML, expr must be a double-quoted scalar: {line}")
            while not closed.match(raw):
                raw += " " + next(lines).strip()
            found.append((title, ref, json.loads(raw)))
    return found


def collect(paths, args):
    queries = []
    for path in paths:
        text = open(path, encoding="utf-8").read()
        if path.endswith(".json"):
            queries += dashboard_queries(path, json.loads(text), args)
        else:
            for title, ref, expr in load_yaml_exprs(path, text):
                queries.append(Query(path, f"alert rule \"{title}\" {ref}",
                                     substitute(expr, [], args.rate_interval, args.range)))
    return queries


def run(prom, expr, timeout):
    url = f"{prom.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        body = json.loads(e.read().decode() or "{}")
    if body.get("status") != "success":
        return None, f"{body.get('errorType', 'error')}: {body.get('error', body)}"
    data = body["data"]
    if data["resultType"] == "scalar":
        return [data["result"][1]], None
    return [s["value"][1] for s in data["result"]], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prometheus", help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    ap.add_argument("--list", action="store_true", help="print the substituted queries only")
    ap.add_argument("--rate-interval", default="1m", help="value of $__rate_interval and $__interval")
    ap.add_argument("--range", default="5m", help="value of $__range")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    queries = collect(args.files, args)
    if not queries:
        print("no queries found", file=sys.stderr)
        return 1
    if args.list:
        for q in queries:
            print(f"{q.source}\t{q.where}\t{q.expr}")
        return 0
    if not args.prometheus:
        ap.error("--prometheus is required unless --list")
    failed = allowed = 0
    for q in queries:
        values, err = run(args.prometheus, q.expr, args.timeout)
        label = f"{q.source}: {q.where}"
        why = q.allowed_empty()
        if err:
            print(f"FAIL  {label}: query error: {err}\n      {q.expr}")
            failed += 1
            continue
        finite = [v for v in values if not math.isnan(float(v))]
        if not finite:
            state = "no data" if not values else f"{len(values)} series, all NaN"
            if why:
                print(f"EMPTY {label}: {state} (allowed: {why})")
                allowed += 1
            else:
                print(f"FAIL  {label}: {state}\n      {q.expr}")
                failed += 1
            continue
        note = f" (allowlisted metric is exported now: remove it from ALLOWED_EMPTY)" if why else ""
        print(f"ok    {label}: {len(finite)} series{note}")
    ok = len(queries) - failed - allowed
    print(f"dashboard-queries: {ok} passed, {failed} failed, {allowed} allowed empty (of {len(queries)} queries)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
