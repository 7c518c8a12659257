//! The frontier, each level's energy and self-hosted cost, its server cache, and what served
//! the run, as text (pure; the terminal and Markdown print [`render`], the CSV has its columns,
//! the page shows the same lines beside its chart and tables).

use super::Style;
use crate::bench::efficiency::CacheKind;
use crate::bench::provenance::{Provenance, ServerInfo};
use crate::bench::report::Report;
use crate::render::shown::Shown;
use crate::units::fmt_cost;
use std::fmt::Write as _;

/// `12.3`, `0.0456`: three significant digits.
pub fn sig3(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    let decimals = if a >= 100.0 || a == 0.0 {
        0
    } else {
        (2 - a.log10().floor() as i64).clamp(0, 9) as usize
    };
    format!("{v:.decimals$}")
}

/// The frontier's lines: each point (`◆` on the frontier), then the series left out.
pub fn frontier_lines(r: &Report) -> Vec<String> {
    let Some(f) = &r.frontier else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in &f.points {
        let mark = if p.on_frontier { "◆" } else { " " };
        let under = p
            .dominated_by
            .as_ref()
            .map_or_else(String::new, |d| format!("; below {d}"));
        out.push(format!(
            "{mark} {} @ {}: {} tok/s per user, {} tok/s per GPU ({}){under}",
            p.series,
            p.level,
            sig3(p.tokens_per_s_per_user),
            sig3(p.tokens_per_s_per_gpu),
            crate::units::count(p.gpus as usize, "GPU")
        ));
    }
    for l in &f.left_out {
        out.push(format!("  left out: {l}"));
    }
    out
}

/// Each level's energy and self-hosted cost, one line per level that has either.
pub fn spend_lines(shown: &Shown<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for (m, name) in shown.models() {
        for l in &m.levels {
            let e = &l.efficiency;
            let mut parts = Vec::new();
            if let Some(en) = &e.energy {
                let per =
                    |v: Option<f64>, what: &str| v.map(|v| format!("{} J per {what}", sig3(v)));
                let figures: Vec<String> = per(en.joules_per_output_token, "output token")
                    .into_iter()
                    .chain(per(en.joules_per_token, "token"))
                    .collect();
                parts.push(format!(
                    "{} ({} J, {})",
                    if figures.is_empty() {
                        "no tokens".to_owned()
                    } else {
                        figures.join(", ")
                    },
                    sig3(en.joules),
                    en.source.words()
                ));
            }
            if let Some(c) = &e.gpu_cost {
                parts.push(format!(
                    "{} per Mtok on {} at {} per GPU-hour",
                    fmt_cost(c.cost_per_mtok),
                    crate::units::count(c.gpus as usize, "GPU"),
                    fmt_cost(c.gpu_hour_price)
                ));
            }
            if let Some(api) = l.cost_per_mtok {
                parts.push(format!("API price {} per Mtok", fmt_cost(api)));
            }
            if e.energy.is_some() || e.gpu_cost.is_some() {
                out.push(format!(
                    "  {name} @ {}: {}",
                    l.key.label(),
                    parts.join("; ")
                ));
            }
        }
    }
    out
}

/// Each level's server cache, when some level's is not simply warm: `reset`, `busted`, and
/// why a reset did not happen.
pub fn cache_lines(shown: &Shown<'_>) -> Vec<String> {
    let r = shown.report;
    let levels = || r.models.iter().flat_map(|m| &m.levels);
    let plain = |l: &crate::bench::stats::LevelStats| {
        l.efficiency
            .server_cache
            .as_ref()
            .is_none_or(|c| c.state == CacheKind::Warm && c.note.is_none())
    };
    if levels().all(plain) {
        return Vec::new();
    }
    // Every level alike, and nothing to say of one: one line.
    let first = levels()
        .next()
        .and_then(|l| l.efficiency.server_cache.clone());
    if let Some(c) = first.filter(|c| c.note.is_none())
        && levels().all(|l| l.efficiency.server_cache.as_ref() == Some(&c))
    {
        return vec![format!("every level: {}", c.state.as_str())];
    }
    let mut out = Vec::new();
    for (m, name) in shown.models() {
        for l in &m.levels {
            let Some(c) = &l.efficiency.server_cache else {
                continue;
            };
            let note = c
                .note
                .as_ref()
                .map_or_else(String::new, |n| format!(" ({n})"));
            out.push(format!(
                "  {name} @ {}: {}{note}",
                l.key.label(),
                c.state.as_str()
            ));
        }
    }
    out
}

