//! The regression gate (pure): a run compared with its baseline, value by value, and a verdict on
//! each that the exit code can rest on.
//!
//! A value regresses only when it is worse than the tolerance allows **and** the two runs'
//! samples say so: a one-sided test of "worse by more than the tolerance" gives its p-value, and
//! Holm's step-down adjustment over every value judged keeps the chance of any false alarm in the
//! whole comparison below `1 − confidence` (5% by default), for runs that differ by no more than
//! the tolerance. Worse beyond the tolerance without that is "inconclusive", shown with its
//! interval; a value that cannot be tested is "not judged", with why. The tests
//! ([`super::significance`]):
//!
//! - per-request percentiles (TTFT, TPOT, E2E, decode tokens/s): the pooled-quantile test with
//!   Fisher's exact p-value, on the distributions each level keeps, of this run against the
//!   baseline scaled by `1 ± tolerance`; the interval of the ratio of the two percentiles
//!   inverts the same test. Against a baseline of an older version, which keeps no distribution,
//!   the normal approximation from the two runs' distribution-free 95% intervals of that
//!   percentile.
//! - `error_rate`: the two shares of failed requests, their difference beyond the tolerance's
//!   points by inverting Newcombe's interval of it.
//! - `goodput`: the same on the SLO attainment (requests that met every SLO of those counted), the
//!   margin the tolerance's share of the baseline's attainment, when both runs had the same
//!   SLOs.
//! - `agg_tps`, `rps` and the costs are one figure per run, with no samples to tell their noise:
//!   compared and shown, never judged (the per-request E2E and TPOT behind the throughput are).

use super::confidence::min_samples;
use super::criteria::{Base, Criteria, Metric, Stat};
use super::report::{Comparison, ModelReport, Regression, Verdict, model_names};
use super::significance::{
    Distribution, difference_beyond_p, difference_interval, holm, normal_upper, quantile_shift_p,
    ratio_interval,
};
use super::stats::{LevelStats, Summary};

/// The metrics compared with a baseline (costs only where both runs have a price).
pub const COMPARED: [Metric; 13] = [
    Metric::of(Base::Ttft, Stat::P50),
    Metric::of(Base::Ttft, Stat::P95),
    Metric::of(Base::Tpot, Stat::P50),
    Metric::of(Base::Tpot, Stat::P95),
    Metric::of(Base::E2e, Stat::P50),
    Metric::of(Base::E2e, Stat::P95),
    Metric::of(Base::Tps, Stat::P50),
    Metric::level(Base::AggTps),
    Metric::level(Base::Rps),
    Metric::level(Base::Goodput),
    Metric::level(Base::ErrorRate),
    Metric::level(Base::CostPerRequest),
    Metric::level(Base::CostPerMtok),
];

/// Why a whole level is not judged against its baseline, or `None` when it can be: the client
/// could not measure it (`client_bound`) in either run. (A partial level, stopped before its
/// amount, never reaches the gate: [`super::judge`] compares the whole levels of both runs only,
/// [`super::health::whole_levels`].)
pub fn level_not_judged(l: &LevelStats, old: &LevelStats) -> Option<String> {
    if let Some(w) = &l.client_bound {
        return Some(format!("the client could not measure this level ({w})"));
    }
    if let Some(w) = &old.client_bound {
        return Some(format!(
            "the client could not measure the baseline's level ({w})"
        ));
    }
    None
}

/// The two-sided confidence of each value's interval (not adjusted for the many compared).
const INTERVAL: f64 = super::confidence::CONFIDENCE;

/// The standard normal quantile of 97.5%, as [`super::confidence`]'s intervals use.
const Z95: f64 = 1.959_963_984_540_054;

/// A value's test: its one-sided p-value of "worse by more than the tolerance", its interval,
/// and the test's name.
struct Tested {
    p: f64,
    interval: Option<[f64; 2]>,
    test: &'static str,
}

const POOLED_QUANTILE: &str = "pooled-quantile test, Fisher's exact p-value";
const FROM_INTERVALS: &str =
    "normal approximation from the two runs' 95% intervals (the baseline keeps no distribution)";
