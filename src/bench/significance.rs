//! Whether two runs differ (pure): the statistics of the regression gate ([`super::gate`]).
//!
//! - [`Distribution`]: a level's per-request values of one metric, kept bounded in the report
//!   (every value up to [`KEPT`], else [`KEPT`] evenly spaced order statistics), so a later run
//!   can test itself against it without `--samples`.
//! - [`quantile_shift_p`]: the pooled-quantile test (Mood's median test generalised to the
//!   `q`-quantile): both runs' values are pooled, the pooled `q`-quantile splits them, and
//!   Fisher's exact test on the 2×2 table (run × beyond the split) gives a one-sided p-value that
//!   one run's `q`-quantile lies above (or below) the other's. Distribution-free, exact at any
//!   sample size (conditional on the pooled values), and cheap.
//! - [`ratio_interval`]: the interval of the ratio of the two `q`-quantiles that inverts that
//!   test (the ratios `r` for which the test cannot tell the run from the baseline × `r`).
//! - [`fisher_greater`]: Fisher's exact one-sided test of two proportions (the error rate, the
//!   SLO attainment); [`difference_interval`]: Newcombe's hybrid score interval of their
//!   difference.
//! - [`holm`]: Holm's step-down adjustment of many p-values, so that the chance of any false
//!   alarm among all the values a comparison judges stays below `1 − confidence`.

use super::confidence::wilson_z;
use serde::{Deserialize, Serialize};

/// How many values a [`Distribution`] keeps at most.
pub const KEPT: usize = 512;

/// The most values a distribution read from a file may stand for (a billion requests in one
/// level): beyond it the counts are not a run's.
pub const MAX_N: u64 = 1_000_000_000;

/// A level's values of one per-request metric, sorted: every value when there are at most
/// [`KEPT`], else the order statistics at the 0-based ranks `round(i (n − 1) / (KEPT − 1))`,
/// `i = 0..KEPT` (the smallest and the largest included), each rounded to 6 significant digits.
/// How many of the `n` values lie below a threshold is then known exactly when every value is
/// kept, and within the gap between two kept ranks otherwise (see [`Distribution::count_below`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// How many values the level had.
    pub n: u64,
    /// The kept values, ascending.
    pub values: Vec<f64>,
}

/// A value to 6 significant digits (1 µs at a second): what the report keeps.
fn six_digits(v: f64) -> f64 {
    format!("{v:.5e}").parse().unwrap_or(v)
}

impl Distribution {
    /// The distribution of `values` (NaNs dropped); `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Distribution> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let values = if n <= KEPT {
            v.iter().map(|&x| six_digits(x)).collect()
        } else {
            (0..KEPT)
                .map(|i| six_digits(v[kept_rank(i, KEPT, n as u64) as usize]))
                .collect()
        };
        Some(Distribution {
            n: n as u64,
            values,
        })
    }

    /// Why a distribution read from a file cannot be used (`None`: it can): no value, more
    /// values than `n`, one value standing for several, more values than any run sends
    /// ([`MAX_N`]), a value that is not finite, or values out of order.
    pub fn damaged(&self) -> Option<&'static str> {
        let len = self.values.len() as u64;
        if len == 0 || len > self.n || (len < self.n && len < 2) || self.n > MAX_N {
            Some("its number of values does not fit its n")
        } else if self.values.iter().any(|v| !v.is_finite()) {
            Some("a value is not a finite number")
        } else if self.values.windows(2).any(|w| w[0] > w[1]) {
            Some("its values are not sorted")
        } else {
            None
        }
    }

    /// The 0-based rank among the `n` values of kept value `i`.
    fn rank(&self, i: usize) -> u64 {
        kept_rank(i, self.values.len(), self.n)
    }

    /// Bounds `[least, most]` on how many of the `n` values lie below `t` once scaled by `r`
    /// (`v × r < t`; with `or_equal`, `v × r <= t`). Exact when every value is kept.
    pub fn count_below(&self, t: f64, r: f64, or_equal: bool) -> (u64, u64) {
        let j = self
            .values
            .partition_point(|&v| if or_equal { v * r <= t } else { v * r < t });
        if j == 0 {
            return (0, 0);
        }
        if j == self.values.len() {
            return (self.n, self.n);
        }
        // Kept values 0..j are below, so are the ranks up to j − 1's; rank j's and above are not.
        (self.rank(j - 1) + 1, self.rank(j))
    }

    /// The smallest and the largest value.
    fn range(&self) -> (f64, f64) {
        (
            self.values.first().copied().unwrap_or(f64::NAN),
            self.values.last().copied().unwrap_or(f64::NAN),
        )
    }
}

