//! Judging results (pure): the knee of a sweep, and selection by hard limits and a weighted
//! score (the comparison with a baseline run is [`super::gate`]'s).

use super::criteria::{Base, Criteria, KneeRule, Metric};
use super::report::{
    Knee, Miss, ModelReport, Ranked, Rejected, SelectedLevel, Selection, model_names,
};
use super::stats::{LevelStats, Load};
use std::collections::BTreeMap;

/// The server's mean requests waiting from which a growing queue marks a knee.
pub const KNEE_WAITING_MIN: f64 = 1.0;

/// The first level (after the first) past saturation, judged against the level before it:
/// aggregate output tokens/s grew by less than the load did, short by more than
/// `rule.tps_growth` of the load's growth (a doubling that gains under 90% by default), while TTFT
/// p95 grew by more than `rule.ttft_growth` or, with server metrics, the server's requests
/// waiting (mean) grew to at least [`KNEE_WAITING_MIN`]. The level before it is the capacity
/// ceiling; the hinge fit of throughput against load ([`hinge_fit`]) estimates where between the
/// two the curve bends. Levels must be in load order; levels without TTFT samples, with no
/// throughput before them, or client-bound (not the server's figures) are not judged.
pub fn find_knee(levels: &[LevelStats], rule: &KneeRule) -> Option<Knee> {
    let (index, g_tps, g_ttft, queued) = levels.windows(2).enumerate().find_map(|(i, w)| {
        let (g_tps, g_ttft, queued) = past_saturation(&w[0], &w[1], rule)?;
        Some((i + 1, g_tps, g_ttft, queued))
    })?;
    let (prev, cur) = (&levels[index - 1], &levels[index]);
    let estimate =
        hinge_fit(&throughput_points(levels)).filter(|k| *k >= prev.key.x() && *k <= cur.key.x());
    Some(Knee {
        index,
        level: cur.key,
        agg_tps_growth: g_tps,
        ttft_p95_growth: g_ttft,
        requests_waiting: queued,
        ceiling: Some(prev.key),
        estimate,
        limited_by: super::answer::limiter(prev, cur),
    })
}

/// Whether `cur` is past saturation against `prev` (the rule of [`find_knee`]): the growths of
/// aggregate tokens/s and TTFT p95, and the server's queue when it marked it; `None` when not, or
/// when either level cannot be judged.
pub fn past_saturation(
    prev: &LevelStats,
    cur: &LevelStats,
    rule: &KneeRule,
) -> Option<(f64, f64, Option<[f64; 2]>)> {
    if [prev, cur]
        .iter()
        .any(|l| l.client_bound.is_some() || l.session_invalid().is_some())
    {
        return None;
    }
    let (tp, tc) = (prev.ttft_s.as_ref()?.p95, cur.ttft_s.as_ref()?.p95);
    let (xp, xc) = (prev.key.x(), cur.key.x());
    if prev.output_tokens_per_s <= 0.0 || tp <= 0.0 || xp <= 0.0 || xc <= xp {
        return None;
    }
    let g_tps = cur.output_tokens_per_s / prev.output_tokens_per_s - 1.0;
    let g_load = xc / xp - 1.0;
    let g_ttft = tc / tp - 1.0;
    let waiting = |l: &LevelStats| l.server.as_ref()?.mean("requests_waiting");
    let queued = match (waiting(prev), waiting(cur)) {
        (Some(a), Some(b)) if b > a && b >= KNEE_WAITING_MIN => Some([a, b]),
        _ => None,
    };
    let latency_up = g_ttft > rule.ttft_growth;
    let fell_behind = g_tps < g_load * (1.0 - rule.tps_growth);
    (fell_behind && (latency_up || queued.is_some())).then_some((
        g_tps,
        g_ttft,
        if latency_up { None } else { queued },
    ))
}

/// (load, aggregate output tokens/s) of the levels a fit may use: with successes, not
/// client-bound, not invalid for its sessions' context overflow.
pub fn throughput_points(levels: &[LevelStats]) -> Vec<(f64, f64)> {
    levels
        .iter()
        .filter(|l| l.successes > 0 && l.client_bound.is_none() && l.session_invalid().is_none())
        .map(|l| (l.key.x(), l.output_tokens_per_s))
        .collect()
}

