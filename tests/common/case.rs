//! Parser for the stream fault cases in `tests/cases/NN-name.txt` (the repository's copy of the
//! shared cases; `tests/cases/README.md` describes the format).
//!
//! A case file is a `#` header, the line `#---- RAW ----`, then raw bytes cut into timed segments by
//! markers: `%%SEG t=<s>s%%` plus ONE following LF opens a segment (the marker and that LF are not
//! data), `%%EOF t=<s>s%%` closes the connection and `%%RST t=<s>s%%` resets it (anything after either
//! is ignored); a RAW with neither keeps the connection open after the last write, so the client must
//! see the body's end from its framing. A marker may stand in the middle of a line (case 18), so the
//! parser works on bytes and never rewrites them, with two exceptions inside a segment:
//! `%%REPEAT <n> <text>%%` is expanded here into `<text>` written n times (large lines stay out of the
//! repository), and `%%HTTPDATE+<n>%%` / `%%HTTPDATE-<n>%%` is kept as written for the replay server
//! to put the date of its send instant in its place ([`render_http_dates`]).

use std::borrow::Cow;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

const RAW_LINE: &[u8] = b"#---- RAW ----";

/// The bytes the server writes in ONE write at `at` after the request was read in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub at: Duration,
    pub bytes: Vec<u8>,
}

/// How a connection ends after the last write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// A normal close (FIN) at this time (`%%EOF%%`).
    Close(Duration),
    /// A TCP reset (SO_LINGER 0, no FIN) at this time (`%%RST%%`).
    Reset(Duration),
    /// The server keeps the connection open until the client closes it (no end marker).
    KeepOpen,
}

/// What a replay server does on one connection: its writes in order, then its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub writes: Vec<Segment>,
    pub end: End,
}

#[derive(Debug, Clone)]
pub struct Case {
    /// File stem, e.g. `18-event-split-across-tcp-reads`.
    pub name: String,
    pub path: PathBuf,
    /// The `#` header, as text.
    pub header: String,
    /// The RAW segments, byte-exact, in file order.
    pub segments: Vec<Segment>,
    /// How the server ends the connection.
    pub end: End,
}

