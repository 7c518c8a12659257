//! Token lengths: a fixed number or a distribution (`uniform`, `normal`, `lognormal`) clamped to
//! `[min, max]`, drawn from the crate's seeded generator.

use crate::rng::Rng;

/// The largest length a prompt may ask for (input or output tokens): far above any model's
/// context, small enough that one request's filler text stays a few MiB.
pub const MAX_TOKENS: u32 = 1 << 20;

/// How many tokens to ask for, per request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Length {
    /// Always this many.
    Fixed(u32),
    /// Every whole number in `[min, max]` equally likely.
    Uniform {
        /// Smallest.
        min: u32,
        /// Largest.
        max: u32,
    },
    /// Normal with this mean and standard deviation, rounded, clamped to `[min, max]`.
    Normal {
        /// Mean (before clamping).
        mean: f64,
        /// Standard deviation (before clamping).
        stddev: f64,
        /// Clamp below.
        min: u32,
        /// Clamp above.
        max: u32,
    },
    /// Log-normal whose own mean and standard deviation (in tokens, not of the logarithm) are
    /// these, rounded, clamped to `[min, max]`: `σ² = ln(1 + stddev²/mean²)`, `μ = ln(mean) − σ²/2`.
    Lognormal {
        /// Mean (before clamping).
        mean: f64,
        /// Standard deviation (before clamping).
        stddev: f64,
        /// Clamp below.
        min: u32,
        /// Clamp above.
        max: u32,
    },
}

// Validated lengths hold finite numbers only, so equality is an equivalence.
impl Eq for Length {}

