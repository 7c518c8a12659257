//! One level's scrapes folded into its `server` block (pure, time passed in).
//!
//! A level has a scrape right before it, scrapes every interval while it runs, and one right
//! after it. Gauges: mean and max over the scrapes taken while it ran. Counters: the exact delta
//! from the scrape before to the scrape after, over the level's wall time (nothing of the bench
//! runs between those scrapes but the level); ratios of counters also their highest value between
//! consecutive scrapes.
//! Histograms: the bucket deltas before → after. A signal that could not be computed is absent,
//! never 0.

use super::expo::Sample;
use super::signals::{Across, Matcher, Rule, Signal};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The label every merged sample carries: the index of the endpoint it came from, so series of
/// two endpoints never mix in a counter delta.
pub const ENDPOINT_LABEL: &str = "__endpoint";

/// One scrape of every endpoint at one instant (samples merged, each tagged with
/// [`ENDPOINT_LABEL`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// When, s after the level's start (negative before it).
    pub at_s: f64,
    /// The samples of the endpoints that answered.
    pub samples: Vec<Sample>,
}

/// What was scraped around and during one level.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LevelScrapes {
    /// Right before the level.
    pub before: Option<Snapshot>,
    /// While it ran.
    pub during: Vec<Snapshot>,
    /// Right after it.
    pub after: Option<Snapshot>,
    /// Endpoint scrapes attempted.
    pub scrapes: u64,
    /// Of those, failed (down, slow, too large, not an exposition, not 200).
    pub scrape_errors: u64,
    /// The first failure of each endpoint (at most 8; secrets redacted), for the level's warning
    /// line.
    pub errors: Vec<String>,
}

/// Mean and max of one GPU's value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanMax {
    /// Mean over the level's scrapes.
    pub mean: f64,
    /// Largest.
    pub max: f64,
}

/// One signal over a level: gauges and rates have `mean`/`max`, histograms `p50`/`p95`/`count`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SignalStats {
    /// Gauges: the mean during the level. Counters: the rate over the level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    /// Gauges: the largest value seen. Counter ratios (cache hits, CPU busy): the highest between
    /// consecutive scrapes. Counter rates have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Histograms: the median of the level's observations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    /// Histograms: the 95th percentile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95: Option<f64>,
    /// Histograms: observations during the level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<f64>,
    /// Per GPU (DCGM's `gpu` label), when the signal is per GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_gpu: Option<BTreeMap<String, MeanMax>>,
}

/// A level's `server` block: the signals collected, and how the scraping went.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ServerLevel {
    /// The signals, by name (only those collected).
    #[serde(flatten)]
    pub signals: BTreeMap<String, SignalStats>,
    /// Endpoint scrapes attempted around and during the level.
    pub scrapes: u64,
    /// Of those, failed.
    pub scrape_errors: u64,
    /// What the reader of the block must know (no scrape fell inside the level, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ServerLevel {
    /// A signal's mean, if collected.
    pub fn mean(&self, name: &str) -> Option<f64> {
        self.signals.get(name).and_then(|s| s.mean)
    }

    /// A signal's max, if collected.
    pub fn max(&self, name: &str) -> Option<f64> {
        self.signals.get(name).and_then(|s| s.max)
    }
}

fn matches(s: &Sample, m: &Matcher) -> bool {
    s.name == m.metric
        && m.labels
            .iter()
            .all(|(k, v)| s.label(k).is_some_and(|x| x == v))
}

/// A series' identity: its labels, sorted (the name is the matcher's).
fn series_key(s: &Sample) -> Vec<(String, String)> {
    let mut l = s.labels.clone();
    l.sort();
    l
}

fn series<'a>(snap: &'a Snapshot, m: &'a Matcher) -> impl Iterator<Item = &'a Sample> {
    snap.samples
        .iter()
        .filter(move |s| matches(s, m) && !s.value.is_nan())
}

fn combine(values: &[f64], across: Across) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let sum: f64 = values.iter().sum();
    Some(match across {
        Across::Sum => sum,
        Across::Mean => sum / values.len() as f64,
    })
}

