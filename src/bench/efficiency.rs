//! What a level's tokens take (pure): its GPUs, its self-hosted cost and its energy, and the state
//! of the server's cache it started from. Derived from the report itself ([`derive`], called where
//! a run or a merge of shards is judged), so every report that carries the GPU count, the GPU
//! price and the server's energy reading has them.
//!
//! - The GPU count of a model is declared in one place: its target's `gpus:`, else the device
//!   count of its DCGM metrics (the run's provenance), else absent: never guessed.
//! - Output tokens/s per GPU: the level's aggregate output tokens/s ÷ the GPU count.
//! - The self-hosted cost per million output tokens: `gpu_hour_price × GPUs ÷ 3600 ÷ aggregate
//!   output tokens/s × 10⁶`: what the GPUs cost while they make a million tokens at that load.
//! - Energy per token: the joules the server's metrics say the level took
//!   ([`crate::servermetrics::energy`]) ÷ its output tokens, and ÷ its input and output tokens.

use super::report::ModelReport;
use crate::servermetrics::energy::EnergySource;
use serde::{Deserialize, Serialize};

/// Where a model's GPU count comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuSource {
    /// The target's `gpus:`.
    Config,
    /// The device count of the target's DCGM metrics.
    Dcgm,
}

/// A model's GPU count and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuCount {
    /// How many GPUs serve it.
    pub count: u32,
    /// Where that number comes from.
    pub source: GpuSource,
}

impl GpuCount {
    /// The one rule of a model's GPU count: the target's declared `gpus:`, else the devices its
    /// DCGM metrics show, else none.
    pub fn of(declared: Option<u32>, dcgm: Option<u32>) -> Option<GpuCount> {
        match (declared, dcgm) {
            (Some(count), _) if count > 0 => Some(GpuCount {
                count,
                source: GpuSource::Config,
            }),
            (_, Some(count)) if count > 0 => Some(GpuCount {
                count,
                source: GpuSource::Dcgm,
            }),
            _ => None,
        }
    }
}

/// The cost of a level's tokens on the model's own GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GpuCost {
    /// What one GPU costs per hour (the target's `gpu_hour_price:`).
    pub gpu_hour_price: f64,
    /// The GPUs paid for.
    pub gpus: u32,
    /// Per million output tokens at the level's aggregate output tokens/s.
    pub cost_per_mtok: f64,
}

/// The energy of a level's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Energy {
    /// Where the joules come from (a counter, or power × time: an estimate).
    pub source: EnergySource,
    /// The level's joules.
    pub joules: f64,
    /// Joules per output token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joules_per_output_token: Option<f64>,
    /// Joules per token, input and output (input from the successes' mean input tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joules_per_token: Option<f64>,
}

/// The state of the server's cache a level started from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheKind {
    /// Its prefix cache was reset right before the level (`--reset-prefix-cache`).
    Reset,
    /// Every request had a unique leading block (`--cache-bust`): no two shared a prefix.
    Busted,
    /// Both.
    ResetAndBusted,
    /// As the levels before left it.
    Warm,
}

impl CacheKind {
    /// The state as the report writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheKind::Reset => "reset",
            CacheKind::Busted => "busted",
            CacheKind::ResetAndBusted => "reset and busted",
            CacheKind::Warm => "warm",
        }
    }
}

/// A level's server cache: its state and, when a reset was asked for and did not happen, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheState {
    /// Reset, busted, both, or warm.
    pub state: CacheKind,
    /// Why a reset asked for did not happen (the server cannot, or its answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A level's GPUs, cost, energy and cache state (flattened into the level's JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LevelEfficiency {
    /// Aggregate output tokens/s per GPU; absent without a GPU count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_s_per_gpu: Option<f64>,
    /// The self-hosted cost of its tokens; absent without a GPU count and a `gpu_hour_price:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_cost: Option<GpuCost>,
    /// The energy of its tokens; absent without the server's energy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<Energy>,
    /// The server cache it started from (absent in reports of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cache: Option<CacheState>,
}

/// The self-hosted cost per million output tokens of `gpus` GPUs at `price` per GPU-hour making
/// `tokens_per_s` output tokens/s; `None` when nothing was made.
pub fn cost_per_mtok(price: f64, gpus: u32, tokens_per_s: f64) -> Option<f64> {
    (tokens_per_s > 0.0 && tokens_per_s.is_finite() && price.is_finite())
        .then(|| price * f64::from(gpus) / 3600.0 / tokens_per_s * 1e6)
}

