#!/usr/bin/env python3
"""Generates grafana/dashboards/tokenprobe-overview.json (Grafana's classic dashboard JSON model).

The JSON file is what Grafana provisions; this script is where it is edited. `--check` exits 1 when
the committed JSON differs from what this script generates (scripts/ci/check-deploy.sh runs it).

Every query uses the template variables as regex matchers (target=~"$target", ...), so that
scripts/ci/deploy-check/dashboard-queries.py can run it against a real Prometheus with `.*` for them.
"""

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards" / "tokenprobe-overview.json"

DS = {"type": "prometheus", "uid": "${datasource}"}
# The job selector: every tokenprobe series carries target, model and prompt.
SEL = 'location=~"$location", target=~"$target", model=~"$model", prompt=~"$prompt"'
RI = "$__rate_interval"

TTFT = "tokenprobe_time_to_first_token_seconds"
TTFO = "tokenprobe_time_to_first_output_token_seconds"
TPOT = "tokenprobe_time_per_output_token_seconds"
E2E = "tokenprobe_request_duration_seconds"
TTFB = "tokenprobe_time_to_headers_seconds"
DECODE = "tokenprobe_decode_tokens_per_second"

_ids = iter(range(1, 1000))


def quantile(q, hist, by="target, model", sel=SEL, window=RI):
    """histogram_quantile over the buckets summed by `le` and the labels `by` ("" for none), or,
    where Prometheus keeps native histograms instead (tokenprobe's `buckets.native`, scraped with
    native histograms on), over the native histogram summed by `by`."""
    labels = f"le, {by}" if by else "le"
    classic = f"histogram_quantile({q}, sum by ({labels}) (rate({hist}_bucket{{{sel}}}[{window}])))"
    grouping = f" by ({by})" if by else ""
    native = f"histogram_quantile({q}, sum{grouping} (rate({hist}{{{sel}}}[{window}])))"
    # Parenthesised: a caller may subtract from it, and `-` binds tighter than `or`.
    return f"({classic} or {native})"


def target(expr, legend, ref, fmt="time_series", instant=False):
    t = {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend,
        "range": not instant,
        "instant": instant,
        "format": fmt,
        "refId": ref,
    }
    return t


def refs(targets):
    for i, t in enumerate(targets):
        t["refId"] = chr(ord("A") + i)
    return targets


def thresholds(*steps):
    return {
        "mode": "absolute",
        "steps": [{"color": c, "value": v} for c, v in steps],
    }


GREEN_ONLY = thresholds(("green", None))


def graph_custom(stack=False, fill=10, draw="line", show_points="never", line_interpolation="linear"):
    return {
        "drawStyle": draw,
        "lineInterpolation": line_interpolation,
        "lineWidth": 1,
        "fillOpacity": fill,
        "gradientMode": "none",
        "showPoints": show_points,
        "pointSize": 4,
        "spanNulls": False,
        "axisPlacement": "auto",
        "axisLabel": "",
        "axisBorderShow": False,
        "axisCenteredZero": False,
        "axisColorMode": "text",
        "scaleDistribution": {"type": "linear"},
        "barAlignment": 0,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        "hideFrom": {"legend": False, "tooltip": False, "viz": False},
        "thresholdsStyle": {"mode": "off"},
    }


def timeseries(title, description, targets, unit, grid, stack=False, overrides=None, minimum=None,
               maximum=None, draw="line", legend_calcs=("mean", "max", "lastNotNull"),
               interpolation="linear"):
    defaults = {
        "color": {"mode": "palette-classic"},
        "custom": graph_custom(stack=stack, fill=60 if stack else 10, draw=draw,
                               line_interpolation=interpolation),
        "unit": unit,
        "thresholds": GREEN_ONLY,
        "mappings": [],
    }
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    return {
        "id": next(_ids),
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": grid,
        "targets": refs(targets),
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {
                "showLegend": True,
                "displayMode": "table",
                "placement": "bottom",
                "calcs": list(legend_calcs),
                "sortBy": "Max",
                "sortDesc": True,
            },
            "tooltip": {"mode": "multi", "sort": "desc", "hideZeros": False},
        },
    }


def stat(title, description, expr, unit, grid, steps=None, decimals=None):
    defaults = {
        "color": {"mode": "thresholds"},
        "unit": unit,
        "thresholds": thresholds(*(steps or [("green", None)])),
        "mappings": [],
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "id": next(_ids),
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": grid,
        "targets": refs([target(expr, "", "A", instant=True)]),
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "reduceOptions": {"values": False, "calcs": ["lastNotNull"], "fields": ""},
            "orientation": "auto",
            "textMode": "auto",
            "colorMode": "value",
            "graphMode": "none",
            "justifyMode": "auto",
            "wideLayout": True,
            "showPercentChange": False,
            "percentChangeColorMode": "standard",
        },
    }


