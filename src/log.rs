//! The log line format of every command: one event is one line, in logfmt or JSON.
//!
//! Each line has `ts`, `level` and `msg` first, then the event's fields in order. Values are
//! quoted and escaped as logfmt requires (a value with a space, `=`, `"` or any control character
//! is quoted; `\`, `"`, newlines and control characters are escaped), so no value — a server's
//! message with a newline in it, a multi-line config error — can start a line of its own or forge
//! a field. The tracing target (the Rust module) is not written: `target` is a label of this
//! program. A field called `message` besides the event's message is written as `detail`, so JSON
//! lines never repeat a key.

use std::fmt::{self, Write as _};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The line format (`--log.format`).
// clap shows a variant's doc comment as its help, which would change `--help`.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    // `key=value` pairs (logfmt).
    Logfmt,
    // One JSON object per line.
    Json,
}

/// A field value as recorded.
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Str(String),
    Num(String),
    Bool(bool),
}

#[derive(Default)]
struct Fields {
    msg: Option<String>,
    fields: Vec<(String, Val)>,
}

impl Fields {
    fn put(&mut self, f: &Field, v: Val) {
        let name = f.name();
        // tracing's macros record the event's own message first; a later field also called
        // `message` (`message = x, "probe failed"`) is written as `detail`.
        if name == "message"
            && self.msg.is_none()
            && let Val::Str(m) = &v
        {
            self.msg = Some(m.clone());
            return;
        }
        let key = match name {
            "message" => "detail",
            "ts" | "level" | "msg" => return self.fields.push((format!("field_{name}"), v)),
            n => n,
        };
        self.fields.push((key.to_owned(), v));
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, f: &Field, v: &dyn fmt::Debug) {
        self.put(f, Val::Str(format!("{v:?}")));
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        self.put(f, Val::Str(v.to_owned()));
    }
    fn record_i64(&mut self, f: &Field, v: i64) {
        self.put(f, Val::Num(v.to_string()));
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        self.put(f, Val::Num(v.to_string()));
    }
    fn record_f64(&mut self, f: &Field, v: f64) {
        if v.is_finite() {
            self.put(f, Val::Num(v.to_string()));
        } else {
            self.put(f, Val::Str(v.to_string()));
        }
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        self.put(f, Val::Bool(v));
    }
    fn record_error(&mut self, f: &Field, v: &(dyn std::error::Error + 'static)) {
        self.put(f, Val::Str(v.to_string()));
    }
}

/// The formatter (see the module doc).
#[derive(Debug, Clone, Copy)]
pub struct LineFormat(pub LogFormat);

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut f = Fields::default();
        event.record(&mut f);
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let level = event.metadata().level().as_str().to_ascii_lowercase();
        let line = render(
            self.0,
            &ts,
            &level,
            f.msg.as_deref().unwrap_or(""),
            &f.fields,
        );
        writeln!(w, "{line}")
    }
}

fn render(format: LogFormat, ts: &str, level: &str, msg: &str, fields: &[(String, Val)]) -> String {
    let mut s = String::new();
    match format {
        LogFormat::Logfmt => {
            let _ = write!(s, "ts={ts} level={level} msg={}", logfmt_value(msg));
            for (k, v) in fields {
                let v = match v {
                    Val::Str(x) => logfmt_value(x),
                    Val::Num(x) => x.clone(),
                    Val::Bool(b) => b.to_string(),
                };
                let _ = write!(s, " {}={v}", logfmt_key(k));
            }
        }
        LogFormat::Json => {
            // Written by hand to keep the order: ts, level, msg, then the fields as logged.
            let q = |x: &str| serde_json::Value::String(x.to_owned()).to_string();
            let _ = write!(
                s,
                "{{\"ts\":{},\"level\":{},\"msg\":{}",
                q(ts),
                q(level),
                q(msg)
            );
            for (k, v) in fields {
                let v = match v {
                    Val::Str(x) => q(x),
                    Val::Num(x) => match x.parse::<serde_json::Number>() {
                        Ok(n) => n.to_string(),
                        Err(_) => q(x),
                    },
                    Val::Bool(b) => b.to_string(),
                };
                let _ = write!(s, ",{}:{v}", q(k));
            }
            s.push('}');
        }
    }
    s
}

