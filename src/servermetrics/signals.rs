//! The one vocabulary of server signals and the one table mapping known metric families onto it
//! (DCGM, vLLM old and new names, SGLang, TGI, llama.cpp, node_exporter), plus the custom
//! families a config names. Pure data: [`super::level`] evaluates the rules.
//!
//! A signal is computed by the first of its rules whose metric appears in the level's scrapes,
//! so a newer name wins over an older one when a server exposes both, and a custom family of the
//! same name wins over every known one.

/// How the series of one metric combine into one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Across {
    /// Add them (requests running over replicas, tokens over engines).
    Sum,
    /// Average them (a utilisation over GPUs).
    Mean,
}

/// A metric name and the labels its samples must carry.
#[derive(Debug, Clone, PartialEq)]
pub struct Matcher {
    /// The sample name (with its `_total` suffix for counters).
    pub metric: String,
    /// Every `(label, value)` a sample must carry to count.
    pub labels: Vec<(String, String)>,
}

impl Matcher {
    fn new(metric: &str) -> Matcher {
        Matcher {
            metric: metric.to_owned(),
            labels: Vec::new(),
        }
    }

    fn with(mut self, label: &str, value: &str) -> Matcher {
        self.labels.push((label.to_owned(), value.to_owned()));
        self
    }
}

/// How one signal is computed from the scrapes of a level.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// A gauge, times `scale`, combined across series; mean and max over the scrapes taken
    /// during the level. `per_gpu`: also per value of the `gpu` label.
    Gauge {
        /// The samples.
        of: Matcher,
        /// Factor to the signal's unit (DCGM's percent → ratio: 0.01).
        scale: f64,
        /// How series combine.
        across: Across,
        /// Also report per GPU (the `gpu` label).
        per_gpu: bool,
    },
    /// `used / (used + free)` per GPU (series joined on their labels), averaged over GPUs.
    UsedRatio {
        /// The used amount.
        used: Matcher,
        /// The free amount.
        free: Matcher,
    },
    /// `1 − part / whole`, each summed over series (node memory: available of total).
    OneMinusRatio {
        /// The part.
        part: Matcher,
        /// The whole.
        whole: Matcher,
    },
    /// A counter's rate per second: the exact delta between the scrapes right before and right
    /// after the level over the level's wall time (mean). A histogram's `_sum` works too (TGI's
    /// generated tokens).
    Counter {
        /// The samples.
        of: Matcher,
    },
    /// `Δnum / Σ Δden` of counters over the level (mean) and between consecutive scrapes (max);
    /// `one_minus`: `1 −` that (CPU busy = 1 − idle / all).
    CounterRatio {
        /// The numerator.
        num: Matcher,
        /// The denominators, added.
        den: Vec<Matcher>,
        /// Report `1 − ratio`.
        one_minus: bool,
    },
    /// A histogram (the base name, without `_bucket`): p50 and p95 of the observations made
    /// during the level, from the bucket deltas, interpolated within a bucket as Prometheus'
    /// `histogram_quantile` does; `count` observations.
    Histogram {
        /// The base name and the labels.
        of: Matcher,
    },
}

impl Rule {
    /// Every sample name this rule reads (a histogram's `_bucket` series).
    pub fn sample_names(&self) -> Vec<String> {
        match self {
            Rule::Gauge { of, .. } | Rule::Counter { of } => vec![of.metric.clone()],
            Rule::UsedRatio { used, free } => vec![used.metric.clone(), free.metric.clone()],
            Rule::OneMinusRatio { part, whole } => vec![part.metric.clone(), whole.metric.clone()],
            Rule::CounterRatio { num, den, .. } => std::iter::once(num)
                .chain(den)
                .map(|m| m.metric.clone())
                .collect(),
            Rule::Histogram { of } => vec![format!("{}_bucket", of.metric)],
        }
    }

    /// The metric whose presence in a scrape selects this rule.
    pub fn key_metric(&self) -> &str {
        match self {
            Rule::Gauge { of, .. } | Rule::Counter { of } => &of.metric,
            Rule::UsedRatio { used, .. } => &used.metric,
            Rule::OneMinusRatio { part, .. } => &part.metric,
            Rule::CounterRatio { num, .. } => &num.metric,
            Rule::Histogram { of } => &of.metric,
        }
    }
}

/// One signal of the vocabulary and the rules that compute it, in order of preference.
#[derive(Debug, Clone, PartialEq)]
pub struct Signal {
    /// The name in the report (`gpu_utilization`, `server_ttft_s`, ...).
    pub name: String,
    /// The first rule whose metric is present is used.
    pub rules: Vec<Rule>,
}

