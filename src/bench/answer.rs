//! The run's one answer (pure): the load its ranking is stated at, each model's capacity within
//! the SLOs, and what limited a knee or a capacity (the server's queue, the compute its running
//! requests share, or errors). The ranking itself is [`super::select::select`]'s, at that load.

use super::criteria::Criteria;
use super::report::{
    AnswerLoad, Cause, Limiter, ModelCapacity, ModelReport, SelectedLevel, Selection, SloCapacity,
    View, model_names,
};
use super::select::{KNEE_WAITING_MIN, answer_attainment, highest_passing, passes_slo, select};
use super::stats::{CapacityLimit, LevelStats};
use crate::units::fmt_secs;

/// The rise of the error rate (absolute, from the level before) from which errors are what
/// limited a level.
pub const ERRORS_RISE: f64 = 0.05;

/// The growth of TPOT p50 (from the level before) past which, without the server's view, the
/// running requests are read as sharing the server's compute; below it a TTFT that grew is read
/// as requests waiting before they started.
pub const SHARED_TPOT_GROWTH: f64 = 0.10;

/// The growth of TTFT p95 or TPOT p50 below which latency did not grow.
pub const LATENCY_GROWTH: f64 = 0.10;

/// True when some level of some model measured SLO attainment (the run had SLOs).
fn has_slos(models: &[ModelReport]) -> bool {
    models
        .iter()
        .flat_map(|m| &m.levels)
        .any(|l| l.slo_attainment.is_some())
}

/// The highest load every model ran (with `within`, and passed the SLOs at the target there).
fn highest_common(models: &[ModelReport], within: Option<f64>) -> Option<f64> {
    let first = models.first()?;
    first
        .levels
        .iter()
        .filter(|l| {
            models.iter().all(|m| {
                m.levels
                    .iter()
                    .any(|o| o.key.same(&l.key) && within.is_none_or(|t| passes_slo(o, t)))
            })
        })
        .map(|l| l.key.x())
        .max_by(f64::total_cmp)
}

/// The load the answer is stated at, and why: `--select-at` when asked; else, with SLOs, the
/// highest load every model ran within them at the target attainment; else the highest load
/// every model ran; else (no load in common) each model's last level (`None`).
pub fn answer_load(models: &[ModelReport], c: &Criteria) -> (Option<f64>, AnswerLoad) {
    if let Some(x) = c.select_at {
        return (Some(x), AnswerLoad::Asked);
    }
    if has_slos(models)
        && let Some(x) = highest_common(models, Some(answer_attainment(models)))
    {
        return (Some(x), AnswerLoad::WithinSlos);
    }
    match highest_common(models, None) {
        Some(x) => (Some(x), AnswerLoad::HighestCommon),
        None => (None, AnswerLoad::LastLevels),
    }
}

/// The selection at `load` ([`answer_load`]'s), marked with why.
fn select_at(models: &[ModelReport], c: &Criteria, load: (Option<f64>, AnswerLoad)) -> Selection {
    let mut s = select(
        models,
        &Criteria {
            select_at: load.0,
            ..c.clone()
        },
    );
    s.load = Some(load.1);
    if load.1 == AnswerLoad::LastLevels {
        s.level = SelectedLevel::Last;
    }
    s
}

/// The run's one answer: the selection (limits, ranking) at [`answer_load`]'s load; and, when
/// that load is not the highest every model ran, the same criteria there, as a view at another
/// load (never a second answer).
pub fn answer(models: &[ModelReport], c: &Criteria) -> (Selection, Option<Selection>) {
    let load = answer_load(models, c);
    let main = select_at(models, c, load);
    let other = match highest_common(models, None) {
        Some(x) => (Some(x), AnswerLoad::HighestCommon),
        None => (None, AnswerLoad::LastLevels),
    };
    let same = match (load.0, other.0) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(1.0),
        (None, None) => true,
        _ => false,
    };
    (main, (!same).then(|| select_at(models, c, other)))
}

/// `a → b (+g%)` of one figure between two levels, with its growth; `None` when either lacks it.
fn grew(
    name: &str,
    before: Option<f64>,
    at: Option<f64>,
    show: fn(f64) -> String,
) -> Option<(f64, String)> {
    let (a, b) = (before?, at?);
    (a > 0.0).then(|| {
        let g = b / a - 1.0;
        (
            g,
            // Rounded first, so that a hair below 0 reads `+0%`, not `-0%`.
            format!(
                "{name} {} → {} ({:+.0}%)",
                show(a),
                show(b),
                (g * 100.0).round() + 0.0
            ),
        )
    })
}

