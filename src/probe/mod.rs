//! One probe: send exactly one request (streaming, or asking for the whole answer) and fold what
//! arrives into a [`ProbeResult`].
//!
//! This is the thin async I/O around the pure cores: [`crate::sse::SseDecoder`] (bytes to events),
//! [`crate::protocol`] (event meaning), [`crate::measure::Measurement`] (the fold) and
//! [`crate::outcome`] (the classification rules). `request` builds the one HTTP request;
//! `read` reads the answer, timestamping bytes with `Instant::now()` in the same task that reads
//! them and decoding them right there, with no channel between arrival and timestamp. Deadlines
//! follow docs/measurement.md: `connect` (connection set-up), `first_token` (from `t0`), `idle` (no
//! bytes after the first token) and `total`. No retries, no redirects, no reconnects: one probe is
//! one request. [`report`] shows a result to people (text) and programs (JSON).

mod answers;
mod calibrate;
mod read;
pub mod report;
mod request;
pub mod session;

pub use answers::Answers;
pub use calibrate::{Calibration, TokenModels, calibrate};
pub use read::{MAX_ANSWER_BYTES, MAX_BODY_BYTES, check_expect};

use crate::config::{Job, Prompt, ProxySetting, Target, Timeouts};
use crate::measure::{Measurement, ProbeResult, RequestFacts};
use crate::outcome::ErrorType;
use crate::redact::{Redactor, effective_proxy, redact_userinfo};
use crate::transport::{ClientOptions, Transport, TransportError};
use crate::units::truncate_bytes;
use crate::workload::{RequestContent, TokenModel, Turns, Workload};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A seed for a run's workload draws when the config sets none: from the standard library's
/// randomly seeded hasher.
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

/// The requests of one worker (bench) or job (serve): for a conversation, its turns in order,
/// each after the previous answer; for a session, its turns (and its sub-agents', one after
/// another: [`session::run`] runs them in parallel); for every other workload, independent draws.
#[derive(Debug)]
pub struct Session {
    turns: Option<Turns>,
    agent: Option<session::Sequence>,
    /// The previous turn's answer (`None` after a failure).
    answer: Option<String>,
}

impl Session {
    /// The next request's content and how long to wait before sending it (a conversation's
    /// `think_time` between its turns, a session turn's wait; 0 otherwise).
    pub fn next(&mut self, spec: &ProbeSpec) -> (RequestContent, Duration) {
        if let Some(a) = self.agent.as_mut() {
            return a.next(spec, || spec.next_seq());
        }
        let Some(t) = self.turns.as_mut() else {
            return (spec.next_content(), Duration::ZERO);
        };
        let answer = self.answer.take();
        let wait = if answer.is_some() {
            t.think_time()
        } else {
            Duration::ZERO
        };
        if t.at_start() || answer.is_none() {
            t.restart(spec.next_seq());
        }
        (t.next_turn(answer.as_deref()), wait)
    }

    /// Records a request's result: a conversation or a session continues from its answer.
    pub fn answered(&mut self, r: &ProbeResult) {
        if let Some(a) = self.agent.as_mut() {
            a.answered(r);
            return;
        }
        self.answer = r.success().then(|| r.text.clone());
    }

    /// True when the next request starts a new conversation or session (or the workload has
    /// none).
    pub fn at_start(&self) -> bool {
        if let Some(a) = &self.agent {
            return a.at_start();
        }
        self.turns
            .as_ref()
            .is_none_or(|t| t.at_start() || self.answer.is_none())
    }

    /// A session prompt's: how the session that ran last ended (`None` while it runs, and for
    /// other workloads).
    pub fn session_end(&self) -> Option<crate::workload::session::End> {
        self.agent.as_ref().and_then(session::Sequence::ended)
    }
}

/// How much of a failure's detail (status, the server's message, ...) is kept, in bytes: 1 KiB,
/// so a gateway's long message keeps what it says at its end (LiteLLM's "current_rpm 5,
/// rpm_limit 6"). The one bound of every output (bench keeps each failed sample's detail
/// within it too).
pub const MAX_DETAIL_BYTES: usize = 1024;

