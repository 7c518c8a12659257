//! Levels from a known server state: `--reset-prefix-cache` empties the server's prefix cache
//! before each level (after its warm-up, right before its measured requests), `--cache-bust`
//! gives every request a unique leading block ([`crate::probe::ProbeSpec::cache_bust`]), and
//! each level states the cache it started from ([`CacheState`]: reset, busted, both, or warm).
//!
//! The reset is the server's own endpoint, chosen by the type its provenance found
//! ([`reset_call`]): vLLM's `POST /reset_prefix_cache` (which vLLM serves with
//! `VLLM_SERVER_DEV_MODE=1`), SGLang's `POST /flush_cache`; a server of unknown type is asked
//! vLLM's path; TGI and llama.cpp have none. A server that cannot is said once and the run goes
//! on, its levels warm with the reason beside them. In a sharded run only shard 0 resets.

use super::efficiency::{CacheKind, CacheState};
use super::progress::Progress;
use super::provenance::{Provenance, ServerKind};
use crate::config::Target;
use crate::transport::Fetcher;
use std::time::Duration;

/// What the levels start from (`--reset-prefix-cache`, `--cache-bust`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CachePlan {
    /// Reset the server's prefix cache before each level.
    pub reset: bool,
    /// Every request with a unique leading block.
    pub bust: bool,
}

impl CachePlan {
    /// `--reset-prefix-cache` and `--cache-bust` as given.
    pub fn new(reset: bool, bust: bool) -> CachePlan {
        CachePlan { reset, bust }
    }
}

/// How long a reset may take.
pub const RESET_TIMEOUT: Duration = Duration::from_secs(10);

