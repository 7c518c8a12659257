//! `tokenprobe bench merge`: the reports of a run's shards made into the report of the whole run
//! (pure). Every statistic is computed again from the union of the shards' samples, by the same
//! code a single run uses ([`LevelStats::from_samples`], the knee, selection, goodput and the
//! baseline comparison), so percentiles are exact, not averages of percentiles:
//!
//! - each shard's samples are moved onto one time line by its level's wall-clock start
//!   (`started_unix_s`), and the level's wall time is the union's: from the earliest start to
//!   the last request's end, so aggregate tokens/s is the union's tokens over that window;
//! - the load generator's loop lag cannot be pooled from summaries: the merged level shows the
//!   worst shard's; the server's view (`--server-metrics`) is the first shard's, since every
//!   shard watched the same server over the same level;
//! - shards of different runs are refused: the run id, the levels, the load mode, the workload,
//!   the target and the models must match, every shard must carry its samples, no shard may come
//!   twice, and none of the run's shards may be missing.

use super::report::{ModelReport, Report, RunInfo};
use super::shard::Shard;
use super::stats::{Lengths, LevelStats, Sample};
use std::collections::BTreeSet;

/// Why shards cannot be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no report to merge")]
    Empty,
    /// A report is not one of the run's shards, or does not fit the others.
    #[error("{file}: {reason}")]
    Mismatch {
        /// The report's file (as given).
        file: String,
        /// What does not fit.
        reason: String,
    },
    /// Shards of the run are missing.
    #[error("shards missing from run {run}: {missing} (of {count}); merge every shard's report")]
    Missing {
        /// The run id.
        run: String,
        /// The missing shards, `i/N`.
        missing: String,
        /// How many shards the run has.
        count: u32,
    },
}

/// The run's shard of a report (a report of one process is shard 0/1).
fn shard_of(r: &Report) -> Result<Shard, String> {
    match r.run.as_ref().and_then(|run| run.shard.as_deref()) {
        None => Ok(Shard::default()),
        Some(s) => s.parse(),
    }
}

/// What must be equal between two shards of one run, as text (the first difference is named).
fn identity(r: &Report) -> Vec<(&'static str, String)> {
    let models: Vec<String> = r
        .models
        .iter()
        .map(|m| format!("{}/{}", m.target.as_deref().unwrap_or(""), m.model))
        .collect();
    let levels: Vec<String> = r
        .models
        .first()
        .map(|m| m.levels.iter().map(|l| l.key.label()).collect())
        .unwrap_or_default();
    let mode = &r.mode;
    vec![
        (
            "run id",
            r.run.as_ref().map(|x| x.id.clone()).unwrap_or_default(),
        ),
        ("target", format!("{} {} {}", r.target, r.base_url, r.api)),
        (
            "prompt",
            format!("{} (max_tokens {:?})", r.prompt, r.max_tokens),
        ),
        ("models", models.join(",")),
        ("levels", levels.join(",")),
        (
            "load mode",
            format!(
                "{} {:?} requests {:?} duration {:?} warmup {} ramp {:?} prewarm {}",
                mode.kind,
                mode.arrival,
                mode.requests_per_level,
                mode.duration_per_level_s,
                mode.warmup,
                mode.ramp_s,
                mode.prewarm
            ),
        ),
        ("SLOs", r.slo.join(",")),
    ]
}

