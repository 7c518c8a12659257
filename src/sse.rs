//! Server-Sent Events decoder: bytes in, complete events out.
//!
//! A pure, synchronous state machine after the WHATWG HTML "event stream" interpretation
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation>),
//! with three deliberate extensions that a prober needs and off-the-shelf parsers drop:
//!
//! * the non-standard `error:` field line that llama.cpp's server sends (docs/measurement.md,
//!   "In-stream errors") is kept and makes the event dispatchable even without `data`;
//! * comment lines (`: ...`) are counted, so the caller can see keep-alives;
//! * an event still pending when the connection ends is dispatched by [`SseDecoder::finish`] and
//!   marked [`SseEvent::unterminated`] (docs/measurement.md, flag `unterminated_final_event`), where the
//!   spec would discard it.
//!
//! Line ends may be CRLF, LF or CR, and may be split across reads; the output does not depend on
//! how the input is split into [`SseDecoder::feed`] calls (a property test checks this).

/// Upper bound for one line or one event's accumulated data, in bytes (16 MiB).
///
/// A stream that exceeds it yields [`SseError::TooLarge`] instead of growing memory without bound.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if any (the spec's "event type"; absent means `message`).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n` (the spec's data buffer without its final LF).
    pub data: String,
    /// Whether at least one `data` field was present (distinguishes `data:` from no data line).
    pub has_data: bool,
    /// The `id:` field, if any.
    pub id: Option<String>,
    /// The value of llama.cpp's non-standard `error:` field line, if any.
    pub error_field: Option<String>,
    /// True when the event was not terminated by a blank line but flushed at end of stream.
    pub unterminated: bool,
}

/// Errors of the decoder itself. Every other oddity is tolerated as the spec says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A single line or event exceeded [`MAX_EVENT_BYTES`].
    #[error("an SSE line or event exceeded {MAX_EVENT_BYTES} bytes")]
    TooLarge,
}

