//! One connection: read requests, answer each on its schedule, record every write's instant.
//!
//! While it waits for a deadline or a concurrency slot, a request also watches its socket, so a
//! client that goes away ends the task at once (a stalled request never outlives its client).

use super::body::{self, Proto, Renderer};
use super::http::{self, Framing, ReadError, Request};
use super::log::{End, EventRec, Record};
use super::plan::{Ask, Plan};
use super::profile;
use super::timer::Timer;
use super::{Fault, Shared};
use crate::kstamp::SentStream;
use crate::rng::Rng;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long an idle keep-alive connection (or a slow request) is kept.
const IDLE: Duration = Duration::from_secs(120);
/// Pipelined bytes buffered while a response is in progress, at most.
const MAX_PENDING: usize = 1024 * 1024;
/// The model listed first by `GET /v1/models` (then each `--profile`) and used when a request
/// names none.
const MODEL: &str = "tokenprobe-simulated";

/// The client closed or reset the connection.
struct Gone;

/// Serves one connection until the client closes it or a response requires closing.
pub(super) async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let mut stream = SentStream::new(stream);
    let conn = shared.conns.fetch_add(1, Ordering::Relaxed);
    let mut buf = Vec::new();
    loop {
        let req = match http::read_request(&mut stream, &mut buf, IDLE).await {
            Ok(r) => r,
            Err(ReadError::Closed) => return,
            Err(ReadError::Bad(status, msg)) => {
                let body = body::error_body(None, status, msg);
                let mut h = http::head(
                    status,
                    "application/json",
                    Framing::Length(body.len()),
                    false,
                    "",
                    &[],
                );
                h.extend_from_slice(&body);
                let _ = stream.write_all(&h).await;
                let _ = stream.shutdown().await;
                return;
            }
        };
        let arrival = Instant::now();
        let wall = SystemTime::now();
        let keep = handle(&mut stream, &mut buf, req, (arrival, wall, conn), &shared).await;
        if !keep {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// Answers one request; true when the connection may carry another.
async fn handle(
    stream: &mut SentStream,
    pending: &mut Vec<u8>,
    req: Request,
    (arrival, wall, conn): (Instant, SystemTime, u64),
    shared: &Shared,
) -> bool {
    let path = req.path.trim_end_matches('/');
    let proto = match path {
        "/v1/chat/completions" | "/chat/completions" => Proto::Chat,
        "/v1/completions" | "/completions" => Proto::Completions,
        "/v1/messages" | "/messages" => Proto::Messages,
        "/v1/responses" | "/responses" => Proto::Responses,
        "/health" | "/healthz" | "/v1/models" | "/models" if req.method == "GET" => {
            let body = info_body(path, shared).to_string().into_bytes();
            return simple(stream, &req, 200, None, &body, &[]).await;
        }
        "/health" | "/healthz" | "/v1/models" | "/models" => {
            let body = body::error_body(None, 405, "method not allowed");
            return simple(stream, &req, 405, None, &body, &[("allow", "GET")]).await;
        }
        "/reset_prefix_cache" if req.method == "POST" => {
            return reset_prefix_cache(stream, &req, (arrival, wall, conn), shared).await;
        }
        _ => {
            let body = body::error_body(
                None,
                404,
                &format!("no route for {} {}", req.method, req.path),
            );
            return simple(stream, &req, 404, None, &body, &[]).await;
        }
    };
    if req.method != "POST" {
        let body = body::error_body(Some(proto), 405, "method not allowed");
        return simple(stream, &req, 405, None, &body, &[("allow", "POST")]).await;
    }

    let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
    let mut rng = Rng::for_request(shared.seed, seq);
    // Drawn whether or not the client names the request, so a seed gives the same plans.
    let tag = rng.next_u64() as u32;
    let id = req
        .request_id
        .clone()
        .unwrap_or_else(|| format!("sim-{seq}-{tag:08x}"));
    let mut rec = Record::arrived(id.clone(), (seq, conn), &req.path, wall, req.received);
    let quota = shared.quota(arrival, wall);
    let quota_headers = quota.pairs();
    let body: Value = match serde_json::from_slice(&req.body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            rec.status = 400;
            let body = body::error_body(Some(proto), 400, "the request body is not a JSON object");
            let keep = simple(stream, &req, 400, Some(&id), &body, &[]).await;
            rec.head_written = Some(arrival.elapsed());
            finish(shared, rec);
            return keep;
        }
    };
    rec.stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = body
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let ask = ask_of(&body);
    let model = body.get("model").and_then(Value::as_str).unwrap_or(MODEL);
    let served = shared.served(model);
    let input = profile::input_bytes(&body);
    let tool = served
        .tool_calls
        .then(|| profile::wants_tool_call(&body))
        .flatten();
    rec.model = model.to_owned();
    rec.profile.clone_from(&served.name);
    rec.input_tokens = profile::token_count(&input);
    // Beyond the model's context: refused as vLLM refuses one (unless the quota refuses first).
    let refused = context_refusal(served, proto, rec.input_tokens).filter(|_| quota.allowed);
    let mut plan = Plan::draw(&served.timing, shared.error_rate, &shared.errors, &ask, rng);
    if !quota.allowed || refused.is_some() {
        plan.fault = Some(Fault::Status(if quota.allowed { 400 } else { 429 }));
    }
    rec.fault = fault_name(refused.is_some(), plan.fault);

    if let Some(Fault::Status(status)) = plan.fault {
        rec.status = status;
        let body = refused
            .unwrap_or_else(|| body::error_body(Some(proto), status, body::fault_message(status)));
        let extra: &[(&str, &str)] = match status {
            _ if !quota.allowed => &quota_headers,
            429 => &[("retry-after", "1")],
            _ => &[],
        };
        let keep = simple(stream, &req, status, Some(&id), &body, extra).await;
        rec.head_written = Some(arrival.elapsed());
        finish(shared, rec);
        return keep;
    }

    // Admitted (its blocks cached) only when it is answered.
    let admitted = served.admit(&input);
    drop(input);
    rec.cached_tokens = admitted.cached_tokens;
    rec.prefill = admitted.prefill;
    plan.add_prefill(admitted.prefill);
    let created = wall.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let chunk_id = match proto {
        Proto::Chat => format!("chatcmpl-{id}"),
        Proto::Completions => format!("cmpl-{id}"),
        Proto::Messages => format!("msg_{id}"),
        Proto::Responses => format!("resp_{id}"),
    };
    let mut renderer = Renderer::new(proto, &chunk_id, model, created, admitted.input_tokens)
        .with_cached(admitted.cached_tokens)
        .saying(&shared.says(seq));
    if let Some(name) = tool {
        renderer = renderer.with_tool_call(&name, plan.tokens);
    }
    rec.tool_call = renderer.is_tool_call();
    let mut out = Out {
        stream,
        timer: &shared.timer,
        pending,
        extra: &quota_headers,
        arrival,
        chunked: req.chunked_ok,
        payload: Vec::with_capacity(512),
        wire: Vec::with_capacity(512),
        events: Vec::with_capacity(plan.tokens.min(4096) as usize + 8),
    };
    let is_stream = rec.stream;
    let result = if is_stream {
        stream_answer(
            &mut out,
            &req,
            &id,
            plan,
            &renderer,
            include_usage,
            shared,
            &mut rec,
        )
        .await
    } else {
        whole_answer(&mut out, &req, &id, plan, &renderer, shared, &mut rec).await
    };
    out.pick_up_sent();
    rec.events = std::mem::take(&mut out.events);
    rec.end = result.unwrap_or(End::ClientGone);
    let keep = rec.end == End::Complete && req.keep_alive && (req.chunked_ok || !is_stream);
    finish(shared, rec);
    keep
}

/// The answer to `GET /v1/models` (the default model, then every `--profile`) or to a health
/// check.
fn info_body(path: &str, shared: &Shared) -> Value {
    if path.ends_with("models") {
        let ids =
            std::iter::once(MODEL).chain(shared.profiles.iter().filter_map(|p| p.name.as_deref()));
        let data: Vec<Value> = ids
            .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "tokenprobe"}))
            .collect();
        json!({"object": "list", "data": data})
    } else {
        json!({"status": "ok"})
    }
}

