//! The level table's columns (pure), chosen once for the terminal and for Markdown: the model,
//! its target when the models' targets differ, the load, the style's figures, the costs when a
//! model has a price, the knee's marks, the lengths asked for and reached when some level asked
//! for them, and what the answers' usage said beside the token counts when some level has it.

use super::{Style, opt, pct};
use crate::bench::report::{LoadKind, ModelReport, Report, mixed_targets};
use crate::bench::stats::LevelStats;
use crate::units::{fmt_cost, fmt_secs};

/// A level's cell: of model `m`, its `i`th level `l`.
type Cell = Box<dyn Fn(&ModelReport, usize, &LevelStats) -> String>;

/// A column of the level table.
pub struct Column {
    /// Its header.
    pub header: &'static str,
    /// A figure (right-aligned in the terminal), not a name or a mark.
    pub figure: bool,
    cell: Cell,
}

impl Column {
    fn name(header: &'static str, cell: fn(&ModelReport, usize, &LevelStats) -> String) -> Self {
        Column {
            header,
            figure: false,
            cell: Box::new(cell),
        }
    }

    /// A column of a figure of the level alone.
    fn figure(header: &'static str, cell: fn(&LevelStats) -> String) -> Self {
        Column {
            header,
            figure: true,
            cell: Box::new(move |_, _, l| cell(l)),
        }
    }

    /// The cell of model `m`'s `i`th level `l`.
    pub fn cell(&self, m: &ModelReport, i: usize, l: &LevelStats) -> String {
        (self.cell)(m, i, l)
    }
}

/// The columns of the level table in `style`.
pub fn columns(r: &Report, style: Style) -> Vec<Column> {
    let mut cols = vec![Column::name("model", |m, _, _| m.name())];
    if mixed_targets(&r.models) {
        cols.push(Column::name("target", |m, _, _| {
            m.target.clone().unwrap_or_default()
        }));
    }
    let load = match (style, r.mode.kind) {
        (Style::Terminal, _) => "load",
        (Style::Markdown, LoadKind::Open) => "rate",
        (Style::Markdown, LoadKind::Closed) => "concurrency",
    };
    cols.push(Column::name(load, |_, _, l| l.key.label()));
    cols.extend(match style {
        Style::Terminal => terminal_figures(),
        Style::Markdown => markdown_figures(),
    });
    if has_costs(r) {
        cols.push(Column::figure("cost/req", |l| {
            l.cost_per_request.map_or_else(|| "-".into(), fmt_cost)
        }));
        cols.push(Column::figure("cost/Mtok", |l| {
            l.cost_per_mtok.map_or_else(|| "-".into(), fmt_cost)
        }));
    }
    cols.push(match style {
        Style::Terminal => Column::name("knee", |m, i, l| {
            marks(m, i, l, |s| match s {
                "knee" => "◆ knee".to_owned(),
                other => other.to_owned(),
            })
        }),
        Style::Markdown => Column::name("knee", |m, i, l| marks(m, i, l, |s| format!("**{s}**"))),
    });
    if has_lengths(r) {
        cols.push(Column::figure("ISL req→got", |l| {
            length_cell(
                l.lengths.requested_input_tokens_mean,
                l.lengths.input_tokens_mean,
            )
        }));
        cols.push(Column::figure("OSL req→got", |l| {
            length_cell(
                l.lengths.requested_output_tokens_mean,
                l.lengths.output_tokens_mean,
            )
        }));
    }
    cols.extend(usage_columns(r));
    cols
}

/// The terminal's figures: the latencies people read first, each in its own unit.
fn terminal_figures() -> Vec<Column> {
    vec![
        Column::figure("req", |l| l.requests.to_string()),
        Column::figure("errors", |l| pct(l.error_rate)),
        Column::figure("TTFT p50", |l| opt(&l.ttft_s, |s| s.p50, fmt_secs)),
        Column::figure("TTFT p95", |l| opt(&l.ttft_s, |s| s.p95, fmt_secs)),
        Column::figure("TTFT p99", |l| opt(&l.ttft_s, |s| s.p99, fmt_secs)),
        Column::figure("TPOT p50", |l| opt(&l.tpot_s, |s| s.p50, fmt_secs)),
        Column::figure("E2E p95", |l| opt(&l.e2e_s, |s| s.p95, fmt_secs)),
        Column::figure("TPS p50", |l| {
            opt(&l.decode_tokens_per_s, |s| s.p50, |v| format!("{v:.1}"))
        }),
        Column::figure("agg tok/s", |l| format!("{:.1}", l.output_tokens_per_s)),
        Column::figure("req/s", |l| format!("{:.2}", l.requests_per_s)),
        Column::figure("goodput", |l| {
            l.goodput_rps
                .map_or_else(|| "-".into(), |g| format!("{g:.2}"))
        }),
        Column::figure("lag p99", |l| opt(&l.lag_s, |s| s.p99, fmt_secs)),
        Column::figure("loop p99", |l| opt(&l.loop_lag_s, |s| s.p99, fmt_secs)),
    ]
}

fn ms(v: f64) -> String {
    format!("{:.1}", v * 1e3)
}

