//! Findings (pure): what a sweep's client and server numbers mean together, each with a code,
//! the model and level, and a sentence a person acts on. Every threshold is configurable
//! (`bench --finding-threshold NAME=VALUE`); a finding fires strictly beyond its threshold.
//!
//! | code | fires when |
//! |---|---|
//! | `client_bound` | at every level the client could not measure: the bench's threads waited for a CPU over half the level's wall time while its first tokens were read late (median read lag over 2 ms), or the median read lag is over 5 ms (fixed: `bench::stats::CLIENT_*`; the level is marked in every output and bench exits 4 without `--accept-client-bound`) |
//! | `gpu_underutilized` | GPU utilisation mean below `gpu_underutilized` (30%) at the knee, or at the last level without a knee |
//! | `memory_pressure` | GPU memory, KV cache or host memory max above `memory_pressure` (85%) at a level |
//! | `queueing` | requests waiting (mean) grew over the previous level, is at least `queueing_waiting` (1), while aggregate tokens/s grew less than `queueing_tps_growth` (10%) |
//! | `ttft_growth` | TTFT p95 at a level above `ttft_growth` (3) × the TTFT p95 at the lowest load: the first token waits (a queue, or prefill shared by the requests running; client only) |
//! | `long_tail` | TTFT or E2E p95 above `long_tail` (3) × its p50 |
//! | `errors_past_knee` | the error rate of a level after the knee above `errors_past_knee` (1%) |
//! | `client_server_gap` | client TTFT p95 − server TTFT p95 above `client_server_ttft_gap` (250 ms), or the server's generation tokens/s off the client's aggregate tokens/s by more than `client_server_tokens_gap` (5%) |
//!
//! Each code fires at most once per model and kind, at the first level it applies to
//! (`client_bound` at every level it applies to).

use super::report::{Finding, FindingCode, ModelReport};
use super::stats::LevelStats;
use crate::outcome::ErrorType;
use crate::units::fmt_secs;

/// The thresholds of the findings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// GPU utilisation mean (ratio) below which the GPU is underused.
    pub gpu_underutilized: f64,
    /// GPU memory or KV cache use (ratio) above which memory is under pressure.
    pub memory_pressure: f64,
    /// Requests waiting (mean) from which a queue counts.
    pub queueing_waiting: f64,
    /// Aggregate tokens/s growth below which throughput has stopped growing.
    pub queueing_tps_growth: f64,
    /// TTFT p95 ÷ the TTFT p95 at the lowest load above which requests queue.
    pub ttft_growth: f64,
    /// p95 / p50 above which the tail is long.
    pub long_tail: f64,
    /// Error rate past the knee above which it is reported.
    pub errors_past_knee: f64,
    /// Client − server TTFT p95, s.
    pub client_server_ttft_gap: f64,
    /// |server generation tokens/s ÷ client aggregate tokens/s − 1|.
    pub client_server_tokens_gap: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            gpu_underutilized: 0.30,
            memory_pressure: 0.85,
            queueing_waiting: 1.0,
            queueing_tps_growth: 0.10,
            ttft_growth: 3.0,
            long_tail: 3.0,
            errors_past_knee: 0.01,
            client_server_ttft_gap: 0.25,
            client_server_tokens_gap: 0.05,
        }
    }
}

impl Thresholds {
    /// Sets one threshold from `NAME=VALUE` (ratios as `0.3` or `30%`, the TTFT gap as a
    /// duration like `250ms`).
    ///
    /// # Errors
    /// An unknown name or a value that does not parse.
    pub fn set(&mut self, spec: &str) -> Result<(), String> {
        let (name, value) = spec
            .split_once('=')
            .ok_or_else(|| format!("--finding-threshold {spec:?}: expected NAME=VALUE"))?;
        let (name, value) = (name.trim(), value.trim());
        let bad = |e: String| format!("--finding-threshold {name}: {e}");
        let ratio = || super::criteria::parse_ratio(value).map_err(|e| bad(e.to_string()));
        let slot = match name {
            "gpu_underutilized" => &mut self.gpu_underutilized,
            "memory_pressure" => &mut self.memory_pressure,
            "queueing_waiting" => &mut self.queueing_waiting,
            "queueing_tps_growth" => &mut self.queueing_tps_growth,
            "ttft_growth" => &mut self.ttft_growth,
            "long_tail" => &mut self.long_tail,
            "errors_past_knee" => &mut self.errors_past_knee,
            "client_server_tokens_gap" => &mut self.client_server_tokens_gap,
            "client_server_ttft_gap" => {
                self.client_server_ttft_gap = humantime::parse_duration(value)
                    .map_err(|e| bad(format!("{value:?} is not a duration ({e})")))?
                    .as_secs_f64();
                return Ok(());
            }
            _ => {
                return Err(format!(
                    "--finding-threshold {name}: unknown (gpu_underutilized, memory_pressure, queueing_waiting, queueing_tps_growth, ttft_growth, long_tail, errors_past_knee, client_server_ttft_gap, client_server_tokens_gap)"
                ));
            }
        };
        let v = if ["long_tail", "queueing_waiting", "ttft_growth"].contains(&name) {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(format!("{value:?} is not a number")))?
        } else {
            ratio()?
        };
        *slot = v;
        Ok(())
    }
}

