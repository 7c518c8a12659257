//! A probe result for people and programs: the `probe` command's `--format json` object (the keys
//! of `tests/cases/*.expect.json`, plus `chunk_gaps_dropped`) and its `--format text` report.

use crate::measure::ProbeResult;
use crate::outcome::ErrorType;
use serde_json::{Value, json};
use std::fmt::Write as _;

/// The JSON object printed by `probe --format json`: exactly the keys `outcome`, `error_type`,
/// `ttfb_s`, `ttft_s`, `ttfo_s`, `e2e_s`, `output_tokens`, `token_source`, `input_tokens`, `tpot_s`,
/// `decode_tokens_per_s`, `chunk_gaps_s`, `chunk_gaps_dropped`, `flags`, `retry_after_s` (the
/// stream cases' keys), then `cached_input_tokens`, `reasoning_tokens` (what the answer's usage
/// said of them) and what answered: `served_model`, `system_fingerprint`, `response_id`,
/// `request_id` (the answer's request id header); absent values are `null`; a probe whose
/// workload asks for lengths (or is a conversation's turn) adds `requested_input_tokens`,
/// `requested_output_tokens` and `turn`; and what judged the answer, when it was: `usage_audit`
/// (the usage stated against what was streamed, when it was compared; the text report says why
/// it was not), `expect_passed` (the content check),
/// `answer_hash` and `drift` (a `drift: true` prompt). `chunk_gaps_s` holds at most the first
/// `measure::MAX_CHUNK_GAPS` gaps; `chunk_gaps_dropped` counts the rest.
/// For a failed probe, `e2e_s` is the duration to the failure instant (docs/measurement.md), and the
/// token counts are `null`: N is defined for successful probes only; what answered is kept. A non-streamed answer has
/// `null` TTFT, TTFO, TPOT and decode rate, and `output_tokens` `null` with `token_source`
/// `unknown` when it carried no usage.
pub fn to_json(r: &ProbeResult) -> Value {
    let ok = r.success();
    let known = ok && r.token_source != crate::measure::TokenSource::Unknown;
    let mut v = json!({
        "outcome": if r.success() { "success" } else { "error" },
        "error_type": r.error_type.map(|e| e.as_str()),
        "ttfb_s": r.ttfb_s,
        "ttft_s": r.ttft_s,
        "ttfo_s": r.ttfo_s,
        "e2e_s": r.e2e_s.or(r.failure_s),
        "output_tokens": known.then_some(r.output_tokens),
        "token_source": ok.then_some(r.token_source),
        "input_tokens": if ok { r.input_tokens } else { None },
        "tpot_s": r.tpot_s,
        "decode_tokens_per_s": r.decode_tokens_per_s,
        "chunk_gaps_s": r.chunk_gaps_s,
        "chunk_gaps_dropped": r.chunk_gaps_dropped,
        "flags": r.flags.iter().map(|f| f.as_str()).collect::<Vec<_>>(),
        "retry_after_s": r.retry_after_s,
        "cached_input_tokens": if ok { r.cached_input_tokens } else { None },
        "reasoning_tokens": if ok { r.reasoning_tokens } else { None },
        "served_model": r.served_model,
        "system_fingerprint": r.system_fingerprint,
        "response_id": r.response_id,
        "request_id": r.server_request_id,
    });
    // A workload that asks for lengths, or a conversation turn, adds what it asked for.
    if let Some(o) = v.as_object_mut()
        && (r.requested_input_tokens.is_some()
            || r.requested_output_tokens.is_some()
            || r.turn.is_some())
    {
        o.insert(
            "requested_input_tokens".into(),
            json!(r.requested_input_tokens),
        );
        o.insert(
            "requested_output_tokens".into(),
            json!(r.requested_output_tokens),
        );
        o.insert("turn".into(), json!(r.turn));
    }
    if let Some(o) = v.as_object_mut() {
        for (key, value) in [
            // Audited only: why a count was not compared is the text report's to say.
            (
                "usage_audit",
                json!(
                    r.usage_audit
                        .as_ref()
                        .filter(|a| a.output.is_some() || a.input.is_some())
                ),
            ),
            ("expect_passed", json!(r.expect_passed)),
            ("answer_hash", json!(r.answer_hash)),
            ("drift", json!(r.drift)),
        ] {
            if !value.is_null() {
                o.insert(key.into(), value);
            }
        }
    }
    v
}

