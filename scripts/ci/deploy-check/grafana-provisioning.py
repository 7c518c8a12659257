#!/usr/bin/env python3
"""Checks Grafana's provisioning files (grafana/provisioning/) for what Grafana requires of them.

No schema package exists for these files, so this checks the rules of Grafana's file provisioning
(datasources, dashboard providers, alert rules) that a typo would break:
  - datasources: apiVersion 1, name/type/uid/url, a unique uid;
  - dashboards: apiVersion 1, providers of type file with options.path, and every dashboard JSON of
    grafana/dashboards has a unique uid (Grafana keys provisioned dashboards by it);
  - alerting: apiVersion 1; each rule a unique uid of at most 40 characters, a title, a condition
    naming one of its queries, queries on a provisioned datasource or the expression engine
    (__expr__) whose `expression` references exist, durations that parse, valid noData/execErr
    states, and the annotations summary, description and runbook and a severity label.
Needs PyYAML (the deploy-check venv). Usage: grafana-provisioning.py <repo root>
"""

import json
import re
import sys
from pathlib import Path

import yaml

DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
NODATA = {"OK", "NoData", "Alerting", "KeepLast"}
EXECERR = {"OK", "Error", "Alerting", "KeepLast"}

problems = []


def problem(where, msg):
    problems.append(f"{where}: {msg}")


def load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def check_datasources(files):
    uids = {}
    for path in files:
        d = load(path)
        if d.get("apiVersion") != 1:
            problem(path, "apiVersion must be 1")
        for ds in d.get("datasources", []):
            for key in ("name", "type", "uid", "url", "access"):
                if not ds.get(key):
                    problem(path, f"datasource {ds.get('name')!r} lacks {key}")
            if ds.get("uid") in uids:
                problem(path, f"datasource uid {ds['uid']!r} also in {uids[ds['uid']]}")
            uids[ds.get("uid")] = path
    return set(uids)


def check_dashboards(files, dashboards):
    for path in files:
        d = load(path)
        if d.get("apiVersion") != 1:
            problem(path, "apiVersion must be 1")
        for p in d.get("providers", []):
            if p.get("type") != "file" or not (p.get("options") or {}).get("path"):
                problem(path, f"provider {p.get('name')!r} must be type file with options.path")
    seen = {}
    for path in dashboards:
        uid = json.loads(Path(path).read_text()).get("uid")
        if not uid or len(uid) > 40:
            problem(path, f"dashboard uid {uid!r} must be 1 to 40 characters")
        if uid in seen:
            problem(path, f"dashboard uid {uid!r} also in {seen[uid]}")
        seen[uid] = path


def check_alerting(files, datasource_uids):
    uids = {}
    count = 0
    for path in files:
        d = load(path)
        if d.get("apiVersion") != 1:
            problem(path, "apiVersion must be 1")
        for g in d.get("groups", []):
            for key in ("orgId", "name", "folder", "interval"):
                if key not in g:
                    problem(path, f"group {g.get('name')!r} lacks {key}")
            if not DURATION.match(str(g.get("interval", ""))):
                problem(path, f"group {g.get('name')!r}: interval {g.get('interval')!r} is not a duration")
            for r in g.get("rules", []):
                count += 1
                where = f"{path}: rule {r.get('uid')!r}"
                uid = r.get("uid", "")
                if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid):
                    problem(where, "uid must be 1-40 of [A-Za-z0-9_-]")
                if uid in uids:
                    problem(where, f"uid also in {uids[uid]}")
                uids[uid] = path
                if not r.get("title"):
                    problem(where, "no title")
                refs = {q.get("refId") for q in r.get("data", [])}
                if r.get("condition") not in refs:
                    problem(where, f"condition {r.get('condition')!r} is none of its queries {sorted(refs)}")
                for q in r.get("data", []):
                    model = q.get("model") or {}
                    if model.get("refId") != q.get("refId"):
                        problem(where, f"query {q.get('refId')}: model.refId differs")
                    if q.get("datasourceUid") == "__expr__":
                        if model.get("expression") not in refs:
                            problem(where, f"expression {q.get('refId')} references {model.get('expression')!r}")
                        if model.get("type") not in {"threshold", "reduce", "math", "classic_conditions", "resample"}:
                            problem(where, f"expression {q.get('refId')} has type {model.get('type')!r}")
                    else:
                        if q.get("datasourceUid") not in datasource_uids:
                            problem(where, f"query {q.get('refId')} uses datasource uid {q.get('datasourceUid')!r}, "
                                           f"not one of the provisioned {sorted(datasource_uids)}")
                        if not model.get("expr"):
                            problem(where, f"query {q.get('refId')} has no expr")
                        rtr = q.get("relativeTimeRange") or {}
                        if not isinstance(rtr.get("from"), int) or rtr.get("from", 0) <= 0:
                            problem(where, f"query {q.get('refId')} needs relativeTimeRange.from > 0")
                if not DURATION.match(str(r.get("for", "0s"))):
                    problem(where, f"for {r.get('for')!r} is not a duration")
                if r.get("noDataState") not in NODATA:
                    problem(where, f"noDataState {r.get('noDataState')!r} not in {sorted(NODATA)}")
                if r.get("execErrState") not in EXECERR:
                    problem(where, f"execErrState {r.get('execErrState')!r} not in {sorted(EXECERR)}")
                ann = r.get("annotations") or {}
                for key in ("summary", "description", "runbook"):
                    if not ann.get(key):
                        problem(where, f"no annotation {key}")
                if not (r.get("labels") or {}).get("severity"):
                    problem(where, "no severity label")
    return count


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    prov = root / "grafana" / "provisioning"
    ds_files = sorted(str(p) for p in (prov / "datasources").glob("*.y*ml"))
    db_files = sorted(str(p) for p in (prov / "dashboards").glob("*.y*ml"))
    al_files = sorted(str(p) for p in (prov / "alerting").glob("*.y*ml"))
    dashboards = sorted(str(p) for p in (root / "grafana" / "dashboards").glob("*.json"))
    if not (ds_files and db_files and al_files and dashboards):
        problem(str(prov), "datasources, dashboards and alerting provisioning files and dashboards expected")
    uids = check_datasources(ds_files)
    check_dashboards(db_files, dashboards)
    n = check_alerting(al_files, uids)
    for p in problems:
        print(f"FAIL {p}")
    print(f"grafana-provisioning: {len(ds_files)} datasource, {len(db_files)} dashboard provider, "
          f"{len(al_files)} alerting file(s), {n} alert rules, {len(dashboards)} dashboards: "
          f"{'FAILED' if problems else 'ok'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
