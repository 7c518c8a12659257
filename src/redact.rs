//! Redaction: the one place that decides what a secret is and how it is hidden in every output
//! (logs, reports, `/`, errors, bench reports).
//!
//! What is secret (the rule, applied everywhere):
//! - the API key (`api_key`, `api_key_file`'s content, `--api-key-env`);
//! - URL userinfo (user and password of `base_url` and of a proxy URL);
//! - every custom header value and every query value, except those of the few parameters known
//!   to carry no secret ([`PUBLIC_NAMES`]: `api-version`, `anthropic-version`, ...). A value is
//!   shown only when its name is on that list; there is no guessing by name.
//!
//! A [`Redactor`] is built from those secrets and replaces, in any text, each secret and each form
//! derived from it that a server may echo: percent-encoded (as in a URL or a form), JSON-escaped,
//! base64 (`user:pass` of the Basic credentials the prober derives from userinfo, and the secret
//! itself). A text cut short (at the 512-character message limit, marked `…`, or at the end of a
//! bounded body read) that ends in the first characters of a secret has those removed too, so a
//! truncation can never leave part of a secret. [`redact_url`] shows a URL without userinfo and
//! with non-public query values hidden. [`config_snippet`] shows the lines of a config that does
//! not parse (so whose secrets are unknown) with only the values of keys that are never secret.

use base64::Engine;

/// What replaces a secret.
pub const REDACTED: &str = "<redacted>";

/// Header and query parameter names whose values are shown (they carry versions, not secrets).
/// Every other configured header or query value is treated as a secret.
pub const PUBLIC_NAMES: &[&str] = &[
    "api-version",
    "anthropic-version",
    "anthropic-beta",
    "openai-beta",
    "content-type",
    "accept",
    "user-agent",
];

/// Secret values shorter than this are not searched for in free text (they would match
/// everywhere and cannot be a credential); they are still hidden where their position is known
/// (URLs, the config snippet).
pub const MIN_SECRET_LEN: usize = 4;

/// The shortest cut-off prefix of a secret removed at the end of a truncated text.
const MIN_PREFIX_LEN: usize = 3;

/// True when a header or query parameter `name` is on the public list (case-insensitive).
pub fn is_public_name(name: &str) -> bool {
    PUBLIC_NAMES
        .iter()
        .any(|p| p.eq_ignore_ascii_case(name.trim()))
}

/// Replaces configured secrets, and the forms derived from them, in any text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Every form of every secret, longest first (so a longer form wins over a contained one).
    needles: Vec<String>,
}

impl Redactor {
    /// A redactor that hides nothing yet.
    pub fn new() -> Self {
        Redactor::default()
    }

    /// Adds a secret value and its derived forms.
    pub fn add_secret(&mut self, s: &str) {
        let s = s.trim();
        if s.chars().count() < MIN_SECRET_LEN {
            return;
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let b64url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut forms = vec![
            s.to_owned(),
            percent_encode(s, false),
            percent_encode(s, true),
            percent_encode(s, false).to_ascii_lowercase_hex(),
            b64.encode(s),
            b64url.encode(s),
        ];
        if let Ok(j) = serde_json::to_string(s) {
            forms.push(j.trim_matches('"').to_owned());
        }
        // Base64 with its padding stripped, as it appears inside longer text.
        forms.push(b64.encode(s).trim_end_matches('=').to_owned());
        // Percent-encoded twice (a proxy or logger that encodes an already encoded URL).
        forms.push(percent_encode(&percent_encode(s, false), false));
        forms.extend(base64_cores(s));
        self.add_forms(forms);
    }

    /// Adds the credentials of a URL's userinfo: the user, the password, and the Basic
    /// credentials `base64(user:pass)` an HTTP client derives from them.
    pub fn add_userinfo(&mut self, url: &str) {
        let Ok(u) = url::Url::parse(url) else {
            return;
        };
        let user_enc = u.username().to_owned();
        let pass_enc = u.password().unwrap_or("").to_owned();
        if user_enc.is_empty() && pass_enc.is_empty() {
            return;
        }
        let user = percent_decode(&user_enc);
        let pass = percent_decode(&pass_enc);
        for v in [&user, &pass, &user_enc, &pass_enc] {
            self.add_secret(v);
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut forms = Vec::new();
        for pair in [format!("{user}:{pass}"), format!("{user_enc}:{pass_enc}")] {
            forms.extend(base64_cores(&b64.encode(&pair)));
            forms.push(b64.encode(&pair));
            forms.push(b64.encode(&pair).trim_end_matches('=').to_owned());
            forms.push(pair);
        }
        self.add_forms(forms);
    }

    /// Adds configured headers: every value whose name is not public.
    pub fn add_headers<'a>(&mut self, headers: impl IntoIterator<Item = (&'a str, &'a str)>) {
        for (n, v) in headers {
            if !is_public_name(n) {
                self.add_secret(v);
            }
        }
    }

    /// Adds configured query parameters: every value whose name is not public.
    pub fn add_query<'a>(&mut self, query: impl IntoIterator<Item = (&'a str, &'a str)>) {
        self.add_headers(query);
    }

