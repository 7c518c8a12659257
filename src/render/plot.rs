//! `--plot FILE.svg`: one SVG document for people who want a picture without the page: TTFT p95
//! and aggregate output tokens/s against the load (concurrency, or rate in open loop), one line
//! per model, the knee circled, the `--limit`/`--slo` thresholds drawn as horizontal lines, and
//! the server's GPU utilisation and queue when they were collected, under a title naming the run.
//! The panels are the page's own charts ([`super::chart`], the one chart engine); the legend sits
//! in its own box below every panel, so it never covers a point. SVG only: text stays `<text>`,
//! so no font is needed (convert the SVG for a PNG, e.g. `rsvg-convert`).

use super::chart::{self, Chart, HLine, Marker, Point, Ring, Series, XAxis};
use crate::bench::criteria::{Base, Criteria};
use crate::bench::report::Report;
use crate::render::shown::Shown;
use crate::render::text::loop_words;
use std::fmt::Write as _;

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Nothing to plot.
    #[error("nothing to plot: no level has results")]
    Empty,
}

/// Which panel a reference line belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Panel {
    /// TTFT p95, in ms.
    Ttft,
    /// Aggregate output tokens/s.
    AggTps,
}

/// A horizontal threshold line: a `--limit` or an `--slo` on a panel's metric.
#[derive(Debug, Clone, PartialEq)]
pub struct RefLine {
    /// The panel it is drawn on.
    pub panel: Panel,
    /// Its height, in the panel's unit (ms for TTFT, tokens/s).
    pub value: f64,
    /// A `--limit` (true) or an `--slo` (false).
    pub limit: bool,
    /// The legend text, e.g. `limit ttft_p95 < 500.0 ms`.
    pub label: String,
}

/// The threshold lines the criteria imply: every TTFT limit and the TTFT SLO on the TTFT panel
/// (an SLO is per request, so it is a reference, not the p95's bound), every `agg_tps` limit on
/// the tokens/s panel.
pub fn ref_lines(c: &Criteria) -> Vec<RefLine> {
    let mut out = Vec::new();
    for l in &c.limits {
        let (panel, value) = match l.metric.base {
            Base::Ttft => (Panel::Ttft, l.value * 1e3),
            Base::AggTps => (Panel::AggTps, l.value),
            _ => continue,
        };
        out.push(RefLine {
            panel,
            value,
            limit: true,
            label: format!("limit {l}"),
        });
    }
    for s in &c.slos {
        if s.base == Base::Ttft {
            out.push(RefLine {
                panel: Panel::Ttft,
                value: s.value * 1e3,
                limit: false,
                label: format!("SLO {s} (per request)"),
            });
        }
    }
    out
}

/// The legend box's border (no other element uses it, so tests can find the box).
pub const LEGEND_BORDER: &str = "#555555";
/// Space around and between the panels.
const GAP: f64 = 10.0;
/// A panel's title row above its chart.
const PANEL_TITLE: f64 = 24.0;
/// The document's title row.
const TITLE: f64 = 40.0;
/// Panels side by side.
const PER_ROW: usize = 2;
/// Width of the document.
const DOC_WIDTH: f64 = PER_ROW as f64 * chart::WIDTH + (PER_ROW as f64 + 1.0) * GAP;

