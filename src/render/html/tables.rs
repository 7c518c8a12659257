//! The page's tables: the main table, percentiles, load, the server's view, other values and
//! the baseline, every number carrying its JSON Pointer.

use super::*;

/// The table's opening, with its headers.
pub(super) fn table_head(o: &mut String, id: &str, caption: &str, heads: &[String]) {
    let _ = write!(
        o,
        r#"<h3>{}</h3><div class="wrap"><table class="sortable" id="{id}"><thead><tr>"#,
        esc(caption)
    );
    for h in heads {
        let _ = write!(o, "<th>{}</th>", esc(h));
    }
    o.push_str("</tr></thead><tbody>");
}

pub(super) fn row_start(o: &mut String, m: &ModelReport, l: &LevelStats) {
    let _ = write!(
        o,
        r#"<tr><td class="t">{}</td><td data-s="{}">{}</td>"#,
        esc(&m.model),
        raw(l.key.x()),
        esc(&l.key.label())
    );
}

pub(super) fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// The comparison table: one row per model and level.
pub(super) fn main_table(o: &mut String, doc: &Value, r: &Report) {
    const COLS: [(&str, &str); 16] = [
        ("requests", "requests"),
        ("error_rate", "error rate (%)"),
        ("ttft_s/p50", "TTFT p50 (ms)"),
        ("ttft_s/p95", "TTFT p95 (ms)"),
        ("ttft_s/p99", "TTFT p99 (ms)"),
        ("tpot_s/p50", "TPOT p50 (ms)"),
        ("tpot_s/p95", "TPOT p95 (ms)"),
        ("e2e_s/p50", "E2E p50 (ms)"),
        ("e2e_s/p95", "E2E p95 (ms)"),
        ("decode_tokens_per_s/p50", "decode tok/s p50"),
        ("output_tokens_per_s", "aggregate tok/s"),
        ("requests_per_s", "req/s"),
        ("goodput_rps", "goodput (req/s)"),
        ("lag_s/p99", "generator lag p99 (ms)"),
        ("loop_lag_s/p99", "loop lag p99 (ms)"),
        ("read_lag_s/p99", "read lag p99 (ms)"),
    ];
    let mut heads = strs(&["model", load_label(r)]);
    heads.extend(COLS.iter().map(|c| c.1.to_owned()));
    heads.extend(strs(&["errors by type", "knee"]));
    table_head(
        o,
        "levels-table",
        "Comparison (click a column to sort)",
        &heads,
    );
    for (mi, m) in r.models.iter().enumerate() {
        for (li, l) in m.levels.iter().enumerate() {
            let p = format!("/models/{mi}/levels/{li}");
            row_start(o, m, l);
            for (k, _) in COLS {
                let u = key_unit(k.split('/').next().unwrap_or(k));
                o.push_str(&td(doc, &format!("{p}/{k}"), u));
            }
            let errs: Vec<String> = l
                .errors
                .keys()
                .map(|e| {
                    format!(
                        "{} {}",
                        esc(e),
                        span(doc, &format!("{p}/errors/{}", seg(e)), Unit::Plain)
                    )
                })
                .collect();
            let total: u64 = l.errors.values().sum();
            let _ = write!(
                o,
                r#"<td class="t" data-s="{total}">{}</td><td class="t knee">{}</td></tr>"#,
                if errs.is_empty() {
                    "-".into()
                } else {
                    errs.join(", ")
                },
                if m.knee.as_ref().is_some_and(|k| k.index == li) {
                    "◆ knee"
                } else {
                    ""
                }
            );
        }
    }
    o.push_str("</tbody></table></div>");
}

