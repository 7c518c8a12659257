//! A bench report as text (pure): the terminal table, Markdown (the comparison teams paste into
//! docs), CSV (one row per model and level) and JSON (everything; the input of `--baseline`).

use crate::bench::report::{ModelReport, Report, Selection, mixed_targets, model_names};
use crate::bench::stats::{LevelStats, Summary};
use crate::units::{fmt_cost, fmt_secs, trim_float};
use std::fmt::Write as _;

/// True when some level asked for lengths: the tables then show them.
fn has_lengths(r: &Report) -> bool {
    r.models
        .iter()
        .any(|m| m.levels.iter().any(|l| l.lengths.asked()))
}

/// `requested→reached` mean tokens, e.g. `512→514`; `-` for what is unknown.
fn length_cell(requested: Option<f64>, reached: Option<f64>) -> String {
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
    format!("{}→{}", f(requested), f(reached))
}

/// A table column: its header and a level's value, if it has one.
type LevelColumn = (&'static str, fn(&LevelStats) -> Option<String>);

/// The columns of what the answers' usage said beside the token counts, those some level has:
/// the cached share of the input (`cached in`), the mean reasoning tokens (`reasoning`).
fn usage_columns(r: &Report) -> Vec<LevelColumn> {
    let cols: [LevelColumn; 2] = [
        ("cached in", |l| l.lengths.cached_input_share.map(pct)),
        ("reasoning", |l| {
            l.lengths.reasoning_tokens_mean.map(|v| format!("{v:.0}"))
        }),
    ];
    let levels = || r.models.iter().flat_map(|m| &m.levels);
    cols.into_iter()
        .filter(|(_, cell)| levels().any(|l| cell(l).is_some()))
        .collect()
}

/// True when some level has a cost (some model has a price).
fn has_costs(r: &Report) -> bool {
    r.models
        .iter()
        .flat_map(|m| &m.levels)
        .any(|l| l.cost_per_request.is_some())
}

fn cost_cells(l: &LevelStats) -> [String; 2] {
    [
        l.cost_per_request.map_or_else(|| "-".into(), fmt_cost),
        l.cost_per_mtok.map_or_else(|| "-".into(), fmt_cost),
    ]
}

fn opt(s: &Option<Summary>, f: impl Fn(&Summary) -> f64, fmt: impl Fn(f64) -> String) -> String {
    s.as_ref().map_or_else(|| "-".to_owned(), |s| fmt(f(s)))
}

fn ms(v: f64) -> String {
    format!("{:.1}", v * 1e3)
}

fn pct(v: f64) -> String {
    crate::units::fmt_pct(v)
}

/// The knee marker column.
/// The knee column of level `i`: its knee (written `knee`), `CLIENT-BOUND` when the client
/// could not measure it and `PARTIAL` when it was stopped before its amount, each as `show`
/// writes it, joined by `, `.
fn marks(m: &ModelReport, i: usize, l: &LevelStats, show: impl Fn(&str) -> String) -> String {
    let knee = (!knee_mark(m, i).is_empty()).then_some("knee");
    let bound = l.client_bound.is_some().then_some("CLIENT-BOUND");
    let partial = l.partial.then_some("PARTIAL");
    let shown: Vec<String> = knee
        .into_iter()
        .chain(bound)
        .chain(partial)
        .map(show)
        .collect();
    shown.join(", ")
}

/// The table's knee column: `◆ knee`, `CLIENT-BOUND`.
fn mark(m: &ModelReport, i: usize, l: &LevelStats) -> String {
    marks(m, i, l, |s| match s {
        "knee" => knee_mark(m, i).to_owned(),
        other => other.to_owned(),
    })
}

fn knee_mark(m: &ModelReport, i: usize) -> &'static str {
    match &m.knee {
        Some(k) if k.index == i => "◆ knee",
        _ => "",
    }
}

const TABLE_HEADER: [&str; 16] = [
    "model",
    "load",
    "req",
    "errors",
    "TTFT p50",
    "TTFT p95",
    "TTFT p99",
    "TPOT p50",
    "E2E p95",
    "TPS p50",
    "agg tok/s",
    "req/s",
    "goodput",
    "lag p99",
    "loop p99",
    "knee",
];

fn table_row(m: &ModelReport, i: usize, l: &LevelStats) -> [String; 16] {
    [
        m.name(),
        l.key.label(),
        l.requests.to_string(),
        pct(l.error_rate),
        opt(&l.ttft_s, |s| s.p50, fmt_secs),
        opt(&l.ttft_s, |s| s.p95, fmt_secs),
        opt(&l.ttft_s, |s| s.p99, fmt_secs),
        opt(&l.tpot_s, |s| s.p50, fmt_secs),
        opt(&l.e2e_s, |s| s.p95, fmt_secs),
        opt(&l.decode_tokens_per_s, |s| s.p50, |v| format!("{v:.1}")),
        format!("{:.1}", l.output_tokens_per_s),
        format!("{:.2}", l.requests_per_s),
        l.goodput_rps
            .map_or_else(|| "-".into(), |g| format!("{g:.2}")),
        opt(&l.lag_s, |s| s.p99, fmt_secs),
        opt(&l.loop_lag_s, |s| s.p99, fmt_secs),
        mark(m, i, l),
    ]
}

/// A level's load in words: `4 concurrent streams`, `1 concurrent stream`, `2/s`.
fn load_words(r: &Report, label: &str) -> String {
    if r.mode.kind == "open" || label.ends_with("/s") {
        label.to_owned()
    } else if label == "1" {
        "1 concurrent stream".to_owned()
    } else {
        format!("{label} concurrent streams")
    }
}

