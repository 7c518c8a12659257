//! The page's tables: the main table, percentiles, load, the server's view, other values and
//! the baseline, every number carrying its JSON Pointer.

use super::plots::{server_signals, signal_display};
use super::{Unit, metric_unit, raw, seg, span, td};
use crate::bench::report::{ModelReport, Report};
use crate::bench::stats::{LevelStats, Summary};
use crate::render::chart::esc;
use std::fmt::Write as _;

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

/// A level's value the tables show: the pointer below the level, the column's head, its unit,
/// and how it is read from the typed level.
type Column = (
    &'static str,
    &'static str,
    Unit,
    fn(&LevelStats) -> Option<f64>,
);

fn p(s: Option<Summary>, f: fn(&Summary) -> f64) -> Option<f64> {
    s.as_ref().map(f)
}

/// The comparison table's columns.
const MAIN_COLUMNS: [Column; 18] = [
    ("requests", "requests", Unit::Plain, |l| {
        Some(l.requests as f64)
    }),
    ("error_rate", "error rate (%)", Unit::Pct, |l| {
        Some(l.error_rate)
    }),
    ("ttft_s/p50", "TTFT p50 (ms)", Unit::Ms, |l| {
        p(l.ttft_s, |s| s.p50)
    }),
    ("ttft_s/p95", "TTFT p95 (ms)", Unit::Ms, |l| {
        p(l.ttft_s, |s| s.p95)
    }),
    ("ttft_s/p99", "TTFT p99 (ms)", Unit::Ms, |l| {
        p(l.ttft_s, |s| s.p99)
    }),
    ("tpot_s/p50", "TPOT p50 (ms)", Unit::Ms, |l| {
        p(l.tpot_s, |s| s.p50)
    }),
    ("tpot_s/p95", "TPOT p95 (ms)", Unit::Ms, |l| {
        p(l.tpot_s, |s| s.p95)
    }),
    ("e2e_s/p50", "E2E p50 (ms)", Unit::Ms, |l| {
        p(l.e2e_s, |s| s.p50)
    }),
    ("e2e_s/p95", "E2E p95 (ms)", Unit::Ms, |l| {
        p(l.e2e_s, |s| s.p95)
    }),
    (
        "decode_tokens_per_s/p50",
        "decode tok/s p50",
        Unit::Plain,
        |l| p(l.decode_tokens_per_s, |s| s.p50),
    ),
    ("output_tokens_per_s", "aggregate tok/s", Unit::Plain, |l| {
        Some(l.output_tokens_per_s)
    }),
    ("requests_per_s", "req/s", Unit::Plain, |l| {
        Some(l.requests_per_s)
    }),
    ("goodput_rps", "goodput (req/s)", Unit::Plain, |l| {
        l.goodput_rps
    }),
    (
        "slo_attainment/share",
        "SLO attainment (%)",
        Unit::Pct,
        |l| l.slo_attainment.as_ref().map(|a| a.share),
    ),
    ("lag_s/p99", "generator lag p99 (ms)", Unit::Ms, |l| {
        p(l.lag_s, |s| s.p99)
    }),
    ("loop_lag_s/p99", "loop lag p99 (ms)", Unit::Ms, |l| {
        p(l.loop_lag_s, |s| s.p99)
    }),
    ("read_lag_s/p99", "read lag p99 (ms)", Unit::Ms, |l| {
        p(l.read_lag_s, |s| s.p99)
    }),
    ("send_lag_s/p99", "send lag p99 (ms)", Unit::Ms, |l| {
        p(l.send_lag_s, |s| s.p99)
    }),
];

/// The comparison table: one row per model and level.
pub(super) fn main_table(o: &mut String, r: &Report, axis: &str) {
    let mut heads = strs(&["model", axis]);
    heads.extend(MAIN_COLUMNS.iter().map(|c| c.1.to_owned()));
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
            for (k, _, u, get) in MAIN_COLUMNS {
                o.push_str(&td(get(l), &format!("{p}/{k}"), u));
            }
            let errs: Vec<String> = l
                .errors
                .iter()
                .map(|(e, n)| {
                    format!(
                        "{} {}",
                        e.as_str(),
                        span(
                            Some(*n as f64),
                            &format!("{p}/errors/{}", e.as_str()),
                            Unit::Plain
                        )
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
                match (m.knee.as_ref().is_some_and(|k| k.index == li), l.partial) {
                    (true, _) => "◆ knee",
                    (false, true) => "PARTIAL",
                    (false, false) => "",
                }
            );
        }
    }
    o.push_str("</tbody></table></div>");
}

