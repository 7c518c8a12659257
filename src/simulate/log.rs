//! `--event-log FILE`: one JSON line per finished request with the instant each event was written,
//! formatted and written by a dedicated thread so connection tasks only hand over a record.
//!
//! ```text
//! {"id":"sim-0-1a2b3c4d","seq":0,"conn":0,"path":"/v1/chat/completions","arrival_unix_ns":…,
//!  "arrival_kernel_unix_ns":…,"stream":true,"status":200,"fault":null,"model":"fast","profile":"fast","input_tokens":132,"cached_tokens":0,
//!  "prefill_s":0.001320000,"output_tokens":64,"tool_call":false,"queued_s":0.000000000,"head_written_s":0.000041,
//!  "end":"complete","events":[{"k":0,"due_s":0.0,"t_s":0.000052,"tx_s":0.000061,"token":false},
//!  {"k":1,"due_s":0.2,"t_s":0.200113,"tx_s":0.200120,"token":true},…]}
//! ```
//!
//! Times are seconds after *arrival* (the request body read in full): `due_s` is the schedule,
//! `t_s` the instant the event's write returned. `tx_s` is the wire's instant: when the event's
//! last byte left by the kernel's transmit stamp, seconds after the kernel received the request's
//! last bytes (`arrival_kernel_unix_ns`); `null` where either was not stamped. `id` is the request's `x-request-id` when it sent
//! one (echoed in the response), else generated. `fault` is the injected fault (`"429"`, `"stall"`,
//! …); `end` is `complete`, `closed` (the server cut the stream: `truncate`) or `client_gone`.
//! `queued_s` is the wait for a `--max-concurrency` slot. Non-stream answers have one event (the
//! whole body); status faults have none. `model` is the request's, `profile` the `--profile` it
//! picked (`null`: the command's defaults); `input_tokens` follow the token rule
//! (`simulate::profile`), `cached_tokens` of them came from the prefix cache, and `prefill_s` is
//! what their prefill added to the TTFT; `tool_call` is true when the answer was a tool call
//! (its `output_tokens` are the call's arguments).

use super::body::json_str;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One written event: when it was due and when its write returned, both after arrival.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct EventRec {
    /// Scheduled offset from arrival.
    pub due: Duration,
    /// Offset from arrival at which the write returned.
    pub at: Duration,
    /// Token-bearing.
    pub token: bool,
    /// The transmit stamp id of its last byte (`kstamp::SentStream`), when the socket stamps.
    pub tx_id: Option<u32>,
    /// When its last byte left, by the kernel's transmit stamp.
    pub sent: Option<SystemTime>,
}

/// How a request ended, from the server's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Everything was written.
    Complete,
    /// The server closed on purpose (the `truncate` fault).
    Closed,
    /// The client closed or reset the connection first.
    ClientGone,
}

/// One request's log line.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub id: String,
    pub seq: u64,
    /// The connection it came on (accept order), so a client's connection reuse can be counted.
    pub conn: u64,
    pub path: String,
    pub arrival_unix_ns: u128,
    /// The kernel's receive instant of the request's last bytes (`SO_TIMESTAMPNS`), when known:
    /// `arrival_unix_ns` minus this is how late the simulator read the request.
    pub arrival_kernel_unix_ns: Option<u128>,
    pub stream: bool,
    pub status: u16,
    pub fault: Option<String>,
    /// The request's `model`.
    pub model: String,
    /// The `--profile` it picked (`None`: the defaults).
    pub profile: Option<String>,
    /// Input tokens by the token rule (`usage.prompt_tokens`).
    pub input_tokens: u32,
    /// Of them, served from the prefix cache.
    pub cached_tokens: u32,
    /// The prefill time added to the TTFT.
    pub prefill: Duration,
    pub output_tokens: u32,
    /// The answer was a tool call (`tool_calls=on`, a request offering tools).
    pub tool_call: bool,
    /// Waiting for a `--max-concurrency` slot.
    pub queued: Duration,
    /// When the response head's write returned (after arrival).
    pub head_written: Option<Duration>,
    pub events: Vec<EventRec>,
    pub end: End,
}