/// A level's kept distributions of the per-request metrics the gate compares (of its
/// successes, as its summaries are).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Distributions {
    /// TTFT, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_s: Option<Distribution>,
    /// TPOT, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_s: Option<Distribution>,
    /// E2E, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_s: Option<Distribution>,
    /// Per-request decode tokens/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_tokens_per_s: Option<Distribution>,
}

impl Distributions {
    /// The distributions of a level's successful samples.
    pub fn of(samples: &[super::sample::Sample]) -> Distributions {
        let ok = || samples.iter().filter(|s| s.success());
        Distributions {
            ttft_s: Distribution::of(ok().filter_map(|s| s.ttft_s)),
            tpot_s: Distribution::of(ok().filter_map(|s| s.tpot_s)),
            e2e_s: Distribution::of(ok().filter_map(|s| s.e2e_s)),
            decode_tokens_per_s: Distribution::of(ok().filter_map(|s| s.decode_tokens_per_s)),
        }
    }
}

/// The 0-based rank of kept value `i` of `len` kept from `n` sorted values.
fn kept_rank(i: usize, len: usize, n: u64) -> u64 {
    if len as u64 >= n || len < 2 {
        return i as u64;
    }
    ((i as f64) * (n - 1) as f64 / (len - 1) as f64).round() as u64
}

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7, 9 terms: about 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 − x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// `ln C(n, k)`.
fn ln_choose(n: u64, k: u64) -> f64 {
    ln_gamma(n as f64 + 1.0) - ln_gamma(k as f64 + 1.0) - ln_gamma((n - k) as f64 + 1.0)
}

/// `P(X >= k)` for `X` hypergeometric: `drawn` of `total`, of which `marked` are marked.
pub fn hypergeometric_upper(k: u64, total: u64, marked: u64, drawn: u64) -> f64 {
    let (marked, drawn) = (marked.min(total), drawn.min(total));
    let lo = drawn.saturating_sub(total - marked);
    let hi = marked.min(drawn);
    if k <= lo {
        return 1.0;
    }
    if k > hi {
        return 0.0;
    }
    let ln_pmf = |x: u64| {
        ln_choose(marked, x) + ln_choose(total - marked, drawn - x) - ln_choose(total, drawn)
    };
    // pmf(x + 1) / pmf(x), and its inverse, from the binomial coefficients.
    let up = |x: u64| {
        ((marked - x) as f64 * (drawn - x) as f64)
            / ((x + 1) as f64 * ((total - marked + x + 1) as f64 - drawn as f64))
    };
    let mode = ((drawn + 1) as f64 * (marked + 1) as f64 / (total + 2) as f64).floor() as u64;
    if k > mode {
        // The upper tail from k on: terms fall from the first, which does not underflow unless
        // the whole tail does.
        let mut term = ln_pmf(k).exp();
        let mut sum = term;
        for x in k..hi {
            term *= up(x);
            sum += term;
            if term <= sum * 1e-17 {
                break;
            }
        }
        sum.min(1.0)
    } else {
        // 1 − P(X <= k − 1): the lower tail from k − 1 down, its terms falling likewise.
        let mut term = ln_pmf(k - 1).exp();
        let mut sum = term;
        let mut x = k - 1;
        while x > lo {
            term /= up(x - 1);
            sum += term;
            x -= 1;
            if term <= sum * 1e-17 {
                break;
            }
        }
        (1.0 - sum).clamp(0.0, 1.0)
    }
}

/// Fisher's exact test, one-sided: the p-value that a share `a` of `na` is higher than `b` of
/// `nb` by chance alone (conditional on the `a + b` pooled).
pub fn fisher_greater(a: u64, na: u64, b: u64, nb: u64) -> f64 {
    hypergeometric_upper(a, na + nb, a + b, na)
}

/// Newcombe's hybrid score interval (his method 10, from the two Wilson intervals) of the
/// difference of two shares, `a / na − b / nb`, at 95%; `None` when either has no count.
pub fn difference_interval(a: u64, na: u64, b: u64, nb: u64) -> Option<[f64; 2]> {
    difference_interval_z(a, na, b, nb, Z95)
}

/// The standard normal quantile of 97.5%.
const Z95: f64 = 1.959_963_984_540_054;