fn gauge(metric: &str, across: Across) -> Rule {
    Rule::Gauge {
        of: Matcher::new(metric),
        scale: 1.0,
        across,
        per_gpu: false,
    }
}

fn counter(metric: &str) -> Rule {
    Rule::Counter {
        of: Matcher::new(metric),
    }
}

fn histogram(metric: &str) -> Rule {
    Rule::Histogram {
        of: Matcher::new(metric),
    }
}

fn signal(name: &str, rules: Vec<Rule>) -> Signal {
    Signal {
        name: name.to_owned(),
        rules,
    }
}

/// The known families, signal by signal: the one mapping table. Sources: DCGM exporter's
/// default counters (`etc/default-counters.csv`), vLLM `docs/usage/metrics.md` (V1 names and
/// the V0 names they replaced), SGLang `docs/references/production_metrics.md`, TGI
/// `docs/source/reference/metrics.md`, llama.cpp `tools/server/server.cpp` (`/metrics`), and
/// node_exporter's cpu and meminfo collectors.
pub fn known() -> Vec<Signal> {
    use Across::{Mean, Sum};
    vec![
        signal(
            "gpu_utilization",
            vec![Rule::Gauge {
                of: Matcher::new("DCGM_FI_DEV_GPU_UTIL"),
                scale: 0.01,
                across: Mean,
                per_gpu: true,
            }],
        ),
        signal(
            "gpu_memory_used_ratio",
            vec![Rule::UsedRatio {
                used: Matcher::new("DCGM_FI_DEV_FB_USED"),
                free: Matcher::new("DCGM_FI_DEV_FB_FREE"),
            }],
        ),
        signal(
            "gpu_power_watts",
            vec![Rule::Gauge {
                of: Matcher::new("DCGM_FI_DEV_POWER_USAGE"),
                scale: 1.0,
                across: Sum,
                per_gpu: true,
            }],
        ),
        signal(
            "kv_cache_usage_ratio",
            vec![
                gauge("vllm:kv_cache_usage_perc", Mean),
                gauge("vllm:gpu_cache_usage_perc", Mean),
                gauge("sglang:token_usage", Mean),
                gauge("llamacpp:kv_cache_usage_ratio", Mean),
            ],
        ),
        signal(
            "requests_running",
            vec![
                gauge("vllm:num_requests_running", Sum),
                gauge("sglang:num_running_reqs", Sum),
                gauge("tgi_batch_current_size", Sum),
                gauge("llamacpp:requests_processing", Sum),
            ],
        ),
        signal(
            "requests_waiting",
            vec![
                gauge("vllm:num_requests_waiting", Sum),
                gauge("sglang:num_queue_reqs", Sum),
                gauge("tgi_queue_size", Sum),
                gauge("llamacpp:requests_deferred", Sum),
            ],
        ),
        signal(
            "prompt_tokens_per_s",
            vec![
                counter("vllm:prompt_tokens_total"),
                counter("sglang:prompt_tokens_total"),
                counter("tgi_request_input_length_sum"),
                counter("llamacpp:prompt_tokens_total"),
            ],
        ),
        signal(
            "generation_tokens_per_s",
            vec![
                counter("vllm:generation_tokens_total"),
                counter("sglang:generation_tokens_total"),
                counter("tgi_request_generated_tokens_sum"),
                counter("llamacpp:tokens_predicted_total"),
            ],
        ),
        signal(
            "prompt_cache_hit_ratio",
            vec![
                Rule::CounterRatio {
                    num: Matcher::new("vllm:prefix_cache_hits_total"),
                    den: vec![Matcher::new("vllm:prefix_cache_queries_total")],
                    one_minus: false,
                },
                Rule::CounterRatio {
                    num: Matcher::new("vllm:gpu_prefix_cache_hits_total"),
                    den: vec![Matcher::new("vllm:gpu_prefix_cache_queries_total")],
                    one_minus: false,
                },
                gauge("sglang:cache_hit_rate", Mean),
                // llama.cpp's prompt_tokens_total excludes the cached ones.
                Rule::CounterRatio {
                    num: Matcher::new("llamacpp:prompt_tokens_cached_total"),
                    den: vec![
                        Matcher::new("llamacpp:prompt_tokens_cached_total"),
                        Matcher::new("llamacpp:prompt_tokens_total"),
                    ],
                    one_minus: false,
                },
            ],
        ),
        signal(
            "cpu_utilization",
            vec![Rule::CounterRatio {
                num: Matcher::new("node_cpu_seconds_total").with("mode", "idle"),
                den: vec![Matcher::new("node_cpu_seconds_total")],
                one_minus: true,
            }],
        ),
        signal(
            "memory_used_ratio",
            vec![Rule::OneMinusRatio {
                part: Matcher::new("node_memory_MemAvailable_bytes"),
                whole: Matcher::new("node_memory_MemTotal_bytes"),
            }],
        ),
        signal(
            "server_ttft_s",
            vec![
                histogram("vllm:time_to_first_token_seconds"),
                histogram("sglang:time_to_first_token_seconds"),
            ],
        ),
        signal(
            "server_itl_s",
            vec![
                histogram("vllm:inter_token_latency_seconds"),
                histogram("vllm:time_per_output_token_seconds"),
                histogram("sglang:inter_token_latency_seconds"),
                histogram("tgi_request_mean_time_per_token_duration"),
            ],
        ),
        signal(
            "server_queue_time_s",
            vec![
                histogram("vllm:request_queue_time_seconds"),
                histogram("sglang:queue_time_seconds"),
                histogram("tgi_request_queue_duration"),
            ],
        ),
        signal(
            "server_e2e_s",
            vec![
                histogram("vllm:e2e_request_latency_seconds"),
                histogram("sglang:e2e_request_latency_seconds"),
                histogram("tgi_request_duration"),
            ],
        ),
    ]
}

