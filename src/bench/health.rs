//! Nothing sent in vain (pure): the connectivity check before a model's load, the early stop of
//! a load whose requests all fail with an error more load cannot change, a level stopped before
//! its amount ([`Stopped`]: kept, marked partial, never judged as whole), and the exit a run's
//! failures give.
//!
//! - **The check**: one unmeasured request per (model, prompt series) before any level, through
//!   the same prober as the load. A model whose check fails with an error that says the load
//!   cannot work ([`blocks_load`]: the route, the key, the request, the quota, the protocol) is not
//!   loaded ([`Check`] in its report says why) and the run exits [`Exit::CheckFailed`] unless
//!   `--keep-going`; a failure of the moment (a 429, a 500, a deadline) is said and the model is
//!   loaded.
//! - **The early stop**: a [`Streak`] of requests failing with an error more load cannot change
//!   ([`futile`]: `auth`, `bad_request`, `quota_exceeded`, and `connect` once the server was
//!   reached) with no success between them stops the model's load after
//!   [`STOP_AFTER_ERRORS`] of them (`--stop-after-errors`); its level is kept, partial, and its
//!   later levels are not run.
//! - **The exit** ([`unusable`], weighed with a run's other exits in [`super::run_exit`]): a
//!   failed check, a level where every request failed, or a load stopped early never exits 0.

use super::report::{ModelReport, Report};
use super::stats::{LevelStats, Sample};
use crate::exit::Exit;
use crate::measure::ProbeResult;
use crate::outcome::ErrorType;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Default of `--stop-after-errors`: the load of a model stops after this many requests in a
/// row failed with an error more load cannot change.
pub const STOP_AFTER_ERRORS: u32 = 10;

/// The most distinct first messages kept per error type of a stopped level.
pub const MESSAGES_PER_TYPE: usize = 3;

/// The longest message kept (a check's, or a stopped level's), in characters.
pub const MESSAGE_CHARS: usize = 1024;

/// How a run guards against sending in vain (`--no-check`, `--keep-going`,
/// `--stop-after-errors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthPlan {
    /// Send the connectivity check before the first level.
    pub check: bool,
    /// A model whose check failed is left out and the others run, without exiting
    /// [`Exit::CheckFailed`] for it.
    pub keep_going: bool,
    /// Stop a model's load after this many requests in a row failed with an error more load
    /// cannot change (0: never).
    pub stop_after: u32,
}

impl Default for HealthPlan {
    fn default() -> Self {
        HealthPlan {
            check: true,
            keep_going: false,
            stop_after: STOP_AFTER_ERRORS,
        }
    }
}

/// A series' connectivity check: one unmeasured request before its first level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// The model may be loaded: the request succeeded, or failed with an error of the moment
    /// (not [`blocks_load`]), said in `error_type` and `message`.
    pub ok: bool,
    /// Its `error_type`, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<ErrorType>,
    /// The HTTP status, when a response head came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// The failure's reason as the probe gave it (the server's message, secrets redacted), at
    /// most [`MESSAGE_CHARS`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How long it took, s.
    pub seconds: f64,
}

impl Check {
    /// The check a probe result makes, `seconds` long.
    pub fn of(r: &ProbeResult, seconds: f64) -> Check {
        Check {
            ok: r.error_type.is_none_or(|e| !blocks_load(e)),
            error_type: r.error_type,
            http_status: r.http_status,
            message: r
                .error_type
                .and(r.error_detail.as_deref())
                .map(|d| crate::units::truncate(d, MESSAGE_CHARS)),
            seconds,
        }
    }

    /// What it found, for people: `passed (HTTP 200, 212.3 ms)`, or `auth (HTTP 401): the
    /// server's message` (the message's own `HTTP 401: ` prefix not repeated).
    pub fn line(&self) -> String {
        let took = crate::units::fmt_secs(self.seconds);
        if self.ok && self.error_type.is_none() {
            return match self.http_status {
                Some(s) => format!("passed (HTTP {s}, {took})"),
                None => format!("passed ({took})"),
            };
        }
        let failure = self.failure();
        if self.ok {
            return format!("passed with a failure of the moment, the model is loaded: {failure}");
        }
        failure
    }