/// Where a selection is stated: `at 4 concurrent streams, the highest load every model serves
/// within the SLOs`.
pub fn stated_at(r: &Report, s: &Selection) -> String {
    use crate::bench::report::AnswerLoad;
    let at = load_words(r, &s.level);
    match s.load {
        Some(AnswerLoad::Asked) => format!("at {at}, as asked (select_at)"),
        Some(AnswerLoad::WithinSlos) => {
            format!("at {at}, the highest load every model serves within the SLOs")
        }
        Some(AnswerLoad::HighestCommon) => format!("at {at}, the highest load every model ran"),
        Some(AnswerLoad::LastLevels) => {
            "at each model's last level (no load every model ran)".to_owned()
        }
        None => format!("at {at}"),
    }
}

/// The limits and weights of a selection: `limits: ttft_p95 < 2.00 s; weights: ttft_p95=0.5`.
pub fn criteria_words(s: &Selection) -> String {
    let w: Vec<String> = s.weights.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "limits: {}; weights: {}",
        if s.limits.is_empty() {
            "none".to_owned()
        } else {
            s.limits.join(", ")
        },
        w.join(", ")
    )
}

/// A place in a list: `1.` (in Markdown `1\.`, which no renderer renumbers, so ties stay ties).
fn place(n: usize, md: bool) -> String {
    if md {
        format!("{n}\\.")
    } else {
        format!("{n}.")
    }
}

/// A ranked model's line: `1. fast score 1.000`, `1. a score 0.900, tied`.
fn ranked_line(s: &Selection, k: &crate::bench::report::Ranked, md: bool) -> String {
    let tied = s.ranked.iter().filter(|o| o.rank == k.rank).count() > 1;
    format!(
        "{} {} score {:.3}{}",
        place(k.rank, md),
        k.model,
        k.score,
        if tied { ", tied" } else { "" }
    )
}

/// The run's one answer, before everything else: the ranking at its stated load (ties as
/// ties; when no model passes, every model by its distance to the limits, with its weighted
/// score), then each model's throughput knee beside its capacity within the SLOs, each with what
/// limited it. Empty when the run was not judged and has no knee block.
pub fn render_answer(r: &Report, md: bool) -> String {
    let mut out = render_ranking(r, md);
    out.push_str(&render_limits(r, md));
    out
}