def heatmap(title, description, hist, unit, grid):
    expr = f"sum by (le) (increase({hist}_bucket{{{SEL}}}[{RI}]))"
    return {
        "id": next(_ids),
        "type": "heatmap",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": grid,
        "maxDataPoints": 60,
        "targets": refs([target(expr, "{{le}}", "A", fmt="heatmap")]),
        "fieldConfig": {
            "defaults": {
                "custom": {
                    "hideFrom": {"legend": False, "tooltip": False, "viz": False},
                    "scaleDistribution": {"type": "linear"},
                },
            },
            "overrides": [],
        },
        "options": {
            "calculate": False,
            "cellGap": 1,
            "color": {
                "mode": "scheme",
                "scheme": "Oranges",
                "scale": "exponential",
                "exponent": 0.5,
                "fill": "dark-orange",
                "reverse": False,
                "steps": 64,
            },
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
            "filterValues": {"le": 1e-9},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
            "showValue": "never",
            "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False},
            "yAxis": {"axisPlacement": "left", "unit": unit, "reverse": False},
        },
    }


def row(title, y):
    return {
        "id": next(_ids),
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
        "panels": [],
    }


def g(x, y, w, h):
    return {"x": x, "y": y, "w": w, "h": h}


def latency_panel(title, description, hist, grid, qs=(0.5, 0.95, 0.99)):
    targets = [
        target(quantile(q, hist), f"{{{{model}}}} @ {{{{target}}}} p{round(q * 100)}", "")
        for q in qs
    ]
    return timeseries(title, description, targets, "s", grid, minimum=0)


def comparison_table(grid):
    by = "target, model"
    cols = [
        ("TTFT p50", quantile(0.5, TTFT, by=by, window="$__range"), "s"),
        ("TTFT p95", quantile(0.95, TTFT, by=by, window="$__range"), "s"),
        ("TPOT p50", quantile(0.5, TPOT, by=by, window="$__range"), "s"),
        ("TPS p50", quantile(0.5, DECODE, by=by, window="$__range"), "suffix: tok/s"),
        ("TPS p95", quantile(0.95, DECODE, by=by, window="$__range"), "suffix: tok/s"),
        (
            "Error rate",
            f"sum by ({by}) (increase(tokenprobe_probe_errors_total{{{SEL}}}[$__range]))"
            f" / sum by ({by}) (increase(tokenprobe_probes_total{{{SEL}}}[$__range]))",
            "percentunit",
        ),
    ]
    targets = refs([target(expr, name, "", fmt="table", instant=True) for name, expr, _ in cols])
    rename = {f"Value #{t['refId']}": name for t, (name, _, _) in zip(targets, cols)}
    overrides = [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [{"id": "unit", "value": unit}],
        }
        for name, _, unit in cols
    ]
    overrides.append({
        "matcher": {"id": "byName", "options": "Error rate"},
        "properties": [
            {"id": "custom.cellOptions", "value": {"type": "color-text"}},
            {"id": "thresholds", "value": thresholds(("green", None), ("orange", 0.001), ("red", 0.01))},
        ],
    })
    overrides.append({
        "matcher": {"id": "byName", "options": "TTFT p95"},
        "properties": [
            {"id": "custom.cellOptions", "value": {"type": "color-text"}},
            {"id": "thresholds", "value": thresholds(("green", None), ("red", 2))},
        ],
    })
    order = {"target": 0, "model": 1}
    order.update({name: i + 2 for i, (name, _, _) in enumerate(cols)})
    return {
        "id": next(_ids),
        "type": "table",
        "title": "Comparison by model (over the dashboard's time range)",
        "description": (
            "One row per model and target, over the whole time range. Quantiles come from the "
            "histograms' buckets: compare them only between histograms with the same bucket layout "
            "(the `buckets:` of tokenprobe's config). TPS is the per-request decode rate (1/TPOT); "
            "error rate is failed / all probes."
        ),
        "datasource": DS,
        "gridPos": grid,
        "targets": targets,
        "transformations": [
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True},
                    "renameByName": rename,
                    "indexByName": {**order, **{k: order[v] for k, v in rename.items()}},
                },
            },
            {"id": "sortBy", "options": {"sort": [{"field": "TTFT p50", "desc": False}]}},
        ],
        "fieldConfig": {
            "defaults": {
                "custom": {
                    "align": "auto",
                    "cellOptions": {"type": "auto"},
                    "filterable": False,
                    "inspect": False,
                },
                "color": {"mode": "thresholds"},
                "thresholds": GREEN_ONLY,
                "mappings": [],
            },
            "overrides": overrides,
        },
        "options": {
            "showHeader": True,
            "cellHeight": "sm",
            "frameIndex": 0,
            "sortBy": [],
        },
    }