/// The usage audit, the content check and a drift, in words (what judged the answer).
fn judged(s: &mut String, r: &ProbeResult) {
    use crate::measure::answered::CountedBy;
    if let Some(a) = &r.usage_audit {
        let by = match a.counted_by {
            Some(CountedBy::Tokenizer) => "counted by the tokenizer",
            Some(CountedBy::Events) => "token events",
            None => "",
        };
        let check = |what: &str, c: &crate::measure::answered::UsageCheck, of: &str| {
            format!(
                "{what} stated {} against {} {of}{}{}",
                c.stated,
                c.expected,
                c.ratio.map_or_else(String::new, |x| format!(" (×{x:.2})")),
                if c.mismatch {
                    ": MISMATCH"
                } else if c.off {
                    ": off, unconfirmed (the answer audited before was not off)"
                } else {
                    ""
                }
            )
        };
        let mut parts = Vec::new();
        if let Some(c) = &a.output {
            parts.push(check("output", c, &format!("streamed ({by})")));
        }
        if let Some(c) = &a.input {
            parts.push(check("input", c, "known"));
        }
        if let Some(why) = &a.why {
            parts.push(format!("output not audited: {why}"));
        }
        let _ = writeln!(s, "usage      {}", parts.join("; "));
    }
    if let Some(passed) = r.expect_passed {
        let _ = writeln!(s, "check      {}", if passed { "passed" } else { "FAILED" });
    }
    if let Some(d) = &r.drift {
        let who = |k: &crate::measure::answered::KnownAnswer| {
            format!(
                "{} {}",
                k.served_model.as_deref().unwrap_or("(no model named)"),
                k.system_fingerprint
                    .as_deref()
                    .unwrap_or("(no fingerprint)")
            )
        };
        let _ = writeln!(
            s,
            "drift      the answer changed: {} (hash {}) → {} (hash {})",
            who(&d.from),
            d.from.hash,
            who(&d.to),
            d.to.hash
        );
    }
}

/// The JSON object `probe --format json` prints for a session prompt: `session` (its number),
/// `end` (`completed`, `budget`, `failed`; `null` when stopped first), `duration_s`,
/// `compactions`, and `turns`: each turn's [`to_json`] object with its `branch`, `turn`,
/// `sent_s` and `end_s` (after the session's start) and `tool_calls` (the names its answer
/// called), in the order the turns ended.
pub fn session_to_json(run: &super::session::SessionRun) -> Value {
    let turns: Vec<Value> = run
        .turns
        .iter()
        .map(|t| {
            let mut v = to_json(&t.result);
            if let Some(o) = v.as_object_mut() {
                o.insert("branch".into(), json!(t.session.branch));
                o.insert("turn".into(), json!(t.turn));
                o.insert("sent_s".into(), json!(t.sent_s));
                o.insert("end_s".into(), json!(t.end_s));
                let calls: Vec<&str> = t
                    .result
                    .tool_calls
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect();
                o.insert("tool_calls".into(), json!(calls));
            }
            v
        })
        .collect();
    json!({
        "session": run.id,
        "end": run.end,
        "duration_s": run.duration_s,
        "compactions": run.compactions,
        "turns": turns,
    })
}

