//! The page's plots: TTFT percentiles and tokens/s against the load (the knee circled, the
//! thresholds and a baseline drawn), the throughput-latency curve, every request over the run,
//! and the server's signals, each a [`chart::Chart`].

use super::{Unit, num};
use crate::bench::criteria::{Base, Metric, Stat};
use crate::bench::report::{ModelReport, Report};
use crate::bench::stats::LevelStats;
use crate::render::chart::{self, Chart, HLine, Marker, Point, Ring, Series, XAxis};
use std::collections::BTreeMap;

/// Every level any model ran, in load order (merged runs may differ in their levels).
pub(super) fn level_labels(r: &Report) -> Vec<String> {
    let mut keys: Vec<crate::bench::stats::LevelKey> = Vec::new();
    for l in r.models.iter().flat_map(|m| m.levels.iter()) {
        if !keys.iter().any(|k| k.label() == l.key.label()) {
            keys.push(l.key);
        }
    }
    keys.sort_by(|a, b| a.x().total_cmp(&b.x()));
    keys.iter()
        .map(crate::bench::stats::LevelKey::label)
        .collect()
}

/// The slot of a level on the level axis.
pub(super) fn slot(labels: &[String], l: &LevelStats) -> f64 {
    let lab = l.key.label();
    labels.iter().position(|x| *x == lab).unwrap_or(0) as f64
}

/// Threshold lines: `(metric, value in the page's unit, label, limit?)`, from the criteria the
/// report records (exact), else from its texts.
pub(super) fn thresholds(r: &Report) -> Vec<(String, f64, String, bool)> {
    use crate::bench::criteria::{Base, Limit, Slo};
    let Some(rec) = &r.criteria else {
        return thresholds_from_text(r);
    };
    let mut out = Vec::new();
    for l in rec.limits.iter().filter_map(|t| t.parse::<Limit>().ok()) {
        let v = match l.metric.base {
            Base::Ttft => l.value * 1e3,
            Base::AggTps => l.value,
            _ => continue,
        };
        out.push((l.metric.to_string(), v, format!("limit {l}"), true));
    }
    for s in rec.slo.iter().filter_map(|t| t.parse::<Slo>().ok()) {
        if s.base == Base::Ttft {
            out.push((
                "ttft".into(),
                s.value * 1e3,
                format!("SLO {s} (per request)"),
                false,
            ));
        }
    }
    out
}

/// Threshold lines of a report without recorded criteria: its limits (`selection.limits`, as
/// `ttft_p95 < 500.0 ms`) and SLOs (`slo`, as `ttft<=300.0 ms`).
pub(super) fn thresholds_from_text(r: &Report) -> Vec<(String, f64, String, bool)> {
    // A shown value back to a number: `500.0 ms` → 500 (ms), `2.00 s` → 2000 (ms), `150.0 tok/s`.
    fn value(num: &str, unit: Option<&str>) -> Option<f64> {
        let v: f64 = num.parse().ok()?;
        Some(match unit {
            Some("s") => v * 1e3,
            _ => v,
        })
    }
    let mut out = Vec::new();
    for l in r.selection.iter().flat_map(|s| s.limits.iter()) {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let [metric, _op, n, rest @ ..] = w.as_slice()
            && let Some(v) = value(n, rest.first().copied())
        {
            out.push((metric.to_string(), v, format!("limit {l}"), true));
        }
    }
    for s in &r.slo {
        if let Some(rest) = s.strip_prefix("ttft<=") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            if let [n, unit @ ..] = w.as_slice()
                && let Some(v) = value(n, unit.first().copied())
            {
                out.push(("ttft".into(), v, format!("SLO {s} (per request)"), false));
            }
        }
    }
    out
}

pub(super) fn hline(t: &(String, f64, String, bool)) -> HLine {
    HLine {
        y: t.1,
        color: if t.3 {
            chart::LIMIT_COLOR
        } else {
            chart::SLO_COLOR
        }
        .into(),
        label: t.2.clone(),
    }
}

/// Baseline values of one metric per (model, level label), from `comparison.values`.
pub(super) fn baseline_values(r: &Report, metric: Metric) -> BTreeMap<(String, String), f64> {
    r.comparison
        .iter()
        .flat_map(|c| &c.values)
        .filter(|v| v.metric == metric)
        .map(|v| ((v.model.clone(), v.level.to_string()), v.baseline))
        .collect()
}

pub(super) fn pt(x: f64, y: f64, title: String) -> Point {
    Point {
        x,
        y,
        title,
        tag: String::new(),
    }
}