/// Every statistic of every distribution, per model and level.
pub(super) fn percentile_table(o: &mut String, r: &Report, axis: &str) {
    type Metric = (
        &'static str,
        &'static str,
        Unit,
        fn(&LevelStats) -> Option<Summary>,
    );
    const METRICS: [Metric; 10] = [
        ("ttft_s", "TTFT (ms)", Unit::Ms, |l| l.ttft_s),
        ("ttfo_s", "TTFO (ms)", Unit::Ms, |l| l.ttfo_s),
        ("tpot_s", "TPOT (ms)", Unit::Ms, |l| l.tpot_s),
        ("e2e_s", "E2E (ms)", Unit::Ms, |l| l.e2e_s),
        ("decode_tokens_per_s", "decode tokens/s", Unit::Plain, |l| {
            l.decode_tokens_per_s
        }),
        ("lag_s", "generator lag (ms)", Unit::Ms, |l| l.lag_s),
        ("loop_lag_s", "loop lag (ms)", Unit::Ms, |l| l.loop_lag_s),
        ("read_lag_s", "read lag (ms)", Unit::Ms, |l| l.read_lag_s),
        ("send_lag_s", "send lag (ms)", Unit::Ms, |l| l.send_lag_s),
        ("wire_ttft_s", "wire TTFT (ms)", Unit::Ms, |l| l.wire_ttft_s),
    ];
    type Stat = (&'static str, fn(&Summary) -> f64);
    const STATS: [Stat; 8] = [
        ("n", |s| s.n as f64),
        ("mean", |s| s.mean),
        ("min", |s| s.min),
        ("p50", |s| s.p50),
        ("p90", |s| s.p90),
        ("p95", |s| s.p95),
        ("p99", |s| s.p99),
        ("max", |s| s.max),
    ];
    let mut heads = strs(&["model", axis, "metric"]);
    heads.extend(STATS.iter().map(|s| s.0.to_owned()));
    table_head(o, "percentiles-table", "Percentiles", &heads);
    for (mi, m) in r.models.iter().enumerate() {
        for (li, l) in m.levels.iter().enumerate() {
            for (k, name, unit, get) in METRICS {
                let Some(summary) = get(l) else { continue };
                let p = format!("/models/{mi}/levels/{li}/{k}");
                row_start(o, m, l);
                let _ = write!(o, r#"<td class="t">{name}</td>"#);
                for (s, stat) in STATS {
                    let u = if s == "n" { Unit::Plain } else { unit };
                    o.push_str(&td(Some(stat(&summary)), &format!("{p}/{s}"), u));
                }
                o.push_str("</tr>");
            }
        }
    }
    o.push_str("</tbody></table></div>");
}

/// What each level sent and how long it took.
pub(super) fn load_table(o: &mut String, r: &Report, axis: &str) {
    const COLUMNS: [Column; 7] = [
        ("successes", "successes", Unit::Plain, |l| {
            Some(l.successes as f64)
        }),
        ("slo_met", "met every SLO", Unit::Plain, |l| {
            l.slo_met.map(|n| n as f64)
        }),
        ("output_tokens", "output tokens", Unit::Plain, |l| {
            Some(l.output_tokens as f64)
        }),
        ("wall_s", "wall (s)", Unit::Plain, |l| Some(l.wall_s)),
        ("ramp_s", "ramp (ms)", Unit::Ms, |l| l.ramp_s),
        ("capped", "capped", Unit::Plain, |l| Some(l.capped as f64)),
        ("lag_s/max", "generator lag max (ms)", Unit::Ms, |l| {
            p(l.lag_s, |s| s.max)
        }),
    ];
    let mut heads = strs(&["model", axis]);
    heads.extend(COLUMNS.iter().map(|c| c.1.to_owned()));
    table_head(o, "load-table", "Load", &heads);
    for (mi, m) in r.models.iter().enumerate() {
        for (li, l) in m.levels.iter().enumerate() {
            let p = format!("/models/{mi}/levels/{li}");
            row_start(o, m, l);
            for (k, _, u, get) in COLUMNS {
                o.push_str(&td(get(l), &format!("{p}/{k}"), u));
            }
            o.push_str("</tr>");
        }
    }
    o.push_str("</tbody></table></div>");
}

/// The server's signals per model and level, when collected (`levels[].server`).
pub(super) fn server_table(o: &mut String, r: &Report, axis: &str) {
    let sigs = server_signals(r);
    if sigs.is_empty() {
        return;
    }
    let mut heads = strs(&["model", axis]);
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
            let server = l.server.as_ref();
            for s in &sigs {
                let (_, unit) = signal_display(s);
                let stats = server.and_then(|v| v.signals.get(s));
                o.push_str(&td(
                    stats.and_then(|x| x.mean),
                    &format!("{p}/{}/mean", seg(s)),
                    unit,
                ));
                o.push_str(&td(
                    stats.and_then(|x| x.max),
                    &format!("{p}/{}/max", seg(s)),
                    unit,
                ));
            }
            o.push_str(&td(
                server.map(|v| v.scrapes as f64),
                &format!("{p}/scrapes"),
                Unit::Plain,
            ));
            o.push_str(&td(
                server.map(|v| v.scrape_errors as f64),
                &format!("{p}/scrape_errors"),
                Unit::Plain,
            ));
            o.push_str("</tr>");
        }
    }
    o.push_str("</tbody></table></div>");
}