/// The text report of a session: a line saying how it ended, then a row per turn (its branch,
/// when it was sent, TTFT, the context it was sent with and what the cache served of it, output
/// tokens, and the tools its answer called or its error).
pub fn session_to_text(run: &super::session::SessionRun, ctx: &ReportContext) -> String {
    use crate::units::fmt_secs;
    let mut s = String::new();
    let _ = writeln!(s, "target     {} ({})", ctx.url, ctx.model);
    if let Some(c) = &ctx.calibration {
        let _ = writeln!(s, "calibration {c}");
    }
    let end = match run.end {
        Some(e) => format!("{e:?}").to_lowercase(),
        None => "stopped".into(),
    };
    let sub = run.turns.iter().filter(|t| t.session.branch > 0).count();
    let _ = writeln!(
        s,
        "session    {end} in {}: {} ({} of sub-agents), {} compaction{}",
        fmt_secs(run.duration_s),
        crate::units::count(run.turns.len(), "turn"),
        sub,
        run.compactions,
        if run.compactions == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        s,
        "{:>6} {:>6} {:>10} {:>10} {:>9} {:>9} {:>7}  answer",
        "branch", "turn", "sent", "ttft", "context", "cached", "output"
    );
    for t in &run.turns {
        let r = &t.result;
        let num = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |n| n.to_string());
        let answer = match r.error_type {
            Some(e) => format!("{e}: {}", r.error_detail.as_deref().unwrap_or("")),
            None if !r.tool_calls.is_empty() => {
                let names: Vec<&str> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
                format!("calls {}", names.join(", "))
            }
            None => "text".into(),
        };
        let _ = writeln!(
            s,
            "{:>6} {:>6} {:>10} {:>10} {:>9} {:>9} {:>7}  {answer}",
            t.session.branch,
            t.turn,
            fmt_secs(t.sent_s),
            r.ttft_s.map_or_else(|| "-".to_owned(), fmt_secs),
            num(r.input_tokens),
            num(r.cached_input_tokens),
            if r.success() {
                r.output_tokens.to_string()
            } else {
                "-".into()
            },
        );
    }
    s
}

/// A timeline cell: right-aligned in 12 columns, `-` when absent.
fn ms(v: Option<f64>) -> String {
    match v {
        Some(s) => format!("{:>9.1} ms", s * 1000.0),
        None => format!("{:>12}", "-"),
    }
}

/// A duration inside a sentence (`after 0.5 ms`): no padding.
fn ms_inline(s: f64) -> String {
    format!("{:.1} ms", s * 1000.0)
}

/// The set-up phase a failure of this type stopped in, if it is one: that phase never completed,
/// so the report says `failed` there instead of a duration (a refused connection has no TCP
/// connect time, only the time until the refusal, which the outcome line gives).
fn failed_phase(e: Option<ErrorType>) -> Option<&'static str> {
    match e? {
        ErrorType::Connect | ErrorType::TimeoutConnect => Some("connect"),
        ErrorType::Tls => Some("tls"),
        _ => None,
    }
}

/// Context shown in the text report besides the result itself.
#[derive(Debug, Clone, Default)]
pub struct ReportContext {
    /// The endpoint URL probed (shown with its credentials and secret query values redacted).
    pub url: String,
    /// The model asked for.
    pub model: String,
    /// The proxy in use, if any (credentials removed).
    pub proxy: Option<String>,
    /// The calibration that sized the prompt, one line ([`super::Calibration::summary`]).
    pub calibration: Option<String>,
    /// How the request asked for its exact output length (`none`: the length was a cap).
    pub exact_output: crate::protocol::ExactOutput,
}

/// The input length counted (and asked for, with the difference), what the prompt cache served
/// of it, the output length asked for.
fn lengths(s: &mut String, r: &ProbeResult) {
    match (r.input_tokens, r.requested_input_tokens) {
        (Some(i), Some(want)) => {
            let off = i as f64 - want as f64;
            let _ = writeln!(
                s,
                "input      {i} tokens ({want} requested, {off:+} = {:+.1}%)",
                100.0 * off / want.max(1) as f64
            );
        }
        (Some(i), None) => {
            let _ = writeln!(s, "input      {i} tokens");
        }
        (None, Some(want)) => {
            let _ = writeln!(
                s,
                "input      {want} tokens requested (the server reported none)"
            );
        }
        (None, None) => {}
    }
    if let Some(c) = r.cached_input_tokens {
        let share = r
            .input_tokens
            .filter(|i| *i > 0)
            .map_or_else(String::new, |i| {
                format!(" ({:.1}%)", 100.0 * c as f64 / i as f64)
            });
        let _ = writeln!(
            s,
            "cached     {c} of the input tokens{share}, from the server's prompt cache"
        );
    }
    if let Some(want) = r.requested_output_tokens {
        let _ = writeln!(s, "requested  {want} output tokens");
    }
}