def panels():
    p = []
    y = 0
    p.append(row("Overview", y))
    y += 1
    w = 4
    p += [
        stat("Success ratio", "Successful probes / all probes over the time range.",
             f"1 - sum(increase(tokenprobe_probe_errors_total{{{SEL}}}[$__range]))"
             f" / sum(increase(tokenprobe_probes_total{{{SEL}}}[$__range]))",
             "percentunit", g(0, y, w, 4), steps=[("red", None), ("orange", 0.95), ("green", 0.99)],
             decimals=2),
        stat("Probes / min", "Probes run per minute, all selected jobs.",
             f"sum(rate(tokenprobe_probes_total{{{SEL}}}[{RI}])) * 60", "short", g(4, y, w, 4),
             decimals=1),
        stat("TTFT p95", "p95 time to first token over the time range, all selected jobs.",
             quantile(0.95, TTFT, by="", window="$__range"),
             "s", g(8, y, w, 4), steps=[("green", None), ("orange", 1), ("red", 2)]),
        stat("TPOT p50", "Median time per output token over the time range.",
             quantile(0.5, TPOT, by="", window="$__range"),
             "s", g(12, y, w, 4)),
        stat("Decode tokens/s p50", "Median per-request decode rate (1 / TPOT) over the time range.",
             quantile(0.5, DECODE, by="", window="$__range"),
             "suffix: tok/s", g(16, y, w, 4), steps=[("red", None), ("green", 30)]),
        stat("Failing jobs", "Jobs whose most recent probe failed (tokenprobe_last_probe_success == 0).",
             f"count(tokenprobe_last_probe_success{{{SEL}}} == 0) or vector(0)", "short",
             g(20, y, w, 4), steps=[("green", None), ("red", 1)]),
    ]
    y += 4

    p.append(row("Latency per model and target", y))
    y += 1
    p.append(latency_panel(
        "Time to first token (TTFT)",
        "From sending the request to the first token-bearing event (any channel, reasoning included). "
        "Successful probes only.", TTFT, g(0, y, 12, 8)))
    p.append(latency_panel(
        "Time to first output token (TTFO)",
        "From sending the request to the first event with visible answer text; absent for reasoning- "
        "or tool-only answers.", TTFO, g(12, y, 12, 8)))
    y += 8
    p.append(latency_panel(
        "Time per output token (TPOT)",
        "(last token event - first token event) / (N - 1); not observed for N < 2 or burst delivery.",
        TPOT, g(0, y, 12, 8)))
    p.append(latency_panel(
        "End-to-end request duration (E2E)",
        "From sending the request to the stream's end marker. Successful probes only.",
        E2E, g(12, y, 12, 8)))
    y += 8
    p.append(timeseries(
        "Decode tokens/s per request",
        "Per-request decode rate (N - 1) / (last - first) = 1 / TPOT, p50 and p95 across probes.",
        [target(quantile(q, DECODE), f"{{{{model}}}} @ {{{{target}}}} p{round(q * 100)}", "")
         for q in (0.5, 0.95)],
        "suffix: tok/s", g(0, y, 12, 8), minimum=0))
    p.append(timeseries(
        "Output tokens/s (aggregate)",
        "sum(N) over the window / window length: the probes' own throughput, not an average of "
        "per-request rates.",
        [target(f"sum by (target, model) (rate(tokenprobe_output_tokens_total{{{SEL}}}[{RI}]))",
                "{{model}} @ {{target}}", "")],
        "suffix: tok/s", g(12, y, 12, 8), minimum=0))
    y += 8

    # One exporter per vantage point (`serve --location`): the same model seen from each place.
    # A series without a location (a single exporter) shows with an empty one.
    p.append(row("By location", y))
    y += 1
    p.append(timeseries(
        "TTFT p95 by location",
        "The same target and model probed from every location: one slow location is its path, "
        "all slow is the server (alerts TokenprobeFailingFromSomeLocations / FromEveryLocation).",
        [target(quantile(0.95, TTFT, by="location, target, model"),
                "{{location}}: {{model}} @ {{target}}", "")],
        "s", g(0, y, 12, 8), minimum=0))
    p.append(timeseries(
        "Error ratio by location",
        "Failed / all probes per location, target and model.",
        [target(f"sum by (location, target, model) (rate(tokenprobe_probe_errors_total{{{SEL}}}[{RI}]))"
                f" / sum by (location, target, model) (rate(tokenprobe_probes_total{{{SEL}}}[{RI}]))",
                "{{location}}: {{model}} @ {{target}}", "")],
        "percentunit", g(12, y, 12, 8), minimum=0))
    y += 8

    p.append(row("Distributions", y))
    y += 1
    p.append(heatmap("TTFT heatmap", "Probes per TTFT bucket and time step (all selected jobs).",
                     TTFT, "s", g(0, y, 12, 9)))
    p.append(heatmap("TPOT heatmap", "Probes per TPOT bucket and time step (all selected jobs).",
                     TPOT, "s", g(12, y, 12, 9)))
    y += 9

    p.append(row("Errors and rate limiting", y))
    y += 1
    p.append(timeseries(
        "Success ratio",
        "1 - failed / all probes, per model and target.",
        [target(f"1 - sum by (target, model) (rate(tokenprobe_probe_errors_total{{{SEL}}}[{RI}]))"
                f" / sum by (target, model) (rate(tokenprobe_probes_total{{{SEL}}}[{RI}]))",
                "{{model}} @ {{target}}", "")],
        "percentunit", g(0, y, 8, 8), minimum=0, maximum=1, legend_calcs=("mean", "min")))
    p.append(timeseries(
        "Errors by error_type",
        "Failed probes per second, stacked; each failed probe has exactly one error_type "
        "(MEASUREMENT.md, Outcome).",
        [target(f"sum by (error_type) (rate(tokenprobe_probe_errors_total{{{SEL}}}[{RI}]))",
                "{{error_type}}", "")],
        "reqps", g(8, y, 16, 8), stack=True, draw="bars", minimum=0, legend_calcs=("sum", "max")))
    y += 8
    p.append(timeseries(
        "Rate limiting: 429s and Retry-After wait",
        "429 answers (rate_limited, quota_exceeded), probes skipped while a target waits out "
        "Retry-After, and the wait itself (right axis).",
        [
            target("sum by (target, error_type) (rate(tokenprobe_probe_errors_total"
                   f"{{{SEL}, error_type=~\"rate_limited|quota_exceeded\"}}[{RI}]))",
                   "{{target}} {{error_type}}", ""),
            target("sum by (target) (rate(tokenprobe_probes_skipped_total"
                   f"{{{SEL}, reason=\"rate_limited\"}}[{RI}]))",
                   "{{target}} skipped (waiting)", ""),
            # The wait the target last asked for (Retry-After); the job pauses that long.
            target(f"max by (target) (tokenprobe_retry_after_seconds{{{SEL}}})",
                   "{{target}} Retry-After wait", ""),
        ],
        "reqps", g(0, y, 12, 8), minimum=0,
        overrides=[{
            "matcher": {"id": "byFrameRefID", "options": "C"},
            "properties": [
                {"id": "unit", "value": "s"},
                {"id": "custom.axisPlacement", "value": "right"},
                {"id": "custom.drawStyle", "value": "line"},
            ],
        }]))
    p.append(timeseries(
        "Anomaly flags",
        "Anomalies seen in probes (not errors): no_content_type, unterminated_final_event, "
        "compressed_stream, burst_delivery (a buffering proxy: no TPOT is recorded).",
        [target(f"sum by (flag) (rate(tokenprobe_probe_flags_total{{{SEL}}}[{RI}]))", "{{flag}}", "")],
        "reqps", g(12, y, 12, 8), stack=True, draw="bars", minimum=0, legend_calcs=("sum", "max")))
    y += 8
    p.append(timeseries(
        "Probes skipped",
        "Scheduled probes that did not run: overlap (the previous probe was still running) or "
        "rate_limited (the target waits out Retry-After).",
        [target(f"sum by (target, reason) (rate(tokenprobe_probes_skipped_total{{{SEL}}}[{RI}]))",
                "{{target}} {{reason}}", "")],
        "reqps", g(0, y, 8, 8), minimum=0, legend_calcs=("sum", "max")))
    p.append(timeseries(
        "Last probe succeeded",
        "1 when the job's most recent probe succeeded, else 0.",
        [target(f"tokenprobe_last_probe_success{{{SEL}}}", "{{target}} {{model}} {{prompt}}", "")],
        "short", g(8, y, 8, 8), minimum=0, maximum=1, interpolation="stepAfter",
        legend_calcs=("min", "lastNotNull")))
    p.append(timeseries(
        "Time since last probe",
        "Seconds since the job's last probe finished; more than a few intervals means the job is "
        "stuck, skipped or paused.",
        [target(f"time() - tokenprobe_last_probe_timestamp_seconds{{{SEL}}}",
                "{{target}} {{model}} {{prompt}}", "")],
        "s", g(16, y, 8, 8), minimum=0, legend_calcs=("max", "lastNotNull")))
    y += 8

    p += answered_panels(y)
    y += 17

    p.append(row("Phases", y))
    y += 1
    p.append(timeseries(
        "Time to headers vs first token",
        "TTFB (status line and headers received) and TTFT, p50 and p95. A gap between them is time "
        "the server spent before streaming its first token after answering.",
        [
            target(quantile(0.5, TTFB), "{{model}} @ {{target}} headers p50", ""),
            target(quantile(0.95, TTFB), "{{model}} @ {{target}} headers p95", ""),
            target(quantile(0.5, TTFT), "{{model}} @ {{target}} first token p50", ""),
            target(quantile(0.95, TTFT), "{{model}} @ {{target}} first token p95", ""),
        ],
        "s", g(0, y, 12, 8), minimum=0))
    phase_sel = f'{SEL}, phase=~"resolve|connect|tls"'
    p.append(timeseries(
        "Connection set-up phases",
        "DNS resolution, TCP connect and TLS handshake of the connection each probe opens, p50 and "
        "p95 per target.",
        [
            target(quantile(0.5, "tokenprobe_connection_phase_seconds", by="target, phase",
                            sel=phase_sel), "{{target}} {{phase}} p50", ""),
            target(quantile(0.95, "tokenprobe_connection_phase_seconds", by="target, phase",
                            sel=phase_sel), "{{target}} {{phase}} p95", ""),
        ],
        "s", g(12, y, 12, 8), minimum=0))
    y += 8

    p.append(row("Comparison", y))
    y += 1
    p.append(comparison_table(g(0, y, 24, 8)))
    y += 8
    p += session_panels(y)
    y += 17
    p += bench_panels(y)
    y += 17
    p += server_panels(y)
    return p


