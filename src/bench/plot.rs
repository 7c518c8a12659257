//! `--plot FILE.svg`: TTFT p95 and aggregate output tokens/s against the load (concurrency, or
//! rate in open loop), one line per model, the knee circled. SVG only: plotters' SVG backend
//! writes text as `<text>` elements, so no font is needed at build or run time (a PNG would need
//! an embedded font and an image encoder; convert the SVG instead, e.g. `rsvg-convert`).

use super::report::Report;
use plotters::prelude::*;

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// plotters failed.
    #[error("cannot draw the plot: {0}")]
    Draw(String),
    /// Nothing to plot.
    #[error("nothing to plot: no level has results")]
    Empty,
}

fn err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

/// Series of one panel: per model, the (level index, y) points and the knee point.
type Series = Vec<(String, Vec<(u32, f64)>, Option<(u32, f64)>)>;

fn series(r: &Report, y: impl Fn(&super::stats::LevelStats) -> Option<f64>) -> Series {
    r.models
        .iter()
        .map(|m| {
            let pts: Vec<(u32, f64)> = m
                .levels
                .iter()
                .enumerate()
                .filter_map(|(i, l)| y(l).map(|v| (i as u32, v)))
                .collect();
            let knee = m
                .knee
                .as_ref()
                .and_then(|k| m.levels.get(k.index).map(|l| (k.index as u32, l)))
                .and_then(|(i, l)| y(l).map(|v| (i, v)));
            (m.model.clone(), pts, knee)
        })
        .collect()
}

/// One panel; the x axis has one slot per level, labelled with the level.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    (x_desc, labels): (&str, &[String]),
    y_desc: &str,
    data: &Series,
) -> Result<(), PlotError> {
    let y_max = data
        .iter()
        .flat_map(|(_, p, _)| p.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let n = labels.len() as u32;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0..n.max(2) - 1).into_segmented(), 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(labels.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                labels.get(*i as usize).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    let at = |(i, v): (u32, f64)| (SegmentValue::CenterOf(i), v);
    for (i, (name, pts, knee)) in data.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                pts.iter().copied().map(at),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|p| Circle::new(at(*p), 3, color.filled())))
            .map_err(err)?;
        if let Some(k) = knee {
            chart
                .draw_series(std::iter::once(Circle::new(
                    at(*k),
                    8,
                    color.stroke_width(2),
                )))
                .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// The SVG document: TTFT p95 (left) and aggregate output tokens/s (right) against the load,
/// the knee circled.
///
/// # Errors
/// [`PlotError::Empty`] when no level has a result; [`PlotError::Draw`] if plotters fails.
pub fn render_svg(r: &Report) -> Result<String, PlotError> {
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
    let ttft = series(r, |l| l.ttft_s.as_ref().map(|s| s.p95 * 1e3));
    let tps = series(r, |l| Some(l.output_tokens_per_s));
    let x_desc = if r.mode.kind == "open" {
        "arrival rate (requests/s)"
    } else {
        "concurrency"
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, 460)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (left, right) = root.split_horizontally(550);
        panel(&left, "TTFT p95", (x_desc, &labels), "ms", &ttft)?;
        panel(
            &right,
            "aggregate output tokens/s",
            (x_desc, &labels),
            "tokens/s",
            &tps,
        )?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_both_panels_and_every_model() {
        let svg = render_svg(&crate::bench::report::tests::synthetic()).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        for s in ["TTFT p95", "aggregate output tokens/s", "alpha", "beta"] {
            assert!(svg.contains(s), "no {s:?} in the SVG");
        }
    }
}