/// Everything one probe needs: the validated target and prompt of a [`Job`] (a config's, or the
/// `probe` command's flags made into one), the model, and what a command may override.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    /// The validated target: protocol, URL, key, headers, query, body fields, client settings.
    pub target: Arc<Target>,
    /// The validated prompt: its workload, nonce, content check.
    pub prompt: Arc<Prompt>,
    /// Model name sent.
    pub model: String,
    /// Output cap (the prompt's, unless overridden; a command's override also replaces the
    /// output length a workload draws).
    pub max_tokens: Option<u32>,
    /// Deadlines.
    pub timeouts: Timeouts,
    /// Stream the answer (the prompt's `stream:`, else the target's; `probe --no-stream` and
    /// `bench --cross-check` set it false): without streaming only E2E, N and input tokens are
    /// measured (docs/measurement.md, "Non-streaming requests").
    pub stream: bool,
    /// The prompt's workload, every unset seed drawn for this run.
    pub workload: Workload,
    /// How the server counts filler (from [`calibrate`], or uncalibrated).
    pub tokens: TokenModel,
    /// Numbers the requests of this spec and its clones (each draws the next).
    seq: Arc<AtomicU64>,
    /// `bench --cache-bust`: every request starts with a unique block (before its first
    /// message's text), so no two share a cached prefix.
    pub cache_bust: bool,
    /// `bench`: each request is sent with `x-request-id: <prefix>-<n>` (`n` shared by the
    /// spec's clones), the sample's identity (a merge of shards checks it) and the key to match
    /// it with the server's own log or a capture. `None`: no request id is sent.
    pub request_ids: Option<RequestIds>,
    /// What the spec's earlier answers taught (shared by its clones): see [`Answers`].
    pub answers: Arc<Answers>,
}

/// The request ids of a run: a prefix and the next number, shared by every clone.
#[derive(Debug, Clone)]
pub struct RequestIds {
    prefix: Arc<str>,
    next: Arc<AtomicU64>,
}

impl RequestIds {
    /// Ids `<prefix>-0`, `<prefix>-1`, ...
    pub fn new(prefix: &str) -> Self {
        RequestIds {
            prefix: prefix.into(),
            next: Arc::default(),
        }
    }

    /// The next id.
    pub fn take(&self) -> String {
        format!(
            "{}-{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl ProbeSpec {
    /// The spec of a configured job.
    pub fn from_job(job: &Job) -> Self {
        ProbeSpec {
            target: job.target.clone(),
            prompt: job.prompt.clone(),
            model: job.model.clone(),
            max_tokens: job.prompt.max_tokens,
            timeouts: job.timeouts,
            stream: job.stream(),
            workload: job.prompt.workload.with_seeds(fresh_seed()),
            tokens: TokenModel::UNCALIBRATED,
            seq: Arc::default(),
            cache_bust: false,
            request_ids: None,
            answers: Arc::default(),
        }
    }

    /// What a probe of this spec must never show: its key (as loaded for the probe), the
    /// userinfo of its base URL and proxy, its non-public header and query values.
    pub fn redactor(&self, key: Option<&crate::auth::Secret>) -> Redactor {
        use crate::transport::ProxySetting;
        let mut r = Redactor::new();
        if let Some(k) = key {
            r.add_secret(k.expose());
        }
        r.add_userinfo(&self.target.base_url);
        match &self.target.proxy {
            ProxySetting::Url(p) => r.add_userinfo(p),
            ProxySetting::Environment => {
                if let Some(p) = crate::redact::environment_proxy(&self.url()) {
                    r.add_userinfo(&p);
                }
            }
            ProxySetting::Disabled => {}
        }
        r.add_headers(
            self.target
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str())),
        );
        r.add_query(
            self.target
                .query
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str())),
        );
        r
    }

    /// The next request number of this spec (shared by its clones).
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// The content of the next request: a stateless draw (a conversation's first turn; keep a
    /// [`Session`] for the later ones).
    pub fn next_content(&self) -> RequestContent {
        self.workload.draw(self.next_seq(), &self.tokens)
    }

    /// A sequence of requests that keeps a conversation's state (one per closed-loop worker, one
    /// per `serve` job).
    pub fn session(&self) -> Session {
        Session {
            turns: match &self.workload {
                Workload::Conversation(c) => {
                    Some(Turns::new(c.clone(), self.next_seq(), self.tokens))
                }
                _ => None,
            },
            agent: match &self.workload {
                Workload::Session(s) => Some(session::Sequence::new(s.clone())),
                _ => None,
            },
            answer: None,
        }
    }

    /// The client settings of the target (proxy, TLS, connection reuse).
    pub fn client(&self) -> ClientOptions {
        ClientOptions {
            proxy: self.target.proxy.clone(),
            tls: self.target.tls.clone(),
            connection: self.target.connection,
        }
    }

    /// The output length asked for exactly (`max_tokens` with the target's `exact_output` switch
    /// on); `None` when the server may stop early.
    pub fn requested_output_tokens(&self) -> Option<u64> {
        match self.target.exact_output {
            crate::protocol::ExactOutput::None => None,
            _ => self.max_tokens.map(u64::from),
        }
    }

    /// The full endpoint URL (see [`Target::url`]).
    pub fn url(&self) -> String {
        self.target.url()
    }

    /// The proxy this spec's requests go through, credentials removed; `None` when direct.
    pub fn proxy(&self) -> Option<String> {
        match &self.target.proxy {
            ProxySetting::Environment => effective_proxy(&self.url()),
            ProxySetting::Disabled => None,
            ProxySetting::Url(u) => Some(redact_userinfo(u)),
        }
    }
}

