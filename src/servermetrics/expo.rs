//! A strict parser of the Prometheus text format (0.0.4) and OpenMetrics 1.0 (pure).
//!
//! Only what the signal mapping needs is kept: every sample's metric name, labels and value
//! (timestamps, exemplars, `# HELP`/`# UNIT` are read and dropped). Anything that is not a
//! comment, a blank line or a well-formed sample makes the whole exposition an error: an HTML
//! page or a truncated body is a failed scrape, not a half-read one. Bounded: at most
//! [`MAX_SAMPLES`] samples and [`MAX_LABELS`] labels per sample.
//!
//! Why our own and not a crate: `prometheus-parse` reads only the 0.0.4 text format (no
//! OpenMetrics `# EOF`, exemplars or `_created`) and skips lines it does not understand, which
//! would turn garbage into an empty, "successful" scrape.

/// The most samples one exposition may hold (a GPU node exporter has a few thousand).
pub const MAX_SAMPLES: usize = 200_000;
/// The most labels one sample may carry.
pub const MAX_LABELS: usize = 64;

/// One reading: a sample line of the exposition (a series's name, labels and value). Called a
/// reading here so that "sample" means one thing in tokenprobe: a request's sample in a bench level.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The sample's metric name, with its suffix (`_total`, `_bucket`, ...).
    pub name: String,
    /// Its labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Reading {
    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why an exposition was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A line that is neither a comment nor a sample.
    #[error("line {line}: {why}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        why: &'static str,
    },
    /// More than [`MAX_SAMPLES`] samples.
    #[error("more than {MAX_SAMPLES} samples")]
    TooManySamples,
    /// No sample at all (an empty body is not a metrics endpoint).
    #[error("no samples")]
    Empty,
}

/// Parses an exposition in either format.
///
/// # Errors
/// [`ParseError`] for the first line that is not well-formed, too many samples, or none.
pub fn parse(text: &str) -> Result<Vec<Reading>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            if line.trim() == "# EOF" {
                break;
            }
            continue;
        }
        let s = sample(line).map_err(|why| ParseError::Line { line: i + 1, why })?;
        if out.len() == MAX_SAMPLES {
            return Err(ParseError::TooManySamples);
        }
        out.push(s);
    }
    if out.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(out)
}

fn is_name_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

fn sample(line: &str) -> Result<Reading, &'static str> {
    let b = line.as_bytes();
    let mut i = 0;
    if !b.first().is_some_and(|&c| is_name_start(c)) {
        return Err("not a sample (a metric name must start it)");
    }
    while i < b.len() && is_name_char(b[i]) {
        i += 1;
    }
    let name = line[..i].to_owned();
    let mut labels = Vec::new();
    if b.get(i) == Some(&b'{') {
        i += 1;
        loop {
            while b.get(i) == Some(&b' ') {
                i += 1;
            }
            match b.get(i) {
                Some(b'}') => {
                    i += 1;
                    break;
                }
                Some(&c) if is_name_start(c) => {}
                _ => return Err("bad label name"),
            }
            let start = i;
            while i < b.len() && is_name_char(b[i]) {
                i += 1;
            }
            let key = line[start..i].to_owned();
            if b.get(i) != Some(&b'=') || b.get(i + 1) != Some(&b'"') {
                return Err("a label needs =\"value\"");
            }
            i += 2;
            let mut value = String::new();
            loop {
                match b.get(i) {
                    None => return Err("unterminated label value"),
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') => {
                        match b.get(i + 1) {
                            Some(b'n') => value.push('\n'),
                            Some(b'\\') => value.push('\\'),
                            Some(b'"') => value.push('"'),
                            _ => return Err("bad escape in a label value"),
                        }
                        i += 2;
                    }
                    Some(_) => {
                        // Copy one whole UTF-8 character (the line is a &str, so boundaries hold).
                        let ch = line[i..].chars().next().ok_or("bad label value")?;
                        value.push(ch);
                        i += ch.len_utf8();
                    }
                }
            }
            if labels.len() == MAX_LABELS {
                return Err("too many labels");
            }
            labels.push((key, value));
            while b.get(i) == Some(&b' ') {
                i += 1;
            }
            match b.get(i) {
                Some(b',') => i += 1,
                Some(b'}') => {}
                _ => return Err("expected , or } after a label"),
            }
        }
    }
    if b.get(i) != Some(&b' ') && b.get(i) != Some(&b'\t') {
        return Err("a value must follow the name after a space");
    }
    let rest = line[i..].trim_start();
    // An OpenMetrics exemplar (` # {...} v`) follows the value and timestamp.
    let rest = rest.split(" # ").next().unwrap_or(rest);
    let mut parts = rest.split_ascii_whitespace();
    let value = parse_value(parts.next().ok_or("no value")?)?;
    if let Some(ts) = parts.next()
        && ts.parse::<f64>().is_err()
    {
        return Err("bad timestamp");
    }
    if parts.next().is_some() {
        return Err("text after the timestamp");
    }
    Ok(Reading {
        name,
        labels,
        value,
    })
}

