//! Trace files: recorded production traffic, replayed request by request at its own instants
//! (`bench` with a `trace` prompt). Pure: a file's text in, requests out; every problem names its
//! line and what is wrong, without quoting the file.
//!
//! - Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length` and `hash_ids`, one id per
//!   block of [`BLOCK_TOKENS`] input tokens (the same id is the same tokens).
//! - Azure LLM inference CSV: `TIMESTAMP` (a date and time), `ContextTokens`, `GeneratedTokens`.
//! - BurstGPT CSV: `Timestamp` (s), `Model`, `Request tokens`, `Response tokens`; a trace's
//!   `model` keeps one model's rows.
//!
//! A request's instant is its timestamp minus the first request's, in the trace's seconds; the
//! window (`start`, `duration`, in the trace's seconds) keeps part of a trace, its instants then
//! counted from `start`, and the send instant is that times `time_scale` (0.5: twice as fast).
//! Rows that asked for no output (BurstGPT keeps requests that failed when recorded, with 0
//! response tokens) are skipped and counted. Timestamps must not go back, nor be more than
//! [`MAX_SPAN`] (a year) after the first; lengths must be whole, from 1 to [`MAX_TOKENS`].
//!
//! A request's prompt is built block by block ([`Trace::draw`]): a block's words are drawn from
//! its id, so two requests whose leading ids are equal start with the same text and a server's
//! prefix cache hits as it did when the trace was recorded; blocks past a request's ids (and
//! every block of a format without ids) are its own.

use super::{RequestContent, TokenModel, filler::words, user};
use crate::rng::Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::MAX_TOKENS;

/// Input tokens per hash id of a Mooncake trace.
pub const BLOCK_TOKENS: u32 = 512;
/// The most requests one trace may hold (as one bench level may send).
pub const MAX_REQUESTS: usize = 1_000_000;
/// The largest trace file read.
pub const MAX_FILE_BYTES: u64 = 32 << 20;
/// The most hash ids one trace may hold in all (bounds its memory: 8 bytes each).
pub const MAX_HASH_IDS: usize = 4_000_000;
/// The longest trace, in its own time: a row more than this after the first is refused with
/// its line. A window's `start` and `duration` are bounded by it too (a year of a trace).
pub const MAX_SPAN: Duration = Duration::from_secs(366 * 86_400);
/// The largest `time_scale` of a trace (a replay 1,000 times slower than recorded), so a replay
/// lasts at most [`MAX_SPAN`] times this (about a thousand years: far from what a clock can add).
pub const MAX_TIME_SCALE: f64 = 1000.0;
/// Salt of the block texts' generator, so a block's text is never a request's own.
const BLOCK_SALT: u64 = 0x424c_4f43_4b53;

/// A trace file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// Mooncake JSONL.
    Mooncake,
    /// Azure LLM inference CSV.
    Azure,
    /// BurstGPT CSV.
    Burstgpt,
}

impl TraceFormat {
    /// The config's name of the format.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceFormat::Mooncake => "mooncake",
            TraceFormat::Azure => "azure",
            TraceFormat::Burstgpt => "burstgpt",
        }
    }
}

/// One recorded request.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRequest {
    /// Its instant: seconds of the trace after the window's start (after the first request, when
    /// read).
    pub at_s: f64,
    /// Input length (server-counted tokens).
    pub input_tokens: u32,
    /// Output length.
    pub output_tokens: u32,
    /// Mooncake: the ids of its input's blocks, in order.
    pub hash_ids: Vec<u64>,
}

/// A trace file's requests, and the rows it left out.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recording {
    /// The requests, in time order.
    pub requests: Vec<TraceRequest>,
    /// Rows that asked for no output (skipped).
    pub no_output: u64,
    /// BurstGPT with `model`: rows of other models (skipped).
    pub other_models: u64,
    /// Seconds from the first request to the last, of the whole file.
    pub span_s: f64,
}

// Its instants are checked finite when read.
impl Eq for Recording {}