fn secs(d: Duration) -> String {
    format!("{:.9}", d.as_secs_f64())
}

impl Record {
    /// The record of a request as it arrives (answered 200 and complete until told otherwise):
    /// its id, sequence and connection numbers, path, and arrival instants (user space, kernel).
    pub(crate) fn arrived(
        id: String,
        (seq, conn): (u64, u64),
        path: &str,
        wall: SystemTime,
        received: Option<SystemTime>,
    ) -> Record {
        let ns = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Record {
            id,
            seq,
            conn,
            path: path.to_owned(),
            arrival_unix_ns: ns(wall),
            arrival_kernel_unix_ns: received.map(ns),
            stream: false,
            status: 200,
            fault: None,
            model: String::new(),
            profile: None,
            input_tokens: 0,
            cached_tokens: 0,
            prefill: Duration::ZERO,
            output_tokens: 0,
            tool_call: false,
            queued: Duration::ZERO,
            head_written: None,
            events: Vec::new(),
            end: End::Complete,
        }
    }

    /// The JSON line (without the newline).
    pub(crate) fn to_line(&self) -> String {
        let mut s = String::with_capacity(256 + self.events.len() * 56);
        let _ = write!(
            s,
            r#"{{"id":{},"seq":{},"conn":{},"path":{},"arrival_unix_ns":{},"arrival_kernel_unix_ns":{},"stream":{},"status":{},"fault":{},"model":{},"profile":{},"input_tokens":{},"cached_tokens":{},"prefill_s":{},"output_tokens":{},"tool_call":{},"queued_s":{},"head_written_s":{},"end":"{}","events":["#,
            json_str(&self.id),
            self.seq,
            self.conn,
            json_str(&self.path),
            self.arrival_unix_ns,
            self.arrival_kernel_unix_ns
                .map_or_else(|| "null".to_owned(), |n| n.to_string()),
            self.stream,
            self.status,
            self.fault
                .as_deref()
                .map_or_else(|| "null".to_owned(), json_str),
            json_str(&self.model),
            self.profile
                .as_deref()
                .map_or_else(|| "null".to_owned(), json_str),
            self.input_tokens,
            self.cached_tokens,
            secs(self.prefill),
            self.output_tokens,
            self.tool_call,
            secs(self.queued),
            self.head_written.map_or_else(|| "null".to_owned(), secs),
            match self.end {
                End::Complete => "complete",
                End::Closed => "closed",
                End::ClientGone => "client_gone",
            },
        );
        for (k, e) in self.events.iter().enumerate() {
            if k > 0 {
                s.push(',');
            }
            // When its last byte left, after the request's last byte arrived (kernel stamps).
            let tx = e
                .sent
                .map(|t| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()))
                .zip(self.arrival_kernel_unix_ns)
                .and_then(|(t, a)| t.checked_sub(a))
                .map_or_else(
                    || "null".to_owned(),
                    |ns| format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000),
                );
            let _ = write!(
                s,
                r#"{{"k":{k},"due_s":{},"t_s":{},"tx_s":{tx},"token":{}}}"#,
                secs(e.due),
                secs(e.at),
                e.token
            );
        }
        s.push_str("]}");
        s
    }
}

enum Msg {
    Rec(Box<Record>),
    Stop,
}