    /// The failure, `auth (HTTP 401): the server's message`.
    fn failure(&self) -> String {
        let kind = self.error_type.map_or("failed", ErrorType::as_str);
        let message = self.message.as_deref().unwrap_or_default();
        match self.http_status {
            Some(s) => {
                let message = message
                    .strip_prefix(&format!("HTTP {s}: "))
                    .or_else(|| message.strip_prefix(&format!("HTTP {s}")))
                    .unwrap_or(message);
                format!("{kind} (HTTP {s}): {message}")
            }
            None => format!("{kind}: {message}"),
        }
    }
}

/// True when a check failing with `e` says the load cannot work: no route to the server
/// (`proxy`, `connect`, `tls`, `timeout_connect`), a failure more load cannot change ([`futile`]),
/// or answers that are not the protocol's (`malformed`: the wrong `--api`, say). A 429, a 5xx, a
/// deadline or a cut stream are of the moment: the model is loaded and its levels measure them.
pub fn blocks_load(e: ErrorType) -> bool {
    futile(e, true)
        || matches!(
            e,
            ErrorType::Proxy | ErrorType::Tls | ErrorType::TimeoutConnect | ErrorType::Malformed
        )
}

/// True when more load cannot change a failure of type `e`: the key, the request or the quota is
/// wrong (`auth`, `bad_request`, `quota_exceeded`), or the server refuses connections after it
/// was `reached` (it answered this model's check or one of its requests).
pub fn futile(e: ErrorType, reached: bool) -> bool {
    match e {
        ErrorType::Auth | ErrorType::BadRequest | ErrorType::QuotaExceeded => true,
        ErrorType::Connect => reached,
        _ => false,
    }
}

/// The early stop's count for one series (model, prompt): requests that failed with a [`futile`]
/// error since its last success. Other failures neither count nor break it; a success ends it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Streak {
    limit: u32,
    reached: bool,
    run: u32,
    counts: BTreeMap<ErrorType, u64>,
    messages: BTreeMap<ErrorType, Vec<String>>,
    /// The first message of the streak.
    first: Option<String>,
    /// Why it tripped, said when it did.
    tripped: Option<String>,
}

impl Streak {
    /// A streak that trips at `limit` (0: never); `reached` when the server already answered
    /// (the check passed).
    pub fn new(limit: u32, reached: bool) -> Streak {
        Streak {
            limit,
            reached,
            ..Streak::default()
        }
    }

    /// Counts a finished request; true when this one trips the stop (once).
    pub fn record(&mut self, error_type: Option<ErrorType>, detail: Option<&str>) -> bool {
        match error_type {
            None => {
                self.reached = true;
                self.run = 0;
                self.counts.clear();
                self.messages.clear();
                self.first = None;
                false
            }
            Some(e) if futile(e, self.reached) => {
                self.run = self.run.saturating_add(1);
                *self.counts.entry(e).or_insert(0) += 1;
                if let Some(d) = detail {
                    keep_message(&mut self.messages, e, d);
                    if self.first.is_none() {
                        self.first = Some(crate::units::truncate(d, MESSAGE_CHARS));
                    }
                }
                if self.limit > 0 && self.run >= self.limit && self.tripped.is_none() {
                    self.tripped = Some(self.describe());
                    return true;
                }
                false
            }
            Some(_) => false,
        }
    }

    /// The stop tripped.
    pub fn tripped(&self) -> bool {
        self.tripped.is_some()
    }

    /// Why the load stopped, once tripped (as it was when it tripped): `10 requests in a row
    /// failed with auth (an error more load cannot change): HTTP 401: ...`.
    pub fn reason(&self) -> Option<String> {
        self.tripped.clone()
    }

    /// The streak so far, in words.
    fn describe(&self) -> String {
        let types: Vec<String> = self
            .counts
            .iter()
            .map(|(e, n)| {
                if self.counts.len() == 1 {
                    e.to_string()
                } else {
                    format!("{e} {n}")
                }
            })
            .collect();
        let first = self
            .first
            .as_ref()
            .map_or_else(String::new, |m| format!(": {m}"));
        format!(
            "{} requests in a row failed with {} (an error more load cannot change){first}",
            self.run,
            types.join(", ")
        )
    }