    /// Adds everything another redactor hides.
    pub fn merge(&mut self, other: &Redactor) {
        self.add_forms(other.needles.clone());
    }

    fn add_forms(&mut self, forms: Vec<String>) {
        for f in forms {
            if f.chars().count() >= MIN_SECRET_LEN && !self.needles.contains(&f) {
                self.needles.push(f);
            }
        }
        self.needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
    }

    /// True when the redactor hides nothing.
    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// `text` with every secret form replaced by [`REDACTED`], and a secret's first characters
    /// removed where the text was cut (before a `…` truncation mark, or at its very end).
    pub fn redact(&self, text: &str) -> String {
        if self.needles.is_empty() {
            return text.to_owned();
        }
        let mut out = text.to_owned();
        for n in &self.needles {
            out = replace_ascii_case_insensitive(&out, n);
        }
        // A cut-off secret: the text right before each truncation mark, and the text's end.
        let mut cuts: Vec<usize> = out.match_indices('…').map(|(i, _)| i).collect();
        cuts.push(out.len());
        for &cut in cuts.iter().rev() {
            if let Some(start) = self.cut_prefix_start(&out[..cut]) {
                out.replace_range(start..cut, REDACTED);
            }
        }
        out
    }

    /// Where the longest secret prefix (of at least [`MIN_PREFIX_LEN`] chars) that ends `s`
    /// starts.
    fn cut_prefix_start(&self, s: &str) -> Option<usize> {
        let mut best: Option<usize> = None;
        for n in &self.needles {
            // Proper prefixes of n, longest first, that end s.
            let ends: Vec<usize> = n.char_indices().map(|(i, _)| i).skip(1).collect();
            for &e in ends.iter().rev() {
                let p = &n[..e];
                if p.chars().count() < MIN_PREFIX_LEN {
                    break;
                }
                if s.ends_with(p) {
                    let start = s.len() - p.len();
                    if best.is_none_or(|b| start < b) {
                        best = Some(start);
                    }
                    break;
                }
            }
        }
        best
    }
}

/// `text` with every occurrence of `needle` replaced by [`REDACTED`], ignoring ASCII case (a
/// server may echo a header upper-cased). ASCII case mapping keeps byte offsets, so the offsets
/// found in the lower-cased copy are those of `text`.
fn replace_ascii_case_insensitive(text: &str, needle: &str) -> String {
    let hay = text.to_ascii_lowercase();
    let pat = needle.to_ascii_lowercase();
    if pat.is_empty() || !hay.contains(&pat) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (i, _) in hay.match_indices(&pat) {
        out.push_str(&text[last..i]);
        out.push_str(REDACTED);
        last = i + pat.len();
    }
    out.push_str(&text[last..]);
    out
}

/// The part of `base64(x ‖ s ‖ y)` that `s` alone determines, for each of the three alignments
/// `s` can have inside a longer base64-encoded text (a server that echoes the whole request, or a
/// header block, base64-encoded), standard and URL-safe alphabets: the characters of the 3-byte
/// groups made only of `s`'s bytes.
fn base64_cores(s: &str) -> Vec<String> {
    let engines = [
        base64::engine::general_purpose::STANDARD,
        base64::engine::general_purpose::URL_SAFE,
    ];
    let mut out = Vec::new();
    for e in engines {
        for lead in 0..3usize {
            let mut bytes = vec![0u8; lead];
            bytes.extend_from_slice(s.as_bytes());
            let enc = e.encode(&bytes);
            let skip = if lead == 0 { 0 } else { 4 };
            let end = 4 * (bytes.len() / 3);
            if end > skip + 4 {
                out.push(enc[skip..end].to_owned());
            }
        }
    }
    out
}