/// The requests of a trace file's text (`model`: BurstGPT, only that model's rows).
///
/// # Errors
/// `line N: what is wrong` (or what is wrong with the whole file), never the file's text.
pub fn parse(text: &str, format: TraceFormat, model: Option<&str>) -> Result<Recording, String> {
    let mut rec = Recording::default();
    let mut stamps = Stamps::default();
    let mut ids = 0usize;
    let mut push = |rec: &mut Recording, line: u64, row: Row| -> Result<(), String> {
        let at = stamps.next(line, row.at_s)?;
        if row.output_tokens == 0 {
            rec.no_output += 1;
            return Ok(());
        }
        ids += row.hash_ids.len();
        if ids > MAX_HASH_IDS {
            return Err(format!(
                "line {line}: more than {MAX_HASH_IDS} hash ids in all (cut the trace)"
            ));
        }
        if rec.requests.len() == MAX_REQUESTS {
            return Err(format!(
                "line {line}: more than {MAX_REQUESTS} requests (cut the trace, or replay a window of it)"
            ));
        }
        rec.requests.push(TraceRequest {
            at_s: at,
            input_tokens: row.input_tokens,
            output_tokens: row.output_tokens,
            hash_ids: row.hash_ids,
        });
        Ok(())
    };
    match format {
        TraceFormat::Mooncake => {
            for (i, line) in text.lines().enumerate() {
                let line_no = i as u64 + 1;
                if line.trim().is_empty() {
                    continue;
                }
                let row = mooncake_row(line).map_err(|e| format!("line {line_no}: {e}"))?;
                push(&mut rec, line_no, row)?;
            }
        }
        TraceFormat::Azure | TraceFormat::Burstgpt => {
            let mut reader = csv::ReaderBuilder::new()
                .trim(csv::Trim::All)
                .from_reader(text.as_bytes());
            let columns = Columns::of(&mut reader, format)?;
            for record in reader.records() {
                let record = record.map_err(|e| csv_problem(&e))?;
                let line = record.position().map_or(0, csv::Position::line);
                if let (Some(want), Some(col)) = (model, columns.model)
                    && record.get(col) != Some(want)
                {
                    rec.other_models += 1;
                    continue;
                }
                let row = columns
                    .row(&record, format)
                    .map_err(|e| format!("line {line}: {e}"))?;
                push(&mut rec, line, row)?;
            }
        }
    }
    if rec.requests.is_empty() {
        return Err(match (rec.no_output, rec.other_models, model) {
            (0, 0, _) => "holds no request".into(),
            (_, n, Some(m)) if n > 0 => format!("holds no request of model {m:?}"),
            (n, ..) => format!("holds no request that asks for output ({n} rows ask for 0 tokens)"),
        });
    }
    rec.span_s = rec.requests.last().map_or(0.0, |r| r.at_s);
    Ok(rec)
}

/// What a CSV reader's error says, by line, without the record's text.
fn csv_problem(e: &csv::Error) -> String {
    let line = e.position().map_or(0, csv::Position::line);
    match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("line {line}: {len} fields where the header has {expected_len}"),
        csv::ErrorKind::Utf8 { .. } => format!("line {line}: not UTF-8"),
        _ => format!("line {line}: not CSV"),
    }
}

/// One row, checked.
struct Row {
    at_s: f64,
    input_tokens: u32,
    output_tokens: u32,
    hash_ids: Vec<u64>,
}

/// Timestamps, turned into seconds after the first and checked for order and for the trace's
/// longest span ([`MAX_SPAN`]).
#[derive(Default)]
struct Stamps {
    first: Option<f64>,
    last: f64,
}

impl Stamps {
    fn next(&mut self, line: u64, t: f64) -> Result<f64, String> {
        let first = *self.first.get_or_insert(t);
        let at = t - first;
        if at > MAX_SPAN.as_secs_f64() {
            let days = MAX_SPAN.as_secs() / 86_400;
            return Err(format!(
                "line {line}: its timestamp is more than {days} days after the first row's (a trace spans at most {days} days: cut the file)"
            ));
        }
        if at < self.last {
            return Err(format!(
                "line {line}: its timestamp is {:.3} s before the line before it (a trace must be in time order)",
                self.last - at
            ));
        }
        self.last = at;
        Ok(at)
    }
}

/// A length field: a whole number from 0 (output) or 1 (input) to [`MAX_TOKENS`].
fn length(name: &str, v: Option<f64>, min: u32) -> Result<u32, String> {
    let Some(v) = v else {
        return Err(format!("{name} is missing"));
    };
    if !v.is_finite() || v.fract() != 0.0 {
        return Err(format!("{name} {v} is not a whole number of tokens"));
    }
    if v < 0.0 {
        return Err(format!("{name} {v} is negative"));
    }
    if v < f64::from(min) || v > f64::from(MAX_TOKENS) {
        return Err(format!(
            "{name} {v} is out of range ({min} to {MAX_TOKENS} tokens)"
        ));
    }
    Ok(v as u32)
}

/// A timestamp field in seconds: finite and not negative.
fn seconds(name: &str, v: Option<f64>, scale: f64) -> Result<f64, String> {
    match v {
        None => Err(format!("{name} is missing")),
        Some(t) if !t.is_finite() => Err(format!("{name} is not a number")),
        Some(t) if t < 0.0 => Err(format!("{name} {t} is negative")),
        Some(t) => Ok(t * scale),
    }
}