fn pct(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

fn finding(code: FindingCode, m: &ModelReport, l: &LevelStats, message: String) -> Finding {
    Finding {
        code,
        model: m.model.clone(),
        level: l.key.load(),
        message,
        run: None,
    }
}

fn server_mean(l: &LevelStats, name: &str) -> Option<f64> {
    l.server.as_ref().and_then(|s| s.mean(name))
}

fn server_max(l: &LevelStats, name: &str) -> Option<f64> {
    l.server.as_ref().and_then(|s| s.max(name))
}

fn gpu_underutilized(m: &ModelReport, t: &Thresholds) -> Option<Finding> {
    let (i, where_) = match &m.knee {
        Some(k) => (k.index, "the knee"),
        None => (m.levels.len().checked_sub(1)?, "the last level"),
    };
    let l = m.levels.get(i)?;
    let u = server_mean(l, "gpu_utilization")?;
    (u < t.gpu_underutilized).then(|| {
        finding(
            FindingCode::GpuUnderutilized,
            m,
            l,
            format!(
                "GPU utilisation averaged {} at {where_} ({}), below {}: the serving stack, not the GPU, limits throughput; raise the server's batch and concurrency limits (or look for a CPU-bound front end) before adding GPUs.",
                pct(u),
                l.key.label(),
                pct(t.gpu_underutilized)
            ),
        )
    })
}

fn memory_pressure(m: &ModelReport, t: &Thresholds) -> Option<Finding> {
    m.levels.iter().find_map(|l| {
        [
            ("GPU memory", "gpu_memory_used_ratio"),
            ("KV cache", "kv_cache_usage_ratio"),
            ("host memory", "memory_used_ratio"),
        ]
        .iter()
        .find_map(|(what, name)| {
            let v = server_max(l, name)?;
            (v > t.memory_pressure).then(|| {
                finding(
                    FindingCode::MemoryPressure,
                    m,
                    l,
                    format!(
                        "{what} reached {} at {} (above {}): expect preemptions, evictions or out-of-memory errors at more load; lower the concurrency or context length, or add memory.",
                        pct(v),
                        l.key.label(),
                        pct(t.memory_pressure)
                    ),
                )
            })
        })
    })
}

fn queueing(m: &ModelReport, t: &Thresholds) -> Option<Finding> {
    m.levels.windows(2).find_map(|w| {
        let (a, b) = (&w[0], &w[1]);
        let (wa, wb) = (server_mean(a, "requests_waiting")?, server_mean(b, "requests_waiting")?);
        if a.output_tokens_per_s <= 0.0 {
            return None;
        }
        let growth = b.output_tokens_per_s / a.output_tokens_per_s - 1.0;
        (wb > wa && wb >= t.queueing_waiting && growth < t.queueing_tps_growth).then(|| {
            finding(
                FindingCode::Queueing,
                m,
                b,
                format!(
                    "requests waiting grew from {wa:.1} to {wb:.1} at {} while aggregate tokens/s {} (less than {:+.0}%): the server is saturated; more load only adds queueing delay to TTFT. This is the knee seen from the server.",
                    b.key.label(),
                    change(growth),
                    t.queueing_tps_growth * 100.0
                ),
            )
        })
    })
}

/// The load method's rule "TTFT at high concurrency more than 3× that at low concurrency means
/// requests queue", from the client alone: each level's TTFT p95 against the one at the lowest
/// load of the sweep.
fn ttft_growth(m: &ModelReport, t: &Thresholds) -> Option<Finding> {
    let load = |l: &LevelStats| l.key.rate.unwrap_or(f64::from(l.key.concurrency));
    let base = m
        .levels
        .iter()
        .filter(|l| l.ttft_s.is_some())
        .min_by(|a, b| load(a).total_cmp(&load(b)))?;
    let p0 = base.ttft_s.as_ref()?.p95;
    if p0 <= 0.0 {
        return None;
    }
    m.levels.iter().find_map(|l| {
        let p = l.ttft_s.as_ref()?.p95;
        (load(l) > load(base) && p > t.ttft_growth * p0).then(|| {
            finding(
                FindingCode::TtftGrowth,
                m,
                l,
                format!(
                    "TTFT p95 is {:.1}× at {} what it is at {} ({} vs {}; above {}×): the first token waits longer than at the lowest load (queued before the server starts the request, or sharing its prefill with the others running); this load is past what the server serves without delay.",
                    p / p0,
                    l.key.label(),
                    base.key.label(),
                    fmt_secs(p),
                    fmt_secs(p0),
                    t.ttft_growth
                ),
            )
        })
    })
}

fn long_tail(m: &ModelReport, t: &Thresholds) -> Option<Finding> {
    m.levels.iter().find_map(|l| {
        [("TTFT", &l.ttft_s), ("E2E", &l.e2e_s)]
            .iter()
            .find_map(|(what, s)| {
                let s = s.as_ref()?;
                (s.p50 > 0.0 && s.p95 > t.long_tail * s.p50).then(|| {
                    finding(
                        FindingCode::LongTail,
                        m,
                        l,
                        format!(
                            "{what} p95 is {:.1}× its p50 at {} ({} vs {}; above {}×, where 1.5–2× is healthy): a few requests wait far longer than the rest (queueing, long prefills or preemption); look at requests waiting and the knee.",
                            s.p95 / s.p50,
                            l.key.label(),
                            fmt_secs(s.p95),
                            fmt_secs(s.p50),
                            t.long_tail
                        ),
                    )
                })
            })
    })
}

/// What a level's errors were, most frequent first (`timeout_first_token 16, server_error 2`),
/// and whether most of them were the client's own deadlines (`timeout_*`).
fn error_kinds(l: &LevelStats) -> (String, bool) {
    let mut kinds: Vec<(&ErrorType, &u64)> = l.errors.iter().collect();
    kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let timeouts: u64 = l
        .errors
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("timeout_"))
        .map(|(_, n)| n)
        .sum();
    let all: u64 = l.errors.values().sum();
    let shown: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    (shown.join(", "), all > 0 && timeouts * 2 > all)
}

