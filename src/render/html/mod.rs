//! `-o run.html` and `bench report run.json -o run.html`: the bench report as one self-contained
//! HTML page (pure: the typed report in, page out).
//!
//! Everything on the page comes from the report, which the page also embeds whole, as JSON, in a
//! `<script type="application/json" id="report-data">`. The page needs no network: styles and
//! the few lines of script (table sorting) are inline, charts are inline SVG
//! ([`super::chart`]), and a Content-Security-Policy forbids any fetch. Without JavaScript it
//! shows everything in the order run; with it, every table sorts by a click on a column head.
//!
//! Every number shown carries `data-k`, the JSON Pointer (RFC 6901) of the value it shows, and
//! `data-v`, that value as the report has it, so a test (or a person) can check each number
//! against the report. Times are shown in ms, rates and growths in %, the rest as is.
//!
//! Each table names its columns once, with the typed field each reads and the pointer that field
//! has in the JSON; values no other table shows (costs, lengths, cross-checks) go to "More per
//! level" when some level has them, server signals to their own table and charts.

use crate::bench::criteria::{Base, Metric, Unit as MetricUnit};
use crate::bench::report::Report;
use crate::render::shown::Shown;
use crate::render::text::{self, Style};
use html_escape::encode_quoted_attribute as esc;
use std::fmt::Write as _;

mod efficiency;
mod plots;
mod tables;
use plots::charts;
use tables::{baseline_table, load_table, main_table, more_table, percentile_table, server_table};

/// Why a page could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    /// The JSON is not a bench report.
    #[error("not a tokenprobe bench JSON report ({0})")]
    NotAReport(String),
}

/// Keys of seconds that the page shows in ms.
pub const MS_KEYS: [&str; 11] = [
    "ttft_s",
    "ttfo_s",
    "tpot_s",
    "e2e_s",
    "lag_s",
    "loop_lag_s",
    "read_lag_s",
    "send_lag_s",
    "wire_ttft_s",
    "ramp_s",
    "failure_s",
];

/// A number with three significant digits (integers exactly).
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    // Whatever a file holds, a cell stays a few characters wide.
    if a >= 1e12 || (a > 0.0 && a < 1e-6) {
        return format!("{v:.2e}");
    }
    if v == v.trunc() {
        return format!("{}", v as i64);
    }
    let decimals = if a >= 100.0 {
        0
    } else {
        (2 - a.log10().floor() as i64).clamp(0, 9) as usize
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// How a value is shown: in ms, in %, or as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unit {
    Ms,
    Pct,
    Plain,
}

/// A metric's unit on the page: seconds in ms, shares in %, the rest as they are.
pub(super) fn metric_unit(m: Metric) -> Unit {
    match m.unit() {
        MetricUnit::Seconds => Unit::Ms,
        MetricUnit::Share => Unit::Pct,
        _ => Unit::Plain,
    }
}

/// The unit written after a value of `metric` shown as `u`: ` ms`, ` %`, or the metric's own
/// (` tok/s`, ` req/s`, ` per Mtok`; nothing for a cost per request).
pub(super) fn unit_after(metric: Metric, u: Unit) -> String {
    match u {
        Unit::Ms => " ms".into(),
        Unit::Pct => " %".into(),
        Unit::Plain => match metric.unit().symbol() {
            "" => String::new(),
            s => format!(" {s}"),
        },
    }
}

pub(super) fn shown(v: f64, u: Unit) -> String {
    match u {
        Unit::Ms => num(v * 1e3),
        // As every output writes a share: two decimals (never `0.00253`).
        Unit::Pct => crate::units::fmt_pct(v).trim_end_matches('%').to_owned(),
        Unit::Plain => num(v),
    }
}

/// A JSON Pointer segment (`~` → `~0`, `/` → `~1`).
pub(super) fn seg(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The value's JSON text as `data-v` (serde_json's shortest round-trip form).
pub(super) fn raw(v: f64) -> String {
    serde_json::Number::from_f64(v).map_or_else(|| "null".into(), |n| n.to_string())
}

/// A cell (`td`) or span showing `v`, the report's value at JSON Pointer `ptr` (kept as
/// `data-k` so the number can be checked against the embedded report), or `-` when there is none.
pub(super) fn cell(tag: &str, v: Option<f64>, ptr: &str, u: Unit) -> String {
    match v.filter(|v| v.is_finite()) {
        Some(v) => format!(
            r#"<{tag} data-k="{}" data-v="{}">{}</{tag}>"#,
            esc(ptr),
            raw(v),
            esc(&shown(v, u))
        ),
        None => format!("<{tag}>-</{tag}>"),
    }
}

pub(super) fn td(v: Option<f64>, ptr: &str, u: Unit) -> String {
    cell("td", v, ptr, u)
}

pub(super) fn span(v: Option<f64>, ptr: &str, u: Unit) -> String {
    cell("span", v, ptr, u)
}