/// Checks that `reports` (file name, report) are every shard of one run, each once, with their
/// samples; returns their shards.
fn check(reports: &[(String, Report)]) -> Result<Vec<Shard>, MergeError> {
    let first = reports.first().ok_or(MergeError::Empty)?;
    let mismatch = |file: &str, reason: String| MergeError::Mismatch {
        file: file.to_owned(),
        reason,
    };
    let want = identity(&first.1);
    let mut shards = Vec::new();
    let mut seen = BTreeSet::new();
    let count = shard_of(&first.1).map_err(|e| mismatch(&first.0, e))?.count;
    for (file, r) in reports {
        let shard = shard_of(r).map_err(|e| mismatch(file, format!("shard {e}")))?;
        for ((what, a), (_, b)) in want.iter().zip(identity(r)) {
            if *a != b {
                return Err(mismatch(
                    file,
                    format!(
                        "not a shard of the same run as {}: its {what} is {b:?}, not {a:?}",
                        first.0
                    ),
                ));
            }
        }
        if shard.count != count {
            return Err(mismatch(
                file,
                format!(
                    "shard {shard} of a run of {} shards, not {count}",
                    shard.count
                ),
            ));
        }
        if !seen.insert(shard.index) {
            return Err(mismatch(file, format!("shard {shard} is given twice")));
        }
        if let Some((m, l)) = r.models.iter().find_map(|m| {
            m.levels
                .iter()
                .find(|l| l.samples.is_none())
                .map(|l| (&m.model, l.key.label()))
        }) {
            return Err(mismatch(
                file,
                format!("{m} @ {l} has no samples: run shards with --samples (--shard implies it)"),
            ));
        }
        shards.push(shard);
    }
    let missing: Vec<String> = (0..count)
        .filter(|i| !seen.contains(i))
        .map(|index| Shard { index, count }.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing {
            run: want[0].1.clone(),
            missing: missing.join(", "),
            count,
        });
    }
    Ok(shards)
}

/// One level of the merged run from the same level of every shard (its cost at `price`).
fn merge_level(
    parts: &[&LevelStats],
    slos: &[super::criteria::Slo],
    price: Option<&crate::config::Price>,
) -> LevelStats {
    let t0 = parts
        .iter()
        .filter_map(|l| l.started_unix_s)
        .fold(f64::INFINITY, f64::min);
    let offset = |l: &LevelStats| match l.started_unix_s {
        Some(s) if t0.is_finite() => s - t0,
        _ => 0.0,
    };
    let mut samples: Vec<Sample> = Vec::new();
    let mut wall_s: f64 = 0.0;
    for l in parts {
        let off = offset(l);
        wall_s = wall_s.max(off + l.wall_s);
        samples.extend(l.samples.iter().flatten().map(|s| Sample {
            sent_s: s.sent_s + off,
            end_s: s.end_s + off,
            ..s.clone()
        }));
    }
    samples.sort_by(|a, b| a.sent_s.total_cmp(&b.sent_s));
    let capped = parts.iter().map(|l| l.capped).sum();
    let mut out = LevelStats::from_samples(parts[0].key, &samples, wall_s, &[], slos, capped);
    if let Some(p) = price {
        out.set_cost(&samples, p);
    }
    out.loop_lag_s = parts
        .iter()
        .filter_map(|l| l.loop_lag_s)
        .max_by(|a, b| a.p99.total_cmp(&b.p99));
    out.started_unix_s = t0.is_finite().then_some(t0);
    out.start_offset_s = parts
        .iter()
        .filter_map(|l| l.start_offset_s)
        .reduce(f64::max);
    // Every shard scraped the same server over the same (aligned) level: any shard's view is the
    // whole load's; the first one's is kept.
    out.server = parts.iter().find_map(|l| l.server.clone());
    out.samples = Some(samples);
    out
}

