//! How numbers are written for people, in one place for every output: seconds (`212.3 ms`,
//! `2.41 s`), costs (four significant digits), plain numbers (`4`, `2.5`), sizes (`64 KiB`,
//! `1.5 MiB`), and text cut to a length. Findings and
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

/// A share or a change (a ratio) as a percentage with two decimals: `12.50%`, `0.00%`,
/// `100.00%`, `-1.25%`. A value between 0 and 0.005% is `<0.01%` (`>-0.01%` below 0) and one
/// between 99.995% and 100% is `>99.99%`: a rare event never reads as none, nor a near total as
/// all, and no share is written to five places.
pub fn fmt_pct(v: f64) -> String {
    let p = v * 100.0;
    if p > 0.0 && p < 0.005 {
        "<0.01%".to_owned()
    } else if p < 0.0 && p > -0.005 {
        ">-0.01%".to_owned()
    } else if (99.995..100.0).contains(&p) {
        ">99.99%".to_owned()
    } else {
        format!("{p:.2}%")
    }
}

/// A count and its noun, singular for one: `1 level`, `3 levels` (nouns that add an `s`).
pub fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// `4` for 4.0, `2.5` for 2.5.
pub fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// A size in bytes, exactly, in the largest binary unit that writes it with at most two decimals:
/// `64 KiB`, `1.5 MiB`, `16 MiB`, `1 GiB`, `100 B` (a size no unit writes exactly: in bytes).
pub fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    for (shift, unit) in UNITS {
        let size = 1u128 << shift;
        let hundredths = u128::from(bytes) * 100;
        if u128::from(bytes) >= size && hundredths % size == 0 {
            let h = hundredths / size;
            return match (h / 100, h % 100) {
                (whole, 0) => format!("{whole} {unit}"),
                (whole, f) if f % 10 == 0 => format!("{whole}.{} {unit}", f / 10),
                (whole, f) => format!("{whole}.{f:02} {unit}"),
            };
        }
    }
    format!("{bytes} B")
}

/// `s` cut to at most `max_bytes` bytes of UTF-8 (at a character boundary), with `…` after the
/// cut; a text within the bound is kept whole.
pub fn truncate_bytes(s: &str, max_bytes: usize) -> String {
    if s.len() <= max_bytes {
        return s.to_owned();
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
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
    fn sizes_are_written_exactly() {
        for (bytes, want) in [
            (0, "0 B"),
            (100, "100 B"),
            (1000, "1000 B"),
            (1024, "1 KiB"),
            (1536, "1.5 KiB"),
            (1280, "1.25 KiB"),
            (64 * 1024, "64 KiB"),
            (16 << 20, "16 MiB"),
            (3 << 19, "1.5 MiB"),
            (1 << 30, "1 GiB"),
            ((1 << 30) + 1, "1073741825 B"),
            ((1 << 30) + (1 << 20), "1025 MiB"),
            (5 << 40, "5 TiB"),
            (u64::MAX, "18446744073709551615 B"),
        ] {
            assert_eq!(fmt_bytes(bytes), want, "{bytes}");
        }
    }

    #[test]
    fn shares_are_percentages_with_two_decimals() {
        for (v, want) in [
            (0.0, "0.00%"),
            (0.125, "12.50%"),
            (1.0, "100.00%"),
            (0.0000253, "<0.01%"),
            (0.00005, "0.01%"),
            (0.99999, ">99.99%"),
            (0.9999, "99.99%"),
            (-0.0125, "-1.25%"),
            (-0.0000253, ">-0.01%"),
        ] {
            assert_eq!(fmt_pct(v), want, "{v}");
        }
    }

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1, "level"), "1 level");
        assert_eq!(count(0, "level"), "0 levels");
        assert_eq!(count(6, "level"), "6 levels");
    }

    #[test]
    fn truncate_is_char_safe() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hi", 5), "hi");
        assert_eq!(
            truncate_bytes("héllo", 2),
            "h…",
            "é is two bytes: not split"
        );
        assert_eq!(truncate_bytes("héllo", 3), "hé…");
        assert_eq!(truncate_bytes("hello", 5), "hello");
    }
}
