//! The Pareto frontier of tokens/s per user against tokens/s per GPU (pure): what a team choosing
//! between GPUs, models and loads trades. Each level of every series (model, prompt; in `bench
//! report`, of every run combined) is a point: its median decode rate (tokens/s per user, the
//! level's `decode_tokens_per_s.p50`) and its aggregate output tokens/s per GPU (the model's GPU
//! count: see [`super::efficiency::GpuCount`]). A point is on the frontier when no other point is
//! at least as good on both and better on one; equal points are all on it.
//!
//! A level is left out, and the series named, when it has no GPU count (never guessed), no
//! decode rate (no success with two tokens), or figures that are not the server's (a partial
//! level, or one the client could not measure).

use super::report::{ModelReport, model_names};
use super::stats::Load;
use serde::{Deserialize, Serialize};

/// One level as a point of the frontier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrontierPoint {
    /// The series as the report names it (`model`, `target/model`, `model · prompt`).
    pub series: String,
    /// The level's load, written as its label (`8`, `4/s`).
    pub level: Load,
    /// Tokens/s per user: the level's median per-request decode rate.
    pub tokens_per_s_per_user: f64,
    /// Aggregate output tokens/s per GPU.
    pub tokens_per_s_per_gpu: f64,
    /// The GPUs it was divided by.
    pub gpus: u32,
    /// No other point is at least as good on both and better on one.
    pub on_frontier: bool,
    /// A point on the frontier that is at least as good on both (off the frontier only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dominated_by: Option<String>,
}

/// The frontier of a run (or of runs combined): every point, on it or not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Frontier {
    /// Every point, the frontier's by rising tokens/s per user first, then the others.
    pub points: Vec<FrontierPoint>,
    /// The series (or levels) left out, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
}

/// `a` dominates `b`: at least as good on both, better on one.
fn dominates(a: &FrontierPoint, b: &FrontierPoint) -> bool {
    a.tokens_per_s_per_user >= b.tokens_per_s_per_user
        && a.tokens_per_s_per_gpu >= b.tokens_per_s_per_gpu
        && (a.tokens_per_s_per_user > b.tokens_per_s_per_user
            || a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu)
}

/// Marks the points on the frontier and names, for each other one, a frontier point that
/// dominates it (the one nearest in tokens/s per user); puts the frontier first, by tokens/s per
/// user, then the others in their order.
pub fn pareto(mut points: Vec<FrontierPoint>) -> Vec<FrontierPoint> {
    let on: Vec<bool> = points
        .iter()
        .map(|p| !points.iter().any(|q| dominates(q, p)))
        .collect();
    let front: Vec<FrontierPoint> = points
        .iter()
        .zip(&on)
        .filter(|(_, on)| **on)
        .map(|(p, _)| p.clone())
        .collect();
    for (p, on) in points.iter_mut().zip(&on) {
        p.on_frontier = *on;
        p.dominated_by = if *on {
            None
        } else {
            front
                .iter()
                .filter(|q| dominates(q, p))
                .min_by(|a, b| {
                    (a.tokens_per_s_per_user - p.tokens_per_s_per_user)
                        .total_cmp(&(b.tokens_per_s_per_user - p.tokens_per_s_per_user))
                })
                .map(|q| format!("{} @ {}", q.series, q.level))
        };
    }
    let (mut first, rest): (Vec<_>, Vec<_>) = points.into_iter().partition(|p| p.on_frontier);
    first.sort_by(|a, b| {
        a.tokens_per_s_per_user
            .total_cmp(&b.tokens_per_s_per_user)
            .then(b.tokens_per_s_per_gpu.total_cmp(&a.tokens_per_s_per_gpu))
    });
    first.extend(rest);
    first
}

