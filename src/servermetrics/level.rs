//! One level's scrapes folded into its `server` block (pure, time passed in).
//!
//! A level has a scrape right before it, scrapes every interval while it runs, and one right
//! after it. Gauges: mean and max over the scrapes taken while it ran. Counters: the exact delta
//! from the scrape before to the scrape after, over the level's wall time (nothing of the bench
//! runs between those scrapes but the level); ratios of counters also their highest value between
//! consecutive scrapes.
//! Histograms: the bucket deltas before → after. A signal that could not be computed is absent,
//! never 0.

use super::expo::Reading;
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
    pub samples: Vec<Reading>,
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
    /// Samples left out as not data (not finite, negative, implausibly large, a ratio above
    /// 100%): each counted here and named in `notes`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub invalid_samples: u64,
    /// What the reader of the block must know (no scrape fell inside the level, a sample or a
    /// signal left out and why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The energy the level took, from the DCGM energy counters, DCGM power × time, or RAPL
    /// ([`super::energy`]); absent when none of them was scraped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<super::energy::EnergyReading>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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

fn matches(s: &Reading, m: &Matcher) -> bool {
    s.name == m.metric
        && m.labels
            .iter()
            .all(|(k, v)| s.label(k).is_some_and(|x| x == v))
}

/// The labels of a series, sorted, borrowed from its sample.
type SeriesKey<'a> = Vec<(&'a str, &'a str)>;

/// A series' identity: its labels, sorted (the name is the matcher's).
fn series_key(s: &Reading) -> Vec<(&str, &str)> {
    let mut l: Vec<(&str, &str)> = s
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    l.sort_unstable();
    l
}

