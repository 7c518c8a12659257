//! The comparison with a baseline as text (pure), for the terminal and Markdown: what the gate
//! concluded, its regressions and inconclusive values in sentences, then every value compared in
//! a table (baseline, current, change, its 95% interval, the p-values, the verdict, and why a
//! value was not judged).

use super::Style;
use crate::bench::criteria::{Base, Metric};
use crate::bench::report::{Comparison, Regression, Verdict};
use std::fmt::Write as _;

/// `x` in percent with a sign and `decimals` decimals (a change that rounds to zero is `+0.0`).
fn pct(x: f64, decimals: usize) -> String {
    let s = format!("{:+.decimals$}", x * 100.0);
    match s.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => format!("+{rest}"),
        _ => s,
    }
}

/// A change in the metric's terms: points for the error rate, else relative.
fn change(metric: Metric, x: f64) -> String {
    if metric.base == Base::ErrorRate {
        format!("{} pp", pct(x, 2))
    } else {
        format!("{}%", pct(x, 1))
    }
}

/// A value's interval of its change (empty without one).
fn interval(g: &Regression) -> String {
    let Some([lo, hi]) = g.interval else {
        return String::new();
    };
    match g.metric.base {
        Base::ErrorRate => format!("{} to {} pp", pct(lo, 2), pct(hi, 2)),
        Base::Goodput => format!("{} to {} pp (SLO attainment)", pct(lo, 1), pct(hi, 1)),
        _ => format!("{}% to {}%", pct(lo, 1), pct(hi, 1)),
    }
}

/// A p-value for people: two significant digits down to 0.001, then its order of magnitude.
pub fn fmt_p(p: f64) -> String {
    if p >= 0.1 {
        format!("{p:.2}")
    } else if p >= 0.01 {
        format!("{p:.3}")
    } else if p >= 0.001 {
        format!("{p:.4}")
    } else {
        format!("{p:.0e}")
    }
}

/// `p 0.003, 0.04 after Holm` (empty when not judged).
fn p_values(g: &Regression) -> String {
    match (g.p_value, g.p_holm) {
        (Some(p), Some(h)) => format!("p {}, {} after Holm", fmt_p(p), fmt_p(h)),
        _ => String::new(),
    }
}

/// The verdict as the table shows it (reports of older versions judged by the tolerance alone).
fn verdict(c: &Comparison, g: &Regression) -> String {
    match g.verdict {
        Some(v) => v.label().into(),
        None if c.regressions.iter().any(|r| same(r, g)) => "REGRESSION (tolerance alone)".into(),
        None => "within tolerance".into(),
    }
}

