//! The SVG charts of the HTML report (pure, hand-written SVG): line charts against the level
//! (one slot per level) or against a number, scatter plots, threshold lines, knee rings and a
//! legend that sits outside the plotting area (below it, as HTML), so it never covers a point.
//!
//! Each chart is a self-contained `<svg>` element with a `viewBox` (it scales with the page),
//! its axes labelled by `<text class="x-label">` and `<text class="y-label">` (the browser test
//! reads them back), and every line point carrying a `<title>` with its values (shown on hover).
//! A y axis turns logarithmic, said on its label, when the values drawn span more than
//! [`LOG_SPAN`], so a 100 ms model is not flattened to 0 beside a 4.5 s one. The page and the
//! `--plot` SVG (`render::plot`) draw with this one engine.

use crate::bench::report::LoadKind;
use std::fmt::Write as _;

/// Values spanning more than this factor get a logarithmic y axis.
pub const LOG_SPAN: f64 = 10.0;

/// Width of a chart's coordinate system (it is scaled to the page).
pub const WIDTH: f64 = 600.0;
/// Height of a chart's coordinate system.
pub const HEIGHT: f64 = 330.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 18.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 50.0;

/// Series colours (colour-blind friendly, Okabe–Ito order).
pub const PALETTE: [&str; 8] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000",
];
/// Limit lines.
pub const LIMIT_COLOR: &str = "#d62728";
/// SLO lines.
pub const SLO_COLOR: &str = "#ff7f0e";

/// The colour of the `i`-th series.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// A point's marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// A filled circle.
    Circle,
    /// A filled square.
    Square,
    /// A filled triangle.
    Triangle,
    /// A filled diamond.
    Diamond,
    /// An ×.
    Cross,
    /// A +.
    Plus,
}

impl Marker {
    /// The markers in the order they are handed out.
    pub const ALL: [Marker; 6] = [
        Marker::Circle,
        Marker::Triangle,
        Marker::Square,
        Marker::Diamond,
        Marker::Cross,
        Marker::Plus,
    ];

    fn svg(self, x: f64, y: f64, r: f64, color: &str) -> String {
        match self {
            Marker::Circle => {
                format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r}" fill="{color}"/>"#)
            }
            Marker::Square => format!(
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                x - r,
                y - r,
                2.0 * r,
                2.0 * r
            ),
            Marker::Triangle => format!(
                r#"<path d="M{x:.1} {:.1}L{:.1} {:.1}L{:.1} {:.1}Z" fill="{color}"/>"#,
                y - r * 1.2,
                x + r * 1.1,
                y + r * 0.8,
                x - r * 1.1,
                y + r * 0.8
            ),
            Marker::Diamond => format!(
                r#"<path d="M{x:.1} {:.1}L{:.1} {y:.1}L{x:.1} {:.1}L{:.1} {y:.1}Z" fill="{color}"/>"#,
                y - r * 1.3,
                x + r * 1.3,
                y + r * 1.3,
                x - r * 1.3
            ),
            Marker::Cross => format!(
                r#"<path d="M{:.1} {:.1}L{:.1} {:.1}M{:.1} {:.1}L{:.1} {:.1}" stroke="{color}" stroke-width="2"/>"#,
                x - r,
                y - r,
                x + r,
                y + r,
                x - r,
                y + r,
                x + r,
                y - r
            ),
            Marker::Plus => format!(
                r#"<path d="M{:.1} {y:.1}L{:.1} {y:.1}M{x:.1} {:.1}L{x:.1} {:.1}" stroke="{color}" stroke-width="2"/>"#,
                x - r * 1.2,
                x + r * 1.2,
                y - r * 1.2,
                y + r * 1.2
            ),
        }
    }
}

/// One point: its coordinates and its hover text.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// x (a level index on a level axis).
    pub x: f64,
    /// y.
    pub y: f64,
    /// Hover text (empty: none, as for the scatter's many points).
    pub title: String,
    /// A short label drawn beside the point (empty: none), e.g. its level.
    pub tag: String,
}

/// A named set of points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its legend text.
    pub name: String,
    /// Its colour.
    pub color: String,
    /// Its marker.
    pub marker: Marker,
    /// Join the points with a line.
    pub line: bool,
    /// Dashed line (a baseline's values).
    pub dashed: bool,
    /// Marker radius.
    pub radius: f64,
    /// The points.
    pub points: Vec<Point>,
}

