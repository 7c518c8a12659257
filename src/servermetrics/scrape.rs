//! The collector: scrapes every endpoint right before a level, every interval while it runs,
//! and right after it, on a thread and runtime of its own (never the probes' runtime; at nice
//! +10, as `serve`'s web threads), each
//! scrape bounded in time ([`Endpoint::timeout`]) and size ([`MAX_SCRAPE_BYTES`]). A scrape
//! that fails for any reason (down, slow, not 200, too large, not an exposition) is counted
//! in `scrape_errors` and leaves a gap; it never stops or delays the level.
//!
//! One request per scrape through the probes' own transport ([`Fetcher`]: no redirects, no
//! retries, no proxy; metrics endpoints sit beside the server, and a proxy would add its own
//! failures to the server's numbers), one kept connection per endpoint.

use super::expo;
use super::level::{ENDPOINT_LABEL, Folded, LevelFold, Phase, Snapshot};
use super::signals::Signal;
use super::{Endpoint, MAX_SCRAPE_BYTES};
use crate::redact::redact_url;
use crate::transport::{Fetcher, TlsOptions};
use hyper::header::{ACCEPT, HeaderValue};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// What one endpoint scrape gave.
type ScrapeResult = Result<Vec<expo::Reading>, String>;

const ACCEPT_METRICS: &str =
    "application/openmetrics-text;version=1.0.0;q=0.9,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// Scrapes one endpoint once, within its timeout and [`MAX_SCRAPE_BYTES`].
///
/// # Errors
/// Why the scrape failed (secrets redacted: the URL is shown without userinfo or query values).
pub async fn scrape_once(client: &mut Fetcher, ep: &Endpoint) -> ScrapeResult {
    let shown = redact_url(&ep.url);
    let work = async {
        let mut headers = vec![(ACCEPT, HeaderValue::from_static(ACCEPT_METRICS))];
        if let Some((style, key)) = &ep.auth {
            let k = key.load().await?;
            headers.push(style.header(&k)?);
        }
        let got = client
            .get(&ep.url, &headers, MAX_SCRAPE_BYTES)
            .await
            .map_err(|e| e.to_string())?;
        if got.status != 200 {
            return Err(format!("HTTP {}", got.status));
        }
        let text = String::from_utf8(got.body).map_err(|_| "not UTF-8 text".to_owned())?;
        expo::parse(&text).map_err(|e| format!("not a metrics exposition ({e})"))
    };
    match tokio::time::timeout(ep.timeout, work).await {
        Ok(r) => r.map_err(|e| format!("{shown}: {e}")),
        Err(_) => Err(format!(
            "{shown}: no complete answer within {}",
            humantime::format_duration(ep.timeout)
        )),
    }
}

enum Cmd {
    /// A level of this model (its served name) begins.
    Begin(Option<String>, oneshot::Sender<()>),
    /// The level ended after this wall time.
    End(f64, oneshot::Sender<Folded>),
}