fn same(a: &Regression, b: &Regression) -> bool {
    a.model == b.model && a.level == b.level && a.metric == b.metric
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// One value in a sentence: `sim-a @ 1: ttft_p50 100.2 ms → 130.5 ms (+30.2%, 95% interval
/// +27.9% to +32.6%; p 1e-20, 2e-19 after Holm)`.
fn sentence(g: &Regression) -> String {
    let mut detail = change(g.metric, g.change);
    let i = interval(g);
    if !i.is_empty() {
        let _ = write!(detail, ", 95% interval {i}");
    }
    let p = p_values(g);
    if !p.is_empty() {
        let _ = write!(detail, "; {p}");
    }
    format!(
        "{} @ {}: {} {} → {} ({detail})",
        g.model,
        g.level,
        g.metric,
        g.metric.format(g.baseline),
        g.metric.format(g.current)
    )
}

/// The comparison block of the terminal or Markdown output.
pub fn render(c: &Comparison, style: Style) -> String {
    let mut out = String::new();
    let bullet = style.bullet();
    let n = |v: Verdict| c.with(v).count();
    match (c.confidence, c.judged) {
        (Some(conf), Some(judged)) => {
            let _ = writeln!(
                out,
                "\nBaseline {} (tolerance {:.0}%, error rate +{:.2} pp; a regression must be worse than that significantly, at {:.0}% family-wise confidence: one-sided tests, Holm over the {judged} values judged): {} compared, {}, {} inconclusive, {} within tolerance, {} not judged",
                c.baseline,
                c.tolerance * 100.0,
                c.tolerance_error_rate * 100.0,
                conf * 100.0,
                plural(c.compared as usize, "value", "values"),
                plural(n(Verdict::Regression), "regression", "regressions"),
                n(Verdict::Inconclusive),
                n(Verdict::WithinTolerance),
                n(Verdict::NotJudged),
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "\nBaseline {} (tolerance {:.0}%, error rate +{:.2} pp; judged by the tolerance alone, an older report): {} compared, {}",
                c.baseline,
                c.tolerance * 100.0,
                c.tolerance_error_rate * 100.0,
                plural(c.compared as usize, "value", "values"),
                plural(c.regressions.len(), "regression", "regressions"),
            );
        }
    }
    if !c.changed.is_empty() {
        // Beside the regressions: what served the two runs is not the same.
        let _ = writeln!(
            out,
            "{bullet}what served it changed: {}",
            c.changed.join("; ")
        );
    }
    for g in &c.regressions {
        let _ = writeln!(out, "{bullet}REGRESSION {}", sentence(g));
    }
    let conf = c.confidence.unwrap_or(0.95);
    for g in c.with(Verdict::Inconclusive) {
        let _ = writeln!(
            out,
            "{bullet}inconclusive {}: worse beyond the tolerance, but not significantly so at {:.0}% over the values judged (not a failure)",
            sentence(g),
            conf * 100.0
        );
    }
    if !c.not_in_baseline.is_empty() {
        let _ = writeln!(
            out,
            "{bullet}not in the baseline: {}",
            c.not_in_baseline.join(", ")
        );
    }
    if !c.values.is_empty() {
        out.push_str(&table(c, style));
    }
    out
}

/// Every value compared, one row each, with the reasons values were not judged as numbered
/// notes under it.
fn table(c: &Comparison, style: Style) -> String {
    let header = [
        "model",
        "level",
        "metric",
        "baseline",
        "current",
        "change",
        "95% interval",
        "p (Holm)",
        "verdict",
    ];
    let mut reasons: Vec<&str> = Vec::new();
    let rows: Vec<[String; 9]> = c
        .values
        .iter()
        .map(|g| {
            let mut v = verdict(c, g);
            if let Some(why) = &g.not_judged {
                let k = reasons.iter().position(|r| r == why).unwrap_or_else(|| {
                    reasons.push(why);
                    reasons.len() - 1
                });
                let _ = write!(v, " [{}]", k + 1);
            }
            [
                g.model.clone(),
                g.level.to_string(),
                g.metric.to_string(),
                g.metric.format(g.baseline),
                g.metric.format(g.current),
                change(g.metric, g.change),
                interval(g),
                match (g.p_value, g.p_holm) {
                    (Some(p), Some(h)) => format!("{} ({})", fmt_p(p), fmt_p(h)),
                    _ => String::new(),
                },
                v,
            ]
        })
        .collect();
    let mut out = String::new();
    if style == Style::Markdown {
        out.push('\n');
        let _ = writeln!(out, "| {} |", header.join(" | "));
        let _ = writeln!(out, "|---|---:|---|---:|---:|---:|---:|---:|---|");
        for r in &rows {
            let cells: Vec<String> = r.iter().map(|s| s.replace('|', "\\|")).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out.push('\n');
    } else {
        let mut t = comfy_table::Table::new();
        t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
            .set_header(header);
        for r in rows {
            t.add_row(r);
        }
        for i in 3..8 {
            if let Some(col) = t.column_mut(i) {
                col.set_cell_alignment(comfy_table::CellAlignment::Right);
            }
        }
        let _ = writeln!(out, "{t}");
    }
    let bullet = style.bullet();
    for (i, why) in reasons.iter().enumerate() {
        let _ = writeln!(out, "{bullet}[{}] not judged: {why}", i + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value_of(metric: &str, verdict: Verdict) -> Regression {
        Regression {
            model: "sim-a".into(),
            level: crate::bench::stats::Load::Concurrency(1),
            metric: metric.parse().unwrap(),
            baseline: 0.1,
            current: 0.13,
            change: 0.3,
            verdict: Some(verdict),
            interval: (verdict != Verdict::NotJudged).then_some([0.25, 0.35]),
            p_value: (verdict != Verdict::NotJudged).then_some(1e-12),
            p_holm: (verdict != Verdict::NotJudged).then_some(2e-11),
            test: None,
            not_judged: (verdict == Verdict::NotJudged).then(|| "one figure per run".into()),
        }
    }

    /// Every value shows its baseline, current value, change, interval, p-values and verdict
    /// with units; a regression is also said in a sentence; reasons are numbered notes.
    #[test]
    fn every_value_is_shown_with_its_interval_and_verdict() {
        let r = value_of("ttft_p50", Verdict::Regression);
        let c = Comparison {
            baseline: "run 1".into(),
            tolerance: 0.1,
            tolerance_error_rate: 0.01,
            confidence: Some(0.95),
            compared: 2,
            judged: Some(1),
            regressions: vec![r.clone()],
            not_in_baseline: Vec::new(),
            changed: Vec::new(),
            values: vec![r, value_of("agg_tps", Verdict::NotJudged)],
        };
        let text = render(&c, Style::Terminal);
        assert!(
            text.contains(
                "2 values compared, 1 regression, 0 inconclusive, 0 within tolerance, 1 not judged"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  REGRESSION sim-a @ 1: ttft_p50 100.0 ms → 130.0 ms (+30.0%, 95% interval +25.0% to +35.0%; p 1e-12, 2e-11 after Holm)"
            ),
            "{text}"
        );
        assert!(
            text.contains("not judged [1]")
                && text.contains("  [1] not judged: one figure per run"),
            "{text}"
        );
        assert!(text.contains("0.1 tok/s"), "{text}");
        let md = render(&c, Style::Markdown);
        assert!(
            md.contains("| sim-a | 1 | ttft_p50 | 100.0 ms | 130.0 ms | +30.0% | +25.0% to +35.0% | 1e-12 (2e-11) | REGRESSION |"),
            "{md}"
        );
    }

    #[test]
    fn changes_that_round_to_zero_have_no_minus() {
        let m = |s: &str| s.parse::<Metric>().unwrap();
        assert_eq!(change(m("ttft_p50"), -1e-9), "+0.0%");
        assert_eq!(change(m("ttft_p50"), -0.0123), "-1.2%");
        assert_eq!(change(m("error_rate"), -0.00001), "+0.00 pp");
    }

    #[test]
    fn p_values_are_written_to_their_precision() {
        assert_eq!(fmt_p(0.5), "0.50");
        assert_eq!(fmt_p(0.0236), "0.024");
        assert_eq!(fmt_p(0.0049), "0.0049");
        assert_eq!(fmt_p(2.3e-9), "2e-9");
    }
}