impl Case {
    pub fn load(path: &Path) -> Result<Case, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".txt"))
            .unwrap_or("?")
            .to_string();
        let mut case =
            Case::parse(&name, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        case.path = path.to_path_buf();
        Ok(case)
    }

    pub fn parse(name: &str, bytes: &[u8]) -> Result<Case, String> {
        let raw_start = find_raw_start(bytes).ok_or("no `#---- RAW ----` line")?;
        let header = String::from_utf8_lossy(&bytes[..raw_start]).into_owned();
        let raw = &bytes[raw_start..];

        let mut segments: Vec<Segment> = Vec::new();
        let mut end = End::KeepOpen;
        let mut data_start = 0usize; // start of the bytes not yet assigned to a segment
        let mut i = 0usize;
        while i + 1 < raw.len() {
            if &raw[i..i + 2] != b"%%" {
                i += 1;
                continue;
            }
            if let Some((text, n, marker_len)) = parse_repeat(&raw[i..]) {
                let seg = segments
                    .last_mut()
                    .ok_or("a %%REPEAT marker before the first %%SEG marker")?;
                seg.bytes.extend_from_slice(&raw[data_start..i]);
                for _ in 0..n {
                    seg.bytes.extend_from_slice(text);
                }
                i += marker_len;
                data_start = i;
                continue;
            }
            let Some((kind, at, marker_len)) = parse_marker(&raw[i..]) else {
                i += 1;
                continue;
            };
            let data = &raw[data_start..i];
            match segments.last_mut() {
                Some(seg) => seg.bytes.extend_from_slice(data),
                None if data.is_empty() => {}
                None => return Err("bytes before the first %%SEG marker".into()),
            }
            if let Some(prev) = segments.last()
                && at < prev.at
            {
                return Err(format!(
                    "marker at {at:?} goes back in time (previous {:?})",
                    prev.at
                ));
            }
            match kind {
                MarkerKind::Seg => {
                    i += marker_len;
                    if raw.get(i) == Some(&b'\n') {
                        i += 1;
                    }
                    segments.push(Segment {
                        at,
                        bytes: Vec::new(),
                    });
                    data_start = i;
                }
                MarkerKind::Eof => {
                    end = End::Close(at);
                    break;
                }
                MarkerKind::Rst => {
                    end = End::Reset(at);
                    break;
                }
                MarkerKind::NewConn => {
                    return Err("%%NEWCONN markers are not supported by this harness yet".into());
                }
            }
        }
        if end == End::KeepOpen {
            // No end marker: the rest of the file is the last segment's data.
            match segments.last_mut() {
                Some(seg) => seg.bytes.extend_from_slice(&raw[data_start..]),
                None if raw[data_start..].is_empty() => {}
                None => return Err("bytes before the first %%SEG marker".into()),
            }
        }
        if segments.is_empty() {
            return Err("no %%SEG marker".into());
        }
        Ok(Case {
            name: name.to_string(),
            path: PathBuf::new(),
            header,
            segments,
            end,
        })
    }

    /// The last instant the script does anything: its close or reset, else its last write.
    pub fn last_instant(&self) -> Duration {
        match self.end {
            End::Close(at) | End::Reset(at) => at,
            End::KeepOpen => self.segments.last().map_or(Duration::ZERO, |s| s.at),
        }
    }

    /// The byte-exact response: all segments concatenated.
    pub fn response_bytes(&self) -> Vec<u8> {
        self.segments
            .iter()
            .flat_map(|s| s.bytes.iter().copied())
            .collect()
    }

    /// Length of the HTTP head (through the blank line), if the response has a complete head.
    pub fn head_len(&self) -> Option<usize> {
        let resp = self.response_bytes();
        find(&resp, b"\r\n\r\n").map(|p| p + 4)
    }

    /// Whether the response head says `Content-Encoding: gzip`.
    pub fn is_gzip(&self) -> bool {
        let resp = self.response_bytes();
        let Some(head_len) = self.head_len() else {
            return false;
        };
        String::from_utf8_lossy(&resp[..head_len])
            .split("\r\n")
            .any(|line| {
                line.split_once(':').is_some_and(|(name, value)| {
                    name.trim().eq_ignore_ascii_case("content-encoding")
                        && value.trim().eq_ignore_ascii_case("gzip")
                })
            })
    }

    /// What the server must do. Normally the segments as they are; for a gzip case the head is
    /// written at its own segment's time and the whole body, compressed as ONE gzip member with no
    /// intermediate flush, in one write at the time of the first segment that holds body bytes.
    pub fn script(&self) -> Result<Script, String> {
        if !self.is_gzip() {
            return Ok(Script {
                writes: self.segments.clone(),
                end: self.end,
            });
        }
        let head_len = self.head_len().ok_or("gzip case without a complete head")?;
        let mut writes = Vec::new();
        let mut body = Vec::new();
        let mut body_at = None;
        let mut offset = 0usize;
        for seg in &self.segments {
            let n_head = head_len.saturating_sub(offset).min(seg.bytes.len());
            if n_head > 0 {
                writes.push(Segment {
                    at: seg.at,
                    bytes: seg.bytes[..n_head].to_vec(),
                });
            }
            if n_head < seg.bytes.len() {
                body_at.get_or_insert(seg.at);
                body.extend_from_slice(&seg.bytes[n_head..]);
            }
            offset += seg.bytes.len();
        }
        if let Some(at) = body_at {
            writes.push(Segment {
                at,
                bytes: gzip_one_member(&body)?,
            });
        }
        Ok(Script {
            writes,
            end: self.end,
        })
    }
}