/// The bend of a throughput curve: the `k` of the least-squares fit `y = s·min(x, k)` (throughput
/// grows in proportion to the load up to `k`, then stays flat) over `points` (load, throughput),
/// searched between the smallest and the largest load. `None` with fewer than two loads, or when
/// a straight line through the origin fits as well (no bend within the points).
pub fn hinge_fit(points: &[(f64, f64)]) -> Option<f64> {
    let lo = points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let hi = points.iter().map(|p| p.0).fold(0.0, f64::max);
    if points.len() < 2 || !(lo > 0.0 && hi > lo) {
        return None;
    }
    // For a given k the best slope is closed-form; k is searched on a fine logarithmic grid.
    let sse = |k: f64| {
        let (mut my, mut mm) = (0.0, 0.0);
        for &(x, y) in points {
            let m = x.min(k);
            my += m * y;
            mm += m * m;
        }
        let s = my / mm;
        points
            .iter()
            .map(|&(x, y)| (y - s * x.min(k)).powi(2))
            .sum::<f64>()
    };
    const STEPS: u32 = 2000;
    let grid = |i: u32| lo * (hi / lo).powf(f64::from(i) / f64::from(STEPS));
    let (best_i, _) = (0..=STEPS)
        .map(|i| (i, sse(grid(i))))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    // Then narrowed between the grid's neighbours (the error is unimodal there).
    let (mut a, mut b) = (
        grid(best_i.saturating_sub(1)),
        grid((best_i + 1).min(STEPS)),
    );
    for _ in 0..60 {
        let (m1, m2) = (a + (b - a) / 3.0, b - (b - a) / 3.0);
        if sse(m1) <= sse(m2) {
            b = m2;
        } else {
            a = m1;
        }
    }
    let best_k = (a + b) / 2.0;
    let best = sse(best_k);
    // A bend only when it explains the points clearly better than no bend at all.
    let straight = sse(hi);
    (best_k < hi * (1.0 - 1e-6) && best < straight * 0.5).then_some(best_k)
}

/// The load to run next to place a knee between `lo` (the last level before saturation) and `hi`
/// (the first past it): the fit's `estimate` when it lies strictly between, the load just past
/// `lo` when the estimate is `lo` itself (to confirm it), else the middle. Closed loop rounds the
/// estimate to whole streams; `None` when nothing lies between (adjacent concurrencies, or rates within
/// `tolerance` of each other).
pub fn next_knee_load(
    lo: f64,
    hi: f64,
    estimate: Option<f64>,
    closed: bool,
    tolerance: f64,
) -> Option<f64> {
    if closed {
        let (lo, hi) = (lo.round(), hi.round());
        if hi - lo < 2.0 {
            return None;
        }
        let pick = match estimate.map(f64::round) {
            Some(e) if e > lo && e < hi => e,
            Some(e) if e <= lo => lo + 1.0,
            Some(_) => hi - 1.0,
            None => ((lo + hi) / 2.0).floor(),
        };
        Some(pick)
    } else {
        if hi <= lo * (1.0 + tolerance) {
            return None;
        }
        let pick = match estimate {
            Some(e) if e > lo * (1.0 + tolerance / 2.0) && e < hi / (1.0 + tolerance / 2.0) => e,
            _ => (lo + hi) / 2.0,
        };
        Some(pick)
    }
}

/// Whether a sweep has gone clearly past saturation at `cur`, with the capacity ceiling at
/// `ceiling`: half its requests or more failed, or its TTFT p95 is at least
/// [`FAR_PAST_TTFT`] times the ceiling's. The sentence saying so.
pub fn far_past(ceiling: &LevelStats, cur: &LevelStats) -> Option<String> {
    if cur.requests > 0 && cur.error_rate >= FAR_PAST_ERRORS {
        return Some(format!(
            "{:.0}% of its requests at {} failed",
            cur.error_rate * 100.0,
            cur.key.label()
        ));
    }
    let (c, t) = (ceiling.ttft_s.as_ref()?.p95, cur.ttft_s.as_ref()?.p95);
    (c > 0.0 && t >= FAR_PAST_TTFT * c).then(|| {
        format!(
            "TTFT p95 at {} is {:.0} times the capacity ceiling's ({})",
            cur.key.label(),
            t / c,
            ceiling.key.label()
        )
    })
}

