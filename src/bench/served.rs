//! What answered a level (pure; docs/bench.md, "What answered"): the models its answers named,
//! how many came from another model than the one asked for (`model_mismatch`), the usage audits
//! (the share of audited requests whose usage was off, the median ratio of stated to streamed
//! tokens); and what that means for the run: a model whose answers came from another is marked in
//! every output ([`answered_by`], in [`super::report::model_names`]) and not ranked unless
//! `--rank-substituted` asks for it ([`unrank`]).

use super::criteria::Criteria;
use super::report::{ModelReport, Rejected, Selection};
use super::sample::{Sample, quantile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What answered one level's requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Answered {
    /// Requests by the model their answer named (a level's first 8 names, then `other`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub served_models: BTreeMap<String, u64>,
    /// Requests answered by another model than the one asked for.
    #[serde(default)]
    pub model_mismatch: u64,
    /// Of them, by the model that answered (bounded as `served_models`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mismatched_by: BTreeMap<String, u64>,
    /// Successful requests whose usage was audited.
    #[serde(default)]
    pub usage_audited: u64,
    /// Of them, those whose usage was off beyond the tolerance (`usage_mismatch`).
    #[serde(default)]
    pub usage_mismatch: u64,
    /// `usage_mismatch / usage_audited` (absent without an audit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_mismatch_share: Option<f64>,
    /// The median ratio of the output tokens stated to those streamed, over the audited requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_ratio_p50: Option<f64>,
}

impl Answered {
    /// What a level's samples say; `None` when none named a model or was audited.
    pub fn of(samples: &[Sample]) -> Option<Answered> {
        let mut a = Answered::default();
        let mut seen = Vec::new();
        for s in samples {
            if let Some(m) = &s.served_model {
                let (name, _) = crate::measure::answered::bounded(&mut seen, m);
                if s.model_mismatch {
                    *a.mismatched_by.entry(name.clone()).or_insert(0) += 1;
                }
                *a.served_models.entry(name).or_insert(0) += 1;
            }
            a.model_mismatch += u64::from(s.model_mismatch);
        }
        let mut ratios: Vec<f64> = samples.iter().filter_map(|s| s.usage_ratio).collect();
        a.usage_audited = samples.iter().filter(|s| s.usage_audited).count() as u64;
        a.usage_mismatch = samples.iter().filter(|s| s.usage_mismatch).count() as u64;
        a.usage_mismatch_share =
            (a.usage_audited > 0).then(|| a.usage_mismatch as f64 / a.usage_audited as f64);
        ratios.sort_by(f64::total_cmp);
        a.usage_ratio_p50 = quantile(&ratios, 0.5);
        (!a.served_models.is_empty() || a.usage_audited > 0).then_some(a)
    }
}