/// A logfmt key: the characters allowed in one, anything else as `_`.
fn logfmt_key(k: &str) -> String {
    k.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A logfmt value: bare when it is safe, else quoted with `\\`, `"` and control characters
/// escaped (`\n`, `\r`, `\t`, `\u{..}`), so it stays on one line.
pub fn logfmt_value(v: &str) -> String {
    let bare = !v.is_empty()
        && v.chars()
            .all(|c| !c.is_control() && !c.is_whitespace() && c != '"' && c != '=' && c != '\\');
    if bare {
        return v.to_owned();
    }
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Installs the global subscriber: `level` is a tracing filter (`info`, `tokenprobe=debug`),
/// lines go to stderr.
pub fn init(level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(LineFormat(format))
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn capture(format: LogFormat, f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .event_format(LineFormat(format))
            .finish();
        tracing::subscriber::with_default(sub, f);
        let bytes = buf.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8(bytes).unwrap_or_default()
    }

    const FORGED: &str =
        "HTTP 500: boom\nts=2026-01-01T00:00:00Z level=info msg=\"config reloaded\"";

    fn failed_probe() {
        // The shape of the scheduler's failed-probe line.
        tracing::warn!(
            job = "t/m/p",
            target = "t",
            outcome = "error",
            status = 500u16,
            duration_s = 0.25,
            message = FORGED,
            "probe failed"
        );
    }

    #[test]
    fn json_has_each_key_once_and_no_tracing_target() {
        let out = capture(LogFormat::Json, failed_probe);
        assert_eq!(out.lines().count(), 1, "{out}");
        let line = out.lines().next().unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["msg"], "probe failed");
        assert_eq!(v["detail"], FORGED);
        assert_eq!(v["target"], "t", "the label, not the Rust module: {line}");
        assert_eq!(v["status"], 500);
        assert_eq!(line.matches("\"message\"").count(), 0, "{line}");
        assert_eq!(line.matches("\"target\"").count(), 1, "{line}");
        assert!(line.starts_with("{\"ts\":"), "{line}");
        assert!(
            line.contains(",\"level\":\"warn\",\"msg\":\"probe failed\",\"job\":"),
            "{line}"
        );
    }

    /// Issue 43 item 1: the scheduler's failed-probe line names what answered (its served model,
    /// fingerprint, response id and request id header), on one line whatever the server sent:
    /// the strings are cut and cleaned where they are read.
    #[test]
    fn a_failed_probes_line_names_what_answered() {
        let hostile = format!("evil\nts=x level=info msg=forged {}", "m".repeat(10_000));
        let mut m = crate::measure::Measurement::new(std::time::Instant::now());
        m.server_request_id(crate::protocol::identity_value("req-42"));
        m.event(
            std::time::Instant::now(),
            &crate::protocol::EventMeaning {
                served_model: crate::protocol::identity_value(&hostile),
                system_fingerprint: Some("fp_1".into()),
                response_id: Some("chatcmpl-7".into()),
                ..crate::protocol::EventMeaning::default()
            },
        );
        m.fail(
            crate::outcome::ErrorType::ServerError,
            std::time::Instant::now(),
            "HTTP 500",
        );
        let r = m.finish();
        let out = capture(LogFormat::Logfmt, || {
            crate::scheduler::log_result("t/m/p", &r)
        });
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.contains(" system_fingerprint=fp_1 response_id=chatcmpl-7 request_id=req-42"),
            "{out}"
        );
        assert!(
            out.contains(" served_model=\"evil\u{fffd}ts=x level=info msg=forged mmm"),
            "{out}"
        );
        assert!(out.len() < 1_000, "bounded: {} bytes", out.len());
    }

    #[test]
    fn logfmt_is_one_line_and_cannot_be_forged() {
        let out = capture(LogFormat::Logfmt, failed_probe);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.contains(" msg=\"probe failed\" job=t/m/p target=t outcome=error status=500 duration_s=0.25 detail=\"HTTP 500: boom\\nts=2026-01-01T00:00:00Z level=info msg=\\\"config reloaded\\\"\""),
            "{out}"
        );
        let multi = capture(LogFormat::Logfmt, || {
            tracing::error!(
                error = "invalid config:\n  1:1: a\n  2:2: b",
                "config reload refused"
            )
        });
        assert_eq!(multi.lines().count(), 1, "{multi}");
        assert!(
            multi.contains("error=\"invalid config:\\n  1:1: a\\n  2:2: b\""),
            "{multi}"
        );
    }

    #[test]
    fn logfmt_values() {
        assert_eq!(logfmt_value("plain"), "plain");
        assert_eq!(logfmt_value(""), "\"\"");
        assert_eq!(logfmt_value("a b"), "\"a b\"");
        assert_eq!(logfmt_value("k=v"), "\"k=v\"");
        assert_eq!(logfmt_value("q\"\\"), "\"q\\\"\\\\\"");
        assert_eq!(logfmt_value("\u{1b}[31m"), "\"\\u{001b}[31m\"");
    }
}
