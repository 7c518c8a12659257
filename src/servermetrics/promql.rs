//! The Prometheus query-API source (`bench --prometheus URL`): for clusters where the GPU
//! exporter or the model server is not reachable from the bench, but a Prometheus that scrapes
//! them is. Each statistic of a signal is one PromQL instant query evaluated at the level's end,
//! `$__range` standing for the level's duration (whole seconds, at least 1): `mean`, `max`,
//! `p50`, `p95`. A query answering several series gives their mean; an empty answer leaves the
//! statistic absent. Queries run after the whole sweep (after `--prometheus-wait`, so Prometheus
//! has scraped the last level), never during a level.

use super::level::SignalStats;
use std::collections::BTreeMap;
use std::time::Duration;

/// One statistic of one signal and its PromQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The signal (`gpu_utilization`).
    pub signal: String,
    /// `mean`, `max`, `p50` or `p95`.
    pub stat: String,
    /// The expression; `$__range` is replaced by the level's duration (`12s`).
    pub expr: String,
}

impl std::str::FromStr for Query {
    type Err = String;

    /// `signal.stat=EXPR`, e.g. `gpu_utilization.mean=avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL[$__range]))/100`.
    fn from_str(s: &str) -> Result<Query, String> {
        let (key, expr) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected SIGNAL.STAT=PROMQL"))?;
        let (signal, stat) = key
            .trim()
            .split_once('.')
            .ok_or_else(|| format!("{key:?}: expected SIGNAL.STAT (e.g. gpu_utilization.mean)"))?;
        if !matches!(stat, "mean" | "max" | "p50" | "p95") {
            return Err(format!(
                "{key:?}: the statistic must be mean, max, p50 or p95"
            ));
        }
        if signal.is_empty()
            || !signal
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_')
        {
            return Err(format!("{key:?}: a signal name is letters, digits and _"));
        }
        if expr.trim().is_empty() {
            return Err(format!("{key:?}: empty query"));
        }
        Ok(Query {
            signal: signal.to_owned(),
            stat: stat.to_owned(),
            expr: expr.trim().to_owned(),
        })
    }
}

/// The default queries: DCGM's GPU utilisation and memory, vLLM's KV cache, queue, running
/// requests, generated tokens and TTFT. `--prometheus-query` adds to or replaces them.
pub fn default_queries() -> Vec<Query> {
    let q = |signal: &str, stat: &str, expr: &str| Query {
        signal: signal.into(),
        stat: stat.into(),
        expr: expr.into(),
    };
    vec![
        q(
            "gpu_utilization",
            "mean",
            "avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL[$__range])) / 100",
        ),
        q(
            "gpu_utilization",
            "max",
            "max(max_over_time(DCGM_FI_DEV_GPU_UTIL[$__range])) / 100",
        ),
        q(
            "gpu_memory_used_ratio",
            "mean",
            "avg(avg_over_time(DCGM_FI_DEV_FB_USED[$__range]) / (avg_over_time(DCGM_FI_DEV_FB_USED[$__range]) + avg_over_time(DCGM_FI_DEV_FB_FREE[$__range])))",
        ),
        q(
            "gpu_memory_used_ratio",
            "max",
            "max(max_over_time(DCGM_FI_DEV_FB_USED[$__range]) / (max_over_time(DCGM_FI_DEV_FB_USED[$__range]) + min_over_time(DCGM_FI_DEV_FB_FREE[$__range])))",
        ),
        q(
            "kv_cache_usage_ratio",
            "mean",
            "avg(avg_over_time(vllm:kv_cache_usage_perc[$__range]))",
        ),
        q(
            "kv_cache_usage_ratio",
            "max",
            "max(max_over_time(vllm:kv_cache_usage_perc[$__range]))",
        ),
        q(
            "requests_running",
            "mean",
            "sum(avg_over_time(vllm:num_requests_running[$__range]))",
        ),
        q(
            "requests_running",
            "max",
            "sum(max_over_time(vllm:num_requests_running[$__range]))",
        ),
        q(
            "requests_waiting",
            "mean",
            "sum(avg_over_time(vllm:num_requests_waiting[$__range]))",
        ),
        q(
            "requests_waiting",
            "max",
            "sum(max_over_time(vllm:num_requests_waiting[$__range]))",
        ),
        q(
            "generation_tokens_per_s",
            "mean",
            "sum(rate(vllm:generation_tokens_total[$__range]))",
        ),
        q(
            "server_ttft_s",
            "p50",
            "histogram_quantile(0.5, sum by (le) (increase(vllm:time_to_first_token_seconds_bucket[$__range])))",
        ),
        q(
            "server_ttft_s",
            "p95",
            "histogram_quantile(0.95, sum by (le) (increase(vllm:time_to_first_token_seconds_bucket[$__range])))",
        ),
    ]
}