/// A change as a person says it: "grew 12%", "fell 37%".
fn change(ratio: f64) -> String {
    if ratio < 0.0 {
        format!("fell {:.0}%", -ratio * 100.0)
    } else {
        format!("grew {:.0}%", ratio * 100.0)
    }
}

fn errors_past_knee(m: &ModelReport, t: &Thresholds) -> Option<Finding> {
    let k = m.knee.as_ref()?;
    m.levels.iter().skip(k.index + 1).find_map(|l| {
        (l.error_rate > t.errors_past_knee).then(|| {
            let (kinds, timeouts) = error_kinds(l);
            let why = if timeouts {
                "most are the client's own deadlines (timeouts in the config): beyond the knee requests wait longer than they allow, so the server's queue, not a refusal, fails them"
            } else {
                "beyond the knee the server sheds load"
            };
            finding(
                FindingCode::ErrorsPastKnee,
                m,
                l,
                format!(
                    "{:.2}% of requests failed at {} ({kinds}), past the knee at {} (above {:.2}%): {why}; keep production load below the knee or add capacity.",
                    l.error_rate * 100.0,
                    l.key.label(),
                    k.level.label(),
                    t.errors_past_knee * 100.0
                ),
            )
        })
    })
}

fn client_server_gap(m: &ModelReport, t: &Thresholds) -> Vec<Finding> {
    let ttft = m.levels.iter().find_map(|l| {
        let c = l.ttft_s.as_ref()?.p95;
        let s = l.server.as_ref()?.signals.get("server_ttft_s")?.p95?;
        (c - s > t.client_server_ttft_gap).then(|| {
            finding(
                FindingCode::ClientServerGap,
                m,
                l,
                format!(
                    "client TTFT p95 {} vs the server's own {} at {} (gap {}, above {}): network, TLS, a gateway or a queue in front of the server adds it; probe from closer to the server to find which.",
                    fmt_secs(c),
                    fmt_secs(s),
                    l.key.label(),
                    fmt_secs(c - s),
                    fmt_secs(t.client_server_ttft_gap)
                ),
            )
        })
    });
    let tokens = m.levels.iter().find_map(|l| {
        let s = server_mean(l, "generation_tokens_per_s")?;
        let c = l.output_tokens_per_s;
        let (_, timeouts) = error_kinds(l);
        // Tokens of requests the client gave up on still count on the server.
        let cause = if timeouts {
            "the client gave up on requests (its deadlines) that the server went on generating for"
        } else {
            "other traffic shares the server, or the server counts tokens the client does not (check usage reporting and other clients)"
        };
        if c <= 0.0 {
            return (s > 0.0).then(|| {
                finding(
                    FindingCode::ClientServerGap,
                    m,
                    l,
                    format!(
                        "the server generated {s:.1} tokens/s at {} but the client received none: {cause}.",
                        l.key.label()
                    ),
                )
            });
        }
        let off = s / c - 1.0;
        (off.abs() > t.client_server_tokens_gap).then(|| {
            finding(
                FindingCode::ClientServerGap,
                m,
                l,
                format!(
                    "the server generated {s:.1} tokens/s at {} but the client received {c:.1} ({:+.1}%, beyond ±{:.1}%): {cause}.",
                    l.key.label(),
                    off * 100.0,
                    t.client_server_tokens_gap * 100.0
                ),
            )
        })
    });
    ttft.into_iter().chain(tokens).collect()
}

