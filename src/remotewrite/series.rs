//! A level's figures as `tokenprobe_bench_*` series, and the remote-write 1.0 body: a
//! `prometheus.WriteRequest` (prometheus/prometheus `prompb/remote.proto` and `types.proto`)
//! encoded by prost, then snappy block-compressed (the `snap` crate's raw encoder), as
//! <https://prometheus.io/docs/specs/prw/remote_write_spec/> asks.
//!
//! Every level gives one sample per series, stamped with the level's end: latencies as
//! `quantile`-labelled gauges in seconds (p50, p90, p95, p99), throughput, the error and SLO
//! ratios, the request count, the load and whether the client could not measure it.

use crate::bench::stats::{LevelStats, Summary};

/// `prometheus.Label`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Label {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Its value.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// `prometheus.TimeSeries` (labels sorted by name, `__name__` among them).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Its labels.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// Its samples.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

/// `prometheus.WriteRequest` (metadata, field 3, is not sent).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// The series.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// The labels every series of one level carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelLabels {
    /// The run's id (equal on every shard of one run).
    pub run_id: String,
    /// The model.
    pub model: String,
    /// Its config target.
    pub target: String,
    /// The prompt.
    pub prompt: String,
    /// The level (`8`, `4/s`).
    pub level: String,
    /// `closed` or `open`.
    pub mode: String,
    /// `i/N` when the run is sharded.
    pub shard: Option<String>,
}

/// One statistic of a latency's summary.
type Statistic = fn(&Summary) -> f64;

/// The quantiles of each latency sent.
const QUANTILES: [(&str, Statistic); 4] = [
    ("0.5", |s| s.p50),
    ("0.9", |s| s.p90),
    ("0.95", |s| s.p95),
    ("0.99", |s| s.p99),
];

/// The level's series, each with one sample at `t_ms`; non-finite figures are left out.
pub fn level_series(labels: &LevelLabels, l: &LevelStats, t_ms: i64) -> Vec<TimeSeries> {
    let mut out = Vec::new();
    let mut push = |name: &str, extra: Option<(&str, &str)>, value: f64| {
        if !value.is_finite() {
            return;
        }
        let mut ls = vec![
            ("__name__", name),
            ("level", labels.level.as_str()),
            ("mode", labels.mode.as_str()),
            ("model", labels.model.as_str()),
            ("prompt", labels.prompt.as_str()),
            ("run_id", labels.run_id.as_str()),
            ("target", labels.target.as_str()),
        ];
        if let Some(s) = &labels.shard {
            ls.push(("shard", s.as_str()));
        }
        if let Some(e) = extra {
            ls.push(e);
        }
        ls.sort_by(|a, b| a.0.cmp(b.0));
        out.push(TimeSeries {
            labels: ls
                .into_iter()
                .map(|(name, value)| Label {
                    name: name.to_owned(),
                    value: value.to_owned(),
                })
                .collect(),
            samples: vec![Sample {
                value,
                timestamp: t_ms,
            }],
        });
    };
    let latencies = [
        ("tokenprobe_bench_time_to_first_token_seconds", l.ttft_s),
        (
            "tokenprobe_bench_time_to_first_output_token_seconds",
            l.ttfo_s,
        ),
        ("tokenprobe_bench_time_per_output_token_seconds", l.tpot_s),
        ("tokenprobe_bench_request_duration_seconds", l.e2e_s),
    ];
    for (name, summary) in latencies {
        if let Some(s) = summary {
            for (q, f) in QUANTILES {
                push(name, Some(("quantile", q)), f(&s));
            }
        }
    }
    push("tokenprobe_bench_requests", None, l.requests as f64);
    push("tokenprobe_bench_error_ratio", None, l.error_rate);
    push(
        "tokenprobe_bench_output_tokens_per_second",
        None,
        l.output_tokens_per_s,
    );
    push(
        "tokenprobe_bench_requests_per_second",
        None,
        l.requests_per_s,
    );
    if let Some(g) = l.goodput_rps {
        push("tokenprobe_bench_goodput_requests_per_second", None, g);
    }
    if let Some(a) = &l.slo_attainment {
        push("tokenprobe_bench_slo_attainment_ratio", None, a.share);
    }
    push(
        "tokenprobe_bench_concurrency",
        None,
        f64::from(l.key.concurrency),
    );
    if let Some(r) = l.key.rate {
        push("tokenprobe_bench_arrival_rate_per_second", None, r);
    }
    push(
        "tokenprobe_bench_client_bound",
        None,
        if l.client_bound.is_some() { 1.0 } else { 0.0 },
    );
    out
}

