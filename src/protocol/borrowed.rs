//! The common chat and completions chunk read straight from its text, without building a
//! `serde_json::Value`: a stream's per-event cost (issue 26, "a cheaper per-event path").
//!
//! It reads exactly what [`super::openai`]'s `Value` reading reads (`choices[*].delta`'s four text
//! channels, `choices[*].text`, `finish_reason`, `usage` with its cached and reasoning details,
//! and, when asked, the chunk's `id`, `model` and `system_fingerprint`) with the same rules: a field of another
//! type than the rule asks for counts as absent, a repeated key's last value wins, a choice or
//! delta that is not an object is skipped. Strings without escapes are borrowed from the event's
//! data. Whatever is rarer or richer (a top-level `error`, the flat error shape's `"object":
//! "error"`, llama.cpp's `timings`, `tool_calls`, a `usage` inside a choice, a `finish_reason` that
//! means failure, data that is not an object, `choices` that is not an array, an escaped key,
//! invalid JSON) makes it give up, and the caller reads the event the `Value` way: one rule, one reading, this is only
//! its fast path (a differential test holds the two to the same meaning).

use super::UsageCounts;
use serde::Deserializer as _;
use serde::de::{self, Deserialize, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// What the fast path could not read: the caller reads the event as a `Value`.
#[derive(Debug)]
pub(super) struct GiveUp;

/// A chat or completions chunk, as far as the measurement reads it.
#[derive(Debug, Default)]
pub(super) struct Chunk<'a> {
    /// The `choices` that are objects, in order.
    pub(super) choices: Vec<Choice<'a>>,
    /// The counts of `usage` (see [`UsageCounts::openai`]).
    pub(super) usage: UsageCounts,
    /// `id`, `model` and `system_fingerprint`, each when a string (read only when asked for).
    pub(super) id: Option<Cow<'a, str>>,
    pub(super) model: Option<Cow<'a, str>>,
    pub(super) system_fingerprint: Option<Cow<'a, str>>,
}

/// One choice.
#[derive(Debug, Default)]
pub(super) struct Choice<'a> {
    /// `delta`, when it is an object.
    pub(super) delta: Option<Delta<'a>>,
    /// `text` (legacy completions), when a string.
    pub(super) text: Option<Cow<'a, str>>,
    /// `finish_reason` is a string.
    pub(super) finish: bool,
}

/// A chat delta's text channels, each when a string.
#[derive(Debug, Default)]
pub(super) struct Delta<'a> {
    pub(super) content: Option<Cow<'a, str>>,
    pub(super) refusal: Option<Cow<'a, str>>,
    pub(super) reasoning_content: Option<Cow<'a, str>>,
    pub(super) reasoning: Option<Cow<'a, str>>,
}

/// Reads `data` (an event's data, trimmed or not) as a chunk, or gives up; `identity`: with its
/// `id`, `model` and `system_fingerprint`.
pub(super) fn chunk(data: &str, identity: bool) -> Result<Chunk<'_>, GiveUp> {
    let mut de = serde_json::Deserializer::from_str(data);
    let c = de
        .deserialize_any(ChunkVisitor { identity })
        .map_err(|_| GiveUp)?;
    de.end().map_err(|_| GiveUp)?;
    c.ok_or(GiveUp)
}

/// The error a visitor raises to give up (the message is never shown).
fn give_up<E: de::Error>() -> E {
    E::custom("not the common chunk shape")
}

struct ChunkVisitor {
    identity: bool,
}

impl<'de> Visitor<'de> for ChunkVisitor {
    type Value = Option<Chunk<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut c = Chunk::default();
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "choices" => c.choices = map.next_value::<Choices<'de>>()?.0,
                "usage" => c.usage = map.next_value::<Usage>()?.0,
                "id" if self.identity => c.id = map.next_value::<Text<'de>>()?.0,
                "model" if self.identity => c.model = map.next_value::<Text<'de>>()?.0,
                "system_fingerprint" if self.identity => {
                    c.system_fingerprint = map.next_value::<Text<'de>>()?.0;
                }
                // Rarer and richer: the `Value` reading takes them.
                "error" | "timings" => {
                    if !map.next_value::<IsNull>()?.0 {
                        return Ok(None);
                    }
                }
                // The flat error object (ruling 18).
                "object" => {
                    if map.next_value::<Text<'de>>()?.0.as_deref() == Some("error") {
                        return Ok(None);
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(c))
    }
}

/// The `visit_*` methods of a visitor whose value is `$none` for anything but the kinds it reads
/// (a sequence or map it does not read is skipped whole).
macro_rules! others_are {
    ($none:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
}

/// Skips the rest of a sequence.
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Skips the rest of a map.
fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// `choices`: null is none; an array keeps its object elements; anything else gives up (the
/// `Value` reading calls it malformed).
struct Choices<'a>(Vec<Choice<'a>>);