/// The counts of a successful probe: N (and where it came from, and what was asked), its
/// reasoning tokens, TPOT (streaming only); the input is [`lengths`]'s.
fn output_lines(s: &mut String, r: &ProbeResult, exact: crate::protocol::ExactOutput) {
    let requested = r.requested_output_tokens.map_or_else(String::new, |n| {
        if exact == crate::protocol::ExactOutput::None {
            format!(", {n} requested as the cap")
        } else {
            format!(", {n} requested (exact_output {})", exact.as_str())
        }
    });
    let source = match r.token_source {
        crate::measure::TokenSource::Usage => "usage",
        crate::measure::TokenSource::Events => "event count",
        crate::measure::TokenSource::Unknown => {
            let _ = writeln!(
                s,
                "output     unknown (the answer carried no usage){requested}"
            );
            ""
        }
    };
    if r.token_source != crate::measure::TokenSource::Unknown {
        let events = if r.stream {
            format!(", {} token events", r.token_events)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "output     {} tokens (from {source}){requested}{events}",
            r.output_tokens
        );
    }
    if let Some(n) = r.reasoning_tokens {
        let _ = writeln!(s, "reasoning  {n} of the output tokens");
    }
    match (r.tpot_s, r.decode_tokens_per_s) {
        _ if !r.stream => {}
        (Some(t), Some(d)) => {
            let _ = writeln!(
                s,
                "TPOT       {:.2} ms/token ({d:.1} tokens/s decode)",
                t * 1000.0
            );
        }
        _ => {
            let _ = writeln!(
                s,
                "TPOT       not measurable (fewer than 2 tokens, or a burst)"
            );
        }
    }
}

/// What answered, when the answer said: the served model and fingerprint, the response's id
/// and the request id header.
fn identity(s: &mut String, r: &ProbeResult) {
    let join = |parts: [(&str, &Option<String>); 2]| {
        let shown: Vec<String> = parts
            .iter()
            .filter_map(|(name, v)| v.as_ref().map(|v| format!("{name}{v}")))
            .collect();
        shown.join(", ")
    };
    let served = join([
        ("", &r.served_model),
        ("fingerprint ", &r.system_fingerprint),
    ]);
    if !served.is_empty() {
        let other = if r.flags.contains(&crate::outcome::Flag::ModelMismatch) {
            " (NOT the model asked for: model_mismatch)"
        } else {
            ""
        };
        let _ = writeln!(s, "served     {served}{other}");
    }
    let ids = join([
        ("response ", &r.response_id),
        ("request ", &r.server_request_id),
    ]);
    if !ids.is_empty() {
        let _ = writeln!(s, "ids        {ids}");
    }
}