/// The frontier of `models` (named as the report names them); `None` when no series has a GPU
/// count (nothing was asked of it).
pub fn of(models: &[ModelReport]) -> Option<Frontier> {
    if models.iter().all(|m| m.gpus.is_none()) {
        return None;
    }
    let mut points = Vec::new();
    let mut left_out = Vec::new();
    for (m, series) in models.iter().zip(model_names(models)) {
        let Some(g) = m.gpus else {
            if !m.levels.is_empty() {
                left_out.push(format!(
                    "{series}: no GPU count (give its target gpus:, or scrape its DCGM metrics)"
                ));
            }
            continue;
        };
        for l in &m.levels {
            let level = l.key.load();
            let why = if l.partial {
                Some("partial")
            } else if l.client_bound.is_some() {
                Some("client-bound: not the server's figures")
            } else {
                None
            };
            if let Some(why) = why {
                left_out.push(format!("{series} @ {level}: {why}"));
                continue;
            }
            let (Some(user), Some(gpu)) = (
                l.decode_tokens_per_s.as_ref().map(|s| s.p50),
                l.efficiency.output_tokens_per_s_per_gpu,
            ) else {
                left_out.push(format!("{series} @ {level}: no decode rate"));
                continue;
            };
            if !(user.is_finite() && gpu.is_finite()) {
                continue;
            }
            points.push(FrontierPoint {
                series: series.clone(),
                level,
                tokens_per_s_per_user: user,
                tokens_per_s_per_gpu: gpu,
                gpus: g.count,
                on_frontier: false,
                dominated_by: None,
            });
        }
    }
    Some(Frontier {
        points: pareto(points),
        left_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(series: &str, level: &str, user: f64, gpu: f64) -> FrontierPoint {
        FrontierPoint {
            series: series.into(),
            level: level.parse().unwrap(),
            tokens_per_s_per_user: user,
            tokens_per_s_per_gpu: gpu,
            gpus: 1,
            on_frontier: false,
            dominated_by: None,
        }
    }

    fn names(v: &[FrontierPoint], on: bool) -> Vec<String> {
        v.iter()
            .filter(|p| p.on_frontier == on)
            .map(|p| format!("{}@{}", p.series, p.level))
            .collect()
    }

    #[test]
    fn dominated_points_are_off_and_named_ties_stay_on() {
        let got = pareto(vec![
            p("a", "1", 50.0, 100.0),
            p("a", "8", 30.0, 400.0),
            // Worse than a@8 on both.
            p("b", "8", 25.0, 300.0),
            // Equal to a@1: a tie, both on it.
            p("b", "1", 50.0, 100.0),
            // Equal per user to a@1 but lower per GPU: dominated.
            p("c", "1", 50.0, 90.0),
            p("c", "16", 10.0, 500.0),
        ]);
        assert_eq!(names(&got, true), ["c@16", "a@8", "a@1", "b@1"]);
        assert_eq!(names(&got, false), ["b@8", "c@1"]);
        let b8 = got
            .iter()
            .find(|x| x.series == "b" && x.level == Load::Concurrency(8))
            .unwrap();
        assert_eq!(b8.dominated_by.as_deref(), Some("a @ 8"));
        let c1 = got
            .iter()
            .find(|x| x.series == "c" && x.level == Load::Concurrency(1))
            .unwrap();
        assert_eq!(c1.dominated_by.as_deref(), Some("a @ 1"));
        assert_eq!(pareto(Vec::new()), Vec::new());
    }

    #[test]
    fn a_run_without_gpu_counts_has_none_and_a_series_without_one_is_named() {
        let mut r = crate::bench::report::tests::synthetic();
        assert_eq!(of(&r.models), None);
        r.models[0].gpus = Some(crate::bench::efficiency::GpuCount {
            count: 2,
            source: crate::bench::efficiency::GpuSource::Config,
        });
        super::super::efficiency::derive(&mut r.models);
        let f = of(&r.models).unwrap();
        let n = r.models[0].levels.len();
        assert_eq!(f.points.len(), n, "{f:?}");
        assert!(f.points.iter().all(|x| x.series == r.models[0].model));
        assert!(f.points.iter().any(|x| x.on_frontier));
        assert_eq!(
            f.left_out,
            [format!(
                "{}: no GPU count (give its target gpus:, or scrape its DCGM metrics)",
                r.models[1].model
            )]
        );
    }
}