/// How a server's prefix cache is reset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetCall {
    /// `POST` this path at the server's root.
    Post(&'static str),
    /// It cannot be: why.
    Cannot(&'static str),
}

/// The reset of a server of type `kind` (`None`: not known).
pub fn reset_call(kind: Option<ServerKind>) -> ResetCall {
    match kind {
        Some(ServerKind::Vllm) | None => ResetCall::Post("/reset_prefix_cache"),
        Some(ServerKind::Sglang) => ResetCall::Post("/flush_cache"),
        Some(ServerKind::Tgi) => ResetCall::Cannot("TGI has no endpoint that resets its cache"),
        Some(ServerKind::LlamaCpp) => {
            ResetCall::Cannot("llama.cpp's server has no endpoint that resets its cache")
        }
    }
}

/// The state a level starts from: the plan, and how its reset went (`None`: none was asked
/// for; `Err`: why it did not happen).
pub fn state(plan: CachePlan, reset: Option<Result<(), String>>) -> CacheState {
    let (reset_done, note) = match reset {
        Some(Ok(())) => (true, None),
        Some(Err(why)) => (false, Some(format!("not reset: {why}"))),
        None => (false, None),
    };
    let state = match (reset_done, plan.bust) {
        (true, true) => CacheKind::ResetAndBusted,
        (true, false) => CacheKind::Reset,
        (false, true) => CacheKind::Busted,
        (false, false) => CacheKind::Warm,
    };
    CacheState { state, note }
}

/// The step before each level: the reset, when asked for, of the level's target.
#[derive(Debug)]
pub struct BeforeLevel {
    plan: CachePlan,
    /// This process resets (shard 0, or the whole run).
    resets: bool,
    /// Each target's server type, from the run's provenance.
    kinds: Vec<(String, Option<ServerKind>)>,
    /// A client per target (its TLS trust), kept between levels.
    clients: tokio::sync::Mutex<Vec<(String, Fetcher)>>,
    /// The targets whose failed reset was said.
    said: std::sync::Mutex<Vec<String>>,
}

impl BeforeLevel {
    /// The step of `plan` in shard `shard_index` of a run whose servers `provenance` records.
    pub fn new(plan: CachePlan, shard_index: u32, provenance: Option<&Provenance>) -> Self {
        BeforeLevel {
            plan,
            resets: shard_index == 0,
            kinds: provenance
                .map(|p| {
                    p.servers
                        .iter()
                        .map(|s| (s.target.clone(), s.server))
                        .collect()
                })
                .unwrap_or_default(),
            clients: tokio::sync::Mutex::new(Vec::new()),
            said: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Runs before a level (`label`) of `target`: its reset when asked for, said on stderr once
    /// per target when it cannot be done; the state the level starts from.
    pub async fn run(&self, target: &Target, progress: &Progress) -> CacheState {
        if !self.plan.reset {
            return state(self.plan, None);
        }
        if !self.resets {
            let mut s = state(self.plan, Some(Ok(())));
            s.note = Some("reset by shard 0 of the run".into());
            return s;
        }
        let kind = self
            .kinds
            .iter()
            .find(|(t, _)| *t == target.name)
            .and_then(|(_, k)| *k);
        let done = match reset_call(kind) {
            ResetCall::Cannot(why) => Err(why.to_owned()),
            ResetCall::Post(path) => self.post(target, path, kind).await,
        };
        if let Err(why) = &done
            && let Ok(mut said) = self.said.lock()
            && !said.contains(&target.name)
        {
            said.push(target.name.clone());
            progress.println(&format!(
                "tokenprobe bench: {}: cannot reset the server's prefix cache ({why}); its levels start as the one before left it",
                target.name
            ));
        }
        state(self.plan, Some(done))
    }

    /// `POST path` at `target`'s root with its key, within [`RESET_TIMEOUT`].
    async fn post(
        &self,
        target: &Target,
        path: &str,
        kind: Option<ServerKind>,
    ) -> Result<(), String> {
        let url = format!(
            "{}{path}",
            super::provenance::collect::server_root(&target.base_url)
        );
        let mut headers = Vec::new();
        if let Some(key) = target.load_key().await? {
            headers.push(target.auth.header(&key)?);
        }
        let mut clients = self.clients.lock().await;
        let i = match clients.iter().position(|(t, _)| *t == target.name) {
            Some(i) => i,
            None => {
                let c = Fetcher::new(target.tls.clone(), RESET_TIMEOUT)
                    .map_err(|e| format!("cannot build the client: {e}"))?;
                clients.push((target.name.clone(), c));
                clients.len() - 1
            }
        };
        let client = &mut clients[i].1;
        let sent = client.post(&url, &headers, bytes::Bytes::new(), 64 * 1024);
        let got = match tokio::time::timeout(RESET_TIMEOUT, sent).await {
            Ok(Ok(got)) => got,
            Ok(Err(e)) => return Err(format!("POST {path}: {e}")),
            Err(_) => {
                return Err(format!(
                    "POST {path}: no answer within {}",
                    humantime::format_duration(RESET_TIMEOUT)
                ));
            }
        };
        if (200..300).contains(&got.status) {
            return Ok(());
        }
        let hint = match (kind, got.status) {
            (Some(ServerKind::Vllm) | None, 404) => "; vLLM serves it with VLLM_SERVER_DEV_MODE=1",
            _ => "",
        };
        Err(format!("POST {path} answered HTTP {}{hint}", got.status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reset_of_each_server_type() {
        assert_eq!(
            reset_call(Some(ServerKind::Vllm)),
            ResetCall::Post("/reset_prefix_cache")
        );
        assert_eq!(reset_call(None), ResetCall::Post("/reset_prefix_cache"));
        assert_eq!(
            reset_call(Some(ServerKind::Sglang)),
            ResetCall::Post("/flush_cache")
        );
        assert!(matches!(
            reset_call(Some(ServerKind::Tgi)),
            ResetCall::Cannot(_)
        ));
        assert!(matches!(
            reset_call(Some(ServerKind::LlamaCpp)),
            ResetCall::Cannot(_)
        ));
    }

    #[test]
    fn each_level_states_its_cache() {
        let p = |reset, bust| CachePlan { reset, bust };
        assert_eq!(state(p(false, false), None).state, CacheKind::Warm);
        assert_eq!(state(p(false, true), None).state, CacheKind::Busted);
        assert_eq!(state(p(true, false), Some(Ok(()))).state, CacheKind::Reset);
        assert_eq!(
            state(p(true, true), Some(Ok(()))).state,
            CacheKind::ResetAndBusted
        );
        let failed = state(
            p(true, false),
            Some(Err("POST /x answered HTTP 404".into())),
        );
        assert_eq!(failed.state, CacheKind::Warm);
        assert_eq!(
            failed.note.as_deref(),
            Some("not reset: POST /x answered HTTP 404")
        );
    }

    /// The reset POSTs the dispatched path at the server's root (no `/v1`), with the target's
    /// key; a server without it (404) leaves the level warm, said once.
    #[tokio::test]
    async fn the_reset_is_posted_and_a_refusal_leaves_the_level_warm() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    loop {
                        let mut buf = vec![0u8; 4096];
                        let n = match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                        let ok = head.starts_with("POST /reset_prefix_cache ");
                        let _ = tx.send(head);
                        let status = if ok { "200 OK" } else { "404 Not Found" };
                        let _ = s
                            .write_all(
                                format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n")
                                    .as_bytes(),
                            )
                            .await;
                    }
                });
            }
        });
        let cfg = crate::config::Config::parse(&format!(
            "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\n\
             targets:\n  - name: v\n    base_url: http://{addr}/v1\n    api_key: tok-reset-1\n    models: [m]\n\
             \x20 - name: s\n    base_url: http://{addr}/v1\n    models: [m]\n"
        ))
        .unwrap();
        let t = |name: &str| {
            cfg.jobs
                .iter()
                .find(|j| j.target.name == name)
                .unwrap()
                .target
                .clone()
        };
        let prov = Provenance {
            servers: vec![
                super::super::provenance::ServerInfo {
                    target: "v".into(),
                    server: Some(ServerKind::Vllm),
                    ..Default::default()
                },
                super::super::provenance::ServerInfo {
                    target: "s".into(),
                    server: Some(ServerKind::Sglang),
                    ..Default::default()
                },
            ],
            ..Provenance::default()
        };
        let progress = Progress::new(1, super::super::progress::ProgressMode::Off);
        let step = BeforeLevel::new(
            CachePlan {
                reset: true,
                bust: false,
            },
            0,
            Some(&prov),
        );
        let got = step.run(&t("v"), &progress).await;
        assert_eq!(got.state, CacheKind::Reset);
        let head = rx.recv().await.unwrap().to_ascii_lowercase();
        assert!(
            head.starts_with("post /reset_prefix_cache http/1.1"),
            "{head}"
        );
        assert!(head.contains("authorization: bearer tok-reset-1"), "{head}");
        // SGLang's path, which this server does not have.
        let got = step.run(&t("s"), &progress).await;
        assert_eq!(got.state, CacheKind::Warm);
        assert_eq!(
            got.note.as_deref(),
            Some("not reset: POST /flush_cache answered HTTP 404")
        );
        assert!(rx.recv().await.unwrap().starts_with("POST /flush_cache "));
        // Shard 1 of a run does not reset.
        let other = BeforeLevel::new(
            CachePlan {
                reset: true,
                bust: true,
            },
            1,
            Some(&prov),
        );
        let got = other.run(&t("v"), &progress).await;
        assert_eq!(got.state, CacheKind::ResetAndBusted);
        assert!(rx.try_recv().is_err());
    }
}