/// [`difference_interval`] at the standard normal quantile `z` (each bound one-sided at
/// `P(Z > z)`).
fn difference_interval_z(a: u64, na: u64, b: u64, nb: u64, z: f64) -> Option<[f64; 2]> {
    let [l1, u1] = wilson_z(a, na, z)?;
    let [l2, u2] = wilson_z(b, nb, z)?;
    let (p1, p2) = (a.min(na) as f64 / na as f64, b.min(nb) as f64 / nb as f64);
    let d = p1 - p2;
    Some([
        d - ((p1 - l1).powi(2) + (u2 - p2).powi(2)).sqrt(),
        d + ((u1 - p1).powi(2) + (p2 - l2).powi(2)).sqrt(),
    ])
}

/// The one-sided p-value that the share `a / na` exceeds `b / nb` by more than `margin`
/// (`H0: p1 − p2 <= margin`), by inverting [`difference_interval`]: the `P(Z > z)` at which its
/// lower bound reaches `margin` (when the difference is at most `margin`, one minus that at which
/// its upper bound does). `None` when either has no count.
pub fn difference_beyond_p(a: u64, na: u64, b: u64, nb: u64, margin: f64) -> Option<f64> {
    let [d, _] = difference_interval_z(a, na, b, nb, 0.0)?;
    let bound = |z: f64| {
        difference_interval_z(a, na, b, nb, z)
            .map_or(f64::NAN, |[lo, hi]| if d > margin { lo } else { hi })
    };
    // The bound moves away from d as z grows: find where it reaches the margin.
    let (mut z0, mut z1) = (0.0, 40.0);
    let reached = |z: f64| {
        if d > margin {
            bound(z) <= margin
        } else {
            bound(z) > margin
        }
    };
    if !reached(z1) {
        return Some(if d > margin { 0.0 } else { 1.0 });
    }
    for _ in 0..80 {
        let m = 0.5 * (z0 + z1);
        if reached(m) {
            z1 = m;
        } else {
            z0 = m;
        }
    }
    let tail = normal_upper(0.5 * (z0 + z1));
    Some(if d > margin { tail } else { 1.0 - tail })
}

/// The pooled `q`-quantile of `a` and `b × r`, weighting each kept value by how many it stands
/// for. `above` splits for counting values above it (the value at which the pooled count
/// reaches `q`), else for counting values below it (the value past which it exceeds `q`), so
/// that either count is about `(1 − q)` or `q` of the pool.
fn pooled_quantile(a: &Distribution, b: &Distribution, r: f64, q: f64, above: bool) -> f64 {
    let wa = a.n as f64 / a.values.len() as f64;
    let wb = b.n as f64 / b.values.len() as f64;
    let goal = q * (a.n + b.n) as f64;
    let (mut i, mut j, mut cum) = (0, 0, 0.0);
    let mut last = f64::NAN;
    while i < a.values.len() || j < b.values.len() {
        let take_a = j >= b.values.len() || (i < a.values.len() && a.values[i] <= b.values[j] * r);
        let (v, w) = if take_a {
            i += 1;
            (a.values[i - 1], wa)
        } else {
            j += 1;
            (b.values[j - 1] * r, wb)
        };
        cum += w;
        last = v;
        if (above && cum >= goal * (1.0 - 1e-12)) || (!above && cum > goal * (1.0 + 1e-12)) {
            return v;
        }
    }
    last
}

/// The pooled-quantile test, one-sided: the p-value that `a`'s `q`-quantile lies above (with
/// `higher`; else below) that of `b` scaled by `r`, by chance alone. The pooled `q`-quantile
/// splits the values; `A` of `a`'s `n` and `B` of `b`'s lie beyond it (above it, or below it);
/// Fisher's exact test asks how likely `A` or more of the `A + B` would fall in `a` if the two
/// runs were one. Where kept values stand for several, `A` is its fewest and `B` its most, so
/// the test errs towards "no difference".
pub fn quantile_shift_p(a: &Distribution, b: &Distribution, q: f64, r: f64, higher: bool) -> f64 {
    let t = pooled_quantile(a, b, r, q, higher);
    let (ab, bb) = if higher {
        // Above t: n minus those at or below it.
        let (_, a_most_below) = a.count_below(t, 1.0, true);
        let (b_least_below, _) = b.count_below(t, r, true);
        (a.n - a_most_below, b.n - b_least_below)
    } else {
        let (a_least_below, _) = a.count_below(t, 1.0, false);
        let (_, b_most_below) = b.count_below(t, r, false);
        (a_least_below, b_most_below)
    };
    fisher_greater(ab, a.n, bb, b.n)
}