def answered_panels(y):
    """The "What answered" row (docs/measurement.md, "What answered"): the served model and
    fingerprint per job (a change is a line ending and another starting), what changed and the
    drifts of deterministic answers, another model's answers, the usage audit, the canaries."""
    out = [row("What answered", y)]
    y += 1
    out.append(timeseries(
        "Served model and fingerprint",
        "What answered each job (tokenprobe_served_model_info: the served model and "
        "system_fingerprint its last answer named, each label a job's first 8 values, then other). "
        "A substitution or a new build ends one line and starts another.",
        [target(f"max by (target, model, served_model, system_fingerprint) "
                f"(tokenprobe_served_model_info{{{SEL}}})",
                "{{model}} @ {{target}}: {{served_model}} {{system_fingerprint}}", "")],
        "short", g(0, y, 8, 8), minimum=0, maximum=1, interpolation="stepAfter",
        legend_calcs=("lastNotNull",)))
    out.append(timeseries(
        "Changes and drifts",
        "Changes of the served model or fingerprint between a job's probes "
        "(tokenprobe_served_changes_total), and answers of drift: true prompts that changed, by the "
        "fingerprint before and after (tokenprobe_answer_drift_total; the same fingerprint on both "
        "sides is a change the fingerprint does not explain).",
        [
            target(f"sum by (target, model, field) (increase(tokenprobe_served_changes_total"
                   f"{{{SEL}}}[{RI}]))", "{{model}} @ {{target}} {{field}} changed", ""),
            target(f"sum by (target, model, from_fingerprint, to_fingerprint) "
                   f"(increase(tokenprobe_answer_drift_total{{{SEL}}}[{RI}]))",
                   "{{model}} @ {{target}} drift {{from_fingerprint}} → {{to_fingerprint}}", ""),
        ],
        "short", g(8, y, 8, 8), draw="bars", minimum=0, legend_calcs=("sum", "max")))
    out.append(timeseries(
        "Answered by another model",
        "Probes whose answer named another model than the one asked for, after the vendors' "
        "aliasing and the target's model_aliases (tokenprobe_model_mismatch_total), by the model "
        "that answered.",
        [target(f"sum by (target, model, served_model) (rate(tokenprobe_model_mismatch_total"
                f"{{{SEL}}}[{RI}]))", "{{model}} @ {{target}} answered by {{served_model}}", "")],
        "reqps", g(16, y, 8, 8), draw="bars", minimum=0, legend_calcs=("sum", "max")))
    y += 8
    out.append(timeseries(
        "Usage: stated / streamed",
        "The last audited ratio of the tokens an answer's usage stated to those it streamed "
        "(count=output) or to the prompt's known length (count=input); 1 is honest, above 1 bills "
        "tokens that were not sent.",
        [target(f"max by (target, model, count) (tokenprobe_usage_ratio{{{SEL}}})",
                "{{model}} @ {{target}} {{count}}", "")],
        "short", g(0, y, 8, 8), minimum=0, legend_calcs=("lastNotNull", "max")))
    out.append(timeseries(
        "Usage mismatches",
        "The share of audited probes whose usage was off what they streamed beyond the target's "
        "tolerance (usage_mismatch); probes not audited (no usage, nothing to count with) are "
        "left out.",
        [target(f"sum by (target, model) (rate(tokenprobe_usage_audits_total{{{SEL}, "
                f"result=\"mismatch\"}}[{RI}])) / sum by (target, model) "
                f"(rate(tokenprobe_usage_audits_total{{{SEL}, result=~\"within|mismatch\"}}[{RI}]))",
                "{{model}} @ {{target}}", "")],
        "percentunit", g(8, y, 8, 8), minimum=0, maximum=1, legend_calcs=("mean", "max")))
    out.append(timeseries(
        "Canary pass rate",
        "The share of content checks (expect:) passed, per job with one: a known answer that "
        "stops coming is another model, or another build.",
        [target(f"sum by (target, model, prompt) (rate(tokenprobe_expect_checks_total{{{SEL}, "
                f"result=\"passed\"}}[{RI}])) / sum by (target, model, prompt) "
                f"(rate(tokenprobe_expect_checks_total{{{SEL}}}[{RI}]))",
                "{{model}} @ {{target}} {{prompt}}", "")],
        "percentunit", g(16, y, 8, 8), minimum=0, maximum=1, legend_calcs=("mean", "min")))
    return out