/// The baseline's series of `metric` (dashed, the model's colour) on the level axis.
pub(super) fn baseline_series(
    r: &Report,
    labels: &[String],
    metric: Metric,
    scale: f64,
) -> Vec<Series> {
    let b = baseline_values(r, metric);
    if b.is_empty() {
        return Vec::new();
    }
    r.models
        .iter()
        .enumerate()
        .filter_map(|(mi, m)| {
            let points: Vec<Point> = m
                .levels
                .iter()
                .filter_map(|l| {
                    let v = *b.get(&(m.model.clone(), l.key.label()))?;
                    Some(pt(
                        slot(labels, l),
                        v * scale,
                        format!(
                            "{} at {}: baseline {metric} {}",
                            m.model,
                            l.key.label(),
                            num(v * scale)
                        ),
                    ))
                })
                .collect();
            (!points.is_empty()).then(|| Series {
                name: format!("{} baseline {metric}", m.model),
                color: chart::color(mi).into(),
                marker: Marker::Square,
                line: true,
                dashed: true,
                radius: 3.0,
                points,
            })
        })
        .collect()
}

/// The knee rings of a chart against the level, and their legend entry.
pub(super) fn knee_rings(
    r: &Report,
    labels: &[String],
    y: impl Fn(&LevelStats) -> Option<f64>,
) -> (Vec<Ring>, String) {
    let mut rings = Vec::new();
    let mut names = Vec::new();
    for (mi, m) in r.models.iter().enumerate() {
        match m.knee.as_ref().and_then(|k| m.levels.get(k.index)) {
            Some(l) => {
                names.push(format!("{} at {}", m.model, l.key.label()));
                if let Some(v) = y(l) {
                    rings.push(Ring {
                        x: slot(labels, l),
                        y: v,
                        color: chart::color(mi).into(),
                    });
                }
            }
            None => names.push(format!("{} none", m.model)),
        }
    }
    (rings, format!("knee, circled: {}", names.join("; ")))
}

/// Every chart: `(id, caption, chart)`.
pub(super) fn charts(r: &Report, axis: &str) -> Vec<(String, String, Chart)> {
    let labels = level_labels(r);
    let lines = thresholds(r);
    let mut out = Vec::new();
    // TTFT p50/p95/p99 against the level.
    let mut series = Vec::new();
    for (mi, m) in r.models.iter().enumerate() {
        for (name, marker, f) in [
            (
                "p50",
                Marker::Circle,
                (|s| s.p50) as fn(&crate::bench::stats::Summary) -> f64,
            ),
            ("p95", Marker::Triangle, |s| s.p95),
            ("p99", Marker::Square, |s| s.p99),
        ] {
            series.push(Series {
                name: format!("{} TTFT {name}", m.model),
                color: chart::color(mi).into(),
                marker,
                line: true,
                dashed: false,
                radius: 3.5,
                points: m
                    .levels
                    .iter()
                    .filter_map(|l| {
                        let v = f(l.ttft_s.as_ref()?) * 1e3;
                        Some(pt(
                            slot(&labels, l),
                            v,
                            format!(
                                "{} at {}: TTFT {name} {} ms",
                                m.model,
                                l.key.label(),
                                num(v)
                            ),
                        ))
                    })
                    .collect(),
            });
        }
    }
    let ttft_p95 = Metric::of(Base::Ttft, Stat::P95);
    series.extend(baseline_series(r, &labels, ttft_p95, 1e3));
    out.push((
        "plot-ttft".into(),
        "TTFT p50 / p95 / p99 against the load".into(),
        Chart {
            x: XAxis::Levels(labels.clone()),
            x_label: axis.into(),
            y_label: "TTFT (ms)".into(),
            series,
            hlines: lines
                .iter()
                .filter(|t| t.0.starts_with("ttft"))
                .map(hline)
                .collect(),
            rings: Vec::new(),
            ring_label: String::new(),
        },
    ));
    out.push(tps_chart(r, (&labels, axis), &lines));
    out.push(curve_chart(r, &lines));
    out.extend(super::efficiency::frontier_chart(r));
    for (mi, m) in r.models.iter().enumerate() {
        if let Some(c) = scatter(m) {
            out.push((
                format!("plot-scatter-{mi}"),
                format!("{}: every request's TTFT over the run", m.model),
                c,
            ));
        }
    }
    out.extend(server_charts(r, (&labels, axis)));
    out
}