/// The event log's name of a request's fault: a context refusal's, else its plan's.
fn fault_name(refused: bool, fault: Option<Fault>) -> Option<String> {
    if refused {
        Some("context_length_exceeded".into())
    } else {
        fault.map(|f| f.to_string())
    }
}

/// The 400 body of a request of `input` tokens beyond `served`'s `max_context`, if it is.
fn context_refusal(served: &profile::Served, proto: Proto, input: u32) -> Option<Vec<u8>> {
    let max = served.max_context.filter(|m| input > *m)?;
    Some(body::context_error_body(
        proto,
        &profile::context_refusal(max, input),
    ))
}

/// What a request body asks of the output length.
fn ask_of(body: &Value) -> Ask {
    Ask {
        max_tokens: ["max_tokens", "max_completion_tokens", "max_output_tokens"]
            .iter()
            .find_map(|k| body.get(*k).and_then(Value::as_u64)),
        min_tokens: body.get("min_tokens").and_then(Value::as_u64),
        ignore_eos: body
            .get("ignore_eos")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    }
}

fn finish(shared: &Shared, rec: Record) {
    if let Some(log) = &shared.log {
        log.send(rec);
    }
}

/// vLLM's `POST /reset_prefix_cache`: every prefix cache emptied, the call logged as a request
/// of its own; true when the connection may carry another.
async fn reset_prefix_cache(
    stream: &mut SentStream,
    req: &Request,
    (arrival, wall, conn): (Instant, SystemTime, u64),
    shared: &Shared,
) -> bool {
    for served in shared
        .profiles
        .iter()
        .chain(std::iter::once(&shared.default))
    {
        served.reset_cache();
    }
    let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
    let id = req
        .request_id
        .clone()
        .unwrap_or_else(|| format!("sim-{seq}-reset"));
    let mut rec = Record::arrived(id, (seq, conn), &req.path, wall, req.received);
    let keep = simple(stream, req, 200, None, b"{}", &[]).await;
    rec.head_written = Some(arrival.elapsed());
    finish(shared, rec);
    keep
}