/// The level values no other table shows: costs, requested and achieved lengths, the
/// conversation's turns, the cross-check, when some level has them.
const MORE_COLUMNS: [Column; 19] = [
    ("cost_per_request", "cost per request", Unit::Plain, |l| {
        l.cost_per_request
    }),
    ("cost_per_mtok", "cost per Mtok", Unit::Plain, |l| {
        l.cost_per_mtok
    }),
    (
        "lengths/requested_input_tokens_mean",
        "input tokens asked (mean)",
        Unit::Plain,
        |l| l.lengths.requested_input_tokens_mean,
    ),
    (
        "lengths/input_tokens_mean",
        "input tokens (mean)",
        Unit::Plain,
        |l| l.lengths.input_tokens_mean,
    ),
    (
        "lengths/requested_output_tokens_mean",
        "output tokens asked (mean)",
        Unit::Plain,
        |l| l.lengths.requested_output_tokens_mean,
    ),
    (
        "lengths/output_tokens_mean",
        "output tokens (mean)",
        Unit::Plain,
        |l| l.lengths.output_tokens_mean,
    ),
    (
        "lengths/input_length_off",
        "input length off",
        Unit::Plain,
        |l| (l.lengths.input_length_off > 0).then_some(l.lengths.input_length_off as f64),
    ),
    (
        "lengths/cached_input_share",
        "cached share of input",
        Unit::Pct,
        |l| l.lengths.cached_input_share,
    ),
    (
        "lengths/reasoning_tokens_mean",
        "reasoning tokens (mean)",
        Unit::Plain,
        |l| l.lengths.reasoning_tokens_mean,
    ),
    (
        "lengths/ttft_first_turn_s/p50",
        "TTFT first turn p50 (ms)",
        Unit::Ms,
        |l| p(l.lengths.ttft_first_turn_s, |s| s.p50),
    ),
    (
        "lengths/ttft_first_turn_s/p95",
        "TTFT first turn p95 (ms)",
        Unit::Ms,
        |l| p(l.lengths.ttft_first_turn_s, |s| s.p95),
    ),
    (
        "lengths/ttft_later_turns_s/p50",
        "TTFT later turns p50 (ms)",
        Unit::Ms,
        |l| p(l.lengths.ttft_later_turns_s, |s| s.p50),
    ),
    (
        "lengths/ttft_later_turns_s/p95",
        "TTFT later turns p95 (ms)",
        Unit::Ms,
        |l| p(l.lengths.ttft_later_turns_s, |s| s.p95),
    ),
    (
        "cross_check/requests",
        "cross-check requests",
        Unit::Plain,
        |l| l.cross_check.as_ref().map(|c| c.requests as f64),
    ),
    (
        "cross_check/successes",
        "cross-check successes",
        Unit::Plain,
        |l| l.cross_check.as_ref().map(|c| c.successes as f64),
    ),
    (
        "cross_check/stream_e2e_p50_s",
        "stream E2E p50 (ms)",
        Unit::Ms,
        |l| l.cross_check.as_ref().and_then(|c| c.stream_e2e_p50_s),
    ),
    (
        "cross_check/non_stream_e2e_p50_s",
        "non-stream E2E p50 (ms)",
        Unit::Ms,
        |l| l.cross_check.as_ref().and_then(|c| c.non_stream_e2e_p50_s),
    ),
    (
        "cross_check/difference_s",
        "stream − non-stream (ms)",
        Unit::Ms,
        |l| l.cross_check.as_ref().and_then(|c| c.difference_s),
    ),
    (
        "cross_check/ratio",
        "stream ÷ non-stream",
        Unit::Plain,
        |l| l.cross_check.as_ref().and_then(|c| c.ratio),
    ),
];

