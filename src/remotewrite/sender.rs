//! The remote-write queue and its POSTs (I/O).
//!
//! The sweep hands each finished level to [`Queue::level_done`], which builds its series and
//! offers them to a bounded queue without waiting: when the queue is full (the receiver is down
//! or slow) the level's batch is dropped and counted, so a receiver never holds up the load. One
//! task POSTs the batches in order through a [`Fetcher`] (TLS trust as a target's, no proxy, a
//! kept connection), each attempt bounded by the spec's timeout; 5xx, 429 and transport errors
//! are retried twice (0.5 s, then 1 s later), other answers are final, as the remote-write
//! specification asks of a sender. At the end, [`RemoteWrite::finish`] waits a bounded time for
//! the queue to drain and says what was sent, failed and dropped.

use super::series::{LevelLabels, body, level_series};
use crate::bench::LevelSink;
use crate::bench::report::ModelReport;
use crate::bench::stats::LevelStats;
use crate::transport::{Fetcher, TlsOptions, TransportError};
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// Batches waiting to be sent (levels): past it, a level's batch is dropped.
pub const QUEUE: usize = 64;

/// The largest answer body read from a receiver.
const MAX_ANSWER: usize = 64 * 1024;

/// Where and how to send.
#[derive(Debug, Clone)]
pub struct RemoteWriteSpec {
    /// The receiver's URL (`http(s)://[user:password@]host/api/v1/write`).
    pub url: String,
    /// Headers sent with every POST (a token, a tenant).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// TLS trust.
    pub tls: TlsOptions,
    /// Each attempt's time limit.
    pub timeout: Duration,
}

/// What became of the levels' batches: how many were delivered, failed, dropped or left unsent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivery {
    /// Accepted (2xx).
    pub sent: u64,
    /// Refused or never answered, after the retries.
    pub failed: u64,
    /// Dropped because the queue was full.
    pub dropped: u64,
    /// Left in the queue when the time to drain it ran out.
    pub unsent: u64,
    /// The last failure, in words.
    pub last_error: Option<String>,
}

/// The sweep's side: builds a level's series and offers them without waiting.
#[derive(Debug)]
pub struct Queue {
    tx: Mutex<Option<mpsc::Sender<Bytes>>>,
    run_id: String,
    mode: String,
    shard: Option<String>,
    prompt: String,
    dropped: AtomicU64,
    queued: AtomicU64,
}

