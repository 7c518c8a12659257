//! What the terminal and Markdown outputs say under the level table (pure): a stopped run's
//! sentence, the errors by type, the workload (calibrations, lengths off, turns), the levels too
//! short for an interval, each level's sections (not measured in full, a trace's pace, behind
//! schedule, canaries, steady state, per second), the spread of repeated runs, the view at
//! another load, the comparison with a baseline and the cross-checks.

use super::{Style, opt};
use crate::bench::report::Report;
use crate::render::shown::Shown;
use crate::units::{fmt_secs, trim_float};
use std::fmt::Write as _;

/// Error breakdown, the other sections of each level, the view at another load and the
/// regressions.
pub fn render(shown: &Shown<'_>, style: Style) -> String {
    let r = shown.report;
    let mut out = String::new();
    let bullet = style.bullet();
    if let Some(sentence) = interrupted_sentence(shown) {
        let _ = writeln!(out, "\n{sentence}");
    }
    let mut errs = Vec::new();
    for (m, name) in shown.models() {
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
    lengths(&mut out, r, bullet);
    short(&mut out, shown);
    out.push_str(&level_sections(shown, style));
    repeats(&mut out, shown, bullet);
    out.push_str(&super::answer::also(r, style));
    if let Some(c) = &r.comparison {
        out.push_str(&super::gate::render(c, style));
    }
    out.push_str(&super::crosscheck::render(r, style));
    out
}

/// The sentence of a run stopped by a signal: what it keeps.
pub fn interrupted_sentence(shown: &Shown<'_>) -> Option<String> {
    let i = shown.report.interrupted.as_ref()?;
    let kept: Vec<String> = shown
        .models()
        .flat_map(|(m, name)| {
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

/// The calibrations, the requests off their input length, and a conversation's TTFT by turn
/// beside each turn's input length and cached share.
fn lengths(out: &mut String, r: &Report, bullet: &str) {
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

/// The levels too short for a 95% interval of TTFT p99, in one line.
fn short(out: &mut String, shown: &Shown<'_>) {
    let short: Vec<String> = shown
        .models()
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

/// What each level carries beside its row, section by section (a blank line, a heading ending in
/// `:`, one line per level): behind schedule, canaries, steady state, per second. The text
/// outputs print it; the page makes each section a heading and a list.
pub fn level_sections(shown: &Shown<'_>, style: Style) -> String {
    let bullet = style.bullet();
    let mut out = String::new();
    stopped(&mut out, shown, bullet);
    trace(&mut out, shown, bullet);
    behind_schedule(&mut out, shown, bullet);
    canaries(&mut out, shown, bullet);
    steady(&mut out, shown, bullet);
    per_second(&mut out, shown, bullet);
    out
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

/// The models not loaded (their connectivity check failed) and the levels stopped before their
/// amount (partial): why, what finished, and the first messages of each error type.
fn stopped(out: &mut String, shown: &Shown<'_>, bullet: &str) {
    let mut lines = Vec::new();
    for (m, name) in shown.models() {
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

/// A trace replay: what of the trace was sent at what pace, and how late each model's requests
/// left after their timestamps.
fn trace(out: &mut String, shown: &Shown<'_>, bullet: &str) {
    let r = shown.report;
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
    let lines: Vec<String> = shown
        .models()
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

/// Open-loop levels that fell behind their schedule ([`LevelStats::behind_schedule`]): requests
/// left after their scheduled arrival, and a user arriving on time waited that too.
///
/// [`LevelStats::behind_schedule`]: crate::bench::stats::LevelStats::behind_schedule
fn behind_schedule(out: &mut String, shown: &Shown<'_>, bullet: &str) {
    let mut lines = Vec::new();
    for (m, name) in shown.models() {
        for l in &m.levels {
            if let Some((sched, sent)) = l.behind_schedule() {
                lines.push(format!(
                    "{bullet}{name} @ {}: TTFT p95 {} from the schedule, {} from the send; E2E p95 {} from the schedule{}",
                    l.key.label(),
                    fmt_secs(sched),
                    fmt_secs(sent),
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

/// Each level's canaries (`--canary`): what a single user arriving during the load saw.
fn canaries(out: &mut String, shown: &Shown<'_>, bullet: &str) {
    let r = shown.report;
    let mut lines = Vec::new();
    for (m, name) in shown.models() {
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

/// Each level's steady state: its window, what it left out, and aggregate tokens/s over it
/// beside the whole level's.
fn steady(out: &mut String, shown: &Shown<'_>, bullet: &str) {
    let mut lines = Vec::new();
    for (m, name) in shown.models() {
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

/// `--ramp-up`: each level second by second (requests sent, tokens/s of those that ended).
fn per_second(out: &mut String, shown: &Shown<'_>, bullet: &str) {
    let r = shown.report;
    let Some(how) = &r.mode.ramp_up else { return };
    let _ = writeln!(out, "\nPer second (rate ramped up {how}):");
    for (m, name) in shown.models() {
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

/// `--repeat`: each repeated level's spread over its runs (lowest–highest, and that range over
/// the mean) of TTFT p95, TPOT p50, aggregate tokens/s and attainment.
fn repeats(out: &mut String, shown: &Shown<'_>, bullet: &str) {
    let mut lines = Vec::new();
    for (m, name) in shown.models() {
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