/// What limited `at` against `before` (a lower load of the same model): errors when the error
/// rate rose by [`ERRORS_RISE`] or more; else, with the server's view of both (its requests
/// waiting), queueing when the server's queue grew to [`KNEE_WAITING_MIN`] or more, shared
/// compute when it did not; else, from the client's view, shared compute when TPOT p50 grew by
/// more than [`SHARED_TPOT_GROWTH`], queueing when TTFT p95 grew while TPOT held, unknown
/// otherwise (neither grew by [`LATENCY_GROWTH`], or no TPOT to tell by).
pub fn limiter(before: &LevelStats, at: &LevelStats) -> Option<Limiter> {
    let span = format!("from {} to {}", before.key.label(), at.key.label());
    if at.error_rate - before.error_rate >= ERRORS_RISE {
        return Some(Limiter {
            cause: Cause::Errors,
            view: View::Client,
            evidence: format!(
                "{span}: error rate {} → {}",
                crate::units::fmt_pct(before.error_rate),
                crate::units::fmt_pct(at.error_rate)
            ),
        });
    }
    let ttft = grew(
        "TTFT p95",
        before.ttft_s.map(|s| s.p95),
        at.ttft_s.map(|s| s.p95),
        fmt_secs,
    );
    let tpot = grew(
        "TPOT p50",
        before.tpot_s.map(|s| s.p50),
        at.tpot_s.map(|s| s.p50),
        fmt_secs,
    );
    let latency: Vec<&str> = [&ttft, &tpot]
        .into_iter()
        .flatten()
        .map(|(_, s)| s.as_str())
        .collect();
    let latency = latency.join(", ");
    let server = |l: &LevelStats, s: &str, max: bool| {
        let v = l.server.as_ref()?;
        if max { v.max(s) } else { v.mean(s) }
    };
    if let (Some(a), Some(b)) = (
        server(before, "requests_waiting", false),
        server(at, "requests_waiting", false),
    ) {
        let running = match (
            server(before, "requests_running", true),
            server(at, "requests_running", true),
        ) {
            (Some(r0), Some(r1)) => format!(", requests running (max) {r0:.0} → {r1:.0}"),
            _ => String::new(),
        };
        let queued = b >= KNEE_WAITING_MIN && b > a;
        return Some(Limiter {
            cause: if queued {
                Cause::Queueing
            } else {
                Cause::SharedCompute
            },
            view: View::Server,
            evidence: format!(
                "{span}: {} (mean) {a:.1} → {b:.1}{running}; {latency}",
                if queued {
                    "the server's requests waiting"
                } else {
                    "no queue on the server: requests waiting"
                }
            ),
        });
    }
    let still = |g: &Option<(f64, String)>| g.as_ref().is_none_or(|(g, _)| *g <= LATENCY_GROWTH);
    let (cause, why) = match &tpot {
        _ if still(&ttft) && still(&tpot) => {
            (Cause::Unknown, "neither grew by more than 10%".to_owned())
        }
        Some((g, _)) if *g > SHARED_TPOT_GROWTH => (
            Cause::SharedCompute,
            "the running requests decoded slower together".to_owned(),
        ),
        Some(_) => (
            Cause::Queueing,
            "TPOT held: requests waited before they started".to_owned(),
        ),
        None => (
            Cause::Unknown,
            "without TPOT or the server's queue, queueing and shared compute look alike".to_owned(),
        ),
    };
    Some(Limiter {
        cause,
        view: View::Client,
        evidence: format!("{span}: {latency}; {why}"),
    })
}

/// Each model's capacity within the SLOs (`None` when the run had none): the capacity search's,
/// else the highest level run at the target attainment and the first level run below it, each
/// with its attainment, and what limited it ([`limiter`], from the highest passing level below
/// the failing one; errors alone when none passed below it).
pub fn slo_capacity(models: &[ModelReport]) -> Option<SloCapacity> {
    if !has_slos(models) {
        return None;
    }
    let target = answer_attainment(models);
    let names = model_names(models);
    fn at(m: &ModelReport, x: Option<f64>) -> Option<&LevelStats> {
        x.and_then(|x| m.levels.iter().find(|l| (l.key.x() - x).abs() < 1e-9))
    }
    fn att(l: Option<&LevelStats>) -> Option<&super::stats::Attainment> {
        l.and_then(|l| l.slo_attainment.as_ref())
    }
    let caps = models
        .iter()
        .zip(names)
        .map(|(m, model)| {
            let (passed, failed) = match &m.capacity {
                Some(c) => (
                    at(m, c.concurrency.map(f64::from).or(c.rate)),
                    at(m, c.failed_at),
                ),
                None => (
                    highest_passing(m, target),
                    m.levels
                        .iter()
                        .find(|l| l.slo_attainment.as_ref().is_some_and(|a| a.share < target)),
                ),
            };
            let clear = match &m.capacity {
                Some(c) => c.clear,
                None => super::capacity::clear(
                    att(passed).and_then(|a| a.interval),
                    att(failed).and_then(|a| a.interval),
                    target,
                ),
            };
            let missed = match &m.capacity {
                Some(c) => c.limited_by.clone(),
                None => att(failed).and_then(super::stats::Attainment::limited_by),
            };
            let base = failed.and_then(|f| {
                m.levels
                    .iter()
                    .filter(|l| l.key.x() < f.key.x() && passes_slo(l, target))
                    .max_by(|a, b| a.key.x().total_cmp(&b.key.x()))
            });
            let limited_by = match (base, failed) {
                (Some(b), Some(f)) => limiter(b, f),
                (None, Some(f)) if missed == Some(CapacityLimit::Errors) => {
                    att(Some(f)).map(|a| Limiter {
                        cause: Cause::Errors,
                        view: View::Client,
                        evidence: format!(
                            "at {}: {} of {} requests failed",
                            f.key.label(),
                            a.failed,
                            a.counted
                        ),
                    })
                }
                _ => None,
            };
            ModelCapacity {
                model,
                level: passed.map(|l| l.key),
                attainment: att(passed).map(|a| a.share),
                attainment_interval: att(passed).and_then(|a| a.interval),
                failed_at: failed.map(|l| l.key),
                failed_attainment: att(failed).map(|a| a.share),
                failed_interval: att(failed).and_then(|a| a.interval),
                missed,
                clear,
                limited_by,
            }
        })
        .collect();
    Some(SloCapacity {
        target_attainment: target,
        models: caps,
    })
}

#[cfg(test)]
mod tests;