# The session canary: a job whose prompt is a `session:` runs one whole agent session per tick
# (its turns, tool calls and their results, its sub-agents).
SESSION_TTFT = "tokenprobe_session_turn_time_to_first_token_seconds"


def session_panels(y):
    out = [row("Agent sessions (session: jobs)", y)]
    y += 1
    canary = ("A job whose prompt is a session: runs one whole agent session per tick. ")
    out.append(timeseries(
        "Session TTFT p95 by turn",
        canary + "p95 TTFT of each turn of the sessions, by its place in the session (1 to 8, 9+, "
        "subagent): a later turn resends the context so far, so its TTFT shows what the prefix "
        "cache saves.",
        [target(quantile(0.95, SESSION_TTFT, by="target, model, turn"),
                "{{model}} @ {{target}} turn {{turn}}", "")],
        "s", g(0, y, 12, 8), minimum=0))
    out.append(timeseries(
        "Sessions by outcome",
        canary + "Sessions per hour by how they ended: completed, budget (ended at its context "
        "budget, as its prompt says), failed (a turn failed), overflow (a turn was refused for the "
        "model's context). Alert: TokenprobeSessionsFailing.",
        [target(f"sum by (target, model, outcome) (rate(tokenprobe_sessions_total{{{SEL}}}[{RI}])) * 3600",
                "{{model}} @ {{target}} {{outcome}}", "")],
        "short", g(12, y, 12, 8), stack=True, minimum=0))
    y += 8
    out.append(timeseries(
        "Session cached input ratio",
        canary + "Of the last session's input tokens, the share the server's prompt cache served "
        "(its usage's cached tokens): the system prompt, the tools and each turn's context so far.",
        [target(f"max by (target, model, prompt) (tokenprobe_session_cached_input_ratio{{{SEL}}})",
                "{{model}} @ {{target}} ({{prompt}})", "")],
        "percentunit", g(0, y, 12, 8), minimum=0, maximum=1))
    out.append(timeseries(
        "Session duration",
        canary + "The last session's duration, from its first send to its last turn's end (think "
        "times and sub-agents included).",
        [target(f"max by (target, model, prompt) (tokenprobe_session_duration_seconds{{{SEL}}})",
                "{{model}} @ {{target}} ({{prompt}})", "")],
        "s", g(12, y, 12, 8), minimum=0))
    return out