/// The log writer: a thread that drains records, writes lines and flushes whenever it has
/// caught up (so the file is current a moment after each request ends).
pub(crate) struct EventLog {
    tx: Sender<Msg>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl EventLog {
    /// Creates (truncates) `path` and starts the writer thread.
    pub(crate) fn create(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::File::create(path)?;
        let (tx, rx) = channel();
        let thread = std::thread::Builder::new()
            .name("simulate-event-log".into())
            .spawn(move || writer(file, rx))?;
        Ok(EventLog {
            tx,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues one record (never blocks).
    pub(crate) fn send(&self, r: Record) {
        let _ = self.tx.send(Msg::Rec(Box::new(r)));
    }

    /// Writes what is queued, flushes and stops the thread.
    pub(crate) fn close(&self) {
        let _ = self.tx.send(Msg::Stop);
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

fn writer(file: std::fs::File, rx: Receiver<Msg>) {
    let mut w = std::io::BufWriter::with_capacity(256 * 1024, file);
    let mut failed = false;
    let mut put = |w: &mut std::io::BufWriter<std::fs::File>, r: &Record| {
        if !failed && writeln!(w, "{}", r.to_line()).is_err() {
            failed = true;
            tracing::warn!("cannot write the event log; dropping further records");
        }
    };
    while let Ok(msg) = rx.recv() {
        let mut stop = false;
        match msg {
            Msg::Rec(r) => put(&mut w, &r),
            Msg::Stop => stop = true,
        }
        while let Ok(m) = rx.try_recv() {
            match m {
                Msg::Rec(r) => put(&mut w, &r),
                Msg::Stop => stop = true,
            }
        }
        let _ = w.flush();
        if stop {
            return;
        }
    }
    let _ = w.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_is_json_with_relative_times() {
        let r = Record {
            id: "a\"b".into(),
            seq: 3,
            conn: 1,
            path: "/v1/messages".into(),
            arrival_unix_ns: 1_700_000_000_000_000_000,
            arrival_kernel_unix_ns: Some(1_699_999_999_999_000_000),
            stream: true,
            status: 200,
            fault: None,
            model: "m".into(),
            profile: Some("m".into()),
            input_tokens: 132,
            cached_tokens: 128,
            prefill: Duration::from_micros(40),
            output_tokens: 2,
            tool_call: true,
            queued: Duration::ZERO,
            head_written: Some(Duration::from_micros(15)),
            events: vec![
                EventRec {
                    due: Duration::from_millis(200),
                    at: Duration::from_nanos(200_123_456),
                    token: true,
                    tx_id: Some(411),
                    // 1 ms after the kernel's arrival stamp, 0.2 s and 20 us later.
                    sent: Some(UNIX_EPOCH + Duration::from_nanos(1_700_000_000_200_020_000)),
                },
                EventRec {
                    due: Duration::from_millis(300),
                    at: Duration::from_millis(300),
                    token: true,
                    tx_id: None,
                    sent: None,
                },
            ],
            end: End::Complete,
        };
        let v: serde_json::Value = serde_json::from_str(&r.to_line()).unwrap();
        assert_eq!(v["id"], "a\"b");
        assert_eq!(v["conn"], 1);
        assert_eq!(v["arrival_kernel_unix_ns"], 1_699_999_999_999_000_000u64);
        assert_eq!(v["fault"], serde_json::Value::Null);
        assert_eq!(v["events"][0]["k"], 0);
        assert_eq!(v["events"][0]["t_s"].as_f64(), Some(0.200123456));
        assert_eq!(v["events"][0]["tx_s"].as_f64(), Some(0.201020000));
        assert_eq!(v["events"][1]["tx_s"], serde_json::Value::Null);
        assert_eq!(
            v["arrival_unix_ns"].as_u64(),
            Some(1_700_000_000_000_000_000)
        );
        assert_eq!(v["end"], "complete");
        assert_eq!(v["tool_call"], true);
        assert_eq!(
            (v["model"].as_str(), v["profile"].as_str()),
            (Some("m"), Some("m"))
        );
        assert_eq!(
            (v["input_tokens"].as_u64(), v["cached_tokens"].as_u64()),
            (Some(132), Some(128))
        );
        assert_eq!(v["prefill_s"].as_f64(), Some(0.00004));
    }

    #[test]
    fn writer_flushes_on_close() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ev.jsonl");
        let log = EventLog::create(&p).unwrap();
        for seq in 0..3 {
            log.send(Record {
                status: 429,
                fault: Some("429".into()),
                model: "m".into(),
                input_tokens: 1,
                ..Record::arrived(format!("r{seq}"), (seq, 0), "/", UNIX_EPOCH, None)
            });
        }
        log.close();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 3);
    }
}
