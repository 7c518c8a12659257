//! The run's answer in words (pure), first in the terminal and Markdown outputs and on the page:
//! the ranking at its stated load (ties as ties; when no model passes, every model by its
//! distance to the limits, with its weighted score), each model's throughput knee beside its
//! capacity within the SLOs with what limited each, and the same criteria at another load.

use super::{Style, load_words, load_words_in};
use crate::bench::capacity::Capacity;
use crate::bench::report::{
    Limiter, LoadMode, ModelCapacity, ModelReport, Ranked, Rejected, Report, Selection,
};
use crate::bench::stats::Load;
use crate::render::shown::Shown;
use crate::units::trim_float;
use std::fmt::Write as _;

/// Where a selection is stated: `at 4 concurrent streams, the highest load every model serves
/// within the SLOs` (a session workload's: `at 4 concurrent sessions, …`, as `mode` loads).
pub fn stated_at(s: &Selection, mode: &LoadMode) -> String {
    use crate::bench::report::{AnswerLoad, SelectedLevel};
    let at = match s.level {
        SelectedLevel::At(load) if s.load != Some(AnswerLoad::LastLevels) => {
            load_words_in(mode, load)
        }
        _ => return "at each model's last level (no load every model ran)".into(),
    };
    match s.load {
        Some(AnswerLoad::Asked) => format!("at {at}, as asked (select_at)"),
        Some(AnswerLoad::WithinSlos) => {
            format!("at {at}, the highest load every model serves within the SLOs")
        }
        Some(AnswerLoad::HighestCommon) => format!("at {at}, the highest load every model ran"),
        Some(AnswerLoad::LastLevels) | None => format!("at {at}"),
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
fn place(n: usize, style: Style) -> String {
    match style {
        Style::Markdown => format!("{n}\\."),
        Style::Terminal => format!("{n}."),
    }
}

/// A ranked model's line: `1. fast score 1.000`, `1. a score 0.900, tied`.
fn ranked_line(s: &Selection, k: &Ranked, style: Style) -> String {
    let tied = s.ranked.iter().filter(|o| o.rank == k.rank).count() > 1;
    format!(
        "{} {} score {:.3}{}",
        place(k.rank, style),
        k.model,
        k.score,
        if tied { ", tied" } else { "" }
    )
}

/// The run's one answer, before everything else: the ranking at its stated load (ties as
/// ties; when no model passes, every model by its distance to the limits, with its weighted
/// score), then each model's throughput knee beside its capacity within the SLOs, each with what
/// limited it. Empty when the run was not judged and has no knee block.
pub fn render(shown: &Shown<'_>, style: Style) -> String {
    let mut out = ranking(shown, style);
    out.push_str(&limits(shown, style));
    out
}

/// The ranking of the answer ([`render`]'s first part).
pub fn ranking(shown: &Shown<'_>, style: Style) -> String {
    let mut out = String::new();
    let Some(s) = &shown.report.selection else {
        return out;
    };
    let (bullet, strong) = (style.bullet(), style.strong());
    let _ = writeln!(
        out,
        "{strong}Answer {}{strong} ({}):",
        stated_at(s, &shown.report.mode),
        criteria_words(s)
    );
    for k in &s.ranked {
        let _ = writeln!(out, "{bullet}{}", ranked_line(s, k, style));
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
                place(n, style),
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
    let lengths: Vec<String> = shown
        .models()
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
fn why(l: Option<&Limiter>) -> String {
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

/// What an answer that is not clear says of its doubt, after its sentence (nothing when it is
/// clear: [`crate::bench::capacity::clear`]): the one wording of every output, a capacity of
/// none as much as a load.
pub fn doubt(clear: bool) -> &'static str {
    if clear {
        ""
    } else {
        " (not clear at 95% confidence: an interval reaches across the target; longer levels would decide)"
    }
}

/// A load as the report writes it, to a thousandth (`8`, `2.5`).
fn thousandths(x: f64) -> String {
    trim_float((x * 1000.0).round() / 1000.0)
}

/// A capacity search's answer in words: `up to 8 concurrent streams at 96.0% attainment
/// [89.1%, 98.9%], limited by ttft<=2.00 s (failed at 9)`, or `none: no load tried met the
/// target` when no load passed; either with its [`doubt`] when it is not clear. With the model's
/// GPU count and price, the self-hosted cost per million output tokens there is said.
pub fn capacity_words(c: &Capacity) -> String {
    let unclear = doubt(c.clear);
    let load = match c.load() {
        Some(n @ Load::Concurrency(_)) if c.sessions => {
            format!("up to {}", crate::bench::session::load_words(n))
        }
        Some(n @ Load::Concurrency(_)) => format!("up to {}", load_words(n)),
        Some(Load::Rate(r)) if c.sessions => format!("up to {} sessions/s", thousandths(r)),
        Some(Load::Rate(r)) => format!("up to {} requests/s", thousandths(r)),
        None => return format!("none: no load tried met the target{unclear}"),
    };
    let att = match (c.attainment, c.attainment_interval) {
        (Some(a), Some([lo, hi])) => format!(
            " at {:.1}% attainment [{:.1}%, {:.1}%]",
            a * 100.0,
            lo * 100.0,
            hi * 100.0
        ),
        (Some(a), None) => format!(" at {:.1}% attainment", a * 100.0),
        _ => String::new(),
    };
    let limit = match (&c.limited_by, c.failed_at) {
        (Some(l), Some(f)) => format!(", limited by {l} (failed at {})", thousandths(f)),
        _ => String::new(),
    };
    let cost = c.gpu_cost_per_mtok.map_or_else(String::new, |v| {
        format!(
            ", {} per million output tokens on its GPUs there",
            crate::units::fmt_cost(v)
        )
    });
    format!("{load}{att}{limit}{cost}{unclear}")
}

/// One model's capacity within the SLOs, as a sentence: the search's, or a fixed sweep's highest
/// level at the target and the first below it, then `limited` (why it failed there).
fn capacity_line(
    (m, mode): (&ModelReport, &LoadMode),
    c: &ModelCapacity,
    searched: bool,
    limited: &str,
) -> String {
    let doubt = doubt(c.clear);
    if let Some(s) = &m.capacity {
        return format!(
            "SLO capacity {}; {} ({}, {} requests, {:.1} s){limited}",
            capacity_words(s),
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
            load_words_in(mode, k.load()),
            share_of(a, c.attainment_interval)
        ),
        _ => format!("SLO capacity none of the levels run{fail}{doubt}{limited}"),
    }
}

/// Each model's throughput knee beside its capacity within the SLOs, each with what limited it
/// ([`render`]'s second part); the knee alone without SLOs.
pub fn limits(shown: &Shown<'_>, style: Style) -> String {
    let r = shown.report;
    let mut out = String::new();
    let (bullet, strong) = (style.bullet(), style.strong());
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
    let searched = r.models.iter().any(|m| m.capacity.is_some());
    for (i, (m, name)) in shown.models().enumerate() {
        let _ = match &m.knee {
            Some(k) => writeln!(
                out,
                "{bullet}{name}: knee at {}{} (agg tokens/s {:+.0}%, TTFT p95 {:+.0}%{}){}{}",
                load_words_in(&r.mode, k.level.load()),
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
                capacity_line((m, &r.mode), c, searched, &limited)
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
pub fn also(r: &Report, style: Style) -> String {
    let mut out = String::new();
    let Some(s) = &r.also_at else { return out };
    let bullet = style.bullet();
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
        stated_at(s, &r.mode),
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

/// Where a rejected model still meets every limit: `; passes every limit at 2` (or at none).
pub fn passes(k: &Rejected) -> String {
    match &k.passes_at {
        Some(l) => format!("; passes every limit at {l}"),
        None => "; passes every limit at no level run".to_owned(),
    }
}