/// Aggregate tokens/s against the level, the knee circled and named in the legend.
pub(super) fn tps_chart(
    r: &Report,
    (labels, axis): (&[String], &str),
    lines: &[(String, f64, String, bool)],
) -> (String, String, Chart) {
    let mut series: Vec<Series> = r
        .models
        .iter()
        .enumerate()
        .map(|(mi, m)| Series {
            name: m.model.clone(),
            color: chart::color(mi).into(),
            marker: Marker::Circle,
            line: true,
            dashed: false,
            radius: 3.5,
            points: m
                .levels
                .iter()
                .map(|l| {
                    pt(
                        slot(labels, l),
                        l.output_tokens_per_s,
                        format!(
                            "{} at {}: {} tokens/s",
                            m.model,
                            l.key.label(),
                            num(l.output_tokens_per_s)
                        ),
                    )
                })
                .collect(),
        })
        .collect();
    series.extend(baseline_series(r, labels, Metric::level(Base::AggTps), 1.0));
    let (rings, ring_label) = knee_rings(r, labels, |l| Some(l.output_tokens_per_s));
    (
        "plot-tps".into(),
        "Aggregate output tokens/s against the load".into(),
        Chart {
            x: XAxis::Levels(labels.to_vec()),
            x_label: axis.into(),
            y_label: "aggregate output tokens/s".into(),
            series,
            hlines: lines
                .iter()
                .filter(|t| t.0 == "agg_tps")
                .map(hline)
                .collect(),
            rings,
            ring_label,
        },
    )
}

/// The throughput-latency curve: TTFT p95 against aggregate tokens/s, one line per model.
pub(super) fn curve_chart(
    r: &Report,
    lines: &[(String, f64, String, bool)],
) -> (String, String, Chart) {
    let series = r
        .models
        .iter()
        .enumerate()
        .map(|(mi, m)| Series {
            name: m.model.clone(),
            color: chart::color(mi).into(),
            marker: Marker::Circle,
            line: true,
            dashed: false,
            radius: 3.5,
            points: m
                .levels
                .iter()
                .filter_map(|l| {
                    let y = l.ttft_s.as_ref()?.p95 * 1e3;
                    Some(Point {
                        x: l.output_tokens_per_s,
                        y,
                        title: format!(
                            "{} at {}: {} tokens/s, TTFT p95 {} ms",
                            m.model,
                            l.key.label(),
                            num(l.output_tokens_per_s),
                            num(y)
                        ),
                        tag: l.key.label(),
                    })
                })
                .collect(),
        })
        .collect();
    (
        "plot-curve".into(),
        "TTFT p95 against aggregate tokens/s (each point a level)".into(),
        Chart {
            x: XAxis::Numeric,
            x_label: "aggregate output tokens/s".into(),
            y_label: "TTFT p95 (ms)".into(),
            series,
            hlines: lines
                .iter()
                .filter(|t| t.0 == "ttft_p95" || t.0 == "ttft")
                .map(hline)
                .collect(),
            rings: Vec::new(),
            ring_label: String::new(),
        },
    )
}

/// Per-request TTFT (failures: the time to the failure) over the run, coloured by level, a
/// marker per error type. The levels are placed end to end (warm-ups left out).
pub(super) fn scatter(m: &ModelReport) -> Option<Chart> {
    let mut offset = 0.0;
    let mut series = Vec::new();
    let mut errors: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    let mut any = false;
    for (li, l) in m.levels.iter().enumerate() {
        let Some(samples) = &l.samples else {
            offset += l.wall_s;
            continue;
        };
        any = true;
        let ok: Vec<Point> = samples
            .iter()
            .filter_map(|s| Some(pt(offset + s.sent_s, s.ttft_s? * 1e3, String::new())))
            .collect();
        for s in samples {
            if let (Some(e), Some(f)) = (&s.error_type, s.failure_s) {
                errors.entry(e.as_str().to_owned()).or_default().push(pt(
                    offset + s.sent_s,
                    f * 1e3,
                    format!("{e} at {}", l.key.label()),
                ));
            }
        }
        series.push(Series {
            name: if l.key.rate.is_some() {
                l.key.label()
            } else {
                format!("concurrency {}", l.key.label())
            },
            color: chart::color(li).into(),
            marker: Marker::Circle,
            line: false,
            dashed: false,
            radius: 2.0,
            points: ok,
        });
        offset += l.wall_s;
    }
    if !any {
        return None;
    }
    for (i, (e, points)) in errors.into_iter().enumerate() {
        series.push(Series {
            name: format!("{e} ({}; at the failure)", points.len()),
            color: "#b00000".into(),
            marker: Marker::ALL[(i + 4) % Marker::ALL.len()],
            line: false,
            dashed: false,
            radius: 3.5,
            points,
        });
    }
    Some(Chart {
        x: XAxis::Numeric,
        x_label: "send time, s into the measured run (levels end to end)".into(),
        y_label: "TTFT (ms)".into(),
        series,
        hlines: Vec::new(),
        rings: Vec::new(),
        ring_label: String::new(),
    })
}