const SHARES: &str =
    "the difference of the two shares beyond the tolerance, by Newcombe's interval";

/// A run's figure per level with no per-request samples behind it to tell its noise.
const ONE_FIGURE: &str = "one figure per run, no per-request samples to tell its noise (the E2E and TPOT behind it are judged)";
const ONE_COST: &str =
    "one figure per run (a price times token counts), no per-request samples to tell its noise";

/// The `q` of a percentile statistic.
fn quantile_of(stat: Option<Stat>) -> Option<f64> {
    match stat? {
        Stat::P50 => Some(0.5),
        Stat::P90 => Some(0.9),
        Stat::P95 => Some(0.95),
        Stat::P99 => Some(0.99),
        Stat::Mean | Stat::Max => None,
    }
}

/// A level's summary and kept distribution of a per-request metric.
fn per_request(l: &LevelStats, base: Base) -> (Option<&Summary>, Option<&Distribution>) {
    let d = l.distributions.as_ref();
    match base {
        Base::Ttft => (l.ttft_s.as_ref(), d.and_then(|d| d.ttft_s.as_ref())),
        Base::Tpot => (l.tpot_s.as_ref(), d.and_then(|d| d.tpot_s.as_ref())),
        Base::E2e => (l.e2e_s.as_ref(), d.and_then(|d| d.e2e_s.as_ref())),
        Base::Tps => (
            l.decode_tokens_per_s.as_ref(),
            d.and_then(|d| d.decode_tokens_per_s.as_ref()),
        ),
        _ => (None, None),
    }
}

/// The stored 95% interval of percentile `q` of a summary.
fn stored_interval(s: &Summary, q: f64) -> Option<[f64; 2]> {
    if q == 0.5 {
        s.p50_ci
    } else if q == 0.95 {
        s.p95_ci
    } else if q == 0.99 {
        s.p99_ci
    } else {
        None
    }
}

/// Tests a percentile of a per-request metric, `vc` here and `vb` in the baseline: worse is
/// higher (than the baseline's × `1 + tolerance`) for a lower-is-better metric, lower (than its
/// × `1 − tolerance`) for a higher-is-better one.
fn test_percentile(
    m: &Metric,
    cur: &LevelStats,
    old: &LevelStats,
    (vc, vb): (f64, f64),
    tolerance: f64,
) -> Result<Tested, String> {
    let Some(q) = quantile_of(m.stat) else {
        return Err(format!("{m} is not a percentile"));
    };
    let (Some(sc), Some(d_cur)) = per_request(cur, m.base) else {
        return Err("this run keeps no distribution of it".into());
    };
    let (Some(sb), d_old) = per_request(old, m.base) else {
        return Err("the baseline has no values of it".into());
    };
    let stat = m.stat.map_or_else(String::new, |_| {
        m.to_string().rsplit('_').next().unwrap_or("").to_owned()
    });
    let need = min_samples(q);
    if sc.n < need || sb.n < need {
        return Err(format!(
            "too few values for its {stat} ({} here, {} in the baseline; a {stat} needs {need} in each)",
            sc.n, sb.n
        ));
    }
    let higher = m.base.lower_is_better();
    let scale = if higher {
        1.0 + tolerance
    } else {
        1.0 - tolerance
    };
    if let Some(b) = d_old {
        if let Some(why) = b.damaged() {
            return Err(format!(
                "the baseline's distribution of it is damaged: {why}"
            ));
        }
        return Ok(Tested {
            p: quantile_shift_p(d_cur, b, q, scale.max(f64::MIN_POSITIVE), higher),
            interval: ratio_interval(d_cur, b, q, INTERVAL).map(|[lo, hi]| [lo - 1.0, hi - 1.0]),
            test: POOLED_QUANTILE,
        });
    }
    // A baseline of an older version: the two percentiles' own 95% intervals, read as normal
    // ones (a percentile is asymptotically normal), give a standard error each.
    let (Some(ic), Some(ib)) = (stored_interval(sc, q), stored_interval(sb, q)) else {
        return Err(format!(
            "the baseline keeps no distribution of it (a report of an older version) and no interval of its {stat}"
        ));
    };
    let se = |[lo, hi]: [f64; 2]| (hi - lo) / (2.0 * Z95);
    let sd = (se(ic).powi(2) + se(ib).powi(2)).sqrt();
    let diff = vc - vb;
    if !(sd > 0.0 && sd.is_finite() && vb > 0.0) {
        return Err(
            "the baseline keeps no distribution of it and the two intervals have no width".into(),
        );
    }
    let beyond = tolerance * vb;
    let z = if higher {
        (diff - beyond) / sd
    } else {
        (-diff - beyond) / sd
    };
    Ok(Tested {
        p: normal_upper(z),
        interval: Some([(diff - Z95 * sd) / vb, (diff + Z95 * sd) / vb]),
        test: FROM_INTERVALS,
    })
}