/// The remote-write body of `series`: the protobuf, snappy block-compressed.
pub fn body(series: Vec<TimeSeries>) -> Vec<u8> {
    let proto = prost::Message::encode_to_vec(&WriteRequest { timeseries: series });
    // Compressing bytes in memory fails only past snap's size limit (about 4 GiB), which a
    // level's few dozen series never reach; the uncompressed form is then sent as is and the
    // receiver refuses it (counted as a failed batch).
    snap::raw::Encoder::new()
        .compress_vec(&proto)
        .unwrap_or(proto)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::tests::synthetic;

    fn labels() -> LevelLabels {
        LevelLabels {
            run_id: "r1".into(),
            model: "alpha".into(),
            target: "local".into(),
            prompt: "hello".into(),
            level: "8".into(),
            mode: "closed".into(),
            shard: None,
        }
    }

    #[test]
    fn a_level_is_its_series_with_sorted_labels_and_its_figures() {
        let r = synthetic();
        let l = &r.models[0].levels[2];
        let s = level_series(&labels(), l, 1_700_000_000_123);
        let find = |name: &str, q: Option<&str>| -> f64 {
            s.iter()
                .find(|t| {
                    t.labels
                        .iter()
                        .any(|x| x.name == "__name__" && x.value == name)
                        && q.is_none_or(|q| {
                            t.labels
                                .iter()
                                .any(|x| x.name == "quantile" && x.value == q)
                        })
                })
                .unwrap_or_else(|| panic!("{name} {q:?}"))
                .samples[0]
                .value
        };
        let ttft = l.ttft_s.unwrap();
        assert_eq!(
            find("tokenprobe_bench_time_to_first_token_seconds", Some("0.95")),
            ttft.p95
        );
        assert_eq!(
            find("tokenprobe_bench_time_to_first_token_seconds", Some("0.5")),
            ttft.p50
        );
        assert_eq!(
            find("tokenprobe_bench_output_tokens_per_second", None),
            l.output_tokens_per_s
        );
        assert_eq!(find("tokenprobe_bench_requests", None), l.requests as f64);
        assert_eq!(find("tokenprobe_bench_concurrency", None), 8.0);
        assert_eq!(find("tokenprobe_bench_client_bound", None), 0.0);
        for t in &s {
            let names: Vec<&str> = t.labels.iter().map(|l| l.name.as_str()).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            assert_eq!(names, sorted);
            assert_eq!(
                t.samples,
                [Sample {
                    value: t.samples[0].value,
                    timestamp: 1_700_000_000_123
                }]
            );
        }
        // No series without its figure: this closed-loop level has no rate.
        assert!(
            !s.iter()
                .any(|t| t.labels[0].value == "tokenprobe_bench_arrival_rate_per_second")
        );
    }

    #[test]
    fn the_body_is_snappy_of_the_protobuf_and_decodes_back() {
        let r = synthetic();
        let s = level_series(&labels(), &r.models[0].levels[0], 5);
        let b = body(s.clone());
        let raw = snap::raw::Decoder::new().decompress_vec(&b).unwrap();
        let back: WriteRequest = prost::Message::decode(raw.as_slice()).unwrap();
        assert_eq!(back.timeseries, s);
        // The wire form of one label, by hand: field 1 (series), field 1 (label), field 1
        // (name) "__name__".
        let one = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label {
                    name: "a".into(),
                    value: "b".into(),
                }],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: 2,
                }],
            }],
        };
        let bytes = prost::Message::encode_to_vec(&one);
        assert_eq!(
            bytes,
            [
                0x0a, 0x15, // timeseries, 21 bytes
                0x0a, 0x06, 0x0a, 0x01, b'a', 0x12, 0x01, b'b', // label a=b
                0x12, 0x0b, 0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, // sample: value 1.0
                0x10, 0x02, // timestamp 2
            ]
        );
    }
}