/// Every statistic of every distribution, per model and level.
pub(super) fn percentile_table(o: &mut String, doc: &Value, r: &Report) {
    const METRICS: [(&str, &str); 8] = [
        ("ttft_s", "TTFT (ms)"),
        ("ttfo_s", "TTFO (ms)"),
        ("tpot_s", "TPOT (ms)"),
        ("e2e_s", "E2E (ms)"),
        ("decode_tokens_per_s", "decode tokens/s"),
        ("lag_s", "generator lag (ms)"),
        ("loop_lag_s", "loop lag (ms)"),
        ("read_lag_s", "read lag (ms)"),
    ];
    const STATS: [&str; 8] = ["n", "mean", "min", "p50", "p90", "p95", "p99", "max"];
    let mut heads = strs(&["model", load_label(r), "metric"]);
    heads.extend(STATS.iter().map(|s| (*s).to_owned()));
    table_head(o, "percentiles-table", "Percentiles", &heads);
    for (mi, m) in r.models.iter().enumerate() {
        for (li, l) in m.levels.iter().enumerate() {
            for (k, name) in METRICS {
                let p = format!("/models/{mi}/levels/{li}/{k}");
                if doc.pointer(&p).is_none_or(Value::is_null) {
                    continue;
                }
                row_start(o, m, l);
                let _ = write!(o, r#"<td class="t">{name}</td>"#);
                for s in STATS {
                    let u = if s == "n" { Unit::Plain } else { key_unit(k) };
                    o.push_str(&td(doc, &format!("{p}/{s}"), u));
                }
                o.push_str("</tr>");
            }
        }
    }
    o.push_str("</tbody></table></div>");
}

/// What each level sent and how long it took.
pub(super) fn load_table(o: &mut String, doc: &Value, r: &Report) {
    const COLS: [(&str, &str); 7] = [
        ("successes", "successes"),
        ("slo_met", "met every SLO"),
        ("output_tokens", "output tokens"),
        ("wall_s", "wall (s)"),
        ("ramp_s", "ramp (ms)"),
        ("capped", "capped"),
        ("lag_s/max", "generator lag max (ms)"),
    ];
    let mut heads = strs(&["model", load_label(r)]);
    heads.extend(COLS.iter().map(|c| c.1.to_owned()));
    table_head(o, "load-table", "Load", &heads);
    for (mi, m) in r.models.iter().enumerate() {
        for (li, l) in m.levels.iter().enumerate() {
            let p = format!("/models/{mi}/levels/{li}");
            row_start(o, m, l);
            for (k, _) in COLS {
                o.push_str(&td(
                    doc,
                    &format!("{p}/{k}"),
                    key_unit(k.split('/').next().unwrap_or(k)),
                ));
            }
            o.push_str("</tr>");
        }
    }
    o.push_str("</tbody></table></div>");
}

/// The server's signals per model and level, when collected (`levels[].server`).
pub(super) fn server_table(o: &mut String, doc: &Value, r: &Report) {
    let sigs = server_signals(doc);
    if sigs.is_empty() {
        return;
    }
    let mut heads = strs(&["model", load_label(r)]);
    for s in &sigs {
        let (label, _) = signal_display(s);
        heads.push(format!("{label} mean"));
        heads.push(format!("{label} max"));
    }
    heads.extend(strs(&["scrapes", "scrape errors"]));
    table_head(o, "server-table", "Server signals", &heads);
    for (mi, m) in r.models.iter().enumerate() {
        for (li, l) in m.levels.iter().enumerate() {
            let p = format!("/models/{mi}/levels/{li}/server");
            row_start(o, m, l);
            for s in &sigs {
                let (_, unit) = signal_display(s);
                for stat in ["mean", "max"] {
                    o.push_str(&td(doc, &format!("{p}/{}/{stat}", seg(s)), unit));
                }
            }
            o.push_str(&td(doc, &format!("{p}/scrapes"), Unit::Plain));
            o.push_str(&td(doc, &format!("{p}/scrape_errors"), Unit::Plain));
            o.push_str("</tr>");
        }
    }
    o.push_str("</tbody></table></div>");
}

/// Numeric leaves of a level field the page does not know by name, as `(pointer suffix,
/// header)`: a number, a summary's p50 and p95, or the numbers one object deeper.
pub(super) fn leaves(k: &str, v: &Value, out: &mut Vec<(String, String)>) {
    let sk = seg(k);
    match v {
        Value::Number(_) => out.push((sk, k.to_owned())),
        Value::Object(o) if o.contains_key("p50") => {
            for s in ["mean", "p50", "p95"] {
                if o.get(s).is_some_and(Value::is_number) {
                    out.push((format!("{sk}/{s}"), format!("{k} {s}")));
                }
            }
        }
        Value::Object(o) => {
            for (k2, v2) in o {
                match v2 {
                    Value::Number(_) => {
                        out.push((format!("{sk}/{}", seg(k2)), format!("{k} {k2}")))
                    }
                    Value::Object(o2) if o2.contains_key("p50") => {
                        for s in ["mean", "p50", "p95"] {
                            if o2.get(s).is_some_and(Value::is_number) {
                                out.push((
                                    format!("{sk}/{}/{s}", seg(k2)),
                                    format!("{k} {k2} {s}"),
                                ));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// Level values the page does not know by name (achieved lengths, cross-checks, costs…).
pub(super) fn extras_table(o: &mut String, doc: &Value, r: &Report) {
    let mut cols: Vec<(String, String)> = Vec::new();
    for m in doc
        .get("models")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for l in m
            .get("levels")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for (k, v) in l.as_object().into_iter().flatten() {
                if KNOWN_LEVEL_KEYS.contains(&k.as_str()) {
                    continue;
                }
                let mut found = Vec::new();
                leaves(k, v, &mut found);
                for c in found {
                    if !cols.contains(&c) && cols.len() < 40 {
                        cols.push(c);
                    }
                }
            }
        }
    }
    if cols.is_empty() {
        return;
    }
    let mut heads = strs(&["model", load_label(r)]);
    heads.extend(cols.iter().map(|c| c.1.clone()));
    table_head(o, "extras-table", "Other values per level", &heads);
    for (mi, m) in r.models.iter().enumerate() {
        for (li, l) in m.levels.iter().enumerate() {
            row_start(o, m, l);
            for (suffix, _) in &cols {
                let u = key_unit(suffix.split('/').next().unwrap_or(""));
                o.push_str(&td(doc, &format!("/models/{mi}/levels/{li}/{suffix}"), u));
            }
            o.push_str("</tr>");
        }
    }
    o.push_str("</tbody></table></div>");
}

/// Every value compared with the baseline, both beside each other (`comparison.values`).
pub(super) fn baseline_table(o: &mut String, doc: &Value, r: &Report) {
    let Some(vals) = doc.pointer("/comparison/values").and_then(Value::as_array) else {
        return;
    };
    if vals.is_empty() {
        return;
    }
    let heads = strs(&[
        "model",
        load_label(r),
        "metric",
        "baseline",
        "current",
        "change (%)",
        "regressed",
    ]);
    table_head(
        o,
        "baseline-table",
        "Baseline beside current (times in ms, error rate in %)",
        &heads,
    );
    let regressed = |m: &str, l: &str, k: &str| {
        r.comparison.as_ref().is_some_and(|c| {
            c.regressions
                .iter()
                .any(|g| g.model == m && g.level == l && g.metric == k)
        })
    };
    for (i, v) in vals.iter().enumerate() {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let (model, level, metric) = (s("model"), s("level"), s("metric"));
        let u = metric_unit(&metric);
        let p = format!("/comparison/values/{i}");
        let _ = write!(
            o,
            r#"<tr><td class="t">{}</td><td class="t">{}</td><td class="t">{}</td>{}{}{}<td class="t">{}</td></tr>"#,
            esc(&model),
            esc(&level),
            esc(&metric),
            td(doc, &format!("{p}/baseline"), u),
            td(doc, &format!("{p}/current"), u),
            td(doc, &format!("{p}/change"), Unit::Pct),
            if regressed(&model, &level, &metric) {
                "REGRESSED"
            } else {
                ""
            }
        );
    }
    o.push_str("</tbody></table></div>");
}
