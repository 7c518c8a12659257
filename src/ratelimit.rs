//! Rate-limit headroom from an answer's headers (pure: header pairs and the wall clock in,
//! [`QuotaState`]s out). What a provider says about the caller's quota: its limit, what is left of it,
//! and how long until it resets, by kind (requests, tokens; input and output tokens where the
//! vendor splits them). Three spellings are read:
//!
//! - OpenAI (and the gateways that copy it): `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`,
//!   the reset a Go duration (`1s`, `6m0s`, `20ms`).
//! - Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`,
//!   the reset an RFC 3339 instant.
//! - The IETF draft (draft-ietf-httpapi-ratelimit-headers): `RateLimit-Limit`, `RateLimit-Remaining`,
//!   `RateLimit-Reset` (seconds), or the structured `RateLimit: "p";r=50;t=30` with
//!   `RateLimit-Policy: "p";q=100;w=60` (and the earlier `RateLimit: limit=100, remaining=50, reset=30`).
//!   Its quota unit is requests unless the policy's `qu` says otherwise (other units are not read).
//!
//! A value that is not a number is no value. A number that is not data by the rule server metrics
//! have (`plausible::invalid`: not finite, negative, over 1e16) is left out and named in the
//! reading's `left_out`, as is a `remaining` above its `limit` (one of the two is wrong and
//! nothing says which, so both go); `-0` is 0; a reset instant already past is 0 s.

use std::time::SystemTime;

/// What a quota counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Requests.
    Requests,
    /// Tokens (input and output together).
    Tokens,
    /// Input tokens (Anthropic).
    InputTokens,
    /// Output tokens (Anthropic).
    OutputTokens,
}

impl Kind {
    /// Every kind, in label order.
    pub const ALL: [Kind; 4] = [
        Kind::Requests,
        Kind::Tokens,
        Kind::InputTokens,
        Kind::OutputTokens,
    ];

    /// The `kind` label: `requests`, `tokens`, `input_tokens`, `output_tokens`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Requests => "requests",
            Kind::Tokens => "tokens",
            Kind::InputTokens => "input_tokens",
            Kind::OutputTokens => "output_tokens",
        }
    }

    /// The kind's part of Anthropic's and OpenAI's header names.
    fn header_part(self) -> &'static str {
        match self {
            Kind::Requests => "requests",
            Kind::Tokens => "tokens",
            Kind::InputTokens => "input-tokens",
            Kind::OutputTokens => "output-tokens",
        }
    }
}

/// One quota as an answer stated it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QuotaState {
    /// What it counts.
    pub kind: Kind,
    /// The quota per window.
    pub limit: Option<f64>,
    /// What is left of it.
    pub remaining: Option<f64>,
    /// Seconds until it resets.
    pub reset_s: Option<f64>,
    /// The values the headers stated that are not data, left out of the fields above, each
    /// named with why (`limit 1e308: implausibly large`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
}

impl QuotaState {
    /// A reading of `kind` stating nothing.
    fn none(kind: Kind) -> Self {
        QuotaState {
            kind,
            limit: None,
            remaining: None,
            reset_s: None,
            left_out: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.limit.is_none() && self.remaining.is_none() && self.reset_s.is_none()
    }

    /// The reading with what is not data left out and named in `left_out`: a number the
    /// plausibility rule refuses ([`crate::plausible::invalid`], the rule of server metrics),
    /// then a `remaining` above its `limit` (both go: nothing says which is wrong). `-0` is 0.
    fn checked(mut self) -> Self {
        let fields = [
            ("limit", &mut self.limit),
            ("remaining", &mut self.remaining),
            ("reset", &mut self.reset_s),
        ];
        for (name, field) in fields {
            let Some(v) = *field else { continue };
            match crate::plausible::invalid(v) {
                Some(why) => {
                    self.left_out.push(format!("{name} {v:?}: {why}"));
                    *field = None;
                }
                // Adding +0 turns -0 into 0 and leaves every other number as it is.
                None => *field = Some(v + 0.0),
            }
        }
        if let (Some(limit), Some(remaining)) = (self.limit, self.remaining)
            && remaining > limit
        {
            self.left_out.push(format!(
                "remaining {} above its limit {}: both left out",
                crate::units::trim_float(remaining),
                crate::units::trim_float(limit)
            ));
            (self.limit, self.remaining) = (None, None);
        }
        self
    }
}

/// The quotas an answer's headers state (names lower-case), at most one reading per kind; `now`
/// is the wall clock when the head came (Anthropic's reset is an instant).
pub fn read<'a>(headers: &[(&'a str, &'a str)], now: SystemTime) -> Vec<QuotaState> {
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    let mut out = Vec::new();
    for kind in Kind::ALL {
        let k = kind.header_part();
        let openai = QuotaState {
            kind,
            limit: get(&format!("x-ratelimit-limit-{k}")).and_then(number),
            remaining: get(&format!("x-ratelimit-remaining-{k}")).and_then(number),
            reset_s: get(&format!("x-ratelimit-reset-{k}")).and_then(go_duration),
            left_out: Vec::new(),
        };
        let anthropic = QuotaState {
            kind,
            limit: get(&format!("anthropic-ratelimit-{k}-limit")).and_then(number),
            remaining: get(&format!("anthropic-ratelimit-{k}-remaining")).and_then(number),
            reset_s: get(&format!("anthropic-ratelimit-{k}-reset")).and_then(|v| instant(v, now)),
            left_out: Vec::new(),
        };
        let ietf = if kind == Kind::Requests {
            ietf(&get)
        } else {
            QuotaState::none(kind)
        };
        if let Some(r) = [openai, anthropic, ietf]
            .into_iter()
            .find(|r| !r.is_empty())
        {
            out.push(r.checked());
        }
    }
    out
}

