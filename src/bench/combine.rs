//! `bench report`'s combination (pure): several runs' JSON reports as one, their models side by
//! side (each keeping its levels, knee and any field another part of the bench added), judged
//! again when criteria are given. Not `bench merge` ([`super::merge`]), which makes the shards of
//! one run into that run.
//!
//! One report and no criteria: the report as it is. Several: the first report's run fields, the
//! targets, base URLs and start times joined, `combined_from` listing the inputs, every model
//! (each keeps its target, so models of different targets show as `TARGET/MODEL`; the same
//! target and model twice get their input's number, `MODEL #2`), the findings of all, and no baseline
//! comparison (it belonged to one run). The answer (the selection at its load, and the view at
//! another) is made again from the criteria given, or from the default weights without limits
//! when several reports are combined without any; each model's capacity within the SLOs too;
//! and the frontier of tokens/s per user against per GPU over every run's levels.

use super::criteria::Criteria;
use super::report::Report;

/// Combines `(name, report)` pairs; `criteria` judges the combined models again.
///
/// # Errors
/// A message when there is no report.
pub fn combine(docs: Vec<(String, Report)>, criteria: Option<&Criteria>) -> Result<Report, String> {
    let n = docs.len();
    let names: Vec<String> = docs.iter().map(|(p, _)| p.clone()).collect();
    let mut it = docs.into_iter();
    let Some((_, mut out)) = it.next() else {
        return Err("no report to render".into());
    };
    if n > 1 {
        let all: Vec<Report> = std::iter::once(out.clone())
            .chain(it.map(|(_, d)| d))
            .collect();
        let joined = |f: &dyn Fn(&Report) -> &str| {
            let mut v: Vec<&str> = Vec::new();
            for d in &all {
                if !v.contains(&f(d)) {
                    v.push(f(d));
                }
            }
            v.join(", ")
        };
        let mut models = Vec::new();
        let mut inputs: Vec<usize> = Vec::new();
        for (k, d) in all.iter().enumerate() {
            for m in &d.models {
                let mut m = m.clone();
                m.target.get_or_insert_with(|| d.target.clone());
                models.push(m);
                inputs.push(k);
            }
        }
        // Models are shown as `target/model` when targets differ (report::model_names); two
        // runs of the same target and model are told apart by their input's number.
        let keys: Vec<(Option<String>, String)> = models
            .iter()
            .map(|m| (m.target.clone(), m.model.clone()))
            .collect();
        let mut renamed: Vec<(usize, String, String)> = Vec::new();
        for (i, m) in models.iter_mut().enumerate() {
            if keys.iter().filter(|k| **k == keys[i]).count() > 1 {
                let name = format!("{} #{}", keys[i].1, inputs[i] + 1);
                renamed.push((inputs[i], m.model.clone(), name.clone()));
                m.model = name;
            }
        }
        // Each finding names the run it came from (`#2`), and its model as the table does.
        let mut findings = Vec::new();
        for (k, d) in all.iter().enumerate() {
            for f in &d.findings {
                let mut f = f.clone();
                f.run = Some(format!("#{}", k + 1));
                if let Some((_, _, name)) = renamed
                    .iter()
                    .find(|(input, old, _)| *input == k && *old == f.model)
                {
                    f.model.clone_from(name);
                }
                findings.push(f);
            }
        }
        out.target = joined(&|d| &d.target);
        out.base_url = joined(&|d| &d.base_url);
        let mut apis = Vec::new();
        for api in all.iter().flat_map(|d| &d.api.0) {
            if !apis.contains(api) {
                apis.push(*api);
            }
        }
        out.api = super::report::Apis(apis);
        out.prompt = joined(&|d| &d.prompt);
        out.started_at = joined(&|d| &d.started_at);
        out.combined_from = names;
        out.models = models;
        out.findings = findings;
        // The comparison, command line, run identity and provenance belonged to one run.
        out.comparison = None;
        out.command = None;
        out.run = None;
        out.provenance = None;
        // One frontier over every run's levels, the models named as the combination names
        // them.
        out.frontier = crate::bench::frontier::of(&out.models);
    }
    let default = Criteria::default();
    let judge = criteria.or((n > 1).then_some(&default));
    if n > 1 {
        // Each model's capacity within the SLOs, named as the combination names it.
        out.slo_capacity = super::answer::slo_capacity(&out.models);
    }
    if let Some(c) = judge {
        let (selection, also_at) = super::answer::answer(&out.models, c);
        (out.selection, out.also_at) = (Some(selection), also_at);
        // What it was judged by now (the page draws its limits from this); the SLOs stay the
        // run's, as its goodput was counted by them.
        let mut rec = c.record();
        if let Some(old) = &out.criteria {
            rec.slo.clone_from(&old.slo);
        }
        out.criteria = Some(rec);
    }
    Ok(out)
}

