//! How sure a level's figures are (pure): distribution-free intervals for percentiles, from order
//! statistics, and the Wilson score interval for a share such as SLO attainment. Both at 95%.
//!
//! A percentile's interval is `[x(l), x(u)]`, two of the level's own sorted values, whose ranks
//! come from the binomial distribution of how many values fall below the true percentile; it
//! assumes nothing about the latency distribution. When the level is too short for such ranks to
//! exist (p99 needs at least 368 values for a 95% interval), there is no interval: the report
//! says "not enough samples" rather than an interval that is not one.

/// The two-sided confidence of every interval here.
pub const CONFIDENCE: f64 = 0.95;

/// The standard normal quantile of `1 - (1 - CONFIDENCE) / 2`.
const Z: f64 = 1.959_963_984_540_054;

/// The 95% distribution-free interval of the `q`-quantile of `sorted` (ascending), as two of its
/// values; `None` when there are too few values for one (or `q` is not inside `(0, 1)`).
pub fn quantile_interval(sorted: &[f64], q: f64) -> Option<[f64; 2]> {
    let (l, u) = quantile_ranks(sorted.len() as u64, q)?;
    Some([sorted[(l - 1) as usize], sorted[(u - 1) as usize]])
}

/// The 1-based ranks `(l, u)` with `P(x(l) <= ξq <= x(u)) >= 95%` for `n` values: `l` the largest
/// rank with `P(B < l) <= 2.5%`, `u` the smallest with `P(B < u) >= 97.5%`, where `B ~ Bin(n, q)`
/// counts the values below the true quantile `ξq`. `None` when either falls outside `1..=n`.
pub fn quantile_ranks(n: u64, q: f64) -> Option<(u64, u64)> {
    if n == 0 || !(q > 0.0 && q < 1.0) {
        return None;
    }
    let tail = (1.0 - CONFIDENCE) / 2.0;
    // The binomial CDF, term by term in log space (no underflow of (1 - q)^n for large n).
    let (lq, lp) = ((1.0 - q).ln(), (q / (1.0 - q)).ln());
    let mut log_pmf = n as f64 * lq;
    let mut cdf = 0.0; // P(B <= j - 1) before term j is added
    let mut l = None;
    let mut u = None;
    for j in 0..=n {
        // Here cdf = P(B < j).
        if cdf <= tail {
            l = Some(j);
        }
        if u.is_none() && cdf >= 1.0 - tail {
            u = Some(j);
            break;
        }
        cdf += log_pmf.exp();
        if j < n {
            log_pmf += ((n - j) as f64).ln() - ((j + 1) as f64).ln() + lp;
        }
    }
    let (l, u) = (l?, u?);
    (l >= 1 && u <= n).then_some((l, u))
}

/// The Wilson score interval (95%) of a share `k` of `n`; `None` for `n = 0`.
pub fn wilson(k: u64, n: u64) -> Option<[f64; 2]> {
    wilson_z(k, n, Z)
}

/// The Wilson score interval of a share `k` of `n` at the standard normal quantile `z` (1.96 for
/// 95%, two-sided); `None` for `n = 0`.
pub fn wilson_z(k: u64, n: u64, z: f64) -> Option<[f64; 2]> {
    if n == 0 {
        return None;
    }
    let n_all = n;
    let p = k.min(n) as f64 / n as f64;
    let n = n as f64;
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    // At the ends the interval reaches 0 or 1 exactly (the formula's rounding falls short).
    let lo = if k == 0 {
        0.0
    } else {
        (centre - half).max(0.0)
    };
    let hi = if k >= n_all {
        1.0
    } else {
        (centre + half).min(1.0)
    };
    Some([lo, hi])
}

/// The fewest values for which the `q`-quantile has a 95% interval.
pub fn min_samples(q: f64) -> u64 {
    (1..=100_000)
        .find(|&n| quantile_ranks(n, q).is_some())
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p99_needs_368_values_p95_72_and_the_median_6() {
        // The top rank exists once q^n <= 2.5% (all n values below the true quantile is that
        // unlikely): 0.99^367 = 0.02501, 0.99^368 = 0.02476; 0.95^72 = 0.0249; 0.5^6 = 0.0156.
        assert_eq!(min_samples(0.99), 368);
        assert_eq!(min_samples(0.95), 72);
        assert_eq!(min_samples(0.5), 6);
        assert!(quantile_ranks(367, 0.99).is_none());
        assert!(quantile_ranks(368, 0.99).is_some());
    }

    #[test]
    fn median_ranks_match_the_binomial_table() {
        // n = 100: the classical 95% ranks of the median are 40 and 61.
        assert_eq!(quantile_ranks(100, 0.5), Some((40, 61)));
        // n = 6: the extremes.
        assert_eq!(quantile_ranks(6, 0.5), Some((1, 6)));
    }

    /// The interval covers the true quantile in about 95% of levels (at least 95%: the ranks are
    /// conservative), checked on uniform values whose true quantiles are known.
    #[test]
    fn the_interval_covers_the_true_quantile_at_least_95_percent_of_the_time() {
        let mut rng = crate::rng::Rng::new(7);
        for (q, n) in [(0.5, 50), (0.95, 200), (0.99, 1000)] {
            let trials = 2000;
            let mut covered = 0;
            for _ in 0..trials {
                let mut v: Vec<f64> = (0..n).map(|_| rng.unit()).collect();
                v.sort_by(f64::total_cmp);
                let [a, b] = quantile_interval(&v, q).expect("enough values");
                if a <= q && q <= b {
                    covered += 1;
                }
            }
            let share = f64::from(covered) / f64::from(trials);
            assert!((0.94..=0.99).contains(&share), "q {q}, n {n}: {share}");
        }
    }

    #[test]
    fn wilson_matches_its_formula_at_known_points() {
        // 95 of 100: [0.888, 0.978] (Wilson 1927; e.g. any statistics table).
        let [a, b] = wilson(95, 100).unwrap();
        assert!(
            (a - 0.8882).abs() < 5e-4 && (b - 0.9785).abs() < 5e-4,
            "{a} {b}"
        );
        // All met: the upper bound is 1, the lower one below it.
        let [a, b] = wilson(20, 20).unwrap();
        assert!(b == 1.0 && (a - 0.8389).abs() < 5e-4, "{a} {b}");
        assert_eq!(wilson(0, 0), None);
        let [a, _] = wilson(0, 10).unwrap();
        assert_eq!(a, 0.0);
    }

    #[test]
    fn large_levels_do_not_underflow() {
        let (l, u) = quantile_ranks(1_000_000, 0.5).unwrap();
        assert!(l < 500_000 && u > 500_000 && u - l < 3000, "{l} {u}");
    }
}