/// Every level the client could not measure ([`LevelStats::client_bound`]): first, since its
/// figures are the client's starvation and no other finding about it holds.
fn client_bound(m: &ModelReport) -> Vec<Finding> {
    m.levels
        .iter()
        .filter_map(|l| {
            let why = l.client_bound.as_ref()?;
            Some(finding(
                FindingCode::ClientBound,
                m,
                l,
                format!(
                    "the client could not measure this level, so its figures are not the server's: {why}. Give the bench more CPU (fewer processes beside it, no CPU limit below its need, or fewer streams per process with --shard)"
                ),
            ))
        })
        .collect()
}

/// Every finding of a sweep, model by model, in the order of the table above.
pub fn findings(models: &[ModelReport], t: &Thresholds) -> Vec<Finding> {
    let mut out = Vec::new();
    for m in models {
        out.extend(client_bound(m));
        out.extend(gpu_underutilized(m, t));
        out.extend(memory_pressure(m, t));
        out.extend(queueing(m, t));
        out.extend(ttft_growth(m, t));
        out.extend(long_tail(m, t));
        out.extend(errors_past_knee(m, t));
        out.extend(client_server_gap(m, t));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::Knee;
    use crate::bench::stats::{LevelKey, Summary};
    use crate::servermetrics::level::{ServerLevel, SignalStats};

    fn summary(p50: f64, p95: f64) -> Summary {
        Summary {
            n: 10,
            mean: p50,
            min: p50,
            p50,
            p90: p95,
            p95,
            p99: p95,
            max: p95,
            p50_ci: None,
            p95_ci: None,
            p99_ci: None,
        }
    }

    fn level(c: u32, tps: f64, signals: &[(&str, SignalStats)]) -> LevelStats {
        let mut server = ServerLevel::default();
        for (n, s) in signals {
            server.signals.insert((*n).into(), s.clone());
        }
        let mut l = crate::bench::select::tests::level(c, tps, 0.1, 0.0);
        l.ttft_s = Some(summary(0.1, 0.15));
        l.e2e_s = Some(summary(1.0, 1.5));
        l.server = Some(server);
        l
    }

    fn mm(mean: f64, max: f64) -> SignalStats {
        SignalStats {
            mean: Some(mean),
            max: Some(max),
            ..SignalStats::default()
        }
    }

    fn model(levels: Vec<LevelStats>, knee: Option<usize>) -> ModelReport {
        let knee = knee.map(|i| Knee {
            index: i,
            level: levels[i].key,
            agg_tps_growth: 0.0,
            ttft_p95_growth: 1.0,
            requests_waiting: None,
            ceiling: None,
            estimate: None,
            limited_by: None,
        });
        ModelReport {
            model: "m".into(),
            target: None,
            price: None,
            gpus: None,
            gpu_hour_price: None,
            input_tokens_mean: None,
            output_tokens_mean: None,
            prompt: None,
            calibration: None,
            levels,
            knee,
            capacity: None,
            stopped_early: None,
            check: None,
        }
    }

    fn codes(m: &ModelReport, t: &Thresholds) -> Vec<(String, String)> {
        findings(std::slice::from_ref(m), t)
            .into_iter()
            .map(|f| (f.code.to_string(), f.level.to_string()))
            .collect()
    }

    const EPS: f64 = 1e-9;

    #[test]
    fn each_finding_fires_just_past_its_threshold_and_not_at_it() {
        let t = Thresholds::default();
        let one = |sig: &[(&str, SignalStats)]| model(vec![level(4, 100.0, sig)], None);
        // gpu_underutilized: below 30% at the last level.
        assert!(codes(&one(&[("gpu_utilization", mm(0.30, 0.9))]), &t).is_empty());
        assert_eq!(
            codes(&one(&[("gpu_utilization", mm(0.30 - EPS, 0.9))]), &t),
            [("gpu_underutilized".into(), "4".into())]
        );
        // memory_pressure: above 85%, GPU memory, KV cache or the host's memory.
        for sig in [
            "gpu_memory_used_ratio",
            "kv_cache_usage_ratio",
            "memory_used_ratio",
        ] {
            assert!(codes(&one(&[(sig, mm(0.5, 0.85))]), &t).is_empty());
            assert_eq!(
                codes(&one(&[(sig, mm(0.5, 0.85 + EPS))]), &t)[0].0,
                "memory_pressure"
            );
        }
        // client_server_gap (tokens): ±5%.
        let g = |s: f64| one(&[("generation_tokens_per_s", mm(s, s))]);
        assert!(codes(&g(105.0 - 1e-7), &t).is_empty());
        assert!(codes(&g(95.0 + 1e-7), &t).is_empty());
        assert_eq!(codes(&g(105.0 + 1e-7), &t)[0].0, "client_server_gap");
        assert_eq!(codes(&g(95.0 - 1e-7), &t)[0].0, "client_server_gap");
        // client_server_gap (TTFT): client p95 0.15 − server p95 > 0.25 s.
        let ttft = |server_p95: f64| {
            let s = SignalStats {
                p50: Some(0.01),
                p95: Some(server_p95),
                ..SignalStats::default()
            };
            let mut m = one(&[("server_ttft_s", s)]);
            m.levels[0].ttft_s = Some(summary(0.3, 0.5));
            m
        };
        assert!(codes(&ttft(0.25 + 1e-7), &t).is_empty());
        assert_eq!(codes(&ttft(0.25 - 1e-7), &t)[0].0, "client_server_gap");
    }

    #[test]
    fn long_tail_and_errors_past_knee() {
        let t = Thresholds::default();
        let mut m = model(vec![level(1, 100.0, &[])], None);
        m.levels[0].ttft_s = Some(summary(0.1, 0.3));
        assert!(codes(&m, &t).is_empty(), "exactly 3× is not long");
        m.levels[0].ttft_s = Some(summary(0.1, 0.3 + EPS));
        assert_eq!(codes(&m, &t), [("long_tail".into(), "1".into())]);
        m.levels[0].ttft_s = Some(summary(0.1, 0.15));
        m.levels[0].e2e_s = Some(summary(1.0, 3.0 + EPS));
        assert_eq!(codes(&m, &t)[0].0, "long_tail");

        let mut m = model(
            vec![
                level(1, 100.0, &[]),
                level(2, 190.0, &[]),
                level(4, 195.0, &[]),
                level(8, 190.0, &[]),
            ],
            Some(2),
        );
        m.levels[3].error_rate = 0.01;
        m.levels[2].error_rate = 0.5; // at the knee itself: not "past" it
        assert!(codes(&m, &t).is_empty());
        m.levels[3].error_rate = 0.01 + EPS;
        assert_eq!(codes(&m, &t), [("errors_past_knee".into(), "8".into())]);
    }

    #[test]
    fn ttft_growth_from_the_client_alone() {
        let t = Thresholds::default();
        // No server block at all: the client's TTFT p95 per level against the lowest load's.
        let lv = |c: u32, tps: f64, p95: f64| {
            let mut l = level(c, tps, &[]);
            l.server = None;
            l.ttft_s = Some(summary(p95 / 1.2, p95));
            l
        };
        let m = model(
            vec![lv(1, 50.0, 0.5), lv(5, 200.0, 1.5), lv(10, 380.0, 1.4)],
            None,
        );
        assert!(codes(&m, &t).is_empty(), "exactly 3× is not growth");
        // Throughput still growing, TTFT 6×: requests queue; the first level past 3× is named.
        let m = model(
            vec![
                lv(1, 50.0, 0.5),
                lv(5, 200.0, 1.5 + EPS),
                lv(10, 380.0, 3.0),
            ],
            None,
        );
        assert_eq!(codes(&m, &t), [("ttft_growth".into(), "5".into())]);
        let f = &findings(std::slice::from_ref(&m), &t)[0];
        assert!(f.message.contains("at 5 what it is at 1"), "{}", f.message);
        // The base is the lowest load, wherever it stands in the list.
        let m = model(vec![lv(10, 380.0, 3.0), lv(1, 50.0, 0.5)], None);
        assert_eq!(codes(&m, &t), [("ttft_growth".into(), "10".into())]);
        // A threshold of its own.
        let mut t2 = t;
        t2.set("ttft_growth=7").unwrap();
        let m = model(vec![lv(1, 50.0, 0.5), lv(10, 380.0, 3.0)], None);
        assert!(codes(&m, &t2).is_empty());
    }

    #[test]
    fn queueing_is_the_knee_seen_from_the_server() {
        let t = Thresholds::default();
        let w = |v: f64| [("requests_waiting", mm(v, v))];
        // Waiting grows 0 → 2 while tokens/s grows 10%: exactly the threshold, no finding.
        let m = model(
            vec![level(2, 100.0, &w(0.0)), level(4, 110.0, &w(2.0))],
            None,
        );
        assert!(codes(&m, &t).is_empty());
        let m = model(
            vec![level(2, 100.0, &w(0.0)), level(4, 110.0 - 1e-6, &w(2.0))],
            None,
        );
        assert_eq!(codes(&m, &t), [("queueing".into(), "4".into())]);
        // Waiting below 1 is not a queue; waiting that does not grow is not one either.
        let m = model(
            vec![level(2, 100.0, &w(0.0)), level(4, 100.0, &w(1.0 - EPS))],
            None,
        );
        assert!(codes(&m, &t).is_empty());
        let m = model(
            vec![level(2, 100.0, &w(3.0)), level(4, 100.0, &w(3.0))],
            None,
        );
        assert!(codes(&m, &t).is_empty());
    }

    #[test]
    fn gpu_underutilized_looks_at_the_knee() {
        let t = Thresholds::default();
        let g = |v: f64| [("gpu_utilization", mm(v, v))];
        let m = model(
            vec![level(1, 100.0, &g(0.1)), level(2, 150.0, &g(0.9))],
            Some(0),
        );
        assert_eq!(codes(&m, &t), [("gpu_underutilized".into(), "1".into())]);
        let m = model(
            vec![level(1, 100.0, &g(0.1)), level(2, 150.0, &g(0.9))],
            None,
        );
        assert!(codes(&m, &t).is_empty(), "the last level is busy");
        // Not collected: nothing, never a finding from a missing value.
        let m = model(vec![level(1, 100.0, &[])], None);
        assert!(codes(&m, &t).is_empty());
    }

    #[test]
    fn thresholds_from_flags() {
        let mut t = Thresholds::default();
        t.set("gpu_underutilized=20%").unwrap();
        t.set("long_tail=2.5").unwrap();
        t.set("client_server_ttft_gap=100ms").unwrap();
        assert_eq!(
            (t.gpu_underutilized, t.long_tail, t.client_server_ttft_gap),
            (0.2, 2.5, 0.1)
        );
        assert!(t.set("nope=1").is_err());
        assert!(t.set("long_tail=x").is_err());
        assert!(t.set("memory_pressure").is_err());
        assert!(t.set("client_server_ttft_gap=soon").is_err());
    }

    #[test]
    fn key_is_used() {
        // LevelKey labels name the level in a finding.
        let k = LevelKey {
            concurrency: 3,
            rate: Some(2.5),
        };
        let mut l = level(3, 1.0, &[]);
        l.key = k;
        l.ttft_s = Some(summary(0.1, 1.0));
        let m = model(vec![l], None);
        assert_eq!(codes(&m, &Thresholds::default())[0].1, "2.5/s");
    }
}