# `tokenprobe bench --remote-write URL`: every level of every run, one sample per series at the
# level's end, labelled run_id, model, target, prompt and level (no location: a bench is not a
# probe job). Each run shows as points at its end; the lookback joins them for a few minutes.
BSEL = 'target=~"$target", model=~"$model", prompt=~"$prompt"'


def bench_panel(title, description, expr, unit, grid):
    return timeseries(title, description, [target(expr, "{{model}} @ {{target}}, level {{level}}", "")],
                      unit, grid, minimum=0, draw="points", legend_calcs=("lastNotNull", "min", "max"))


def bench_panels(y):
    out = [row("Bench runs over time (bench --remote-write)", y)]
    y += 1
    by = "target, model, level"
    per_run = ("Each point is one bench run's level, at the time it ended: a model's runs over "
               "time, from `tokenprobe bench --remote-write`. ")
    out.append(bench_panel(
        "Bench: TTFT p95 per run",
        per_run + "TTFT p95 of the level's measured requests.",
        f'max by ({by}) (tokenprobe_bench_time_to_first_token_seconds{{{BSEL}, quantile="0.95"}})',
        "s", g(0, y, 12, 8)))
    out.append(bench_panel(
        "Bench: TPOT p50 per run",
        per_run + "TPOT p50 of the level's measured requests.",
        f'max by ({by}) (tokenprobe_bench_time_per_output_token_seconds{{{BSEL}, quantile="0.5"}})',
        "s", g(12, y, 12, 8)))
    y += 8
    out.append(bench_panel(
        "Bench: output tokens/s per run",
        per_run + "Aggregate output tokens/s over the level.",
        f"max by ({by}) (tokenprobe_bench_output_tokens_per_second{{{BSEL}}})",
        "short", g(0, y, 12, 8)))
    out.append(bench_panel(
        "Bench: error ratio per run",
        per_run + "Failed share of the level's measured requests.",
        f"max by ({by}) (tokenprobe_bench_error_ratio{{{BSEL}}})",
        "percentunit", g(12, y, 12, 8)))
    return out