/// The ranking of the answer ([`render_answer`]'s first part).
pub fn render_ranking(r: &Report, md: bool) -> String {
    let mut out = String::new();
    let Some(s) = &r.selection else { return out };
    let bullet = if md { "- " } else { "  " };
    let strong = if md { "**" } else { "" };
    let _ = writeln!(
        out,
        "{strong}Answer {}{strong} ({}):",
        stated_at(r, s),
        criteria_words(s)
    );
    for k in &s.ranked {
        let _ = writeln!(out, "{bullet}{}", ranked_line(s, k, md));
    }
    if s.ranked.is_empty() && !s.rejected.is_empty() {
        let _ = writeln!(
            out,
            "{bullet}no model passes every limit; closest first (fewest limits failed, then the smallest relative miss |value / limit − 1|):"
        );
    }
    for k in &s.rejected {
        let _ = match k.closest {
            Some(n) => writeln!(
                out,
                "{bullet}{} {}: {}{}{}",
                place(n, md),
                k.model,
                k.reasons.join("; "),
                passes(k),
                k.score.map_or_else(String::new, |v| format!(
                    "; weighted score {v:.3} among the models measured there (not a pass)"
                ))
            ),
            None => writeln!(
                out,
                "{bullet}rejected {}: {}{}",
                k.model,
                k.reasons.join("; "),
                passes(k)
            ),
        };
    }
    let tokens = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
    let names = model_names(&r.models);
    let lengths: Vec<String> = r
        .models
        .iter()
        .zip(&names)
        .map(|(m, name)| {
            format!(
                "{name} {}/{}",
                tokens(m.input_tokens_mean),
                tokens(m.output_tokens_mean)
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "{bullet}achieved lengths (mean input/output tokens of the successes): {}",
        lengths.join(", ")
    );
    if let Some(w) = &s.length_mismatch {
        let _ = writeln!(out, "{bullet}NOTE {w}");
    }
    out.push('\n');
    out
}

/// `; why: queueing, from the client's view (…)`, or nothing.
fn why(l: Option<&crate::bench::report::Limiter>) -> String {
    l.map_or_else(String::new, |l| {
        format!(
            "; why: {}, {} ({})",
            l.cause.as_str(),
            l.view.as_str(),
            l.evidence
        )
    })
}

/// A share and its interval (`96.0% [89.1%, 98.9%]`) from its parts.
fn share_of(share: f64, interval: Option<[f64; 2]>) -> String {
    match interval {
        Some([lo, hi]) => format!(
            "{:.1}% [{:.1}%, {:.1}%]",
            share * 100.0,
            lo * 100.0,
            hi * 100.0
        ),
        None => format!("{:.1}%", share * 100.0),
    }
}

/// One model's capacity within the SLOs, as a sentence: the search's, or a fixed sweep's highest
/// level at the target and the first below it, then `limited` (why it failed there).
fn capacity_line(
    r: &Report,
    m: &ModelReport,
    c: &crate::bench::report::ModelCapacity,
    searched: bool,
    limited: &str,
) -> String {
    let doubt = crate::bench::capacity::doubt(c.clear);
    if let Some(s) = &m.capacity {
        return format!(
            "SLO capacity {}; {} ({}, {} requests, {:.1} s){limited}",
            crate::bench::capacity::describe(s),
            s.stopped,
            crate::units::count(s.levels_tried.len(), "level"),
            s.requests,
            s.seconds
        );
    }
    if searched {
        return "not searched".to_owned();
    }
    let fail = match (&c.failed_at, c.failed_attainment) {
        (Some(k), Some(a)) => format!(
            "; at {}, {}{}",
            k.label(),
            share_of(a, c.failed_interval),
            c.missed
                .as_ref()
                .map_or_else(String::new, |w| format!(", limited by {w}"))
        ),
        _ => String::new(),
    };
    match (&c.level, c.attainment) {
        (Some(k), Some(a)) => format!(
            "SLO capacity up to {} of the levels run: {} there{fail}{doubt}{limited}",
            load_words(r, &k.label()),
            share_of(a, c.attainment_interval)
        ),
        _ => format!("SLO capacity none of the levels run{fail}{doubt}{limited}"),
    }
}

/// Each model's throughput knee beside its capacity within the SLOs, each with what limited it
/// ([`render_answer`]'s second part); the knee alone without SLOs.
pub fn render_limits(r: &Report, md: bool) -> String {
    let mut out = String::new();
    let bullet = if md { "- " } else { "  " };
    let strong = if md { "**" } else { "" };
    let knee_rule = format!(
        "aggregate tokens/s grows over {:.0}% less than the load while TTFT p95 grows > {:.0}% or the server's queue grows; the level before it is the capacity ceiling",
        r.knee_rule.tps_growth * 100.0,
        r.knee_rule.ttft_growth * 100.0
    );
    let _ = match &r.slo_capacity {
        Some(c) => writeln!(
            out,
            "{strong}Throughput knee and capacity within {} at {}% SLO attainment{strong} (knee: {knee_rule}; capacity: failed requests count against it):",
            r.slo.join(", "),
            trim_float((c.target_attainment * 1000.0).round() / 10.0)
        ),
        None => writeln!(out, "{strong}Throughput knee{strong} ({knee_rule}):"),
    };
    let names = model_names(&r.models);
    let searched = r.models.iter().any(|m| m.capacity.is_some());
    for (i, (m, name)) in r.models.iter().zip(&names).enumerate() {
        let _ = match &m.knee {
            Some(k) => writeln!(
                out,
                "{bullet}{name}: knee at {}{} (agg tokens/s {:+.0}%, TTFT p95 {:+.0}%{}){}{}",
                load_words(r, &k.level.label()),
                k.ceiling
                    .map_or_else(String::new, |c| format!(", capacity ceiling {}", c.label())),
                k.agg_tps_growth * 100.0,
                k.ttft_p95_growth * 100.0,
                k.requests_waiting
                    .map_or_else(String::new, |[a, b]| format!(
                        ", server requests waiting {a:.1} → {b:.1}"
                    )),
                k.estimate.map_or_else(String::new, |e| format!(
                    "; throughput against load bends at {}",
                    trim_float((e * 100.0).round() / 100.0)
                )),
                why(k.limited_by.as_ref())
            ),
            None => writeln!(out, "{bullet}{name}: no knee within the sweep"),
        };
        if let Some(c) = r.slo_capacity.as_ref().and_then(|c| c.models.get(i)) {
            // Between the same two levels as the knee's: its cause is said once.
            let limited = match (&c.limited_by, &m.knee) {
                (Some(l), Some(k)) if k.limited_by.as_ref() == Some(l) => {
                    format!("; why: {}, as at the knee", l.cause.as_str())
                }
                (l, _) => why(l.as_ref()),
            };
            let _ = writeln!(
                out,
                "{bullet}{name}: {}",
                capacity_line(r, m, c, searched, &limited)
            );
        }
        if let Some(stopped) = &m.stopped_early {
            let _ = writeln!(out, "{bullet}{name}: {stopped}");
        }
    }
    out.push('\n');
    out
}

/// The same criteria at another load than the answer's, labelled as that view: which models
/// pass there, their scores, no ranks (a blank line first; empty without such a view).
pub fn render_also(r: &Report, bullet: &str) -> String {
    let mut out = String::new();
    let Some(s) = &r.also_at else { return out };
    let passing: Vec<&str> = s.ranked.iter().map(|k| k.model.as_str()).collect();
    let all = s.ranked.len() + s.rejected.len();
    let who = match passing.as_slice() {
        [] => "where no model passes every limit".to_owned(),
        p if p.len() == all => "where every model passes every limit".to_owned(),
        [one] => format!("where only {one} passes every limit"),
        p => format!("where only {} pass every limit", p.join(" and ")),
    };
    let _ = writeln!(
        out,
        "\nA view {}, {who} (not the answer; {}):",
        stated_at(r, s),
        criteria_words(s)
    );
    for k in &s.ranked {
        let _ = writeln!(out, "{bullet}{} passes, score {:.3}", k.model, k.score);
    }
    for k in &s.rejected {
        let _ = writeln!(
            out,
            "{bullet}{} fails: {}{}",
            k.model,
            k.reasons.join("; "),
            k.score.map_or_else(String::new, |v| format!(
                "; weighted score {v:.3} among the models measured there"
            ))
        );
    }
    out
}

/// The terminal table: one row per model and level, the knee marked, then the selection and
/// the regressions. A `target` column when the models' targets differ, cost columns when a
/// model has a price.
pub fn render_table(r: &Report) -> String {
    let (mixed, costs) = (mixed_targets(&r.models), has_costs(r));
    let lengths = has_lengths(r);
    let knee_col = TABLE_HEADER.len() - 1;
    let mut header: Vec<String> = TABLE_HEADER.iter().map(|h| (*h).to_owned()).collect();
    if costs {
        header.splice(knee_col..knee_col, ["cost/req".into(), "cost/Mtok".into()]);
    }
    if mixed {
        header.insert(1, "target".into());
    }
    if lengths {
        header.extend(["ISL req→got".into(), "OSL req→got".into()]);
    }
    let usage = usage_columns(r);
    header.extend(usage.iter().map(|(h, _)| (*h).to_owned()));
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(&header);
    for m in &r.models {
        for (i, l) in m.levels.iter().enumerate() {
            let mut row = table_row(m, i, l).to_vec();
            if costs {
                row.splice(knee_col..knee_col, cost_cells(l));
            }
            if mixed {
                row.insert(1, m.target.clone().unwrap_or_default());
            }
            if lengths {
                let n = &l.lengths;
                row.push(length_cell(
                    n.requested_input_tokens_mean,
                    n.input_tokens_mean,
                ));
                row.push(length_cell(
                    n.requested_output_tokens_mean,
                    n.output_tokens_mean,
                ));
            }
            row.extend(
                usage
                    .iter()
                    .map(|(_, cell)| cell(l).unwrap_or_else(|| "-".into())),
            );
            t.add_row(row);
        }
    }
    for i in 2 + usize::from(mixed)..header.len() - 1 {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    let mut out = render_answer(r, false);
    let _ = writeln!(out, "{t}");
    out.push_str(&super::server_view::render_server(r, false));
    out.push_str(&super::efficiency::block(r, false));
    out.push_str(&render_notes(r, false));
    out
}

/// `--repeat`: each repeated level's spread over its runs (lowest–highest, and that range over
/// the mean) of TTFT p95, TPOT p50, aggregate tokens/s and attainment.
fn render_repeats(out: &mut String, r: &Report, names: &[String], bullet: &str) {
    let mut lines = Vec::new();
    for (m, name) in r.models.iter().zip(names) {
        for l in m.levels.iter().filter(|l| l.repeats.len() > 1) {
            let spread = |v: Vec<f64>, f: &dyn Fn(f64) -> String| -> Option<String> {
                if v.is_empty() {
                    return None;
                }
                let (lo, hi) = v
                    .iter()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                        (a.min(*x), b.max(*x))
                    });
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                let rel = if mean > 0.0 {
                    (hi - lo) / mean * 100.0
                } else {
                    0.0
                };
                Some(format!("{}–{} ({rel:.1}%)", f(lo), f(hi)))
            };
            let rs = &l.repeats;
            let parts: Vec<String> = [
                spread(rs.iter().filter_map(|x| x.ttft_p95_s).collect(), &fmt_secs)
                    .map(|s| format!("TTFT p95 {s}")),
                spread(rs.iter().filter_map(|x| x.tpot_p50_s).collect(), &fmt_secs)
                    .map(|s| format!("TPOT p50 {s}")),
                spread(rs.iter().map(|x| x.output_tokens_per_s).collect(), &|v| {
                    format!("{v:.1}")
                })
                .map(|s| format!("agg tok/s {s}")),
                spread(rs.iter().filter_map(|x| x.slo_attainment).collect(), &|v| {
                    format!("{:.1}%", v * 100.0)
                })
                .map(|s| format!("attainment {s}")),
            ]
            .into_iter()
            .flatten()
            .collect();
            lines.push(format!(
                "{bullet}{name} @ {} over {} runs: {}",
                l.key.label(),
                rs.len(),
                parts.join(", ")
            ));
        }
    }
    if !lines.is_empty() {
        let _ = writeln!(
            out,
            "\nSpread over the repeated runs (lowest–highest, range over the mean):"
        );
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }
}

/// Where a rejected model still meets every limit: `; passes every limit at 2` (or at none).
pub fn passes(k: &crate::bench::report::Rejected) -> String {
    match &k.passes_at {
        Some(l) => format!("; passes every limit at {l}"),
        None => "; passes every limit at no level run".to_owned(),
    }
}

/// The levels too short for a 95% interval of TTFT p99, in one line.
fn render_short(out: &mut String, r: &Report, names: &[String]) {
    let short: Vec<String> = r
        .models
        .iter()
        .zip(names)
        .flat_map(|(m, name)| {
            m.levels
                .iter()
                .filter(|l| l.ttft_s.is_some_and(|s| s.p99_ci.is_none()))
                .map(move |l| format!("{name} @ {}", l.key.label()))
        })
        .collect();
    if !short.is_empty() {
        let _ = writeln!(
            out,
            "\nNot enough samples for a 95% interval of TTFT p99 (it needs {} successes; p95 needs {}): {}",
            crate::bench::confidence::min_samples(0.99),
            crate::bench::confidence::min_samples(0.95),
            short.join(", ")
        );
    }
}

/// `--ramp-up`: each level second by second (requests sent, tokens/s of those that ended).
fn render_per_second(out: &mut String, r: &Report, names: &[String], bullet: &str) {
    let Some(how) = &r.mode.ramp_up else { return };
    let _ = writeln!(out, "\nPer second (rate ramped up {how}):");
    for (m, name) in r.models.iter().zip(names) {
        for l in m.levels.iter().filter(|l| !l.per_second.is_empty()) {
            let sent: Vec<String> = l.per_second.iter().map(|s| s.sent.to_string()).collect();
            let tokens: Vec<String> = l
                .per_second
                .iter()
                .map(|s| s.output_tokens.to_string())
                .collect();
            let _ = writeln!(
                out,
                "{bullet}{name} @ {}: sent {}; output tokens ended {}",
                l.key.label(),
                sent.join(", "),
                tokens.join(", ")
            );
        }
    }
}

/// Each level's steady state: its window, what it left out, and aggregate tokens/s over it
/// beside the whole level's.
fn render_steady(out: &mut String, r: &Report, names: &[String], bullet: &str) {
    let mut lines = Vec::new();
    for (m, name) in r.models.iter().zip(names) {
        for l in &m.levels {
            let Some(st) = &l.steady_state else { continue };
            lines.push(format!(
                "{bullet}{name} @ {}: {:.2}–{:.2} s ({} in flight or more), {} requests ({} before, {} after left out): agg tokens/s {:.1} (whole level {:.1}), req/s {:.2}, TTFT p50 {}",
                l.key.label(),
                st.start_s,
                st.end_s,
                st.in_flight_at_least,
                st.requests,
                st.before,
                st.after,
                st.output_tokens_per_s,
                l.output_tokens_per_s,
                st.requests_per_s,
                opt(&st.ttft_s, |s| s.p50, fmt_secs)
            ));
        }
    }
    write_section(
        out,
        "Steady state (the window where the in-flight count stays at the load; the ramp before it and the drain after it left out)",
        &lines,
    );
}

/// Each level's canaries (`--canary`): what a single user arriving during the load saw.
fn render_canaries(out: &mut String, r: &Report, names: &[String], bullet: &str) {
    let mut lines = Vec::new();
    for (m, name) in r.models.iter().zip(names) {
        for l in &m.levels {
            let Some(c) = &l.canary else { continue };
            let failed: u64 = c.errors.values().sum();
            let errors: Vec<String> = c.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
            lines.push(format!(
                "{bullet}{name} @ {}: {} canaries ({} failed{}), TTFT p50 {} p95 {}, TPOT p50 {}, E2E p95 {}{}",
                l.key.label(),
                c.requests,
                failed,
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(": {}", errors.join(", "))
                },
                opt(&c.ttft_s, |s| s.p50, fmt_secs),
                opt(&c.ttft_s, |s| s.p95, fmt_secs),
                opt(&c.tpot_s, |s| s.p50, fmt_secs),
                opt(&c.e2e_s, |s| s.p95, fmt_secs),
                if c.skipped > 0 {
                    format!(", {} instants skipped (the previous canary still ran)", c.skipped)
                } else {
                    String::new()
                }
            ));
        }
    }
    if let Some(c) = r
        .models
        .iter()
        .flat_map(|m| &m.levels)
        .find_map(|l| l.canary.as_ref())
    {
        let heading = format!(
            "Canaries (prompt {}, {}/s, one at a time beside the load; not in the level's figures)",
            c.prompt,
            crate::units::trim_float(c.rate)
        );
        write_section(out, &heading, &lines);
    }
}

