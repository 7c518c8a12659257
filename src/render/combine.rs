//! `bench report`'s combination (pure): several runs' JSON reports as one, their models side by
//! side (each keeping its levels, knee and any field another part of the bench added), judged
//! again when criteria are given. Not `bench merge` ([`crate::bench::merge`]), which makes the shards of
//! one run into that run.
//!
//! One report and no criteria: the report as it is. Several: the first report's run fields, the
//! targets, base URLs and start times joined, `combined_from` listing the inputs, every model
//! (each keeps its target, so models of different targets show as `TARGET/MODEL`; the same
//! target and model twice get their input's number, `MODEL #2`), the findings of all, and no baseline
//! comparison (it belonged to one run). The selection is made again from the criteria given,
//! or from the default weights without limits when several reports are combined without any.

use crate::bench::criteria::Criteria;
use crate::bench::report::ModelReport;
use crate::bench::select;
use serde_json::{Value, json};

/// Combines `(name, report)` pairs; `criteria` judges the combined models again.
///
/// # Errors
/// A message when there is no report or a report's models do not parse.
pub fn combine(docs: Vec<(String, Value)>, criteria: Option<&Criteria>) -> Result<Value, String> {
    let n = docs.len();
    let mut it = docs.into_iter();
    let Some((first_name, mut out)) = it.next() else {
        return Err("no report to render".into());
    };
    if n > 1 {
        let rest: Vec<(String, Value)> = it.collect();
        let all: Vec<(&str, &Value)> = std::iter::once((first_name.as_str(), &out))
            .chain(rest.iter().map(|(p, d)| (p.as_str(), d)))
            .collect();
        let text = |d: &Value, k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let joined = |k: &str| {
            let mut v: Vec<String> = Vec::new();
            for (_, d) in &all {
                let t = text(d, k);
                if !v.contains(&t) {
                    v.push(t);
                }
            }
            v.join(", ")
        };
        let mut models: Vec<Value> = Vec::new();
        let mut inputs: Vec<usize> = Vec::new();
        let mut findings: Vec<(usize, Value)> = Vec::new();
        for (k, (_, d)) in all.iter().enumerate() {
            let target = text(d, "target");
            for m in d
                .get("models")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                models.push(m.clone());
                inputs.push(k);
                if let Some(mi) = models.last_mut()
                    && mi.get("target").is_none_or(Value::is_null)
                {
                    mi["target"] = json!(target);
                }
            }
            // Each finding names the run it came from (`#2`), and its model as the table does.
            findings.extend(
                d.get("findings")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|f| {
                        let mut f = f.clone();
                        f["run"] = json!(format!("#{}", k + 1));
                        (k, f)
                    }),
            );
        }
        // Models are shown as `target/model` when targets differ (report::model_names); two
        // runs of the same target and model are told apart by their input's number.
        let keys: Vec<(String, String)> = models
            .iter()
            .map(|m| (text(m, "target"), text(m, "model")))
            .collect();
        for (i, m) in models.iter_mut().enumerate() {
            if keys.iter().filter(|k| **k == keys[i]).count() > 1 {
                m["model"] = json!(format!("{} #{}", keys[i].1, inputs[i] + 1));
            }
        }
        let findings: Vec<Value> = findings
            .into_iter()
            .map(|(k, mut f)| {
                let renamed = models.iter().zip(&inputs).find(|(m, input)| {
                    **input == k && text(m, "model") == format!("{} #{}", text(&f, "model"), k + 1)
                });
                if let Some((m, _)) = renamed {
                    f["model"] = m["model"].clone();
                }
                f
            })
            .collect();
        let merged = json!({
            "target": joined("target"),
            "base_url": joined("base_url"),
            "api": joined("api"),
            "prompt": joined("prompt"),
            "started_at": joined("started_at"),
            "combined_from": all.iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>(),
            "models": models,
        });
        if let (Some(o), Some(m)) = (out.as_object_mut(), merged.as_object()) {
            for (k, v) in m {
                o.insert(k.clone(), v.clone());
            }
            o.remove("comparison");
            o.remove("command");
            o.remove("run");
            if findings.is_empty() {
                o.remove("findings");
            } else {
                o.insert("findings".into(), Value::Array(findings));
            }
        }
    }
    let default = Criteria::default();
    let judge = criteria.or((n > 1).then_some(&default));
    if let Some(c) = judge {
        let models: Vec<ModelReport> = serde_json::from_value(out["models"].clone())
            .map_err(|e| format!("the reports' models do not parse: {e}"))?;
        let s = select::select(&models, c);
        out["selection"] = serde_json::to_value(s).map_err(|e| e.to_string())?;
        // What it was judged by now (the page draws its limits from this).
        let mut rec = c.record();
        if let Some(old) = out.get("criteria").and_then(|o| o.get("slo")) {
            rec.slo = serde_json::from_value(old.clone()).unwrap_or_default();
        }
        out["criteria"] = serde_json::to_value(rec).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// Removes every level's `samples` (`bench report --no-samples`).
pub fn drop_samples(doc: &mut Value) {
    for m in doc
        .get_mut("models")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        for l in m
            .get_mut("levels")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(o) = l.as_object_mut() {
                o.remove("samples");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::tests::synthetic;

    fn doc(target: &str, models: &[&str]) -> Value {
        let mut r = synthetic();
        r.target = target.into();
        r.models.retain(|m| models.contains(&m.model.as_str()));
        for m in &mut r.models {
            m.target = Some(target.into());
        }
        serde_json::to_value(r).unwrap()
    }

    #[test]
    fn one_report_without_criteria_is_kept_as_it_is() {
        let mut d = doc("local", &["alpha", "beta"]);
        d["findings"] = json!([{"code": "x", "model": "alpha", "level": "8", "message": "m"}]);
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
        let names: Vec<&str> = m["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["model"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["alpha", "alpha", "beta"]);
        assert_eq!(m["models"][0]["target"], "fast");
        assert_eq!(m["models"][2]["target"], "slow");
        assert_eq!(m["target"], "fast, slow");
        assert_eq!(m["combined_from"], json!(["a.json", "b.json"]));
        assert!(m.get("comparison").is_none() && m.get("command").is_none());
        // Judged again with the default weights and no limits: all three ranked.
        let ranked: Vec<&str> = m["selection"]["ranked"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["model"].as_str().unwrap())
            .collect();
        assert_eq!(ranked.len(), 3, "{ranked:?}");
        assert!(m["selection"]["limits"].as_array().unwrap().is_empty());
        // Still a report.
        serde_json::from_value::<crate::bench::report::Report>(m).unwrap();
    }

    #[test]
    fn samples_can_be_left_out() {
        let mut d = doc("local", &["alpha"]);
        d["models"][0]["levels"][0]["samples"] = json!([]);
        drop_samples(&mut d);
        assert!(d["models"][0]["levels"][0].get("samples").is_none());
        assert!(d["models"][0]["levels"][0].get("ttft_s").is_some());
    }

    #[test]
    fn two_runs_of_one_target_are_told_apart_by_their_input() {
        let finding =
            |m: &str| json!([{"code": "long_tail", "model": m, "level": "8", "message": "m"}]);
        let (mut a, mut b) = (doc("local", &["alpha"]), doc("local", &["alpha"]));
        a["findings"] = finding("alpha");
        b["findings"] = finding("alpha");
        let m = combine(vec![("a.json".into(), a), ("b.json".into(), b)], None).unwrap();
        // Every finding names its run, and its model as the table does.
        let f: Vec<(&str, &str)> = m["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["model"].as_str().unwrap(), f["run"].as_str().unwrap()))
            .collect();
        assert_eq!(f, [("alpha #1", "#1"), ("alpha #2", "#2")]);
        let r: crate::bench::report::Report = serde_json::from_value(m.clone()).unwrap();
        let text = crate::render::server_view::render_server(&r, false);
        assert!(
            text.contains("[long_tail] alpha #2 @ 8 (run #2): m"),
            "{text}"
        );
        let names: Vec<&str> = m["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["model"].as_str().unwrap())
            .collect();
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
        assert_eq!(m["selection"]["rejected"].as_array().unwrap().len(), 2);
        assert_eq!(m["selection"]["limits"], json!(["ttft_p95 < 300.0 ms"]));
    }
}