/// A small complete response: head and body in one write.
async fn simple(
    stream: &mut SentStream,
    req: &Request,
    status: u16,
    id: Option<&str>,
    body: &[u8],
    extra: &[(&str, &str)],
) -> bool {
    let id = id.or(req.request_id.as_deref()).unwrap_or("");
    let mut h = http::head(
        status,
        "application/json",
        Framing::Length(body.len()),
        req.keep_alive,
        id,
        extra,
    );
    h.extend_from_slice(body);
    stream.write_all(&h).await.is_ok() && req.keep_alive
}

/// The writing side of one response, with its scratch buffers and the event record.
struct Out<'a> {
    stream: &'a mut SentStream,
    timer: &'a Timer,
    pending: &'a mut Vec<u8>,
    /// Headers of the answer's head besides the simulator's own (`--rate-limit`'s).
    extra: &'a [(&'a str, &'a str)],
    arrival: Instant,
    chunked: bool,
    /// The event being sent, unframed.
    payload: Vec<u8>,
    /// The event as it goes on the wire.
    wire: Vec<u8>,
    events: Vec<EventRec>,
}

impl Out<'_> {
    /// Waits until `arrival + due`, watching the socket.
    async fn wait(&mut self, due: Duration) -> Result<(), Gone> {
        let deadline = self.arrival + due;
        if Instant::now() >= deadline {
            return Ok(());
        }
        let mut sleep = self.timer.sleep_until(deadline);
        let mut scratch = [0u8; 512];
        loop {
            tokio::select! {
                biased;
                () = &mut sleep => return Ok(()),
                r = self.stream.read(&mut scratch), if self.pending.len() < MAX_PENDING => match r {
                    Ok(0) | Err(_) => return Err(Gone),
                    Ok(n) => self.pending.extend_from_slice(&scratch[..n]),
                },
            }
        }
    }

    /// Waits until the client closes or resets the connection.
    async fn wait_gone(&mut self) -> Gone {
        let mut scratch = [0u8; 512];
        loop {
            match self.stream.read(&mut scratch).await {
                Ok(0) | Err(_) => return Gone,
                Ok(n) if self.pending.len() < MAX_PENDING => {
                    self.pending.extend_from_slice(&scratch[..n])
                }
                Ok(_) => {}
            }
        }
    }

    /// Writes raw bytes (a head) and returns the offset from arrival at which the write returned.
    async fn write_raw(&mut self, bytes: &[u8]) -> Result<Duration, Gone> {
        self.stream.write_all(bytes).await.map_err(|_| Gone)?;
        Ok(Instant::now().saturating_duration_since(self.arrival))
    }

    /// Sends `self.payload` as one event in one write and records its instant; `last` appends the
    /// chunked terminator to the same write.
    async fn emit(&mut self, due: Duration, token: bool, last: bool) -> Result<(), Gone> {
        http::frame(&mut self.wire, &self.payload, self.chunked);
        if last && self.chunked {
            self.wire.extend_from_slice(b"0\r\n\r\n");
        }
        self.stream.write_all(&self.wire).await.map_err(|_| Gone)?;
        let at = Instant::now().saturating_duration_since(self.arrival);
        self.events.push(EventRec {
            due,
            at,
            token,
            tx_id: self.stream.last_id(),
            sent: None,
        });
        self.pick_up_sent();
        Ok(())
    }

    /// Gives each event the kernel's transmit stamp of its last byte, from the stamps queued so
    /// far (on loopback a write's stamp is usually queued before the write returns).
    fn pick_up_sent(&mut self) {
        let events = &mut self.events;
        self.stream.sent(|id, at| {
            if let Some(e) = events.iter_mut().rev().find(|e| e.tx_id == Some(id)) {
                e.sent = Some(at);
            }
        });
    }

    /// Sends a pre-rendered event.
    async fn emit_bytes(
        &mut self,
        bytes: &[u8],
        due: Duration,
        token: bool,
        last: bool,
    ) -> Result<(), Gone> {
        self.payload.clear();
        self.payload.extend_from_slice(bytes);
        self.emit(due, token, last).await
    }

    /// Takes a `--max-concurrency` slot (watching the socket) and returns it with the start of
    /// generation as an offset from arrival.
    async fn slot(
        &mut self,
        shared: &Shared,
    ) -> Result<(Option<tokio::sync::OwnedSemaphorePermit>, Duration), Gone> {
        let Some(sem) = shared.slots.clone() else {
            return Ok((None, Duration::ZERO));
        };
        let permit = tokio::select! {
            biased;
            p = sem.acquire_owned() => p.ok(),
            Gone = self.wait_gone() => return Err(Gone),
        };
        Ok((permit, self.arrival.elapsed()))
    }
}