/// A horizontal threshold line.
#[derive(Debug, Clone, PartialEq)]
pub struct HLine {
    /// Its height.
    pub y: f64,
    /// Its colour.
    pub color: String,
    /// Its legend text.
    pub label: String,
}

/// A ring around a point (the knee).
#[derive(Debug, Clone, PartialEq)]
pub struct Ring {
    /// x.
    pub x: f64,
    /// y.
    pub y: f64,
    /// Its colour.
    pub color: String,
}

/// The x axis: one slot per level, or a number.
#[derive(Debug, Clone, PartialEq)]
pub enum XAxis {
    /// Slot `i` is labelled `labels[i]`.
    Levels(Vec<String>),
    /// A linear axis from 0.
    Numeric,
}

/// A chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// The x axis.
    pub x: XAxis,
    /// The x axis label.
    pub x_label: String,
    /// The y axis label (" (log scale)" is added when it is).
    pub y_label: String,
    /// The series.
    pub series: Vec<Series>,
    /// Threshold lines.
    pub hlines: Vec<HLine>,
    /// Knee rings, and their legend text.
    pub rings: Vec<Ring>,
    /// The legend entry of the rings (when there are rings).
    pub ring_label: String,
}

/// A scale from data to pixels.
#[derive(Debug, Clone, Copy)]
struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
    px_lo: f64,
    px_hi: f64,
}

impl Scale {
    fn at(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        self.px_lo + f * (self.px_hi - self.px_lo)
    }

    /// Tick values: whole decades on a log scale, 1-2-5 steps on a linear one.
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.lo.log10().round() as i32,
                self.hi.log10().round() as i32,
            );
            // At most about a dozen decades labelled, however wide the range.
            let every = usize::try_from((b - a) / 12 + 1).unwrap_or(1);
            return (a..=b).step_by(every).map(|e| 10f64.powi(e)).collect();
        }
        let step = nice_step((self.hi - self.lo) / 5.0);
        let mut out = Vec::new();
        let mut v = (self.lo / step).ceil() * step;
        while v <= self.hi + step * 1e-9 && out.len() < 50 {
            out.push(v);
            v += step;
        }
        out
    }
}

/// The 1, 2 or 5 × 10ⁿ step nearest above `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let f = raw / p;
    p * if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// A tick label: `100`, `2.5`, `0.05`, `1e-5` (no trailing zeros).
pub fn tick_label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e7).contains(&a) {
        return format!("{v:e}");
    }
    let s = if a >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// The axis of charts against the level: `concurrency`, or in open loop `arrival rate
/// (requests/s)`.
pub fn load_axis(kind: LoadKind) -> &'static str {
    match kind {
        LoadKind::Closed => "concurrency",
        LoadKind::Open => "arrival rate (requests/s)",
    }
}

/// Escapes text for HTML and SVG (element text and attribute values).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

impl Chart {
    /// The dash pattern of threshold line `i`: lines at the same value (a limit and an SLO of
    /// 500 ms) take turns along it, so each stays visible; a line alone is dashed `8 5`.
    fn dash_of(&self, i: usize) -> (String, f64) {
        let y = self.hlines[i].y;
        let same = |l: &HLine| (l.y - y).abs() <= 1e-9 * y.abs().max(1.0);
        let n = self.hlines.iter().filter(|l| same(l)).count();
        if n < 2 {
            return ("8 5".into(), 0.0);
        }
        let k = self.hlines[..i].iter().filter(|l| same(l)).count();
        (format!("8 {}", 8 * (n - 1)), 8.0 * k as f64)
    }

