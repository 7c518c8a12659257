//! Judging results (pure): the knee of a sweep, selection by hard limits and a weighted score,
//! and regressions against a baseline run.

use super::criteria::{Base, Criteria, KneeRule, Metric};
use super::report::{
    Comparison, Knee, ModelReport, Ranked, Regression, Rejected, Selection, model_names,
};
use super::stats::LevelStats;
use std::collections::BTreeMap;

/// The server's mean requests waiting from which a growing queue marks a knee.
pub const KNEE_WAITING_MIN: f64 = 1.0;

/// The first level (after the first) where aggregate output tokens/s grew by less than
/// `rule.tps_growth` while TTFT p95 grew by more than `rule.ttft_growth`, relative to the level
/// before it, or, with server metrics, while the server's requests waiting (mean) grew to at
/// least [`KNEE_WAITING_MIN`]. Levels without TTFT samples or with no throughput before them are
/// skipped.
pub fn find_knee(levels: &[LevelStats], rule: &KneeRule) -> Option<Knee> {
    levels.windows(2).enumerate().find_map(|(i, w)| {
        let (prev, cur) = (&w[0], &w[1]);
        let (tp, tc) = (prev.ttft_s.as_ref()?.p95, cur.ttft_s.as_ref()?.p95);
        if prev.output_tokens_per_s <= 0.0 || tp <= 0.0 {
            return None;
        }
        let g_tps = cur.output_tokens_per_s / prev.output_tokens_per_s - 1.0;
        let g_ttft = tc / tp - 1.0;
        let waiting = |l: &LevelStats| l.server.as_ref()?.mean("requests_waiting");
        let queued = match (waiting(prev), waiting(cur)) {
            (Some(a), Some(b)) if b > a && b >= KNEE_WAITING_MIN => Some([a, b]),
            _ => None,
        };
        let latency_up = g_ttft > rule.ttft_growth;
        (g_tps < rule.tps_growth && (latency_up || queued.is_some())).then_some(Knee {
            index: i + 1,
            level: cur.key,
            agg_tps_growth: g_tps,
            ttft_p95_growth: g_ttft,
            requests_waiting: if latency_up { None } else { queued },
        })
    })
}

/// How far apart (max / min − 1) models' mean input or output lengths may be before a
/// comparison says they differ.
pub const LENGTH_TOLERANCE: f64 = 0.05;

/// The sentence saying that the models' achieved lengths differ by more than
/// [`LENGTH_TOLERANCE`], if they do (models without a length are left out).
pub fn length_mismatch(models: &[ModelReport]) -> Option<String> {
    let names = model_names(models);
    let mut parts = Vec::new();
    for (what, get) in [
        (
            "input",
            (|m: &ModelReport| m.input_tokens_mean) as fn(&ModelReport) -> Option<f64>,
        ),
        ("output", |m: &ModelReport| m.output_tokens_mean),
    ] {
        let vals: Vec<(&str, f64)> = models
            .iter()
            .zip(&names)
            .filter_map(|(m, n)| get(m).map(|v| (n.as_str(), v)))
            .collect();
        let lo = vals.iter().map(|v| v.1).fold(f64::INFINITY, f64::min);
        let hi = vals.iter().map(|v| v.1).fold(0.0, f64::max);
        if vals.len() >= 2 && (lo <= 0.0 || hi > lo * (1.0 + LENGTH_TOLERANCE)) {
            let each: Vec<String> = vals.iter().map(|(n, v)| format!("{n} {v:.1}")).collect();
            parts.push(format!("{what} tokens {}", each.join(", ")));
        }
    }
    (!parts.is_empty()).then(|| {
        format!(
            "the models' achieved lengths differ by more than {:.0}% ({}): the ranking compares different work",
            LENGTH_TOLERANCE * 100.0,
            parts.join("; ")
        )
    })
}