/// A streaming answer: head at arrival, opening events at the start of generation, token events
/// on their deadlines, closing events right after the last token.
#[allow(clippy::too_many_arguments)]
async fn stream_answer(
    out: &mut Out<'_>,
    req: &Request,
    id: &str,
    mut plan: Plan,
    r: &Renderer,
    include_usage: bool,
    shared: &Shared,
    rec: &mut Record,
) -> Result<End, Gone> {
    let framing = if out.chunked {
        Framing::Chunked
    } else {
        Framing::Close
    };
    let keep_alive = req.keep_alive && out.chunked;
    let head = http::head(
        200,
        "text/event-stream; charset=utf-8",
        framing,
        keep_alive,
        id,
        out.extra,
    );
    rec.head_written = Some(out.write_raw(&head).await?);
    let (_permit, start) = out.slot(shared).await?;
    rec.queued = start;
    for ev in r.opening() {
        out.emit_bytes(&ev.bytes, start, ev.token, false).await?;
    }
    let (fault, tokens, capped, cut) = (plan.fault, plan.tokens, plan.capped, plan.cut());
    if fault == Some(Fault::Stall) {
        return Err(out.wait_gone().await);
    }
    let mut last_due = start;
    let mut sent = 0;
    let mut struck = false;
    for c in plan.chunks() {
        if !struck && c.start >= cut {
            struck = true;
            match fault {
                Some(Fault::Truncate) => {
                    rec.output_tokens = sent;
                    return Ok(End::Closed);
                }
                Some(Fault::StallMid) => {
                    rec.output_tokens = sent;
                    return Err(out.wait_gone().await);
                }
                Some(Fault::Malformed) => {
                    out.emit_bytes(&r.malformed().bytes, last_due, false, false)
                        .await?;
                }
                _ => {}
            }
        }
        let due = start + c.due;
        out.wait(due).await?;
        r.token_event(&mut out.payload, c.start, c.count);
        out.emit(due, true, false).await?;
        sent += c.count;
        rec.output_tokens = sent;
        last_due = due;
    }
    let closing = r.closing(tokens, capped, include_usage);
    let n = closing.len();
    for (i, ev) in closing.into_iter().enumerate() {
        out.emit_bytes(&ev.bytes, last_due, ev.token, i + 1 == n)
            .await?;
    }
    Ok(End::Complete)
}

/// A non-streaming answer: the whole JSON body once the last token would have been ready.
async fn whole_answer(
    out: &mut Out<'_>,
    req: &Request,
    id: &str,
    mut plan: Plan,
    r: &Renderer,
    shared: &Shared,
    rec: &mut Record,
) -> Result<End, Gone> {
    let (_permit, start) = out.slot(shared).await?;
    rec.queued = start;
    let (fault, tokens, capped) = (plan.fault, plan.tokens, plan.capped);
    if matches!(fault, Some(Fault::Stall | Fault::StallMid)) {
        return Err(out.wait_gone().await);
    }
    let last = plan.chunks().last().map_or(Duration::ZERO, |c| c.due);
    let due = start + last;
    out.wait(due).await?;
    let body = match fault {
        Some(Fault::Malformed) => b"{not json".to_vec(),
        _ => r.full_body(tokens, capped),
    };
    let mut bytes = http::head(
        200,
        "application/json",
        Framing::Length(body.len()),
        req.keep_alive,
        id,
        out.extra,
    );
    let end = if fault == Some(Fault::Truncate) {
        // Promise the whole body, send half of it, close.
        bytes.extend_from_slice(&body[..body.len() / 2]);
        End::Closed
    } else {
        bytes.extend_from_slice(&body);
        rec.output_tokens = tokens;
        End::Complete
    };
    out.payload = bytes;
    out.chunked = false;
    out.emit(due, true, false).await?;
    rec.head_written = out.events.last().map(|e| e.at);
    Ok(end)
}