fn mooncake_row(line: &str) -> Result<Row, String> {
    let v: Value = serde_json::from_str(line.trim()).map_err(|e| {
        format!(
            "not JSON (column {}): {}",
            e.column(),
            match e.classify() {
                serde_json::error::Category::Eof => "it ends early",
                _ => "a JSON object per line is expected",
            }
        )
    })?;
    let Value::Object(o) = v else {
        return Err("a JSON object per line is expected".into());
    };
    let number = |name: &str| -> Result<Option<f64>, String> {
        match o.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(_) => Err(format!("{name} is not a number")),
        }
    };
    let hash_ids = match o.get("hash_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, id)| {
                id.as_u64()
                    .ok_or_else(|| format!("hash_ids[{i}] is not a whole number from 0"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("hash_ids is not a list".into()),
    };
    Ok(Row {
        at_s: seconds("timestamp", number("timestamp")?, 1e-3)?,
        input_tokens: length("input_length", number("input_length")?, 1)?,
        output_tokens: length("output_length", number("output_length")?, 0)?,
        hash_ids,
    })
}

/// The columns a CSV trace is read by.
struct Columns {
    at: usize,
    input: usize,
    output: usize,
    model: Option<usize>,
}

impl Columns {
    /// The header's names of `format` (matched without regard to case).
    fn names(format: TraceFormat) -> [&'static str; 3] {
        match format {
            TraceFormat::Azure => ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
            _ => ["Timestamp", "Request tokens", "Response tokens"],
        }
    }

    fn of(reader: &mut csv::Reader<&[u8]>, format: TraceFormat) -> Result<Columns, String> {
        let header = reader.headers().map_err(|e| csv_problem(&e))?.clone();
        let find = |name: &str| header.iter().position(|h| h.eq_ignore_ascii_case(name));
        let names = Columns::names(format);
        let mut at = [0usize; 3];
        for (slot, name) in at.iter_mut().zip(names) {
            *slot = find(name).ok_or_else(|| {
                format!(
                    "line 1: no {name} column (a {} trace has {})",
                    format.as_str(),
                    names.join(", ")
                )
            })?;
        }
        Ok(Columns {
            at: at[0],
            input: at[1],
            output: at[2],
            model: find("Model"),
        })
    }

    fn row(&self, r: &csv::StringRecord, format: TraceFormat) -> Result<Row, String> {
        let names = Columns::names(format);
        let num = |i: usize, name: &str| -> Result<Option<f64>, String> {
            match r.get(i).filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(s) => s
                    .parse::<f64>()
                    .map(Some)
                    .map_err(|_| format!("{name} is not a number")),
            }
        };
        let at_s = match format {
            TraceFormat::Azure => azure_time(r.get(self.at).unwrap_or_default())?,
            _ => seconds(names[0], num(self.at, names[0])?, 1.0)?,
        };
        Ok(Row {
            at_s,
            input_tokens: length(names[1], num(self.input, names[1])?, 1)?,
            output_tokens: length(names[2], num(self.output, names[2])?, 0)?,
            hash_ids: Vec::new(),
        })
    }
}

/// An Azure `TIMESTAMP` (`2023-11-16 18:15:46.6805900`, or with an offset `+00:00`), as seconds
/// since the Unix epoch.
fn azure_time(s: &str) -> Result<f64, String> {
    if s.is_empty() {
        return Err("TIMESTAMP is missing".into());
    }
    let t = chrono::DateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f%:z")
        .map(|t| t.naive_utc())
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f"))
        .map_err(|_| "TIMESTAMP is not a date and time like 2023-11-16 18:15:46.680".to_owned())?;
    let t = t.and_utc();
    Ok(t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) * 1e-9)
}

/// The part of a trace replayed: its requests from `start_s` for `duration_s` (trace seconds),
/// their instants counted from `start_s`.
///
/// # Errors
/// When the window holds no request.
pub fn window(
    mut rec: Recording,
    start_s: f64,
    duration_s: Option<f64>,
) -> Result<Recording, String> {
    let end = duration_s.map_or(f64::INFINITY, |d| start_s + d);
    rec.requests.retain(|r| r.at_s >= start_s && r.at_s < end);
    if rec.requests.is_empty() {
        return Err(format!(
            "the window from {start_s} s{} holds no request (the trace spans {:.3} s)",
            duration_s.map_or_else(String::new, |d| format!(" for {d} s")),
            rec.span_s
        ));
    }
    for r in &mut rec.requests {
        r.at_s -= start_s;
    }
    Ok(rec)
}

/// A `trace` prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The file.
    pub file: PathBuf,
    /// Its format.
    pub format: TraceFormat,
    /// BurstGPT: only this model's rows.
    pub model: Option<String>,
    /// Send instants are the trace's times this (0.5: twice as fast).
    pub time_scale: f64,
    /// The window's start, trace seconds after its first request.
    pub start_s: f64,
    /// The window's length, trace seconds (`None`: to the end).
    pub duration_s: Option<f64>,
    /// The seed of the prompts' words (`None`: a fresh seed per run).
    pub seed: Option<u64>,
    /// The window's requests, once read.
    pub recording: Arc<OnceLock<Recording>>,
}