/// Compress `data` as a single gzip member, with no flush before the end.
pub fn gzip_one_member(data: &[u8]) -> Result<Vec<u8>, String> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).map_err(|e| e.to_string())?;
    enc.finish().map_err(|e| e.to_string())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkerKind {
    Seg,
    Eof,
    Rst,
    NewConn,
}

/// `%%SEG t=0.340s%%` at the start of `b` -> (kind, t, marker length). Anything else is data.
fn parse_marker(b: &[u8]) -> Option<(MarkerKind, Duration, usize)> {
    let (kind, rest) = if let Some(r) = b.strip_prefix(b"%%SEG t=") {
        (MarkerKind::Seg, r)
    } else if let Some(r) = b.strip_prefix(b"%%EOF t=") {
        (MarkerKind::Eof, r)
    } else if let Some(r) = b.strip_prefix(b"%%RST t=") {
        (MarkerKind::Rst, r)
    } else if let Some(r) = b.strip_prefix(b"%%NEWCONN t=") {
        (MarkerKind::NewConn, r)
    } else {
        return None;
    };
    let end = find(rest, b"s%%")?;
    let at = parse_secs(std::str::from_utf8(&rest[..end]).ok()?)?;
    let len = b.len() - rest.len() + end + 3;
    Some((kind, at, len))
}

/// `%%REPEAT <n> <text>%%` at the start of `b` -> (text, n, marker length).
fn parse_repeat(b: &[u8]) -> Option<(&[u8], usize, usize)> {
    let rest = b.strip_prefix(b"%%REPEAT ")?;
    let space = rest.iter().position(|&c| c == b' ')?;
    let n: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
    let text_start = space + 1;
    let text_len = find(&rest[text_start..], b"%%")?;
    let text = &rest[text_start..text_start + text_len];
    Some((text, n, b.len() - rest.len() + text_start + text_len + 2))
}

/// Puts, in place of every `%%HTTPDATE+<n>%%` / `%%HTTPDATE-<n>%%` of a segment, the IMF-fixdate
/// of `now` rounded up to the second plus / minus n seconds (the replay calls it as it sends).
pub fn render_http_dates(bytes: &[u8], now: std::time::SystemTime) -> Cow<'_, [u8]> {
    if find(bytes, b"%%HTTPDATE").is_none() {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = find(rest, b"%%HTTPDATE") {
        out.extend_from_slice(&rest[..at]);
        let tail = &rest[at + b"%%HTTPDATE".len()..];
        let parsed = find(tail, b"%%").and_then(|end| {
            let n: i64 = std::str::from_utf8(&tail[..end]).ok()?.parse().ok()?;
            Some((n, end))
        });
        let Some((n, end)) = parsed else {
            out.extend_from_slice(b"%%HTTPDATE");
            rest = tail;
            continue;
        };
        let since = now
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let up = since.as_secs() + u64::from(since.subsec_nanos() > 0);
        let secs = up.saturating_add_signed(n);
        let date = std::time::UNIX_EPOCH + Duration::from_secs(secs);
        out.extend_from_slice(httpdate::fmt_http_date(date).as_bytes());
        rest = &tail[end + 2..];
    }
    out.extend_from_slice(rest);
    Cow::Owned(out)
}

/// Exact decimal seconds (`0.045`, `75`, `1.6`) to a Duration, without float rounding.
pub fn parse_secs(s: &str) -> Option<Duration> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() || frac.len() > 9 {
        return None;
    }
    if !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = int.parse().ok()?;
    let nanos: u32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    Some(Duration::new(secs, nanos))
}

/// Offset of the first byte after the `#---- RAW ----` line (the line and its LF excluded).
fn find_raw_start(bytes: &[u8]) -> Option<usize> {
    let mut line_start = 0usize;
    while line_start < bytes.len() {
        let line_end = bytes[line_start..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(bytes.len(), |p| line_start + p);
        let line = &bytes[line_start..line_end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line == RAW_LINE {
            return Some((line_end + 1).min(bytes.len()));
        }
        line_start = line_end + 1;
    }
    None
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}