/// One target's record in a line.
fn server_line(s: &ServerInfo) -> String {
    let mut parts = Vec::new();
    match (s.server, &s.version) {
        (Some(k), Some(v)) => parts.push(format!("{} {v}", k.name())),
        (Some(k), None) => parts.push(k.name().to_owned()),
        (None, Some(v)) => parts.push(format!("version {v}")),
        (None, None) => parts.push("server type not stated".to_owned()),
    }
    if let Some(g) = &s.gpus {
        let source = match g.count.source {
            crate::bench::efficiency::GpuSource::Config => "gpus:",
            crate::bench::efficiency::GpuSource::Dcgm => "DCGM",
        };
        let mut gpus = format!(
            "{} ({source})",
            crate::units::count(g.count.count as usize, "GPU")
        );
        if !g.models.is_empty() {
            let _ = write!(gpus, " {}", g.models.join(", "));
        }
        if let Some(d) = &g.driver {
            let _ = write!(gpus, ", driver {d}");
        }
        if let Some(n) = g.dcgm_devices.filter(|n| *n != g.count.count) {
            let _ = write!(gpus, ", DCGM shows {n}");
        }
        parts.push(gpus);
    }
    if !s.settings.is_empty() {
        let set: Vec<String> = s.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        parts.push(set.join(" "));
    }
    let listed: Vec<String> = s
        .models
        .iter()
        .map(|m| {
            let mut of = Vec::new();
            if let Some(root) = &m.root {
                of.push(format!("root {root}"));
            }
            if let Some(n) = m.max_model_len {
                of.push(format!("max_model_len {n}"));
            }
            if of.is_empty() {
                m.id.clone()
            } else {
                format!("{} ({})", m.id, of.join(", "))
            }
        })
        .collect();
    // A gateway lists many: the first few, and how many more.
    match listed.len() {
        0 => {}
        n if n > 4 => parts.push(format!(
            "models {} and {} more",
            listed[..4].join(", "),
            n - 4
        )),
        _ => parts.push(format!("models {}", listed.join(", "))),
    }
    for sv in &s.served {
        // The name answered, when it is not the one asked for.
        if sv.served_models.iter().any(|x| *x != sv.model) {
            parts.push(format!(
                "{} served as {}",
                sv.model,
                sv.served_models.join(", ")
            ));
        }
        if !sv.fingerprints.is_empty() {
            parts.push(format!(
                "{} fingerprint {}",
                sv.model,
                sv.fingerprints.join(", ")
            ));
        }
    }
    format!("{}: {}", s.target, parts.join("; "))
}

/// What served the run, one line per target, then the client.
pub fn provenance_lines(p: &Provenance) -> Vec<String> {
    let mut out: Vec<String> = p.servers.iter().map(server_line).collect();
    let c = &p.client;
    let mut client = format!("client: tokenprobe {} on {}", p.tokenprobe, c.os);
    if let Some(n) = c.cores {
        let _ = write!(client, ", {}", crate::units::count(n as usize, "core"));
    }
    if let Some(k) = &c.kernel {
        let _ = write!(client, ", kernel {k}");
    }
    out.push(client);
    out
}

/// The block the terminal and Markdown print after the table: the frontier, energy and cost,
/// the server cache, what served the run.
pub fn render(shown: &Shown<'_>, style: Style) -> String {
    let r = shown.report;
    let mut out = String::new();
    let mut section = |heading: &str, lines: Vec<String>| {
        if lines.is_empty() {
            return;
        }
        if style == Style::Markdown {
            let _ = writeln!(out, "\n**{heading}**\n");
            for l in lines {
                let _ = writeln!(out, "- {}", l.trim_start());
            }
        } else {
            let _ = writeln!(out, "\n{heading}:");
            for l in lines {
                let _ = writeln!(out, "  {}", l.trim_start_matches("  "));
            }
        }
    };
    section(
        "Frontier: tokens/s per user against output tokens/s per GPU (◆ on the Pareto frontier)",
        frontier_lines(r),
    );
    section("Energy and GPU cost per level", spend_lines(shown));
    section("Server cache per level", cache_lines(shown));
    if let Some(p) = &r.provenance {
        section("What served the run", provenance_lines(p));
    }
    out
}

/// The CSV's columns of this block, when some level has one of its figures (or a cache that is
/// not simply warm).
pub const CSV_HEADER: [&str; 8] = [
    "gpus",
    "output_tokens_per_s_per_gpu",
    "gpu_cost_per_mtok",
    "energy_j",
    "joules_per_output_token",
    "joules_per_token",
    "energy_source",
    "server_cache",
];