/// One standard normal value (Box–Muller, one of the pair).
fn standard_normal(rng: &mut Rng) -> f64 {
    let u1 = 1.0 - rng.unit(); // (0, 1]: ln is finite
    let u2 = rng.unit();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn clamp(x: f64, min: u32, max: u32) -> u32 {
    if x.is_nan() {
        return min;
    }
    x.round().clamp(f64::from(min), f64::from(max)) as u32
}

impl Length {
    /// One draw.
    pub(crate) fn draw(&self, rng: &mut Rng) -> u32 {
        match *self {
            Length::Fixed(n) => n,
            Length::Uniform { min, max } => min + rng.below(u64::from(max - min) + 1) as u32,
            Length::Normal {
                mean,
                stddev,
                min,
                max,
            } => clamp(mean + stddev * standard_normal(rng), min, max),
            Length::Lognormal {
                mean,
                stddev,
                min,
                max,
            } => {
                let s2 = (1.0 + (stddev / mean).powi(2)).ln();
                let mu = mean.ln() - s2 / 2.0;
                clamp((mu + s2.sqrt() * standard_normal(rng)).exp(), min, max)
            }
        }
    }

    /// The mean before clamping (what a report states as "requested" on average is measured per
    /// request instead; this is for docs and tests).
    pub fn nominal_mean(&self) -> f64 {
        match *self {
            Length::Fixed(n) => f64::from(n),
            Length::Uniform { min, max } => (f64::from(min) + f64::from(max)) / 2.0,
            Length::Normal { mean, .. } | Length::Lognormal { mean, .. } => mean,
        }
    }

    /// The largest value a draw can give.
    pub fn max(&self) -> u32 {
        match *self {
            Length::Fixed(n) => n,
            Length::Uniform { max, .. }
            | Length::Normal { max, .. }
            | Length::Lognormal { max, .. } => max,
        }
    }

    /// The smallest value a draw can give.
    pub fn min(&self) -> u32 {
        match *self {
            Length::Fixed(n) => n,
            Length::Uniform { min, .. }
            | Length::Normal { min, .. }
            | Length::Lognormal { min, .. } => min,
        }
    }
}

/// `128`, `uniform 16-64`, `normal 100±10 in 1-200`, `lognormal 100±50 in 1-4096`.
impl std::fmt::Display for Length {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Length::Fixed(n) => write!(f, "{n}"),
            Length::Uniform { min, max } => write!(f, "uniform {min}-{max}"),
            Length::Normal {
                mean,
                stddev,
                min,
                max,
            } => write!(f, "normal {mean}±{stddev} in {min}-{max}"),
            Length::Lognormal {
                mean,
                stddev,
                min,
                max,
            } => write!(f, "lognormal {mean}±{stddev} in {min}-{max}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: usize = 40_000;

    fn draws(l: Length, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..N).map(|_| f64::from(l.draw(&mut rng))).collect()
    }

    fn moments(v: &[f64]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt())
    }

    fn within(x: f64, want: f64, rel: f64) -> bool {
        (x - want).abs() <= rel * want.abs()
    }

    /// Mean and standard deviation over 40,000 draws, against the distribution's own (the
    /// standard error of the mean is stddev/200, so 1% of the mean is > 5 standard errors for
    /// these shapes; the sample stddev's relative error is about 1/sqrt(2N) = 0.35%, bounded at 3%).
    #[test]
    fn moments_match_each_distribution() {
        let cases: [(Length, f64, f64); 5] = [
            (Length::Fixed(128), 128.0, 0.0),
            (
                Length::Uniform { min: 64, max: 256 },
                160.0,
                ((193.0f64 * 193.0 - 1.0) / 12.0).sqrt(),
            ),
            (
                Length::Normal {
                    mean: 1000.0,
                    stddev: 200.0,
                    min: 1,
                    max: MAX_TOKENS,
                },
                1000.0,
                200.0,
            ),
            (
                Length::Lognormal {
                    mean: 500.0,
                    stddev: 250.0,
                    min: 1,
                    max: MAX_TOKENS,
                },
                500.0,
                250.0,
            ),
            (
                Length::Lognormal {
                    mean: 2000.0,
                    stddev: 100.0,
                    min: 1,
                    max: MAX_TOKENS,
                },
                2000.0,
                100.0,
            ),
        ];
        for (l, mean, sd) in cases {
            let (m, s) = moments(&draws(l, 7));
            assert!(within(m, mean, 0.01), "{l:?}: mean {m}, want {mean}");
            if sd == 0.0 {
                assert_eq!(s, 0.0, "{l:?}");
            } else {
                assert!(within(s, sd, 0.03), "{l:?}: stddev {s}, want {sd}");
            }
            assert_eq!(l.nominal_mean(), mean);
        }
    }

    #[test]
    fn uniform_covers_every_value_and_only_those() {
        let v = draws(Length::Uniform { min: 3, max: 7 }, 1);
        for k in 3..=7 {
            let share = v.iter().filter(|x| **x == f64::from(k)).count() as f64 / N as f64;
            assert!(within(share, 0.2, 0.05), "{k}: {share}");
        }
        assert!(v.iter().all(|x| (3.0..=7.0).contains(x)));
        assert!(
            draws(Length::Uniform { min: 9, max: 9 }, 1)
                .iter()
                .all(|x| *x == 9.0)
        );
    }

    /// Clamps hold, and a clamp that cuts the distribution collects the cut mass at the bound.
    #[test]
    fn clamps_bound_every_draw() {
        for l in [
            Length::Normal {
                mean: 100.0,
                stddev: 50.0,
                min: 80,
                max: 120,
            },
            Length::Lognormal {
                mean: 100.0,
                stddev: 80.0,
                min: 80,
                max: 120,
            },
        ] {
            let v = draws(l, 3);
            assert!(v.iter().all(|x| (80.0..=120.0).contains(x)), "{l:?}");
            let at_min = v.iter().filter(|x| **x == 80.0).count() as f64 / N as f64;
            let at_max = v.iter().filter(|x| **x == 120.0).count() as f64 / N as f64;
            assert!(at_min > 0.15 && at_max > 0.1, "{l:?}: {at_min} {at_max}");
            assert_eq!((l.min(), l.max()), (80, 120));
        }
        // Normal(100, 50) below 80: P(z < -0.4) = 0.345.
        let v = draws(
            Length::Normal {
                mean: 100.0,
                stddev: 50.0,
                min: 80,
                max: 120,
            },
            9,
        );
        let at_min = v.iter().filter(|x| **x == 80.0).count() as f64 / N as f64;
        assert!(within(at_min, 0.345, 0.05), "{at_min}");
        // A zero stddev is the mean.
        assert!(
            draws(
                Length::Normal {
                    mean: 42.0,
                    stddev: 0.0,
                    min: 1,
                    max: 100
                },
                1
            )
            .iter()
            .all(|x| *x == 42.0)
        );
    }

    #[test]
    fn a_seed_fixes_the_sequence() {
        let l = Length::Lognormal {
            mean: 300.0,
            stddev: 100.0,
            min: 1,
            max: 4000,
        };
        assert_eq!(draws(l, 11), draws(l, 11));
        assert_ne!(draws(l, 11), draws(l, 12));
    }
}