fn series<'a>(snap: &'a Snapshot, m: &'a Matcher) -> impl Iterator<Item = &'a Reading> {
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

/// Running mean and max of one gauge (or one GPU's share of it).
#[derive(Debug, Clone, Copy)]
struct Running {
    sum: f64,
    n: usize,
    max: f64,
}

impl Default for Running {
    fn default() -> Self {
        Running {
            sum: 0.0,
            n: 0,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Running {
    fn add(&mut self, v: f64) {
        self.sum += v;
        self.n += 1;
        self.max = self.max.max(v);
    }

    fn get(&self) -> Option<MeanMax> {
        (self.n > 0).then(|| MeanMax {
            mean: self.sum / self.n as f64,
            max: self.max,
        })
    }
}

/// A gauge-like rule's statistics over the level so far: per scrape, and per GPU (keyed by the
/// endpoint and the `gpu` label; the shown key drops the endpoint when there is one).
#[derive(Debug, Clone, Default)]
struct GaugeAcc {
    all: Running,
    per_gpu: BTreeMap<GpuKey, Running>,
}

/// A GPU of a level: its endpoint and its `gpu` label.
type GpuKey = (String, String);

/// The value of a gauge-like rule in one scrape taken during the level, and per GPU.
fn gauge_value(snap: &Snapshot, rule: &Rule) -> (Option<f64>, Vec<(GpuKey, f64)>) {
    let key = |s: &Reading| {
        (
            s.label(ENDPOINT_LABEL).unwrap_or("?").to_owned(),
            s.label("gpu").unwrap_or("?").to_owned(),
        )
    };
    let mut gpus = Vec::new();
    let value = match rule {
        Rule::Gauge {
            of, scale, across, ..
        } => {
            let v: Vec<f64> = series(snap, of).map(|s| s.value * scale).collect();
            gpus.extend(series(snap, of).map(|s| (key(s), s.value * scale)));
            combine(&v, *across)
        }
        Rule::UsedRatio { used, free } => {
            for u in series(snap, used) {
                let k = series_key(u);
                if let Some(f) = series(snap, free).find(|f| series_key(f) == k) {
                    let total = u.value + f.value;
                    if total > 0.0 {
                        gpus.push((key(u), u.value / total));
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
    (value, gpus)
}

/// The increase of a counter between two snapshots: per series present in both, a reset (a
/// lower value) counts the new value, as Prometheus' `increase` does. `None` when no series is
/// in both.
fn delta(a: &Snapshot, b: &Snapshot, m: &Matcher) -> Option<f64> {
    let before: BTreeMap<Vec<(&str, &str)>, f64> =
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
                return (i > 0).then_some(prev_le);
            }
            let lower = if i == 0 && le <= 0.0 { le } else { prev_le };
            return Some(lower + (le - lower) * (rank - prev_count) / (count - prev_count));
        }
        prev_le = le;
        prev_count = count;
    }
    Some(prev_le)
}

fn le_of(s: &Reading) -> Option<f64> {
    s.label("le").and_then(|x| match x {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        _ => x.parse::<f64>().ok(),
    })
}

/// Whether every series of a histogram in `snap` has cumulative counts that never decrease
/// with `le` (a histogram whose buckets decrease is not one).
fn buckets_cumulative(snap: &Snapshot, bucket: &Matcher) -> bool {
    let mut groups: BTreeMap<SeriesKey<'_>, Vec<(f64, f64)>> = BTreeMap::new();
    for s in series(snap, bucket) {
        let Some(le) = le_of(s) else { continue };
        let mut key = series_key(s);
        key.retain(|(k, _)| *k != "le");
        groups.entry(key).or_default().push((le, s.value));
    }
    groups.values_mut().all(|b| {
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        b.windows(2).all(|w| w[1].1 >= w[0].1)
    })
}

fn histogram_stats(a: &Snapshot, b: &Snapshot, of: &Matcher) -> Option<SignalStats> {
    let bucket = Matcher {
        metric: format!("{}_bucket", of.metric),
        labels: of.labels.clone(),
    };
    let before: BTreeMap<Vec<(&str, &str)>, f64> = series(a, &bucket)
        .map(|s| (series_key(s), s.value))
        .collect();
    // Sum the per-series deltas by bucket bound.
    let mut by_le: Vec<(f64, f64)> = Vec::new();
    for s in series(b, &bucket) {
        let Some(le) = le_of(s) else {
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

/// Keeps, of series labelled `model_name` (vLLM, SGLang), only the benched model's, when the
/// server labels it so (the probes send the served name): a server serving two models then
/// counts one. Without a match nothing is dropped (a different served name, or no such label).
pub fn only_model(l: &mut LevelScrapes, model: &str) {
    let matched = std::iter::once(&l.before)
        .chain(std::iter::once(&l.after))
        .flatten()
        .chain(l.during.iter())
        .any(|s| {
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

/// Where a snapshot stands in its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Right before the level.
    Before,
    /// While it runs.
    During,
    /// Right after it.
    After,
}

/// One level's scrapes folded as they come (pure): what is kept does not grow with the level's
/// length. The scrape right before the level (for the counters' and histograms' deltas) and the
/// last one (for ratios between consecutive scrapes, and counters that fall) are kept; every
/// scrape taken during the level goes into the gauges' running statistics and is dropped.
///
/// Samples that are not data (not finite, negative, implausibly large, a ratio above 100%) are
/// left out, counted and named; a histogram whose buckets decrease, or a counter that falls more
/// than once in a level, gives no signal and says why. No finding can be drawn from them.
#[derive(Debug, Clone)]
pub struct LevelFold {
    signals: Vec<Signal>,
    model: Option<String>,
    /// Per signal, per rule: its metric was in some scrape.
    present: Vec<Vec<bool>>,
    /// Per signal, per rule: gauge statistics (gauge-like rules).
    gauges: Vec<Vec<GaugeAcc>>,
    /// Per signal, per rule: the highest counter ratio between consecutive scrapes.
    ratio_max: Vec<Vec<Option<f64>>>,
    /// Counter series (metric, labels) that fell between consecutive scrapes, and how often.
    falls: BTreeMap<(String, Vec<(String, String)>), u32>,
    before: Option<Snapshot>,
    last: Option<Snapshot>,
    after: Option<Snapshot>,
    /// Scrapes that fell inside the level.
    during: usize,
    /// Endpoints seen in the scrapes during the level (per-GPU keys name the endpoint when
    /// there are several).
    endpoints: BTreeMap<String, ()>,
    /// Samples left out, by (metric, why).
    invalid: BTreeMap<(String, &'static str), u64>,
    /// The server's requests running and waiting in the scrape right before the level.
    busy_before: Vec<(&'static str, f64)>,
    /// The level's energy, scrape by scrape.
    energy: super::energy::EnergyFold,
    /// Endpoint scrapes attempted, and failed.
    pub scrapes: u64,
    /// Of those, failed.
    pub scrape_errors: u64,
    /// The first failure of each endpoint (at most 8; secrets redacted).
    pub errors: Vec<String>,
}

/// What a folded level gives: its `server` block, the scrape errors to show, how many scrapes
/// fell inside it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Folded {
    /// The `server` block.
    pub server: ServerLevel,
    /// The first failure of each endpoint.
    pub errors: Vec<String>,
    /// Scrapes taken while the level ran.
    pub during: usize,
}

impl LevelFold {
    /// A level of `signals`; `model`: the benched model's served name (series of other
    /// `model_name`s are left out, [`only_model`]).
    pub fn new(signals: &[Signal], model: Option<&str>) -> Self {
        fn per_rule<T: Clone>(signals: &[Signal], v: T) -> Vec<Vec<T>> {
            signals
                .iter()
                .map(|s| vec![v.clone(); s.rules.len()])
                .collect()
        }
        LevelFold {
            signals: signals.to_vec(),
            model: model.map(str::to_owned),
            present: per_rule(signals, false),
            gauges: per_rule(signals, GaugeAcc::default()),
            ratio_max: per_rule(signals, None),
            falls: BTreeMap::new(),
            before: None,
            last: None,
            after: None,
            during: 0,
            endpoints: BTreeMap::new(),
            invalid: BTreeMap::new(),
            busy_before: Vec::new(),
            energy: super::energy::EnergyFold::default(),
            scrapes: 0,
            scrape_errors: 0,
            errors: Vec::new(),
        }
    }

    /// Takes one scrape of every endpoint (`phase`: before, during or after the level).
    pub fn add(&mut self, phase: Phase, mut snap: Snapshot) {
        if let Some(m) = &self.model
            && snap
                .samples
                .iter()
                .any(|x| x.label("model_name") == Some(m.as_str()))
        {
            snap.samples
                .retain(|x| x.label("model_name").is_none_or(|n| n == m));
        }
        let left_out = &mut self.invalid;
        snap.samples
            .retain(|s| match crate::plausible::invalid(s.value) {
                Some(why) => {
                    *left_out.entry((s.name.clone(), why)).or_insert(0) += 1;
                    false
                }
                None => true,
            });
        self.energy.add(phase, &snap);
        for (si, sig) in self.signals.iter().enumerate() {
            for (ri, rule) in sig.rules.iter().enumerate() {
                let key = rule.key_metric();
                let bucket = format!("{key}_bucket");
                if snap.samples.iter().any(|x| {
                    x.name == key || (matches!(rule, Rule::Histogram { .. }) && x.name == bucket)
                }) {
                    self.present[si][ri] = true;
                }
            }
        }
        if phase == Phase::During {
            self.during += 1;
            for s in &snap.samples {
                if let Some(e) = s.label(ENDPOINT_LABEL) {
                    self.endpoints.entry(e.to_owned()).or_default();
                }
            }
            self.gauge_scrape(&snap);
        }
        if let Some(prev) = self.last.take() {
            self.between(&prev, &snap);
        }
        if phase == Phase::Before {
            self.busy_before = self.queue(&snap);
        }
        match phase {
            Phase::Before => self.before = Some(snap.clone()),
            Phase::After => self.after = Some(snap.clone()),
            Phase::During => {}
        }
        self.last = Some(snap);
    }

    /// The server's requests running and waiting in `snap` (those it reports).
    fn queue(&self, snap: &Snapshot) -> Vec<(&'static str, f64)> {
        let mut out = Vec::new();
        for (name, shown) in [
            ("requests_running", "running"),
            ("requests_waiting", "waiting"),
        ] {
            let value = self
                .signals
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.rules.iter().find_map(|r| gauge_value(snap, r).0));
            if let Some(v) = value {
                out.push((shown, v));
            }
        }
        out
    }

    /// A scrape during the level into the gauges' statistics (a ratio above 100% left out).
    fn gauge_scrape(&mut self, snap: &Snapshot) {
        for (si, sig) in self.signals.iter().enumerate() {
            let ratio = sig.name.ends_with("_ratio") || sig.name.ends_with("_utilization");
            for (ri, rule) in sig.rules.iter().enumerate() {
                if !matches!(
                    rule,
                    Rule::Gauge { .. } | Rule::UsedRatio { .. } | Rule::OneMinusRatio { .. }
                ) {
                    continue;
                }
                let (value, gpus) = gauge_value(snap, rule);
                let Some(v) = value else { continue };
                if ratio && v > 1.0 + 1e-9 {
                    let what = (rule.key_metric().to_owned(), "a ratio above 100%");
                    *self.invalid.entry(what).or_insert(0) += 1;
                    continue;
                }
                let acc = &mut self.gauges[si][ri];
                acc.all.add(v);
                if matches!(
                    rule,
                    Rule::Gauge { per_gpu: true, .. } | Rule::UsedRatio { .. }
                ) {
                    for (k, g) in gpus {
                        acc.per_gpu.entry(k).or_default().add(g);
                    }
                }
            }
        }
    }

    /// Two consecutive scrapes: counters that fell, and the counter ratios between them.
    fn between(&mut self, a: &Snapshot, b: &Snapshot) {
        for (si, sig) in self.signals.iter().enumerate() {
            for (ri, rule) in sig.rules.iter().enumerate() {
                let counters: Vec<&Matcher> = match rule {
                    Rule::Counter { of } => vec![of],
                    Rule::CounterRatio { num, den, .. } => {
                        std::iter::once(num).chain(den).collect()
                    }
                    _ => continue,
                };
                for m in counters {
                    let before: BTreeMap<Vec<(&str, &str)>, f64> =
                        series(a, m).map(|s| (series_key(s), s.value)).collect();
                    for s in series(b, m) {
                        let k = series_key(s);
                        if before.get(&k).is_some_and(|v0| s.value < *v0) {
                            let owned = k.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned()));
                            *self
                                .falls
                                .entry((m.metric.clone(), owned.collect()))
                                .or_insert(0) += 1;
                        }
                    }
                }
                if let Rule::CounterRatio {
                    num,
                    den,
                    one_minus,
                } = rule
                    && let Some(r) = ratio_between(a, b, num, den, *one_minus)
                {
                    let m = &mut self.ratio_max[si][ri];
                    *m = Some(m.map_or(r, |x| x.max(r)));
                }
            }
        }
    }

    /// A counter series of `m` fell more than once in the level: not a counter.
    fn falls_often(&self, m: &Matcher) -> bool {
        self.falls
            .iter()
            .any(|((metric, _), n)| metric == &m.metric && *n > 1)
    }

    /// Ends the level: each signal by the first of its rules whose metric appeared. `wall_s` is
    /// the level's wall time (the divisor of counter rates, as of the client's aggregate
    /// tokens/s).
    pub fn finish(self, wall_s: f64) -> Folded {
        let mut out = ServerLevel {
            scrapes: self.scrapes,
            scrape_errors: self.scrape_errors,
            ..ServerLevel::default()
        };
        let several = self.endpoints.len() > 1;
        let mut notes = Vec::new();
        for (si, sig) in self.signals.iter().enumerate() {
            let Some(ri) = self.present[si].iter().position(|p| *p) else {
                continue;
            };
            let rule = &sig.rules[ri];
            let around = self.before.as_ref().zip(self.after.as_ref());
            let stats = match rule {
                Rule::Gauge { .. } | Rule::UsedRatio { .. } | Rule::OneMinusRatio { .. } => {
                    let acc = &self.gauges[si][ri];
                    acc.all.get().map(|mm| {
                        let per_gpu: BTreeMap<String, MeanMax> = acc
                            .per_gpu
                            .iter()
                            .filter_map(|((e, g), r)| {
                                let k = if several {
                                    format!("{e}/{g}")
                                } else {
                                    g.clone()
                                };
                                r.get().map(|m| (k, m))
                            })
                            .collect();
                        SignalStats {
                            mean: Some(mm.mean),
                            max: Some(mm.max),
                            per_gpu: (!per_gpu.is_empty()).then_some(per_gpu),
                            ..SignalStats::default()
                        }
                    })
                }
                Rule::Counter { of } if self.falls_often(of) => {
                    notes.push(format!(
                        "{}: left out: {} fell more than once during the level (not a counter)",
                        sig.name, of.metric
                    ));
                    None
                }
                Rule::Counter { of } => around.and_then(|(a, b)| {
                    let d = delta(a, b, of)?;
                    // No max: servers such as llama.cpp add a request's tokens when it ends, so
                    // the rate between two scrapes is a burst, not a rate.
                    (wall_s > 0.0).then(|| SignalStats {
                        mean: Some(d / wall_s),
                        ..SignalStats::default()
                    })
                }),
                Rule::CounterRatio { num, den, .. }
                    if std::iter::once(num).chain(den).any(|m| self.falls_often(m)) =>
                {
                    notes.push(format!(
                        "{}: left out: a counter it divides fell more than once during the level (not a counter)",
                        sig.name
                    ));
                    None
                }
                Rule::CounterRatio {
                    num,
                    den,
                    one_minus,
                } => around.and_then(|(a, b)| {
                    let mean = ratio_between(a, b, num, den, *one_minus)?;
                    Some(SignalStats {
                        mean: Some(mean),
                        max: self.ratio_max[si][ri],
                        ..SignalStats::default()
                    })
                }),
                Rule::Histogram { of } => around.and_then(|(a, b)| {
                    let bucket = Matcher {
                        metric: format!("{}_bucket", of.metric),
                        labels: of.labels.clone(),
                    };
                    if !(buckets_cumulative(a, &bucket) && buckets_cumulative(b, &bucket)) {
                        notes.push(format!(
                            "{}: left out: the buckets of {} decrease with le (not a histogram)",
                            sig.name, of.metric
                        ));
                        return None;
                    }
                    histogram_stats(a, b, of)
                }),
            };
            if let Some(s) = stats.and_then(finite) {
                out.signals.insert(sig.name.clone(), s);
            }
        }
        if self.busy_before.iter().any(|(_, v)| *v > 0.0) {
            let q: Vec<String> = self
                .busy_before
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect();
            notes.push(format!(
                "the server was not idle when the level began ({}): requests of an earlier level or another client shared it",
                q.join(", ")
            ));
        }
        let (energy, energy_notes) = self.energy.finish(wall_s);
        out.energy = energy;
        notes.extend(energy_notes);
        for ((metric, why), n) in &self.invalid {
            out.invalid_samples += n;
            if notes.len() < 16 {
                notes.push(format!("left out {n} sample(s) of {metric}: {why}"));
            }
        }
        out.notes = notes;
        Folded {
            server: out,
            errors: self.errors,
            during: self.during,
        }
    }
}

/// Statistics with every non-finite number dropped (a statistic that is not a number is absent,
/// never `null`); `None` when nothing is left.
pub fn finite(mut s: SignalStats) -> Option<SignalStats> {
    let keep = |v: &mut Option<f64>| {
        if v.is_some_and(|x| !x.is_finite()) {
            *v = None;
        }
    };
    keep(&mut s.mean);
    keep(&mut s.max);
    keep(&mut s.p50);
    keep(&mut s.p95);
    keep(&mut s.count);
    if let Some(g) = &mut s.per_gpu {
        g.retain(|_, m| m.mean.is_finite() && m.max.is_finite());
        if g.is_empty() {
            s.per_gpu = None;
        }
    }
    let any = s.mean.is_some()
        || s.max.is_some()
        || s.p50.is_some()
        || s.p95.is_some()
        || s.count.is_some();
    any.then_some(s)
}

/// Folds one level's scrapes at once (as [`LevelFold`] does scrape by scrape): each signal by
/// the first of its rules whose metric appears. `wall_s` is the level's wall time.
pub fn fold(l: &LevelScrapes, signals: &[Signal], wall_s: f64) -> ServerLevel {
    let mut f = LevelFold::new(signals, None);
    f.scrapes = l.scrapes;
    f.scrape_errors = l.scrape_errors;
    if let Some(b) = &l.before {
        f.add(Phase::Before, b.clone());
    }
    for d in &l.during {
        f.add(Phase::During, d.clone());
    }
    if let Some(a) = &l.after {
        f.add(Phase::After, a.clone());
    }
    f.finish(wall_s).server
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
    fn samples_that_are_not_data_are_left_out_counted_and_named() {
        let during = |running: &str, kv: &str, gpu: &str| {
            snap(
                0.5,
                &format!(
                    "vllm:num_requests_running {running}\nvllm:kv_cache_usage_perc {kv}\nDCGM_FI_DEV_GPU_UTIL{{gpu=\"0\"}} {gpu}\n"
                ),
            )
        };
        let l = LevelScrapes {
            before: Some(snap(0.0, "vllm:num_requests_running 0\n")),
            during: vec![
                during("+Inf", "0.5", "1e306"),
                during("-5", "1.5", "-1e306"),
                during("4", "NaN", "50"),
            ],
            after: Some(snap(1.0, "vllm:num_requests_running 0\n")),
            ..LevelScrapes::default()
        };
        let s = fold(&l, &known(), 1.0);
        // Only the samples that are data count: running 4, KV 0.5 (1.5 is no ratio), GPU 50%.
        assert_eq!(s.mean("requests_running"), Some(4.0));
        assert_eq!(s.max("kv_cache_usage_ratio"), Some(0.5));
        assert_eq!(s.mean("gpu_utilization"), Some(0.5));
        assert_eq!(s.invalid_samples, 6, "{:?}", s.notes);
        let notes = s.notes.join("\n");
        for want in [
            "left out 1 sample(s) of vllm:num_requests_running: not a finite number",
            "left out 1 sample(s) of vllm:num_requests_running: negative",
            "left out 1 sample(s) of DCGM_FI_DEV_GPU_UTIL: implausibly large",
            "left out 1 sample(s) of DCGM_FI_DEV_GPU_UTIL: negative",
            "left out 1 sample(s) of vllm:kv_cache_usage_perc: a ratio above 100%",
            "left out 1 sample(s) of vllm:kv_cache_usage_perc: not a finite number",
        ] {
            assert!(notes.contains(want), "{want:?} not in:\n{notes}");
        }
        // Nothing but bad samples: no signal at all (so no finding can come from it).
        let l = LevelScrapes {
            before: Some(snap(0.0, "vllm:kv_cache_usage_perc 0\n")),
            during: vec![snap(0.5, "vllm:kv_cache_usage_perc +Inf\n")],
            after: Some(snap(1.0, "vllm:kv_cache_usage_perc 0\n")),
            ..LevelScrapes::default()
        };
        let s = fold(&l, &known(), 1.0);
        assert!(!s.signals.contains_key("kv_cache_usage_ratio"), "{s:?}");
        let j = serde_json::to_string(&s).unwrap();
        assert!(!j.contains("null"), "{j}");
    }

    #[test]
    fn a_counter_that_falls_more_than_once_or_buckets_that_decrease_give_no_signal() {
        let c = |v: u32| format!("vllm:generation_tokens_total {v}\n");
        let l = LevelScrapes {
            before: Some(snap(0.0, &c(100))),
            during: vec![snap(0.5, &c(90)), snap(1.0, &c(80))],
            after: Some(snap(1.5, &c(70))),
            ..LevelScrapes::default()
        };
        let s = fold(&l, &known(), 1.5);
        assert!(s.mean("generation_tokens_per_s").is_none(), "{s:?}");
        assert!(
            s.notes.iter().any(|n| n.contains("fell more than once")),
            "{:?}",
            s.notes
        );
        let h = |a: u32, b: u32| {
            format!(
                "vllm:time_to_first_token_seconds_bucket{{le=\"0.1\"}} {a}\nvllm:time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {b}\n"
            )
        };
        let l = LevelScrapes {
            before: Some(snap(0.0, &h(0, 0))),
            after: Some(snap(1.0, &h(20, 10))),
            ..LevelScrapes::default()
        };
        let s = fold(&l, &known(), 1.0);
        assert!(!s.signals.contains_key("server_ttft_s"), "{s:?}");
        assert!(
            s.notes.iter().any(|n| n.contains("decrease with le")),
            "{:?}",
            s.notes
        );
        // Only a +Inf bucket: no quantile, and no null in the JSON.
        let inf = |n: u32| format!("vllm:time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {n}\n");
        let l = LevelScrapes {
            before: Some(snap(0.0, &inf(0))),
            after: Some(snap(1.0, &inf(7))),
            ..LevelScrapes::default()
        };
        let s = fold(&l, &known(), 1.0);
        let t = &s.signals["server_ttft_s"];
        assert_eq!((t.p50, t.p95, t.count), (None, None, Some(7.0)));
        assert!(!serde_json::to_string(&s).unwrap().contains("null"));
    }

    /// What a level keeps does not grow with its length: the scrapes during it are folded into
    /// running statistics as they come.
    #[test]
    fn a_long_level_keeps_a_bounded_number_of_scrapes() {
        let mut f = LevelFold::new(&known(), None);
        f.add(Phase::Before, snap(0.0, "vllm:num_requests_running 0\n"));
        for i in 0..5_000 {
            f.add(
                Phase::During,
                snap(
                    f64::from(i),
                    &format!("vllm:num_requests_running {}\n", i % 4),
                ),
            );
        }
        // Kept: the scrape before, and the last one.
        assert!(f.before.is_some() && f.last.is_some() && f.after.is_none());
        f.add(Phase::After, snap(5_001.0, "vllm:num_requests_running 0\n"));
        let out = f.finish(5_000.0);
        assert_eq!(out.during, 5_000);
        assert_eq!(out.server.max("requests_running"), Some(3.0));
        assert_eq!(out.server.mean("requests_running"), Some(1.5));
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
