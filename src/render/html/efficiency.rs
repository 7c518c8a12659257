//! The page's frontier (a chart through [`crate::render::chart`] and its points), each level's
//! GPUs, energy and self-hosted cost beside the API price, its server cache, and what served
//! the run; every number with its JSON Pointer.

use super::tables::{row_start, strs, table_head};
use super::{Unit, num, td};
use crate::bench::report::Report;
use crate::render::chart::{self, Chart, Marker, Point, Series, XAxis};
use html_escape::encode_quoted_attribute as esc;
use std::fmt::Write as _;

/// Tokens/s per user against output tokens/s per GPU: each series' levels in its colour, the
/// Pareto frontier drawn as a line through its points; `None` without a frontier.
pub(super) fn frontier_chart(r: &Report) -> Option<(String, String, Chart)> {
    let f = r.frontier.as_ref().filter(|f| !f.points.is_empty())?;
    let mut series: Vec<Series> = Vec::new();
    for p in &f.points {
        let i = match series.iter().position(|s| s.name == p.series) {
            Some(i) => i,
            None => {
                series.push(Series {
                    name: p.series.clone(),
                    color: chart::color(series.len()).into(),
                    marker: Marker::Circle,
                    line: false,
                    dashed: false,
                    radius: 4.0,
                    points: Vec::new(),
                });
                series.len() - 1
            }
        };
        let place = match &p.dominated_by {
            Some(d) => format!("below {d}"),
            None => "on the frontier".into(),
        };
        series[i].points.push(Point {
            x: p.tokens_per_s_per_user,
            y: p.tokens_per_s_per_gpu,
            title: format!(
                "{} at {}: {} tokens/s per user, {} tokens/s per GPU ({place})",
                p.series,
                p.level,
                num(p.tokens_per_s_per_user),
                num(p.tokens_per_s_per_gpu)
            ),
            tag: p.level.to_string(),
        });
    }
    let mut front: Vec<Point> = f
        .points
        .iter()
        .filter(|p| p.on_frontier)
        .map(|p| Point {
            x: p.tokens_per_s_per_user,
            y: p.tokens_per_s_per_gpu,
            title: format!("{} at {}: on the frontier", p.series, p.level),
            tag: String::new(),
        })
        .collect();
    front.sort_by(|a, b| a.x.total_cmp(&b.x));
    series.push(Series {
        name: "Pareto frontier".into(),
        color: "#000000".into(),
        marker: Marker::Diamond,
        line: true,
        dashed: false,
        radius: 2.0,
        points: front,
    });
    Some((
        "plot-frontier".into(),
        "Tokens/s per user against output tokens/s per GPU (each point a level; the line the Pareto frontier)".into(),
        Chart {
            x: XAxis::Numeric,
            x_label: "tokens/s per user (median decode rate)".into(),
            y_label: "output tokens/s per GPU".into(),
            series,
            hlines: Vec::new(),
            rings: Vec::new(),
            ring_label: String::new(),
        },
    ))
}