    /// Every y value drawn (points and lines), finite ones only.
    fn ys(&self) -> impl Iterator<Item = f64> + '_ {
        self.series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.y))
            .chain(self.hlines.iter().map(|l| l.y))
            .filter(|v| v.is_finite())
    }

    /// `Some((lo, hi))`, whole decades, when the positive values span more than [`LOG_SPAN`].
    pub fn log_range(&self) -> Option<(f64, f64)> {
        let (lo, hi) = self
            .ys()
            .filter(|v| *v > 0.0)
            .fold((f64::INFINITY, 0.0_f64), |(a, b), v| (a.min(v), b.max(v)));
        (lo.is_finite() && hi / lo > LOG_SPAN).then(|| {
            (
                10f64.powf(lo.log10().floor()),
                10f64.powf(hi.log10().ceil()),
            )
        })
    }

    fn y_scale(&self) -> Scale {
        let (lo, hi, log) = match self.log_range() {
            Some((lo, hi)) => (lo, hi, true),
            None => {
                let m = self.ys().fold(0.0, f64::max);
                let hi = if m > 0.0 {
                    (m * 1.1).min(f64::MAX)
                } else {
                    1.0
                };
                (0.0, hi, false)
            }
        };
        Scale {
            lo,
            hi,
            log,
            px_lo: HEIGHT - BOTTOM,
            px_hi: TOP,
        }
    }

    fn x_scale(&self) -> Scale {
        let (lo, hi) = match &self.x {
            XAxis::Levels(l) => (-0.5, l.len().max(1) as f64 - 0.5),
            XAxis::Numeric => {
                let m = self
                    .series
                    .iter()
                    .flat_map(|s| s.points.iter().map(|p| p.x))
                    .filter(|v| v.is_finite())
                    .fold(0.0, f64::max);
                (0.0, if m > 0.0 { m * 1.05 } else { 1.0 })
            }
        };
        Scale {
            lo,
            hi,
            log: false,
            px_lo: LEFT,
            px_hi: WIDTH - RIGHT,
        }
    }

    /// The y axis label as drawn.
    pub fn y_label_drawn(&self) -> String {
        if self.log_range().is_some() {
            format!("{} (log scale)", self.y_label)
        } else {
            self.y_label.clone()
        }
    }

    /// The `<svg>` element.
    pub fn svg(&self) -> String {
        let (xs, ys) = (self.x_scale(), self.y_scale());
        let mut o = String::new();
        let _ = write!(
            o,
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" font-family="sans-serif" font-size="12">"#
        );
        let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
        let _ = write!(
            o,
            r##"<rect class="area" x="{x0}" y="{y1}" width="{:.1}" height="{:.1}" fill="#fff" stroke="#999"/>"##,
            x1 - x0,
            y0 - y1
        );
        // Grid and y ticks.
        for t in ys.ticks() {
            let y = ys.at(t);
            let _ = write!(
                o,
                r##"<path d="M{x0} {y:.1}H{x1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                x0 - 6.0,
                y + 4.0,
                tick_label(t)
            );
        }
        // x ticks.
        match &self.x {
            XAxis::Levels(labels) => {
                for (i, l) in labels.iter().enumerate() {
                    let x = xs.at(i as f64);
                    let _ = write!(
                        o,
                        r##"<path d="M{x:.1} {y0}v5" stroke="#999"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                        y0 + 18.0,
                        esc(l)
                    );
                }
            }
            XAxis::Numeric => {
                for t in xs.ticks() {
                    let x = xs.at(t);
                    let _ = write!(
                        o,
                        r##"<path d="M{x:.1} {y0}v5" stroke="#999"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                        y0 + 18.0,
                        tick_label(t)
                    );
                }
            }
        }
        let _ = write!(
            o,
            r#"<text class="x-label" x="{:.1}" y="{:.1}" text-anchor="middle" font-size="13">{}</text>"#,
            (x0 + x1) / 2.0,
            HEIGHT - 8.0,
            esc(&self.x_label)
        );
        let _ = write!(
            o,
            r#"<text class="y-label" transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle" font-size="13">{}</text>"#,
            (y0 + y1) / 2.0,
            esc(&self.y_label_drawn())
        );
        for (i, l) in self.hlines.iter().enumerate() {
            let y = ys.at(l.y);
            if y.is_finite() {
                let (dash, offset) = self.dash_of(i);
                let _ = write!(
                    o,
                    r#"<path class="hline" d="M{x0} {y:.1}H{x1}" stroke="{}" stroke-width="2" stroke-dasharray="{dash}" stroke-dashoffset="{offset}"><title>{}</title></path>"#,
                    l.color,
                    esc(&l.label)
                );
            }
        }
        let drawable = |p: &Point| p.x.is_finite() && p.y.is_finite() && (!ys.log || p.y > 0.0);
        for s in &self.series {
            let pts: Vec<&Point> = s.points.iter().filter(|p| drawable(p)).collect();
            if s.line && pts.len() > 1 {
                let d: Vec<String> = pts
                    .iter()
                    .map(|p| format!("{:.1},{:.1}", xs.at(p.x), ys.at(p.y)))
                    .collect();
                let _ = write!(
                    o,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>"#,
                    d.join(" "),
                    s.color,
                    if s.dashed {
                        r#" stroke-dasharray="5 4""#
                    } else {
                        ""
                    }
                );
            }
            let _ = write!(o, r#"<g class="points">"#);
            for p in pts {
                let m = s.marker.svg(xs.at(p.x), ys.at(p.y), s.radius, &s.color);
                if p.title.is_empty() {
                    o.push_str(&m);
                } else {
                    let _ = write!(o, "<g><title>{}</title>{m}</g>", esc(&p.title));
                }
                if !p.tag.is_empty() {
                    let _ = write!(
                        o,
                        r##"<text class="tag" x="{:.1}" y="{:.1}" font-size="10" fill="#444">{}</text>"##,
                        xs.at(p.x) + 6.0,
                        ys.at(p.y) - 6.0,
                        esc(&p.tag)
                    );
                }
            }
            o.push_str("</g>");
        }
        for r in &self.rings {
            if r.x.is_finite() && r.y.is_finite() && (!ys.log || r.y > 0.0) {
                let _ = write!(
                    o,
                    r#"<circle class="knee" cx="{:.1}" cy="{:.1}" r="9" fill="none" stroke="{}" stroke-width="2.5"/>"#,
                    xs.at(r.x),
                    ys.at(r.y),
                    r.color
                );
            }
        }
        o.push_str("</svg>");
        o
    }

    /// The legend, as an HTML list below the chart: one entry per series, the rings, each line.
    pub fn legend(&self) -> String {
        let mut o = String::from(r#"<ul class="legend">"#);
        let swatch = |inner: String| {
            format!(
                r#"<svg viewBox="0 0 28 14" width="28" height="14" aria-hidden="true">{inner}</svg>"#
            )
        };
        for s in &self.series {
            let line = if s.line {
                format!(
                    r#"<path d="M0 7H28" stroke="{}" stroke-width="2"{}/>"#,
                    s.color,
                    if s.dashed {
                        r#" stroke-dasharray="5 4""#
                    } else {
                        ""
                    }
                )
            } else {
                String::new()
            };
            let _ = write!(
                o,
                "<li>{}{}</li>",
                swatch(format!(
                    "{line}{}",
                    s.marker.svg(14.0, 7.0, s.radius.max(3.0), &s.color)
                )),
                esc(&s.name)
            );
        }
        if !self.rings.is_empty() {
            let _ = write!(
                o,
                r#"<li>{}{}</li>"#,
                swatch(r##"<circle cx="14" cy="7" r="5.5" fill="none" stroke="#333" stroke-width="2"/>"##.into()),
                esc(&self.ring_label)
            );
        }
        for l in &self.hlines {
            let _ = write!(
                o,
                r#"<li>{}{}</li>"#,
                swatch(format!(
                    r#"<path d="M0 7H28" stroke="{}" stroke-width="2" stroke-dasharray="8 5"/>"#,
                    l.color
                )),
                esc(&l.label)
            );
        }
        o.push_str("</ul>");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(ys: &[f64]) -> Chart {
        Chart {
            x: XAxis::Levels(ys.iter().enumerate().map(|(i, _)| i.to_string()).collect()),
            x_label: "concurrency".into(),
            y_label: "TTFT (ms)".into(),
            series: vec![Series {
                name: "m".into(),
                color: color(0).into(),
                marker: Marker::Circle,
                line: true,
                dashed: false,
                radius: 3.5,
                points: ys
                    .iter()
                    .enumerate()
                    .map(|(i, y)| Point {
                        x: i as f64,
                        y: *y,
                        title: format!("p{i}"),
                        tag: String::new(),
                    })
                    .collect(),
            }],
            hlines: vec![],
            rings: vec![],
            ring_label: String::new(),
        }
    }

    fn cys(svg: &str) -> Vec<f64> {
        let re = regex::Regex::new(r#"<circle cx="[0-9.]+" cy="([0-9.]+)""#).unwrap();
        re.captures_iter(svg)
            .map(|c| c[1].parse().unwrap())
            .collect()
    }

    #[test]
    fn nice_steps_and_labels() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(34.0), 50.0);
        assert_eq!(nice_step(0.0031), 0.005);
        assert_eq!(tick_label(100.0), "100");
        assert_eq!(tick_label(2.5), "2.5");
        assert_eq!(tick_label(0.05), "0.05");
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(1e-5), "1e-5");
    }

    #[test]
    fn linear_axis_maps_values_in_proportion_and_labels_its_axes() {
        let c = chart(&[100.0, 200.0, 400.0]);
        assert!(c.log_range().is_none());
        let svg = c.svg();
        let y = cys(&svg);
        assert_eq!(y.len(), 3);
        let base = HEIGHT - BOTTOM;
        // Distances from the x axis are proportional to the values (0 at the axis).
        let r = (base - y[2]) / (base - y[0]);
        assert!((r - 4.0).abs() < 0.02, "{r}");
        assert!(svg.contains(r#"class="x-label""#) && svg.contains(">concurrency</text>"));
        assert!(svg.contains(">TTFT (ms)</text>"));
        assert!(svg.contains("<title>p1</title>"));
    }

    #[test]
    fn log_axis_past_ten_times_with_equal_ratios_at_equal_distances() {
        let c = chart(&[100.0, 1000.0, 10000.0]);
        assert_eq!(c.log_range(), Some((100.0, 10000.0)));
        let svg = c.svg();
        assert!(svg.contains(">TTFT (ms) (log scale)</text>"), "{svg}");
        let y = cys(&svg);
        assert!(((y[0] - y[1]) - (y[1] - y[2])).abs() < 0.2, "{y:?}");
        // Ticks are the decades.
        for t in [">100</text>", ">1000</text>", ">10000</text>"] {
            assert!(svg.contains(t), "no tick {t}");
        }
        // A threshold line counts towards the span.
        let mut c = chart(&[100.0, 200.0]);
        assert!(c.log_range().is_none());
        c.hlines.push(HLine {
            y: 2000.0,
            color: LIMIT_COLOR.into(),
            label: "limit".into(),
        });
        assert_eq!(c.log_range(), Some((100.0, 10000.0)));
    }

    #[test]
    fn threshold_lines_at_one_value_take_turns_so_both_show() {
        let mut c = chart(&[100.0, 200.0]);
        for (color, label) in [
            (LIMIT_COLOR, "limit ttft_p95 < 500 ms"),
            (SLO_COLOR, "SLO ttft<=500 ms"),
        ] {
            c.hlines.push(HLine {
                y: 500.0,
                color: color.into(),
                label: label.into(),
            });
        }
        c.hlines.push(HLine {
            y: 150.0,
            color: LIMIT_COLOR.into(),
            label: "alone".into(),
        });
        let svg = c.svg();
        let lines: Vec<&str> = svg.split(r#"class="hline""#).skip(1).collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].contains(r#"stroke-dasharray="8 8" stroke-dashoffset="0""#),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].contains(r#"stroke-dasharray="8 8" stroke-dashoffset="8""#),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].contains(r#"stroke-dasharray="8 5" stroke-dashoffset="0""#),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn text_is_escaped() {
        let mut c = chart(&[1.0]);
        c.series[0].name = "<script>alert(1)</script>".into();
        c.x_label = "a & b".into();
        let (svg, legend) = (c.svg(), c.legend());
        assert!(!legend.contains("<script>") && legend.contains("&lt;script&gt;"));
        assert!(svg.contains("a &amp; b"));
    }

    #[test]
    fn legend_names_series_rings_and_lines() {
        let mut c = chart(&[1.0, 2.0]);
        c.rings.push(Ring {
            x: 1.0,
            y: 2.0,
            color: color(0).into(),
        });
        c.ring_label = "knee: m at 1".into();
        c.hlines.push(HLine {
            y: 1.5,
            color: LIMIT_COLOR.into(),
            label: "limit ttft_p95 < 1.5 ms".into(),
        });
        let l = c.legend();
        assert_eq!(l.matches("<li>").count(), 3);
        assert!(l.contains("knee: m at 1") && l.contains("limit ttft_p95 &lt; 1.5 ms"));
        let svg = c.svg();
        assert!(svg.contains(r#"class="knee""#) && svg.contains(r#"class="hline""#));
    }
}
