//! Per-model profiles and the input side of a simulated request (pure: no I/O, no clocks).
//!
//! - [`Profile`]: one `--profile NAME:ttft=D,itl=D[,output_tokens=N][,prefill_per_1k=D][,prefix_cache=on][,tool_calls=on][,max_context=N]`,
//!   parsed and checked here (the one place), a clear error naming the bad part. With
//!   `max_context=N` a request of more than N input tokens is refused as vLLM refuses one
//!   ([`context_refusal`]).
//! - The token rule: a request's input is rendered to bytes ([`input_bytes`]) and a token is
//!   [`BYTES_PER_TOKEN`] bytes of it. A chat message is a 16-byte role header (4 tokens of
//!   template) and its text content padded to a multiple of 4 bytes, so a message costs
//!   `4 + ceil(content bytes / 4)` tokens; a completions `prompt` costs `ceil(bytes / 4)`. Tools:
//!   each definition of `tools` is a message of its JSON text (after the system prompt of
//!   Anthropic and Responses, before the messages); an assistant's tool calls add each call's
//!   name and arguments to its message's text (Anthropic's `tool_use` blocks: name and `input`'s
//!   JSON), and a result is a message of its text (a `tool` message, a `tool_result` block, a
//!   Responses `function_call_output`).
//! - [`wants_tool_call`]: with `tool_calls=on`, a request that offers tools and does not ask for
//!   none is answered with a call of its first tool.
//! - [`PrefixCache`]: automatic prefix caching as vLLM does it: the input is cut into blocks of
//!   [`BLOCK_TOKENS`] tokens (64 bytes), each full block is named by a hash of its bytes and of
//!   the hash of the block before it (so a hash names the whole prefix up to it), a request reuses
//!   the longest run of cached blocks from its start (never its last token), and a bounded LRU
//!   evicts the least recently used block, a request's tail blocks before its head.
//! - [`prefill`]: the TTFT a profile adds for the uncached input tokens.

use super::plan::Timing;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash as _, Hasher as _};
use std::sync::Mutex;
use std::time::Duration;

/// Bytes of rendered input per token.
pub const BYTES_PER_TOKEN: usize = 4;
/// Template tokens per chat message (its 16-byte role header).
pub const MESSAGE_OVERHEAD_TOKENS: usize = 4;
/// Tokens per prefix-cache block (vLLM's default block size).
pub const BLOCK_TOKENS: usize = 16;
/// Blocks a profile's prefix cache holds (64 Ki tokens).
pub const CACHE_BLOCKS: usize = 4096;

/// One model's behaviour, as `--profile` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The model name requests select it by (exact match of the request's `model`).
    pub name: String,
    /// Base time to first token (before prefill).
    pub ttft: Duration,
    /// Inter-token latency.
    pub itl: Duration,
    /// Output length; `None`: the command's `--output-tokens`.
    pub output_tokens: Option<u32>,
    /// Prefill time per 1,000 uncached input tokens.
    pub prefill_per_1k: Duration,
    /// Automatic prefix caching on.
    pub prefix_cache: bool,
    /// A request that offers tools (and does not ask for none) is answered with a tool call.
    pub tool_calls: bool,
    /// The model's context: a request of more input tokens is refused (400).
    pub max_context: Option<u32>,
}

/// The refusal of a request of `input` tokens beyond a profile's `max_context`, as vLLM words
/// it (HTTP 400, OpenAI's `context_length_exceeded` code): its message.
pub fn context_refusal(max_context: u32, input: u32) -> String {
    format!(
        "This model's maximum context length is {max_context} tokens. However, your request has {input} input tokens. Please reduce the length of the input messages."
    )
}

