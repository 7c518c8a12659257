//! One model's trend across stored runs (pure): at one level, run after run, its TTFT p95, TPOT
//! p50, aggregate output tokens/s, error rate and capacity, each with its change from the run
//! before that has it.
//!
//! Runs are compared at one load: the level asked for, or else the highest of the newest run.
//! A run without that level shows no figures there (its capacity still shows), so a trend never
//! sets a figure at one load beside one at another.

use super::store::ModelRun;
use serde::Serialize;

/// One model's figures run after run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    /// The model as asked (`model` or `target/model`).
    pub model: String,
    /// The level compared (`8`, `4/s`); `None` when no run has a level.
    pub level: Option<String>,
    /// The runs, oldest first.
    pub points: Vec<Point>,
}

/// One run in a trend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// The run's id in the store.
    pub run: i64,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// The tokenprobe that ran it.
    pub version: String,
    /// Stopped by a signal before its end.
    pub interrupted: bool,
    /// The run has the compared level.
    pub has_level: bool,
    /// Measured requests at the level.
    pub requests: Option<u64>,
    /// TTFT p95 at the level (s).
    pub ttft_p95_s: Option<f64>,
    /// TPOT p50 at the level (s).
    pub tpot_p50_s: Option<f64>,
    /// Aggregate output tokens/s at the level.
    pub output_tokens_per_s: Option<f64>,
    /// Error rate at the level.
    pub error_rate: Option<f64>,
    /// The level was client-bound (its figures are the client's starvation's).
    pub client_bound: bool,
    /// Capacity within the SLOs, when the run searched it.
    pub capacity: Option<f64>,
    /// Relative change of each figure from the last earlier run that has it.
    pub change: Change,
    /// What changed in what served it since the last earlier run that recorded it ("vLLM
    /// 0.10.1 → 0.11.0", "GPUs 8 → 4"): read beside its figures' change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
}

/// Relative changes (`0.25` = 25% higher) from the last earlier run with the figure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Change {
    /// TTFT p95.
    pub ttft_p95: Option<f64>,
    /// TPOT p50.
    pub tpot_p50: Option<f64>,
    /// Output tokens/s.
    pub output_tokens_per_s: Option<f64>,
    /// Capacity.
    pub capacity: Option<f64>,
}