/// Normalizes one metric's value among the eligible models' values (see `docs/bench.md`):
/// `error_rate` → `1 − v`; other lower-is-better metrics → `best / v`; higher-is-better →
/// `v / best`. A missing value scores 0.
fn normalize(metric: &Metric, v: Option<f64>, all: &[Option<f64>]) -> f64 {
    let Some(v) = v else { return 0.0 };
    let present = all.iter().flatten().copied();
    let n = if metric.base == Base::ErrorRate {
        1.0 - v
    } else if metric.base.lower_is_better() {
        let best = present.fold(f64::INFINITY, f64::min);
        if v <= 0.0 { 1.0 } else { best / v }
    } else {
        let best = present.fold(0.0, f64::max);
        if best <= 0.0 { 1.0 } else { v / best }
    };
    n.clamp(0.0, 1.0)
}

/// The level a model is judged at: the one whose x (concurrency, or rate) is `at`, else its last.
fn level_at(m: &ModelReport, at: Option<f64>) -> Option<&LevelStats> {
    match at {
        Some(x) => m.levels.iter().find(|l| (l.key.x() - x).abs() < 1e-9),
        None => m.levels.last(),
    }
}

/// The highest level of `m`'s sweep at which it meets every limit of `c` (with a success).
fn passes_at(m: &ModelReport, c: &Criteria) -> Option<String> {
    m.levels
        .iter()
        .filter(|l| l.successes > 0 && c.limits.iter().all(|lim| lim.violation(l).is_none()))
        .max_by(|a, b| a.key.x().total_cmp(&b.key.x()))
        .map(|l| l.key.label())
}

/// Applies the hard limits at the selection level, then ranks the remaining models by weighted
/// score, best first (ties by name). A rejected model says at which level it still passes.
pub fn select(models: &[ModelReport], c: &Criteria) -> Selection {
    let weights = c.effective_weights();
    let mut rejected = Vec::new();
    let mut eligible: Vec<(&str, &LevelStats)> = Vec::new();
    let mut label = c.select_at.map(crate::units::trim_float);
    let names = model_names(models);
    for (m, name) in models.iter().zip(&names) {
        let Some(l) = level_at(m, c.select_at) else {
            rejected.push(Rejected {
                model: name.clone(),
                reasons: vec![format!(
                    "no level at {}",
                    label.clone().unwrap_or_else(|| "the end".into())
                )],
                passes_at: passes_at(m, c),
            });
            continue;
        };
        label.get_or_insert_with(|| l.key.label());
        let mut reasons: Vec<String> = c.limits.iter().filter_map(|lim| lim.violation(l)).collect();
        if l.successes == 0 {
            // Nothing to rank it by: every value of the level is missing.
            reasons.insert(
                0,
                format!(
                    "no request succeeded at {} ({} sent)",
                    l.key.label(),
                    l.requests
                ),
            );
        }
        if reasons.is_empty() {
            eligible.push((name, l));
        } else {
            rejected.push(Rejected {
                model: name.clone(),
                reasons,
                passes_at: passes_at(m, c),
            });
        }
    }
    let columns: Vec<Vec<Option<f64>>> = weights
        .iter()
        .map(|(m, _)| eligible.iter().map(|(_, l)| m.value(l)).collect())
        .collect();
    let total_w: f64 = weights.iter().map(|(_, w)| w).sum();
    let mut ranked: Vec<Ranked> = eligible
        .iter()
        .enumerate()
        .map(|(i, (model, _))| {
            let mut values = BTreeMap::new();
            let mut normalized = BTreeMap::new();
            let mut sum = 0.0;
            for ((metric, w), col) in weights.iter().zip(&columns) {
                let n = normalize(metric, col[i], col);
                sum += w * n;
                values.insert(metric.to_string(), col[i]);
                normalized.insert(metric.to_string(), n);
            }
            Ranked {
                rank: 0,
                model: (*model).to_owned(),
                score: if total_w > 0.0 { sum / total_w } else { 0.0 },
                values,
                normalized,
            }
        })
        .collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.model.cmp(&b.model)));
    for (i, r) in ranked.iter_mut().enumerate() {
        r.rank = i + 1;
    }
    Selection {
        level: label.unwrap_or_default(),
        limits: c.limits.iter().map(ToString::to_string).collect(),
        weights: weights.iter().map(|(m, w)| (m.to_string(), *w)).collect(),
        ranked,
        rejected,
        length_mismatch: length_mismatch(models),
    }
}