impl std::str::FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: String| format!("--profile {s:?}: {why}");
        let (name, settings) = s.rsplit_once(':').ok_or_else(|| {
            bad(
                "expected NAME:ttft=D,itl=D[,output_tokens=N][,prefill_per_1k=D][,prefix_cache=on][,tool_calls=on][,max_context=N]"
                    .into(),
            )
        })?;
        let name = name.trim();
        if name.is_empty() {
            return Err(bad("the model name is empty".into()));
        }
        let (mut ttft, mut itl, mut output_tokens, mut max_context) = (None, None, None, None);
        let (mut prefill_per_1k, mut prefix_cache, mut tool_calls) = (Duration::ZERO, false, false);
        let mut seen: Vec<&str> = Vec::new();
        for part in settings.split(',').map(str::trim) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not KEY=VALUE")))?;
            let (k, v) = (k.trim(), v.trim());
            if seen.contains(&k) {
                return Err(bad(format!("{k} is given twice")));
            }
            seen.push(k);
            let dur = || {
                humantime::parse_duration(v)
                    .map_err(|e| bad(format!("{k}={v:?} is not a duration like 200ms ({e})")))
            };
            match k {
                "ttft" => ttft = Some(dur()?),
                "itl" => itl = Some(dur()?),
                "prefill_per_1k" => prefill_per_1k = dur()?,
                "output_tokens" => {
                    output_tokens =
                        Some(v.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                            bad(format!(
                                "output_tokens={v:?} is not a whole number of at least 1"
                            ))
                        })?);
                }
                "max_context" => {
                    max_context =
                        Some(v.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                            bad(format!(
                                "max_context={v:?} is not a whole number of tokens of at least 1"
                            ))
                        })?);
                }
                "prefix_cache" | "tool_calls" => {
                    let on = match v {
                        "on" | "true" => true,
                        "off" | "false" => false,
                        _ => return Err(bad(format!("{k}={v:?}: expected on or off"))),
                    };
                    if k == "prefix_cache" {
                        prefix_cache = on;
                    } else {
                        tool_calls = on;
                    }
                }
                _ => {
                    return Err(bad(format!(
                        "unknown setting {k:?} (ttft, itl, output_tokens, prefill_per_1k, prefix_cache, tool_calls, max_context)"
                    )));
                }
            }
        }
        Ok(Profile {
            name: name.to_owned(),
            ttft: ttft.ok_or_else(|| bad("ttft=D is required".into()))?,
            itl: itl.ok_or_else(|| bad("itl=D is required".into()))?,
            output_tokens,
            prefill_per_1k,
            prefix_cache,
            tool_calls,
            max_context,
        })
    }
}

/// Checks a command's profiles together: names are unique.
///
/// # Errors
/// The first duplicate name.
pub fn check_profiles(profiles: &[Profile]) -> Result<(), String> {
    for (i, p) in profiles.iter().enumerate() {
        if profiles[..i].iter().any(|q| q.name == p.name) {
            return Err(format!("--profile {:?} is given twice", p.name));
        }
    }
    Ok(())
}

/// The prefill time of `uncached` input tokens at `per_1k` per 1,000 tokens.
pub fn prefill(per_1k: Duration, uncached: u32) -> Duration {
    let ns = per_1k.as_nanos() * u128::from(uncached) / 1000;
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Appends `text` padded with zero bytes to a whole number of tokens.
fn push_padded(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(text);
    let rem = text.len() % BYTES_PER_TOKEN;
    if rem != 0 {
        out.resize(out.len() + BYTES_PER_TOKEN - rem, 0);
    }
}

/// A message content's text: a string, or the `text` of each part of an array of parts (an
/// Anthropic `tool_use` part: its name and `input`'s JSON; a `tool_result` part: its content's).
fn content_text(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::String(s) => out.extend_from_slice(s.as_bytes()),
        Value::Array(parts) => {
            for p in parts {
                match p {
                    Value::String(s) => out.extend_from_slice(s.as_bytes()),
                    _ => match p.get("type").and_then(Value::as_str) {
                        Some("tool_use") => {
                            if let Some(n) = p.get("name").and_then(Value::as_str) {
                                out.extend_from_slice(n.as_bytes());
                            }
                            if let Some(i) = p.get("input") {
                                out.extend_from_slice(i.to_string().as_bytes());
                            }
                        }
                        Some("tool_result") => {
                            if let Some(c) = p.get("content") {
                                content_text(c, out);
                            }
                        }
                        _ => {
                            if let Some(t) = p.get("text").and_then(Value::as_str) {
                                out.extend_from_slice(t.as_bytes());
                            }
                        }
                    },
                }
            }
        }
        _ => {}
    }
}