/// How long after the connection's set-up deadline a pre-warming `GET /models` may take.
pub const PREWARM_ANSWER: Duration = Duration::from_secs(5);

/// A prober: an instrumented HTTP client (identity encoding, no redirects; by default no pooled
/// connections, so TTFT includes what a cold user sees). One probe at a time: not `Clone`, and
/// every probe takes it `&mut`, so two probes never share its phases or read stamps.
#[derive(Debug)]
pub struct Prober {
    transport: Transport,
}

impl Prober {
    /// A prober for `spec`: its client settings, connection set-up bounded by `timeouts.connect`.
    ///
    /// # Errors
    /// [`TransportError`] when the CA file, proxy URL or TLS settings are unusable.
    pub fn new(spec: &ProbeSpec) -> Result<Self, TransportError> {
        Ok(Prober {
            transport: Transport::new(&spec.client(), spec.timeouts.connect)?,
        })
    }

    /// Runs one probe of the spec's next content ([`ProbeSpec::next_content`]). Never panics on
    /// network data; every failure is an `error_type`.
    pub async fn run(&mut self, spec: &ProbeSpec) -> ProbeResult {
        self.run_content(spec, &spec.next_content()).await
    }

    /// Runs one probe that sends `content`: one request, whose result carries the requested
    /// lengths and the turn, and the `input_length_off` flag when the server counted an input
    /// length off the requested one.
    pub async fn run_content(&mut self, spec: &ProbeSpec, content: &RequestContent) -> ProbeResult {
        self.run_in_flight(spec, content, None).await
    }

    /// [`Self::run_content`] of a probe whose caller gates its target's probes: what `flight`
    /// sees around it as it ends (another probe of the target in flight, a cold target) is among
    /// the result's facts.
    pub async fn run_in_flight(
        &mut self,
        spec: &ProbeSpec,
        content: &RequestContent,
        flight: Option<&dyn Flight>,
    ) -> ProbeResult {
        let mut content = std::borrow::Cow::Borrowed(content);
        if let Some(cap) = spec.max_tokens.filter(|c| Some(*c) != content.max_tokens) {
            let c = content.to_mut();
            c.max_tokens = Some(cap);
            if c.requested_output_tokens.is_some() {
                c.requested_output_tokens = Some(cap);
            }
        }
        if let Some(ids) = &spec.request_ids {
            content.to_mut().request_id = Some(ids.take());
        }
        let r = self.send(spec, &content, flight, Some(&spec.answers)).await;
        spec.answers.learn(&r);
        r
    }

    /// Opens this prober's connection ahead of a bench level with one unmeasured `GET /models`
    /// (its answer read and ignored, so the connection goes back to the pool): for `connection:
    /// reuse`, so a level's first requests do not each pay, all at once, a connection set-up that
    /// the later ones do not. Bounded by `timeouts.connect` plus [`PREWARM_ANSWER`] (and
    /// `timeouts.total`), so a server that does not answer it delays a level by seconds at most.
    /// Its failures are not reported: the level's own requests meet the same server.
    pub async fn prewarm(&mut self, spec: &ProbeSpec) {
        let Ok(key) = spec.target.load_key().await else {
            return;
        };
        let Ok(req) = request::build_prewarm(spec, key.as_ref()) else {
            return;
        };
        let t = &spec.timeouts;
        let deadline = Instant::now() + t.total.min(t.connect + PREWARM_ANSWER);
        let sent = tokio::time::timeout_at(deadline.into(), self.transport.send(req));
        if let Ok(Ok(resp)) = sent.await {
            read::drain_for_reuse(&mut resp.into_body(), deadline).await;
        }
    }