/// The running collector. Dropping it stops its thread.
pub struct Collector {
    tx: mpsc::UnboundedSender<Cmd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Collector {
    /// Starts the collector's thread (its own current-thread runtime). Of each scrape it keeps
    /// only the samples the `signals` read, and folds it into the level at once
    /// ([`LevelFold`]): a level's memory grows neither with the size of the expositions nor with
    /// its length.
    ///
    /// # Errors
    /// The thread, runtime or HTTP client could not be made.
    pub fn start(endpoints: Vec<Endpoint>, signals: Vec<Signal>) -> Result<Collector, String> {
        let clients = endpoints
            .iter()
            .map(|e| {
                Fetcher::new(TlsOptions::default(), e.timeout)
                    .map(tokio::sync::Mutex::new)
                    .map_err(|e| format!("cannot build the metrics client: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the metrics runtime: {e}"))?;
        let thread = std::thread::Builder::new()
            .name("tokenprobe-servermetrics".into())
            .spawn(move || {
                // Below the probes: when both want the CPU, the probes' reads get it first.
                crate::resources::lower_thread_priority(10);
                rt.block_on(run(clients, endpoints, signals, rx));
            })
            .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
        Ok(Collector {
            tx,
            thread: Some(thread),
        })
    }

    /// Scrapes every endpoint once (the level's "before"), then starts the periodic scrapes;
    /// returns when the "before" scrape is done (within the endpoints' timeouts), so the level
    /// starts after it. `model`: the benched model's served name (series of other models left
    /// out where the server labels them).
    pub async fn begin_level(&self, model: Option<&str>) {
        let (tx, rx) = oneshot::channel();
        if self
            .tx
            .send(Cmd::Begin(model.map(str::to_owned), tx))
            .is_ok()
        {
            let _ = rx.await;
        }
    }

    /// Stops the periodic scrapes, scrapes once more (the level's "after") and returns the
    /// level folded, `wall_s` its wall time.
    pub async fn end_level(&self, wall_s: f64) -> Folded {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Cmd::End(wall_s, tx)).is_err() {
            return Folded::default();
        }
        rx.await.unwrap_or_default()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        let (tx, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a level's scrapes need besides the endpoints.
struct Ctx {
    /// One client per endpoint (each keeps its connection).
    clients: Vec<tokio::sync::Mutex<Fetcher>>,
    endpoints: Vec<Endpoint>,
    keep: HashSet<String>,
}

/// Scrapes `due` endpoints at once; merges the answers (the samples in `ctx.keep`) into one
/// snapshot at `at_s`, counting the scrapes (and the first failure of each endpoint) in `level`.
async fn scrape_all(ctx: &Ctx, due: &[usize], at_s: f64, level: &mut LevelFold) -> Snapshot {
    let (clients, endpoints) = (&ctx.clients, &ctx.endpoints);
    let results = futures_util::future::join_all(due.iter().map(|&i| async move {
        let mut client = clients[i].lock().await;
        (i, scrape_once(&mut client, &endpoints[i]).await)
    }))
    .await;
    let mut snap = Snapshot {
        at_s,
        samples: Vec::new(),
    };
    for (i, r) in results {
        level.scrapes += 1;
        match r {
            Ok(mut samples) => {
                samples.retain(|s| ctx.keep.contains(&s.name));
                let tag = i.to_string();
                for s in &mut samples {
                    s.labels.push((ENDPOINT_LABEL.to_owned(), tag.clone()));
                }
                snap.samples.append(&mut samples);
            }
            Err(e) => {
                level.scrape_errors += 1;
                // The first failure of each endpoint (its message starts with its URL).
                let shown = redact_url(&endpoints[i].url);
                if level.errors.len() < 8 && !level.errors.iter().any(|x| x.starts_with(&shown)) {
                    level.errors.push(e);
                }
            }
        }
    }
    snap
}

async fn run(
    clients: Vec<tokio::sync::Mutex<Fetcher>>,
    endpoints: Vec<Endpoint>,
    signals: Vec<Signal>,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
) {
    let ctx = Ctx {
        clients,
        endpoints,
        keep: super::signals::sample_names(&signals),
    };
    let endpoints = &ctx.endpoints;
    let all: Vec<usize> = (0..endpoints.len()).collect();
    let tick = endpoints
        .iter()
        .map(|e| e.interval)
        .min()
        .unwrap_or(super::DEFAULT_INTERVAL)
        .max(Duration::from_millis(10));
    while let Some(cmd) = rx.recv().await {
        let (model, started) = match cmd {
            Cmd::Begin(model, started) => (model, started),
            // An End without a Begin: nothing was collected.
            Cmd::End(_, reply) => {
                let _ = reply.send(Folded::default());
                continue;
            }
        };
        let mut level = LevelFold::new(&signals, model.as_deref());
        let t_before = Instant::now();
        let mut before = scrape_all(&ctx, &all, 0.0, &mut level).await;
        let start = Instant::now();
        before.at_s = -(start - t_before).as_secs_f64();
        level.add(Phase::Before, before);
        let _ = started.send(());
        let mut next_due: Vec<Instant> = endpoints.iter().map(|e| start + e.interval).collect();
        let mut ticker = tokio::time::interval_at((start + tick).into(), tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    let now = Instant::now();
                    let due: Vec<usize> = (0..endpoints.len()).filter(|&i| next_due[i] <= now + tick / 2).collect();
                    for &i in &due {
                        next_due[i] = now + endpoints[i].interval;
                    }
                    if !due.is_empty() {
                        let at_s = (now - start).as_secs_f64();
                        let s = scrape_all(&ctx, &due, at_s, &mut level).await;
                        level.add(Phase::During, s);
                    }
                }
                cmd = rx.recv() => {
                    match cmd {
                        Some(Cmd::End(wall_s, reply)) => {
                            let at_s = (Instant::now() - start).as_secs_f64();
                            let after = scrape_all(&ctx, &all, at_s, &mut level).await;
                            level.add(Phase::After, after);
                            let _ = reply.send(level.finish(wall_s));
                        }
                        Some(Cmd::Begin(_, again)) => {
                            // A level begun twice: keep collecting this one.
                            let _ = again.send(());
                            continue;
                        }
                        None => return,
                    }
                    break;
                }
            }
        }
    }
}