/// A section of [`level_sections`]: a blank line, the heading and its colon, one line each;
/// nothing without lines.
fn write_section(out: &mut String, heading: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{heading}:");
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
}

/// What each level carries beside its row, section by section (a blank line, a heading ending in
/// `:`, one line per level): behind schedule, canaries, steady state, per second. The text
/// outputs print it; the page makes each section a heading and a list.
pub fn level_sections(r: &Report, bullet: &str) -> String {
    let names = model_names(&r.models);
    let mut out = String::new();
    render_stopped(&mut out, r, &names, bullet);
    render_trace(&mut out, r, &names, bullet);
    render_behind_schedule(&mut out, r, &names, bullet);
    render_canaries(&mut out, r, &names, bullet);
    render_steady(&mut out, r, &names, bullet);
    render_per_second(&mut out, r, &names, bullet);
    out
}

/// The models not loaded (their connectivity check failed) and the levels stopped before their
/// amount (partial): why, what finished, and the first messages of each error type.
fn render_stopped(out: &mut String, r: &Report, names: &[String], bullet: &str) {
    let mut lines = Vec::new();
    for (m, name) in r.models.iter().zip(names) {
        if let Some(c) = m.check.as_ref().filter(|c| !c.ok) {
            lines.push(format!(
                "{bullet}{name}: not loaded, its connectivity check failed: {}",
                c.line()
            ));
        }
        for l in &m.levels {
            let Some(s) = &l.stopped else { continue };
            let errors: Vec<String> = l.errors.iter().map(|(e, n)| format!("{e} {n}")).collect();
            let errors = if errors.is_empty() {
                String::new()
            } else {
                format!(", errors {}", errors.join(", "))
            };
            // Each message once: the reason may already hold the first.
            let messages: Vec<String> = s
                .messages
                .iter()
                .filter_map(|(e, m)| {
                    let new: Vec<&str> = m
                        .iter()
                        .map(String::as_str)
                        .filter(|m| !s.reason.contains(m))
                        .collect();
                    (!new.is_empty()).then(|| format!("{e}: {}", new.join(" | ")))
                })
                .collect();
            let messages = if messages.is_empty() {
                String::new()
            } else {
                format!("; first messages: {}", messages.join("; "))
            };
            lines.push(format!(
                "{bullet}{name} @ {}: {}; {} of its requests finished{errors}{messages}",
                l.key.label(),
                s.reason,
                l.requests,
            ));
        }
    }
    write_section(
        out,
        "Not measured in full (a partial level's figures are only its finished requests: never ranked, compared, nor taken for a knee or a capacity)",
        &lines,
    );
}