/// A number as written (`60`, `1e308`, `-0`, `NaN`: whether it is data is
/// [`QuotaState::checked`]'s).
fn number(v: &str) -> Option<f64> {
    v.parse::<f64>().ok()
}

/// A Go duration as OpenAI writes resets (`1s`, `6m0s`, `1h2m3.5s`, `20ms`, `150us`), or plain
/// seconds.
fn go_duration(v: &str) -> Option<f64> {
    if let Some(s) = number(v) {
        return Some(s);
    }
    let (mut total, mut rest) = (0.0, v);
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let n: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Some(total)
}

/// Seconds from `now` to an RFC 3339 instant (0 when past).
fn instant(v: &str, now: SystemTime) -> Option<f64> {
    let at = chrono::DateTime::parse_from_rfc3339(v).ok()?;
    let now = chrono::DateTime::<chrono::Utc>::from(now);
    let d = at.signed_duration_since(now);
    Some((d.num_microseconds()? as f64 / 1e6).max(0.0))
}

/// The IETF draft's headers: the separate fields, else the structured `RateLimit` (with
/// `RateLimit-Policy`'s quota), else the earlier combined `RateLimit: limit=…, remaining=…`.
fn ietf<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> QuotaState {
    let mut r = QuotaState {
        kind: Kind::Requests,
        limit: get("ratelimit-limit").and_then(first_number),
        remaining: get("ratelimit-remaining").and_then(number),
        reset_s: get("ratelimit-reset").and_then(number),
        left_out: Vec::new(),
    };
    if !r.is_empty() {
        return r;
    }
    let params = |v: &'a str| -> Vec<(&'a str, &'a str)> {
        // The first item only: `"name";k=v;k=v, "other";...` or `k=v, k=v`.
        let item = if v.starts_with('"') {
            v.split(',').next().unwrap_or_default()
        } else {
            v
        };
        item.split([';', ','])
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
            .collect()
    };
    let field = |ps: &[(&str, &'a str)], keys: &[&str]| {
        ps.iter()
            .find(|(k, _)| keys.contains(k))
            .and_then(|(_, v)| number(v))
    };
    let policy = get("ratelimit-policy").map(params).unwrap_or_default();
    if policy.iter().any(|(k, v)| *k == "qu" && *v != "requests") {
        return r;
    }
    if let Some(v) = get("ratelimit") {
        let ps = params(v);
        r.remaining = field(&ps, &["r", "remaining"]);
        r.reset_s = field(&ps, &["t", "reset"]);
        r.limit = field(&ps, &["limit"]).or_else(|| field(&policy, &["q"]));
    }
    r
}