/// Each level's GPU figures, cost and energy per token from its model's GPU count and price and
/// its server block's energy, and each capacity's cost at capacity (recomputed: a report read
/// back gives the same).
pub fn derive(models: &mut [ModelReport]) {
    for m in models {
        for l in &mut m.levels {
            let e = &mut l.efficiency;
            e.output_tokens_per_s_per_gpu = m
                .gpus
                .map(|g| l.output_tokens_per_s / f64::from(g.count))
                .filter(|v| v.is_finite());
            e.gpu_cost = m.gpus.zip(m.gpu_hour_price).and_then(|(g, price)| {
                Some(GpuCost {
                    gpu_hour_price: price,
                    gpus: g.count,
                    cost_per_mtok: cost_per_mtok(price, g.count, l.output_tokens_per_s)?,
                })
            });
            e.energy = l.server.as_ref().and_then(|s| s.energy.as_ref()).map(|r| {
                let output = l.output_tokens as f64;
                let input = l
                    .lengths
                    .input_tokens_mean
                    .map(|mean| mean * l.successes as f64);
                let per = |n: f64| (n > 0.0).then(|| r.joules / n);
                Energy {
                    source: r.source,
                    joules: r.joules,
                    joules_per_output_token: per(output),
                    joules_per_token: input.and_then(|i| per(i + output)),
                }
            });
        }
        if let Some(c) = &mut m.capacity {
            let key = m.levels.iter().find(|l| {
                !l.partial
                    && match (c.concurrency, c.rate) {
                        (_, Some(r)) => l.key.rate.is_some_and(|x| (x - r).abs() < 1e-9),
                        (Some(n), None) => l.key.rate.is_none() && l.key.concurrency == n,
                        (None, None) => false,
                    }
            });
            c.gpu_cost_per_mtok = key.and_then(|l| l.efficiency.gpu_cost.map(|g| g.cost_per_mtok));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servermetrics::energy::EnergyReading;
    use crate::servermetrics::level::ServerLevel;

    #[test]
    fn the_gpu_count_comes_from_one_place_and_is_never_guessed() {
        let c = |count, source| Some(GpuCount { count, source });
        assert_eq!(GpuCount::of(Some(8), Some(4)), c(8, GpuSource::Config));
        assert_eq!(GpuCount::of(None, Some(4)), c(4, GpuSource::Dcgm));
        assert_eq!(GpuCount::of(None, None), None);
        assert_eq!(GpuCount::of(None, Some(0)), None);
    }

    #[test]
    fn cost_per_million_tokens_is_price_times_gpus_over_throughput() {
        // 8 GPUs at 2.50 an hour = 20 an hour = 1/180 a second; 1,000 tok/s: 5.555.../Mtok.
        let c = cost_per_mtok(2.5, 8, 1000.0).unwrap();
        assert!((c - 20.0 / 3.6).abs() < 1e-12, "{c}");
        assert_eq!(cost_per_mtok(2.5, 8, 0.0), None);
        assert_eq!(cost_per_mtok(0.0, 8, 10.0), Some(0.0));
    }

    #[test]
    fn derive_fills_each_level_and_the_capacity() {
        let mut r = crate::bench::report::tests::synthetic();
        let m = &mut r.models[0];
        m.gpus = Some(GpuCount {
            count: 4,
            source: GpuSource::Config,
        });
        m.gpu_hour_price = Some(3.0);
        let l = &mut m.levels[0];
        l.output_tokens_per_s = 400.0;
        l.output_tokens = 800;
        l.successes = 10;
        l.lengths.input_tokens_mean = Some(120.0);
        l.server = Some(ServerLevel {
            energy: Some(EnergyReading {
                joules: 1000.0,
                source: EnergySource::DcgmEnergyCounter,
                devices: 4,
            }),
            ..ServerLevel::default()
        });
        let key = l.key;
        m.capacity = Some(crate::bench::capacity::Capacity {
            concurrency: Some(key.concurrency),
            rate: None,
            target_attainment: 0.9,
            attainment: None,
            attainment_interval: None,
            limited_by: None,
            failed_at: None,
            clear: true,
            sessions: false,
            levels_tried: vec![key.x()],
            stopped: crate::bench::capacity::SearchStop::UpperBoundPassed { max: key.x() },
            requests: 10,
            seconds: 1.0,
            gpu_cost_per_mtok: None,
        });
        derive(&mut r.models);
        let m = &r.models[0];
        let e = &m.levels[0].efficiency;
        assert_eq!(e.output_tokens_per_s_per_gpu, Some(100.0));
        let cost = e.gpu_cost.unwrap();
        assert!((cost.cost_per_mtok - 12.0 / 3600.0 / 400.0 * 1e6).abs() < 1e-9);
        let en = e.energy.unwrap();
        assert_eq!(en.joules_per_output_token, Some(1.25));
        assert_eq!(en.joules_per_token, Some(0.5));
        assert_eq!(
            m.capacity.as_ref().unwrap().gpu_cost_per_mtok,
            Some(cost.cost_per_mtok)
        );
        // Another model without a GPU count: no GPU figure, no cost.
        let other = &r.models[1].levels[0].efficiency;
        assert_eq!(
            (other.output_tokens_per_s_per_gpu, other.gpu_cost),
            (None, None)
        );
    }
}