/// The models that answered for `m` in its place, by how many of its requests, most first (none:
/// every answer came from the model asked for, or none said).
pub fn substitutes(m: &ModelReport) -> Vec<(String, u64)> {
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for a in m.levels.iter().filter_map(|l| l.answered.as_ref()) {
        for (name, n) in &a.mismatched_by {
            *by.entry(name.clone()).or_insert(0) += n;
        }
    }
    let mut v: Vec<(String, u64)> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// How every output marks a model answered by another: ` [answered by NAME]` (the three most
/// frequent, then `and others`), empty for a model that answered itself.
pub fn answered_by(m: &ModelReport) -> String {
    let subs = substitutes(m);
    if subs.is_empty() {
        return String::new();
    }
    let mut names: Vec<&str> = subs.iter().take(3).map(|(n, _)| n.as_str()).collect();
    if subs.len() > 3 {
        names.push("and others");
    }
    format!(" [answered by {}]", names.join(", "))
}

/// The run's answer, judged by `judge` over the models it may rank: a model answered by another
/// (some request flagged `model_mismatch`) is not ranked unless `--rank-substituted` asks (its
/// figures are another model's), and each selection lists it as rejected with why.
pub fn judged(
    models: &[ModelReport],
    c: &Criteria,
    judge: impl Fn(&[ModelReport], &Criteria) -> (Selection, Option<Selection>),
) -> (Selection, Option<Selection>) {
    let names = super::report::model_names(models);
    let out: Vec<usize> = (0..models.len())
        .filter(|&i| !c.rank_substituted && !substitutes(&models[i]).is_empty())
        .collect();
    if out.is_empty() {
        return judge(models, c);
    }
    let kept: Vec<ModelReport> = models
        .iter()
        .enumerate()
        .filter(|(i, _)| !out.contains(i))
        .map(|(_, m)| m.clone())
        .collect();
    let (mut main, mut other) = judge(&kept, c);
    // The kept models are named as among all of them (`target/model` when targets differ).
    let kept_names = super::report::model_names(&kept);
    let full: Vec<&String> = (0..models.len())
        .filter(|i| !out.contains(i))
        .map(|i| &names[i])
        .collect();
    let rename = |n: &mut String| {
        if let Some(j) = kept_names.iter().position(|k| k == n) {
            n.clone_from(full[j]);
        }
    };
    for s in std::iter::once(&mut main).chain(other.as_mut()) {
        s.ranked.iter_mut().for_each(|r| rename(&mut r.model));
        s.rejected.iter_mut().for_each(|r| rename(&mut r.model));
        for &i in &out {
            let m = &models[i];
            let (mismatched, requests) = m.levels.iter().fold((0, 0), |(a, b), l| {
                (
                    a + l.answered.as_ref().map_or(0, |x| x.model_mismatch),
                    b + l.requests,
                )
            });
            s.rejected.push(Rejected {
                model: names[i].clone(),
                reasons: vec![format!(
                    "answered by another model ({mismatched} of {requests} requests flagged model_mismatch): not ranked, its figures are another model's (--rank-substituted ranks it)"
                )],
                passes_at: None,
                misses: Vec::new(),
                closest: None,
                score: None,
            });
        }
    }
    (main, other)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(served: Option<&str>, mismatch: bool, ratio: Option<f64>) -> Sample {
        Sample {
            served_model: served.map(str::to_owned),
            model_mismatch: mismatch,
            usage_audited: ratio.is_some(),
            usage_mismatch: ratio.is_some_and(|r| r > 1.05),
            usage_ratio: ratio,
            ..Sample::default()
        }
    }

    /// Issue 43 items 3 and 5: a level counts the models that answered, another model's
    /// answers by that model, the share of audited requests whose usage was off and the median
    /// ratio; a level nobody named a model at and nothing audited has nothing to say.
    #[test]
    fn a_level_counts_what_answered() {
        let samples = [
            sample(Some("m-2024"), false, Some(1.0)),
            sample(Some("cheap"), true, Some(2.0)),
            sample(Some("cheap"), true, Some(2.0)),
            sample(None, false, None),
        ];
        let a = Answered::of(&samples).unwrap();
        assert_eq!(
            a.served_models,
            BTreeMap::from([("cheap".into(), 2), ("m-2024".into(), 1)])
        );
        assert_eq!(
            (a.model_mismatch, a.mismatched_by.get("cheap").copied()),
            (2, Some(2))
        );
        assert_eq!((a.usage_audited, a.usage_mismatch), (3, 2));
        assert_eq!(a.usage_mismatch_share, Some(2.0 / 3.0));
        assert_eq!(a.usage_ratio_p50, Some(2.0));
        assert_eq!(Answered::of(&[sample(None, false, None)]), None);
        // A new name on every request: bounded.
        let hostile: Vec<Sample> = (0..100)
            .map(|i| sample(Some(&format!("m{i}")), true, None))
            .collect();
        let a = Answered::of(&hostile).unwrap();
        assert_eq!(
            a.served_models.len(),
            crate::measure::answered::MAX_LABEL_VALUES + 1
        );
        assert_eq!(a.served_models.get("other"), Some(&92));
    }
}