/// The metrics compared with a baseline (costs only where both runs have a price).
pub const COMPARED: [&str; 12] = [
    "ttft_p50",
    "ttft_p95",
    "tpot_p50",
    "tpot_p95",
    "e2e_p95",
    "tps_p50",
    "agg_tps",
    "rps",
    "goodput",
    "error_rate",
    "cost_per_request",
    "cost_per_mtok",
];

/// Compares every (model, level) of `current` that `baseline` also has: a lower-is-better metric
/// regressed when `current > baseline × (1 + tolerance)`, a higher-is-better one when
/// `current < baseline × (1 − tolerance)`, the error rate when it rose by more than
/// `tolerance_error_rate` (absolute). Metrics missing on either side are not compared.
pub fn compare(
    current: &[ModelReport],
    baseline: &[ModelReport],
    c: &Criteria,
    baseline_name: &str,
) -> Comparison {
    let metrics: Vec<Metric> = COMPARED.iter().filter_map(|m| m.parse().ok()).collect();
    let mut out = Comparison {
        baseline: baseline_name.to_owned(),
        tolerance: c.tolerance,
        tolerance_error_rate: c.tolerance_error_rate,
        compared: 0,
        regressions: Vec::new(),
        not_in_baseline: Vec::new(),
        values: Vec::new(),
    };
    let names = model_names(current);
    for (m, name) in current.iter().zip(&names) {
        for l in &m.levels {
            // A baseline entry of an older version names no target: the model alone matches.
            let Some(b) = baseline
                .iter()
                .filter(|bm| {
                    bm.model == m.model
                        && (bm.target.is_none() || m.target.is_none() || bm.target == m.target)
                })
                .flat_map(|bm| bm.levels.iter())
                .find(|bl| bl.key.same(&l.key))
            else {
                out.not_in_baseline
                    .push(format!("{name} @ {}", l.key.label()));
                continue;
            };
            for metric in &metrics {
                let (Some(cur), Some(old)) = (metric.value(l), metric.value(b)) else {
                    continue;
                };
                out.compared += 1;
                let (worse, change) = if metric.base == Base::ErrorRate {
                    (cur - old > c.tolerance_error_rate, cur - old)
                } else {
                    let change = if old != 0.0 { cur / old - 1.0 } else { 0.0 };
                    let worse = if metric.base.lower_is_better() {
                        cur > old * (1.0 + c.tolerance)
                    } else {
                        cur < old * (1.0 - c.tolerance)
                    };
                    (worse, change)
                };
                let value = Regression {
                    model: name.clone(),
                    level: l.key.label(),
                    metric: metric.to_string(),
                    baseline: old,
                    current: cur,
                    change,
                };
                if worse {
                    out.regressions.push(value.clone());
                }
                out.values.push(value);
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bench::stats::Summary;

    pub(crate) fn level(c: u32, agg_tps: f64, ttft_p95: f64, err: f64) -> LevelStats {
        let s = |v: f64| Summary {
            n: 10,
            mean: v,
            min: v,
            p50: v,
            p90: v,
            p95: v,
            p99: v,
            max: v,
            p50_ci: None,
            p95_ci: None,
            p99_ci: None,
        };
        LevelStats {
            key: crate::bench::stats::LevelKey {
                concurrency: c,
                rate: None,
            },
            requests: 100,
            successes: 100 - (err * 100.0) as u64,
            errors: BTreeMap::new(),
            error_examples: BTreeMap::new(),
            error_rate: err,
            ttft_s: Some(s(ttft_p95)),
            ttfo_s: Some(s(ttft_p95)),
            tpot_s: Some(s(0.02)),
            e2e_s: Some(s(1.0)),
            decode_tokens_per_s: Some(s(50.0)),
            output_tokens: 1000,
            wall_s: 10.0,
            output_tokens_per_s: agg_tps,
            requests_per_s: 10.0,
            goodput_rps: None,
            goodput_tokens_per_s: None,
            slo_met: None,
            slo_attainment: None,
            cpu_wait_s: None,
            client_bound: None,
            repeats: Vec::new(),
            lag_s: Some(s(0.0001)),
            ramp_s: None,
            loop_lag_s: None,
            read_lag_s: None,
            unstamped: 0,
            capped: 0,
            started_unix_s: None,
            start_offset_s: None,
            cost_per_request: None,
            cost_per_mtok: None,
            lengths: Default::default(),
            samples: None,
            cross_check: None,
            server: None,
            notes: Vec::new(),
        }
    }

    fn model(name: &str, levels: Vec<LevelStats>) -> ModelReport {
        ModelReport {
            model: name.into(),
            target: None,
            price: None,
            input_tokens_mean: None,
            output_tokens_mean: None,
            levels,
            knee: None,
            capacity: None,
            prompt: None,
            calibration: None,
        }
    }

    #[test]
    fn knee_is_where_throughput_flattens_and_ttft_jumps() {
        let levels = vec![
            level(2, 100.0, 0.2, 0.0),
            level(4, 200.0, 0.2, 0.0),
            level(8, 400.0, 0.21, 0.0),
            level(16, 405.0, 0.9, 0.0),
            level(32, 410.0, 2.0, 0.0),
        ];
        let k = find_knee(&levels, &KneeRule::default()).unwrap();
        assert_eq!((k.index, k.level.concurrency), (3, 16));
        // Thresholds are configurable: demanding a 5x TTFT jump finds none.
        let strict = KneeRule {
            tps_growth: 0.1,
            ttft_growth: 4.0,
        };
        assert!(find_knee(&levels, &strict).is_none());
        assert!(find_knee(&levels[..1], &KneeRule::default()).is_none());
    }

    #[test]
    fn the_servers_queue_marks_a_knee_ttft_does_not() {
        use crate::servermetrics::level::{ServerLevel, SignalStats};
        let waiting = |mut l: LevelStats, w: f64| {
            let mut s = ServerLevel::default();
            s.signals.insert(
                "requests_waiting".into(),
                SignalStats {
                    mean: Some(w),
                    max: Some(w),
                    ..SignalStats::default()
                },
            );
            l.server = Some(s);
            l
        };
        // TTFT p95 grows 20% only, tokens/s 5%: no knee from the client alone.
        let levels = vec![level(2, 100.0, 0.5, 0.0), level(4, 105.0, 0.6, 0.0)];
        assert!(find_knee(&levels, &KneeRule::default()).is_none());
        // The queue grows 0 → 2: the knee, marked by the queue.
        let queued = vec![
            waiting(levels[0].clone(), 0.0),
            waiting(levels[1].clone(), 2.0),
        ];
        let k = find_knee(&queued, &KneeRule::default()).expect("knee");
        assert_eq!((k.index, k.requests_waiting), (1, Some([0.0, 2.0])));
        // Below one waiting request, or not growing: no knee.
        let low = vec![
            waiting(levels[0].clone(), 0.0),
            waiting(levels[1].clone(), 1.0 - 1e-9),
        ];
        assert!(find_knee(&low, &KneeRule::default()).is_none());
        let flat = vec![
            waiting(levels[0].clone(), 3.0),
            waiting(levels[1].clone(), 3.0),
        ];
        assert!(find_knee(&flat, &KneeRule::default()).is_none());
    }

    #[test]
    fn selection_rejects_and_ranks() {
        let models = vec![
            model("fast", vec![level(8, 400.0, 0.5, 0.0)]),
            model("slow", vec![level(8, 200.0, 1.0, 0.0)]),
            model("flaky", vec![level(8, 500.0, 0.4, 0.05)]),
        ];
        let c = Criteria {
            limits: vec!["error_rate<1%".parse().unwrap()],
            weights: crate::bench::criteria::parse_weights("ttft=0.5,agg_tps=0.5").unwrap(),
            ..Criteria::default()
        };
        let s = select(&models, &c);
        assert_eq!(s.level, "8");
        assert_eq!(s.rejected.len(), 1);
        assert_eq!(s.rejected[0].model, "flaky");
        assert!(s.rejected[0].reasons[0].contains("error_rate = 5.00%"));
        assert_eq!(s.ranked[0].model, "fast");
        assert_eq!(s.ranked[0].score, 1.0);
        // slow: ttft 0.5/1.0 = 0.5, agg 200/400 = 0.5 → 0.5.
        assert_eq!(s.ranked[1].score, 0.5);
        assert_eq!(s.ranked[1].rank, 2);
        // A model that had no success at the level is not ranked (every value missing).
        let mut dead = level(8, 0.0, 1.0, 1.0);
        dead.successes = 0;
        let models = vec![
            model("fast", vec![level(8, 400.0, 0.5, 0.0)]),
            model("dead", vec![dead]),
        ];
        let s = select(&models, &Criteria::default());
        assert_eq!(s.ranked.len(), 1);
        assert_eq!(s.rejected[0].model, "dead");
        assert_eq!(
            s.rejected[0].reasons[0],
            "no request succeeded at 8 (100 sent)"
        );
    }

    #[test]
    fn a_rejected_model_says_where_it_still_passes() {
        let m = model(
            "a",
            vec![
                level(2, 100.0, 0.2, 0.0),
                level(4, 150.0, 0.4, 0.0),
                level(8, 160.0, 0.8, 0.0),
            ],
        );
        let c = Criteria {
            limits: vec!["ttft_p95<500ms".parse().unwrap()],
            ..Criteria::default()
        };
        let s = select(std::slice::from_ref(&m), &c);
        assert!(s.ranked.is_empty());
        assert_eq!(s.rejected[0].passes_at.as_deref(), Some("4"));
        let strict = Criteria {
            limits: vec!["ttft_p95<100ms".parse().unwrap()],
            ..Criteria::default()
        };
        assert_eq!(select(&[m], &strict).rejected[0].passes_at, None);
    }

    #[test]
    fn length_mismatch_beyond_five_percent() {
        let with = |name: &str, i: Option<f64>, o: Option<f64>| ModelReport {
            input_tokens_mean: i,
            output_tokens_mean: o,
            ..model(name, vec![])
        };
        // 5% apart exactly is still the same work; more is not.
        let same = [
            with("a", Some(1000.0), Some(100.0)),
            with("b", Some(1050.0), Some(96.0)),
        ];
        assert_eq!(length_mismatch(&same), None);
        let apart = [
            with("a", Some(1000.0), Some(100.0)),
            with("b", Some(1051.0), Some(100.0)),
        ];
        let m = length_mismatch(&apart).unwrap();
        assert!(
            m.contains("input tokens a 1000.0, b 1051.0") && !m.contains("output"),
            "{m}"
        );
        let out = [
            with("a", None, Some(64.0)),
            with("b", None, Some(128.0)),
            with("c", None, None),
        ];
        let m = length_mismatch(&out).unwrap();
        assert!(
            m.contains("output tokens a 64.0, b 128.0") && !m.contains("input"),
            "{m}"
        );
        // One model with a length: nothing to compare; a zero length differs from any other.
        assert_eq!(
            length_mismatch(&[with("a", Some(1.0), None), with("b", None, None)]),
            None
        );
        assert!(
            length_mismatch(&[with("a", None, Some(0.0)), with("b", None, Some(1.0))]).is_some()
        );
        let s = select(&apart, &Criteria::default());
        assert_eq!(s.length_mismatch, length_mismatch(&apart));
    }

    #[test]
    fn cost_limits_reject_and_cost_weights_rank_cheaper_first() {
        let priced = |name: &str, per_req: f64, per_mtok: f64| {
            let mut l = level(8, 400.0, 0.5, 0.0);
            (l.cost_per_request, l.cost_per_mtok) = (Some(per_req), Some(per_mtok));
            model(name, vec![l])
        };
        let models = vec![
            priced("cheap", 0.002, 20.0),
            priced("dear", 0.02, 200.0),
            model("unpriced", vec![level(8, 400.0, 0.5, 0.0)]),
        ];
        let c = Criteria {
            limits: vec!["cost_per_request<=0.01".parse().unwrap()],
            weights: crate::bench::criteria::parse_weights("cost_per_mtok=1").unwrap(),
            ..Criteria::default()
        };
        let s = select(&models, &c);
        let rejected: Vec<(&str, &str)> = s
            .rejected
            .iter()
            .map(|r| (r.model.as_str(), r.reasons[0].as_str()))
            .collect();
        assert_eq!(
            rejected,
            [
                (
                    "dear",
                    "cost_per_request = 0.02 (limit cost_per_request <= 0.01)"
                ),
                (
                    "unpriced",
                    "cost_per_request not measured (limit cost_per_request <= 0.01)"
                )
            ]
        );
        assert_eq!((s.ranked.len(), s.ranked[0].model.as_str()), (1, "cheap"));
        // Weighted without the limit: cost 20 scores 1, cost 200 scores 20/200, none scores 0.
        let c = Criteria {
            weights: crate::bench::criteria::parse_weights("cost_per_mtok=1").unwrap(),
            ..Criteria::default()
        };
        let s = select(&models, &c);
        let order: Vec<(&str, f64)> = s
            .ranked
            .iter()
            .map(|r| (r.model.as_str(), r.score))
            .collect();
        assert_eq!(order, [("cheap", 1.0), ("dear", 0.1), ("unpriced", 0.0)]);
    }

    #[test]
    fn selection_at_a_missing_level_rejects() {
        let models = vec![model("a", vec![level(8, 400.0, 0.5, 0.0)])];
        let c = Criteria {
            select_at: Some(16.0),
            ..Criteria::default()
        };
        let s = select(&models, &c);
        assert_eq!(s.rejected[0].reasons, vec!["no level at 16".to_owned()]);
    }

    #[test]
    fn regressions_beyond_tolerance() {
        let base = vec![model("a", vec![level(8, 400.0, 0.5, 0.0)])];
        let same = vec![model("a", vec![level(8, 380.0, 0.54, 0.005)])];
        let c = Criteria::default();
        let r = compare(&same, &base, &c, "old.json");
        assert!(r.regressions.is_empty(), "{:?}", r.regressions);
        assert_eq!(r.compared, 9); // goodput absent on both sides
        let worse = vec![model(
            "a",
            vec![level(8, 300.0, 0.6, 0.03), level(16, 1.0, 1.0, 0.0)],
        )];
        let r = compare(&worse, &base, &c, "old.json");
        let names: Vec<&str> = r.regressions.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(
            names,
            vec!["ttft_p50", "ttft_p95", "agg_tps", "error_rate"],
            "{r:?}"
        );
        assert_eq!(r.not_in_baseline, vec!["a @ 16".to_owned()]);
        // Costs are compared where both runs have them: 12% dearer regresses.
        let priced = |c: f64| {
            let mut l = level(8, 400.0, 0.5, 0.0);
            (l.cost_per_request, l.cost_per_mtok) = (Some(c), Some(c * 1e4));
            vec![model("a", vec![l])]
        };
        let r = compare(&priced(0.0112), &priced(0.01), &c, "old.json");
        assert_eq!(r.compared, 11);
        let names: Vec<&str> = r.regressions.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(names, ["cost_per_request", "cost_per_mtok"]);
        assert!(
            compare(&priced(0.0105), &priced(0.01), &c, "o")
                .regressions
                .is_empty()
        );
    }
}