/// The trend of `model` over its stored runs (`runs` newest first, as the store lists them) at
/// `level`, or at the highest level of the newest run.
pub fn trend(model: &str, runs: &[ModelRun], level: Option<&str>) -> Trend {
    let level = level.map(str::to_owned).or_else(|| {
        runs.iter()
            .find(|r| !r.run.interrupted && !r.levels.is_empty())
            .or_else(|| runs.first())
            .and_then(|r| r.levels.last())
            .map(|l| l.level.clone())
    });
    let mut points: Vec<Point> = runs
        .iter()
        .rev()
        .map(|r| {
            let at = level
                .as_deref()
                .and_then(|name| r.levels.iter().find(|l| l.level == name));
            Point {
                run: r.run.id,
                started_at: r.run.started_at.clone(),
                version: r.run.version.clone(),
                interrupted: r.run.interrupted,
                has_level: at.is_some(),
                requests: at.map(|l| l.requests),
                ttft_p95_s: at.and_then(|l| l.ttft_p95_s),
                tpot_p50_s: at.and_then(|l| l.tpot_p50_s),
                output_tokens_per_s: at.map(|l| l.output_tokens_per_s),
                error_rate: at.map(|l| l.error_rate),
                client_bound: at.is_some_and(|l| l.client_bound),
                capacity: r.capacity,
                change: Change::default(),
                changed: Vec::new(),
            }
        })
        .collect();
    // What served each run against the last earlier one that recorded it.
    let mut before: Option<&crate::bench::provenance::Provenance> = None;
    for (p, r) in points.iter_mut().zip(runs.iter().rev()) {
        if let Some(now) = &r.provenance {
            if let Some(b) = before {
                p.changed = crate::bench::provenance::changes(b, now);
            }
            before = Some(now);
        }
    }
    let mut last = Change::default();
    for p in &mut points {
        let step = |now: Option<f64>, before: &mut Option<f64>| {
            let change = match (now, *before) {
                (Some(n), Some(b)) if b != 0.0 && n.is_finite() && b.is_finite() => {
                    Some(n / b - 1.0)
                }
                _ => None,
            };
            if now.is_some() {
                *before = now;
            }
            change
        };
        p.change = Change {
            ttft_p95: step(p.ttft_p95_s, &mut last.ttft_p95),
            tpot_p50: step(p.tpot_p50_s, &mut last.tpot_p50),
            output_tokens_per_s: step(p.output_tokens_per_s, &mut last.output_tokens_per_s),
            capacity: step(p.capacity, &mut last.capacity),
        };
    }
    Trend {
        model: model.to_owned(),
        level,
        points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::store::{StoredLevel, StoredRun};

    fn run(id: i64, levels: &[(&str, f64, f64)], capacity: Option<f64>) -> ModelRun {
        ModelRun {
            run: StoredRun {
                id,
                started_at: format!("2026-12-0{id}T00:00:00Z"),
                version: "0.1.0".into(),
                run_id: None,
                target: "local".into(),
                prompt: "p".into(),
                open_loop: false,
                models: vec!["m".into()],
                levels: levels.iter().map(|l| l.0.to_owned()).collect(),
                interrupted: false,
                baseline: None,
                regressions: None,
                command: None,
                changed: Vec::new(),
            },
            target: "local".into(),
            prompt: "p".into(),
            capacity,
            levels: levels
                .iter()
                .map(|&(level, ttft, tps)| StoredLevel {
                    level: level.into(),
                    x: level.parse().unwrap(),
                    requests: 10,
                    error_rate: 0.0,
                    ttft_p50_s: Some(ttft / 2.0),
                    ttft_p95_s: Some(ttft),
                    tpot_p50_s: Some(0.01),
                    e2e_p95_s: None,
                    output_tokens_per_s: tps,
                    slo_attainment: None,
                    client_bound: false,
                })
                .collect(),
            provenance: None,
        }
    }

    #[test]
    fn runs_are_compared_at_the_newest_runs_highest_level_oldest_first() {
        // Newest first, as the store lists them.
        let runs = vec![
            run(3, &[("1", 0.2, 50.0), ("4", 0.5, 150.0)], Some(6.0)),
            run(2, &[("1", 0.1, 50.0)], Some(8.0)),
            run(1, &[("1", 0.1, 40.0), ("4", 0.4, 200.0)], None),
        ];
        let t = trend("m", &runs, None);
        assert_eq!(t.level.as_deref(), Some("4"));
        let ids: Vec<i64> = t.points.iter().map(|p| p.run).collect();
        assert_eq!(ids, [1, 2, 3]);
        // Run 2 has no level 4: no figures, its capacity shown, and run 3 is compared with run 1.
        assert!(!t.points[1].has_level);
        assert_eq!(t.points[1].ttft_p95_s, None);
        assert_eq!(t.points[1].capacity, Some(8.0));
        let c = t.points[2].change;
        assert!((c.ttft_p95.unwrap() - 0.25).abs() < 1e-12);
        assert!((c.output_tokens_per_s.unwrap() + 0.25).abs() < 1e-12);
        assert!((c.capacity.unwrap() + 0.25).abs() < 1e-12);
        assert_eq!(t.points[0].change, Change::default());
    }

    /// What served each run is compared with the last earlier run that recorded it.
    #[test]
    fn what_changed_beside_each_runs_figures() {
        use crate::bench::provenance::{Provenance, ServerInfo, ServerKind};
        let served = |v: &str| {
            Some(Provenance {
                tokenprobe: "0.1.0".into(),
                servers: vec![ServerInfo {
                    target: "local".into(),
                    server: Some(ServerKind::Vllm),
                    version: Some(v.into()),
                    ..ServerInfo::default()
                }],
                ..Provenance::default()
            })
        };
        let mut r3 = run(3, &[("1", 0.2, 50.0)], None);
        r3.provenance = served("0.11.0");
        let r2 = run(2, &[("1", 0.1, 50.0)], None);
        let mut r1 = run(1, &[("1", 0.1, 50.0)], None);
        r1.provenance = served("0.10.1");
        let t = trend("m", &[r3, r2, r1], None);
        assert!(t.points[0].changed.is_empty() && t.points[1].changed.is_empty());
        assert_eq!(t.points[2].changed, ["vLLM 0.10.1 → 0.11.0"]);
    }

    #[test]
    fn a_level_asked_for_is_the_one_compared() {
        let runs = vec![
            run(2, &[("1", 0.3, 50.0), ("4", 0.5, 150.0)], None),
            run(1, &[("1", 0.1, 40.0), ("4", 0.4, 200.0)], None),
        ];
        let t = trend("m", &runs, Some("1"));
        assert_eq!(t.level.as_deref(), Some("1"));
        assert_eq!(t.points[1].ttft_p95_s, Some(0.3));
        assert!((t.points[1].change.ttft_p95.unwrap() - 2.0).abs() < 1e-12);
        let none = trend("m", &runs, Some("9"));
        assert!(none.points.iter().all(|p| !p.has_level));
        assert!(trend("m", &[], None).level.is_none());
    }
}