# The model server's own metrics, beside the probes. The label join: tokenprobe's `model` is the
# model name it sends; vLLM and SGLang label their series `model_name` with the served model name,
# so the two meet when the probes send the served name (vLLM's --served-model-name). Server
# queries select model_name=~"$model"; the TTFT comparison renames model_name to model with
# label_replace. llama.cpp, TGI and DCGM have no model label (one model per server).
SRV = 'model_name=~"$model"'


def server_ttft_p95(window=RI):
    inner = (f"sum by (le, model_name) (rate(vllm:time_to_first_token_seconds_bucket{{{SRV}}}[{window}]))"
             f" or sum by (le, model_name) (rate(sglang:time_to_first_token_seconds_bucket{{{SRV}}}[{window}]))")
    return f'label_replace(histogram_quantile(0.95, {inner}), "model", "$1", "model_name", "(.*)")'


def collapsed_row(title, y, panels):
    r = row(title, y)
    r["collapsed"] = True
    r["panels"] = panels
    return r


def server_panels(y):
    out = [row("Client vs model server", y)]
    y += 1
    client = quantile(0.95, TTFT, by="model")
    out.append(timeseries(
        "TTFT p95: tokenprobe vs the model server",
        "tokenprobe's TTFT p95 per model next to the server's own (vLLM or SGLang "
        "time_to_first_token_seconds, joined on model = model_name), and their difference: what the "
        "network, TLS, gateways and queues in front of the server add. A large gap with a flat server "
        "line is the path; both rising together is the model server. The recording rule "
        "target_model:tokenprobe_client_server_ttft_gap_seconds:p95_5m holds the same difference.",
        [
            target(client, "{{model}} tokenprobe p95", ""),
            target(server_ttft_p95(), "{{model}} server p95", ""),
            target(f"{client} - on (model) group_left () {server_ttft_p95()}", "{{model}} gap", ""),
        ],
        "s", g(0, y, 12, 8)))
    out.append(timeseries(
        "Requests waiting at the model server",
        "The server's queue (vLLM num_requests_waiting, SGLang num_queue_reqs, TGI tgi_queue_size, "
        "llama.cpp requests_deferred). A queue that grows while TTFT rises means the server is "
        "saturated, not the path to it.",
        [
            target(f"sum by (model_name) (vllm:num_requests_waiting{{{SRV}}})", "vLLM {{model_name}}", ""),
            target(f"sum by (model_name) (sglang:num_queue_reqs{{{SRV}}})", "SGLang {{model_name}}", ""),
            target("sum by (instance) (tgi_queue_size)", "TGI {{instance}}", ""),
            target("sum by (instance) (llamacpp:requests_deferred)", "llama.cpp {{instance}}", ""),
        ],
        "short", g(12, y, 12, 8), minimum=0))
    y += 8
    # One collapsed row per server kind: closed, a row whose metrics are absent takes no room.
    vllm = [
        timeseries("vLLM requests running and waiting", "vllm:num_requests_running and num_requests_waiting.",
                   [target(f"sum by (model_name) (vllm:num_requests_running{{{SRV}}})", "{{model_name}} running", ""),
                    target(f"sum by (model_name) (vllm:num_requests_waiting{{{SRV}}})", "{{model_name}} waiting", "")],
                   "short", g(0, y + 1, 8, 8), minimum=0),
        timeseries("vLLM KV cache usage", "vllm:kv_cache_usage_perc (0-1); above 85% expect preemptions.",
                   [target(f"max by (model_name) (vllm:kv_cache_usage_perc{{{SRV}}})", "{{model_name}}", "")],
                   "percentunit", g(8, y + 1, 8, 8), minimum=0, maximum=1),
        timeseries("vLLM tokens/s", "Prompt and generation tokens per second (vllm:*_tokens_total).",
                   [target(f"sum by (model_name) (rate(vllm:prompt_tokens_total{{{SRV}}}[{RI}]))", "{{model_name}} prompt", ""),
                    target(f"sum by (model_name) (rate(vllm:generation_tokens_total{{{SRV}}}[{RI}]))", "{{model_name}} generation", "")],
                   "short", g(16, y + 1, 8, 8), minimum=0),
    ]
    out.append(collapsed_row("vLLM", y, vllm))
    y += 1
    sglang = [
        timeseries("SGLang requests running and queued", "sglang:num_running_reqs and num_queue_reqs.",
                   [target(f"sum by (model_name) (sglang:num_running_reqs{{{SRV}}})", "{{model_name}} running", ""),
                    target(f"sum by (model_name) (sglang:num_queue_reqs{{{SRV}}})", "{{model_name}} queued", "")],
                   "short", g(0, y + 1, 12, 8), minimum=0),
        timeseries("SGLang token usage", "sglang:token_usage (KV cache, 0-1).",
                   [target(f"max by (model_name) (sglang:token_usage{{{SRV}}})", "{{model_name}}", "")],
                   "percentunit", g(12, y + 1, 12, 8), minimum=0, maximum=1),
    ]
    out.append(collapsed_row("SGLang", y, sglang))
    y += 1
    llama = [
        timeseries("llama.cpp requests processing and deferred", "llamacpp:requests_processing (busy slots) and requests_deferred (waiting).",
                   [target("sum by (instance) (llamacpp:requests_processing)", "{{instance}} processing", ""),
                    target("sum by (instance) (llamacpp:requests_deferred)", "{{instance}} deferred", "")],
                   "short", g(0, y + 1, 12, 8), minimum=0),
        timeseries("llama.cpp tokens/s", "llamacpp:prompt_tokens_total and tokens_predicted_total per second.",
                   [target(f"sum by (instance) (rate(llamacpp:prompt_tokens_total[{RI}]))", "{{instance}} prompt", ""),
                    target(f"sum by (instance) (rate(llamacpp:tokens_predicted_total[{RI}]))", "{{instance}} generation", "")],
                   "short", g(12, y + 1, 12, 8), minimum=0),
    ]
    out.append(collapsed_row("llama.cpp", y, llama))
    y += 1
    dcgm = [
        timeseries("GPU utilization", "DCGM_FI_DEV_GPU_UTIL per GPU; below 30% under load the serving stack, not the GPU, is the limit.",
                   [target("DCGM_FI_DEV_GPU_UTIL / 100", "{{Hostname}} GPU {{gpu}}", "")],
                   "percentunit", g(0, y + 1, 8, 8), minimum=0, maximum=1),
        timeseries("GPU memory used", "DCGM_FI_DEV_FB_USED / (FB_USED + FB_FREE) per GPU; above 85% warns of OOM.",
                   [target("DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)", "{{Hostname}} GPU {{gpu}}", "")],
                   "percentunit", g(8, y + 1, 8, 8), minimum=0, maximum=1),
        timeseries("GPU power", "DCGM_FI_DEV_POWER_USAGE per GPU.",
                   [target("DCGM_FI_DEV_POWER_USAGE", "{{Hostname}} GPU {{gpu}}", "")],
                   "watt", g(16, y + 1, 8, 8), minimum=0),
    ]
    out.append(collapsed_row("GPUs (DCGM)", y, dcgm))
    return out