impl<'de> Deserialize<'de> for Choices<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Choices<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Choices(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(c) = seq.next_element::<MaybeChoice<'de>>()? {
                    out.extend(c.0);
                }
                Ok(Choices(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A choice when it is an object.
struct MaybeChoice<'a>(Option<Choice<'a>>);

impl<'de> Deserialize<'de> for MaybeChoice<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaybeChoice<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            others_are!(MaybeChoice(None));
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                skip_seq(seq).map(|()| MaybeChoice(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut c = Choice::default();
                while let Some(key) = map.next_key::<&'de str>()? {
                    match key {
                        "delta" => c.delta = map.next_value::<MaybeDelta<'de>>()?.0,
                        "text" => c.text = map.next_value::<Text<'de>>()?.0,
                        "finish_reason" => {
                            let reason = map.next_value::<Text<'de>>()?.0;
                            if reason.as_deref().is_some_and(super::failure_finish) {
                                return Err(give_up()); // ruling 23
                            }
                            c.finish = reason.is_some();
                        }
                        // A usage inside a choice (ruling 22).
                        "usage" => {
                            if !map.next_value::<IsNull>()?.0 {
                                return Err(give_up());
                            }
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(MaybeChoice(Some(c)))
            }
        }
        d.deserialize_any(V)
    }
}

/// A delta when it is an object; `tool_calls` (other than null) gives up.
struct MaybeDelta<'a>(Option<Delta<'a>>);

impl<'de> Deserialize<'de> for MaybeDelta<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaybeDelta<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            others_are!(MaybeDelta(None));
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                skip_seq(seq).map(|()| MaybeDelta(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut d = Delta::default();
                while let Some(key) = map.next_key::<&'de str>()? {
                    let slot = match key {
                        "content" => &mut d.content,
                        "refusal" => &mut d.refusal,
                        "reasoning_content" => &mut d.reasoning_content,
                        "reasoning" => &mut d.reasoning,
                        "tool_calls" => {
                            if map.next_value::<IsNull>()?.0 {
                                continue;
                            }
                            return Err(give_up());
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = map.next_value::<Text<'de>>()?.0;
                }
                Ok(MaybeDelta(Some(d)))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string (borrowed when it has no escapes); any other value is none.
struct Text<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Borrowed(s))))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Owned(s))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Owned(s.to_owned()))))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Text(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                skip_seq(seq).map(|()| Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                skip_map(map).map(|()| Text(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether a value is null.
struct IsNull(bool);

impl<'de> Deserialize<'de> for IsNull {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IsNull;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(IsNull(true))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(IsNull(false))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(IsNull(false))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(IsNull(false))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(IsNull(false))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(IsNull(false))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                skip_seq(seq).map(|()| IsNull(false))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                skip_map(map).map(|()| IsNull(false))
            }
        }
        d.deserialize_any(V)
    }
}

/// `usage`'s counts when it is an object, each when a non-negative integer: the rules of
/// [`UsageCounts::openai`] for the chat and completions names (a detail object read whole,
/// however often its key repeats; DeepSeek's `prompt_cache_hit_tokens` only without a cached
/// count in the details).
struct Usage(UsageCounts);

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Usage;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            others_are!(Usage(UsageCounts::default()));
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                skip_seq(seq).map(|()| Usage(UsageCounts::default()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut u = UsageCounts::default();
                let (mut details_cached, mut cache_hit) = (None, None);
                while let Some(key) = map.next_key::<&'de str>()? {
                    match key {
                        "completion_tokens" => u.output = map.next_value::<Count>()?.0,
                        "prompt_tokens" => u.input = map.next_value::<Count>()?.0,
                        "prompt_tokens_details" => {
                            details_cached = map.next_value_seed(CountAt("cached_tokens"))?;
                        }
                        "completion_tokens_details" => {
                            u.reasoning = map.next_value_seed(CountAt("reasoning_tokens"))?;
                        }
                        "prompt_cache_hit_tokens" => cache_hit = map.next_value::<Count>()?.0,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                u.cached_input = details_cached.or(cache_hit);
                Ok(Usage(u))
            }
        }
        d.deserialize_any(V)
    }
}

/// The count at one key of an object (`cached_tokens` of `prompt_tokens_details`), as
/// `value.get(key).and_then(Value::as_u64)` reads it: none for anything else, the last when the
/// key repeats.
struct CountAt(&'static str);

impl<'de> DeserializeSeed<'de> for CountAt {
    type Value = Option<u64>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CountAt {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    others_are!(None);
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_seq(seq).map(|()| None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut n = None;
        while let Some(key) = map.next_key::<&'de str>()? {
            if key == self.0 {
                n = map.next_value::<Count>()?.0;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(n)
    }
}

/// A non-negative integer, as `Value::as_u64` reads one; any other value is none.
struct Count(Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Count(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Count(u64::try_from(v).ok()))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Count(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Count(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Count(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Count(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                skip_seq(seq).map(|()| Count(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                skip_map(map).map(|()| Count(None))
            }
        }
        d.deserialize_any(V)
    }
}