/// The frontier's points: on it, or below which point of it; the series left out.
fn frontier_table(o: &mut String, r: &Report) {
    let Some(f) = &r.frontier else {
        return;
    };
    let heads = strs(&[
        "series",
        "level",
        "tokens/s per user",
        "output tokens/s per GPU",
        "GPUs",
        "frontier",
    ]);
    table_head(
        o,
        "frontier-table",
        "The frontier: every level, on it or below it",
        &heads,
    );
    for (i, p) in f.points.iter().enumerate() {
        let at = format!("/frontier/points/{i}");
        let place = match &p.dominated_by {
            Some(d) => format!("below {d}"),
            None => "on it".into(),
        };
        let _ = write!(
            o,
            r#"<tr><td class="t">{}</td><td class="t">{}</td>{}{}{}<td class="t">{}</td></tr>"#,
            esc(&p.series),
            esc(&p.level.to_string()),
            td(
                Some(p.tokens_per_s_per_user),
                &format!("{at}/tokens_per_s_per_user"),
                Unit::Plain
            ),
            td(
                Some(p.tokens_per_s_per_gpu),
                &format!("{at}/tokens_per_s_per_gpu"),
                Unit::Plain
            ),
            td(Some(f64::from(p.gpus)), &format!("{at}/gpus"), Unit::Plain),
            esc(&place)
        );
    }
    o.push_str("</tbody></table></div>");
    if !f.left_out.is_empty() {
        o.push_str(r#"<ul class="note">"#);
        for l in &f.left_out {
            let _ = write!(o, "<li>left out: {}</li>", esc(l));
        }
        o.push_str("</ul>");
    }
}

/// Each level's GPUs, self-hosted cost, API price, energy and server cache (when some level has
/// a GPU count, an energy figure or a cache that is not simply warm); the load named `axis`.
fn spend_table(o: &mut String, r: &Report, axis: &str) {
    if !crate::render::text::efficiency::csv_any(r) {
        return;
    }
    let heads = strs(&[
        "model",
        axis,
        "GPUs",
        "output tokens/s per GPU",
        "GPU cost per Mtok",
        "API price per Mtok",
        "energy (J)",
        "J per output token",
        "J per token",
        "energy from",
        "server cache",
    ]);
    table_head(
        o,
        "spend-table",
        "GPUs, energy and cost per level (cost in the config's currency)",
        &heads,
    );
    for (mi, m) in r.models.iter().enumerate() {
        for (li, l) in m.levels.iter().enumerate() {
            let at = format!("/models/{mi}/levels/{li}");
            let e = &l.efficiency;
            let en = e.energy.as_ref();
            row_start(o, m, l);
            let cells = [
                td(
                    m.gpus.map(|g| f64::from(g.count)),
                    &format!("/models/{mi}/gpus/count"),
                    Unit::Plain,
                ),
                td(
                    e.output_tokens_per_s_per_gpu,
                    &format!("{at}/output_tokens_per_s_per_gpu"),
                    Unit::Plain,
                ),
                td(
                    e.gpu_cost.map(|c| c.cost_per_mtok),
                    &format!("{at}/gpu_cost/cost_per_mtok"),
                    Unit::Plain,
                ),
                td(l.cost_per_mtok, &format!("{at}/cost_per_mtok"), Unit::Plain),
                td(
                    en.map(|x| x.joules),
                    &format!("{at}/energy/joules"),
                    Unit::Plain,
                ),
                td(
                    en.and_then(|x| x.joules_per_output_token),
                    &format!("{at}/energy/joules_per_output_token"),
                    Unit::Plain,
                ),
                td(
                    en.and_then(|x| x.joules_per_token),
                    &format!("{at}/energy/joules_per_token"),
                    Unit::Plain,
                ),
            ];
            for c in cells {
                o.push_str(&c);
            }
            let cache = e
                .server_cache
                .as_ref()
                .map_or_else(String::new, |c| match &c.note {
                    Some(n) => format!("{} ({n})", c.state.as_str()),
                    None => c.state.as_str().to_owned(),
                });
            let _ = write!(
                o,
                r#"<td class="t">{}</td><td class="t">{}</td></tr>"#,
                esc(en.map_or("", |x| x.source.words())),
                esc(&cache)
            );
        }
    }
    o.push_str("</tbody></table></div>");
}

/// What served the run: each target's server, version, settings, models and GPUs, and the
/// client.
fn provenance(o: &mut String, r: &Report) {
    let Some(p) = &r.provenance else {
        return;
    };
    o.push_str(r#"<h3 id="provenance">What served the run</h3><ul>"#);
    for l in crate::render::text::efficiency::provenance_lines(p) {
        let _ = write!(o, "<li>{}</li>", esc(&l));
    }
    o.push_str("</ul>");
}

/// The page's part of this module, after the other tables (the load named `axis`, as theirs).
pub(super) fn section(o: &mut String, r: &Report, axis: &str) {
    frontier_table(o, r);
    spend_table(o, r, axis);
    provenance(o, r);
}