/// Failed requests and requests of a level, refused when they do not fit (a hand-edited file).
fn failures(l: &LevelStats) -> Option<(u64, u64)> {
    (l.successes <= l.requests && l.requests > 0).then(|| (l.requests - l.successes, l.requests))
}

/// Tests a value of `metric` at a level against the baseline's.
fn test(
    m: &Metric,
    cur: &LevelStats,
    old: &LevelStats,
    values: (f64, f64),
    c: &Criteria,
    same_slos: bool,
) -> Result<Tested, String> {
    let counts = || "no requests counted (or counts that do not fit)".to_owned();
    match m.base {
        Base::Ttft | Base::Tpot | Base::E2e | Base::Tps => {
            test_percentile(m, cur, old, values, c.tolerance)
        }
        Base::ErrorRate => {
            let (Some((fc, nc)), Some((fb, nb))) = (failures(cur), failures(old)) else {
                return Err(counts());
            };
            Ok(Tested {
                p: difference_beyond_p(fc, nc, fb, nb, c.tolerance_error_rate)
                    .ok_or_else(counts)?,
                interval: difference_interval(fc, nc, fb, nb),
                test: SHARES,
            })
        }
        Base::Goodput => {
            if !same_slos {
                return Err("the baseline was judged by other SLOs".into());
            }
            let (Some(ac), Some(ab)) = (&cur.slo_attainment, &old.slo_attainment) else {
                return Err(
                    "no SLO attainment to test it by (a report of an older version)".into(),
                );
            };
            if ac.met > ac.counted || ab.met > ab.counted || ac.counted == 0 || ab.counted == 0 {
                return Err("SLO attainment counts that do not fit".into());
            }
            // Worse: a share of requests that missed an SLO (or failed) higher by more than the
            // tolerance's share of the baseline's attainment.
            let margin = c.tolerance * ab.met as f64 / ab.counted as f64;
            let p = difference_beyond_p(
                ac.counted - ac.met,
                ac.counted,
                ab.counted - ab.met,
                ab.counted,
                margin,
            )
            .ok_or_else(counts)?;
            Ok(Tested {
                p,
                interval: difference_interval(ac.met, ac.counted, ab.met, ab.counted),
                test: "the difference of the two SLO attainments beyond the tolerance, by Newcombe's interval",
            })
        }
        Base::AggTps | Base::Rps => Err(ONE_FIGURE.into()),
        Base::CostPerRequest | Base::CostPerMtok | Base::GpuCostPerMtok => Err(ONE_COST.into()),
        Base::AggTpsPerGpu | Base::JoulesPerToken => Err(ONE_FIGURE.into()),
        Base::Ttfo | Base::Lag => Err(format!("{m} is not compared")),
    }
}