fn parse_value(s: &str) -> Result<f64, &'static str> {
    match s {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ if s
            .bytes()
            .all(|c| c.is_ascii_digit() || b"+-.eE".contains(&c)) =>
        {
            s.parse().map_err(|_| "bad value")
        }
        _ => Err("bad value"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format_with_labels_escapes_and_timestamps() {
        let t = "# HELP x_total A counter.\n# TYPE x_total counter\n\
                 x_total{a=\"1\",b=\"q\\\"uo\\\\te\\n\"} 3.5 1700000000000\n\
                 y +Inf\nz{le=\"0.1\",} -Inf\nw NaN\n\n  \nv 1e3\n";
        let s = parse(t).unwrap();
        assert_eq!(s.len(), 5);
        assert_eq!(s[0].name, "x_total");
        assert_eq!(s[0].label("b"), Some("q\"uo\\te\n"));
        assert_eq!(s[0].value, 3.5);
        assert_eq!(s[1].value, f64::INFINITY);
        assert_eq!(
            (s[2].label("le"), s[2].value),
            (Some("0.1"), f64::NEG_INFINITY)
        );
        assert!(s[3].value.is_nan());
        assert_eq!(s[4].value, 1000.0);
    }

    #[test]
    fn openmetrics_exemplars_and_eof() {
        let t = "# TYPE a histogram\n# UNIT a seconds\n\
                 a_bucket{le=\"1.0\"} 2 # {trace_id=\"x\"} 0.5 123.4\n\
                 a_created 1.7e9\n# EOF\nthis is after EOF\n";
        let s = parse(t).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].value, 2.0);
    }

    #[test]
    fn utf8_label_values() {
        let s = parse("m{modelName=\"NVIDIA H100 80GB HBM3 — ü\"} 1\n").unwrap();
        assert_eq!(s[0].label("modelName"), Some("NVIDIA H100 80GB HBM3 — ü"));
    }

    #[test]
    fn garbage_is_refused_never_half_read() {
        for bad in [
            "<html><body>502 Bad Gateway</body></html>",
            "x 1\n{\"json\": true}",
            "x{a=\"1\" 2",
            "x{a=1} 2",
            "x{a=\"\\q\"} 1",
            "x 1 2 3",
            "x one",
            "x",
            "x{a=\"1\"}2",
            "9x 1",
            "x{\u{1F600}=\"a\"} 1",
            "x 0x10",
            "",
            "# only comments\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(matches!(
            parse("ok 1\n<p>"),
            Err(ParseError::Line { line: 2, .. })
        ));
    }

    #[test]
    fn bounded() {
        let many: String = (0..=MAX_SAMPLES)
            .map(|i| format!("m{{i=\"{i}\"}} 1\n"))
            .collect();
        assert_eq!(parse(&many), Err(ParseError::TooManySamples));
        let labels: Vec<String> = (0..=MAX_LABELS).map(|i| format!("l{i}=\"v\"")).collect();
        assert!(parse(&format!("m{{{}}} 1", labels.join(","))).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic fuzz: every prefix and byte-flip of a real exposition.
        let real = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\nh_bucket{le=\"+Inf\"} 7\n";
        for cut in 0..real.len() {
            let _ = parse(&real[..cut]);
        }
        let mut bytes = real.as_bytes().to_vec();
        for i in 0..bytes.len() {
            for flip in [b'"', b'{', b'}', b'\\', b' ', b'\n', b'=', b',', 0xC3] {
                let old = bytes[i];
                bytes[i] = flip;
                let _ = parse(&String::from_utf8_lossy(&bytes));
                bytes[i] = old;
            }
        }
    }
}