trait LowerHex {
    fn to_ascii_lowercase_hex(&self) -> String;
}

impl LowerHex for String {
    /// `%2F` → `%2f` (the other spelling a server may echo).
    fn to_ascii_lowercase_hex(&self) -> String {
        let mut out = String::with_capacity(self.len());
        let mut rest = self.as_str();
        while let Some(i) = rest.find('%') {
            out.push_str(&rest[..i]);
            let esc = rest.get(i..i + 3).unwrap_or(&rest[i..]);
            out.push_str(&esc.to_ascii_lowercase());
            rest = &rest[i + esc.len()..];
        }
        out.push_str(rest);
        out
    }
}

/// Percent-encodes every byte but the unreserved ones (`A-Z a-z 0-9 - . _ ~`); with `form`, a
/// space becomes `+` as in `application/x-www-form-urlencoded`.
fn percent_encode(s: &str, form: bool) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            b' ' if form => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Decodes `%XX` escapes (a malformed escape stays as it is; invalid UTF-8 is replaced).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(h) = s.get(i + 1..i + 3)
            && let Ok(v) = u8::from_str_radix(h, 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A URL safe to show: no user or password, and every query value whose parameter name is not
/// public ([`PUBLIC_NAMES`]) replaced by `<redacted>`. An unparsable URL is not shown at all.
pub fn redact_url(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        return "<unparsable URL>".to_owned();
    };
    let _ = u.set_username("");
    let _ = u.set_password(None);
    if u.query().is_some() {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_public_name(&k) {
                    v.into_owned()
                } else {
                    REDACTED.to_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    let shown = u.to_string();
    // `Url` adds a `/` to a bare origin; keep the URL as it was written.
    match shown.strip_suffix('/') {
        Some(s) if !url.ends_with('/') && u.path() == "/" && u.query().is_none() => s.to_owned(),
        _ => shown,
    }
}

/// Flags whose value (`NAME=VALUE`, or the whole value) is a secret on any command line.
const SECRET_FLAGS: [&str; 5] = [
    "--header",
    "--query",
    "--api-key",
    "--password",
    "--remote-write-header",
];

/// A command line safe to show: the value of a header, query or key flag (`--header
/// NAME=VALUE` keeps `NAME`), a URL's userinfo and its non-public query values are replaced by
/// [`REDACTED`], every secret
/// `r` knows is hidden, and arguments are quoted for a POSIX shell where they need it.
pub fn command_line(args: &[String], r: &Redactor) -> String {
    let mut out = Vec::with_capacity(args.len());
    let mut secret_next = false;
    for a in args {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (a.as_str(), None),
        };
        let hide = |v: &str| match v.split_once('=') {
            Some((n, _)) if flag != "--api-key" => format!("{n}={REDACTED}"),
            _ => REDACTED.to_owned(),
        };
        let shown = if secret_next {
            secret_next = false;
            hide(a)
        } else if SECRET_FLAGS.contains(&flag) {
            match inline {
                Some(v) => format!("{flag}={}", hide(v)),
                None => {
                    secret_next = true;
                    a.clone()
                }
            }
        } else if let Some(v) = inline.filter(|v| v.contains("://")) {
            format!("{flag}={}", shown_url(v))
        } else if a.contains("://") {
            shown_url(a)
        } else {
            a.clone()
        };
        out.push(shell_quote(&r.redact(&shown)));
    }
    out.join(" ")
}

/// A URL argument as [`command_line`] shows it: without userinfo and with the values of its
/// non-public query parameters hidden (`--server-metrics http://h/metrics?token=...`), or with
/// only its userinfo hidden when it does not parse as a URL.
fn shown_url(a: &str) -> String {
    if url::Url::parse(a).is_ok() {
        redact_url(a)
    } else {
        redact_userinfo(a)
    }
}

/// `s` quoted for a POSIX shell when it holds anything but safe characters.
fn shell_quote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A proxy URL without its credentials.
pub fn redact_userinfo(p: &str) -> String {
    match url::Url::parse(p) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "<unparsable proxy URL>".to_owned(),
    }
}