/// Incremental SSE decoder. Feed it bytes as they arrive; it returns the events completed by them.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF in the next chunk belongs to that line end.
    after_cr: bool,
    /// Still at the very start of the stream (a UTF-8 BOM is skipped there).
    at_start: bool,
    pending: SseEvent,
    /// The pending event has at least one field that makes it dispatchable.
    pending_fields: bool,
    comments: u64,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self {
            at_start: true,
            ..Self::default()
        }
    }

    /// Number of comment lines (`:` first) seen so far: keep-alives such as `: OPENROUTER PROCESSING`.
    pub fn comments(&self) -> u64 {
        self.comments
    }

    /// Feeds one chunk of bytes; returns the events that became complete, in order.
    ///
    /// # Errors
    /// [`SseError::TooLarge`] when a line or an event outgrows [`MAX_EVENT_BYTES`].
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        if self.at_start && !bytes.is_empty() {
            // Skip a UTF-8 BOM, possibly split across the first reads.
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            let seen = self.line.len();
            let take = (BOM.len() - seen).min(bytes.len());
            if bytes[..take] == BOM[seen..seen + take] {
                self.line.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if self.line.len() == BOM.len() {
                    self.line.clear();
                    self.at_start = false;
                } else {
                    return Ok(out);
                }
            } else {
                // Not a BOM: whatever was held back is ordinary line content.
                self.at_start = false;
            }
        }
        if self.after_cr && !bytes.is_empty() {
            // The previous read ended in CR: a leading LF here completes that CRLF. (An empty read
            // must not clear this, or the LF would count as a second, blank line.)
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while !bytes.is_empty() {
            match memchr::memchr2(b'\n', b'\r', bytes) {
                Some(i) => {
                    self.line.extend_from_slice(&bytes[..i]);
                    if bytes[i] == b'\r' {
                        match bytes.get(i + 1) {
                            Some(b'\n') => bytes = &bytes[i + 2..],
                            Some(_) => bytes = &bytes[i + 1..],
                            None => {
                                self.after_cr = true;
                                bytes = &[];
                            }
                        }
                    } else {
                        bytes = &bytes[i + 1..];
                    }
                    let line = std::mem::take(&mut self.line);
                    self.process_line(line, &mut out)?;
                }
                None => {
                    if self.line.len() + bytes.len() > MAX_EVENT_BYTES {
                        return Err(SseError::TooLarge);
                    }
                    self.line.extend_from_slice(bytes);
                    bytes = &[];
                }
            }
        }
        Ok(out)
    }

    /// Ends the stream: a partial last line is processed, and a pending event is dispatched with
    /// [`SseEvent::unterminated`] set.
    ///
    /// # Errors
    /// [`SseError::TooLarge`] as for [`SseDecoder::feed`].
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(line, &mut out)?;
        }
        // `out` is empty here: a line never dispatches by itself, only a blank line does.
        if self.pending_fields {
            let mut ev = std::mem::take(&mut self.pending);
            self.pending_fields = false;
            ev.unterminated = true;
            return Ok(Some(ev));
        }
        Ok(None)
    }

    /// Processes one complete line. The first `data` line of an event hands its buffer to the
    /// event's data (no copy of a large line); any other line's buffer is kept for the next line.
    fn process_line(&mut self, mut line: Vec<u8>, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.pending_fields {
                out.push(std::mem::take(&mut self.pending));
            } else {
                self.pending = SseEvent::default();
            }
            self.pending_fields = false;
            self.line = line;
            return Ok(());
        }
        if line[0] == b':' {
            self.comments += 1;
            line.clear();
            self.line = line;
            return Ok(());
        }
        let (name_len, value_at) = match memchr::memchr(b':', &line) {
            Some(i) => (i, i + 1 + usize::from(line.get(i + 1) == Some(&b' '))),
            None => (line.len(), line.len()),
        };
        if &line[..name_len] == b"data" && !self.pending.has_data {
            if line.len() - value_at + 1 > MAX_EVENT_BYTES {
                return Err(SseError::TooLarge);
            }
            line.drain(..value_at);
            self.pending.data = match String::from_utf8(line) {
                Ok(s) => s,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            };
            self.pending.has_data = true;
            self.pending_fields = true;
            return Ok(());
        }
        let result = self.field(&line[..name_len], &line[value_at..]);
        line.clear();
        self.line = line;
        result
    }

    /// Applies one field line (not the first `data` line of an event) to the pending event.
    fn field(&mut self, name: &[u8], value: &[u8]) -> Result<(), SseError> {
        let value = String::from_utf8_lossy(value);
        match name {
            b"data" => {
                if self.pending.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
                    return Err(SseError::TooLarge);
                }
                self.pending.data.push('\n');
                self.pending.data.push_str(&value);
                self.pending_fields = true;
            }
            b"event" => self.pending.event = Some(value.into_owned()),
            b"id" if !value.contains('\0') => {
                self.pending.id = Some(value.into_owned());
            }
            b"error" => {
                self.pending.error_field = Some(value.into_owned());
                self.pending_fields = true;
            }
            // `retry` only steers reconnection, which a probe never does; unknown fields are ignored.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(bytes: &[u8]) -> (Vec<SseEvent>, Option<SseEvent>) {
        let mut d = SseDecoder::new();
        let evs = d.feed(bytes).unwrap();
        (evs, d.finish().unwrap())
    }

    fn data(ev: &SseEvent) -> &str {
        &ev.data
    }

    #[test]
    fn lf_crlf_and_cr_line_ends() {
        for sep in ["\n", "\r\n", "\r"] {
            let s = format!("data: a{sep}{sep}data: b{sep}{sep}");
            let (evs, tail) = all(s.as_bytes());
            assert_eq!(
                evs.iter().map(data).collect::<Vec<_>>(),
                ["a", "b"],
                "sep {sep:?}"
            );
            assert!(tail.is_none());
        }
    }

    #[test]
    fn no_space_after_colon_and_multiline_data() {
        let (evs, _) = all(b"data:{\"a\":1}\n\ndata: x\ndata: y\n\n");
        assert_eq!(evs[0].data, "{\"a\":1}");
        assert_eq!(evs[1].data, "x\ny");
    }

    #[test]
    fn only_one_leading_space_is_stripped() {
        let (evs, _) = all(b"data:  two\n\n");
        assert_eq!(evs[0].data, " two");
    }

    #[test]
    fn comments_are_counted_not_dispatched() {
        let mut d = SseDecoder::new();
        let evs = d.feed(b": OPENROUTER PROCESSING\n\n: ping\n\n").unwrap();
        assert!(evs.is_empty());
        assert_eq!(d.comments(), 2);
    }

    #[test]
    fn event_type_and_id() {
        let (evs, _) = all(b"event: ping\nid: 7\ndata: {}\n\n");
        assert_eq!(evs[0].event.as_deref(), Some("ping"));
        assert_eq!(evs[0].id.as_deref(), Some("7"));
    }

    #[test]
    fn event_without_data_is_not_dispatched_and_type_resets() {
        let (evs, _) = all(b"event: x\n\ndata: d\n\n");
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].event, None);
    }

    #[test]
    fn llamacpp_error_field_dispatches() {
        let (evs, _) = all(b"error: {\"code\":400}\n\ndata: [DONE]\n\n");
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].error_field.as_deref(), Some("{\"code\":400}"));
        assert!(!evs[0].has_data);
        assert_eq!(evs[1].data, "[DONE]");
    }

    #[test]
    fn unterminated_final_event_is_flushed_and_marked() {
        let (evs, tail) = all(b"data: a\n\ndata: b\n");
        assert_eq!(evs.len(), 1);
        let tail = tail.unwrap();
        assert_eq!(tail.data, "b");
        assert!(tail.unterminated);
        // Also without any line end at all.
        let (_, tail) = all(b"data: c");
        assert_eq!(tail.unwrap().data, "c");
    }

    #[test]
    fn empty_data_line_dispatches_empty_event() {
        let (evs, _) = all(b"data\n\n");
        assert_eq!(evs.len(), 1);
        assert!(evs[0].has_data);
        assert_eq!(evs[0].data, "");
    }

    #[test]
    fn bom_is_skipped_even_when_split() {
        let mut d = SseDecoder::new();
        assert!(d.feed(b"\xEF").unwrap().is_empty());
        assert!(d.feed(b"\xBB").unwrap().is_empty());
        let evs = d.feed(b"\xBFdata: x\n\n").unwrap();
        assert_eq!(evs[0].data, "x");
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let (evs, _) = all(b"data: \xFF\n\n");
        assert_eq!(evs[0].data, "\u{FFFD}");
    }

    #[test]
    fn cr_split_from_lf_is_one_line_end() {
        let mut d = SseDecoder::new();
        assert!(d.feed(b"data: a\r").unwrap().is_empty());
        assert!(
            d.feed(b"").unwrap().is_empty(),
            "an empty read changes nothing"
        );
        let evs = d.feed(b"\n\r\n").unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data, "a");
    }

    #[test]
    fn oversized_line_is_an_error() {
        let mut d = SseDecoder::new();
        let big = vec![b'a'; MAX_EVENT_BYTES + 1];
        assert_eq!(d.feed(&big), Err(SseError::TooLarge));
    }

    fn decode_split(bytes: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        let mut prev = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        for c in cuts {
            out.extend(d.feed(&bytes[prev..c]).unwrap());
            prev = c;
        }
        out.extend(d.feed(&bytes[prev..]).unwrap());
        out.extend(d.finish().unwrap());
        out
    }

    fn stream_strategy() -> impl Strategy<Value = Vec<u8>> {
        let line = prop_oneof![
            Just(b"data: {\"x\":1}".to_vec()),
            Just(b"data:".to_vec()),
            Just(b"data:[DONE]".to_vec()),
            Just(b"event: ping".to_vec()),
            Just(b": keep-alive".to_vec()),
            Just(b"error: {\"code\":500}".to_vec()),
            Just(b"id: 3".to_vec()),
            Just(Vec::new()),
            Just("data: h\u{e9}llo".as_bytes().to_vec()),
            Just(b"\xEF\xBB\xBF".to_vec()),
        ];
        let end = prop_oneof![
            Just(b"\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"\r".to_vec())
        ];
        prop::collection::vec((line, end), 0..24)
            .prop_map(|v| v.into_iter().flat_map(|(l, e)| [l, e].concat()).collect())
    }

    proptest! {
        /// Any split of the bytes into reads yields the same events (issue: SSE decoder).
        #[test]
        fn any_split_yields_same_events(
            bytes in stream_strategy(),
            cuts in prop::collection::vec(any::<usize>(), 0..12),
        ) {
            let whole = decode_split(&bytes, &[]);
            let split = decode_split(&bytes, &cuts);
            prop_assert_eq!(whole, split);
        }

        /// One byte per read is the worst case for boundary handling.
        #[test]
        fn byte_by_byte_equals_whole(bytes in stream_strategy()) {
            let whole = decode_split(&bytes, &[]);
            let cuts: Vec<usize> = (0..bytes.len()).collect();
            prop_assert_eq!(whole, decode_split(&bytes, &cuts));
        }
    }
}
