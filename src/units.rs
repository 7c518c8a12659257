//! How numbers are written for people, in one place for every output: seconds (`212.3 ms`,
//! `2.41 s`), costs (four significant digits) and plain numbers (`4`, `2.5`), and text cut to a length. Findings and
//! cross-checks write their sentences with these when a run is judged; the renderers write their
//! tables with them.

/// A cost, in the config's currency: four significant digits (`0.007`, `0.0001234`, `35.00`).
pub fn fmt_cost(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 12) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// `212.3 ms` below a second, `2.41 s` above.
pub fn fmt_secs(v: f64) -> String {
    if v.abs() < 1.0 {
        format!("{:.1} ms", v * 1e3)
    } else {
        format!("{v:.2} s")
    }
}

/// `4` for 4.0, `2.5` for 2.5.
pub fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// `s` cut to `max_chars` characters, with `…` where it was cut.
pub fn truncate(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_is_char_safe() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hi", 5), "hi");
    }
}