impl LevelSink for Queue {
    fn level_done(&self, model: &ModelReport, level: &LevelStats) {
        let labels = LevelLabels {
            run_id: self.run_id.clone(),
            model: model.model.clone(),
            target: model.target.clone().unwrap_or_default(),
            prompt: model.prompt.clone().unwrap_or_else(|| self.prompt.clone()),
            level: level.key.label(),
            mode: self.mode.clone(),
            shard: self.shard.clone(),
        };
        let t_ms = chrono::Utc::now().timestamp_millis();
        let batch = Bytes::from(body(level_series(&labels, level, t_ms)));
        let Ok(guard) = self.tx.lock() else {
            return;
        };
        match guard.as_ref().map(|tx| tx.try_send(batch)) {
            Some(Ok(())) => {
                self.queued.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A running remote write: the queue the sweep feeds and the task that sends.
#[derive(Debug)]
pub struct RemoteWrite {
    queue: std::sync::Arc<Queue>,
    task: tokio::task::JoinHandle<Delivery>,
    url: String,
}

impl RemoteWrite {
    /// Starts the sending task (on the current runtime) for the run `run_id` (`mode`: closed or
    /// open; `shard`: `i/N` when sharded; `prompt`: the run's).
    ///
    /// # Errors
    /// [`TransportError`] when the TLS settings are unusable.
    pub fn start(
        spec: RemoteWriteSpec,
        run_id: &str,
        mode: &str,
        shard: Option<String>,
        prompt: &str,
    ) -> Result<Self, TransportError> {
        let mut fetcher = Fetcher::new(spec.tls.clone(), spec.timeout)?;
        let (tx, mut rx) = mpsc::channel::<Bytes>(QUEUE);
        let url = crate::redact::redact_url(&spec.url);
        let task = tokio::spawn(async move {
            let mut out = Delivery::default();
            let mut headers = spec.headers.clone();
            for (k, v) in [
                ("content-encoding", "snappy"),
                ("content-type", "application/x-protobuf"),
                ("x-prometheus-remote-write-version", "0.1.0"),
                (
                    "user-agent",
                    concat!("tokenprobe/", env!("CARGO_PKG_VERSION")),
                ),
            ] {
                headers.push((HeaderName::from_static(k), HeaderValue::from_static(v)));
            }
            while let Some(batch) = rx.recv().await {
                match send(&mut fetcher, &spec, &headers, batch).await {
                    Ok(()) => out.sent += 1,
                    Err(e) => {
                        out.failed += 1;
                        out.last_error = Some(e);
                    }
                }
            }
            out
        });
        Ok(Self {
            queue: std::sync::Arc::new(Queue {
                tx: Mutex::new(Some(tx)),
                run_id: run_id.to_owned(),
                mode: mode.to_owned(),
                shard,
                prompt: prompt.to_owned(),
                dropped: AtomicU64::new(0),
                queued: AtomicU64::new(0),
            }),
            task,
            url,
        })
    }

    /// The sweep's side of it.
    pub fn sink(&self) -> std::sync::Arc<dyn LevelSink> {
        self.queue.clone()
    }

    /// The receiver's URL, userinfo and secrets hidden.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Closes the queue and waits up to `limit` for the batches in it to be sent; what became of
    /// every level's batch.
    pub async fn finish(self, limit: Duration) -> Delivery {
        if let Ok(mut tx) = self.queue.tx.lock() {
            tx.take();
        }
        let queued = self.queue.queued.load(Ordering::Relaxed);
        let dropped = self.queue.dropped.load(Ordering::Relaxed);
        let mut task = self.task;
        let mut out = match tokio::time::timeout(limit, &mut task).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => Delivery {
                last_error: Some(format!("the sending task failed: {e}")),
                ..Delivery::default()
            },
            Err(_) => {
                task.abort();
                Delivery {
                    last_error: Some(format!(
                        "the receiver did not take the last batches within {limit:?}"
                    )),
                    ..Delivery::default()
                }
            }
        };
        out.dropped = dropped;
        out.unsent = queued.saturating_sub(out.sent + out.failed);
        out
    }
}

/// One batch, with the retries the specification asks for; the last failure in words.
async fn send(
    fetcher: &mut Fetcher,
    spec: &RemoteWriteSpec,
    headers: &[(HeaderName, HeaderValue)],
    batch: Bytes,
) -> Result<(), String> {
    let mut last = String::new();
    for (attempt, pause) in [0u64, 500, 1000].into_iter().enumerate() {
        if pause > 0 {
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        let answer = tokio::time::timeout(
            spec.timeout,
            fetcher.post(&spec.url, headers, batch.clone(), MAX_ANSWER),
        )
        .await;
        let retry = match answer {
            Ok(Ok(a)) if (200..300).contains(&a.status) => return Ok(()),
            Ok(Ok(a)) => {
                let text = String::from_utf8_lossy(&a.body);
                last = format!(
                    "HTTP {}: {}",
                    a.status,
                    crate::units::truncate(text.trim(), 200)
                );
                a.status >= 500 || a.status == 429
            }
            Ok(Err(e)) => {
                last = e.to_string();
                true
            }
            Err(_) => {
                last = format!("no answer within {:?}", spec.timeout);
                true
            }
        };
        if !retry {
            break;
        }
        if attempt == 2 {
            last.push_str(" (after 3 attempts)");
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::tests::synthetic;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A receiver answering every request with `status` on its own connection, after `delay`;
    /// the bodies it received.
    async fn receiver(
        status: u16,
        delay: Duration,
    ) -> (String, std::sync::Arc<Mutex<Vec<Vec<u8>>>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let got = std::sync::Arc::new(Mutex::new(Vec::new()));
        let keep = got.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let got = keep.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Head, then Content-Length bytes of body.
                    loop {
                        let n = s.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_string();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let len: usize = text
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length: "))
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                            if buf.len() >= end + 4 + len {
                                got.lock()
                                    .unwrap()
                                    .push(buf[end + 4..end + 4 + len].to_vec());
                                break;
                            }
                        }
                    }
                    tokio::time::sleep(delay).await;
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnope"
                    );
                    let _ = s.write_all(answer.as_bytes()).await;
                });
            }
        });
        (format!("http://{addr}/api/v1/write"), got)
    }

    fn spec(url: &str, timeout: Duration) -> RemoteWriteSpec {
        RemoteWriteSpec {
            url: url.into(),
            headers: vec![],
            tls: TlsOptions::default(),
            timeout,
        }
    }

    #[tokio::test]
    async fn each_level_is_one_post_a_4xx_is_final_and_a_5xx_is_retried() {
        let r = synthetic();
        let m = &r.models[0];
        let (ok, got) = receiver(204, Duration::ZERO).await;
        let w = RemoteWrite::start(
            spec(&ok, Duration::from_secs(2)),
            "r",
            "closed",
            None,
            "hello",
        )
        .unwrap();
        for l in &m.levels {
            w.sink().level_done(m, l);
        }
        let out = w.finish(Duration::from_secs(10)).await;
        assert_eq!((out.sent, out.failed, out.dropped), (3, 0, 0), "{out:?}");
        assert_eq!(got.lock().unwrap().len(), 3);

        let (bad, got) = receiver(400, Duration::ZERO).await;
        let w = RemoteWrite::start(spec(&bad, Duration::from_secs(2)), "r", "closed", None, "p")
            .unwrap();
        w.sink().level_done(m, &m.levels[0]);
        let out = w.finish(Duration::from_secs(10)).await;
        assert_eq!((out.sent, out.failed), (0, 1));
        assert_eq!(out.last_error.as_deref(), Some("HTTP 400: nope"));
        assert_eq!(got.lock().unwrap().len(), 1, "no retry of a 4xx");

        let (busy, got) = receiver(503, Duration::ZERO).await;
        let w = RemoteWrite::start(
            spec(&busy, Duration::from_secs(2)),
            "r",
            "closed",
            None,
            "p",
        )
        .unwrap();
        w.sink().level_done(m, &m.levels[0]);
        let out = w.finish(Duration::from_secs(10)).await;
        assert_eq!(out.failed, 1);
        assert_eq!(
            out.last_error.as_deref(),
            Some("HTTP 503: nope (after 3 attempts)")
        );
        assert_eq!(got.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn a_stuck_receiver_never_holds_up_the_sweep() {
        let r = synthetic();
        let m = &r.models[0];
        // Answers after 30 s; each attempt gives up after 100 ms.
        let (stuck, _) = receiver(204, Duration::from_secs(30)).await;
        let w = RemoteWrite::start(
            spec(&stuck, Duration::from_millis(100)),
            "r",
            "closed",
            None,
            "p",
        )
        .unwrap();
        let t0 = std::time::Instant::now();
        for _ in 0..(QUEUE + 20) {
            w.sink().level_done(m, &m.levels[0]);
        }
        // Offering 84 levels took no receiver's time (each is built and queued, or dropped).
        let offered = t0.elapsed();
        let out = w.finish(Duration::from_millis(500)).await;
        // Blocking on the receiver would take 84 × 100 ms at least.
        assert!(offered < Duration::from_secs(5), "{offered:?}");
        assert!(out.dropped >= 19, "{out:?}");
        assert_eq!(
            out.sent + out.failed + out.unsent + out.dropped,
            (QUEUE + 20) as u64,
            "{out:?}"
        );
        assert!(out.unsent > 0, "{out:?}");
    }
}