/// The first number of a list (`RateLimit-Limit: 100, 100;w=60` in the early drafts).
fn first_number(v: &str) -> Option<f64> {
    number(v.split([',', ';']).next().unwrap_or_default().trim())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at() -> SystemTime {
        // 2025-01-01T00:00:00Z
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_735_689_600)
    }

    fn reading(kind: Kind, limit: f64, remaining: f64, reset_s: f64) -> QuotaState {
        QuotaState {
            kind,
            limit: Some(limit),
            remaining: Some(remaining),
            reset_s: Some(reset_s),
            left_out: Vec::new(),
        }
    }

    /// The example in OpenAI's rate-limit guide (platform.openai.com/docs/guides/rate-limits,
    /// "Rate limits in headers").
    #[test]
    fn openais_headers() {
        let h = [
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ];
        assert_eq!(
            read(&h, at()),
            [
                reading(Kind::Requests, 60.0, 59.0, 1.0),
                reading(Kind::Tokens, 150_000.0, 149_984.0, 360.0)
            ]
        );
    }

    /// The headers of Anthropic's API reference (docs.anthropic.com, "Rate limits", response
    /// headers): resets are RFC 3339 instants, input and output tokens have their own.
    #[test]
    fn anthropics_headers() {
        let h = [
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "49"),
            ("anthropic-ratelimit-requests-reset", "2025-01-01T00:00:01Z"),
            ("anthropic-ratelimit-tokens-limit", "100000"),
            ("anthropic-ratelimit-tokens-remaining", "99000"),
            ("anthropic-ratelimit-tokens-reset", "2025-01-01T00:00:30.5Z"),
            ("anthropic-ratelimit-input-tokens-limit", "80000"),
            ("anthropic-ratelimit-input-tokens-remaining", "79500"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2024-12-31T23:59:59Z",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "16000"),
            ("anthropic-ratelimit-output-tokens-remaining", "15900"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2025-01-01T00:01:00+00:00",
            ),
        ];
        assert_eq!(
            read(&h, at()),
            [
                reading(Kind::Requests, 50.0, 49.0, 1.0),
                reading(Kind::Tokens, 100_000.0, 99_000.0, 30.5),
                reading(Kind::InputTokens, 80_000.0, 79_500.0, 0.0),
                reading(Kind::OutputTokens, 16_000.0, 15_900.0, 60.0),
            ]
        );
    }

    /// The IETF draft's three spellings: separate fields (drafts 00-06), the combined field
    /// (07), and structured fields with a policy (08 on).
    #[test]
    fn the_ietf_drafts_headers() {
        let separate = [
            ("ratelimit-limit", "100, 100;w=60"),
            ("ratelimit-remaining", "50"),
            ("ratelimit-reset", "30"),
        ];
        let want = [reading(Kind::Requests, 100.0, 50.0, 30.0)];
        assert_eq!(read(&separate, at()), want);
        let combined = [("ratelimit", "limit=100, remaining=50, reset=30")];
        assert_eq!(read(&combined, at()), want);
        let structured = [
            ("ratelimit-policy", "\"default\";q=100;w=60"),
            ("ratelimit", "\"default\";r=50;t=30"),
        ];
        assert_eq!(read(&structured, at()), want);
        // Another unit than requests is not a request quota.
        let bytes = [
            ("ratelimit-policy", "\"b\";q=1000;qu=\"content-bytes\""),
            ("ratelimit", "\"b\";r=10;t=5"),
        ];
        assert_eq!(read(&bytes, at()), []);
    }

    #[test]
    fn what_is_not_a_quota_is_no_value() {
        assert_eq!(read(&[("content-type", "text/event-stream")], at()), []);
        let h = [
            ("x-ratelimit-limit-requests", "-1"),
            ("x-ratelimit-remaining-requests", "NaN"),
            ("x-ratelimit-reset-requests", "soon"),
            ("x-ratelimit-remaining-tokens", "12"),
            ("x-ratelimit-reset-tokens", "1x"),
        ];
        assert_eq!(
            read(&h, at()),
            [
                QuotaState {
                    kind: Kind::Requests,
                    limit: None,
                    remaining: None,
                    reset_s: None,
                    left_out: vec![
                        "limit -1.0: negative (no server signal is)".into(),
                        "remaining NaN: not a finite number".into()
                    ]
                },
                QuotaState {
                    kind: Kind::Tokens,
                    limit: None,
                    remaining: Some(12.0),
                    reset_s: None,
                    left_out: Vec::new(),
                }
            ]
        );
    }

    /// The quota's values of `read(h)`'s one reading of `kind`.
    fn values(h: &[(&str, &str)], kind: Kind) -> (Option<f64>, Option<f64>, Option<f64>) {
        let r = read(h, at());
        let q = r.iter().find(|q| q.kind == kind).expect("a reading");
        (q.limit, q.remaining, q.reset_s)
    }

    /// What `read(h)`'s reading of `kind` left out.
    fn left_out(h: &[(&str, &str)], kind: Kind) -> Vec<String> {
        let r = read(h, at());
        let q = r.iter().find(|q| q.kind == kind).expect("a reading");
        q.left_out.clone()
    }

    /// Issue 39: limits of 1e308 and 1.8e19 (`u64::MAX`, a sentinel) are no quota; the
    /// plausibility rule of server metrics leaves them out.
    #[test]
    fn an_implausible_limit_is_left_out() {
        for limit in ["1e308", "18446744073709551615"] {
            let h = [
                ("x-ratelimit-limit-requests", limit),
                ("x-ratelimit-remaining-requests", "59"),
                ("x-ratelimit-reset-requests", "1s"),
            ];
            assert_eq!(
                values(&h, Kind::Requests),
                (None, Some(59.0), Some(1.0)),
                "{limit}"
            );
        }
        let h = [("x-ratelimit-limit-requests", "18446744073709551615")];
        assert_eq!(
            left_out(&h, Kind::Requests),
            ["limit 1.8446744073709552e19: implausibly large"]
        );
        let h = [
            ("anthropic-ratelimit-tokens-limit", "1e308"),
            ("anthropic-ratelimit-tokens-remaining", "99000"),
        ];
        assert_eq!(values(&h, Kind::Tokens), (None, Some(99_000.0), None));
    }

    /// Issue 39: a reset 1e21 s away (in any spelling) is no reset.
    #[test]
    fn an_implausible_reset_is_left_out() {
        for reset in ["1e21", "277777777777777777h"] {
            let h = [
                ("x-ratelimit-limit-requests", "60"),
                ("x-ratelimit-reset-requests", reset),
            ];
            assert_eq!(
                values(&h, Kind::Requests),
                (Some(60.0), None, None),
                "{reset}"
            );
        }
        let h = [("ratelimit-limit", "100"), ("ratelimit-reset", "1e21")];
        assert_eq!(values(&h, Kind::Requests), (Some(100.0), None, None));
        assert_eq!(
            left_out(&h, Kind::Requests),
            ["reset 1e21: implausibly large"]
        );
        // A reset that is all there was, and not data: the reading says so, with no value.
        let h = [("x-ratelimit-reset-tokens", "1e21")];
        assert_eq!(values(&h, Kind::Tokens), (None, None, None));
    }

    /// Issue 39: `remaining` 200 above a `limit` of 100: one of the two is wrong, and nothing
    /// says which, so the pair is left out (the reset stays).
    #[test]
    fn remaining_above_its_limit_leaves_out_the_pair() {
        for remaining in ["200", "300"] {
            let h = [
                ("x-ratelimit-limit-requests", "100"),
                ("x-ratelimit-remaining-requests", remaining),
                ("x-ratelimit-reset-requests", "1s"),
            ];
            assert_eq!(
                values(&h, Kind::Requests),
                (None, None, Some(1.0)),
                "{remaining}"
            );
        }
        let h = [("ratelimit", "limit=100, remaining=300, reset=30")];
        assert_eq!(values(&h, Kind::Requests), (None, None, Some(30.0)));
        assert_eq!(
            left_out(&h, Kind::Requests),
            ["remaining 300 above its limit 100: both left out"]
        );
        // At the limit is within it.
        let h = [
            ("x-ratelimit-limit-requests", "100"),
            ("x-ratelimit-remaining-requests", "100"),
        ];
        assert_eq!(values(&h, Kind::Requests), (Some(100.0), Some(100.0), None));
    }

    /// Issue 39: `-0` is 0, never a gauge at `-0.0`.
    #[test]
    fn negative_zero_is_zero() {
        let h = [
            ("x-ratelimit-limit-requests", "-0.0"),
            ("x-ratelimit-remaining-requests", "-0"),
            ("x-ratelimit-reset-requests", "-0"),
        ];
        let (l, r, t) = values(&h, Kind::Requests);
        for v in [l, r, t] {
            let v = v.expect("0 is a value");
            assert!(v == 0.0 && v.is_sign_positive(), "{v:?}");
        }
        let h = [
            ("ratelimit", "\"p\";r=-0;t=-0.0"),
            ("ratelimit-policy", "\"p\";q=-0"),
        ];
        let (l, r, t) = values(&h, Kind::Requests);
        for v in [l, r, t] {
            let v = v.expect("0 is a value");
            assert!(v == 0.0 && v.is_sign_positive(), "{v:?}");
        }
    }

    #[test]
    fn go_durations() {
        for (v, s) in [
            ("1s", 1.0),
            ("6m0s", 360.0),
            ("1h2m3.5s", 3723.5),
            ("20ms", 0.02),
            ("150us", 0.000_15),
            ("2.5", 2.5),
        ] {
            assert!((go_duration(v).unwrap() - s).abs() < 1e-12, "{v}");
        }
        for v in ["", "s", "-1s", "1d", "1.2.3s"] {
            assert_eq!(go_duration(v), None, "{v}");
        }
    }
}