    /// One request of `content`, as is (calibration sends its own content this way): its result
    /// made whole by [`Measurement::finish_with`] from the fold and the request's facts; with
    /// `answers`, what earlier answers taught judges this one (the usage audit, drift).
    async fn send(
        &mut self,
        spec: &ProbeSpec,
        content: &RequestContent,
        flight: Option<&dyn Flight>,
        answers: Option<&Answers>,
    ) -> ProbeResult {
        let mut facts = RequestFacts {
            request_id: content.request_id.clone(),
            requested_input_tokens: content.requested_input_tokens.map(u64::from),
            // The workload's requested length, else the cap asked for exactly (`exact_output`).
            requested_output_tokens: content
                .requested_output_tokens
                .map(u64::from)
                .or(spec.requested_output_tokens()),
            turn: content.turn,
            model: Some(Answers::model_check(spec)),
            session: content.session.map(|s| s.id),
            branch: content.session.map(|s| s.branch),
            ..RequestFacts::default()
        };
        // What the caller saw around the probe, asked as it ends.
        let finish = |m: Measurement, mut facts: RequestFacts| {
            if let Some(f) = flight {
                facts.overlapped = f.overlapped();
                facts.cold = f.cold();
            }
            m.finish_with(facts)
        };
        let failed = |kind: ErrorType, detail: String| {
            let mut m = Measurement::new(Instant::now());
            m.fail(kind, m.t0(), detail);
            m
        };
        if content.messages.is_empty() {
            let detail = "the prompt has nothing to send (a dataset that was not read)";
            return finish(failed(ErrorType::BadRequest, detail.into()), facts);
        }
        let url = spec.url();
        let proxy = spec.proxy();
        let key = match spec.target.load_key().await {
            Ok(k) => k,
            Err(msg) => return finish(failed(ErrorType::Auth, msg), facts),
        };
        let req = match request::build(spec, content, &url, key.as_ref()) {
            Ok(r) => r,
            Err(e) => {
                let detail = format!("cannot build the request: {e}");
                return finish(failed(ErrorType::BadRequest, detail), facts);
            }
        };
        if spec.target.connection == crate::transport::ConnectionMode::Reuse {
            // hyper's pool takes a finished connection back on a task of its own (once the
            // connection is ready again), and a request that finds the pool empty races a new
            // connection against that return: on a busy runtime the kept connection can lose. A
            // few yields let those tasks run first; before t0, so never inside a TTFT.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
        }
        let t0 = Instant::now();
        let mut m = Measurement::new(t0);
        if !spec.stream {
            m.non_stream();
        }
        let transport = &mut self.transport;
        let mut m = read::run_request(transport, req, spec, m, proxy.as_deref(), &mut facts).await;
        facts.phases = Some(transport.phases());
        if let Some(a) = answers {
            facts.audit = a.audit_facts(spec, &m).await;
            facts.drift = a.drift_history(spec);
        }
        // A server may echo the request in its error message: never pass a secret on. Redacted
        // whole, then cut for display, so no part of a secret survives at the cut.
        m.show_detail(|d| {
            let shown = spec.redactor(key.as_ref()).redact(d);
            truncate_bytes(&shown, MAX_DETAIL_BYTES)
        });
        finish(m, facts)
    }
}

/// What a caller that gates a target's probes sees around one of them (`serve`'s target gate),
/// asked as the probe ends: facts of its result ([`RequestFacts::overlapped`],
/// [`RequestFacts::cold`]).
pub trait Flight: Sync {
    /// Another probe of the target was in flight at some point of this one.
    fn overlapped(&self) -> bool;
    /// The target had had no probe for its `cold_after` before this one.
    fn cold(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prompt: &str) -> ProbeSpec {
        let c = crate::config::Config::parse(&format!(
            "prompts:\n  - name: p\n    {prompt}\ntargets:\n  - name: t\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n"
        ))
        .unwrap();
        ProbeSpec::from_job(&c.jobs[0])
    }

    fn result(answer: Option<&str>) -> ProbeResult {
        let mut m = Measurement::new(Instant::now());
        m.fail(ErrorType::ServerError, m.t0(), "x");
        let mut r = m.finish();
        if let Some(a) = answer {
            r.error_type = None;
            r.text = a.to_owned();
        }
        r
    }

    /// `IS_CLONE` of a type: the inherent constant when it is `Clone`, else the trait's.
    struct CloneCheck<T>(std::marker::PhantomData<T>);
    trait NotClone {
        const IS_CLONE: bool = false;
    }
    impl<T> NotClone for CloneCheck<T> {}
    impl<T: Clone> CloneCheck<T> {
        const IS_CLONE: bool = true;
    }