/// The defaults with `given` applied: a given `signal.stat` replaces the default one.
pub fn merge_queries(given: &[Query]) -> Vec<Query> {
    let mut out: Vec<Query> = default_queries()
        .into_iter()
        .filter(|d| {
            !given
                .iter()
                .any(|g| g.signal == d.signal && g.stat == d.stat)
        })
        .collect();
    out.extend(given.iter().cloned());
    out
}

/// The value of a query answer: the mean of a vector's samples, or a scalar. `None` for an empty
/// vector or NaN.
///
/// # Errors
/// The answer is not a successful Prometheus query response.
pub fn answer_value(body: &str) -> Result<Option<f64>, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("not a Prometheus API answer ({e})"))?;
    if v.get("status").and_then(|s| s.as_str()) != Some("success") {
        let err = v
            .get("error")
            .and_then(|s| s.as_str())
            .unwrap_or("no status");
        return Err(format!(
            "query failed: {}",
            err.chars().take(200).collect::<String>()
        ));
    }
    let data = v.get("data").ok_or("no data")?;
    let num = |p: &serde_json::Value| -> Option<f64> {
        p.get(1)?
            .as_str()?
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
    };
    let values: Vec<f64> = match data.get("resultType").and_then(|t| t.as_str()) {
        Some("vector") => data
            .get("result")
            .and_then(|r| r.as_array())
            .ok_or("no result")?
            .iter()
            .filter_map(|s| s.get("value").and_then(num))
            .collect(),
        Some("scalar") => data.get("result").and_then(num).into_iter().collect(),
        other => {
            return Err(format!(
                "unexpected result type {other:?} (want an instant vector)"
            ));
        }
    };
    Ok((!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64))
}

/// A level's window: its end (Unix seconds) and its duration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// The level's end, Unix time in seconds.
    pub end_unix_s: f64,
    /// Its duration, s.
    pub duration_s: f64,
}

/// Runs every query for one level. Returns the signals answered, the queries sent, the queries
/// that failed and the first failure's reason.
pub async fn query_level(
    client: &mut crate::transport::Fetcher,
    base_url: &str,
    queries: &[Query],
    w: Window,
    timeout: Duration,
) -> (BTreeMap<String, SignalStats>, u64, u64, Option<String>) {
    let range = format!("{}s", w.duration_s.ceil().max(1.0) as u64);
    let url = format!("{}/api/v1/query", base_url.trim_end_matches('/'));
    let mut out: BTreeMap<String, SignalStats> = BTreeMap::new();
    let (mut sent, mut failed, mut first) = (0, 0, None);
    for q in queries {
        sent += 1;
        let expr = q.expr.replace("$__range", &range);
        let r = tokio::time::timeout(timeout, async {
            let mut u = url::Url::parse(&url).map_err(|e| e.to_string())?;
            u.query_pairs_mut()
                .append_pair("query", &expr)
                .append_pair("time", &format!("{:.3}", w.end_unix_s));
            let got = client
                .get(u.as_str(), &[], super::MAX_SCRAPE_BYTES)
                .await
                .map_err(|e| e.to_string())?;
            answer_value(&String::from_utf8_lossy(&got.body))
        })
        .await
        .unwrap_or_else(|_| Err("no answer in time".into()));
        match r {
            Ok(Some(v)) => {
                let s = out.entry(q.signal.clone()).or_default();
                match q.stat.as_str() {
                    "mean" => s.mean = Some(v),
                    "max" => s.max = Some(v),
                    "p50" => s.p50 = Some(v),
                    _ => s.p95 = Some(v),
                }
            }
            Ok(None) => {}
            Err(e) => {
                failed += 1;
                first.get_or_insert_with(|| {
                    format!(
                        "{} {}.{}: {e}",
                        crate::redact::redact_url(base_url),
                        q.signal,
                        q.stat
                    )
                });
            }
        }
    }
    (out, sent, failed, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_flags() {
        let q: Query = "gpu_utilization.mean=avg(x) / 100".parse().unwrap();
        assert_eq!(
            (q.signal.as_str(), q.stat.as_str(), q.expr.as_str()),
            ("gpu_utilization", "mean", "avg(x) / 100")
        );
        for bad in ["x", "x=1", "a.b=1", "a.mean=", ".mean=1", "a-b.mean=1"] {
            assert!(bad.parse::<Query>().is_err(), "{bad}");
        }
        let m = merge_queries(std::slice::from_ref(&q));
        assert_eq!(m.len(), default_queries().len());
        assert!(m.contains(&q));
    }

    #[test]
    fn answers() {
        let vec2 = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.5"]},{"metric":{"a":"b"},"value":[1,"1.5"]}]}}"#;
        assert_eq!(answer_value(vec2), Ok(Some(1.0)));
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(answer_value(empty), Ok(None));
        let nan = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}}"#;
        assert_eq!(answer_value(nan), Ok(None));
        let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}"#;
        assert_eq!(answer_value(scalar), Ok(Some(2.0)));
        assert!(answer_value(r#"{"status":"error","error":"parse error"}"#).is_err());
        assert!(answer_value("<html>").is_err());
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(answer_value(matrix).is_err());
    }
}