/// The report of the whole run from its shards' reports `(file, report)`, in any order: the
/// first report's header (target, prompt, mode, started_at of the earliest), every level
/// recomputed from the union of samples; knee, selection and comparison are left to the caller
/// (they judge a merged run as they judge a single one).
///
/// # Errors
/// [`MergeError`] when the reports are not every shard of one run.
pub fn merge(
    reports: &[(String, Report)],
    slos: &[super::criteria::Slo],
) -> Result<Report, MergeError> {
    let shards = check(reports)?;
    let first = &reports[0].1;
    let models = first
        .models
        .iter()
        .enumerate()
        .map(|(mi, m)| {
            let levels: Vec<LevelStats> = (0..m.levels.len())
                .map(|li| {
                    let parts: Vec<&LevelStats> = reports
                        .iter()
                        .map(|(_, r)| &r.models[mi].levels[li])
                        .collect();
                    merge_level(&parts, slos, m.price.as_ref())
                })
                .collect();
            let mut lengths = Lengths::default();
            for l in &levels {
                lengths.add(l.samples.as_deref().unwrap_or_default());
            }
            let (input_tokens_mean, output_tokens_mean) = lengths.means();
            ModelReport {
                levels,
                input_tokens_mean,
                output_tokens_mean,
                knee: None,
                ..m.clone()
            }
        })
        .collect();
    let started_at = reports
        .iter()
        .map(|(_, r)| r.started_at.clone())
        .min()
        .unwrap_or_default();
    let mut merged_from: Vec<Shard> = shards;
    merged_from.sort_by_key(|s| s.index);
    Ok(Report {
        started_at,
        models,
        selection: None,
        comparison: None,
        run: Some(RunInfo {
            id: first.run.as_ref().map(|r| r.id.clone()).unwrap_or_default(),
            shard: None,
            start_at: first.run.as_ref().and_then(|r| r.start_at.clone()),
            merged_from: merged_from.iter().map(ToString::to_string).collect(),
        }),
        ..first.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::{LevelKey, Summary};

    /// Request `i` of a level: TTFT and E2E that differ per request, so any mix-up shows.
    fn sample(i: usize) -> Sample {
        let t = 0.05 + 0.001 * ((i * 37) % 101) as f64;
        let ok = !i.is_multiple_of(13);
        Sample {
            error_type: (!ok).then(|| "server_error".to_owned()),
            ttft_s: ok.then_some(t),
            ttfo_s: ok.then_some(t),
            tpot_s: ok.then_some(0.01 + t / 100.0),
            e2e_s: ok.then_some(t + 0.3),
            failure_s: (!ok).then_some(0.02),
            decode_tokens_per_s: ok.then_some(1.0 / (0.01 + t / 100.0)),
            output_tokens: if ok { 30 + (i as u64 % 7) } else { 0 },
            sent_s: 0.01 * i as f64,
            end_s: 0.01 * i as f64 + t + 0.3,
            lag_s: 0.0001 * (i % 5) as f64,
            first: i < 4,
            ..Sample::default()
        }
    }

    fn level(key: LevelKey, samples: Vec<Sample>, started: f64) -> LevelStats {
        let wall = samples.iter().map(|s| s.end_s).fold(0.0, f64::max);
        let mut l = LevelStats::from_samples(key, &samples, wall, &[0.001, 0.002], &[], 0);
        l.started_unix_s = Some(started);
        l.samples = Some(samples);
        l
    }

    fn report(shard: Option<&str>, id: &str, levels: Vec<LevelStats>) -> Report {
        let mut r = crate::bench::report::tests::synthetic();
        r.models = vec![ModelReport {
            prompt: None,
            calibration: None,
            model: "m".into(),
            target: Some("local".into()),
            price: None,
            input_tokens_mean: None,
            output_tokens_mean: None,
            levels,
            knee: None,
        }];
        r.selection = None;
        r.comparison = None;
        r.run = Some(RunInfo {
            id: id.into(),
            shard: shard.map(str::to_owned),
            start_at: None,
            merged_from: Vec::new(),
        });
        r
    }

    const KEYS: [LevelKey; 2] = [
        LevelKey {
            concurrency: 2,
            rate: None,
        },
        LevelKey {
            concurrency: 8,
            rate: None,
        },
    ];

    /// Issue 13: merging a single shard reproduces its own statistics exactly.
    #[test]
    fn one_shard_merges_into_itself() {
        let levels = KEYS
            .iter()
            .map(|k| level(*k, (0..200).map(sample).collect(), 1000.0))
            .collect();
        let r = report(None, "run1", levels);
        let m = merge(&[("a.json".into(), r.clone())], &[]).unwrap();
        assert_eq!(m.models[0].levels, r.models[0].levels);
        assert_eq!(m.run.unwrap().merged_from, ["0/1"]);
    }

    /// Two shards of one level: the merged statistics are those of the union of the samples,
    /// exactly (percentiles of the union, not of the shards), on one time line.
    #[test]
    fn shards_merge_into_the_statistics_of_the_union() {
        let all: Vec<Sample> = (0..301).map(sample).collect();
        let even: Vec<Sample> = all.iter().step_by(2).cloned().collect();
        let odd: Vec<Sample> = all.iter().skip(1).step_by(2).cloned().collect();
        // Shard 1 started its level 0.25 s after shard 0: its instants move by that much.
        let late = 0.25;
        let odd_local: Vec<Sample> = odd
            .iter()
            .map(|s| Sample {
                sent_s: s.sent_s - late,
                end_s: s.end_s - late,
                ..s.clone()
            })
            .collect();
        let a = report(Some("0/2"), "run2", vec![level(KEYS[0], even, 5000.0)]);
        let mut b = report(
            Some("1/2"),
            "run2",
            vec![level(KEYS[0], odd_local, 5000.0 + late)],
        );
        b.models[0].levels[0].loop_lag_s = Summary::of([0.004, 0.009]);
        let m = merge(&[("b.json".into(), b), ("a.json".into(), a)], &[]).unwrap();
        let got = &m.models[0].levels[0];
        let wall = all.iter().map(|s| s.end_s).fold(0.0, f64::max);
        let want = LevelStats::from_samples(KEYS[0], &all, wall, &[], &[], 0);
        assert_eq!(got.requests, 301);
        assert_eq!(got.errors, want.errors);
        for (g, w) in [
            (&got.ttft_s, &want.ttft_s),
            (&got.tpot_s, &want.tpot_s),
            (&got.e2e_s, &want.e2e_s),
        ] {
            let (g, w) = (g.as_ref().unwrap(), w.as_ref().unwrap());
            assert_eq!(
                (g.n, g.p50, g.p95, g.p99, g.max),
                (w.n, w.p50, w.p95, w.p99, w.max)
            );
        }
        assert!((got.wall_s - wall).abs() < 1e-9, "{} vs {wall}", got.wall_s);
        assert!((got.output_tokens_per_s - want.output_tokens_per_s).abs() < 1e-9);
        assert_eq!(got.output_tokens, want.output_tokens);
        assert_eq!(got.started_unix_s, Some(5000.0));
        assert_eq!(
            got.loop_lag_s.as_ref().unwrap().p99,
            Summary::of([0.004, 0.009]).unwrap().p99
        );
        let sent: Vec<f64> = got
            .samples
            .as_ref()
            .unwrap()
            .iter()
            .map(|s| s.sent_s)
            .collect();
        let want_sent: Vec<f64> = all.iter().map(|s| s.sent_s).collect();
        for (g, w) in sent.iter().zip(&want_sent) {
            assert!((g - w).abs() < 1e-9, "{sent:?}");
        }
        assert_eq!(m.run.unwrap().merged_from, ["0/2", "1/2"]);
    }

    #[test]
    fn reports_of_other_runs_or_incomplete_sets_are_refused() {
        let lv = |k| vec![level(k, (0..10).map(sample).collect(), 1.0)];
        let a = report(Some("0/2"), "r", lv(KEYS[0]));
        let b = report(Some("1/2"), "r", lv(KEYS[0]));
        assert!(merge(&[("a".into(), a.clone()), ("b".into(), b.clone())], &[]).is_ok());
        let err = |rs: Vec<Report>| {
            let named: Vec<(String, Report)> = rs
                .into_iter()
                .enumerate()
                .map(|(i, r)| (format!("r{i}.json"), r))
                .collect();
            merge(&named, &[]).unwrap_err().to_string()
        };
        let other = report(Some("1/2"), "s", lv(KEYS[0]));
        assert!(err(vec![a.clone(), other]).contains("its run id is \"s\""));
        let levels = report(Some("1/2"), "r", lv(KEYS[1]));
        assert!(err(vec![a.clone(), levels]).contains("its levels"));
        let mut model = b.clone();
        model.models[0].model = "n".into();
        assert!(err(vec![a.clone(), model]).contains("its models"));
        assert!(err(vec![a.clone(), a.clone()]).contains("given twice"));
        assert_eq!(
            err(vec![a.clone()]),
            "shards missing from run r: 1/2 (of 2); merge every shard's report"
        );
        let three = report(Some("1/3"), "r", lv(KEYS[0]));
        assert!(err(vec![a.clone(), three]).contains("a run of 3 shards, not 2"));
        let mut bare = b.clone();
        bare.models[0].levels[0].samples = None;
        assert!(err(vec![a.clone(), bare]).contains("has no samples"));
        let bad = report(Some("2/2"), "r", lv(KEYS[0]));
        assert!(err(vec![a, bad]).contains("shard"));
        assert_eq!(merge(&[], &[]).unwrap_err(), MergeError::Empty);
    }
}