/// Open loop: a knee's added levels stop when the rates before and past it are this close.
pub const KNEE_RATE_TOLERANCE: f64 = 0.05;

/// The error rate from which a sweep past its knee stops ([`far_past`]).
pub const FAR_PAST_ERRORS: f64 = 0.5;
/// How many times the capacity ceiling's TTFT p95 ends a sweep past its knee ([`far_past`]).
pub const FAR_PAST_TTFT: f64 = 10.0;

/// The SLO attainment at which a fixed sweep's answer is read (a capacity search states its own).
pub const ANSWER_ATTAINMENT: f64 = 0.95;

/// The attainment the run's answer is read at: the capacity search's target, else
/// [`ANSWER_ATTAINMENT`].
pub fn answer_attainment(models: &[ModelReport]) -> f64 {
    models
        .iter()
        .find_map(|m| m.capacity.as_ref().map(|c| c.target_attainment))
        .unwrap_or(ANSWER_ATTAINMENT)
}

/// Whether level `l` is within the SLOs at `target` attainment ([`super::capacity::verdict`]).
pub fn passes_slo(l: &LevelStats, target: f64) -> bool {
    matches!(
        super::capacity::verdict(l, target),
        super::capacity::Verdict::Pass
    )
}

/// A fixed sweep's answer for one model: its highest level within the SLOs at `target`.
pub fn highest_passing(m: &ModelReport, target: f64) -> Option<&LevelStats> {
    m.levels
        .iter()
        .filter(|l| passes_slo(l, target))
        .max_by(|a, b| a.key.x().total_cmp(&b.key.x()))
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
fn passes_at(m: &ModelReport, c: &Criteria) -> Option<Load> {
    m.levels
        .iter()
        .filter(|l| l.successes > 0 && c.limits.iter().all(|lim| lim.violation(l).is_none()))
        .max_by(|a, b| a.key.x().total_cmp(&b.key.x()))
        .map(|l| l.key.load())
}

/// Scores within this of each other are a tie: one rank.
pub const SCORE_TIE: f64 = 1e-9;

/// Each model's weighted score among `models` (their values at their levels normalized among
/// them), in their order.
fn scores(models: &[(&str, &LevelStats)], c: &Criteria) -> Vec<Ranked> {
    let weights = c.effective_weights();
    let columns: Vec<Vec<Option<f64>>> = weights
        .iter()
        .map(|(m, _)| models.iter().map(|(_, l)| m.value(l)).collect())
        .collect();
    let total_w: f64 = weights.iter().map(|(_, w)| w).sum();
    models
        .iter()
        .enumerate()
        .map(|(i, (model, _))| {
            let mut values = BTreeMap::new();
            let mut normalized = BTreeMap::new();
            let mut sum = 0.0;
            for ((metric, w), col) in weights.iter().zip(&columns) {
                let n = normalize(metric, col[i], col);
                sum += w * n;
                values.insert(*metric, col[i]);
                normalized.insert(*metric, n);
            }
            Ranked {
                rank: 0,
                model: (*model).to_owned(),
                score: if total_w > 0.0 { sum / total_w } else { 0.0 },
                values,
                normalized,
            }
        })
        .collect()
}

/// Competition ranks of items in order: 1 for the first, the same rank as the one before when
/// `tied` with it, else its position (1, 1, 3).
fn ranks<T>(items: &[T], tied: impl Fn(&T, &T) -> bool) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(items.len());
    for (i, x) in items.iter().enumerate() {
        let rank = match i.checked_sub(1) {
            Some(p) if tied(&items[p], x) => out[p],
            _ => i + 1,
        };
        out.push(rank);
    }
    out
}

/// How far `v` is from a limit of `limit`: the relative miss `|v / limit − 1|`, or `|v|` for a
/// limit of 0.
pub fn distance(v: f64, limit: f64) -> f64 {
    if limit == 0.0 {
        v.abs()
    } else {
        (v / limit - 1.0).abs()
    }
}

/// The order of rejected models by distance to the limits: measured before unmeasured (no level,
/// no success, or a failed limit without a value), then the fewest limits failed, then the
/// smallest largest miss.
fn distance_key(r: &Rejected, measured: bool) -> (bool, usize, f64) {
    let largest = r
        .misses
        .iter()
        .map(|m| m.distance.unwrap_or(f64::INFINITY))
        .fold(0.0, f64::max);
    (!measured || largest.is_infinite(), r.misses.len(), largest)
}