/// Whether the CSV has [`CSV_HEADER`]'s columns.
pub fn csv_any(r: &Report) -> bool {
    r.models.iter().flat_map(|m| &m.levels).any(|l| {
        let e = &l.efficiency;
        e.output_tokens_per_s_per_gpu.is_some()
            || e.gpu_cost.is_some()
            || e.energy.is_some()
            || e.server_cache
                .as_ref()
                .is_some_and(|c| c.state != CacheKind::Warm || c.note.is_some())
    })
}

/// Adds [`CSV_HEADER`] to `header` when the CSV has its columns ([`csv_any`]); whether it has.
pub fn csv_columns(r: &Report, header: &mut Vec<String>) -> bool {
    let on = csv_any(r);
    if on {
        header.extend(CSV_HEADER.map(str::to_owned));
    }
    on
}

/// A level's cells of [`CSV_HEADER`]'s columns (none unless `on`).
pub fn csv_cells(
    on: bool,
    m: &crate::bench::report::ModelReport,
    l: &crate::bench::stats::LevelStats,
) -> Vec<String> {
    if !on {
        return Vec::new();
    }
    let num = |v: Option<f64>| v.map(|v| format!("{v}")).unwrap_or_default();
    let e = &l.efficiency;
    let en = e.energy.as_ref();
    [
        m.gpus.map(|g| g.count.to_string()).unwrap_or_default(),
        num(e.output_tokens_per_s_per_gpu),
        num(e.gpu_cost.map(|c| c.cost_per_mtok)),
        num(en.map(|x| x.joules)),
        num(en.and_then(|x| x.joules_per_output_token)),
        num(en.and_then(|x| x.joules_per_token)),
        en.map(|x| {
            serde_json::to_value(x.source)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        })
        .unwrap_or_default(),
        e.server_cache
            .as_ref()
            .map(|c| c.state.as_str().to_owned())
            .unwrap_or_default(),
    ]
    .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_says_the_frontier_the_spend_the_cache_and_what_served() {
        let r = crate::render::html::tests::spent();
        let text = render(&Shown::of(&r), Style::Terminal);
        let f = r.frontier.as_ref().unwrap();
        let first = &f.points[0];
        assert!(
            text.contains(&format!(
                "◆ alpha @ {}: {} tok/s per user, {} tok/s per GPU (2 GPUs)",
                first.level,
                sig3(first.tokens_per_s_per_user),
                sig3(first.tokens_per_s_per_gpu)
            )),
            "{text}"
        );
        assert!(text.contains("left out: beta: no GPU count"), "{text}");
        let l = &r.models[0].levels[0];
        let c = l.efficiency.gpu_cost.unwrap();
        assert!(
            text.contains(&format!(
                "alpha @ {}: {} J per output token",
                l.key.label(),
                sig3(
                    l.efficiency
                        .energy
                        .unwrap()
                        .joules_per_output_token
                        .unwrap()
                )
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "{} per Mtok on 2 GPUs at 2.5 per GPU-hour",
                fmt_cost(c.cost_per_mtok)
            )),
            "{text}"
        );
        assert!(
            text.contains("Server cache per level:\n  every level: reset\n"),
            "{text}"
        );
        assert!(text.contains("t: vLLM 0.11.0"), "{text}");
        // Markdown: a bold heading and a list.
        let md = render(&Shown::of(&r), Style::Markdown);
        assert!(
            md.contains("\n**What served the run**\n\n- t: vLLM 0.11.0"),
            "{md}"
        );
        // A report without any of it has no block.
        let plain = crate::bench::report::tests::synthetic();
        assert_eq!(render(&Shown::of(&plain), Style::Terminal), "");
    }

    #[test]
    fn a_gateways_many_models_are_cut_to_a_few() {
        use crate::bench::provenance::{ListedModel, ServerInfo};
        let p = Provenance {
            tokenprobe: "0.1.0".into(),
            servers: vec![ServerInfo {
                target: "gw".into(),
                models: (1..=6)
                    .map(|i| ListedModel {
                        id: format!("m{i}"),
                        root: None,
                        max_model_len: (i == 1).then_some(8192),
                        owned_by: None,
                    })
                    .collect(),
                ..ServerInfo::default()
            }],
            ..Provenance::default()
        };
        assert_eq!(
            provenance_lines(&p)[0],
            "gw: server type not stated; models m1 (max_model_len 8192), m2, m3, m4 and 2 more"
        );
    }

    #[test]
    fn three_significant_digits() {
        assert_eq!(sig3(1234.5), "1234");
        assert_eq!(sig3(12.345), "12.3");
        assert_eq!(sig3(0.012345), "0.0123");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(sig3(f64::NAN), "-");
    }
}