/// Removes every level's `samples` (`bench report --no-samples`).
pub fn drop_samples(r: &mut Report) {
    for l in r.models.iter_mut().flat_map(|m| &mut m.levels) {
        l.samples = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::Finding;
    use crate::bench::report::tests::synthetic;

    fn doc(target: &str, models: &[&str]) -> Report {
        let mut r = synthetic();
        r.target = target.into();
        r.models.retain(|m| models.contains(&m.model.as_str()));
        for m in &mut r.models {
            m.target = Some(target.into());
        }
        r
    }

    fn finding(code: &str, model: &str) -> Finding {
        Finding {
            code: crate::bench::report::FindingCode::of(code),
            model: model.into(),
            level: crate::bench::stats::Load::Concurrency(8),
            message: "m".into(),
            run: None,
        }
    }

    #[test]
    fn one_report_without_criteria_is_kept_as_it_is() {
        let mut d = doc("local", &["alpha", "beta"]);
        d.findings = vec![finding("x", "alpha")];
        assert_eq!(
            combine(vec![("a.json".into(), d.clone())], None).unwrap(),
            d
        );
    }

    #[test]
    fn several_reports_put_their_models_side_by_side_and_are_judged_again() {
        let a = doc("fast", &["alpha"]);
        let b = doc("slow", &["alpha", "beta"]);
        let m = combine(vec![("a.json".into(), a), ("b.json".into(), b)], None).unwrap();
        let names: Vec<&str> = m.models.iter().map(|m| m.model.as_str()).collect();
        assert_eq!(names, ["alpha", "alpha", "beta"]);
        assert_eq!(m.models[0].target.as_deref(), Some("fast"));
        assert_eq!(m.models[2].target.as_deref(), Some("slow"));
        assert_eq!(m.target, "fast, slow");
        assert_eq!(m.combined_from, ["a.json", "b.json"]);
        assert!(m.comparison.is_none() && m.command.is_none());
        // Judged again with the default weights and no limits: all three ranked.
        let s = m.selection.expect("judged");
        assert_eq!(s.ranked.len(), 3, "{:?}", s.ranked);
        assert!(s.limits.is_empty());
    }

    /// `bench report` over two runs (two GPUs each): one frontier over both runs' levels, each
    /// point named as the combination names its model.
    #[test]
    fn the_frontier_is_over_every_run_combined() {
        // Each level a trade: less per user, more per GPU as the load rises.
        let gpus = |mut d: Report, n: u32| {
            for m in &mut d.models {
                m.gpus = Some(crate::bench::efficiency::GpuCount {
                    count: n,
                    source: crate::bench::efficiency::GpuSource::Config,
                });
                for (li, l) in m.levels.iter_mut().enumerate() {
                    if let Some(s) = &mut l.decode_tokens_per_s {
                        s.p50 = 100.0 / (li + 1) as f64;
                    }
                }
            }
            crate::bench::efficiency::derive(&mut d.models);
            d
        };
        let a = gpus(doc("h100", &["alpha"]), 1);
        let b = gpus(doc("a100", &["alpha"]), 4);
        let m = combine(vec![("a.json".into(), a), ("b.json".into(), b)], None).unwrap();
        let f = m.frontier.expect("a frontier over both runs");
        let levels = m.models[0].levels.len();
        assert_eq!(f.points.len(), 2 * levels);
        // Per user alike, the run on one GPU makes 4× the tokens per GPU: its levels dominate.
        assert!(
            f.points
                .iter()
                .all(|p| p.on_frontier == p.series.starts_with("h100/")),
            "{f:?}"
        );
        assert!(m.provenance.is_none());
    }

    #[test]
    fn samples_can_be_left_out() {
        let mut d = doc("local", &["alpha"]);
        d.models[0].levels[0].samples = Some(Vec::new());
        drop_samples(&mut d);
        assert!(d.models[0].levels[0].samples.is_none());
        assert!(d.models[0].levels[0].ttft_s.is_some());
    }

    #[test]
    fn two_runs_of_one_target_are_told_apart_by_their_input() {
        let (mut a, mut b) = (doc("local", &["alpha"]), doc("local", &["alpha"]));
        a.findings = vec![finding("long_tail", "alpha")];
        b.findings = vec![finding("long_tail", "alpha")];
        let m = combine(vec![("a.json".into(), a), ("b.json".into(), b)], None).unwrap();
        // Every finding names its run, and its model as the table does.
        let f: Vec<(&str, &str)> = m
            .findings
            .iter()
            .map(|f| (f.model.as_str(), f.run.as_deref().unwrap()))
            .collect();
        assert_eq!(f, [("alpha #1", "#1"), ("alpha #2", "#2")]);
        let names: Vec<&str> = m.models.iter().map(|m| m.model.as_str()).collect();
        assert_eq!(names, ["alpha #1", "alpha #2"]);
    }

    #[test]
    fn criteria_judge_one_report_again() {
        let c = Criteria {
            limits: vec!["ttft_p95<300ms".parse().unwrap()],
            ..Criteria::default()
        };
        let m = combine(
            vec![("a.json".into(), doc("local", &["alpha", "beta"]))],
            Some(&c),
        )
        .unwrap();
        // At concurrency 8 alpha's TTFT p95 is 761 ms, beta's 477 ms: both fail.
        let s = m.selection.expect("judged");
        assert_eq!(s.rejected.len(), 2);
        assert_eq!(s.limits, ["ttft_p95 < 300.0 ms"]);
    }
}