/// More per level: [`MORE_COLUMNS`] that some level has.
pub(super) fn more_table(o: &mut String, r: &Report, axis: &str) {
    let levels = || r.models.iter().flat_map(|m| &m.levels);
    let cols: Vec<Column> = MORE_COLUMNS
        .into_iter()
        .filter(|c| levels().any(|l| c.3(l).is_some()))
        .collect();
    if cols.is_empty() {
        return;
    }
    let mut heads = strs(&["model", axis]);
    heads.extend(cols.iter().map(|c| c.1.to_owned()));
    table_head(o, "extras-table", "More per level", &heads);
    for (mi, m) in r.models.iter().enumerate() {
        for (li, l) in m.levels.iter().enumerate() {
            row_start(o, m, l);
            for (k, _, u, get) in &cols {
                o.push_str(&td(get(l), &format!("/models/{mi}/levels/{li}/{k}"), *u));
            }
            o.push_str("</tr>");
        }
    }
    o.push_str("</tbody></table></div>");
}

/// Every value compared with the baseline, both beside each other (`comparison.values`), with
/// the change's interval, the p-values and the verdict (and why a value was not judged).
pub(super) fn baseline_table(o: &mut String, r: &Report, axis: &str) {
    let Some(c) = &r.comparison else {
        return;
    };
    if c.values.is_empty() {
        return;
    }
    let heads = strs(&[
        "model",
        axis,
        "metric",
        "baseline",
        "current",
        "change (%)",
        "95% interval from (%)",
        "to (%)",
        "p",
        "p after Holm",
        "verdict",
    ]);
    table_head(
        o,
        "baseline-table",
        "Baseline beside current (times in ms, error rate in %; the error rate's change and interval in points; goodput's interval is that of the difference of its SLO attainments, in points)",
        &heads,
    );
    for (i, v) in c.values.iter().enumerate() {
        let u = metric_unit(v.metric);
        let p = format!("/comparison/values/{i}");
        let verdict = match (v.verdict, &v.not_judged) {
            (Some(_), Some(why)) => format!("not judged: {why}"),
            (Some(x), None) => x.label().to_owned(),
            // An older report: judged by the tolerance alone.
            (None, _)
                if c.regressions
                    .iter()
                    .any(|g| g.model == v.model && g.level == v.level && g.metric == v.metric) =>
            {
                "REGRESSED (tolerance alone)".into()
            }
            (None, _) => String::new(),
        };
        let _ = write!(
            o,
            r#"<tr><td class="t">{}</td><td class="t">{}</td><td class="t">{}</td>{}{}{}{}{}{}{}<td class="t">{}</td></tr>"#,
            esc(&v.model),
            esc(&v.level.to_string()),
            esc(&v.metric.to_string()),
            td(Some(v.baseline), &format!("{p}/baseline"), u),
            td(Some(v.current), &format!("{p}/current"), u),
            td(Some(v.change), &format!("{p}/change"), Unit::Pct),
            td(
                v.interval.map(|x| x[0]),
                &format!("{p}/interval/0"),
                Unit::Pct
            ),
            td(
                v.interval.map(|x| x[1]),
                &format!("{p}/interval/1"),
                Unit::Pct
            ),
            td(v.p_value, &format!("{p}/p_value"), Unit::Plain),
            td(v.p_holm, &format!("{p}/p_holm"), Unit::Plain),
            esc(&verdict)
        );
    }
    o.push_str("</tbody></table></div>");
}