/// The two-sided interval, at `confidence`, of the ratio of `a`'s `q`-quantile to `b`'s, by
/// inverting [`quantile_shift_p`]: from the smallest `r` at which `a` is no longer above
/// `b × r` to the largest at which it is not yet below (each at half the rest of
/// `confidence`). `None` when a value is not positive, or when the values are too few to bound
/// it on either side.
pub fn ratio_interval(
    a: &Distribution,
    b: &Distribution,
    q: f64,
    confidence: f64,
) -> Option<[f64; 2]> {
    let tail = (1.0 - confidence) / 2.0;
    let ((a_min, a_max), (b_min, b_max)) = (a.range(), b.range());
    if !(a_min > 0.0 && b_min > 0.0) {
        return None;
    }
    // Outside [a_min / b_max, a_max / b_min] every value of one run is beyond every one of the
    // other's: the tests are at their most certain there.
    let (lo, hi) = ((a_min / b_max * 0.99).ln(), (a_max / b_min * 1.01).ln());
    let p_above = |ln_r: f64| quantile_shift_p(a, b, q, ln_r.exp(), true);
    let p_below = |ln_r: f64| quantile_shift_p(a, b, q, ln_r.exp(), false);
    if p_above(lo) >= tail || p_below(hi) >= tail {
        return None;
    }
    // p_above grows with r and p_below falls: bisect for where each crosses the tail.
    let bisect = |f: &dyn Fn(f64) -> bool, mut x0: f64, mut x1: f64| {
        // f(x0) false, f(x1) true.
        for _ in 0..60 {
            let m = 0.5 * (x0 + x1);
            if f(m) {
                x1 = m;
            } else {
                x0 = m;
            }
        }
        0.5 * (x0 + x1)
    };
    let r_lo = bisect(&|x| p_above(x) >= tail, lo, hi);
    let r_hi = bisect(&|x| p_below(x) < tail, lo, hi);
    Some([r_lo.exp(), r_hi.exp()])
}

/// The upper tail of the standard normal distribution, `P(Z > z)` (Numerical Recipes' `erfc`
/// approximation, relative error below 1.2e-7).
pub fn normal_upper(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let ax = x.abs();
    let t = 1.0 / (1.0 + 0.5 * ax);
    let poly = -ax * ax - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    0.5 * if x >= 0.0 { erfc } else { 2.0 - erfc }
}

