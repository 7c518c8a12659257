//! `--rate-limit N/D`: a fixed-window request quota, stated on every answer in the rate-limit
//! headers of one vendor's spelling (`--rate-limit-headers`), and a 429 with `retry-after` once the
//! window's requests are spent: what a provider's gateway does, so a prober's headroom gauges
//! have a real server to read. The window and the clock are passed in (pure but for the counter's
//! lock).

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Whose header names the quota is written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Style {
    /// `x-ratelimit-{limit,remaining,reset}-requests`, the reset a Go duration.
    Openai,
    /// `anthropic-ratelimit-requests-{limit,remaining,reset}`, the reset an RFC 3339 instant.
    Anthropic,
    /// The IETF draft's `RateLimit-Policy: "sim";q=N;w=W` and `RateLimit: "sim";r=R;t=T`.
    Ietf,
}

/// `N/D`: N requests per window of D.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests per window.
    pub requests: u64,
    /// The window.
    pub window: Duration,
}

impl std::str::FromStr for Quota {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("--rate-limit {s:?}: expected REQUESTS/WINDOW, e.g. 60/1m");
        let (n, d) = s.split_once('/').ok_or_else(bad)?;
        let requests: u64 = n.trim().parse().map_err(|_| bad())?;
        let window = humantime::parse_duration(d.trim()).map_err(|_| bad())?;
        if requests == 0 || window.is_zero() {
            return Err(bad());
        }
        Ok(Quota { requests, window })
    }
}

/// The quota's state: the current window's start and the requests counted in it.
#[derive(Debug)]
pub struct Limiter {
    quota: Quota,
    style: Style,
    state: Mutex<(Instant, u64)>,
}

/// What the limiter says of one request: let through or not, and the headers to answer with.
#[derive(Debug, PartialEq)]
pub struct Verdict {
    /// False: answer 429.
    pub allowed: bool,
    /// The quota's headers (and `retry-after` when refused).
    pub headers: Vec<(&'static str, String)>,
}

impl Verdict {
    /// Let through, with no headers (no quota).
    pub const NONE: Verdict = Verdict {
        allowed: true,
        headers: Vec::new(),
    };

    /// The headers as the response head takes them.
    pub fn pairs(&self) -> Vec<(&str, &str)> {
        self.headers.iter().map(|(n, v)| (*n, v.as_str())).collect()
    }
}

impl Limiter {
    /// A limiter whose first window starts at `start`.
    pub fn new(quota: Quota, style: Style, start: Instant) -> Self {
        Limiter {
            quota,
            style,
            state: Mutex::new((start, 0)),
        }
    }

    /// Counts a request arriving at `now` (`wall`: the same instant on the wall clock).
    pub fn take(&self, now: Instant, wall: SystemTime) -> Verdict {
        let (allowed, used, reset) = {
            let mut st = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            while now >= st.0 + self.quota.window {
                st.0 += self.quota.window;
                st.1 = 0;
            }
            let allowed = st.1 < self.quota.requests;
            if allowed {
                st.1 += 1;
            }
            (allowed, st.1, st.0 + self.quota.window - now)
        };
        let (limit, remaining) = (self.quota.requests, self.quota.requests - used);
        let mut headers = match self.style {
            Style::Openai => vec![
                ("x-ratelimit-limit-requests", limit.to_string()),
                ("x-ratelimit-remaining-requests", remaining.to_string()),
                (
                    "x-ratelimit-reset-requests",
                    format!("{}ms", reset.as_millis()),
                ),
            ],
            Style::Anthropic => vec![
                ("anthropic-ratelimit-requests-limit", limit.to_string()),
                (
                    "anthropic-ratelimit-requests-remaining",
                    remaining.to_string(),
                ),
                (
                    "anthropic-ratelimit-requests-reset",
                    chrono::DateTime::<chrono::Utc>::from(wall + reset)
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                ),
            ],
            Style::Ietf => vec![
                (
                    "ratelimit-policy",
                    format!("\"sim\";q={limit};w={}", self.quota.window.as_secs().max(1)),
                ),
                (
                    "ratelimit",
                    format!("\"sim\";r={remaining};t={}", reset.as_secs_f64().ceil()),
                ),
            ],
        };
        if !allowed {
            headers.push(("retry-after", format!("{}", reset.as_secs_f64().ceil())));
        }
        Verdict { allowed, headers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_its_requests_and_refuses_past_its_quota() {
        let q: Quota = "2/10s".parse().unwrap();
        let t0 = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_735_689_600);
        let l = Limiter::new(q, Style::Openai, t0);
        let at = |s: u64| (t0 + Duration::from_secs(s), wall + Duration::from_secs(s));
        let v = l.take(at(1).0, at(1).1);
        assert!(v.allowed);
        assert_eq!(
            v.headers,
            [
                ("x-ratelimit-limit-requests", "2".to_owned()),
                ("x-ratelimit-remaining-requests", "1".to_owned()),
                ("x-ratelimit-reset-requests", "9000ms".to_owned()),
            ]
        );
        assert!(l.take(at(2).0, at(2).1).allowed);
        let refused = l.take(at(4).0, at(4).1);
        assert!(!refused.allowed);
        assert!(refused.headers.contains(&("retry-after", "6".to_owned())));
        // The next window starts afresh.
        assert!(l.take(at(12).0, at(12).1).allowed);
        // What the prober reads from each style: the same quota.
        for style in [Style::Openai, Style::Anthropic, Style::Ietf] {
            let l = Limiter::new(q, style, t0);
            let v = l.take(at(1).0, at(1).1);
            let h: Vec<(&str, &str)> = v.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let r = crate::ratelimit::read(&h, at(1).1);
            assert_eq!(r.len(), 1, "{style:?}");
            assert_eq!(
                (r[0].limit, r[0].remaining, r[0].reset_s),
                (Some(2.0), Some(1.0), Some(9.0)),
                "{style:?}: {h:?}"
            );
        }
    }

    #[test]
    fn bad_quotas_are_refused() {
        for s in ["", "10", "0/1s", "10/0s", "x/1s", "10/soon"] {
            assert!(s.parse::<Quota>().is_err(), "{s}");
        }
    }
}