/// A short human report: outcome, then a phase timeline like curl's `-w` timings, then counts.
/// A failure says why: HTTP status, the server's message, which deadline, the proxy in use.
pub fn to_text(r: &ProbeResult, ctx: &ReportContext) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "target     {}", crate::redact::redact_url(&ctx.url));
    let _ = writeln!(s, "model      {}", ctx.model);
    let _ = writeln!(
        s,
        "proxy      {}",
        ctx.proxy.as_deref().unwrap_or("none (direct)")
    );
    if !r.stream {
        s.push_str("mode       non-streaming (the whole answer at once: no TTFT, TPOT or gaps)\n");
    }
    identity(&mut s, r);
    match r.error_type {
        None => {
            let _ = writeln!(
                s,
                "outcome    success (HTTP {})",
                r.http_status.unwrap_or(0)
            );
        }
        Some(e) => {
            let status = r
                .http_status
                .map(|c| format!("HTTP {c}"))
                .unwrap_or_else(|| "no response".into());
            let after = r
                .failure_s
                .map(|f| format!(" after {}", ms_inline(f)))
                .unwrap_or_default();
            let _ = writeln!(s, "outcome    FAILED: {e} ({status}){after}");
            if let Some(d) = &r.error_detail {
                let _ = writeln!(s, "reason     {d}");
            }
            if let Some(w) = r.retry_after_s {
                let _ = writeln!(s, "retry      the server asks to wait {w:.3} s");
            }
        }
    }
    s.push_str("\ntimeline (from sending the request)\n");
    let failed = failed_phase(r.error_type);
    let phase = |name: &str, v: Option<f64>| {
        if failed == Some(name) {
            format!("{:>12}", "failed")
        } else {
            ms(v)
        }
    };
    match &r.phases {
        Some(p) if p.reused => s.push_str("  connection    reused (kept alive)\n"),
        Some(p) => {
            let _ = writeln!(s, "  resolve       {}  (DNS)", ms(p.resolve_s));
            let _ = writeln!(
                s,
                "  connect       {}  (TCP)",
                phase("connect", p.connect_s)
            );
            // A TLS handshake cannot have started on a connection that was never made.
            let tls = if failed == Some("connect") {
                None
            } else {
                p.tls_s
            };
            let _ = writeln!(s, "  tls           {}  (handshake)", phase("tls", tls));
        }
        None => {}
    }
    let rows = [
        ("headers     ", r.ttfb_s),
        ("first token ", r.ttft_s),
        ("first output", r.ttfo_s),
        ("last token  ", r.last_token_s),
    ];
    if r.success() {
        // Without streaming there are no per-token instants to show.
        for (name, v) in rows
            .into_iter()
            .filter(|(n, _)| r.stream || n.starts_with("headers"))
        {
            let _ = writeln!(s, "  {name}  {}", ms(v));
        }
        let _ = writeln!(s, "  end           {}", ms(r.e2e_s));
    } else {
        // A failed probe shows what it got before the failure, then the failure instant.
        for (name, v) in rows.into_iter().filter(|(_, v)| v.is_some()) {
            let _ = writeln!(s, "  {name}  {}", ms(v));
        }
        let _ = writeln!(s, "  failed        {}", ms(r.failure_s));
    }
    s.push('\n');
    if let Some(t) = r.turn {
        let _ = writeln!(s, "turn       {t} of a conversation");
    }
    if let Some(c) = &ctx.calibration {
        let _ = writeln!(s, "calibrated {c}");
    }
    if r.success() {
        output_lines(&mut s, r, ctx.exact_output);
        lengths(&mut s, r);
    } else if r.token_events > 0 {
        // N is defined for successful probes only (as in the JSON report); say what arrived.
        let _ = writeln!(
            s,
            "received   {} token events before the failure (tokens are counted for successful probes only)",
            r.token_events
        );
    }
    if let Some(st) = &r.server_timings {
        let _ = writeln!(
            s,
            "server     prompt {} ms, {} tokens in {} ms ({} ms/token), as llama.cpp reports",
            st.prompt_ms.map_or("-".into(), |v| format!("{v:.1}")),
            st.predicted_n.map_or("-".into(), |v| v.to_string()),
            st.predicted_ms.map_or("-".into(), |v| format!("{v:.1}")),
            st.predicted_per_token_ms
                .map_or("-".into(), |v| format!("{v:.2}")),
        );
    }
    judged(&mut s, r);
    if !r.flags.is_empty() {
        let flags: Vec<&str> = r.flags.iter().map(|f| f.as_str()).collect();
        let _ = writeln!(s, "flags      {}", flags.join(", "));
    }
    if r.success() && !r.text.is_empty() {
        let preview: String = r.text.chars().take(120).collect();
        let _ = writeln!(s, "answer     {:?}", preview);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Measurement;
    use crate::outcome::ErrorType;
    use std::time::{Duration, Instant};

    #[test]
    fn json_has_exactly_the_case_keys() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.fail(
            ErrorType::RateLimited,
            t0 + Duration::from_millis(80),
            "HTTP 429",
        );
        m.retry_after(Duration::from_millis(6500));
        let v = to_json(&m.finish());
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "cached_input_tokens",
                "chunk_gaps_dropped",
                "chunk_gaps_s",
                "decode_tokens_per_s",
                "e2e_s",
                "error_type",
                "flags",
                "input_tokens",
                "outcome",
                "output_tokens",
                "reasoning_tokens",
                "request_id",
                "response_id",
                "retry_after_s",
                "served_model",
                "system_fingerprint",
                "token_source",
                "tpot_s",
                "ttfb_s",
                "ttfo_s",
                "ttft_s"
            ]
        );
        assert_eq!(v["outcome"], "error");
        assert_eq!(v["error_type"], "rate_limited");
        assert_eq!(v["retry_after_s"], 6.5);
        assert!((v["e2e_s"].as_f64().unwrap() - 0.08).abs() < 1e-9);
        assert!(v["ttft_s"].is_null());
        assert!(v["output_tokens"].is_null() && v["token_source"].is_null());
    }

    /// Issue 42 item 1 and 43 item 1: what the answer said beside its tokens, in both formats;
    /// a failed probe's counts are null (ruling 10), what answered is kept.
    #[test]
    fn cached_reasoning_and_identity_in_json_and_text() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let probe = |fail: bool| {
            let mut m = Measurement::new(t0);
            m.headers(ms(5), 200);
            m.server_request_id(Some("req-7".into()));
            m.event(
                ms(10),
                &crate::protocol::EventMeaning {
                    served_model: Some("gpt-4o-2024-08-06".into()),
                    system_fingerprint: Some("fp_1".into()),
                    response_id: Some("chatcmpl-9".into()),
                    token: true,
                    output: true,
                    text: "Hi".into(),
                    ..Default::default()
                },
            );
            m.event(
                ms(20),
                &crate::protocol::EventMeaning {
                    usage_input: Some(200),
                    usage_cached_input: Some(150),
                    usage_reasoning: Some(0),
                    usage_output: Some(1),
                    finish: true,
                    terminal: true,
                    ..Default::default()
                },
            );
            if fail {
                m.fail(ErrorType::ValidationFailed, ms(20), "content check");
            }
            m.finish()
        };
        let r = probe(false);
        let v = to_json(&r);
        assert_eq!(
            (
                v["cached_input_tokens"].as_u64(),
                v["reasoning_tokens"].as_u64()
            ),
            (Some(150), Some(0))
        );
        assert_eq!(v["served_model"], "gpt-4o-2024-08-06");
        assert_eq!(v["system_fingerprint"], "fp_1");
        assert_eq!(v["response_id"], "chatcmpl-9");
        assert_eq!(v["request_id"], "req-7");
        let text = to_text(&r, &ReportContext::default());
        assert_eq!(text.matches("\ninput ").count(), 1, "said once: {text}");
        for line in [
            "served     gpt-4o-2024-08-06, fingerprint fp_1\n",
            "ids        response chatcmpl-9, request req-7\n",
            "cached     150 of the input tokens (75.0%), from the server's prompt cache\n",
            "reasoning  0 of the output tokens\n",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
        let r = probe(true);
        let v = to_json(&r);
        assert!(v["cached_input_tokens"].is_null() && v["reasoning_tokens"].is_null());
        assert_eq!(v["served_model"], "gpt-4o-2024-08-06");
        let text = to_text(&r, &ReportContext::default());
        assert!(
            text.contains("served     gpt-4o") && !text.contains("cached "),
            "{text}"
        );
        // An answer that said nothing of them: null, and no lines.
        let mut m = Measurement::new(t0);
        m.fail(ErrorType::Connect, ms(1), "refused");
        let r = m.finish();
        let v = to_json(&r);
        assert!(v["served_model"].is_null() && v["request_id"].is_null());
        assert!(!to_text(&r, &ReportContext::default()).contains("served "));
    }

    /// The input length is one line: the count, with what was requested when it was (it was
    /// said twice, once bare and once with the request).
    #[test]
    fn the_input_length_is_said_once() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.event(
            t0 + Duration::from_millis(10),
            &crate::protocol::EventMeaning {
                token: true,
                usage_input: Some(130),
                usage_output: Some(1),
                finish: true,
                terminal: true,
                ..Default::default()
            },
        );
        let mut r = m.finish();
        let text = to_text(&r, &ReportContext::default());
        assert_eq!(text.matches("\ninput ").count(), 1, "{text}");
        assert!(text.contains("\ninput      130 tokens\n"), "{text}");
        r.requested_input_tokens = Some(128);
        let text = to_text(&r, &ReportContext::default());
        assert_eq!(text.matches("\ninput ").count(), 1, "{text}");
        assert!(
            text.contains("\ninput      130 tokens (128 requested, +2 = +1.6%)\n"),
            "{text}"
        );
    }

    #[test]
    fn a_whole_answer_shows_no_per_token_numbers() {
        let t0 = Instant::now();
        let whole = |usage: Option<u64>| {
            let mut m = Measurement::new(t0);
            m.non_stream();
            m.headers(t0 + Duration::from_millis(400), 200);
            m.answer(
                t0 + Duration::from_millis(401),
                crate::protocol::EventMeaning {
                    token: true,
                    output: true,
                    text: "Hi".into(),
                    usage_output: usage,
                    usage_input: Some(5),
                    ..Default::default()
                },
            );
            let mut r = m.finish();
            r.requested_output_tokens = Some(64);
            r
        };
        let r = whole(Some(64));
        let v = to_json(&r);
        assert_eq!(
            (v["output_tokens"].as_u64(), v["token_source"].as_str()),
            (Some(64), Some("usage"))
        );
        assert!(
            v["ttft_s"].is_null() && v["tpot_s"].is_null() && v["decode_tokens_per_s"].is_null()
        );
        let text = to_text(&r, &ReportContext::default());
        assert!(text.contains("mode       non-streaming"), "{text}");
        // Issue 40: the input length was printed twice.
        assert_eq!(text.matches("input      5 tokens\n").count(), 1, "{text}");
        assert!(
            text.contains("output     64 tokens (from usage), 64 requested as the cap\n"),
            "without exact_output the length is a cap: {text}"
        );
        let exact = ReportContext {
            exact_output: crate::protocol::ExactOutput::IgnoreEos,
            ..ReportContext::default()
        };
        assert!(
            to_text(&r, &exact).contains(
                "output     64 tokens (from usage), 64 requested (exact_output ignore_eos)\n"
            ),
            "{}",
            to_text(&r, &exact)
        );
        assert!(
            !text.contains("first token") && !text.contains("\nTPOT "),
            "{text}"
        );
        // Without usage N is unknown: null, not 0 or 1.
        let r = whole(None);
        let v = to_json(&r);
        assert!(v["output_tokens"].is_null(), "{v}");
        assert_eq!(v["token_source"], "unknown");
        assert!(
            to_text(&r, &ReportContext::default())
                .contains("output     unknown (the answer carried no usage)")
        );
    }

    #[test]
    fn text_explains_a_failure() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.headers(t0, 401);
        m.fail(
            ErrorType::Auth,
            t0 + Duration::from_millis(60),
            "HTTP 401: invalid_api_key",
        );
        let text = to_text(
            &m.finish(),
            &ReportContext {
                url: "http://x/v1/chat/completions".into(),
                model: "m".into(),
                proxy: Some("http://proxy:3128/".into()),
                ..ReportContext::default()
            },
        );
        assert!(text.contains("FAILED: auth (HTTP 401)"), "{text}");
        assert!(text.contains("invalid_api_key"));
        assert!(text.contains("http://proxy:3128/"));
    }

    #[test]
    fn text_of_a_cut_stream_shows_what_arrived_and_no_token_count() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut m = Measurement::new(t0);
        m.headers(ms(10), 200);
        let tok = crate::protocol::EventMeaning {
            token: true,
            output: true,
            text: "hi".into(),
            ..Default::default()
        };
        for t in [50, 70, 90] {
            m.event(ms(t), &tok);
        }
        m.fail(ErrorType::Truncated, ms(120), "the stream ended early");
        let text = to_text(&m.finish(), &ReportContext::default());
        assert!(
            text.contains("FAILED: truncated (HTTP 200) after 120.0 ms"),
            "{text}"
        );
        assert!(text.contains("  headers            10.0 ms\n"), "{text}");
        assert!(text.contains("  failed            120.0 ms\n"), "{text}");
        assert!(
            !text.contains("  end "),
            "a failed probe has no end row: {text}"
        );
        assert!(
            text.contains("received   3 token events before the failure"),
            "{text}"
        );
        assert!(
            !text.contains("output ") && !text.contains("TPOT"),
            "{text}"
        );
    }

    #[test]
    fn a_failed_handshake_shows_the_connect_time_and_a_failed_tls_row() {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        m.fail(
            ErrorType::Tls,
            t0 + Duration::from_millis(7),
            "invalid peer certificate",
        );
        let mut r = m.finish();
        r.phases = Some(crate::transport::Phases {
            reused: false,
            resolve_s: None,
            connect_s: Some(0.002),
            tls_s: Some(0.004),
        });
        let text = to_text(&r, &ReportContext::default());
        assert!(
            text.contains("  connect             2.0 ms  (TCP)\n"),
            "{text}"
        );
        assert!(
            text.contains("  tls                 failed  (handshake)\n"),
            "{text}"
        );
        assert!(
            text.contains("FAILED: tls (no response) after 7.0 ms"),
            "{text}"
        );
    }
}