/// Holm's step-down adjusted p-values of `p`, in `p`'s order: the `i`-th smallest (from 0) is
/// multiplied by `m − i`, made no smaller than the one before, and capped at 1. A value is
/// significant at family-wise level `α` when its adjusted p-value is at most `α`.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]).then(i.cmp(&j)));
    let mut out = vec![1.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p[i]).min(1.0));
        out[i] = running;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    #[test]
    fn ln_gamma_matches_factorials() {
        // ln 10! = ln 3628800; Γ(0.5) = √π; ln 170! = 706.5730622457874.
        assert!(close(ln_gamma(11.0), 3_628_800f64.ln(), 1e-13));
        assert!(close(
            ln_gamma(0.5),
            std::f64::consts::PI.sqrt().ln(),
            1e-12
        ));
        assert!(close(ln_gamma(171.0), 706.573_062_245_787_4, 1e-13));
    }

    /// Fisher's lady tasting tea: 8 cups, 4 with the milk first, she names 4 and gets 3 right:
    /// P(3 or more right) = 17/70, all 4 = 1/70.
    #[test]
    fn hypergeometric_tails_match_the_tea_tasting() {
        assert!(close(hypergeometric_upper(3, 8, 4, 4), 17.0 / 70.0, 1e-12));
        assert!(close(hypergeometric_upper(4, 8, 4, 4), 1.0 / 70.0, 1e-12));
        assert_eq!(hypergeometric_upper(0, 8, 4, 4), 1.0);
        assert_eq!(hypergeometric_upper(5, 8, 4, 4), 0.0);
        // Below the mode: 1 − P(X <= 1) = 1 − 17/70.
        assert!(close(hypergeometric_upper(2, 8, 4, 4), 53.0 / 70.0, 1e-12));
        // Large counts stay in [0, 1] and far tails do not underflow to garbage.
        let p = hypergeometric_upper(600, 2000, 1000, 1000);
        assert!(p > 0.0 && p < 1e-15, "{p}");
        let p = hypergeometric_upper(400, 2000, 1000, 1000);
        assert!(p > 1.0 - 1e-15 && p <= 1.0, "{p}");
    }

    /// Fisher's exact test, one-sided, against a table worked by hand: 7 of 10 failed against
    /// 2 of 10: P = Σ_{x>=7} C(9,x) C(11,10−x) / C(20,10) = (5940 + 495 + 11) / 184756.
    #[test]
    fn fisher_one_sided_matches_a_worked_table() {
        let p = fisher_greater(7, 10, 2, 10);
        assert!(close(p, 6_446.0 / 184_756.0, 1e-12), "{p}");
        // The same shares the other way round are not significant.
        assert!(fisher_greater(2, 10, 7, 10) > 0.99);
        // Equal shares: about a half (the middle value is counted on the tail).
        let p = fisher_greater(5, 100, 5, 100);
        assert!((0.5..0.7).contains(&p), "{p}");
    }

    /// Newcombe (1998), Table II, example (a): 56/70 against 48/80, hybrid score interval of
    /// the difference 0.0524 to 0.3339.
    #[test]
    fn newcombe_matches_his_example() {
        let [lo, hi] = difference_interval(56, 70, 48, 80).unwrap();
        assert!(
            (lo - 0.0524).abs() < 5e-4 && (hi - 0.3339).abs() < 5e-4,
            "{lo} {hi}"
        );
        assert_eq!(difference_interval(1, 0, 1, 2), None);
    }

    /// The p-value of a difference beyond a margin inverts the interval: at the margin the
    /// 95% interval's lower bound reaches, it is 2.5%; a difference that is not beyond the margin
    /// is above a half.
    #[test]
    fn the_difference_beyond_a_margin_inverts_newcombes_interval() {
        let [lo, _] = difference_interval(56, 70, 48, 80).unwrap();
        let p = difference_beyond_p(56, 70, 48, 80, lo).unwrap();
        assert!((p - 0.025).abs() < 1e-6, "{p}");
        let p0 = difference_beyond_p(56, 70, 48, 80, 0.0).unwrap();
        assert!(p0 < 0.025, "{p0}");
        // 0.2 is the difference itself: a half; beyond it, above a half.
        let p = difference_beyond_p(56, 70, 48, 80, 0.2).unwrap();
        assert!((p - 0.5).abs() < 1e-6, "{p}");
        assert!(difference_beyond_p(56, 70, 48, 80, 0.3).unwrap() > 0.5);
        // No failures either side, margin one point: nothing to see.
        assert!(difference_beyond_p(0, 100, 0, 100, 0.01).unwrap() > 0.5);
        assert_eq!(difference_beyond_p(0, 0, 0, 100, 0.0), None);
    }

    #[test]
    fn holm_adjusts_in_order_and_keeps_it_monotone() {
        // Sorted 0.005, 0.01, 0.03, 0.04 → ×4, ×3, ×2, ×1 = 0.02, 0.03, 0.06, 0.04 → the last
        // raised to 0.06 (no adjusted p-value below an earlier one's).
        let adj = holm(&[0.01, 0.04, 0.03, 0.005]);
        let want = [0.03, 0.06, 0.06, 0.02];
        for (a, w) in adj.iter().zip(want) {
            assert!(close(*a, w, 1e-12), "{adj:?}");
        }
        assert_eq!(holm(&[0.6, 0.9]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }

    #[test]
    fn normal_tail_matches_the_table() {
        assert!(close(normal_upper(1.959_964), 0.025, 1e-6));
        assert!(close(normal_upper(0.0), 0.5, 1e-6));
        assert!(close(normal_upper(-1.644_854), 0.95, 1e-6));
        assert!(close(normal_upper(5.0), 2.866_515_7e-7, 1e-5));
    }

    /// Mood's median test on two samples of 8, all of one above all of the other: the pooled
    /// median splits them 8 to 0, P = 1 / C(16, 8) = 1/12870; the other way round it is 1.
    #[test]
    fn the_pooled_median_test_of_separated_samples() {
        let low = Distribution::of((1..=8).map(f64::from)).unwrap();
        let high = Distribution::of((11..=18).map(f64::from)).unwrap();
        let p = quantile_shift_p(&high, &low, 0.5, 1.0, true);
        assert!(close(p, 1.0 / 12_870.0, 1e-9), "{p}");
        assert!(quantile_shift_p(&low, &high, 0.5, 1.0, true) > 0.999);
        let p = quantile_shift_p(&low, &high, 0.5, 1.0, false);
        assert!(close(p, 1.0 / 12_870.0, 1e-9), "{p}");
        // Scaled by 100, `low` lies above `high`.
        assert!(quantile_shift_p(&high, &low, 0.5, 100.0, true) > 0.999);
    }

    fn uniform(seed: u64, n: usize, scale: f64) -> Distribution {
        let mut rng = crate::rng::Rng::new(seed);
        Distribution::of((0..n).map(|_| scale * (1.0 + rng.unit()))).unwrap()
    }

    /// Identical distributions: the one-sided test falsely alarms at most at its level (checked
    /// over 400 pairs at 5%, p50 and p95), and its interval of the ratio covers 1 in about 95%.
    #[test]
    fn identical_distributions_are_not_flagged_beyond_the_level() {
        for (q, n) in [(0.5, 60), (0.95, 200)] {
            let (mut alarms, mut covered) = (0, 0);
            let trials = 400;
            for s in 0..trials {
                let a = uniform(2 * s, n, 0.1);
                let b = uniform(2 * s + 1, n, 0.1);
                if quantile_shift_p(&a, &b, q, 1.0, true) <= 0.05 {
                    alarms += 1;
                }
                let [lo, hi] = ratio_interval(&a, &b, q, 0.95).expect("bounded");
                if lo <= 1.0 && 1.0 <= hi {
                    covered += 1;
                }
            }
            assert!(
                alarms <= trials / 20 + 6,
                "q {q}: {alarms} alarms of {trials}"
            );
            assert!(
                covered >= trials * 93 / 100,
                "q {q}: covered {covered} of {trials}"
            );
        }
    }

    /// A 30% shift of the whole distribution at 100 values each: found at p50 and p95 (the 10
    /// values above the pooled p95 all of the shifted run's: about 2^-10), and its interval
    /// holds the true ratio 1.3.
    #[test]
    fn a_large_shift_is_detected_and_bounded() {
        let a = uniform(1, 100, 0.13);
        let b = uniform(2, 100, 0.10);
        for q in [0.5, 0.95] {
            let p = quantile_shift_p(&a, &b, q, 1.0, true);
            assert!(p < 1e-3, "q {q}: {p}");
            let [lo, hi] = ratio_interval(&a, &b, q, 0.95).unwrap();
            assert!(lo > 1.0 && lo <= 1.3 && 1.3 <= hi, "q {q}: {lo} {hi}");
        }
    }

    /// A thousand values kept as 512: the counts below a threshold are bounded by the ranks
    /// kept, the bounds hold the true count, and the test stays close to the full one.
    #[test]
    fn a_compact_distribution_bounds_its_counts() {
        let all: Vec<f64> = (0..1000).map(|i| f64::from(i) / 1000.0).collect();
        let d = Distribution::of(all.iter().copied()).unwrap();
        assert_eq!((d.n, d.values.len()), (1000, KEPT));
        assert_eq!((d.values[0], d.values[KEPT - 1]), (0.0, 0.999));
        assert_eq!(d.damaged(), None);
        for t in [0.0005, 0.25, 0.5001, 0.9, 0.9995, 2.0] {
            let truth = all.iter().filter(|&&v| v <= t).count() as u64;
            let (lo, hi) = d.count_below(t, 1.0, true);
            assert!(
                lo <= truth && truth <= hi && hi - lo <= 2,
                "{t}: {lo} {truth} {hi}"
            );
        }
        // Exact when every value is kept.
        let small = Distribution::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!(small.count_below(2.0, 1.0, true), (2, 2));
        assert_eq!(small.count_below(2.0, 1.0, false), (1, 1));
        assert_eq!(small.count_below(0.5, 1.0, false), (0, 0));
        // Damage read from a file is named.
        let bad = Distribution {
            n: 3,
            values: vec![2.0, 1.0, 3.0],
        };
        assert_eq!(bad.damaged(), Some("its values are not sorted"));
        let bad = Distribution {
            n: 2,
            values: vec![1.0, 2.0, 3.0],
        };
        assert!(bad.damaged().is_some());
        let bad = Distribution {
            n: u64::MAX,
            values: vec![1.0, 2.0],
        };
        assert!(bad.damaged().is_some());
        assert!(Distribution::of([f64::NAN]).is_none());
    }

    /// Values are kept to 6 significant digits, in order.
    #[test]
    fn kept_values_are_rounded_to_six_digits() {
        let d = Distribution::of([0.123_456_789, 2.000_000_4]).unwrap();
        assert_eq!(d.values, vec![0.123_457, 2.0]);
    }
}