/// The sentence of a run stopped by a signal: what it keeps.
pub fn interrupted_sentence(r: &Report) -> Option<String> {
    let i = r.interrupted.as_ref()?;
    let kept: Vec<String> = model_names(&r.models)
        .iter()
        .zip(&r.models)
        .flat_map(|(name, m)| {
            m.levels
                .iter()
                .filter(|l| {
                    l.stopped
                        .as_ref()
                        .is_some_and(|s| s.by == crate::bench::health::StopCause::Signal)
                })
                .map(move |l| format!("{name} @ {}", l.key.label()))
        })
        .collect();
    let kept = if kept.is_empty() {
        String::new()
    } else {
        format!(
            " The level running ({}) is kept, marked partial, with the requests that finished.",
            kept.join(", ")
        )
    };
    let left = i.level_left_out.as_ref().map_or_else(String::new, |l| {
        format!(" The level running ({l}) is left out.")
    });
    Some(format!(
        "Stopped by {} before the end: only the finished levels are here.{kept}{left}",
        i.signal
    ))
}

/// A trace replay: what of the trace was sent at what pace, and how late each model's requests
/// left after their timestamps.
fn render_trace(out: &mut String, r: &Report, names: &[String], bullet: &str) {
    let Some(t) = &r.mode.trace else { return };
    let ms = |s: f64| trim_float((s * 1000.0).round() / 1000.0);
    let mut left_out = Vec::new();
    if t.no_output > 0 {
        left_out.push(format!("{} asking no output", t.no_output));
    }
    if t.other_models > 0 {
        left_out.push(format!("{} of other models", t.other_models));
    }
    let heading = format!(
        "Trace replay ({} {}{}: {} requests, the trace's {} s{}{}, time_scale {}: sent over {} s, {:.2} requests/s on average{}; how long after its timestamp each request left)",
        t.format.as_str(),
        t.file,
        t.model
            .as_ref()
            .map_or_else(String::new, |m| format!(", model {m}")),
        t.requests,
        ms(t.trace_span_s),
        if t.start_s > 0.0 || t.duration_s.is_some() {
            format!(", window from {} s", ms(t.start_s))
        } else {
            String::new()
        },
        t.duration_s
            .map_or_else(String::new, |d| format!(" for {} s", ms(d))),
        trim_float(t.time_scale),
        ms(t.replay_span_s),
        t.mean_rate,
        if left_out.is_empty() {
            String::new()
        } else {
            format!("; rows of the file left out: {}", left_out.join(", "))
        }
    );
    let lines: Vec<String> = r
        .models
        .iter()
        .zip(names)
        .flat_map(|(m, name)| {
            m.levels.iter().filter_map(move |l| {
                let b = l.behind_schedule_s.as_ref()?;
                Some(format!(
                    "{bullet}{name}: p50 {}, p99 {}, max {} ({} requests)",
                    fmt_secs(b.p50),
                    fmt_secs(b.p99),
                    fmt_secs(b.max),
                    b.n
                ))
            })
        })
        .collect();
    write_section(out, &heading, &lines);
}