/// One legend entry's sample glyph.
enum Glyph {
    Model(&'static str),
    Knee,
    Line(&'static str),
}

/// One panel: its title and chart.
struct PanelChart {
    title: String,
    chart: Chart,
}

/// A chart against the level, one line per model, of `y` per level (in the panel's unit).
fn level_chart(
    r: &Report,
    names: &[String],
    labels: &[String],
    x_label: &str,
    (quantity, unit): (&str, &str),
    y: impl Fn(&crate::bench::stats::LevelStats) -> Option<f64>,
) -> Chart {
    let series = r
        .models
        .iter()
        .zip(names)
        .enumerate()
        .map(|(mi, (m, name))| Series {
            name: name.clone(),
            color: chart::color(mi).into(),
            marker: Marker::Circle,
            line: true,
            dashed: false,
            radius: 3.0,
            points: m
                .levels
                .iter()
                .enumerate()
                .filter_map(|(i, l)| {
                    let v = y(l)?;
                    let what = if quantity.is_empty() {
                        String::new()
                    } else {
                        format!("{quantity} ")
                    };
                    Some(Point {
                        x: i as f64,
                        y: v,
                        title: format!(
                            "{name} at {}: {what}{} {unit}",
                            l.key.label(),
                            chart::tick_label(v)
                        ),
                        tag: String::new(),
                    })
                })
                .collect(),
        })
        .collect();
    Chart {
        x: XAxis::Levels(labels.to_vec()),
        x_label: x_label.into(),
        y_label: unit.into(),
        series,
        hlines: Vec::new(),
        rings: Vec::new(),
        ring_label: String::new(),
    }
}

/// Every panel of the plot: TTFT p95 and tokens/s with the knee and the thresholds, then the
/// server's panels that have data (a llama.cpp server has a queue but no GPU signal).
fn panels(r: &Report, names: &[String], labels: &[String], lines: &[RefLine]) -> Vec<PanelChart> {
    let x_label = chart::load_axis(r.mode.kind);
    let on = |p: Panel| -> Vec<HLine> {
        lines
            .iter()
            .filter(|l| l.panel == p)
            .map(|l| HLine {
                y: l.value,
                color: if l.limit {
                    chart::LIMIT_COLOR
                } else {
                    chart::SLO_COLOR
                }
                .into(),
                label: l.label.clone(),
            })
            .collect()
    };
    let mut ttft = level_chart(r, names, labels, x_label, ("TTFT p95", "ms"), |l| {
        l.ttft_s.as_ref().map(|s| s.p95 * 1e3)
    });
    ttft.hlines = on(Panel::Ttft);
    let mut tps = level_chart(r, names, labels, x_label, ("", "tokens/s"), |l| {
        Some(l.output_tokens_per_s)
    });
    tps.hlines = on(Panel::AggTps);
    tps.rings = r
        .models
        .iter()
        .enumerate()
        .filter_map(|(mi, m)| {
            let k = m.knee.as_ref()?;
            let l = m.levels.get(k.index)?;
            Some(Ring {
                x: k.index as f64,
                y: l.output_tokens_per_s,
                color: chart::color(mi).into(),
            })
        })
        .collect();
    let mut out = vec![
        PanelChart {
            title: "TTFT p95".into(),
            chart: ttft,
        },
        PanelChart {
            title: "aggregate output tokens/s".into(),
            chart: tps,
        },
    ];
    for (title, unit, signal, scale) in [
        (
            "server: GPU utilisation (mean)",
            "%",
            "gpu_utilization",
            100.0,
        ),
        (
            "server: requests waiting (mean)",
            "requests",
            "requests_waiting",
            1.0,
        ),
    ] {
        let c = level_chart(r, names, labels, x_label, ("", unit), |l| {
            l.server.as_ref()?.mean(signal).map(|v| v * scale)
        });
        if c.series.iter().any(|s| !s.points.is_empty()) {
            out.push(PanelChart {
                title: title.into(),
                chart: c,
            });
        }
    }
    out
}

/// Where each legend entry goes in a box `w` wide starting at `top` (left to right, wrapped),
/// and the bottom of the box.
fn legend_layout(entries: &[(Glyph, String)], top: f64, w: f64) -> (Vec<(f64, f64)>, f64) {
    let (x0, row_h) = (GAP + 10.0, 20.0);
    let mut pos = Vec::with_capacity(entries.len());
    let (mut x, mut y) = (x0, top + 18.0);
    for (_, label) in entries {
        // Sample glyph and gap (34 px), then about 7 px per character at 13 px sans-serif.
        let width = 34.0 + 7.0 * label.chars().count() as f64;
        if x + width > w - GAP && x > x0 {
            x = x0;
            y += row_h;
        }
        pos.push((x, y));
        x += width + 16.0;
    }
    (pos, y + 12.0)
}

/// The legend box: one entry per model, the knee, and each threshold line.
fn legend(o: &mut String, entries: &[(Glyph, String)], top: f64) -> f64 {
    let (pos, bottom) = legend_layout(entries, top, DOC_WIDTH);
    let _ = write!(
        o,
        r#"<rect class="legend" x="{GAP}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="{LEGEND_BORDER}"/>"#,
        DOC_WIDTH - 2.0 * GAP,
        bottom - top
    );
    for ((glyph, label), &(x, y)) in entries.iter().zip(&pos) {
        match glyph {
            Glyph::Model(c) => {
                let _ = write!(
                    o,
                    r#"<path d="M{x:.1} {y:.1}h24" stroke="{c}" stroke-width="2"/><circle class="sample" cx="{:.1}" cy="{y:.1}" r="3" fill="{c}"/>"#,
                    x + 12.0
                );
            }
            Glyph::Knee => {
                let _ = write!(
                    o,
                    r##"<circle class="sample" cx="{:.1}" cy="{y:.1}" r="7" fill="none" stroke="#333" stroke-width="2"/>"##,
                    x + 12.0
                );
            }
            Glyph::Line(c) => {
                let _ = write!(
                    o,
                    r#"<path d="M{x:.1} {y:.1}h24" stroke="{c}" stroke-width="2" stroke-dasharray="8 5"/>"#
                );
            }
        }
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            x + 30.0,
            y + 4.0,
            chart::esc(label)
        );
    }
    bottom
}

/// The SVG document: a title, the panels two to a row, and the legend below them all.
///
/// # Errors
/// [`PlotError::Empty`] when no level has a result.
pub fn render_svg(shown: &Shown<'_>, lines: &[RefLine]) -> Result<String, PlotError> {
    let r = shown.report;
    // The levels of the longest sweep label the x axis (every model runs the same levels).
    let labels: Vec<String> = r
        .models
        .iter()
        .max_by_key(|m| m.levels.len())
        .map(|m| m.levels.iter().map(|l| l.key.label()).collect())
        .unwrap_or_default();
    if labels.is_empty() {
        return Err(PlotError::Empty);
    }
    let names = &shown.names;
    let panels = panels(r, names, &labels, lines);
    let mut entries: Vec<(Glyph, String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (Glyph::Model(chart::color(i)), n.clone()))
        .collect();
    let knees: Vec<String> = shown
        .models()
        .map(
            |(m, name)| match m.knee.as_ref().and_then(|k| m.levels.get(k.index)) {
                Some(l) => format!("{name} at {}", l.key.label()),
                None => format!("{name} none"),
            },
        )
        .collect();
    entries.push((Glyph::Knee, format!("knee, circled ({})", knees.join("; "))));
    for l in lines {
        let c = if l.limit {
            chart::LIMIT_COLOR
        } else {
            chart::SLO_COLOR
        };
        entries.push((Glyph::Line(c), l.label.clone()));
    }
    let title = format!(
        "tokenprobe bench: {} ({}), prompt {}, {}; started {}",
        r.target,
        r.api,
        r.prompt,
        loop_words(&r.mode),
        r.started_at
    );
    let rows = panels.len().div_ceil(PER_ROW);
    let row_h = PANEL_TITLE + chart::HEIGHT + GAP;
    let legend_top = TITLE + rows as f64 * row_h;
    let (_, legend_bottom) = legend_layout(&entries, legend_top, DOC_WIDTH);
    let height = legend_bottom + GAP;
    let mut o = String::new();
    let _ = write!(
        o,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{DOC_WIDTH}" height="{height:.0}" viewBox="0 0 {DOC_WIDTH} {height:.0}" font-family="sans-serif" font-size="13"><rect width="100%" height="100%" fill="#fff"/>"##
    );
    let _ = write!(
        o,
        r#"<text class="title" x="{:.1}" y="26" text-anchor="middle" font-size="18">{}</text>"#,
        DOC_WIDTH / 2.0,
        chart::esc(&title)
    );
    for (i, p) in panels.iter().enumerate() {
        let (col, row) = (i % PER_ROW, i / PER_ROW);
        let x = GAP + col as f64 * (chart::WIDTH + GAP);
        let y = TITLE + row as f64 * row_h;
        let _ = write!(
            o,
            r#"<text class="panel-title" x="{:.1}" y="{:.1}" text-anchor="middle" font-size="15">{}</text>"#,
            x + chart::WIDTH / 2.0,
            y + 16.0,
            chart::esc(&p.title)
        );
        // The chart's own <svg>, placed at its slot (its viewBox keeps its coordinates).
        let svg = p.chart.svg().replacen(
            "<svg ",
            &format!(
                r#"<svg class="panel" x="{x:.1}" y="{:.1}" width="{}" height="{}" "#,
                y + PANEL_TITLE,
                chart::WIDTH,
                chart::HEIGHT
            ),
            1,
        );
        o.push_str(&svg);
    }
    legend(&mut o, &entries, legend_top);
    o.push_str("</svg>");
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::tests::synthetic;
    use regex::Regex;

    /// An SVG element's numeric attribute.
    fn attr(el: &str, name: &str) -> f64 {
        let re = Regex::new(&format!(r#"\s{name}="(-?[0-9.]+)""#)).unwrap();
        re.captures(el)
            .and_then(|c| c[1].parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {el}"))
    }

    fn elements<'a>(svg: &'a str, tag: &str) -> Vec<(usize, &'a str)> {
        let re = Regex::new(&format!(r"<{tag}\s[^>]*>")).unwrap();
        re.find_iter(svg).map(|m| (m.start(), m.as_str())).collect()
    }

    fn texts(svg: &str) -> Vec<String> {
        let re = Regex::new(r"<text[^>]*>([^<]*)</text>").unwrap();
        re.captures_iter(svg)
            .map(|c| {
                c[1].trim()
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&amp;", "&")
                    .replace("&#39;", "'")
            })
            .collect()
    }

    /// The text of the `i`-th panel's own `<svg>` element.
    fn panel(svg: &str, i: usize) -> &str {
        let (at, _) = elements(svg, "svg")
            .into_iter()
            .filter(|(_, e)| e.contains(r#"class="panel""#))
            .nth(i)
            .expect("a panel");
        let end = svg[at..].find("</svg>").expect("its end");
        &svg[at..at + end]
    }

    /// The data points of a panel: its `r=3` circles' centres, in drawing order.
    fn points(panel: &str) -> Vec<(f64, f64)> {
        elements(panel, "circle")
            .into_iter()
            .filter(|(_, e)| !e.contains("class=") && attr(e, "r") == 3.0)
            .map(|(_, e)| (attr(e, "cx"), attr(e, "cy")))
            .collect()
    }

    fn criteria(limits: &[&str], slos: &[&str]) -> Criteria {
        Criteria {
            limits: limits.iter().map(|l| l.parse().unwrap()).collect(),
            slos: slos.iter().map(|s| s.parse().unwrap()).collect(),
            ..Criteria::default()
        }
    }

    #[test]
    fn svg_has_both_panels_and_every_model() {
        let svg = render_svg(&Shown::of(&synthetic()), &[]).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        for s in ["TTFT p95", "aggregate output tokens/s", "alpha", "beta"] {
            assert!(svg.contains(s), "no {s:?} in the SVG");
        }
        // 2 models × 3 levels in each panel.
        assert_eq!(points(panel(&svg, 0)).len(), 6);
        assert_eq!(points(panel(&svg, 1)).len(), 6);
    }

    #[test]
    fn the_server_row_appears_only_when_collected() {
        use crate::servermetrics::level::{ServerLevel, SignalStats};
        let plain = render_svg(&Shown::of(&synthetic()), &[]).unwrap();
        assert!(!plain.contains("server: GPU utilisation"));
        let mut r = synthetic();
        let mut s = ServerLevel::default();
        for (n, v) in [("gpu_utilization", 0.42), ("requests_waiting", 3.0)] {
            s.signals.insert(
                n.into(),
                SignalStats {
                    mean: Some(v),
                    max: Some(v),
                    ..SignalStats::default()
                },
            );
        }
        r.models[0].levels[0].server = Some(s);
        let svg = render_svg(&Shown::of(&r), &[]).unwrap();
        for t in [
            "server: GPU utilisation (mean)",
            "server: requests waiting (mean)",
        ] {
            assert!(svg.contains(t), "no {t:?}");
        }
        let root = |s: &str| attr(elements(s, "svg")[0].1, "height");
        assert!(root(&svg) > root(&plain) + 300.0, "a second row");
        // 42% drawn as 42 on the GPU panel.
        assert!(svg.contains(": 42 %</title>"), "GPU in %");
        // A queue and no GPU signal (llama.cpp): no empty GPU panel.
        r.models[0].levels[0]
            .server
            .as_mut()
            .unwrap()
            .signals
            .remove("gpu_utilization");
        let svg = render_svg(&Shown::of(&r), &[]).unwrap();
        assert!(svg.contains("server: requests waiting (mean)"));
        assert!(!svg.contains("server: GPU utilisation"), "an empty panel");
    }

    #[test]
    fn svg_has_a_title_and_a_knee_legend_entry() {
        let svg = render_svg(&Shown::of(&synthetic()), &[]).unwrap();
        let t = texts(&svg);
        assert!(
            t.iter().any(|s| s.starts_with("tokenprobe bench: local (openai-chat), prompt hello, closed loop; started 2025-01-01T00:00:00Z")),
            "no title in {t:?}"
        );
        // synthetic(): alpha's knee is at concurrency 8; beta has none.
        assert!(
            t.iter()
                .any(|s| s == "knee, circled (alpha at 8; beta none)"),
            "no knee entry in {t:?}"
        );
        // The knee is circled on the tokens/s panel, at alpha's third point.
        let tps = panel(&svg, 1);
        let ring = elements(tps, "circle")
            .into_iter()
            .find(|(_, e)| e.contains(r#"class="knee""#))
            .expect("a knee ring")
            .1;
        let p = points(tps)[2];
        assert_eq!((attr(ring, "cx"), attr(ring, "cy")), p);
    }

    #[test]
    fn the_legend_lies_below_every_panel() {
        let svg = render_svg(&Shown::of(&synthetic()), &[]).unwrap();
        let rects: Vec<_> = elements(&svg, "rect")
            .into_iter()
            .filter(|(_, e)| e.contains(&format!(r#"stroke="{LEGEND_BORDER}""#)))
            .collect();
        assert_eq!(rects.len(), 1, "one legend box");
        let top = attr(rects[0].1, "y");
        let panels: Vec<&str> = elements(&svg, "svg")
            .into_iter()
            .filter(|(_, e)| e.contains(r#"class="panel""#))
            .map(|(_, e)| e)
            .collect();
        assert_eq!(panels.len(), 2);
        for p in panels {
            let bottom = attr(p, "y") + attr(p, "height");
            assert!(
                bottom <= top,
                "a panel ends at {bottom}, the legend starts at {top}"
            );
        }
    }

    #[test]
    fn a_long_legend_wraps_inside_the_document() {
        let c = criteria(
            &[
                "ttft_p95<500ms",
                "ttft_p99<900ms",
                "ttft_p50<300ms",
                "agg_tps>150",
                "agg_tps>100",
                "ttft_mean<400ms",
            ],
            &["ttft=300ms"],
        );
        let svg = render_svg(&Shown::of(&synthetic()), &ref_lines(&c)).unwrap();
        let height = attr(elements(&svg, "svg")[0].1, "height");
        let border = format!(r#"stroke="{LEGEND_BORDER}""#);
        let (at, rect) = elements(&svg, "rect")
            .into_iter()
            .find(|(_, e)| e.contains(&border))
            .expect("a legend box");
        let bottom = attr(rect, "y") + attr(rect, "height");
        assert!(
            bottom < height,
            "legend bottom {bottom} past the document's {height}"
        );
        // Every entry's text is inside the box, and inside the document's width.
        let entries: Vec<&str> = elements(&svg[at..], "text")
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        assert_eq!(entries.len(), 2 + 1 + 7, "2 models, the knee, 7 lines");
        let mut rows: Vec<f64> = entries.iter().map(|e| attr(e, "y")).collect();
        rows.dedup();
        assert!(rows.len() >= 2, "the entries wrap into rows: {rows:?}");
        for e in entries {
            let (x, y) = (attr(e, "x"), attr(e, "y"));
            assert!(y > attr(rect, "y") && y < bottom, "{e}");
            assert!(x < DOC_WIDTH, "{e}");
        }
    }

    #[test]
    fn limit_and_slo_lines_are_drawn_at_their_values() {
        let c = criteria(&["ttft_p95<500ms", "agg_tps>150"], &["ttft=300ms"]);
        let lines = ref_lines(&c);
        assert_eq!(lines.len(), 3);
        let svg = render_svg(&Shown::of(&synthetic()), &lines).unwrap();
        let t = texts(&svg);
        for l in ["limit ttft_p95 < 500.0 ms", "limit agg_tps > 150.0 tok/s"] {
            assert!(t.iter().any(|s| s == l), "no {l:?} in {t:?}");
        }
        assert!(t.iter().any(|s| s.starts_with("SLO ttft")), "{t:?}");
        // Each panel's threshold lines: (colour, y).
        let hlines = |p: &str| -> Vec<(String, f64)> {
            let re = Regex::new(r#"class="hline" d="M[0-9.]+ ([0-9.]+)H[0-9.]+" stroke="([^"]+)""#)
                .unwrap();
            re.captures_iter(p)
                .map(|c| (c[2].to_owned(), c[1].parse().unwrap()))
                .collect()
        };
        let (ttft, tps) = (panel(&svg, 0), panel(&svg, 1));
        let on_ttft = hlines(ttft);
        assert_eq!(on_ttft.len(), 2, "the TTFT limit and the SLO: {on_ttft:?}");
        assert_eq!(on_ttft[0].0, chart::LIMIT_COLOR);
        assert_eq!(on_ttft[1].0, chart::SLO_COLOR);
        assert_eq!(hlines(tps).len(), 1, "the tokens/s limit");
        // The TTFT limit (500 ms) lies between alpha's 190 ms (level 4) and 761 ms (level 8)
        // points, and the SLO (300 ms) below it: SVG y grows downwards.
        let p = points(ttft);
        let (p4, p8) = (p[1].1, p[2].1);
        let (limit, slo) = (on_ttft[0].1, on_ttft[1].1);
        assert!(p8 < limit && limit < p4, "{p8} < {limit} < {p4}");
        assert!(limit < slo, "500 ms above 300 ms");
    }

    #[test]
    fn ttft_axis_is_logarithmic_when_values_span_more_than_10x() {
        let linear = render_svg(&Shown::of(&synthetic()), &[]).unwrap();
        assert!(!linear.contains("log scale"), "synthetic spans 190–761 ms");
        // beta 20× slower: 100 ms next to seconds.
        let mut r = synthetic();
        for l in &mut r.models[1].levels {
            if let Some(s) = l.ttft_s.as_mut() {
                s.p95 *= 20.0;
            }
        }
        let svg = render_svg(&Shown::of(&r), &ref_lines(&criteria(&["ttft_p95<2s"], &[]))).unwrap();
        let t = texts(&svg);
        assert!(
            t.iter().any(|s| s.starts_with("ms (log scale")),
            "no log axis label in {t:?}"
        );
        // Equal ratios are equal distances: alpha's level 2→8 against alpha 2 → beta 2.
        let cy: Vec<f64> = points(panel(&svg, 0)).iter().map(|p| p.1).collect();
        let (a, b) = (&r.models[0].levels, &r.models[1].levels);
        let p = |l: &crate::bench::stats::LevelStats| l.ttft_s.as_ref().unwrap().p95;
        let ratio_px = (cy[0] - cy[2]) / (cy[0] - cy[3]);
        let ratio_log = (p(&a[2]) / p(&a[0])).ln() / (p(&b[0]) / p(&a[0])).ln();
        assert!(
            (ratio_px - ratio_log).abs() < 0.02,
            "pixel ratio {ratio_px} vs log ratio {ratio_log}"
        );
    }
}