/// What a bench replayed of a trace (the report's `mode.trace`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replayed {
    /// The file, as the config names it.
    pub file: String,
    /// Its format.
    pub format: TraceFormat,
    /// BurstGPT: the model whose rows were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Send instants were the trace's times this.
    pub time_scale: f64,
    /// The window's start, trace seconds.
    pub start_s: f64,
    /// The window's length, trace seconds (absent: to the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Requests replayed.
    pub requests: u64,
    /// Rows skipped for asking no output.
    pub no_output: u64,
    /// Rows of other models skipped.
    pub other_models: u64,
    /// The whole trace's span, trace seconds.
    pub trace_span_s: f64,
    /// The replay's span: the last send instant, s.
    pub replay_span_s: f64,
    /// Its mean arrival rate, requests/s.
    pub mean_rate: f64,
}

// Its numbers are checked finite (a config's time_scale and window, a file's instants), so
// equality is an equivalence (config reloads compare workloads).
impl Eq for Trace {}

impl Trace {
    fn requests(&self) -> &[TraceRequest] {
        self.recording.get().map_or(&[][..], |r| &r.requests)
    }

    /// The send instants of the replay (seconds after its start), in order.
    pub fn offsets(&self) -> Vec<f64> {
        self.requests()
            .iter()
            .map(|r| r.at_s * self.time_scale)
            .collect()
    }

    /// Requests in the replay.
    pub fn len(&self) -> usize {
        self.requests().len()
    }

    /// True before the file is read (a config only parsed).
    pub fn is_empty(&self) -> bool {
        self.requests().is_empty()
    }

    /// The replay's mean arrival rate, requests/s: `(n − 1)` over its span (1 for a single
    /// request or one instant).
    pub fn mean_rate(&self) -> f64 {
        let reqs = self.requests();
        match reqs.last().map(|r| r.at_s * self.time_scale) {
            Some(span) if reqs.len() > 1 && span > 0.0 => (reqs.len() - 1) as f64 / span,
            _ => 1.0,
        }
    }

    /// What is replayed, for the report.
    pub fn replayed(&self) -> Replayed {
        let rec = self.recording.get();
        let reqs = self.requests();
        Replayed {
            file: self.file.display().to_string(),
            format: self.format,
            model: self.model.clone(),
            time_scale: self.time_scale,
            start_s: self.start_s,
            duration_s: self.duration_s,
            requests: reqs.len() as u64,
            no_output: rec.map_or(0, |r| r.no_output),
            other_models: rec.map_or(0, |r| r.other_models),
            trace_span_s: rec.map_or(0.0, |r| r.span_s),
            replay_span_s: reqs.last().map_or(0.0, |r| r.at_s * self.time_scale),
            mean_rate: self.mean_rate(),
        }
    }

    /// The content of replayed request `seq` (`seq` modulo the trace's length, so `serve` can
    /// probe it in turn): its input built block by block, its output length as the cap.
    pub(super) fn draw(&self, seq: u64, tokens: &TokenModel) -> RequestContent {
        let reqs = self.requests();
        let Some(r) = (!reqs.is_empty()).then(|| &reqs[(seq % reqs.len() as u64) as usize]) else {
            return RequestContent {
                messages: Vec::new(),
                max_tokens: None,
                requested_input_tokens: None,
                requested_output_tokens: None,
                turn: None,
                request_id: None,
                ..Default::default()
            };
        };
        let seed = self.seed.unwrap_or(0);
        RequestContent {
            messages: vec![user(prompt_text(seed, seq, r, tokens))],
            max_tokens: Some(r.output_tokens),
            requested_input_tokens: Some(r.input_tokens),
            requested_output_tokens: Some(r.output_tokens),
            turn: None,
            request_id: None,
            ..Default::default()
        }
    }
}

/// The words of request `seq`'s input: block `j` is the words of its `j`-th hash id when it has
/// one (the same for every request with that id), else words of its own.
fn prompt_text(seed: u64, seq: u64, r: &TraceRequest, tokens: &TokenModel) -> String {
    let per_block = tokens.words_for(BLOCK_TOKENS).max(1);
    let mut left = tokens.words_for_prompt(r.input_tokens);
    let mut own = Rng::for_request(seed, seq);
    let mut text = String::with_capacity(left * 6);
    for j in 0.. {
        if left == 0 {
            break;
        }
        let n = left.min(per_block);
        let part = match r.hash_ids.get(j) {
            Some(&id) => words(&mut Rng::for_request(seed ^ BLOCK_SALT, id), n),
            None => words(&mut own, n),
        };
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&part);
        left -= n;
    }
    text
}

#[cfg(test)]
mod tests;