/// Applies the hard limits at the selection level, then ranks the remaining models by weighted
/// score, best first; equal scores (within [`SCORE_TIE`]) share a rank (listed by name). A
/// rejected model says each limit it failed with its distance to it ([`distance`]) and at which
/// level it still passes; rejected models are listed closest first ([`distance_key`]). When no
/// model passes, each rejected model also gets its place by that distance (`closest`, ties
/// sharing one) and its weighted score among the models measured at the level.
pub fn select(models: &[ModelReport], c: &Criteria) -> Selection {
    let weights = c.effective_weights();
    let mut rejected: Vec<(Rejected, Option<&LevelStats>)> = Vec::new();
    let mut eligible: Vec<(&str, &LevelStats)> = Vec::new();
    let mut level: Option<Load> = None;
    let names = model_names(models);
    for (m, name) in models.iter().zip(&names) {
        let Some(l) = level_at(m, c.select_at) else {
            rejected.push((
                Rejected {
                    model: name.clone(),
                    reasons: vec![format!(
                        "no level at {}",
                        c.select_at
                            .map_or_else(|| "the end".into(), crate::units::trim_float)
                    )],
                    passes_at: passes_at(m, c),
                    misses: Vec::new(),
                    closest: None,
                    score: None,
                },
                None,
            ));
            continue;
        };
        level.get_or_insert_with(|| l.key.load());
        let misses: Vec<Miss> = c
            .limits
            .iter()
            .filter(|lim| lim.violation(l).is_some())
            .map(|lim| {
                let value = lim.metric.value(l);
                Miss {
                    limit: lim.to_string(),
                    value,
                    distance: value.map(|v| distance(v, lim.value)),
                }
            })
            .collect();
        // Each failed limit's reason says how far beyond it the value is.
        let mut reasons: Vec<String> = c
            .limits
            .iter()
            .filter_map(|lim| lim.violation(l))
            .zip(&misses)
            .map(|(why, miss)| match miss.distance {
                Some(d) => format!("{why}, {} beyond", crate::units::fmt_pct(d)),
                None => why,
            })
            .collect();
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
            rejected.push((
                Rejected {
                    model: name.clone(),
                    reasons,
                    passes_at: passes_at(m, c),
                    misses,
                    closest: None,
                    score: None,
                },
                Some(l).filter(|l| l.successes > 0),
            ));
        }
    }
    let mut ranked = scores(&eligible, c);
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.model.cmp(&b.model)));
    let tied = |a: &Ranked, b: &Ranked| (a.score - b.score).abs() <= SCORE_TIE;
    let places = ranks(&ranked, tied);
    for (r, rank) in ranked.iter_mut().zip(places) {
        r.rank = rank;
    }
    rejected.sort_by(|(a, la), (b, lb)| {
        let (ka, kb) = (distance_key(a, la.is_some()), distance_key(b, lb.is_some()));
        ka.0.cmp(&kb.0)
            .then(ka.1.cmp(&kb.1))
            .then(ka.2.total_cmp(&kb.2))
            .then(a.model.cmp(&b.model))
    });
    if ranked.is_empty() {
        let keys: Vec<(bool, usize, f64)> = rejected
            .iter()
            .map(|(r, l)| distance_key(r, l.is_some()))
            .collect();
        let places = ranks(&keys, |a, b| {
            a.0 == b.0 && a.1 == b.1 && (a.2 == b.2 || (a.2 - b.2).abs() <= SCORE_TIE)
        });
        let measured: Vec<(&str, &LevelStats)> = rejected
            .iter()
            .filter_map(|(r, l)| Some((r.model.as_str(), (*l)?)))
            .collect();
        let scored = scores(&measured, c);
        for ((r, _), place) in rejected.iter_mut().zip(places) {
            r.closest = Some(place);
            r.score = scored.iter().find(|s| s.model == r.model).map(|s| s.score);
        }
    }
    // Asked for a load no model ran: that load, open loop when the sweeps are.
    let open = models
        .iter()
        .flat_map(|m| &m.levels)
        .any(|l| l.key.rate.is_some());
    let level = level.or_else(|| c.select_at.map(|x| Load::at(x, open)));
    Selection {
        level: level.map_or(SelectedLevel::Last, SelectedLevel::At),
        load: None,
        limits: c.limits.iter().map(ToString::to_string).collect(),
        weights: weights.iter().copied().collect(),
        ranked,
        rejected: rejected.into_iter().map(|(r, _)| r).collect(),
        length_mismatch: length_mismatch(models),
    }
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
            ttft_from_schedule_s: None,
            steady_state: None,
            per_second: Vec::new(),
            e2e_from_schedule_s: None,
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
            cpu_timeslices: None,
            client_bound: None,
            repeats: Vec::new(),
            lag_s: Some(s(0.0001)),
            behind_schedule_s: None,
            ramp_s: None,
            loop_lag_s: None,
            read_lag_s: None,
            send_lag_s: None,
            wire_ttft_s: None,
            unstamped: 0,
            first_token_shared_read: 0,
            capped: 0,
            started_unix_s: None,
            start_offset_s: None,
            cost_per_request: None,
            cost_per_mtok: None,
            lengths: Default::default(),
            distributions: None,
            samples: None,
            cross_check: None,
            canary: None,
            server: None,
            efficiency: Default::default(),
            notes: Vec::new(),
            partial: false,
            stopped: None,
            answered: None,
            sessions: None,
        }
    }

    pub(crate) fn model(name: &str, levels: Vec<LevelStats>) -> ModelReport {
        ModelReport {
            model: name.into(),
            target: None,
            price: None,
            gpus: None,
            gpu_hour_price: None,
            input_tokens_mean: None,
            output_tokens_mean: None,
            levels,
            knee: None,
            capacity: None,
            stopped_early: None,
            check: None,
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

    /// Issue 23 item 4: a server with 8 slots stepped 1, 5, 10, 20. At 10 two requests wait
    /// each round (TTFT p95 7x), throughput grew 60% for twice the load: the knee is at 10 (it
    /// was put at 20), the ceiling at 5, and the fit bends at 8. Added levels 8 (scales) and 9
    /// (queues) then place the ceiling at 8.
    #[test]
    fn a_coarse_sweep_brackets_the_knee_and_the_fit_finds_the_slots() {
        let per = 50.0; // tokens/s of one stream
        let at = |c: u32, ttft: f64| level(c, per * f64::from(c.min(8)), ttft, 0.0);
        let coarse = vec![at(1, 0.05), at(5, 0.05), at(10, 0.35), at(20, 1.2)];
        let k = find_knee(&coarse, &KneeRule::default()).expect("knee");
        assert_eq!((k.index, k.level.concurrency), (2, 10));
        assert_eq!(k.ceiling.map(|c| c.concurrency), Some(5));
        let e = k.estimate.expect("the fit bends between 5 and 10");
        assert!((e - 8.0).abs() < 0.05, "{e}");
        assert_eq!(next_knee_load(5.0, 10.0, k.estimate, true, 0.05), Some(8.0));
        // 8 scales like 5: the knee stays at 10, the ceiling moves to 8; the fit still says 8,
        // so 9 is run to confirm it.
        let mut more = coarse.clone();
        more.insert(2, at(8, 0.05));
        let k = find_knee(&more, &KneeRule::default()).expect("knee");
        assert_eq!(k.ceiling.map(|c| c.concurrency), Some(8));
        assert_eq!(next_knee_load(8.0, 10.0, k.estimate, true, 0.05), Some(9.0));
        more.insert(3, at(9, 0.1));
        let k = find_knee(&more, &KneeRule::default()).expect("knee");
        assert_eq!(
            (k.level.concurrency, k.ceiling.map(|c| c.concurrency)),
            (9, Some(8))
        );
        assert_eq!(next_knee_load(8.0, 9.0, k.estimate, true, 0.05), None);
    }

    /// The 2-slot server stepped 1, 8 (TTFT p95 6.2x while throughput doubled): a knee at 8
    /// with the ceiling at 1, and the fit puts the bend at 2 from those two levels alone.
    #[test]
    fn two_levels_are_enough_for_the_fit_to_say_where_to_look() {
        let levels = vec![level(1, 50.0, 0.05, 0.0), level(8, 100.0, 0.31, 0.0)];
        let k = find_knee(&levels, &KneeRule::default()).expect("knee");
        assert_eq!(
            (k.level.concurrency, k.ceiling.map(|c| c.concurrency)),
            (8, Some(1))
        );
        let e = k.estimate.expect("estimate");
        assert!((e - 2.0).abs() < 0.02, "{e}");
        assert_eq!(next_knee_load(1.0, 8.0, k.estimate, true, 0.05), Some(2.0));
        // Without an estimate: the middle; open loop: the estimate, else the middle, until the
        // rates are within the tolerance.
        assert_eq!(next_knee_load(1.0, 8.0, None, true, 0.05), Some(4.0));
        assert_eq!(next_knee_load(4.0, 8.0, Some(6.5), false, 0.05), Some(6.5));
        assert_eq!(next_knee_load(4.0, 8.0, Some(4.01), false, 0.05), Some(6.0));
        assert_eq!(next_knee_load(4.0, 4.1, None, false, 0.05), None);
    }

    #[test]
    fn the_hinge_fit_needs_a_bend() {
        // Straight through the origin: no bend.
        assert_eq!(hinge_fit(&[(1.0, 10.0), (2.0, 20.0), (4.0, 40.0)]), None);
        assert_eq!(hinge_fit(&[(1.0, 10.0)]), None);
        assert_eq!(hinge_fit(&[]), None);
        // Flat from 3 on.
        let k = hinge_fit(&[(1.0, 10.0), (2.0, 20.0), (4.0, 30.0), (8.0, 30.0)]).unwrap();
        assert!((k - 3.0).abs() < 0.01, "{k}");
    }

    /// A latency jump alone (throughput still growing with the load) is no knee; nor is a
    /// client-bound level, whose figures are not the server's.
    #[test]
    fn a_knee_needs_throughput_to_fall_behind_and_a_server_figure() {
        let scaling = vec![level(4, 200.0, 0.1, 0.0), level(8, 390.0, 0.3, 0.0)];
        assert!(find_knee(&scaling, &KneeRule::default()).is_none());
        let mut bound = vec![level(4, 200.0, 0.1, 0.0), level(8, 210.0, 0.9, 0.0)];
        assert!(find_knee(&bound, &KneeRule::default()).is_some());
        bound[1].client_bound = Some("starved".into());
        assert!(find_knee(&bound, &KneeRule::default()).is_none());
    }

    #[test]
    fn far_past_saturation_is_half_the_requests_failing_or_ten_times_the_ttft() {
        let ceiling = level(8, 400.0, 0.05, 0.0);
        assert_eq!(far_past(&ceiling, &level(16, 400.0, 0.45, 0.0)), None);
        let slow = far_past(&ceiling, &level(16, 400.0, 0.5, 0.0)).unwrap();
        assert!(
            slow.contains("10 times the capacity ceiling's (8)"),
            "{slow}"
        );
        let failing = far_past(&ceiling, &level(16, 200.0, 0.05, 0.5)).unwrap();
        assert!(
            failing.starts_with("50% of its requests at 16 failed"),
            "{failing}"
        );
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
        assert_eq!(s.level, SelectedLevel::At(Load::Concurrency(8)));
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
        assert_eq!(s.rejected[0].passes_at, Some(Load::Concurrency(4)));
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
                    "cost_per_request = 0.02 (limit cost_per_request <= 0.01), 100.00% beyond"
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
        assert_eq!(s.level, SelectedLevel::At(Load::Concurrency(16)));
    }

    /// In open loop the load asked for is a rate, written `4/s` as every level's label (it was
    /// `4`, which read as four streams).
    #[test]
    fn an_open_loop_selection_is_at_a_rate() {
        let at = |rate: f64| LevelStats {
            key: crate::bench::stats::LevelKey {
                concurrency: 100,
                rate: Some(rate),
            },
            ..level(1, 400.0, 0.5, 0.0)
        };
        let models = vec![model("a", vec![at(2.0), at(4.0)])];
        for (select_at, load) in [(Some(4.0), 4.0), (Some(3.0), 3.0), (None, 4.0)] {
            let c = Criteria {
                select_at,
                ..Criteria::default()
            };
            let s = select(&models, &c);
            assert_eq!(
                s.level,
                SelectedLevel::At(Load::Rate(load)),
                "{select_at:?}"
            );
            let json = serde_json::to_value(&s).unwrap();
            assert_eq!(json["level"], format!("{load}/s"));
        }
    }
}