/// An assistant's chat `tool_calls`: each call's function name and arguments.
fn calls_text(v: Option<&Value>, out: &mut Vec<u8>) {
    let Some(Value::Array(calls)) = v else { return };
    for c in calls {
        let f = c.get("function").unwrap_or(&Value::Null);
        for k in ["name", "arguments"] {
            if let Some(s) = f.get(k).and_then(Value::as_str) {
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
}

/// Appends one chat message: a 16-byte role header (the role, cut to 15 bytes, space-padded,
/// and a newline), then its content padded to whole tokens.
fn push_message(out: &mut Vec<u8>, role: &str, content: &Value) {
    let mut text = Vec::new();
    content_text(content, &mut text);
    push_text(out, role, &text);
}

/// Appends one message of `role` and `text` (see [`push_message`]).
fn push_text(out: &mut Vec<u8>, role: &str, text: &[u8]) {
    let role = role.as_bytes();
    let r = &role[..role.len().min(15)];
    out.extend_from_slice(r);
    out.resize(out.len() + 15 - r.len(), b' ');
    out.push(b'\n');
    push_padded(out, text);
}

fn push_messages(out: &mut Vec<u8>, messages: &Value) {
    let Some(list) = messages.as_array() else {
        if messages.is_string() {
            push_message(out, "user", messages);
        }
        return;
    };
    for m in list {
        let mut text = Vec::new();
        let text_of = |k: &str| {
            m.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .as_bytes()
        };
        let role = match m.get("type").and_then(Value::as_str) {
            // The Responses API's tool call and result items.
            Some("function_call") => {
                text.extend_from_slice(text_of("name"));
                text.extend_from_slice(text_of("arguments"));
                "assistant"
            }
            Some("function_call_output") => {
                text.extend_from_slice(text_of("output"));
                "tool"
            }
            _ => {
                content_text(m.get("content").unwrap_or(&Value::Null), &mut text);
                calls_text(m.get("tool_calls"), &mut text);
                m.get("role").and_then(Value::as_str).unwrap_or("user")
            }
        };
        push_text(out, role, &text);
    }
}

/// The tool definitions a request offers, each a message of its JSON text.
fn push_tools(out: &mut Vec<u8>, body: &Value) {
    if let Some(Value::Array(tools)) = body.get("tools") {
        for t in tools {
            push_text(out, "tools", t.to_string().as_bytes());
        }
    }
}

/// The tool a request's answer calls, with `tool_calls=on`: its first tool's name, when it
/// offers tools and its `tool_choice` is not `none` (OpenAI's string, Anthropic's `{type:
/// none}`).
pub fn wants_tool_call(body: &Value) -> Option<String> {
    let first = body.get("tools")?.as_array()?.first()?;
    let choice = body.get("tool_choice");
    let none = choice.and_then(Value::as_str) == Some("none")
        || choice.and_then(|c| c.get("type")).and_then(Value::as_str) == Some("none");
    if none {
        return None;
    }
    let name = first
        .get("function")
        .and_then(|f| f.get("name"))
        .or_else(|| first.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("tool");
    Some(name.to_owned())
}

/// The request's input as the simulator tokenizes it (a multiple of [`BYTES_PER_TOKEN`] bytes):
/// Anthropic's `system` and the Responses API's `instructions` as a first `system` message, the
/// `tools` definitions, then `messages` (chat, Anthropic) or `input` (Responses: a string is one
/// user message); a completions `prompt` (a string or a list of strings) as its bytes, without a
/// template.
pub fn input_bytes(body: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for k in ["system", "instructions"] {
        if let Some(v) = body.get(k) {
            push_message(&mut out, "system", v);
        }
    }
    push_tools(&mut out, body);
    for k in ["messages", "input"] {
        if let Some(v) = body.get(k) {
            push_messages(&mut out, v);
        }
    }
    if let Some(p) = body.get("prompt") {
        let mut text = Vec::new();
        content_text(p, &mut text);
        push_padded(&mut out, &text);
    }
    out
}

/// Input tokens of rendered input: its length / [`BYTES_PER_TOKEN`], at least 1.
pub fn token_count(input: &[u8]) -> u32 {
    u32::try_from(input.len() / BYTES_PER_TOKEN)
        .unwrap_or(u32::MAX)
        .max(1)
}

/// A bounded LRU of prefix blocks (see the module doc).
#[derive(Debug)]
pub struct PrefixCache {
    capacity: usize,
    tick: u64,
    /// Block hash → the tick it was last used at.
    used: HashMap<u64, u64>,
    /// Tick → block hash (the LRU order; ticks are unique).
    order: BTreeMap<u64, u64>,
}

impl PrefixCache {
    /// An empty cache of at most `capacity` blocks (at least 1).
    pub fn new(capacity: usize) -> Self {
        PrefixCache {
            capacity: capacity.max(1),
            tick: 0,
            used: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.used.len()
    }

    /// True when no block is held.
    pub fn is_empty(&self) -> bool {
        self.used.is_empty()
    }

    /// The cumulative hashes of the full blocks of `input` (computed outside the cache's lock).
    pub fn hashes(input: &[u8]) -> Vec<u64> {
        let mut parent = 0u64;
        input
            .chunks_exact(BLOCK_TOKENS * BYTES_PER_TOKEN)
            .map(|block| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                parent.hash(&mut h);
                block.hash(&mut h);
                parent = h.finish();
                parent
            })
            .collect()
    }

    fn touch(&mut self, hash: u64) {
        self.tick += 1;
        if let Some(old) = self.used.insert(hash, self.tick) {
            self.order.remove(&old);
        }
        self.order.insert(self.tick, hash);
    }

    /// Admits a request's input: returns its cached tokens (the longest run of cached blocks
    /// from the start, within all but its last token), then caches every full block of it,
    /// evicting the least recently used blocks beyond the capacity.
    pub fn admit(&mut self, input: &[u8]) -> u32 {
        self.admit_hashes(&Self::hashes(input), token_count(input))
    }

    /// [`PrefixCache::admit`] of an input of `tokens` tokens whose block hashes are `hashes`.
    pub fn admit_hashes(&mut self, hashes: &[u64], tokens: u32) -> u32 {
        let max_hit = (tokens as usize).saturating_sub(1) / BLOCK_TOKENS;
        let hits = hashes
            .iter()
            .take(max_hit)
            .take_while(|h| self.used.contains_key(h))
            .count();
        // Touched tail first, so that the head of this prefix is evicted last; evicting as it
        // goes keeps the cache within its capacity however long the input.
        for h in hashes.iter().rev() {
            self.touch(*h);
            if self.used.len() > self.capacity
                && let Some((_, old)) = self.order.pop_first()
            {
                self.used.remove(&old);
            }
        }
        u32::try_from(hits * BLOCK_TOKENS).unwrap_or(u32::MAX)
    }
}

/// What a request's input costs under a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Input tokens (`usage.prompt_tokens`).
    pub input_tokens: u32,
    /// Of them, served from the prefix cache (`usage.prompt_tokens_details.cached_tokens`).
    pub cached_tokens: u32,
    /// The prefill time added to the TTFT: `prefill_per_1k × uncached / 1000`.
    pub prefill: Duration,
}

/// A profile as the server runs it: its timing, prefill rate and prefix cache.
#[derive(Debug)]
pub(crate) struct Served {
    /// The profile's name; `None` for the command's defaults.
    pub name: Option<String>,
    /// Timing of its requests.
    pub timing: Timing,
    prefill_per_1k: Duration,
    cache: Option<Mutex<PrefixCache>>,
    /// A request offering tools is answered with a tool call.
    pub tool_calls: bool,
    /// A request of more input tokens is refused.
    pub max_context: Option<u32>,
}

impl Served {
    /// A profile on top of the command's timing (jitter and chunking are the command's).
    pub(crate) fn new(
        name: Option<String>,
        timing: Timing,
        prefill_per_1k: Duration,
        prefix_cache: bool,
    ) -> Self {
        Served {
            name,
            timing,
            prefill_per_1k,
            cache: prefix_cache.then(|| Mutex::new(PrefixCache::new(CACHE_BLOCKS))),
            tool_calls: false,
            max_context: None,
        }
    }

    /// The served form of a `--profile` over the command's timing `base`.
    pub(crate) fn of(p: &Profile, base: &Timing) -> Self {
        let timing = Timing {
            ttft: p.ttft,
            itl: p.itl,
            output_tokens: p.output_tokens.unwrap_or(base.output_tokens),
            ..base.clone()
        };
        Served::new(
            Some(p.name.clone()),
            timing,
            p.prefill_per_1k,
            p.prefix_cache,
        )
        .with_tool_calls(p.tool_calls)
        .with_max_context(p.max_context)
    }

    /// This profile refusing requests of more than `max` input tokens.
    pub(crate) fn with_max_context(mut self, max: Option<u32>) -> Self {
        self.max_context = max;
        self
    }

    /// This profile answering requests that offer tools with a tool call (`on`).
    pub(crate) fn with_tool_calls(mut self, on: bool) -> Self {
        self.tool_calls = on;
        self
    }

    /// Empties its prefix cache (`POST /reset_prefix_cache`).
    pub(crate) fn reset_cache(&self) {
        if let Some(mut c) = self.cache.as_ref().and_then(|c| c.lock().ok()) {
            *c = PrefixCache::new(c.capacity);
        }
    }

    /// Admits a request's rendered input (see [`PrefixCache::admit`]).
    pub(crate) fn admit(&self, input: &[u8]) -> Admitted {
        let input_tokens = token_count(input);
        let cached_tokens = self
            .cache
            .as_ref()
            .and_then(|c| {
                let hashes = PrefixCache::hashes(input);
                c.lock()
                    .ok()
                    .map(|mut c| c.admit_hashes(&hashes, input_tokens))
            })
            .unwrap_or(0)
            .min(input_tokens);
        Admitted {
            input_tokens,
            cached_tokens,
            prefill: prefill(self.prefill_per_1k, input_tokens - cached_tokens),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reset_empties_the_prefix_cache() {
        let served = Served::new(None, timing(), Duration::from_millis(10), true);
        let input = vec![b'a'; 64 * 4];
        assert_eq!(served.admit(&input).cached_tokens, 0);
        assert!(served.admit(&input).cached_tokens > 0);
        served.reset_cache();
        assert_eq!(served.admit(&input).cached_tokens, 0);
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn profiles_parse() {
        let p: Profile = "fast:ttft=50ms,itl=5ms".parse().unwrap();
        assert_eq!(
            p,
            Profile {
                name: "fast".into(),
                ttft: ms(50),
                itl: ms(5),
                output_tokens: None,
                prefill_per_1k: Duration::ZERO,
                prefix_cache: false,
                tool_calls: false,
                max_context: None,
            }
        );
        let p: Profile =
            "meta-llama/Llama-3:8b: ttft=1s, itl=20ms, output_tokens=7, prefill_per_1k=12ms, prefix_cache=on"
                .parse()
                .unwrap();
        assert_eq!(p.name, "meta-llama/Llama-3:8b");
        assert_eq!(
            (
                p.ttft,
                p.itl,
                p.output_tokens,
                p.prefill_per_1k,
                p.prefix_cache
            ),
            (ms(1000), ms(20), Some(7), ms(12), true)
        );
        let p: Profile = "m:ttft=0ms,itl=0ms,prefix_cache=off".parse().unwrap();
        assert!(!p.prefix_cache && !p.tool_calls);
        let p: Profile = "m:ttft=0ms,itl=0ms,tool_calls=on".parse().unwrap();
        assert!(p.tool_calls);
        let p: Profile = "m:ttft=0ms,itl=0ms,max_context=2048".parse().unwrap();
        assert_eq!(p.max_context, Some(2048));
        assert!(
            "m:ttft=0ms,itl=0ms,max_context=0"
                .parse::<Profile>()
                .unwrap_err()
                .contains("max_context=\"0\" is not a whole number")
        );
        assert!(
            "m:ttft=0ms,itl=0ms,tool_calls=maybe"
                .parse::<Profile>()
                .unwrap_err()
                .contains("tool_calls=\"maybe\": expected on or off")
        );
    }

    #[test]
    fn bad_profiles_name_the_bad_part() {
        for (s, says) in [
            ("fast", "expected NAME:"),
            (":ttft=1ms,itl=1ms", "name is empty"),
            ("m:ttft=1ms", "itl=D is required"),
            ("m:itl=1ms", "ttft=D is required"),
            ("m:ttft=fast,itl=1ms", "ttft=\"fast\""),
            ("m:ttft=1ms,itl=1ms,output_tokens=0", "output_tokens=\"0\""),
            ("m:ttft=1ms,itl=1ms,output_tokens=x", "output_tokens=\"x\""),
            (
                "m:ttft=1ms,itl=1ms,prefix_cache=yes",
                "prefix_cache=\"yes\"",
            ),
            (
                "m:ttft=1ms,itl=1ms,prefill_per_1k=-1ms",
                "prefill_per_1k=\"-1ms\"",
            ),
            ("m:ttft=1ms,itl=1ms,speed=3", "unknown setting \"speed\""),
            ("m:ttft=1ms,itl=1ms,itl=2ms", "itl is given twice"),
            ("m:ttft=1ms,itl", "\"itl\" is not KEY=VALUE"),
        ] {
            let e = s.parse::<Profile>().unwrap_err();
            assert!(e.contains(says), "{s}: {e}");
            assert!(e.starts_with("--profile "), "{e}");
        }
        let a: Profile = "m:ttft=1ms,itl=1ms".parse().unwrap();
        let b: Profile = "n:ttft=1ms,itl=1ms".parse().unwrap();
        assert!(check_profiles(&[a.clone(), b]).is_ok());
        let e = check_profiles(&[a.clone(), a]).unwrap_err();
        assert!(e.contains("\"m\" is given twice"), "{e}");
    }

    #[test]
    fn token_rule() {
        // (body, tokens): a chat message is 4 template tokens + ceil(content bytes / 4).
        for (body, tokens) in [
            (json!({"messages": [{"role": "user", "content": ""}]}), 4),
            (json!({"messages": [{"role": "user", "content": "a"}]}), 5),
            (
                json!({"messages": [{"role": "user", "content": "abcd"}]}),
                5,
            ),
            (
                json!({"messages": [{"role": "user", "content": "abcde"}]}),
                6,
            ),
            (
                json!({"messages": [{"role": "user", "content": "x".repeat(512)}]}),
                132,
            ),
            (
                json!({"messages": [{"role": "user", "content": "x".repeat(2048)}]}),
                516,
            ),
            (
                json!({"messages": [{"role": "system", "content": "abc"}, {"role": "user", "content": "abcdefgh"}]}),
                4 + 1 + 4 + 2,
            ),
            // Parts: their text is concatenated, other parts are ignored.
            (
                json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "image_url"}, {"type": "text", "text": "cd"}]}]}),
                5,
            ),
            // Anthropic's system and the Responses API's instructions are a first message.
            (
                json!({"system": "abcd", "messages": [{"role": "user", "content": "abcd"}]}),
                10,
            ),
            (
                json!({"instructions": "abcd", "input": "abcdefgh"}),
                4 + 1 + 4 + 2,
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "abcd"}]}]}),
                5,
            ),
            // Completions: the prompt's bytes, no template.
            (json!({"prompt": "abcdefghi"}), 3),
            (json!({"prompt": ["abcd", "efgh"]}), 2),
            // Nothing to read: one token.
            (json!({}), 1),
            // Multi-byte UTF-8 counts bytes: 3 × 3 bytes.
            (json!({"prompt": "€€€"}), 3),
        ] {
            let b = input_bytes(&body);
            assert_eq!(b.len() % BYTES_PER_TOKEN, 0, "{body}");
            assert_eq!(token_count(&b), tokens, "{body}");
        }
        // Role headers are 16 bytes whatever the role.
        let long =
            input_bytes(&json!({"messages": [{"role": "a-very-long-role-name", "content": ""}]}));
        assert_eq!(long.len(), 16);
        assert_eq!(&long[..16], b"a-very-long-rol\n");
    }

    /// Tools count: each definition as a message of its JSON, an assistant's calls by their
    /// name and arguments, a result as a message; in each API's shapes.
    #[test]
    fn token_rule_with_tools() {
        let def = json!({"type": "function", "function": {"name": "t"}});
        let def_tokens = 4 + def.to_string().len().div_ceil(4);
        let chat = json!({
            "tools": [def, def],
            "messages": [
                {"role": "user", "content": "abcd"},
                {"role": "assistant", "content": null,
                 "tool_calls": [{"id": "c", "type": "function", "function": {"name": "ab", "arguments": "cdefgh"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "abcdefgh"}
            ]
        });
        // Two definitions, the user message (5), the call "abcdefgh" (6), the result (6).
        assert_eq!(
            token_count(&input_bytes(&chat)) as usize,
            2 * def_tokens + 5 + 6 + 6
        );
        let anthropic = json!({
            "system": "abcd",
            "messages": [
                {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "ab", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "abcdefgh"}]}
            ]
        });
        // System (5), "ab{}" (5), the result (6).
        assert_eq!(token_count(&input_bytes(&anthropic)), 5 + 5 + 6);
        let responses = json!({
            "input": [
                {"role": "user", "content": "abcd"},
                {"type": "function_call", "call_id": "c", "name": "ab", "arguments": "cdefgh"},
                {"type": "function_call_output", "call_id": "c", "output": "abcdefgh"}
            ]
        });
        assert_eq!(token_count(&input_bytes(&responses)), 5 + 6 + 6);
        // The same definitions are the same bytes: a shared prefix.
        let a = input_bytes(&chat);
        let mut other = chat.clone();
        other["messages"][0]["content"] = json!("wxyz");
        let b = input_bytes(&other);
        assert_eq!(a[..2 * def_tokens * 4], b[..2 * def_tokens * 4]);
    }

    #[test]
    fn a_tool_call_answers_requests_that_offer_tools() {
        let chat = json!({"tools": [{"type": "function", "function": {"name": "lookup"}}]});
        assert_eq!(wants_tool_call(&chat).as_deref(), Some("lookup"));
        let anthropic = json!({"tools": [{"name": "fetch"}], "tool_choice": {"type": "any"}});
        assert_eq!(wants_tool_call(&anthropic).as_deref(), Some("fetch"));
        let responses =
            json!({"tools": [{"type": "function", "name": "get"}], "tool_choice": "required"});
        assert_eq!(wants_tool_call(&responses).as_deref(), Some("get"));
        for none in [
            json!({"tools": [{"name": "x"}], "tool_choice": "none"}),
            json!({"tools": [{"name": "x"}], "tool_choice": {"type": "none"}}),
            json!({"tools": []}),
            json!({"messages": []}),
        ] {
            assert_eq!(wants_tool_call(&none), None, "{none}");
        }
        assert_eq!(
            wants_tool_call(&json!({"tools": [{}]})).as_deref(),
            Some("tool"),
            "a tool without a name"
        );
    }

    #[test]
    fn prefill_is_per_thousand_uncached_tokens() {
        assert_eq!(prefill(ms(10), 1000), ms(10));
        assert_eq!(prefill(ms(10), 384), Duration::from_micros(3840));
        assert_eq!(prefill(ms(10), 0), Duration::ZERO);
        assert_eq!(prefill(Duration::ZERO, 5000), Duration::ZERO);
        assert_eq!(prefill(Duration::from_secs(1), 1), ms(1));
        assert_eq!(
            prefill(Duration::from_secs(1), u32::MAX),
            Duration::from_millis(u64::from(u32::MAX))
        );
    }

    /// `n` tokens of input whose block `i` is filled with byte `fill(i)`.
    fn blocks(n_blocks: usize, fill: impl Fn(usize) -> u8) -> Vec<u8> {
        (0..n_blocks)
            .flat_map(|i| std::iter::repeat_n(fill(i), BLOCK_TOKENS * BYTES_PER_TOKEN))
            .collect()
    }

    #[test]
    fn prefix_cache_hits_the_shared_prefix_only() {
        let mut c = PrefixCache::new(100);
        let a = blocks(4, |i| i as u8);
        assert_eq!(c.admit(&a), 0, "a cold cache");
        assert_eq!(c.len(), 4);
        // The same input again: every block but the one holding the last token.
        assert_eq!(c.admit(&a), 48);
        // One token more: all four blocks.
        let mut a1 = a.clone();
        a1.extend_from_slice(b"zzzz");
        assert_eq!(c.admit(&a1), 64);
        // Same first two blocks, then different: two blocks.
        let b = blocks(4, |i| if i < 2 { i as u8 } else { 9 });
        assert_eq!(c.admit(&b), 32);
        // A block equal to a cached one, but after a different prefix, is not a hit.
        let d = blocks(4, |i| if i == 0 { 7 } else { i as u8 });
        assert_eq!(c.admit(&d), 0);
        // A partial block is never cached.
        let mut c = PrefixCache::new(100);
        let short = vec![1u8; 63];
        assert_eq!(c.admit(&short), 0);
        assert!(c.is_empty());
        assert_eq!(c.admit(&short), 0);
    }

    #[test]
    fn prefix_cache_evicts_least_recently_used_tail_first() {
        let mut c = PrefixCache::new(4);
        let a = blocks(3, |i| i as u8); // blocks a0 a1 a2
        let b = blocks(2, |i| 50 + i as u8); // b0 b1
        c.admit(&a);
        c.admit(&b); // 5 blocks: the oldest, a2 (a's tail, touched first), goes.
        assert_eq!(c.len(), 4);
        let mut a3 = a.clone();
        a3.extend_from_slice(b"zzzz");
        assert_eq!(c.admit(&a3), 32, "a0 a1 kept, a2 evicted");
        // a2 came back, so the oldest block went: b1, b's tail.
        let mut b2 = b.clone();
        b2.extend_from_slice(b"zzzz");
        assert_eq!(c.admit(&b2), 16, "b0 kept, b1 (b's tail) evicted");
        assert_eq!(c.len(), 4);
        let mut c = PrefixCache::new(0);
        assert_eq!(c.admit(&a), 0);
        assert_eq!(c.len(), 1, "capacity is at least one block");
        // An input far longer than the cache keeps its head, and never holds more.
        let mut c = PrefixCache::new(8);
        let long = blocks(100, |i| i as u8);
        assert_eq!(c.admit(&long), 0);
        assert_eq!(c.len(), 8);
        let head = blocks(9, |i| i as u8);
        assert_eq!(c.admit(&head), 128, "the first 8 blocks are the ones kept");
    }

    fn timing() -> Timing {
        Timing {
            ttft: ms(200),
            ttft_jitter: ms(3),
            itl: ms(20),
            itl_jitter: ms(1),
            output_tokens: 64,
            output_tokens_jitter: 2,
            tokens_per_chunk: 2,
        }
    }

    #[test]
    fn served_profiles_compute_the_ttft_addition() {
        let p: Profile = "m:ttft=50ms,itl=5ms,prefill_per_1k=10ms,prefix_cache=on"
            .parse()
            .unwrap();
        let s = Served::of(&p, &timing());
        assert_eq!(s.name.as_deref(), Some("m"));
        assert_eq!(
            (s.timing.ttft, s.timing.itl, s.timing.output_tokens),
            (ms(50), ms(5), 64)
        );
        assert_eq!(
            (s.timing.ttft_jitter, s.timing.tokens_per_chunk),
            (ms(3), 2)
        );
        let prefix = "p".repeat(2048);
        let first = input_bytes(
            &json!({"messages": [{"role": "user", "content": format!("{prefix}one")}]}),
        );
        let second = input_bytes(
            &json!({"messages": [{"role": "user", "content": format!("{prefix}two")}]}),
        );
        let a = s.admit(&first);
        assert_eq!(
            a,
            Admitted {
                input_tokens: 517,
                cached_tokens: 0,
                prefill: Duration::from_micros(5170)
            }
        );
        // 16 header bytes + 2048 shared bytes = 2064 = 32.25 blocks: 32 blocks shared.
        let b = s.admit(&second);
        assert_eq!(b.cached_tokens, 512);
        assert_eq!(b.prefill, Duration::from_micros(50));
        // Without a cache nothing is cached.
        let off = Served::new(None, timing(), ms(10), false);
        assert_eq!(off.admit(&second).cached_tokens, 0);
        assert_eq!(off.admit(&second).prefill, Duration::from_micros(5170));
        let p: Profile = "n:ttft=1ms,itl=1ms,output_tokens=9".parse().unwrap();
        assert_eq!(Served::of(&p, &timing()).timing.output_tokens, 9);
    }
}