    /// The first distinct messages of the streak's errors, by type.
    pub fn messages(&self) -> &BTreeMap<ErrorType, Vec<String>> {
        &self.messages
    }
}

/// Adds `message` to `e`'s first messages when it is new and there is room.
fn keep_message(messages: &mut BTreeMap<ErrorType, Vec<String>>, e: ErrorType, message: &str) {
    let kept = messages.entry(e).or_default();
    let message = crate::units::truncate(message, MESSAGE_CHARS);
    if kept.len() < MESSAGES_PER_TYPE && !kept.contains(&message) {
        kept.push(message);
    }
}

/// The first distinct failure messages of `samples` by error type (at most
/// [`MESSAGES_PER_TYPE`] each, in the order sent).
pub fn first_messages(samples: &[Sample]) -> BTreeMap<ErrorType, Vec<String>> {
    let mut by_send: Vec<&Sample> = samples.iter().collect();
    by_send.sort_by(|a, b| a.sent_s.total_cmp(&b.sent_s));
    let mut out = BTreeMap::new();
    for s in by_send {
        if let (Some(e), Some(d)) = (s.error_type, s.error_detail.as_deref()) {
            keep_message(&mut out, e, d);
        }
    }
    out
}

/// What stopped a level before its amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// A stop signal (SIGINT, SIGTERM).
    Signal,
    /// The early stop: its requests failed with an error more load cannot change.
    Errors,
}

/// A level stopped before its amount: its finished requests are its figures (marked
/// `partial`), never ranked, compared, nor taken for a knee or a capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stopped {
    /// What stopped it.
    pub by: StopCause,
    /// Why, in a sentence.
    pub reason: String,
    /// Requests still in flight when the stop's grace ran out, cut (not in the figures).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unfinished: u64,
    /// The first distinct messages of each error type (at most [`MESSAGES_PER_TYPE`], each at
    /// most [`MESSAGE_CHARS`] characters, secrets redacted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub messages: BTreeMap<ErrorType, Vec<String>>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl LevelStats {
    /// Marks the level stopped before its amount (partial), with the first messages of its
    /// samples' errors, else `fallback`'s (a streak's, when the warm-up tripped the stop).
    pub fn mark_stopped(
        &mut self,
        by: StopCause,
        reason: String,
        unfinished: u64,
        samples: &[Sample],
        fallback: &BTreeMap<ErrorType, Vec<String>>,
    ) {
        let mut messages = first_messages(samples);
        if messages.is_empty() {
            messages.clone_from(fallback);
        }
        self.partial = true;
        self.stopped = Some(Stopped {
            by,
            reason,
            unfinished,
            messages,
        });
    }

    /// Every measured request failed.
    pub fn all_errors(&self) -> bool {
        self.requests > 0 && self.successes == 0
    }
}

/// The models with their partial levels left out (borrowed as they are when none is partial),
/// each knee's index counted among the levels kept: what the knee, the selection, the ranking,
/// the findings and a comparison read.
pub fn whole_levels(models: &[ModelReport]) -> Cow<'_, [ModelReport]> {
    if !models.iter().any(|m| m.levels.iter().any(|l| l.partial)) {
        return Cow::Borrowed(models);
    }
    Cow::Owned(
        models
            .iter()
            .map(|m| {
                let mut w = m.clone();
                // The knee's index among the whole levels (the knee level is never partial).
                if let Some(k) = &mut w.knee {
                    k.index = m
                        .levels
                        .get(..k.index)
                        .map_or(0, |before| before.iter().filter(|l| !l.partial).count());
                }
                w.levels.retain(|l| !l.partial);
                w
            })
            .collect(),
    )
}

/// The index in `levels` of the `i`-th level that is not partial.
pub fn index_of_whole(levels: &[LevelStats], i: usize) -> Option<usize> {
    levels
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.partial)
        .nth(i)
        .map(|(j, _)| j)
}