    // Two probes never share one connection's phase clock and read stamps: neither the prober
    // nor its transport can be cloned (and a probe takes its prober `&mut`). Checked when the
    // tests compile; the first line shows the check sees `Clone` where it is.
    const _: () = assert!(CloneCheck::<ProbeSpec>::IS_CLONE);
    const _: () = assert!(!CloneCheck::<Prober>::IS_CLONE);
    const _: () = assert!(!CloneCheck::<Transport>::IS_CLONE);

    /// One HTTP answer to the first request on a local port: the base URL.
    fn answer_once(head: &'static str, body: String) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 65536];
            let mut got = Vec::new();
            // The request's head and its (small) body: read until the body's length arrived.
            while let Ok(n) = s.read(&mut buf) {
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if let Some(i) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if got.len() >= i + 4 + len {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            let _ = write!(
                s,
                "{head}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        });
        url
    }

    fn spec_at(url: &str) -> ProbeSpec {
        let c = crate::config::Config::parse(&format!(
            "prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\ntargets:\n  - name: t\n    base_url: {url}\n    models: [m]\n"
        ))
        .unwrap();
        ProbeSpec::from_job(&c.jobs[0])
    }

    /// Issue 40: LiteLLM's rate-limit message was cut at 200 characters (its "current_rpm 5,
    /// rpm_limit 6" lost) and its `llm_provider-retry-after` not read: a message is kept whole up
    /// to 1 KiB, in the probe and in bench's samples, and that header is the wait.
    #[tokio::test]
    async fn a_gateways_long_message_is_kept_and_its_wait_read() {
        let message = format!(
            "litellm.RateLimitError: {} Deployment over user-defined ratelimit. current_rpm 5, rpm_limit 6",
            "x".repeat(700)
        );
        let body = serde_json::json!({"error": {"message": message, "type": "throttling_error", "code": "429"}})
            .to_string();
        let url = answer_once(
            "HTTP/1.1 429 Too Many Requests\r\nllm_provider-retry-after: 7",
            body,
        );
        let s = spec_at(&url);
        let r = Prober::new(&s).unwrap().run(&s).await;
        assert_eq!(r.error_type, Some(ErrorType::RateLimited), "{r:?}");
        let d = r.error_detail.clone().unwrap();
        assert!(d.ends_with("current_rpm 5, rpm_limit 6"), "{d}");
        assert_eq!(r.retry_after_s, Some(7.0));
        let sample = crate::bench::sample::Sample::from_result(&r, 0.0, 0.1, 0.0, false);
        assert_eq!(sample.error_detail.as_deref(), Some(d.as_str()));
        // Past 1 KiB: cut there, and said to be cut.
        let url = answer_once(
            "HTTP/1.1 500 Internal Server Error",
            serde_json::json!({"error": {"message": "é".repeat(2000)}}).to_string(),
        );
        let s = spec_at(&url);
        let d = Prober::new(&s).unwrap().run(&s).await.error_detail.unwrap();
        assert!(
            d.ends_with('…') && d.len() <= MAX_DETAIL_BYTES + '…'.len_utf8(),
            "{}",
            d.len()
        );
        assert!(d.len() > MAX_DETAIL_BYTES - 2, "{}", d.len());
    }

    /// A tokenizer that is not one cannot count: the server calibrates instead (here a port with
    /// no server, so that fails too, and says both why), never a guess.
    #[tokio::test]
    async fn a_bad_tokenizer_falls_back_to_the_servers_calibration() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("tokenizer.json");
        std::fs::write(&bad, "{\"not\": \"a tokenizer\"}").unwrap();
        let c = crate::config::Config::parse(&format!(
            "prompts:\n  - name: p\n    synthetic: {{input_tokens: 9, output_tokens: 1}}\ntargets:\n  - name: t\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n    tokenizer: {}\n",
            bad.display()
        ))
        .unwrap();
        let s = ProbeSpec::from_job(&c.jobs[0]);
        assert!(s.target.tokenizer.is_some());
        let cal = calibrate(&mut Prober::new(&s).unwrap(), &s).await;
        assert_eq!(
            cal.requests, 1,
            "the server's calibration, stopped by its first failure"
        );
        assert!(
            cal.tokenizer_error
                .as_deref()
                .is_some_and(|e| e.contains("is not a tokenizer.json")),
            "{cal:?}"
        );
        assert!(
            cal.error
                .as_deref()
                .is_some_and(|e| e.contains("a calibration request failed: connect")),
            "{cal:?}"
        );
        let summary = cal.summary();
        assert!(
            summary.contains("failed") && summary.contains("the tokenizer could not be used"),
            "{summary}"
        );
    }

    /// A session follows a conversation's turns after each answer, with the think time between
    /// them; a failed turn or the last one starts a new conversation. Other workloads draw
    /// independent requests, each numbered once across the spec's clones.
    #[test]
    fn sessions_keep_a_conversation_and_nothing_else() {
        let s = spec(
            "conversation: {turns: 2, think_time: 3s, user_tokens: 8, output_tokens: 4, seed: 1}",
        );
        let mut session = s.session();
        assert!(session.at_start());
        let (c1, w1) = session.next(&s);
        assert_eq!((c1.turn, w1), (Some(1), Duration::ZERO));
        session.answered(&result(Some("hi")));
        assert!(!session.at_start());
        let (c2, w2) = session.next(&s);
        assert_eq!((c2.turn, w2), (Some(2), Duration::from_secs(3)));
        assert_eq!(c2.messages[1].content, "hi");
        session.answered(&result(Some("bye")));
        assert!(session.at_start(), "two turns done");
        let (c3, w3) = session.next(&s);
        assert_eq!((c3.turn, w3), (Some(1), Duration::from_secs(0)));
        assert_ne!(c3.messages, c1.messages, "a new conversation, new words");
        session.answered(&result(None));
        assert!(session.at_start(), "a failed turn ends the conversation");
        let (c4, w4) = session.next(&s);
        assert_eq!(
            (c4.turn, w4, c4.messages.len()),
            (Some(1), Duration::ZERO, 1)
        );

        let s = spec("synthetic: {input_tokens: 20, output_tokens: 3, seed: 2}");
        let clone = s.clone();
        let mut session = s.session();
        let (a, wait) = session.next(&s);
        let b = clone.next_content();
        assert_eq!(
            (a.turn, wait, a.requested_input_tokens),
            (None, Duration::ZERO, Some(20))
        );
        assert_ne!(a.messages, b.messages, "clones share the request numbers");
        session.answered(&result(Some("x")));
        assert!(session.at_start());
    }

    /// A worker's session: its turns in order, a fork's sub-agents one after another (each to
    /// its end), then the session again; a session over, the next request starts another, and a
    /// failed turn ends it.
    #[test]
    fn a_workers_session_runs_its_turns_and_its_sub_agents_in_turn() {
        let s = spec(
            "session: {tools: {count: 1, tokens: 5}, user_tokens: 8, turns: 2, call_tokens: 4, result_tokens: 6, answer_tokens: 4, think_time: 3s, context_budget: 4096, subagents: {count: 2, every: 1, turns: 1}, seed: 1}",
        );
        let called = || {
            let mut r = result(Some(""));
            r.tool_calls = vec![crate::protocol::ToolCall {
                id: "c".into(),
                name: "tool_0".into(),
                arguments: "{}".into(),
            }];
            r
        };
        let mut session = s.session();
        assert!(session.at_start());
        let mut seen = Vec::new();
        let mut first = None;
        for _ in 0..10 {
            let (c, wait) = session.next(&s);
            let at = c.session.expect("a session's turn");
            first.get_or_insert(at.id);
            let last = c.tool_choice == Some(crate::protocol::ToolChoice::None);
            seen.push((at.branch, c.turn.unwrap(), last, wait.as_secs()));
            session.answered(&if last { result(Some("done")) } else { called() });
            if session.at_start() {
                break;
            }
        }
        assert_eq!(
            seen,
            [
                (0, 1, false, 0),
                (1, 1, false, 0),
                (1, 2, true, 3),
                (2, 1, false, 0),
                (2, 2, true, 3),
                (0, 2, false, 0),
                (3, 1, false, 0),
                (3, 2, true, 3),
                (4, 1, false, 0),
                (4, 2, true, 3),
            ][..seen.len()]
        );
        // The final answer is next; fail it: the session is over and the next one starts.
        assert!(!session.at_start());
        let (c, _) = session.next(&s);
        assert_eq!((c.session.unwrap().branch, c.turn), (0, Some(3)));
        session.answered(&result(None));
        assert!(session.at_start(), "a failed turn ends the session");
        let (c, wait) = session.next(&s);
        assert_eq!((c.turn, wait), (Some(1), Duration::ZERO));
        assert_ne!(c.session.map(|r| r.id), first, "a new session");
    }
}