def query_variable(name, label, query):
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DS,
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
        "options": [],
        "hide": 0,
        "skipUrlSync": False,
    }


def dashboard():
    return {
        "uid": "tokenprobe-overview",
        "title": "tokenprobe / Overview",
        "description": "What users of LLM endpoints feel, measured by tokenprobe's probes: TTFT, "
                       "TTFO, TPOT, decode rate, E2E and every kind of failure.",
        "tags": ["tokenprobe", "llm"],
        "editable": True,
        "graphTooltip": 1,
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "refresh": "30s",
        "schemaVersion": 42,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "weekStart": "",
        "links": [],
        "annotations": {
            "list": [{
                "builtIn": 1,
                "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            }],
        },
        "templating": {
            "list": [
                {
                    "type": "datasource",
                    "name": "datasource",
                    "label": "Data source",
                    "query": "prometheus",
                    "refresh": 1,
                    "regex": "",
                    "hide": 0,
                    "includeAll": False,
                    "multi": False,
                    "options": [],
                    "skipUrlSync": False,
                },
                query_variable("location", "Location", "label_values(tokenprobe_build_info, location)"),
                query_variable("target", "Target",
                               'label_values(tokenprobe_probes_total{location=~"$location"}, target)'),
                query_variable("model", "Model",
                               'label_values(tokenprobe_probes_total{target=~"$target"}, model)'),
                query_variable("prompt", "Prompt",
                               'label_values(tokenprobe_probes_total{target=~"$target", model=~"$model"}, prompt)'),
            ],
        },
        "panels": panels(),
    }


def render():
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main():
    text = render()
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        if not OUT.exists() or OUT.read_text() != text:
            print(f"out of date: {OUT} (run grafana/generate.py)", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