/// Why a run must not exit 0 for its failures, and its exit: [`Exit::CheckFailed`] when a
/// model's check failed (unless `keep_going` and another model passed), else
/// [`Exit::AllErrors`] when a level's requests all failed or a model's load was stopped by its
/// errors. `None` when neither.
pub fn unusable(report: &Report, keep_going: bool) -> Option<(Exit, String)> {
    let names = super::report::model_names(&report.models);
    let failed: Vec<String> = report
        .models
        .iter()
        .zip(&names)
        .filter_map(|(m, name)| {
            let c = m.check.as_ref().filter(|c| !c.ok)?;
            let kind = c.error_type.map_or("failed", ErrorType::as_str);
            Some(match c.http_status {
                Some(s) => format!("{name} ({kind}, HTTP {s})"),
                None => format!("{name} ({kind})"),
            })
        })
        .collect();
    let passed = report
        .models
        .iter()
        .any(|m| m.check.as_ref().is_none_or(|c| c.ok));
    if !failed.is_empty() && (!keep_going || !passed) {
        let others = if passed {
            "no model was loaded (--keep-going loads the others)"
        } else {
            "no model was loaded"
        };
        return Some((
            Exit::CheckFailed,
            format!(
                "tokenprobe bench: the connectivity check failed for {}: {others}; exit {} (--no-check skips the check)",
                failed.join(", "),
                Exit::CheckFailed.code()
            ),
        ));
    }
    let mut why = Vec::new();
    for (m, name) in report.models.iter().zip(&names) {
        for l in &m.levels {
            let label = format!("{name} @ {}", l.key.label());
            match &l.stopped {
                Some(s) if s.by == StopCause::Errors => {
                    why.push(format!(
                        "{label} (its load stopped: {} of {} requests failed, {})",
                        l.requests - l.successes,
                        l.requests,
                        error_counts(l)
                    ));
                }
                _ if l.all_errors() => {
                    why.push(format!(
                        "{label} (all {} requests failed, {})",
                        l.requests,
                        error_counts(l)
                    ));
                }
                _ => {}
            }
        }
    }
    (!why.is_empty()).then(|| {
        (
            Exit::AllErrors,
            format!(
                "tokenprobe bench: not measured: {}; exit {}",
                why.join(", "),
                Exit::AllErrors.code()
            ),
        )
    })
}