pub(crate) const STYLE: &str = r"
body{font-family:system-ui,sans-serif;margin:0 auto;padding:16px 24px;max-width:1400px;color:#222;background:#fafafa}
h1{font-size:22px;margin:4px 0 8px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccc}h3{font-size:15px;margin:16px 0 6px}
dl.run{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0;font-size:13px}dl.run dt{color:#555}dl.run dd{margin:0}
code{font-family:ui-monospace,monospace;font-size:12px;background:#eee;padding:1px 3px;border-radius:3px;overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:12.5px;background:#fff;margin:4px 0 10px}th,td{border:1px solid #ddd;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#f0f0f0;cursor:pointer;position:sticky;top:0}td:first-child,th:first-child,td.t{text-align:left}
th[data-dir=asc]::after{content:' \25B2'}th[data-dir=desc]::after{content:' \25BC'}
.wrap{overflow-x:auto;max-width:100%}
#levels-table td:first-child,#levels-table th:first-child{position:sticky;left:0;z-index:1;background:#fff;box-shadow:1px 0 0 #ddd}
#levels-table td:last-child,#levels-table th:last-child{position:sticky;right:0;z-index:1;background:#fff;box-shadow:-1px 0 0 #ddd}
#levels-table th:first-child,#levels-table th:last-child{z-index:2;background:#f0f0f0}.answer{background:#fff;border:1px solid #ccc;padding:8px 14px;border-radius:6px}
.rejected{color:#b00}.knee{font-weight:bold}.note{color:#555;font-size:12.5px}.warn{color:#8a4b00;background:#fff4e0;border:1px solid #e0b070;padding:6px 10px}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:14px}
figure.plot{margin:0;background:#fff;border:1px solid #ccc;border-radius:6px;padding:8px}figure.plot>svg{width:100%;height:auto;display:block}
figcaption{font-weight:bold;font-size:14px;margin-bottom:4px}
ul.legend{list-style:none;margin:6px 0 0;padding:0;display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px}ul.legend li{display:flex;align-items:center;gap:5px}
ul.findings li{margin:3px 0}
";

const SCRIPT: &str = r"
(function(){
function key(r,i){var c=r.cells[i];if(!c)return'';var v=c.getAttribute('data-s');if(v===null)v=c.getAttribute('data-v');
if(v!==null&&v!==''&&!isNaN(v))return parseFloat(v);return c.textContent;}
document.querySelectorAll('table.sortable').forEach(function(t){
var hs=t.querySelectorAll('thead th');
hs.forEach(function(th,i){th.tabIndex=0;th.title='sort by this column';
var go=function(){var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows),asc=th.getAttribute('data-dir')!=='asc';
hs.forEach(function(h){h.removeAttribute('data-dir')});th.setAttribute('data-dir',asc?'asc':'desc');
rows.sort(function(x,y){var a=key(x,i),c=key(y,i);
var r=(typeof a==='number'&&typeof c==='number')?a-c:String(a).localeCompare(String(c));return asc?r:-r;});
rows.forEach(function(r){b.appendChild(r)});};
th.addEventListener('click',go);th.addEventListener('keydown',function(e){if(e.key==='Enter')go();});});});
document.documentElement.setAttribute('data-js','ok');
})();
";

/// The page of a report (through its JSON form, as `bench report` reads it).
///
/// # Errors
/// [`HtmlError::NotAReport`] if the report does not serialize (it always does).
pub fn page(shown: &Shown<'_>) -> Result<String, HtmlError> {
    let report = shown.report;
    // The embedded report, as the JSON output writes it: every `data-k` points into it.
    let json = serde_json::to_string(report).map_err(|e| HtmlError::NotAReport(e.to_string()))?;
    let mut r = report.clone();
    // Models are named as every other rendering names them (`target/model` when targets differ).
    for (m, n) in r.models.iter_mut().zip(&shown.names) {
        m.model.clone_from(n);
    }
    let mut o = String::with_capacity(64 * 1024);
    // Every target of the run, in the order its models ran.
    let mut targets: Vec<&str> = Vec::new();
    for t in r.models.iter().filter_map(|m| m.target.as_deref()) {
        if !targets.contains(&t) {
            targets.push(t);
        }
    }
    if targets.is_empty() {
        targets.push(&r.target);
    }
    let title = format!(
        "tokenprobe bench: {} ({}), started {}",
        targets.join(", "),
        r.api,
        r.started_at
    );
    let _ = write!(
        o,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"><meta name="viewport" content="width=device-width,initial-scale=1"><title>{}</title><style>{STYLE}</style></head><body>"#,
        esc(&title)
    );
    let _ = write!(o, "<h1>{}</h1>", esc(&title));
    if let Some(sentence) = text::notes::interrupted_sentence(shown) {
        let _ = write!(
            o,
            r#"<p class="warn" id="interrupted">{}</p>"#,
            esc(&sentence)
        );
    }
    run_info(&mut o, &r);
    o.push_str(r#"<h2 id="answer">The answer</h2><div class="answer">"#);
    answer(&mut o, &r, shown);
    o.push_str("</div>");
    o.push_str(r#"<h2 id="plots">Plots</h2><div class="plots">"#);
    let axis = crate::render::chart::load_axis(r.mode.kind);
    for (id, caption, c) in charts(&r, axis) {
        let _ = write!(
            o,
            r#"<figure class="plot" id="{id}"><figcaption>{}</figcaption>{}{}</figure>"#,
            esc(&caption),
            c.svg(),
            c.legend()
        );
    }
    o.push_str("</div>");
    o.push_str(r#"<h2 id="levels">Per model and level</h2>"#);
    main_table(&mut o, &r, axis);
    percentile_table(&mut o, &r, axis);
    load_table(&mut o, &r, axis);
    server_table(&mut o, &r, axis);
    more_table(&mut o, &r, axis);
    efficiency::section(&mut o, &r, axis);
    baseline_table(&mut o, &r, axis);
    // `<` only occurs inside JSON strings, where `\u003c` means the same: no `</script>` can
    // end the element early.
    let _ = write!(
        o,
        r#"<script type="application/json" id="report-data">{}</script><script>{SCRIPT}</script></body></html>"#,
        json.replace('<', "\\u003c")
    );
    Ok(o)
}

/// Tool, command line, target, workload, start time, and the runs a combination was made from.
pub(super) fn run_info(o: &mut String, r: &Report) {
    let mut rows: Vec<(String, String)> = vec![
        (
            "tool".into(),
            format!("{} {}", esc(&r.tool), esc(&r.version)),
        ),
        ("started".into(), esc(&r.started_at).into_owned()),
    ];
    if let Some(run) = &r.run {
        let mut t = format!("id <code>{}</code>", esc(&run.id));
        if let Some(s) = &run.shard {
            let _ = write!(t, ", shard {}", esc(s));
        }
        if let Some(s) = &run.start_at {
            let _ = write!(t, ", levels from {}", esc(s));
        }
        if !run.merged_from.is_empty() {
            let _ = write!(
                t,
                ", merged from shards {}",
                esc(&run.merged_from.join(", "))
            );
        }
        rows.push(("run".into(), t));
    }
    if let Some(c) = &r.command {
        rows.push(("command".into(), format!("<code>{}</code>", esc(c))));
    }
    rows.push((
        "target".into(),
        format!(
            "{} <code>{}</code> ({})",
            esc(&r.target),
            esc(&r.base_url),
            esc(&r.api.to_string())
        ),
    ));
    let mut workload = format!("prompt {}", esc(&r.prompt));
    if let Some(w) = &r.workload {
        let _ = write!(workload, " ({})", esc(w));
    }
    if let Some(m) = r.max_tokens {
        let _ = write!(workload, ", max_tokens {m}");
    }
    rows.push(("workload".into(), workload));
    let m = &r.mode;
    let mut load = if m.kind.is_open() {
        format!(
            "open loop, {} arrivals",
            esc(m.arrival.as_deref().unwrap_or("poisson"))
        )
    } else {
        "closed loop".into()
    };
    if let Some(n) = m.requests_per_level {
        let _ = write!(load, ", {n} requests per level");
    }
    if let Some(d) = m.duration_per_level_s {
        let _ = write!(load, ", {} s per level", num(d));
    }
    let _ = write!(load, ", warm-up {}", m.warmup);
    if let Some(s) = m.seed {
        let _ = write!(load, ", seed {s}");
    }
    rows.push(("load".into(), load));
    if !r.slo.is_empty() {
        rows.push(("goodput SLOs".into(), esc(&r.slo.join(", ")).into_owned()));
    }
    rows.push((
        "knee rule".into(),
        format!(
            "aggregate tokens/s grows by less than {}% while TTFT p95 grows by more than {}%",
            span(
                Some(r.knee_rule.tps_growth),
                "/knee_rule/tps_growth",
                Unit::Pct
            ),
            span(
                Some(r.knee_rule.ttft_growth),
                "/knee_rule/ttft_growth",
                Unit::Pct
            )
        ),
    ));
    if !r.combined_from.is_empty() {
        rows.push((
            "combined from".into(),
            esc(&r.combined_from.join(", ")).into_owned(),
        ));
    }
    o.push_str(r#"<dl class="run">"#);
    for (k, v) in rows {
        let _ = write!(o, "<dt>{k}</dt><dd>{v}</dd>");
    }
    o.push_str("</dl>");
}

/// A text block of the answer (a heading ending in `:`, one line each) as a heading and a list
/// with `id`; nothing for an empty block.
fn text_block(o: &mut String, text: &str, id: &str) {
    if let Some((head, lines)) = text.trim().split_once('\n') {
        let _ = write!(
            o,
            r#"<h3>{}</h3><ul id="{id}">"#,
            esc(head.trim_end_matches(':'))
        );
        for l in lines.lines() {
            let _ = write!(o, "<li>{}</li>", esc(l.trim()));
        }
        o.push_str("</ul>");
    }
}

/// The answer, first: the ranking at its stated load with scores (ties as ties; when no model
/// passes, every model by its distance to the limits, with its score), the rejected models with
/// each limit failed and how far, each model's knee beside its capacity within the SLOs, the view
/// at another load, the knees, the findings and the regressions, in sentences. `shown` is the
/// report as the text outputs read it (the page's copy `r` names its models for display).
pub(super) fn answer(o: &mut String, r: &Report, shown: &Shown<'_>) {
    if let Some(s) = &r.selection {
        let _ = write!(
            o,
            r#"<h3>Answer {}</h3><p class="note">{}</p>"#,
            esc(&text::answer::stated_at(s, &r.mode)),
            esc(&text::answer::criteria_words(s))
        );
        if s.ranked.is_empty() {
            o.push_str("<p>No model passed every limit: closest first (fewest limits failed, then the smallest relative miss |value / limit − 1|).</p>");
        } else {
            let metrics: Vec<Metric> = s.weights.keys().copied().collect();
            o.push_str(r#"<div class="wrap"><table class="sortable" id="ranking"><thead><tr><th>rank</th><th>model</th><th>score</th>"#);
            for m in &metrics {
                let u = match metric_unit(*m) {
                    Unit::Ms => " (ms)",
                    Unit::Pct => " (%)",
                    Unit::Plain => "",
                };
                let m = esc(&m.to_string()).into_owned();
                let _ = write!(o, "<th>{m}{u}</th><th>{m} normalized</th>");
            }
            o.push_str("</tr></thead><tbody>");
            for (i, k) in s.ranked.iter().enumerate() {
                let p = format!("/selection/ranked/{i}");
                let tied = s.ranked.iter().filter(|x| x.rank == k.rank).count() > 1;
                let _ = write!(
                    o,
                    r#"<tr data-model="{}">{}<td class="t">{}{}</td>{}"#,
                    esc(&k.model),
                    td(Some(k.rank as f64), &format!("{p}/rank"), Unit::Plain),
                    esc(&k.model),
                    if tied { " (tied)" } else { "" },
                    td(Some(k.score), &format!("{p}/score"), Unit::Plain)
                );
                for m in &metrics {
                    let value = k.values.get(m).copied().flatten();
                    let key = seg(&m.to_string());
                    o.push_str(&td(value, &format!("{p}/values/{key}"), metric_unit(*m)));
                    let normalized = k.normalized.get(m).copied();
                    o.push_str(&td(
                        normalized,
                        &format!("{p}/normalized/{key}"),
                        Unit::Plain,
                    ));
                }
                o.push_str("</tr>");
            }
            o.push_str("</tbody></table></div>");
        }
        if !s.rejected.is_empty() {
            o.push_str(r#"<h3>Rejected</h3><ul class="rejected" id="rejected">"#);
            for (i, k) in s.rejected.iter().enumerate() {
                let _ = write!(
                    o,
                    "<li>{}<b>{}</b> failed: {}{}{}</li>",
                    k.closest.map_or_else(String::new, |n| format!("{n}. ")),
                    esc(&k.model),
                    esc(&k.reasons.join("; ")),
                    esc(&text::answer::passes(k)),
                    k.score.map_or_else(String::new, |v| format!(
                        "; weighted score {} among the models measured there (not a pass)",
                        span(
                            Some(v),
                            &format!("/selection/rejected/{i}/score"),
                            Unit::Plain
                        )
                    ))
                );
            }
            o.push_str("</ul>");
        }
    } else {
        o.push_str(r#"<p class="note">Not judged (one model and no limits, weights or bench file): no ranking.</p>"#);
    }
    text_block(o, &text::answer::limits(shown, Style::Terminal), "capacity");
    text_block(o, &text::answer::also(r, Style::Terminal), "also-at");
    knees(o, r);
    level_sections(o, shown);
    model_notes(o, r);
    findings(o, r);
    if let Some(c) = &r.comparison {
        baseline_summary(o, c);
    }
}

/// The comparison with a baseline in sentences: what the gate asks of a regression, the counts
/// of each verdict, and every regression and inconclusive value with its interval.
fn baseline_summary(o: &mut String, c: &crate::bench::report::Comparison) {
    use crate::bench::report::Verdict;
    let n = |v: Verdict| c.with(v).count();
    let gate = match (c.confidence, c.judged) {
        (Some(conf), Some(judged)) => format!(
            "; a regression must be worse than that significantly, at {}% family-wise confidence: one-sided tests, Holm's adjustment over the {judged} values judged",
            num(conf * 100.0)
        ),
        _ => "; judged by the tolerance alone (an older report)".into(),
    };
    let _ = write!(
        o,
        r#"<h3>Baseline</h3><p>Against <code>{}</code> (tolerance {}%, error rate +{} points{gate}): {} values compared, <b>{} regressions</b>, {} inconclusive, {} within tolerance, {} not judged.</p>"#,
        esc(&c.baseline),
        span(Some(c.tolerance), "/comparison/tolerance", Unit::Pct),
        span(
            Some(c.tolerance_error_rate),
            "/comparison/tolerance_error_rate",
            Unit::Pct
        ),
        c.compared,
        c.regressions.len(),
        n(Verdict::Inconclusive),
        n(Verdict::WithinTolerance),
        n(Verdict::NotJudged),
    );
    if !c.changed.is_empty() {
        // Beside the regressions: what served the two runs is not the same.
        let _ = write!(
            o,
            r#"<p class="warn" id="changed">What served it changed since the baseline: {}</p>"#,
            esc(&c.changed.join("; "))
        );
    }
    let listed: Vec<(usize, &str)> = c
        .values
        .iter()
        .enumerate()
        .filter(|(_, v)| matches!(v.verdict, Some(Verdict::Regression | Verdict::Inconclusive)))
        .map(|(i, v)| {
            (
                i,
                if v.verdict == Some(Verdict::Regression) {
                    "REGRESSION"
                } else {
                    "inconclusive"
                },
            )
        })
        .collect();
    if listed.is_empty() {
        return;
    }
    o.push_str(r#"<ul class="rejected">"#);
    for (i, label) in listed {
        let g = &c.values[i];
        let p = format!("/comparison/values/{i}");
        let u = metric_unit(g.metric);
        // The error rate changes in points; goodput's interval is its SLO attainments'.
        let points = g.metric.base == Base::ErrorRate;
        let interval = g.interval.map_or_else(String::new, |_| {
            format!(
                ", 95% interval {} to {} {}",
                span(
                    g.interval.map(|x| x[0]),
                    &format!("{p}/interval/0"),
                    Unit::Pct
                ),
                span(
                    g.interval.map(|x| x[1]),
                    &format!("{p}/interval/1"),
                    Unit::Pct
                ),
                match g.metric.base {
                    Base::ErrorRate => "points",
                    Base::Goodput => "points of SLO attainment",
                    _ => "%",
                }
            )
        });
        let _ = write!(
            o,
            "<li>{label} {} at {}: {} {} → {}{} ({} {}{interval}; p {}, {} after Holm)</li>",
            esc(&g.model),
            esc(&g.level.to_string()),
            esc(&g.metric.to_string()),
            span(Some(g.baseline), &format!("{p}/baseline"), u),
            span(Some(g.current), &format!("{p}/current"), u),
            unit_after(g.metric, u),
            span(Some(g.change), &format!("{p}/change"), Unit::Pct),
            if points { "points" } else { "%" },
            span(g.p_value, &format!("{p}/p_value"), Unit::Plain),
            span(g.p_holm, &format!("{p}/p_holm"), Unit::Plain),
        );
    }
    o.push_str("</ul>");
}

/// Each model's knee and capacity ceiling, and where a sweep stopped early.
fn knees(o: &mut String, r: &Report) {
    o.push_str(r#"<h3>Knee</h3><ul id="knees">"#);
    for (mi, m) in r.models.iter().enumerate() {
        match &m.knee {
            Some(k) => {
                let p = format!("/models/{mi}/knee");
                let _ = write!(
                    o,
                    r#"<li><b>{}</b>: <span class="knee">knee at {}</span>{} (aggregate tokens/s {}% and TTFT p95 {}% over the level before)</li>"#,
                    esc(&m.model),
                    esc(&k.level.label()),
                    k.ceiling.map_or_else(String::new, |c| format!(
                        ", capacity ceiling {}",
                        esc(&c.label())
                    )),
                    span(
                        Some(k.agg_tps_growth),
                        &format!("{p}/agg_tps_growth"),
                        Unit::Pct
                    ),
                    span(
                        Some(k.ttft_p95_growth),
                        &format!("{p}/ttft_p95_growth"),
                        Unit::Pct
                    )
                );
            }
            None => {
                let _ = write!(
                    o,
                    "<li><b>{}</b>: no knee within the sweep</li>",
                    esc(&m.model)
                );
            }
        }
        if let Some(why) = &m.stopped_early {
            let _ = write!(o, "<li><b>{}</b>: {}</li>", esc(&m.model), esc(why));
        }
    }
    o.push_str("</ul>");
}

/// Behind schedule, canaries, steady state and per second (as the text outputs say them), each a
/// heading and a list.
pub(super) fn level_sections(o: &mut String, shown: &Shown<'_>) {
    let text = text::notes::level_sections(shown, Style::Terminal);
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut lines = block.trim().lines();
        let Some(head) = lines.next() else { continue };
        let _ = write!(o, "<h3>{}</h3><ul>", esc(head.trim_end_matches(':')));
        for l in lines {
            let _ = write!(o, "<li>{}</li>", esc(l.trim()));
        }
        o.push_str("</ul>");
    }
}

/// What the report says of each model beyond its levels and knee: its target, price, achieved
/// lengths, prompt and calibration, as a list.
pub(super) fn model_notes(o: &mut String, r: &Report) {
    let mut items = Vec::new();
    for (mi, m) in r.models.iter().enumerate() {
        let p = format!("/models/{mi}");
        let mut parts = Vec::new();
        if let Some(t) = &m.target {
            parts.push(format!("target: {}", esc(t)));
        }
        if let Some(pr) = &m.price {
            parts.push(format!(
                "price: input_per_mtok {}, output_per_mtok {}",
                span(
                    Some(pr.input_per_mtok),
                    &format!("{p}/price/input_per_mtok"),
                    Unit::Plain
                ),
                span(
                    Some(pr.output_per_mtok),
                    &format!("{p}/price/output_per_mtok"),
                    Unit::Plain
                )
            ));
        }
        for (k, v) in [
            ("input_tokens_mean", m.input_tokens_mean),
            ("output_tokens_mean", m.output_tokens_mean),
        ] {
            if v.is_some() {
                parts.push(format!(
                    "{k}: {}",
                    span(v, &format!("{p}/{k}"), Unit::Plain)
                ));
            }
        }
        if let Some(pr) = &m.prompt {
            parts.push(format!("prompt: {}", esc(pr)));
        }
        if let Some(c) = &m.calibration {
            parts.push(format!("calibration: {}", esc(&c.summary())));
        }
        if !parts.is_empty() {
            items.push(format!(
                "<li><b>{}</b>: {}</li>",
                esc(&m.model),
                parts.join("; ")
            ));
        }
    }
    if !items.is_empty() {
        let _ = write!(
            o,
            r#"<h3>Models</h3><ul id="model-notes">{}</ul>"#,
            items.concat()
        );
    }
}

/// The findings in sentences: the report's, then each level's cross-check finding.
pub(super) fn findings(o: &mut String, r: &Report) {
    // (model, level, message, code)
    let mut all: Vec<(String, String, String, String)> = Vec::new();
    for f in &r.findings {
        let level = match &f.run {
            Some(run) => format!("{} (run {run})", f.level),
            None => f.level.to_string(),
        };
        all.push((
            f.model.clone(),
            level,
            f.message.clone(),
            f.code.to_string(),
        ));
    }
    for m in &r.models {
        for l in &m.levels {
            if let Some(f) = l.cross_check.as_ref().and_then(|c| c.finding.as_ref()) {
                all.push((
                    m.model.clone(),
                    l.key.label(),
                    f.clone(),
                    "cross_check".into(),
                ));
            }
        }
    }
    if all.is_empty() {
        return;
    }
    o.push_str(r#"<h3>Findings</h3><ul class="findings" id="findings">"#);
    for (model, level, message, code) in all {
        let at = if level.is_empty() {
            format!("<b>{}</b>: ", esc(&model))
        } else {
            format!("<b>{}</b> at {}: ", esc(&model), esc(&level))
        };
        let _ = write!(
            o,
            r#"<li>{at}{} <span class="note">({})</span></li>"#,
            esc(&message),
            esc(&code)
        );
    }
    o.push_str("</ul>");
}

#[cfg(test)]
pub(crate) mod tests {
    use super::plots::{level_labels, slot, thresholds};
    use super::*;
    use crate::bench::report::Finding;
    use crate::bench::report::tests::synthetic;
    use crate::bench::stats::CrossCheck;
    use crate::servermetrics::level::{ServerLevel, SignalStats};
    use regex::Regex;
    use serde_json::Value;

    /// The synthetic report with what other parts of the bench add: samples, server signals,
    /// findings, requested and achieved lengths, and each model's achieved input length.
    pub(crate) fn rich() -> Report {
        let mut r = synthetic();
        for m in &mut r.models {
            for (li, l) in m.levels.iter_mut().enumerate() {
                let mut s = crate::bench::report::tests::samples(
                    l.requests as usize,
                    0.1 * (li + 1) as f64,
                    64,
                    0.02,
                    7,
                );
                for (i, x) in s.iter_mut().enumerate() {
                    x.sent_s = i as f64 * l.wall_s / 20.0;
                }
                l.samples = Some(s);
            }
        }
        r.command = Some("tokenprobe bench --config.file c.yml -o run.html".into());
        let stats = |mean: f64, max: f64| SignalStats {
            mean: Some(mean),
            max: Some(max),
            ..SignalStats::default()
        };
        for (mi, m) in r.models.iter_mut().enumerate() {
            m.input_tokens_mean = Some(100.0 + mi as f64);
            for (li, l) in m.levels.iter_mut().enumerate() {
                let f = (li + 1) as f64;
                let mut server = ServerLevel {
                    scrapes: 10,
                    ..ServerLevel::default()
                };
                for (name, s) in [
                    ("gpu_utilization", stats(30.0 * f, 35.0 * f)),
                    ("kv_cache_usage_ratio", stats(0.2 * f, 0.25 * f)),
                    ("requests_waiting", stats(0.5 * f * f, 2.0 * f * f)),
                ] {
                    server.signals.insert(name.into(), s);
                }
                l.server = Some(server);
                l.lengths.requested_output_tokens_mean = Some(64.0);
                l.lengths.output_tokens_mean = Some(63.5);
            }
        }
        r.findings = vec![Finding {
            code: crate::bench::report::FindingCode::of("kv_cache_full"),
            model: "alpha".into(),
            level: crate::bench::stats::Load::Concurrency(8),
            message: "the KV cache was 95% full: requests queue".into(),
            run: None,
        }];
        r
    }

    /// The report as the page embeds it.
    fn json_of(r: &Report) -> Value {
        serde_json::to_value(r).unwrap()
    }

    /// `(pointer, data-v, text)` of every number shown.
    pub(crate) fn numbers(html: &str) -> Vec<(String, String, String)> {
        let re = Regex::new(r#"data-k="([^"]+)" data-v="([^"]+)">([^<]*)<"#).unwrap();
        re.captures_iter(html)
            .map(|c| (c[1].replace("&amp;", "&"), c[2].to_owned(), c[3].to_owned()))
            .collect()
    }

    /// How the page should show the value at `ptr` (this test's own reading of the units).
    pub(crate) fn expected_scale(doc: &Value, ptr: &str) -> f64 {
        let segs: Vec<&str> = ptr.split('/').collect();
        let last = segs.last().copied().unwrap_or("");
        let parent = ptr.rsplit_once('/').map_or("", |p| p.0);
        let in_values = segs.contains(&"values");
        let metric = doc
            .pointer(parent)
            .and_then(|p| p.get("metric"))
            .and_then(Value::as_str)
            .unwrap_or(if in_values { last } else { "" })
            .to_owned();
        let time_metric = ["ttft", "ttfo", "tpot", "e2e", "lag"]
            .contains(&metric.split('_').next().unwrap_or(""));
        // A comparison's p-values are plain; its intervals, like its changes, in %.
        if in_values && ["p_value", "p_holm"].contains(&last) {
            return 1.0;
        }
        let pct = ["change", "error_rate", "share"].contains(&last)
            || (in_values && segs.contains(&"interval"))
            || metric == "error_rate"
            || last.ends_with("_growth")
            || last.starts_with("tolerance");
        let ms = time_metric || (segs.iter().any(|s| MS_KEYS.contains(s)) && last != "n");
        // A server signal: ratios in %, seconds in ms.
        if let Some(i) = segs.iter().position(|s| *s == "server")
            && let Some(sig) = segs.get(i + 1)
            && segs.len() > i + 2
        {
            if sig.ends_with("_ratio") || sig.ends_with("_utilization") {
                return 100.0;
            }
            if sig.ends_with("_s") && !sig.ends_with("_per_s") {
                return 1e3;
            }
            return 1.0;
        }
        if pct {
            100.0
        } else if ms {
            1e3
        } else {
            1.0
        }
    }

    /// Checks every number of `html` against `doc`; returns how many there were.
    pub(crate) fn check_numbers(doc: &Value, html: &str) -> usize {
        let all = numbers(html);
        for (ptr, v, text) in &all {
            let want = doc
                .pointer(ptr)
                .and_then(Value::as_f64)
                .unwrap_or_else(|| panic!("{ptr}: not a number in the report"));
            assert_eq!(v.parse::<f64>().unwrap(), want, "{ptr}: data-v");
            let scale = expected_scale(doc, ptr);
            let scaled = want * scale;
            // A percentage has two decimals, and a tiny one is a bound (`<0.01`).
            let text = text.replace("&lt;", "<").replace("&gt;", ">");
            if let Some(bound) = text.strip_prefix('<') {
                assert!(
                    scaled > 0.0 && scaled < bound.parse::<f64>().unwrap(),
                    "{ptr}: {text}"
                );
                continue;
            }
            if let Some(bound) = text.strip_prefix('>') {
                let b = bound.parse::<f64>().unwrap();
                assert!(
                    scaled > b && scaled.abs() < b.abs().max(100.0),
                    "{ptr}: {text}"
                );
                continue;
            }
            let shown: f64 = text.parse().unwrap_or_else(|_| panic!("{ptr}: {text:?}"));
            let rounding = if scale == 100.0 { 0.005 } else { 0.0 };
            assert!(
                (shown - scaled).abs() <= 0.005 * scaled.abs() + rounding + 1e-9,
                "{ptr}: shows {text}, the report has {want} (→ {scaled})"
            );
        }
        all.len()
    }

    fn embedded(html: &str) -> Value {
        let start = html
            .find(r#"<script type="application/json" id="report-data">"#)
            .expect("embedded JSON")
            + r#"<script type="application/json" id="report-data">"#.len();
        let end = start + html[start..].find("</script>").unwrap();
        serde_json::from_str(&html[start..end]).expect("embedded JSON parses")
    }

    #[test]
    fn every_number_shown_is_the_reports() {
        let r = rich();
        let html = page(&Shown::of(&r)).unwrap();
        let n = check_numbers(&json_of(&r), &html);
        // 2 models × 3 levels: 15 comparison columns, 7 × 8 statistics, the load table, the
        // server and other tables, the ranking, knees, the baseline.
        assert!(n > 600, "only {n} numbers");
        for p in [
            "/models/0/levels/2/ttft_s/p95",
            "/selection/ranked/0/score",
            "/models/0/knee/ttft_p95_growth",
            "/models/1/levels/2/server/requests_waiting/mean",
            "/models/1/levels/2/lengths/output_tokens_mean",
            "/comparison/values/0/baseline",
            "/models/1/levels/1/errors/rate_limited",
        ] {
            assert!(html.contains(&format!(r#"data-k="{p}""#)), "{p} not shown");
        }
    }

    #[test]
    fn the_page_embeds_the_report_and_escapes_what_it_shows() {
        let mut r = rich();
        r.models[1].model = "</script><script>alert(1)</script>".into();
        let html = page(&Shown::of(&r)).unwrap();
        assert_eq!(embedded(&html), json_of(&r));
        assert!(
            !html.contains("<script>alert(1)"),
            "a model name ran as script"
        );
        assert!(html.contains("&lt;/script&gt;&lt;script&gt;alert(1)"));
    }

    #[test]
    fn the_page_fetches_nothing() {
        let html = page(&Shown::of(&rich())).unwrap();
        assert!(html.contains("Content-Security-Policy\" content=\"default-src 'none'"));
        for bad in [
            "src=", "href=", "url(", "@import", "<link", "<img", "<iframe",
        ] {
            assert!(!html.contains(bad), "{bad} in the page");
        }
        // The only URLs are SVG's namespace and the report's own base URL.
        let re = Regex::new(r"https?://[^\s<>]+").unwrap();
        for m in re.find_iter(&html) {
            let u = m.as_str();
            assert!(
                u.starts_with("http://www.w3.org/2000/svg")
                    || u.starts_with("http://127.0.0.1:8000/v1"),
                "{u}"
            );
        }
    }

    #[test]
    fn the_answer_comes_first_with_ranking_rejections_knees_and_findings() {
        let mut r = rich();
        r.run = Some(crate::bench::report::RunInfo {
            id: "abc123".into(),
            shard: Some("1/2".into()),
            start_at: None,
            merged_from: Vec::new(),
        });
        let html = page(&Shown::of(&r)).unwrap();
        assert!(html.contains("<dt>run</dt><dd>id <code>abc123</code>, shard 1/2</dd>"));
        let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("no {s:?}"));
        assert!(at(r#"id="answer""#) < at(r#"id="plots""#));
        assert!(at(r#"id="plots""#) < at(r#"id="levels-table""#));
        // synthetic(): beta fails error_rate<1%, alpha is ranked; alpha's knee is at 8.
        assert!(html.contains(r#"<tr data-model="alpha">"#));
        assert!(html.contains("<li><b>beta</b> failed: error_rate = "));
        assert!(html.contains(
            r#"<b>alpha</b>: <span class="knee">knee at 8</span>, capacity ceiling 4 ("#
        ));
        // Each level's steady state, as the text outputs say it, a heading and a list.
        assert!(html.contains("<h3>Steady state (the window where the in-flight count"));
        assert!(html.contains("<li>alpha @ 2: 0.00–1.00 s (2 in flight or more)"));
        assert!(html.contains("<b>beta</b>: no knee within the sweep"));
        assert!(html.contains("<b>alpha</b> at 8: the KV cache was 95% full: requests queue"));
        let mut r = rich();
        r.models[1].levels[0].cross_check = Some(CrossCheck {
            requests: 5,
            successes: 5,
            concurrency: 2,
            stream_e2e_p50_s: Some(1.0),
            non_stream_e2e_p50_s: Some(0.6),
            difference_s: Some(0.4),
            ratio: Some(1.0 / 0.6),
            finding: Some("non-streaming E2E 40% below streaming".into()),
        });
        let html = page(&Shown::of(&r)).unwrap();
        assert!(html.contains("<b>beta</b> at 2: non-streaming E2E 40% below streaming"));
        assert!(html.contains(r#"data-k="/models/1/levels/0/cross_check/ratio""#));
        assert!(
            html.contains("tokenprobe 0.1.0")
                && html.contains("<code>tokenprobe bench --config.file c.yml -o run.html</code>")
        );
        assert!(
            html.contains(r#"input_tokens_mean: <span data-k="/models/1/input_tokens_mean""#),
            "what the report says of each model"
        );
    }

    #[test]
    fn every_plot_is_there_with_labelled_axes() {
        let html = page(&Shown::of(&rich())).unwrap();
        let ids = [
            "plot-ttft",
            "plot-tps",
            "plot-curve",
            "plot-scatter-0",
            "plot-scatter-1",
            "plot-server-gpu-utilization",
            "plot-server-kv-cache-usage-ratio",
            "plot-server-requests-waiting",
        ];
        for id in ids {
            let start = html
                .find(&format!(r#"<figure class="plot" id="{id}">"#))
                .unwrap_or_else(|| panic!("no {id}"));
            let fig = &html[start..start + html[start..].find("</figure>").unwrap()];
            assert!(
                fig.contains(r#"class="x-label""#) && fig.contains(r#"class="y-label""#),
                "{id}"
            );
            assert!(fig.contains(r#"<ul class="legend">"#), "{id}");
        }
        assert_eq!(html.matches(r#"<figure class="plot""#).count(), ids.len());
        // The knee is named in the throughput plot's legend; the limit line is drawn... only
        // for TTFT and agg_tps limits: synthetic() has error_rate<1%, so none.
        assert!(html.contains("knee, circled: alpha at 8; beta none"));
        // Baseline values beside the current ones.
        assert!(
            html.contains("alpha baseline ttft_p95") && html.contains(r#"id="baseline-table""#)
        );
        assert!(html.contains(">REGRESSION</td>"));
    }

    /// `rich()` with alpha on 2 GPUs at 2.50 an hour, beta without a GPU count, every level's
    /// energy, a reset cache, and a provenance: as `bench::judge` leaves it.
    pub(crate) fn spent() -> Report {
        use crate::bench::efficiency::{CacheKind, CacheState, GpuCount, GpuSource};
        use crate::servermetrics::energy::{EnergyReading, EnergySource};
        let mut r = rich();
        r.models[0].gpus = Some(GpuCount {
            count: 2,
            source: GpuSource::Config,
        });
        r.models[0].gpu_hour_price = Some(2.5);
        for m in &mut r.models {
            for (li, l) in m.levels.iter_mut().enumerate() {
                if let Some(s) = &mut l.server {
                    s.energy = Some(EnergyReading {
                        joules: 700.0 * (li + 1) as f64,
                        source: EnergySource::DcgmEnergyCounter,
                        devices: 2,
                    });
                }
                l.efficiency.server_cache = Some(CacheState {
                    state: CacheKind::Reset,
                    note: None,
                });
            }
        }
        crate::bench::efficiency::derive(&mut r.models);
        r.frontier = crate::bench::frontier::of(&r.models);
        r.provenance = Some(crate::bench::provenance::Provenance {
            tokenprobe: "0.1.0".into(),
            client: crate::bench::provenance::ClientHost {
                cores: Some(8),
                kernel: Some("6.8.0".into()),
                os: "linux x86_64".into(),
            },
            servers: vec![crate::bench::provenance::ServerInfo {
                target: "t".into(),
                server: Some(crate::bench::provenance::ServerKind::Vllm),
                version: Some("0.11.0".into()),
                ..Default::default()
            }],
        });
        r
    }

    #[test]
    fn the_frontier_energy_and_cost_are_on_the_page() {
        let r = spent();
        let f = r.frontier.as_ref().unwrap();
        assert!(!f.points.is_empty() && f.points.iter().any(|p| p.on_frontier));
        let html = page(&Shown::of(&r)).unwrap();
        // Every number shown (the frontier's points, each level's GPU figures, cost and energy)
        // is the report's.
        let n = check_numbers(&json_of(&r), &html);
        for ptr in [
            "/frontier/points/0/tokens_per_s_per_user",
            "/frontier/points/0/tokens_per_s_per_gpu",
            "/models/0/levels/0/output_tokens_per_s_per_gpu",
            "/models/0/levels/0/gpu_cost/cost_per_mtok",
            "/models/0/levels/0/energy/joules_per_output_token",
            "/models/1/levels/0/energy/joules",
            "/models/0/gpus/count",
        ] {
            assert!(
                html.contains(&format!(r#"data-k="{ptr}""#)),
                "{ptr} not shown ({n} numbers)"
            );
        }
        let start = html
            .find(r#"<figure class="plot" id="plot-frontier">"#)
            .expect("the frontier's chart");
        let fig = &html[start..start + html[start..].find("</figure>").unwrap()];
        assert!(fig.contains("Pareto frontier") && fig.contains("tokens/s per user"));
        assert!(html.contains(r#"id="frontier-table""#) && html.contains(r#"id="spend-table""#));
        assert!(html.contains("left out: beta: no GPU count"));
        assert!(html.contains("DCGM energy counter"));
        assert!(html.contains(">reset</td>"));
        assert!(html.contains("t: vLLM 0.11.0"), "the provenance");
        assert!(html.contains("client: tokenprobe 0.1.0 on linux x86_64, 8 cores, kernel 6.8.0"));
    }

    #[test]
    fn limit_and_slo_lines_come_from_the_report() {
        let mut r = rich();
        if let Some(s) = r.selection.as_mut() {
            s.limits = vec![
                "ttft_p95 < 500.0 ms".into(),
                "agg_tps > 150.0 tok/s".into(),
                "error_rate < 1.00%".into(),
            ];
        }
        r.slo = vec!["ttft<=1.50 s".into()];
        let t = thresholds(&r);
        let got: Vec<(&str, f64, bool)> = t.iter().map(|x| (x.0.as_str(), x.1, x.3)).collect();
        assert_eq!(
            got,
            [
                ("ttft_p95", 500.0, true),
                ("agg_tps", 150.0, true),
                ("ttft", 1500.0, false)
            ]
        );
        let html = page(&Shown::of(&r)).unwrap();
        assert!(
            html.contains("limit ttft_p95 &lt; 500.0 ms")
                && html.contains("SLO ttft&lt;=1.50 s (per request)")
        );
        assert_eq!(
            html.matches(r#"class="hline""#).count(),
            2 + 1 + 2,
            "TTFT: 2, tokens/s: 1, curve: 2"
        );
    }

    /// Issue 40: models of different targets were named `gw-smol/gw-smol/smollm2` in the
    /// page's answer (the page's copy of the report, already named `target/model`, was named
    /// again); and a knee's growth of 0.0000253 read "0.00253%".
    #[test]
    fn names_are_not_doubled_and_shares_have_two_decimals() {
        let mut r = synthetic();
        r.models[1].target = Some("other".into());
        let c = crate::bench::criteria::Criteria {
            slos: vec!["ttft=300ms".parse().unwrap()],
            ..Default::default()
        };
        let (s, also) = crate::bench::answer::answer(&r.models, &c);
        (r.selection, r.also_at) = (Some(s), also);
        r.slo_capacity = crate::bench::answer::slo_capacity(&r.models);
        if let Some(k) = r.models[0].knee.as_mut() {
            k.agg_tps_growth = 0.0000253;
        }
        let html = page(&Shown::of(&r)).unwrap();
        assert!(
            html.contains("<li>other/beta: no knee within the sweep</li>"),
            "{html}"
        );
        assert!(
            html.contains("<li>local/alpha: knee at 8 concurrent streams"),
            "the capacity block names each model once"
        );
        assert!(!html.contains("local/local/") && !html.contains("other/other/"));
        assert!(
            html.contains(
                r#"data-k="/models/0/knee/agg_tps_growth" data-v="0.0000253">&lt;0.01</span>%"#
            ),
            "{}",
            &html[html.find("agg_tps_growth").unwrap()..][..120]
        );
        assert!(!html.contains("0.00253"));
        check_numbers(&json_of(&r), &html);
    }

    /// Issue 40: the page's baseline lines gave a rate or a throughput without its unit
    /// ("goodput 2.08 → 0"); every value now has one.
    #[test]
    fn baseline_lines_have_units() {
        let html = page(&Shown::of(&synthetic())).unwrap();
        let start = html
            .find("<h3>Baseline</h3>")
            .expect("the baseline section");
        let section = &html[start..];
        let section = &section[..section.find("</ul>").unwrap()];
        let items: Vec<&str> = section
            .split("<li>")
            .skip(1)
            .map(|l| &l[..l.find("</li>").unwrap()])
            .collect();
        assert!(!items.is_empty());
        // Each line: the verdict, the value before and after with its unit, then in brackets
        // the change, its interval and the p-values.
        let values = |i: &str| i[..i.find(" (").unwrap()].to_owned();
        for i in &items {
            assert!(
                [" ms", " %", " req/s", " tok/s"]
                    .iter()
                    .any(|u| values(i).ends_with(u)),
                "{i}"
            );
        }
        assert!(
            items
                .iter()
                .any(|i| i.starts_with("REGRESSION alpha at 8: goodput ")
                    && values(i).ends_with(" req/s")),
            "{items:?}"
        );
    }

    /// Issue 40: equal scores are a tie on the page too; when no model passes, the rejected
    /// models come closest first with their distance and their weighted score.
    #[test]
    fn ties_and_the_closest_models_on_the_page() {
        let mut r = synthetic();
        let mut s = r.selection.clone().unwrap();
        let mut twin = s.ranked[0].clone();
        twin.model = "gamma".into();
        s.ranked.push(twin);
        r.selection = Some(s);
        let html = page(&Shown::of(&r)).unwrap();
        assert!(
            html.contains(r#"<td class="t">alpha (tied)</td>"#),
            "{html}"
        );
        assert!(html.contains(r#"<td class="t">gamma (tied)</td>"#));
        let c = crate::bench::criteria::Criteria {
            limits: vec!["ttft_p95<100ms".parse().unwrap()],
            ..Default::default()
        };
        r.selection = Some(crate::bench::answer::answer(&r.models, &c).0);
        let html = page(&Shown::of(&r)).unwrap();
        assert!(html.contains("<p>No model passed every limit: closest first"));
        assert!(
            html.contains("<li>1. <b>beta</b> failed: ttft_p95 = 476.9 ms (limit ttft_p95 &lt; 100.0 ms), 376.87% beyond; passes every limit at no level run; weighted score <span data-k=\"/selection/rejected/0/score\" data-v=\"1.0\">1</span> among the models measured there (not a pass)</li><li>2. <b>alpha</b> failed"),
            "{html}"
        );
        check_numbers(&json_of(&r), &html);
    }

    #[test]
    fn an_old_report_without_the_optional_parts_renders() {
        let mut r = synthetic();
        r.selection = None;
        r.comparison = None;
        r.command = None;
        let html = page(&Shown::of(&r)).unwrap();
        assert!(html.contains("Not judged"));
        assert!(
            !html.contains("plot-scatter")
                && !html.contains("plot-server")
                && !html.contains("server-table")
        );
        check_numbers(&json_of(&r), &html);
    }

    #[test]
    fn an_open_loop_report_is_labelled_by_rate() {
        let mut r = synthetic();
        r.mode.kind = crate::bench::report::LoadKind::Open;
        r.mode.arrival = Some("constant".into());
        for m in &mut r.models {
            for l in &mut m.levels {
                l.key.rate = Some(f64::from(l.key.concurrency) / 2.0);
            }
            if let Some(k) = m.knee.as_mut() {
                k.level = m.levels[k.index].key;
            }
        }
        let html = page(&Shown::of(&r)).unwrap();
        assert!(html.contains("open loop, constant arrivals"));
        assert!(html.contains(">arrival rate (requests/s)</text>"));
        assert!(html.contains("<th>arrival rate (requests/s)</th>"));
        for l in [">1/s</text>", ">2/s</text>", ">4/s</text>", "knee at 4/s"] {
            assert!(html.contains(l), "no {l}");
        }
        check_numbers(&json_of(&r), &html);
    }

    #[test]
    fn models_with_different_levels_share_one_axis_in_load_order() {
        let mut r = synthetic();
        // beta ran 2, 4 and 16 instead of 2, 4 and 8.
        r.models[1].levels[2].key.concurrency = 16;
        assert_eq!(level_labels(&r), ["2", "4", "8", "16"]);
        let labels = level_labels(&r);
        assert_eq!(slot(&labels, &r.models[1].levels[2]), 3.0);
        assert_eq!(slot(&labels, &r.models[0].levels[2]), 2.0);
    }

    #[test]
    fn numbers_have_three_significant_digits() {
        for (v, s) in [
            (190.4, "190"),
            (1.234, "1.23"),
            (0.0123, "0.0123"),
            (12.0, "12"),
            (0.5, "0.5"),
            (12345.6, "12346"),
            (f64::NAN, "-"),
            (1e300, "1.00e300"),
            (-5e15, "-5.00e15"),
            (3e-9, "3.00e-9"),
        ] {
            assert_eq!(num(v), s, "{v}");
        }
    }

    /// Whatever a report holds (a hand-edited file, absurd numbers), the page renders with
    /// cells of a few characters and charts of finite coordinates.
    #[test]
    fn absurd_numbers_render_within_bounds() {
        let mut r = rich();
        if let Some(s) = r.models[0].levels[0].ttft_s.as_mut() {
            s.p95 = 1e300;
        }
        if let Some(s) = r.models[0].levels[1].ttft_s.as_mut() {
            s.p50 = -5.0;
        }
        r.models[0].levels[0].output_tokens_per_s = 1e306;
        let html = page(&Shown::of(&r)).unwrap();
        for bad in ["NaN", "inf", "Infinity"] {
            let in_charts = html
                .split("<svg")
                .skip(1)
                .any(|svg| svg.split("</svg>").next().unwrap_or("").contains(bad));
            assert!(!in_charts, "{bad} in a chart");
        }
        let long_number = regex::Regex::new(r">-?[0-9]{16,}<").unwrap();
        assert!(!long_number.is_match(&html), "a cell of many digits");
        assert!(
            html.contains(">1.00e303<") || html.contains(">1.00e300<"),
            "shown in scientific form"
        );
    }
}