fn ms2(v: f64) -> String {
    format!("{:.2}", v * 1e3)
}

/// Markdown's figures: more of each distribution, times in ms (a unit per column, for docs).
fn markdown_figures() -> Vec<Column> {
    vec![
        Column::figure("requests", |l| l.requests.to_string()),
        Column::figure("error rate", |l| pct(l.error_rate)),
        Column::figure("TTFT p50 (ms)", |l| opt(&l.ttft_s, |s| s.p50, ms)),
        Column::figure("TTFT p95 (ms)", |l| opt(&l.ttft_s, |s| s.p95, ms)),
        Column::figure("TTFT p99 (ms)", |l| opt(&l.ttft_s, |s| s.p99, ms)),
        Column::figure("TTFO p95 (ms)", |l| opt(&l.ttfo_s, |s| s.p95, ms)),
        Column::figure("TPOT p50 (ms)", |l| opt(&l.tpot_s, |s| s.p50, ms)),
        Column::figure("TPOT p95 (ms)", |l| opt(&l.tpot_s, |s| s.p95, ms)),
        Column::figure("E2E p50 (ms)", |l| opt(&l.e2e_s, |s| s.p50, ms)),
        Column::figure("E2E p95 (ms)", |l| opt(&l.e2e_s, |s| s.p95, ms)),
        Column::figure("TPS p50", |l| {
            opt(&l.decode_tokens_per_s, |s| s.p50, |v| format!("{v:.1}"))
        }),
        Column::figure("TPS p95", |l| {
            opt(&l.decode_tokens_per_s, |s| s.p95, |v| format!("{v:.1}"))
        }),
        Column::figure("agg tok/s", |l| format!("{:.1}", l.output_tokens_per_s)),
        Column::figure("req/s", |l| format!("{:.2}", l.requests_per_s)),
        Column::figure("goodput req/s", |l| {
            l.goodput_rps
                .map_or_else(|| "-".into(), |g| format!("{g:.2}"))
        }),
        Column::figure("lag p99 (ms)", |l| opt(&l.lag_s, |s| s.p99, ms2)),
        Column::figure("loop lag p99 (ms)", |l| opt(&l.loop_lag_s, |s| s.p99, ms2)),
        Column::figure("read lag p99 (ms)", |l| opt(&l.read_lag_s, |s| s.p99, ms2)),
        Column::figure("send lag p99 (ms)", |l| opt(&l.send_lag_s, |s| s.p99, ms2)),
        Column::figure("ramp (ms)", |l| l.ramp_s.map_or_else(|| "-".into(), ms)),
    ]
}

/// True when some level asked for lengths: the tables then show them.
fn has_lengths(r: &Report) -> bool {
    r.models
        .iter()
        .any(|m| m.levels.iter().any(|l| l.lengths.asked()))
}

/// `requested→reached` mean tokens, e.g. `512→514`; `-` for what is unknown.
fn length_cell(requested: Option<f64>, reached: Option<f64>) -> String {
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
    format!("{}→{}", f(requested), f(reached))
}

/// The columns of what the answers' usage said beside the token counts, those some level has:
/// the cached share of the input (`cached in`), the mean reasoning tokens (`reasoning`); `-` for
/// a level without.
fn usage_columns(r: &Report) -> Vec<Column> {
    type Value = fn(&LevelStats) -> Option<String>;
    let values: [(&'static str, Value); 2] = [
        ("cached in", |l| l.lengths.cached_input_share.map(pct)),
        ("reasoning", |l| {
            l.lengths.reasoning_tokens_mean.map(|v| format!("{v:.0}"))
        }),
    ];
    let levels = || r.models.iter().flat_map(|m| &m.levels);
    values
        .into_iter()
        .filter(|(_, value)| levels().any(|l| value(l).is_some()))
        .map(|(header, value)| Column {
            header,
            figure: true,
            cell: Box::new(move |_, _, l| value(l).unwrap_or_else(|| "-".into())),
        })
        .collect()
}

/// True when some level has a cost (some model has a price).
fn has_costs(r: &Report) -> bool {
    r.models
        .iter()
        .flat_map(|m| &m.levels)
        .any(|l| l.cost_per_request.is_some())
}

/// The knee column of level `i`: its knee (written `knee`), `CLIENT-BOUND` when the client
/// could not measure it and `PARTIAL` when it was stopped before its amount, each as `show`
/// writes it, joined by `, `.
fn marks(m: &ModelReport, i: usize, l: &LevelStats, show: impl Fn(&str) -> String) -> String {
    let knee = is_knee(m, i).then_some("knee");
    let bound = l.client_bound.is_some().then_some("CLIENT-BOUND");
    let partial = l.partial.then_some("PARTIAL");
    let shown: Vec<String> = knee
        .into_iter()
        .chain(bound)
        .chain(partial)
        .map(show)
        .collect();
    shown.join(", ")
}

/// True when model `m`'s `i`th level is its knee.
pub fn is_knee(m: &ModelReport, i: usize) -> bool {
    m.knee.as_ref().is_some_and(|k| k.index == i)
}
