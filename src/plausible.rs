//! What a number another server states must be to be taken as data (pure): finite, not
//! negative, and at most [`MAX`]. One rule for the server metrics a bench scrapes
//! (`servermetrics::level`) and the quotas an answer's rate-limit headers state (`ratelimit`):
//! a value that breaks it is left out, counted and named, never shown as a figure.

/// Values beyond this are no server's figure (a gauge at 1e306 averaged GPU utilisation to 0%; a
/// rate limit of 1.8e19 is `u64::MAX`, a sentinel, not a quota).
pub const MAX: f64 = 1e16;

/// Why `v` is not data (`None`: it is).
pub fn invalid(v: f64) -> Option<&'static str> {
    if !v.is_finite() {
        Some("not a finite number")
    } else if v < 0.0 {
        Some("negative (no server signal is)")
    } else if v > MAX {
        Some("implausibly large")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule() {
        for (v, why) in [
            (f64::NAN, Some("not a finite number")),
            (f64::INFINITY, Some("not a finite number")),
            (-1.0, Some("negative (no server signal is)")),
            (1e308, Some("implausibly large")),
            (1.8e19, Some("implausibly large")),
            (0.0, None),
            (-0.0, None),
            (MAX, None),
        ] {
            assert_eq!(invalid(v), why, "{v}");
        }
    }
}