/// Open-loop levels whose TTFT p95 counted from the schedule is longer than from the send (by
/// over 1 ms and 5%): requests left behind their scheduled arrival, and a user arriving on time
/// waited that too.
fn render_behind_schedule(out: &mut String, r: &Report, names: &[String], bullet: &str) {
    let mut lines = Vec::new();
    for (m, name) in r.models.iter().zip(names) {
        for l in &m.levels {
            let (Some(sent), Some(sched)) = (&l.ttft_s, &l.ttft_from_schedule_s) else {
                continue;
            };
            if sched.p95 - sent.p95 > 0.001_f64.max(0.05 * sent.p95) {
                lines.push(format!(
                    "{bullet}{name} @ {}: TTFT p95 {} from the schedule, {} from the send; E2E p95 {} from the schedule{}",
                    l.key.label(),
                    fmt_secs(sched.p95),
                    fmt_secs(sent.p95),
                    l.e2e_from_schedule_s
                        .map_or_else(|| "-".into(), |e| fmt_secs(e.p95)),
                    if l.capped > 0 {
                        format!(" ({} arrivals waited for an in-flight slot)", l.capped)
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }
    write_section(
        out,
        "Behind schedule (open loop: requests left after their scheduled arrival; SLO attainment counts TTFT, TTFO and E2E from the schedule)",
        &lines,
    );
}

/// Error breakdown, the other sections of each level, the view at another load and the
/// regressions (plain text or Markdown).
fn render_notes(r: &Report, md: bool) -> String {
    let mut out = String::new();
    let bullet = if md { "- " } else { "  " };
    if let Some(sentence) = interrupted_sentence(r) {
        let _ = writeln!(out, "\n{sentence}");
    }
    let names = model_names(&r.models);
    let mut errs = Vec::new();
    for (m, name) in r.models.iter().zip(&names) {
        for l in &m.levels {
            if !l.errors.is_empty() {
                let parts: Vec<String> = l
                    .errors
                    .iter()
                    .map(|(k, v)| match l.error_examples.get(k) {
                        Some(why) => format!("{k} {v} (first: {why})"),
                        None => format!("{k} {v}"),
                    })
                    .collect();
                errs.push(format!(
                    "{bullet}{} @ {}: {}",
                    name,
                    l.key.label(),
                    parts.join(", ")
                ));
            }
        }
    }
    if !errs.is_empty() {
        let _ = writeln!(out, "\nErrors by type:");
        for e in errs {
            let _ = writeln!(out, "{e}");
        }
    }
    render_lengths(&mut out, r, bullet);
    render_short(&mut out, r, &names);
    out.push_str(&level_sections(r, bullet));
    render_repeats(&mut out, r, &names, bullet);
    out.push_str(&render_also(r, bullet));
    if let Some(c) = &r.comparison {
        out.push_str(&super::gate::render(c, md));
    }
    out.push_str(&super::crosscheck::render_notes(r, md));
    out
}

/// The calibrations, the requests off their input length, and a conversation's TTFT by turn
/// beside each turn's input length and cached share.
fn render_lengths(out: &mut String, r: &Report, bullet: &str) {
    let mut lines = Vec::new();
    for (i, m) in r.models.iter().enumerate() {
        // A model's calibration is kept for the run: named where it was made.
        let kept = r.models[..i]
            .iter()
            .any(|e| e.model == m.model && e.calibration == m.calibration);
        if let Some(c) = m.calibration.as_ref().filter(|_| !kept) {
            lines.push(format!(
                "{bullet}{}: calibrated with {}",
                m.name(),
                c.summary()
            ));
        }
        for l in &m.levels {
            let n = &l.lengths;
            if n.input_length_off > 0 {
                lines.push(format!(
                    "{bullet}{} @ {}: {} of {} successes off the requested input length (> 2% or 4 tokens)",
                    m.name(),
                    l.key.label(),
                    n.input_length_off,
                    l.successes
                ));
            }
            if !n.turns.is_empty() {
                // Each turn's TTFT beside the input it was sent with (a later turn resends the
                // history) and the share of it the prefix cache served.
                let turns: Vec<String> = n
                    .turns
                    .iter()
                    .map(|t| {
                        format!(
                            "turn {} {}{}{}",
                            t.turn,
                            opt(&t.ttft_s, |s| s.p50, fmt_secs),
                            t.input_tokens_mean
                                .map_or_else(String::new, |i| format!(" at {i:.0} input tokens")),
                            t.cached_share.map_or_else(String::new, |c| format!(
                                ", {} cached",
                                crate::units::fmt_pct(c)
                            ))
                        )
                    })
                    .collect();
                let server = l
                    .server
                    .as_ref()
                    .and_then(|s| s.mean("prompt_cache_hit_ratio"))
                    .map_or_else(String::new, |h| {
                        format!(
                            "; the server's prefix-cache hits over the level {}",
                            crate::units::fmt_pct(h)
                        )
                    });
                lines.push(format!(
                    "{bullet}{} @ {}: TTFT p50 by turn: {}{server}",
                    m.name(),
                    l.key.label(),
                    turns.join("; ")
                ));
            }
        }
    }
    if !lines.is_empty() {
        let _ = writeln!(out, "\nWorkload:");
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }
}

/// A value of `metric` for people, with its unit.
pub(super) fn fmt_value(metric: &str, v: f64) -> String {
    metric
        .parse::<crate::bench::criteria::Metric>()
        .map_or_else(|_| format!("{v}"), |m| m.format(v))
}

/// The Markdown comparison table (times in ms), with the knee, selection and regressions.
pub fn render_markdown(r: &Report) -> String {
    let mut out = String::new();
    let mode = match r.mode.kind.as_str() {
        "open" => format!(
            "open loop, {} arrivals",
            r.mode.arrival.as_deref().unwrap_or("poisson")
        ),
        _ => "closed loop".to_owned(),
    };
    let per_level = match (r.mode.requests_per_level, r.mode.duration_per_level_s) {
        (Some(n), _) => format!("{n} requests per level"),
        (None, Some(d)) => format!("{d} s per level"),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "### tokenprobe bench: {} ({}), prompt `{}`\n\n{mode}, {per_level}, warm-up {}; started {}.{}\n",
        r.target,
        r.api,
        r.prompt,
        r.mode.warmup,
        r.started_at,
        if r.slo.is_empty() {
            String::new()
        } else {
            format!(" Goodput SLOs: {}.", r.slo.join(", "))
        }
    );
    out.push_str(&render_answer(r, true));
    let load = if r.mode.kind == "open" {
        "rate"
    } else {
        "concurrency"
    };
    let (mixed, costs) = (mixed_targets(&r.models), has_costs(r));
    let lengths = has_lengths(r);
    let mut header = vec![
        "model",
        load,
        "requests",
        "error rate",
        "TTFT p50 (ms)",
        "TTFT p95 (ms)",
        "TTFT p99 (ms)",
        "TTFO p95 (ms)",
        "TPOT p50 (ms)",
        "TPOT p95 (ms)",
        "E2E p50 (ms)",
        "E2E p95 (ms)",
        "TPS p50",
        "TPS p95",
        "agg tok/s",
        "req/s",
        "goodput req/s",
        "lag p99 (ms)",
        "loop lag p99 (ms)",
        "read lag p99 (ms)",
        "send lag p99 (ms)",
        "ramp (ms)",
        "knee",
    ];
    let knee_col = header.len() - 1;
    if costs {
        header.splice(knee_col..knee_col, ["cost/req", "cost/Mtok"]);
    }
    if mixed {
        header.insert(1, "target");
    }
    if lengths {
        header.extend(["ISL req→got", "OSL req→got"]);
    }
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let aligns: Vec<&str> = header
        .iter()
        .enumerate()
        .map(|(i, _)| if i == 0 { "---" } else { "---:" })
        .collect();
    let _ = writeln!(out, "|{}|", aligns.join("|"));
    for m in &r.models {
        for (i, l) in m.levels.iter().enumerate() {
            let mut cells = vec![
                m.name().replace('|', "\\|"),
                l.key.label(),
                l.requests.to_string(),
                pct(l.error_rate),
                opt(&l.ttft_s, |s| s.p50, ms),
                opt(&l.ttft_s, |s| s.p95, ms),
                opt(&l.ttft_s, |s| s.p99, ms),
                opt(&l.ttfo_s, |s| s.p95, ms),
                opt(&l.tpot_s, |s| s.p50, ms),
                opt(&l.tpot_s, |s| s.p95, ms),
                opt(&l.e2e_s, |s| s.p50, ms),
                opt(&l.e2e_s, |s| s.p95, ms),
                opt(&l.decode_tokens_per_s, |s| s.p50, |v| format!("{v:.1}")),
                opt(&l.decode_tokens_per_s, |s| s.p95, |v| format!("{v:.1}")),
                format!("{:.1}", l.output_tokens_per_s),
                format!("{:.2}", l.requests_per_s),
                l.goodput_rps
                    .map_or_else(|| "-".into(), |g| format!("{g:.2}")),
                opt(&l.lag_s, |s| s.p99, |v| format!("{:.2}", v * 1e3)),
                opt(&l.loop_lag_s, |s| s.p99, |v| format!("{:.2}", v * 1e3)),
                opt(&l.read_lag_s, |s| s.p99, |v| format!("{:.2}", v * 1e3)),
                opt(&l.send_lag_s, |s| s.p99, |v| format!("{:.2}", v * 1e3)),
                l.ramp_s
                    .map_or_else(|| "-".into(), |v| format!("{:.1}", v * 1e3)),
                marks(m, i, l, |s| format!("**{s}**")),
            ];
            if costs {
                cells.splice(knee_col..knee_col, cost_cells(l));
            }
            if mixed {
                cells.insert(1, m.target.as_deref().unwrap_or("").replace('|', "\\|"));
            }
            if lengths {
                let n = &l.lengths;
                cells.push(length_cell(
                    n.requested_input_tokens_mean,
                    n.input_tokens_mean,
                ));
                cells.push(length_cell(
                    n.requested_output_tokens_mean,
                    n.output_tokens_mean,
                ));
            }
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    }
    out.push_str(&super::server_view::render_server(r, true));
    out.push_str(&super::efficiency::block(r, true));
    out.push_str(&render_notes(r, true));
    out
}

const CSV_SUMMARIES: [&str; 12] = [
    "ttft",
    "ttfo",
    "tpot",
    "e2e",
    "tps",
    "lag",
    "loop_lag",
    "read_lag",
    "ttft_from_schedule",
    "e2e_from_schedule",
    "send_lag",
    "wire_ttft",
];

/// CSV: one row per model and level; every statistic of every metric (seconds, tokens/s).
///
/// # Errors
/// Only if the CSV writer fails (it writes to memory).
pub fn render_csv(r: &Report) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = [
        "model",
        "target",
        "concurrency",
        "rate",
        "requests",
        "successes",
        "error_rate",
        "errors",
        "output_tokens",
        "wall_s",
        "agg_tps",
        "rps",
        "goodput_rps",
        "goodput_tokens_per_s",
        "slo_attainment",
        "slo_attainment_lo",
        "slo_attainment_hi",
        "cost_per_request",
        "cost_per_mtok",
        "capped",
        "ramp_s",
        "knee",
        "client_bound",
        "partial",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for m in CSV_SUMMARIES {
        for st in ["mean", "p50", "p90", "p95", "p99", "max"] {
            let unit = if matches!(m, "tps") { "" } else { "_s" };
            header.push(format!("{m}_{st}{unit}"));
        }
    }
    header.extend(
        [
            "steady_start_s",
            "steady_end_s",
            "steady_requests",
            "steady_before",
            "steady_after",
            "steady_output_tokens_per_s",
            "steady_requests_per_s",
            "prompt",
            "requested_input_tokens_mean",
            "input_tokens_mean",
            "requested_output_tokens_mean",
            "output_tokens_mean",
            "input_length_off",
        ]
        .map(str::to_owned),
    );
    let cross_check = super::crosscheck::any(r);
    if cross_check {
        header.extend(super::crosscheck::CSV_HEADER.map(str::to_owned));
    }
    let spend = super::efficiency::csv_columns(r, &mut header);
    let server_cols = super::server_view::csv_header(r);
    header.extend(server_cols.iter().cloned());
    w.write_record(&header)?;
    let num = |v: f64| format!("{v}");
    for m in &r.models {
        for (i, l) in m.levels.iter().enumerate() {
            let errors: Vec<String> = l.errors.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let att = l.slo_attainment.as_ref();
            let interval = att.and_then(|a| a.interval);
            let mut row = vec![
                m.model.clone(),
                m.target.clone().unwrap_or_default(),
                l.key.concurrency.to_string(),
                l.key.rate.map(num).unwrap_or_default(),
                l.requests.to_string(),
                l.successes.to_string(),
                num(l.error_rate),
                errors.join(";"),
                l.output_tokens.to_string(),
                num(l.wall_s),
                num(l.output_tokens_per_s),
                num(l.requests_per_s),
                l.goodput_rps.map(num).unwrap_or_default(),
                l.goodput_tokens_per_s.map(num).unwrap_or_default(),
                att.map(|a| num(a.share)).unwrap_or_default(),
                interval.map(|i| num(i[0])).unwrap_or_default(),
                interval.map(|i| num(i[1])).unwrap_or_default(),
                l.cost_per_request.map(num).unwrap_or_default(),
                l.cost_per_mtok.map(num).unwrap_or_default(),
                l.capped.to_string(),
                l.ramp_s.map(num).unwrap_or_default(),
                (!knee_mark(m, i).is_empty()).to_string(),
                l.client_bound.clone().unwrap_or_default(),
                l.stopped
                    .as_ref()
                    .map(|s| s.reason.clone())
                    .unwrap_or_default(),
            ];
            for s in [
                &l.ttft_s,
                &l.ttfo_s,
                &l.tpot_s,
                &l.e2e_s,
                &l.decode_tokens_per_s,
                &l.lag_s,
                &l.loop_lag_s,
                &l.read_lag_s,
                &l.ttft_from_schedule_s,
                &l.e2e_from_schedule_s,
                &l.send_lag_s,
                &l.wire_ttft_s,
            ] {
                match s {
                    Some(s) => row.extend([s.mean, s.p50, s.p90, s.p95, s.p99, s.max].map(num)),
                    None => row.extend(std::iter::repeat_n(String::new(), 6)),
                }
            }
            let st = l.steady_state.as_ref();
            row.extend([
                st.map(|s| num(s.start_s)).unwrap_or_default(),
                st.map(|s| num(s.end_s)).unwrap_or_default(),
                st.map(|s| s.requests.to_string()).unwrap_or_default(),
                st.map(|s| s.before.to_string()).unwrap_or_default(),
                st.map(|s| s.after.to_string()).unwrap_or_default(),
                st.map(|s| num(s.output_tokens_per_s)).unwrap_or_default(),
                st.map(|s| num(s.requests_per_s)).unwrap_or_default(),
                m.prompt.clone().unwrap_or_else(|| r.prompt.clone()),
                l.lengths
                    .requested_input_tokens_mean
                    .map(num)
                    .unwrap_or_default(),
                l.lengths.input_tokens_mean.map(num).unwrap_or_default(),
                l.lengths
                    .requested_output_tokens_mean
                    .map(num)
                    .unwrap_or_default(),
                l.lengths.output_tokens_mean.map(num).unwrap_or_default(),
                l.lengths.input_length_off.to_string(),
            ]);
            if cross_check {
                row.extend(super::crosscheck::csv_cells(l.cross_check.as_ref()));
            }
            row.extend(super::efficiency::csv_cells(spend, m, l));
            row.extend(super::server_view::csv_cells(&server_cols, l));
            w.write_record(&row)?;
        }
    }
    let bytes = w
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The JSON report (pretty-printed).
pub fn render_json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

#[cfg(test)]
mod tests;