/// Server signal names (those with a mean in some level's `server` block), in first-seen order.
pub(super) fn server_signals(r: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in r.models.iter().flat_map(|m| &m.levels) {
        for (k, v) in l.server.iter().flat_map(|s| &s.signals) {
            if v.mean.is_some() && !out.contains(k) {
                out.push(k.clone());
            }
        }
    }
    out
}

/// How the page names and shows a server signal: a name a person reads, ratios in %, seconds in
/// ms (`gpu_utilization` 0.42 → "GPU utilisation (%)" 42).
pub(super) fn signal_display(sig: &str) -> (String, Unit) {
    const NAMES: [(&str, &str); 13] = [
        ("gpu_utilization", "GPU utilisation"),
        ("gpu_memory_used_ratio", "GPU memory used"),
        ("gpu_power_watts", "GPU power (W)"),
        ("kv_cache_usage_ratio", "KV cache used"),
        ("requests_running", "requests running"),
        ("requests_waiting", "requests waiting"),
        ("prompt_tokens_per_s", "server prompt tokens/s"),
        ("generation_tokens_per_s", "server generated tokens/s"),
        ("prompt_cache_hit_ratio", "prompt cache hits"),
        ("cpu_utilization", "host CPU"),
        ("memory_used_ratio", "host memory used"),
        ("server_client_tokens_ratio", "server ÷ client tokens/s"),
        ("client_server_ttft_gap_s", "client − server TTFT"),
    ];
    let unit = if sig.ends_with("_ratio") || sig.ends_with("_utilization") {
        Unit::Pct
    } else if sig.ends_with("_s") && !sig.ends_with("_per_s") {
        Unit::Ms
    } else {
        Unit::Plain
    };
    let name = NAMES
        .iter()
        .find(|(k, _)| *k == sig)
        .map_or_else(|| sig.replace('_', " "), |(_, n)| (*n).to_owned());
    let suffix = match unit {
        Unit::Pct => " (%)",
        Unit::Ms => " (ms)",
        Unit::Plain => "",
    };
    (format!("{name}{suffix}"), unit)
}

/// One chart per server signal: its mean (solid) and max (dashed) per model against the level.
pub(super) fn server_charts(
    r: &Report,
    (labels, axis): (&[String], &str),
) -> Vec<(String, String, Chart)> {
    let mut out = Vec::new();
    for sig in server_signals(r) {
        let (label, unit) = signal_display(&sig);
        let scale = match unit {
            Unit::Pct => 100.0,
            Unit::Ms => 1e3,
            Unit::Plain => 1.0,
        };
        let mut series = Vec::new();
        for (mi, m) in r.models.iter().enumerate() {
            type Stat = fn(&crate::servermetrics::level::SignalStats) -> Option<f64>;
            let stats: [(&str, bool, Marker, Stat); 2] = [
                ("mean", false, Marker::Circle, |s| s.mean),
                ("max", true, Marker::Triangle, |s| s.max),
            ];
            for (stat, dashed, marker, get) in stats {
                let points: Vec<Point> = m
                    .levels
                    .iter()
                    .filter_map(|l| {
                        let v = l.server.as_ref()?.signals.get(&sig).and_then(get)?;
                        Some(pt(
                            slot(labels, l),
                            v * scale,
                            format!(
                                "{} at {}: {label} {stat} {}",
                                m.model,
                                l.key.label(),
                                num(v * scale)
                            ),
                        ))
                    })
                    .collect();
                if !points.is_empty() {
                    series.push(Series {
                        name: format!("{} {stat}", m.model),
                        color: chart::color(mi).into(),
                        marker,
                        line: true,
                        dashed,
                        radius: 3.5,
                        points,
                    });
                }
            }
        }
        out.push((
            format!(
                "plot-server-{}",
                sig.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
            ),
            format!("Server: {label} against the load"),
            Chart {
                x: XAxis::Levels(labels.to_vec()),
                x_label: axis.into(),
                y_label: label,
                series,
                hlines: Vec::new(),
                rings: Vec::new(),
                ring_label: String::new(),
            },
        ));
    }
    out
}