/// Every sample name the signals (and the energy, [`super::energy`]) read: what a collector keeps of a scrape (the rest of an
/// exposition, e.g. node_exporter's thousands of series, is dropped as soon as it is parsed).
pub fn sample_names(signals: &[Signal]) -> std::collections::HashSet<String> {
    signals
        .iter()
        .flat_map(|s| &s.rules)
        .flat_map(Rule::sample_names)
        .chain(super::energy::SAMPLE_NAMES.iter().map(|n| (*n).to_owned()))
        .collect()
}

/// The kind of a custom family (config `kind:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CustomKind {
    /// Mean and max during the level.
    Gauge,
    /// Rate per second over the level.
    Counter,
    /// p50 and p95 of the level's observations.
    Histogram,
}

/// A family the config names: `{name, metric, kind, labels, across}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Custom {
    /// The signal's name in the report.
    pub name: String,
    /// The sample name (a histogram's base name).
    pub metric: String,
    /// Its kind.
    pub kind: CustomKind,
    /// The label filter.
    pub labels: Vec<(String, String)>,
    /// How a gauge's series combine (default: sum).
    pub across: Across,
}

/// The signals of a run: the custom ones first (a custom name replaces a known one), then the
/// known table.
pub fn with_custom(custom: &[Custom]) -> Vec<Signal> {
    let mut out: Vec<Signal> = custom
        .iter()
        .map(|c| {
            let of = Matcher {
                metric: c.metric.clone(),
                labels: c.labels.clone(),
            };
            let rule = match c.kind {
                CustomKind::Gauge => Rule::Gauge {
                    of,
                    scale: 1.0,
                    across: c.across,
                    per_gpu: false,
                },
                CustomKind::Counter => Rule::Counter { of },
                CustomKind::Histogram => Rule::Histogram { of },
            };
            signal(&c.name, vec![rule])
        })
        .collect();
    out.extend(
        known()
            .into_iter()
            .filter(|k| !custom.iter().any(|c| c.name == k.name)),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_custom_replaces_known() {
        let k = known();
        let mut names: Vec<&str> = k.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        let c = Custom {
            name: "requests_waiting".into(),
            metric: "my_queue".into(),
            kind: CustomKind::Gauge,
            labels: vec![],
            across: Across::Sum,
        };
        let names = sample_names(&known());
        for n in [
            "DCGM_FI_DEV_FB_FREE",
            "vllm:time_to_first_token_seconds_bucket",
            "llamacpp:prompt_tokens_cached_total",
            "node_cpu_seconds_total",
        ] {
            assert!(names.contains(n), "{n}");
        }
        assert!(!names.contains("vllm:time_to_first_token_seconds_sum"));
        let all = with_custom(&[c]);
        assert_eq!(all.len(), n);
        assert_eq!(all[0].rules[0].key_metric(), "my_queue");
        assert_eq!(
            all.iter().filter(|s| s.name == "requests_waiting").count(),
            1
        );
    }
}