/// `auth 10, connect 2`.
fn error_counts(l: &LevelStats) -> String {
    let v: Vec<String> = l.errors.iter().map(|(e, n)| format!("{e} {n}")).collect();
    v.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::LevelKey;

    fn fail(e: ErrorType, detail: &str, sent_s: f64) -> Sample {
        Sample {
            error_type: Some(e),
            error_detail: Some(detail.into()),
            sent_s,
            ..Sample::default()
        }
    }

    #[test]
    fn only_errors_more_load_cannot_change_count_and_a_success_resets() {
        let mut s = Streak::new(3, false);
        // Connect before the server was ever reached is not counted (a server still starting,
        // a wrong port: the check says so); the others that more load can change neither.
        for e in [
            ErrorType::Connect,
            ErrorType::RateLimited,
            ErrorType::ServerError,
            ErrorType::TimeoutFirstToken,
            ErrorType::Overloaded,
        ] {
            assert!(!s.record(Some(e), Some("x")), "{e}");
        }
        assert!(!s.record(Some(ErrorType::Auth), Some("HTTP 401: bad key")));
        assert!(!s.record(Some(ErrorType::Auth), Some("HTTP 401: bad key")));
        // A success in between: start again.
        assert!(!s.record(None, None));
        assert!(!s.record(Some(ErrorType::BadRequest), Some("HTTP 400: no")));
        // A failure more load can change does not break the streak.
        assert!(!s.record(Some(ErrorType::RateLimited), Some("429")));
        // Connect counts now: the server answered once.
        assert!(!s.record(Some(ErrorType::Connect), Some("connect: refused")));
        assert!(s.record(Some(ErrorType::QuotaExceeded), Some("HTTP 429: quota")));
        assert!(s.tripped());
        // It trips once, and its reason is what tripped it.
        assert!(!s.record(Some(ErrorType::Auth), Some("HTTP 401")));
        assert!(!s.record(Some(ErrorType::Auth), Some("HTTP 401")));
        assert_eq!(
            s.reason().unwrap(),
            "3 requests in a row failed with connect 1, quota_exceeded 1, bad_request 1 (an error more load cannot change): HTTP 400: no"
        );
        // Never with a limit of 0.
        let mut never = Streak::new(0, true);
        for _ in 0..100 {
            assert!(!never.record(Some(ErrorType::Auth), None));
        }
        assert_eq!(never.reason(), None);
    }

    #[test]
    fn a_streak_of_one_type_names_it_and_keeps_its_first_distinct_messages() {
        let mut s = Streak::new(5, true);
        for m in ["a", "a", "b", "c", "d"] {
            s.record(Some(ErrorType::Auth), Some(m));
        }
        assert_eq!(
            s.reason().unwrap(),
            "5 requests in a row failed with auth (an error more load cannot change): a"
        );
        assert_eq!(s.messages()[&ErrorType::Auth], ["a", "b", "c"]);
        let long = "k".repeat(5000);
        let mut s = Streak::new(1, true);
        s.record(Some(ErrorType::BadRequest), Some(&long));
        assert_eq!(
            s.messages()[&ErrorType::BadRequest][0].chars().count(),
            MESSAGE_CHARS + 1,
            "cut, with its mark"
        );
    }

    #[test]
    fn a_check_line_names_the_type_the_status_and_the_message_once() {
        let c = Check {
            ok: false,
            error_type: Some(ErrorType::Auth),
            http_status: Some(401),
            message: Some("HTTP 401: invalid_api_key: Incorrect API key".into()),
            seconds: 0.01,
        };
        assert_eq!(
            c.line(),
            "auth (HTTP 401): invalid_api_key: Incorrect API key"
        );
        let refused = Check {
            error_type: Some(ErrorType::Connect),
            http_status: None,
            message: Some("connection refused".into()),
            ..c.clone()
        };
        assert_eq!(refused.line(), "connect: connection refused");
        let ok = Check {
            ok: true,
            error_type: None,
            http_status: Some(200),
            message: None,
            seconds: 0.2123,
        };
        assert_eq!(ok.line(), "passed (HTTP 200, 212.3 ms)");
    }

    /// A check blocks the load only on what says it cannot work (the route, the key, the
    /// request, the quota, the protocol); a 429, a 5xx or a deadline is of the moment: said, and
    /// the model is loaded (a simulator answering 5% 429s and 500s must not fail a run).
    #[test]
    fn a_failure_of_the_moment_does_not_block_the_load() {
        let blocking = [
            ErrorType::Proxy,
            ErrorType::Connect,
            ErrorType::Tls,
            ErrorType::TimeoutConnect,
            ErrorType::Auth,
            ErrorType::QuotaExceeded,
            ErrorType::BadRequest,
            ErrorType::Malformed,
        ];
        for e in ErrorType::ALL {
            assert_eq!(blocks_load(e), blocking.contains(&e), "{e}");
        }
        let mut r = crate::measure::Measurement::new(std::time::Instant::now());
        r.headers(std::time::Instant::now(), 429);
        r.fail(
            ErrorType::RateLimited,
            std::time::Instant::now(),
            "HTTP 429: slow down",
        );
        let c = Check::of(&r.finish(), 0.01);
        assert!(c.ok);
        assert_eq!(
            c.line(),
            "passed with a failure of the moment, the model is loaded: rate_limited (HTTP 429): slow down"
        );
    }

    fn level(c: u32, samples: &[Sample]) -> LevelStats {
        LevelStats::from_samples(
            LevelKey {
                concurrency: c,
                rate: None,
            },
            samples,
            1.0,
            &[],
            &crate::bench::criteria::NO_SLO,
            0,
        )
    }

    #[test]
    fn a_stopped_level_keeps_its_first_messages_per_type_in_send_order() {
        let samples = [
            fail(ErrorType::Auth, "late", 0.3),
            fail(ErrorType::Auth, "first", 0.1),
            fail(ErrorType::Auth, "first", 0.2),
            fail(ErrorType::ServerError, "boom", 0.4),
            fail(ErrorType::Auth, "third", 0.5),
            fail(ErrorType::Auth, "fourth", 0.6),
        ];
        let mut l = level(2, &samples);
        l.mark_stopped(
            StopCause::Errors,
            "why".into(),
            1,
            &samples,
            &BTreeMap::new(),
        );
        assert!(l.partial && l.all_errors());
        let s = l.stopped.as_ref().unwrap();
        assert_eq!(s.messages[&ErrorType::Auth], ["first", "late", "third"]);
        assert_eq!(s.messages[&ErrorType::ServerError], ["boom"]);
        assert_eq!(s.unfinished, 1);
        // Nothing finished (the warm-up tripped it): the streak's messages.
        let mut empty = level(2, &[]);
        let fallback = BTreeMap::from([(ErrorType::Auth, vec!["key".to_owned()])]);
        empty.mark_stopped(StopCause::Errors, "why".into(), 0, &[], &fallback);
        assert_eq!(empty.stopped.as_ref().unwrap().messages, fallback);
        assert!(!empty.all_errors(), "no request, not all errors");
    }

    fn report_of(levels: Vec<Vec<LevelStats>>) -> Report {
        let mut r = crate::bench::report::tests::synthetic();
        r.models.truncate(levels.len());
        for (m, l) in r.models.iter_mut().zip(levels) {
            m.levels = l;
        }
        r
    }

    #[test]
    fn a_failed_check_a_level_of_errors_and_an_early_stop_never_exit_0() {
        let ok = || {
            level(
                1,
                &[Sample {
                    ttft_s: Some(0.1),
                    e2e_s: Some(0.2),
                    ..Sample::default()
                }],
            )
        };
        let mut r = report_of(vec![vec![ok()], vec![ok()]]);
        assert_eq!(unusable(&r, false), None);
        // One model's check failed: exit 7, unless --keep-going runs the other.
        r.models[1].check = Some(Check {
            ok: false,
            error_type: Some(ErrorType::Auth),
            http_status: Some(401),
            message: Some("HTTP 401: bad key".into()),
            seconds: 0.0,
        });
        r.models[1].levels.clear();
        let (code, line) = unusable(&r, false).unwrap();
        assert_eq!(code, Exit::CheckFailed);
        assert!(
            line.contains("check failed for beta (auth, HTTP 401): no model was loaded"),
            "{line}"
        );
        assert_eq!(unusable(&r, true), None);
        // Every model's check failed: nothing ran, whatever --keep-going says.
        r.models[0].check = r.models[1].check.clone();
        assert_eq!(unusable(&r, true).unwrap().0, Exit::CheckFailed);
        // A level whose every request failed.
        let failed = level(4, &[fail(ErrorType::ServerError, "HTTP 500", 0.0)]);
        let r = report_of(vec![vec![ok(), failed]]);
        let (code, line) = unusable(&r, false).unwrap();
        assert_eq!(code, Exit::AllErrors);
        assert!(
            line.contains("not measured: alpha @ 4 (all 1 requests failed, server_error 1)"),
            "{line}"
        );
        // A load stopped by its errors, though some requests succeeded before.
        let samples = [
            Sample {
                ttft_s: Some(0.1),
                ..Sample::default()
            },
            fail(ErrorType::Connect, "refused", 0.1),
        ];
        let mut stopped = level(2, &samples);
        stopped.mark_stopped(
            StopCause::Errors,
            "10 requests in a row failed with connect".into(),
            0,
            &samples,
            &BTreeMap::new(),
        );
        let r = report_of(vec![vec![stopped.clone()]]);
        assert_eq!(unusable(&r, true).unwrap().0, Exit::AllErrors);
        // A level a signal stopped is the signal's (130), not this.
        stopped.stopped.as_mut().unwrap().by = StopCause::Signal;
        assert_eq!(unusable(&report_of(vec![vec![stopped]]), false), None);
    }

    #[test]
    fn partial_levels_are_left_out_of_what_is_judged() {
        let mut a = level(1, &[]);
        let mut b = level(2, &[]);
        b.partial = true;
        a.notes.push("whole".into());
        let models = vec![ModelReport {
            levels: vec![b.clone(), a.clone(), b],
            ..crate::bench::report::tests::synthetic().models[0].clone()
        }];
        let whole = whole_levels(&models);
        assert!(matches!(whole, Cow::Owned(_)));
        assert_eq!(whole[0].levels, vec![a]);
        assert_eq!(index_of_whole(&models[0].levels, 0), Some(1));
        assert_eq!(index_of_whole(&models[0].levels, 1), None);
        let plain = crate::bench::report::tests::synthetic().models;
        assert!(matches!(whole_levels(&plain), Cow::Borrowed(_)));
    }
}