fn mean_max(values: &[f64]) -> Option<MeanMax> {
    if values.is_empty() {
        return None;
    }
    Some(MeanMax {
        mean: values.iter().sum::<f64>() / values.len() as f64,
        max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// The GPU a sample belongs to: its `gpu` label, prefixed with the endpoint when the level has
/// several endpoints.
fn gpu_key(s: &Sample, endpoints: usize) -> String {
    let gpu = s.label("gpu").unwrap_or("?");
    if endpoints > 1 {
        format!("{}/{gpu}", s.label(ENDPOINT_LABEL).unwrap_or("?"))
    } else {
        gpu.to_owned()
    }
}

fn endpoint_count(snaps: &[&Snapshot]) -> usize {
    let mut seen: Vec<&str> = Vec::new();
    for s in snaps.iter().flat_map(|s| &s.samples) {
        if let Some(e) = s.label(ENDPOINT_LABEL)
            && !seen.contains(&e)
        {
            seen.push(e);
        }
    }
    seen.len()
}

/// Per-snapshot values and, per GPU, their values.
type PerSnap = (Vec<f64>, BTreeMap<String, Vec<f64>>);

fn gauge_stats(l: &LevelScrapes, rule: &Rule) -> Option<SignalStats> {
    let snaps: Vec<&Snapshot> = l.during.iter().collect();
    let endpoints = endpoint_count(&snaps);
    let mut per: PerSnap = (Vec::new(), BTreeMap::new());
    let gpu_wanted = matches!(
        rule,
        Rule::Gauge { per_gpu: true, .. } | Rule::UsedRatio { .. }
    );
    for snap in &snaps {
        let mut gpus: Vec<(String, f64)> = Vec::new();
        let value = match rule {
            Rule::Gauge {
                of, scale, across, ..
            } => {
                let v: Vec<f64> = series(snap, of).map(|s| s.value * scale).collect();
                gpus.extend(series(snap, of).map(|s| (gpu_key(s, endpoints), s.value * scale)));
                combine(&v, *across)
            }
            Rule::UsedRatio { used, free } => {
                for u in series(snap, used) {
                    let key = series_key(u);
                    if let Some(f) = series(snap, free).find(|f| series_key(f) == key) {
                        let total = u.value + f.value;
                        if total > 0.0 {
                            gpus.push((gpu_key(u, endpoints), u.value / total));
                        }
                    }
                }
                let v: Vec<f64> = gpus.iter().map(|g| g.1).collect();
                combine(&v, Across::Mean)
            }
            Rule::OneMinusRatio { part, whole } => {
                let p: f64 = series(snap, part).map(|s| s.value).sum();
                let w: f64 = series(snap, whole).map(|s| s.value).sum();
                (w > 0.0 && series(snap, part).next().is_some()).then(|| 1.0 - p / w)
            }
            _ => None,
        };
        if let Some(v) = value {
            per.0.push(v);
            if gpu_wanted {
                for (k, g) in gpus {
                    per.1.entry(k).or_default().push(g);
                }
            }
        }
    }
    let mm = mean_max(&per.0)?;
    let per_gpu: BTreeMap<String, MeanMax> = per
        .1
        .iter()
        .filter_map(|(k, v)| mean_max(v).map(|m| (k.clone(), m)))
        .collect();
    Some(SignalStats {
        mean: Some(mm.mean),
        max: Some(mm.max),
        per_gpu: (gpu_wanted && !per_gpu.is_empty()).then_some(per_gpu),
        ..SignalStats::default()
    })
}

/// The increase of a counter between two snapshots: per series present in both, a reset (a
/// lower value) counts the new value, as Prometheus' `increase` does. `None` when no series is
/// in both.
fn delta(a: &Snapshot, b: &Snapshot, m: &Matcher) -> Option<f64> {
    let before: BTreeMap<Vec<(String, String)>, f64> =
        series(a, m).map(|s| (series_key(s), s.value)).collect();
    let mut total = None;
    for s in series(b, m) {
        if let Some(&v0) = before.get(&series_key(s)) {
            let d = if s.value >= v0 { s.value - v0 } else { s.value };
            *total.get_or_insert(0.0) += d;
        }
    }
    total
}

/// The snapshots in time order, before and after included.
fn timeline(l: &LevelScrapes) -> Vec<&Snapshot> {
    let mut v: Vec<&Snapshot> = l.before.iter().collect();
    v.extend(l.during.iter());
    v.extend(l.after.iter());
    v
}

fn counter_stats(l: &LevelScrapes, of: &Matcher, wall_s: f64) -> Option<SignalStats> {
    let (a, b) = (l.before.as_ref()?, l.after.as_ref()?);
    let d = delta(a, b, of)?;
    if wall_s <= 0.0 {
        return None;
    }
    // No max: servers such as llama.cpp add a request's tokens when it ends, so the rate between
    // two scrapes is a burst, not a rate.
    Some(SignalStats {
        mean: Some(d / wall_s),
        ..SignalStats::default()
    })
}

fn ratio_between(
    a: &Snapshot,
    b: &Snapshot,
    num: &Matcher,
    den: &[Matcher],
    one_minus: bool,
) -> Option<f64> {
    let n = delta(a, b, num)?;
    let d: f64 = den.iter().filter_map(|m| delta(a, b, m)).sum();
    if d <= 0.0 {
        return None;
    }
    let r = n / d;
    Some(if one_minus { 1.0 - r } else { r })
}

fn counter_ratio_stats(
    l: &LevelScrapes,
    num: &Matcher,
    den: &[Matcher],
    one_minus: bool,
) -> Option<SignalStats> {
    let (a, b) = (l.before.as_ref()?, l.after.as_ref()?);
    let mean = ratio_between(a, b, num, den, one_minus)?;
    let t = timeline(l);
    let max = t
        .windows(2)
        .filter_map(|w| ratio_between(w[0], w[1], num, den, one_minus))
        .reduce(f64::max);
    Some(SignalStats {
        mean: Some(mean),
        max,
        ..SignalStats::default()
    })
}

/// The `q`-quantile of cumulative buckets `(le, count)` sorted by `le`, as Prometheus'
/// `histogram_quantile`: linear within the bucket, the lower bound of the first bucket 0 (when
/// its bound is positive), the highest finite bound for ranks in the `+Inf` bucket.
pub fn bucket_quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 || buckets.last()?.0 != f64::INFINITY {
        return None;
    }
    let rank = q * total;
    let mut prev_le = 0.0_f64;
    let mut prev_count = 0.0;
    for (i, &(le, count)) in buckets.iter().enumerate() {
        if count >= rank && count > prev_count {
            if le == f64::INFINITY {
                return Some(if i == 0 { f64::NAN } else { prev_le });
            }
            let lower = if i == 0 && le <= 0.0 { le } else { prev_le };
            return Some(lower + (le - lower) * (rank - prev_count) / (count - prev_count));
        }
        prev_le = le;
        prev_count = count;
    }
    Some(prev_le)
}

fn histogram_stats(l: &LevelScrapes, of: &Matcher) -> Option<SignalStats> {
    let (a, b) = (l.before.as_ref()?, l.after.as_ref()?);
    let bucket = Matcher {
        metric: format!("{}_bucket", of.metric),
        labels: of.labels.clone(),
    };
    let before: BTreeMap<Vec<(String, String)>, f64> = series(a, &bucket)
        .map(|s| (series_key(s), s.value))
        .collect();
    // Sum the per-series deltas by bucket bound.
    let mut by_le: Vec<(f64, f64)> = Vec::new();
    for s in series(b, &bucket) {
        let Some(le) = s.label("le").and_then(|x| match x {
            "+Inf" | "Inf" => Some(f64::INFINITY),
            _ => x.parse::<f64>().ok(),
        }) else {
            continue;
        };
        let Some(&v0) = before.get(&series_key(s)) else {
            continue;
        };
        let d = if s.value >= v0 { s.value - v0 } else { s.value };
        match by_le.iter_mut().find(|(x, _)| *x == le) {
            Some(e) => e.1 += d,
            None => by_le.push((le, d)),
        }
    }
    by_le.sort_by(|x, y| x.0.total_cmp(&y.0));
    let count = by_le.last().map(|x| x.1)?;
    if count <= 0.0 {
        return None;
    }
    Some(SignalStats {
        p50: bucket_quantile(&by_le, 0.50),
        p95: bucket_quantile(&by_le, 0.95),
        count: Some(count),
        ..SignalStats::default()
    })
}

fn present(l: &LevelScrapes, rule: &Rule) -> bool {
    let key = rule.key_metric();
    let bucket = format!("{key}_bucket");
    timeline(l).iter().any(|s| {
        s.samples
            .iter()
            .any(|x| x.name == key || (matches!(rule, Rule::Histogram { .. }) && x.name == bucket))
    })
}

/// Keeps, of series labelled `model_name` (vLLM, SGLang), only the benched model's, when the
/// server labels it so (the probes send the served name): a server serving two models then
/// counts one. Without a match nothing is dropped (a different served name, or no such label).
pub fn only_model(l: &mut LevelScrapes, model: &str) {
    let matched = timeline(l).iter().any(|s| {
        s.samples
            .iter()
            .any(|x| x.label("model_name") == Some(model))
    });
    if !matched {
        return;
    }
    let keep = |s: &mut Snapshot| {
        s.samples
            .retain(|x| x.label("model_name").is_none_or(|m| m == model));
    };
    l.before.iter_mut().for_each(keep);
    l.during.iter_mut().for_each(keep);
    l.after.iter_mut().for_each(keep);
}

/// Folds one level's scrapes: each signal by the first of its rules whose metric appears.
/// `wall_s` is the level's wall time (the divisor of counter rates, as of the client's
/// aggregate tokens/s).
pub fn fold(l: &LevelScrapes, signals: &[Signal], wall_s: f64) -> ServerLevel {
    let mut out = ServerLevel {
        scrapes: l.scrapes,
        scrape_errors: l.scrape_errors,
        ..ServerLevel::default()
    };
    for sig in signals {
        let Some(rule) = sig.rules.iter().find(|r| present(l, r)) else {
            continue;
        };
        let stats = match rule {
            Rule::Gauge { .. } | Rule::UsedRatio { .. } | Rule::OneMinusRatio { .. } => {
                gauge_stats(l, rule)
            }
            Rule::Counter { of } => counter_stats(l, of, wall_s),
            Rule::CounterRatio {
                num,
                den,
                one_minus,
            } => counter_ratio_stats(l, num, den, *one_minus),
            Rule::Histogram { of } => histogram_stats(l, of),
        };
        if let Some(s) = stats {
            out.signals.insert(sig.name.clone(), s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servermetrics::expo::parse;
    use crate::servermetrics::signals::known;

    fn snap(at_s: f64, text: &str) -> Snapshot {
        let mut samples = parse(text).unwrap();
        for s in &mut samples {
            s.labels.push((ENDPOINT_LABEL.into(), "0".into()));
        }
        Snapshot { at_s, samples }
    }

    #[test]
    fn gauges_counters_and_ratios_of_llamacpp() {
        let t = |proc: u32, def: u32, pred: u32, prompt: u32, cached: u32| {
            format!(
                "llamacpp:requests_processing {proc}\nllamacpp:requests_deferred {def}\n\
                 llamacpp:tokens_predicted_total {pred}\nllamacpp:prompt_tokens_total {prompt}\n\
                 llamacpp:prompt_tokens_cached_total {cached}\n"
            )
        };
        let l = LevelScrapes {
            before: Some(snap(-0.01, &t(0, 0, 100, 50, 0))),
            during: vec![
                snap(1.0, &t(2, 2, 150, 60, 20)),
                snap(2.0, &t(2, 1, 250, 70, 30)),
            ],
            after: Some(snap(2.5, &t(0, 0, 300, 80, 30))),
            scrapes: 4,
            scrape_errors: 0,
            errors: vec![],
        };
        let s = fold(&l, &known(), 2.5);
        let run = &s.signals["requests_running"];
        assert_eq!((run.mean, run.max), (Some(2.0), Some(2.0)));
        let wait = &s.signals["requests_waiting"];
        assert_eq!((wait.mean, wait.max), (Some(1.5), Some(2.0)));
        let tokens = &s.signals["generation_tokens_per_s"];
        assert_eq!(tokens.mean, Some(200.0 / 2.5));
        assert_eq!(tokens.max, None);
        // 30 cached of 30 + 30 prompt tokens.
        assert_eq!(s.signals["prompt_cache_hit_ratio"].mean, Some(0.5));
        assert!(!s.signals.contains_key("gpu_utilization"), "absent, not 0");
        assert_eq!((s.scrapes, s.scrape_errors), (4, 0));
    }

    #[test]
    fn counter_resets_count_the_new_value_and_missing_scrapes_give_nothing() {
        let l = LevelScrapes {
            before: Some(snap(0.0, "vllm:generation_tokens_total 1000\n")),
            during: vec![],
            after: Some(snap(2.0, "vllm:generation_tokens_total 40\n")),
            ..LevelScrapes::default()
        };
        let s = fold(&l, &known(), 2.0);
        assert_eq!(s.signals["generation_tokens_per_s"].mean, Some(20.0));
        let no_after = LevelScrapes {
            after: None,
            ..l.clone()
        };
        assert!(fold(&no_after, &known(), 2.0).signals.is_empty());
        // A gauge without a scrape during the level is absent too.
        let l = LevelScrapes {
            before: Some(snap(0.0, "vllm:num_requests_running 3\n")),
            after: Some(snap(1.0, "vllm:num_requests_running 3\n")),
            ..LevelScrapes::default()
        };
        assert!(fold(&l, &known(), 1.0).signals.is_empty());
    }

    #[test]
    fn quantiles_from_bucket_deltas() {
        // Prometheus' histogram_quantile on [(0.1, 10), (0.5, 20), (1, 40), (+Inf, 40)]:
        // p50 rank 20 → 0.5; p95 rank 38 → 0.5 + 0.5 * 18/20 = 0.95.
        let b = [(0.1, 10.0), (0.5, 20.0), (1.0, 40.0), (f64::INFINITY, 40.0)];
        assert_eq!(bucket_quantile(&b, 0.5), Some(0.5));
        assert!((bucket_quantile(&b, 0.95).unwrap() - 0.95).abs() < 1e-12);
        // Ranks in +Inf get the highest finite bound.
        let b = [(1.0, 1.0), (f64::INFINITY, 10.0)];
        assert_eq!(bucket_quantile(&b, 0.95), Some(1.0));
        assert_eq!(
            bucket_quantile(&[(1.0, 0.0), (f64::INFINITY, 0.0)], 0.5),
            None
        );
        assert_eq!(bucket_quantile(&[(1.0, 3.0)], 0.5), None, "no +Inf bucket");
        let h = |n1: u32, n2: u32, n3: u32| {
            format!(
                "vllm:time_to_first_token_seconds_bucket{{le=\"0.1\",model_name=\"m\"}} {n1}\n\
                 vllm:time_to_first_token_seconds_bucket{{le=\"0.5\",model_name=\"m\"}} {n2}\n\
                 vllm:time_to_first_token_seconds_bucket{{le=\"+Inf\",model_name=\"m\"}} {n3}\n"
            )
        };
        let l = LevelScrapes {
            before: Some(snap(0.0, &h(5, 5, 5))),
            after: Some(snap(1.0, &h(15, 25, 25))),
            ..LevelScrapes::default()
        };
        let s = &fold(&l, &known(), 1.0).signals["server_ttft_s"];
        // Deltas: 10 in (0, 0.1], 10 in (0.1, 0.5]: p50 = 0.1, p95 = 0.1 + 0.4 * 9/10.
        assert_eq!(s.count, Some(20.0));
        assert!((s.p50.unwrap() - 0.1).abs() < 1e-12);
        assert!((s.p95.unwrap() - 0.46).abs() < 1e-12);
    }

    #[test]
    fn two_models_on_one_server_count_apart() {
        let t = |a: u32, b: u32| {
            format!(
                "vllm:num_requests_running{{model_name=\"a\"}} {a}\nvllm:num_requests_running{{model_name=\"b\"}} {b}\nDCGM_FI_DEV_GPU_UTIL{{gpu=\"0\"}} 50\n"
            )
        };
        let l = LevelScrapes {
            before: Some(snap(0.0, &t(0, 0))),
            during: vec![snap(0.5, &t(3, 5))],
            after: Some(snap(1.0, &t(0, 0))),
            ..LevelScrapes::default()
        };
        assert_eq!(fold(&l, &known(), 1.0).mean("requests_running"), Some(8.0));
        let mut a = l.clone();
        only_model(&mut a, "a");
        let s = fold(&a, &known(), 1.0);
        assert_eq!(s.mean("requests_running"), Some(3.0));
        assert_eq!(
            s.mean("gpu_utilization"),
            Some(0.5),
            "unlabelled series stay"
        );
        let mut other = l.clone();
        only_model(&mut other, "served-as-something-else");
        assert_eq!(
            fold(&other, &known(), 1.0).mean("requests_running"),
            Some(8.0)
        );
    }

    #[test]
    fn server_level_json_shape() {
        let mut s = ServerLevel {
            scrapes: 3,
            scrape_errors: 1,
            ..ServerLevel::default()
        };
        s.signals.insert(
            "gpu_utilization".into(),
            SignalStats {
                mean: Some(0.5),
                max: Some(0.75),
                ..SignalStats::default()
            },
        );
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"gpu_utilization": {"mean": 0.5, "max": 0.75}, "scrapes": 3, "scrape_errors": 1})
        );
        let back: ServerLevel = serde_json::from_value(j).unwrap();
        assert_eq!(back, s);
    }
}