/// The proxy the environment routes `url` through, decided as the prober's client decides it
/// (hyper-util's proxy matcher: `HTTP_PROXY` / `http_proxy`, `HTTPS_PROXY` / `https_proxy`,
/// `ALL_PROXY` / `all_proxy`, minus `NO_PROXY` / `no_proxy`), with any credentials removed.
/// `None` when the connection is direct.
pub fn effective_proxy(url: &str) -> Option<String> {
    let uri: hyper::Uri = url.parse().ok()?;
    let via = hyper_util::client::proxy::matcher::Matcher::from_env().intercept(&uri)?;
    Some(redact_userinfo(&via.uri().to_string()))
}

/// The environment's proxy URL for `url`, credentials included (for [`Redactor::add_userinfo`]:
/// its secrets are redacted whether or not the client ends up using it).
pub fn environment_proxy(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    let host = u.host_str()?.trim_matches(['[', ']']).to_ascii_lowercase();
    let var = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty()))
    };
    if let Some(no) = var(&["no_proxy", "NO_PROXY"]) {
        let bypass = no
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .any(|e| {
                let e = e
                    .trim_start_matches("*.")
                    .trim_start_matches('.')
                    .to_ascii_lowercase();
                e == "*" || host == e || host.ends_with(&format!(".{e}"))
            });
        if bypass {
            return None;
        }
    }
    match u.scheme() {
        "https" => var(&["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]),
        _ => var(&["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]),
    }
}

// ---------------------------------------------------------------------------------------------
// Config text that did not parse: the secrets are not known, so what is shown is decided by the
// YAML structure instead (an allowlist of keys whose values are never secret).

/// Keys whose values a config snippet shows; every other value (`api_key`, header and query
/// values, `extra_body`, comments, continuation lines) is shown as `<redacted>`.
const SHOWN_KEYS: &[&str] = &[
    "defaults",
    "interval",
    "cron",
    "timeouts",
    "connect",
    "first_token",
    "idle",
    "total",
    "prompts",
    "name",
    "messages",
    "role",
    "content",
    "max_tokens",
    "nonce",
    "expect",
    "regex",
    "min_output_tokens",
    "targets",
    "base_url",
    "api",
    "models",
    "include_usage",
    "auth",
    "proxy",
    "ca_file",
    "api_key_file",
    "insecure_skip_verify",
    "connection",
    "max_in_flight",
    "buckets",
    "time_to_first_token",
    "time_per_output_token",
    "decode_tokens_per_second",
    "request_duration",
    "time_to_headers",
    "server_metrics",
    "url",
    "timeout",
    "families",
    "metric",
    "kind",
];

/// Keys under which nothing is shown, whatever the inner key.
const SECRET_PARENTS: &[&str] = &["headers", "query", "extra_body", "api_key"];

/// A YAML parser's message with its quoted values hidden: quoted values in a parser message (`invalid type: string "…"`) may be anything: hide them.
pub fn yaml_message(m: &str) -> String {
    let re = regex::Regex::new(r#""(?:[^"\\]|\\.)*""#).expect("static regex");
    strip_userinfo(&re.replace_all(m, "\"<redacted>\"").replace('\n', " "))
}

/// Every URL in a text shown without its secrets: `scheme://user:pass@host` →
/// `scheme://<redacted>@host`,
/// and each query value whose name is not public ([`PUBLIC_NAMES`]) → `<redacted>`
/// (`?token=s3cret&api-version=1` → `?token=<redacted>&api-version=1`). Textual, so a URL that
/// holds `${VAR}` references is still shown.
fn strip_userinfo(s: &str) -> String {
    let userinfo = regex::Regex::new(r"://[^/@\s]*@").expect("static regex");
    let s = userinfo.replace_all(s, "://<redacted>@");
    let url = regex::Regex::new(r#"[A-Za-z][A-Za-z0-9+.-]*://[^\s,\]}'"]+"#).expect("static regex");
    url.replace_all(&s, |m: &regex::Captures<'_>| {
        let u = &m[0];
        let Some((base, query)) = u.split_once('?') else {
            return u.to_owned();
        };
        let (query, fragment) = query
            .split_once('#')
            .map_or((query, None), |(q, f)| (q, Some(f)));
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((n, _)) if !is_public_name(n) => format!("{n}={REDACTED}"),
                _ => pair.to_owned(),
            })
            .collect();
        let fragment = fragment.map(|f| format!("#{f}")).unwrap_or_default();
        format!("{base}?{}{fragment}", pairs.join("&"))
    })
    .into_owned()
}

/// The config lines `line-2..=line`, each with only the values of [`SHOWN_KEYS`] visible (and
/// those without URL userinfo), numbered, and a caret under `column`.
pub fn config_snippet(text: &str, line: usize, column: usize) -> String {
    if line == 0 {
        return String::new();
    }
    let lines = config_lines(text, line);
    let first = line.saturating_sub(2).max(1);
    let width = line.to_string().len();
    let mut out = format!("{:width$} |", "");
    for (n, l) in lines.iter().enumerate().skip(first - 1) {
        out.push_str(&format!("\n{:>width$} | {l}", n + 1));
    }
    if let Some(last) = lines.get(line - 1) {
        let col = column.clamp(1, last.chars().count().max(1));
        out.push_str(&format!("\n{:width$} | {}^", "", " ".repeat(col - 1)));
    }
    out
}

/// Lines `1..=upto` of a config with every value that may be secret replaced (see
/// [`config_snippet`]); the YAML need not parse.
pub fn config_lines(text: &str, upto: usize) -> Vec<String> {
    let key_re =
        regex::Regex::new(r#"^("[^"]*"|'[^']*'|[^\s:{}\[\],#"'][^:{}\[\],#]*?)\s*:(?:\s+|$)(.*)$"#)
            .expect("static regex");
    let flow_re = regex::Regex::new(
        r#"([A-Za-z_][A-Za-z0-9_-]*|"[^"]*"|'[^']*')\s*:(?:\s*"[^"]*"|\s*'[^']*'|\s+[^,}\]]*)"#,
    )
    .expect("static regex");
    let shown = |k: &str| SHOWN_KEYS.contains(&k.trim_matches(['"', '\'']));
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut out = Vec::new();
    for raw in text.lines().take(upto) {
        // A comment may hold anything.
        let line = match raw.find(" #") {
            Some(i) => &raw[..i],
            None if raw.trim_start().starts_with('#') => "",
            None => raw,
        };
        let mut content = line.trim_start();
        let mut indent = line.len() - content.len();
        let mut dashes = 0;
        while content == "-" || content.starts_with("- ") {
            dashes += 1;
            let rest = content[1..].trim_start();
            indent += content.len() - rest.len();
            content = rest;
        }
        let prefix = &raw[..raw.len() - raw.trim_start().len()];
        let lead = format!("{prefix}{}", "- ".repeat(dashes));
        if content.is_empty() {
            out.push(if raw.trim_start().starts_with('#') {
                format!("{prefix}# <redacted>")
            } else {
                lead.trim_end().to_owned()
            });
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let secret_ctx = stack
            .iter()
            .any(|(_, k)| SECRET_PARENTS.contains(&k.as_str()) || !shown(k));
        let rendered = match key_re.captures(content) {
            Some(c) => {
                let key = c.get(1).map_or("", |m| m.as_str());
                let value = c.get(2).map_or("", |m| m.as_str()).trim();
                let bare = key.trim_matches(['"', '\'']).to_owned();
                if value.is_empty() || value.starts_with('|') || value.starts_with('>') {
                    stack.push((indent, bare));
                }
                let shown_value = if value.is_empty() {
                    String::new()
                } else if secret_ctx || !shown(key) {
                    " <redacted>".to_owned()
                } else if value.starts_with('|') || value.starts_with('>') {
                    format!(" {value}")
                } else {
                    let v = flow_re.replace_all(value, |m: &regex::Captures<'_>| {
                        if shown(&m[1]) {
                            m[0].to_owned()
                        } else {
                            format!("{}: <redacted>", &m[1])
                        }
                    });
                    format!(" {}", strip_userinfo(&v))
                };
                format!("{lead}{key}:{shown_value}")
            }
            // A list item of a shown key (`models: \n - m`) is shown; any other line without a
            // key (a continuation, a flow mapping's inside, a block scalar) is not.
            None if dashes > 0 && !secret_ctx && !content.starts_with('{') => {
                format!("{lead}{}", strip_userinfo(content))
            }
            None if dashes > 0 && !secret_ctx => {
                let v = flow_re.replace_all(content, |m: &regex::Captures<'_>| {
                    if shown(&m[1]) {
                        m[0].to_owned()
                    } else {
                        format!("{}: <redacted>", &m[1])
                    }
                });
                format!("{lead}{}", strip_userinfo(&v))
            }
            None => format!("{lead}<redacted>"),
        };
        out.push(rendered);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-live-0123456789abcdef";

    #[test]
    fn urls_are_shown_without_secrets() {
        assert_eq!(
            redact_url("https://u:pw@h/v1/chat?api-version=1&api-key=SECRET&code=C0DE"),
            "https://h/v1/chat?api-version=1&api-key=%3Credacted%3E&code=%3Credacted%3E"
        );
        assert_eq!(redact_url("http://h:8080/v1"), "http://h:8080/v1");
        assert_eq!(
            redact_userinfo("http://u:p@proxy:3128"),
            "http://proxy:3128/"
        );
    }

    #[test]
    fn every_form_of_a_secret_is_hidden() {
        let mut r = Redactor::new();
        r.add_secret("va lue/with+odd&chars");
        r.add_userinfo("http://alice:pa%40ss-word@h/v1");
        let text = format!(
            "raw va lue/with+odd&chars pct {} form {} b64 {} basic {} pw pa@ss-word enc pa%40ss-word",
            percent_encode("va lue/with+odd&chars", false),
            percent_encode("va lue/with+odd&chars", true),
            base64::engine::general_purpose::STANDARD.encode("va lue/with+odd&chars"),
            base64::engine::general_purpose::STANDARD.encode("alice:pa@ss-word"),
        );
        let out = r.redact(&text);
        for leak in ["va lue", "odd", "pa@ss", "pa%40ss", "YWxpY2U6"] {
            assert!(!out.contains(leak), "{leak} in {out}");
        }
        assert!(out.starts_with("raw <redacted> pct <redacted>"), "{out}");
    }

    /// A server that echoes the request base64-encoded (at any of the three alignments),
    /// percent-encoded twice, or upper-cased shows no secret. Failed before: only the base64 of
    /// the secret on its own was searched, so the key, the header value and the Basic
    /// credentials decoded out of the echo; the twice-encoded and upper-cased key were shown.
    #[test]
    fn a_request_echoed_in_odd_encodings_shows_no_secret() {
        use base64::Engine;
        const KEY2: &str = "sk-Zq9/Abc+def=GHIJ7xyzLMNOP";
        let mut r = Redactor::new();
        r.add_secret(KEY2);
        r.add_headers([("X-Custom-Tok", "hdrSECRETvalue99")]);
        r.add_userinfo("http://alice:pa55w0rd-Secret@h/v1");
        let basic = base64::engine::general_purpose::STANDARD.encode("alice:pa55w0rd-Secret");
        let head = format!(
            "POST /v1/chat HTTP/1.1\r\nauthorization: Basic {basic}\r\nauthorization: Bearer {KEY2}\r\nx-custom-tok: hdrSECRETvalue99\r\nhost: h\r\n\r\n"
        );
        let windows = |secret: &str| -> Vec<String> {
            let c: Vec<char> = secret.chars().collect();
            c.windows(6).map(|w| w.iter().collect()).collect()
        };
        let mut secrets = windows(KEY2);
        secrets.extend(windows("hdrSECRETvalue99"));
        secrets.extend(windows(&basic));
        secrets.extend(windows("pa55w0rd-Secret"));
        let leaks = |out: &str, what: &str| {
            for s in &secrets {
                assert!(
                    !out.contains(s.as_str()),
                    "{s} of a secret in {what}: {out}"
                );
            }
        };
        for engine in [
            base64::engine::general_purpose::STANDARD,
            base64::engine::general_purpose::URL_SAFE,
        ] {
            for lead in ["", "x", "xy"] {
                let out = r.redact(&engine.encode(format!("{lead}{head}")));
                assert!(out.contains(REDACTED), "{out}");
                // Whatever base64 is left, decoded at every offset, holds no piece of a secret.
                let lenient = base64::engine::GeneralPurpose::new(
                    &base64::alphabet::STANDARD,
                    base64::engine::GeneralPurposeConfig::new()
                        .with_decode_allow_trailing_bits(true)
                        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
                );
                for piece in out.replace('-', "+").replace('_', "/").split(REDACTED) {
                    for off in 0..4.min(piece.len()) {
                        let p = piece[off..].trim_end_matches('=');
                        let p = &p[..p.len() / 4 * 4];
                        if let Ok(bytes) = lenient.decode(p) {
                            leaks(&String::from_utf8_lossy(&bytes), "a decoded echo");
                        }
                    }
                }
            }
        }
        let twice = percent_encode(&percent_encode(&head, false), false);
        leaks(&r.redact(&twice), "a twice percent-encoded echo");
        let out = r.redact(&head.to_ascii_uppercase());
        leaks(&out.to_ascii_lowercase(), "an upper-cased echo");
        for s in &secrets {
            assert!(
                !out.contains(&s.to_ascii_uppercase()),
                "{s} upper-cased in {out}"
            );
        }
    }

    #[test]
    fn a_secret_cut_by_truncation_is_removed() {
        let mut r = Redactor::new();
        r.add_secret(KEY);
        // Cut after 18 of 24 characters, as the 512-character message limit did.
        let cut = format!("echo: Authorization: Bearer {}…", &KEY[..18]);
        let out = r.redact(&cut);
        assert_eq!(out, "echo: Authorization: Bearer <redacted>…");
        // At the end of a bounded body read, with no mark.
        assert_eq!(r.redact(&format!("x {}", &KEY[..9])), "x <redacted>");
        // Short common prefixes are left alone.
        assert_eq!(r.redact("ends with sk"), "ends with sk");
    }

    #[test]
    fn public_values_and_short_values_are_not_secrets() {
        let mut r = Redactor::new();
        r.add_query([("api-version", "2024-10-21"), ("code", "abc")]);
        r.add_headers([("X-Team", "team-secret-1")]);
        assert_eq!(
            r.redact("v 2024-10-21 abc team-secret-1"),
            "v 2024-10-21 abc <redacted>"
        );
    }

    #[test]
    fn a_command_line_shows_no_secret() {
        let mut r = Redactor::new();
        r.add_secret("sk-live-123456");
        let args: Vec<String> = [
            "tokenprobe",
            "bench",
            "--header",
            "X-Token=hunter22",
            "--query=api-key=qsecret99",
            "--api-key",
            "plain-key-777",
            "--base-url",
            "https://user:pw0rd99@example.com/v1",
            "--models",
            "sk-live-123456",
            "--limit",
            "ttft_p95<2s",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let shown = command_line(&args, &r);
        // A metrics endpoint's URL, as a separate and as an inline value: its query values and
        // userinfo are hidden too.
        let more: Vec<String> = [
            "--server-metrics",
            "http://h:9/metrics?token=tok-333",
            "--prometheus=http://u:pp-444@p:9090",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let urls = command_line(&more, &r);
        assert!(
            !urls.contains("tok-333") && !urls.contains("pp-444"),
            "{urls}"
        );
        assert!(
            urls.contains("http://h:9/metrics?token=")
                && urls.contains("--prometheus=http://p:9090"),
            "{urls}"
        );
        for secret in [
            "hunter22",
            "qsecret99",
            "plain-key-777",
            "pw0rd99",
            "sk-live-123456",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert_eq!(
            shown,
            "tokenprobe bench --header 'X-Token=<redacted>' '--query=api-key=<redacted>' \
             --api-key '<redacted>' --base-url https://example.com/v1 --models '<redacted>' \
             --limit 'ttft_p95<2s'"
        );
    }
}