/// Compares every (model, level) of `current` that `baseline` also has, on [`COMPARED`] (a metric
/// missing on either side is not compared), and gives each value its [`Verdict`]: worse is
/// `current > baseline × (1 + tolerance)` for a lower-is-better metric, `current < baseline ×
/// (1 − tolerance)` for a higher-is-better one, a rise of the error rate by more than
/// `tolerance_error_rate` (absolute); a regression when its test of "worse by more than that" is
/// also significant after Holm's adjustment over every value judged, at the criteria's
/// confidence. `baseline_slo` is the
/// baseline's SLOs as its report lists them (goodput is judged only when they are this run's).
pub fn compare(
    current: &[ModelReport],
    baseline: &[ModelReport],
    baseline_slo: &[String],
    c: &Criteria,
    baseline_name: &str,
) -> Comparison {
    let metrics = COMPARED;
    let slo: Vec<String> = c.slos.iter().map(ToString::to_string).collect();
    let same_slos = slo == baseline_slo;
    let mut out = Comparison {
        baseline: baseline_name.to_owned(),
        tolerance: c.tolerance,
        tolerance_error_rate: c.tolerance_error_rate,
        confidence: Some(c.confidence),
        compared: 0,
        judged: Some(0),
        regressions: Vec::new(),
        not_in_baseline: Vec::new(),
        changed: Vec::new(),
        values: Vec::new(),
    };
    // Whether each value is worse beyond the tolerance.
    let mut worse = Vec::new();
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
            let level_reason = level_not_judged(l, b);
            for metric in &metrics {
                let (Some(cur), Some(old)) = (metric.value(l), metric.value(b)) else {
                    continue;
                };
                out.compared += 1;
                let (is_worse, change) = if metric.base == Base::ErrorRate {
                    (cur - old > c.tolerance_error_rate, cur - old)
                } else {
                    let change = if old != 0.0 { cur / old - 1.0 } else { 0.0 };
                    let is_worse = if metric.base.lower_is_better() {
                        cur > old * (1.0 + c.tolerance)
                    } else {
                        cur < old * (1.0 - c.tolerance)
                    };
                    (is_worse, change)
                };
                let tested = match &level_reason {
                    Some(why) => Err(why.clone()),
                    None => test(metric, l, b, (cur, old), c, same_slos),
                };
                let mut v = Regression {
                    model: name.clone(),
                    level: l.key.load(),
                    metric: *metric,
                    baseline: old,
                    current: cur,
                    change,
                    verdict: Some(Verdict::NotJudged),
                    interval: None,
                    p_value: None,
                    p_holm: None,
                    test: None,
                    not_judged: None,
                };
                match tested {
                    Ok(t) => {
                        v.p_value = Some(t.p);
                        v.interval = t.interval;
                        v.test = Some(t.test.to_owned());
                    }
                    Err(why) => v.not_judged = Some(why),
                }
                worse.push(is_worse);
                out.values.push(v);
            }
        }
    }
    let judged: Vec<usize> = (0..out.values.len())
        .filter(|&i| out.values[i].p_value.is_some())
        .collect();
    let adjusted = holm(
        &judged
            .iter()
            .filter_map(|&i| out.values[i].p_value)
            .collect::<Vec<_>>(),
    );
    for (&i, p) in judged.iter().zip(adjusted) {
        let v = &mut out.values[i];
        v.p_holm = Some(p);
        v.verdict = Some(if !worse[i] {
            Verdict::WithinTolerance
        } else if p <= 1.0 - c.confidence {
            Verdict::Regression
        } else {
            Verdict::Inconclusive
        });
    }
    out.judged = Some(judged.len() as u64);
    out.regressions = out.with(Verdict::Regression).cloned().collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values compared are named as reports have always named them, each the metric its
    /// name reads as.
    #[test]
    fn the_compared_metrics_are_named_as_before() {
        let names = COMPARED.map(|m| m.to_string());
        assert_eq!(
            names,
            [
                "ttft_p50",
                "ttft_p95",
                "tpot_p50",
                "tpot_p95",
                "e2e_p50",
                "e2e_p95",
                "tps_p50",
                "agg_tps",
                "rps",
                "goodput",
                "error_rate",
                "cost_per_request",
                "cost_per_mtok",
            ]
        );
        for (m, name) in COMPARED.iter().zip(&names) {
            assert_eq!(name.parse::<Metric>().as_ref(), Ok(m));
        }
    }
    use crate::bench::report::tests::samples;
    use crate::bench::select::tests::{level, model};
    use crate::bench::stats::LevelKey;

    /// A level of `n` requests with TTFT spread evenly over `[ttft, 2 ttft)` and jittered by
    /// ±0.5% (seeded by the level), every `err_every`-th failed.
    fn measured(c: u32, n: usize, ttft: f64, err_every: usize) -> LevelStats {
        let mut s = samples(n, ttft, 16, 0.01, err_every);
        let mut rng = crate::rng::Rng::new(n as u64 ^ u64::from(c) << 32 ^ ttft.to_bits());
        for x in &mut s {
            if let Some(t) = x.ttft_s.as_mut() {
                // Jitter the evenly spread values a little, so that runs are not identical.
                *t *= 1.0 + 0.01 * (rng.unit() - 0.5);
            }
        }
        LevelStats::from_samples(
            LevelKey {
                concurrency: c,
                rate: None,
            },
            &s,
            10.0,
            &[],
            &crate::bench::criteria::NO_SLO,
            0,
        )
    }

    fn verdicts(r: &Comparison) -> Vec<(String, String, Option<Verdict>)> {
        r.values
            .iter()
            .map(|v| (v.level.to_string(), v.metric.to_string(), v.verdict))
            .collect()
    }

    fn verdict(r: &Comparison, level: &str, metric: &str) -> Regression {
        r.values
            .iter()
            .find(|v| v.level.to_string() == level && v.metric.to_string() == metric)
            .unwrap_or_else(|| panic!("{level} {metric} not compared: {:?}", verdicts(r)))
            .clone()
    }

    /// A TTFT 30% higher over 100 requests a level is a regression at p50 and p95, and at the
    /// E2E p95 that holds it; at the E2E p50 (+15%, spread over a range as wide as the level's
    /// E2E) the samples cannot say it is beyond the 10% tolerance: inconclusive. The same run
    /// again is no regression.
    #[test]
    fn a_large_significant_change_regresses_and_noise_does_not() {
        let base = vec![model(
            "a",
            vec![measured(1, 100, 0.1, 0), measured(4, 100, 0.1, 0)],
        )];
        let c = Criteria::default();
        let slower = vec![model(
            "a",
            vec![measured(1, 100, 0.13, 0), measured(4, 100, 0.1, 0)],
        )];
        let r = compare(&slower, &base, &[], &c, "old.json");
        let regressed: Vec<(String, String)> = r
            .regressions
            .iter()
            .map(|g| (g.level.to_string(), g.metric.to_string()))
            .collect();
        let regressed: Vec<(&str, &str)> = regressed
            .iter()
            .map(|(l, m)| (l.as_str(), m.as_str()))
            .collect();
        assert_eq!(
            regressed,
            [("1", "ttft_p50"), ("1", "ttft_p95"), ("1", "e2e_p95")],
            "{:?}",
            verdicts(&r)
        );
        assert_eq!(
            verdict(&r, "1", "e2e_p50").verdict,
            Some(Verdict::Inconclusive)
        );
        let g = verdict(&r, "1", "ttft_p50");
        let [lo, hi] = g.interval.expect("an interval");
        assert!(lo > 0.1 && lo < 0.3 && hi > 0.3 && hi < 0.5, "{lo} {hi}");
        assert!(g.p_holm.unwrap() <= 0.05 && g.p_holm >= g.p_value);
        // Level 4 unchanged, within tolerance; throughput and rps are compared, never judged.
        assert_eq!(
            verdict(&r, "4", "ttft_p50").verdict,
            Some(Verdict::WithinTolerance)
        );
        let t = verdict(&r, "1", "agg_tps");
        assert_eq!(t.verdict, Some(Verdict::NotJudged));
        assert!(t.not_judged.unwrap().starts_with("one figure per run"));
        // Judged: 7 per-request percentiles and the error rate at each level (no SLOs: no
        // goodput); agg_tps and rps not.
        assert_eq!((r.compared, r.judged), (20, Some(16)));
        // The same run again is never a regression.
        let again = vec![model(
            "a",
            vec![measured(1, 100, 0.1, 0), measured(4, 100, 0.1, 0)],
        )];
        let r = compare(&again, &base, &[], &c, "old.json");
        assert!(r.regressions.is_empty(), "{:?}", verdicts(&r));
    }

    /// 10% worse beyond a 5% tolerance on 12 requests each: beyond the tolerance, but samples
    /// that overlap this much cannot tell it from noise: inconclusive, with its interval.
    #[test]
    fn worse_beyond_the_tolerance_but_not_significant_is_inconclusive() {
        let base = vec![model("a", vec![measured(1, 12, 0.1, 0)])];
        let cur = vec![model("a", vec![measured(1, 12, 0.11, 0)])];
        let c = Criteria {
            tolerance: 0.05,
            ..Criteria::default()
        };
        let r = compare(&cur, &base, &[], &c, "old.json");
        let g = verdict(&r, "1", "ttft_p50");
        assert_eq!(g.verdict, Some(Verdict::Inconclusive), "{g:?}");
        let [lo, hi] = g.interval.expect("an interval");
        assert!(lo < 0.0 && hi > 0.1, "{lo} {hi}");
        assert!(r.regressions.is_empty());
        // Its p95 has too few values (12 < 72): not judged, and said why.
        let p95 = verdict(&r, "1", "ttft_p95");
        assert_eq!(p95.verdict, Some(Verdict::NotJudged));
        assert_eq!(
            p95.not_judged.as_deref(),
            Some(
                "too few values for its p95 (12 here, 12 in the baseline; a p95 needs 72 in each)"
            )
        );
    }

    /// Error rates: 34 failures of 100 against none is a regression; 2 of 20 against none is
    /// beyond the 1-point tolerance but not significantly.
    #[test]
    fn error_rates_are_judged_beyond_their_tolerance() {
        let base = vec![model(
            "a",
            vec![measured(1, 100, 0.1, 0), measured(2, 20, 0.1, 0)],
        )];
        let cur = vec![model(
            "a",
            vec![measured(1, 100, 0.1, 3), measured(2, 20, 0.1, 10)],
        )];
        let r = compare(&cur, &base, &[], &Criteria::default(), "old.json");
        let e1 = verdict(&r, "1", "error_rate");
        assert_eq!(e1.verdict, Some(Verdict::Regression), "{e1:?}");
        assert!((e1.change - 0.34).abs() < 1e-9, "{e1:?}");
        let e2 = verdict(&r, "2", "error_rate");
        assert_eq!(e2.verdict, Some(Verdict::Inconclusive), "{e2:?}");
        // Its p-value is that of the difference beyond one point.
        let p = crate::bench::significance::difference_beyond_p(2, 20, 0, 20, 0.01).unwrap();
        assert_eq!(e2.p_value, Some(p));
        assert!(p > 0.05, "{p}");
    }

    /// Holm's adjustment: a p-value that alone passes 5% fails once many values are judged.
    #[test]
    fn many_values_judged_raise_the_bar() {
        let base = vec![model("a", vec![measured(1, 20, 0.1, 0)])];
        let cur = vec![model("a", vec![measured(1, 20, 0.1, 4)])];
        let r = compare(&cur, &base, &[], &Criteria::default(), "old.json");
        // 5 failures of 20 against 0: p about 0.015 alone; judged with it the four p50s (15 and
        // 20 values; the p95s need 72), whose p-values are all larger: ×5, past 5%.
        assert_eq!(r.judged, Some(5), "{:?}", verdicts(&r));
        let e = verdict(&r, "1", "error_rate");
        let p = e.p_value.unwrap();
        assert!(p < 0.05 && p * 5.0 > 0.05, "{e:?}");
        assert!((e.p_holm.unwrap() - p * 5.0).abs() < 1e-12, "{e:?}");
        assert_eq!(e.verdict, Some(Verdict::Inconclusive));
    }

    /// A level the client could not measure, in either run, is not judged; a baseline of an
    /// older version (summaries without distributions) falls back to its intervals, and
    /// without those is not judged.
    #[test]
    fn unmeasurable_levels_and_older_baselines() {
        let base = vec![model("a", vec![measured(1, 100, 0.1, 0)])];
        let mut bound = measured(1, 100, 0.13, 0);
        bound.client_bound = Some("read late".into());
        let r = compare(
            &[model("a", vec![bound])],
            &base,
            &[],
            &Criteria::default(),
            "o",
        );
        assert!(r.regressions.is_empty() && r.judged == Some(0));
        assert_eq!(
            verdict(&r, "1", "ttft_p50").not_judged.as_deref(),
            Some("the client could not measure this level (read late)")
        );

        let mut old = base.clone();
        old[0].levels[0].distributions = None;
        let slower = vec![model("a", vec![measured(1, 100, 0.13, 0)])];
        let r = compare(&slower, &old, &[], &Criteria::default(), "o");
        let g = verdict(&r, "1", "ttft_p50");
        assert_eq!(
            (g.verdict, g.test.as_deref()),
            (Some(Verdict::Regression), Some(FROM_INTERVALS))
        );
        old[0].levels[0].ttft_s.as_mut().unwrap().p50_ci = None;
        let r = compare(&slower, &old, &[], &Criteria::default(), "o");
        let g = verdict(&r, "1", "ttft_p50");
        assert_eq!(g.verdict, Some(Verdict::NotJudged));
        assert!(g.not_judged.unwrap().contains("an older version"));
        // The synthetic levels of older tests have summaries only: compared, never judged.
        let r = compare(
            &[model("a", vec![level(8, 300.0, 0.6, 0.0)])],
            &[model("a", vec![level(8, 400.0, 0.5, 0.0)])],
            &[],
            &Criteria::default(),
            "o",
        );
        assert!(r.regressions.is_empty());
    }

    /// A baseline file's damage is named, never a panic: a distribution out of order or
    /// standing for more values than any run, counts that do not fit.
    #[test]
    fn a_damaged_baseline_is_not_judged() {
        let mut old = vec![model("a", vec![measured(1, 100, 0.1, 0)])];
        let d = old[0].levels[0].distributions.as_mut().unwrap();
        d.ttft_s.as_mut().unwrap().values.reverse();
        d.e2e_s.as_mut().unwrap().n = u64::MAX;
        old[0].levels[0].successes = 1_000;
        let cur = vec![model("a", vec![measured(1, 100, 0.13, 0)])];
        let r = compare(&cur, &old, &[], &Criteria::default(), "o");
        assert_eq!(
            verdict(&r, "1", "ttft_p50").not_judged.as_deref(),
            Some("the baseline's distribution of it is damaged: its values are not sorted")
        );
        assert!(
            verdict(&r, "1", "e2e_p95")
                .not_judged
                .unwrap()
                .contains("does not fit its n")
        );
        assert_eq!(
            verdict(&r, "1", "error_rate").not_judged.as_deref(),
            Some("no requests counted (or counts that do not fit)")
        );
    }

    /// Goodput is judged by the SLO attainment, and only when both runs had the same SLOs.
    #[test]
    fn goodput_is_judged_by_the_attainment_under_the_same_slos() {
        let slos: Vec<crate::bench::criteria::Slo> = vec!["ttft=150ms".parse().unwrap()];
        let texts: Vec<String> = slos.iter().map(ToString::to_string).collect();
        let lvl = |ttft: f64| {
            LevelStats::from_samples(
                LevelKey {
                    concurrency: 1,
                    rate: None,
                },
                &samples(100, ttft, 16, 0.01, 0),
                10.0,
                &[],
                &slos,
                0,
            )
        };
        let c = Criteria {
            slos: slos.clone(),
            ..Criteria::default()
        };
        // TTFT over [0.1, 0.2): half meet 150 ms; over [0.13, 0.26): 15%.
        let base = vec![model("a", vec![lvl(0.1)])];
        let cur = vec![model("a", vec![lvl(0.13)])];
        let r = compare(&cur, &base, &texts, &c, "o");
        let g = verdict(&r, "1", "goodput");
        assert_eq!(g.verdict, Some(Verdict::Regression), "{g:?}");
        // About 51% met against 16%: the attainment fell by about 35 points.
        let [lo, hi] = g.interval.unwrap();
        assert!(lo < -0.35 && -0.35 < hi && hi < 0.0, "{lo} {hi}");
        let r = compare(&cur, &base, &["ttft<=1 s".into()], &c, "o");
        assert_eq!(
            verdict(&r, "1", "goodput").not_judged.as_deref(),
            Some("the baseline was judged by other SLOs")
        );
    }
}
