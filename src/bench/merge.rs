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
//!   twice, and none of the run's shards may be missing;
//! - what would merge silently wrong is refused too, naming the file and the reason: a sample
//!   whose identity (its `x-request-id`, `tp-<run>-<shard>-<n>`) belongs to another shard or is
//!   in two files, a number that is negative, not finite or implausible, shards whose levels did
//!   not run at the same time (they do not overlap for half of the shorter), and a merged level
//!   with fewer requests than the run asked for unless a shard's report says why.

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
    // Every model's (a shard whose load of a model stopped early has fewer of them).
    let levels: Vec<String> = r
        .models
        .iter()
        .map(|m| {
            m.levels
                .iter()
                .map(|l| l.key.label())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
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
        ("levels", levels.join("; ")),
        (
            "load mode",
            format!(
                "{} {:?} requests {:?} duration {:?} warmup {} ramp {:?} prewarm {}",
                mode.kind.as_str(),
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
    // Every sample's identity, and the file it came from.
    let mut ids: std::collections::HashMap<String, String> = std::collections::HashMap::new();
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
        let run_id = r.run.as_ref().map(|x| x.id.as_str()).unwrap_or("");
        for m in &r.models {
            for l in &m.levels {
                let at = || format!("{} @ {}", m.model, l.key.label());
                check_level(l, &format!("tp-{run_id}-{}-", shard.index))
                    .map_err(|why| mismatch(file, format!("{}: {why}", at())))?;
                for s in l.samples.iter().flatten() {
                    if let Some(id) = &s.request_id
                        && let Some(other) = ids.insert(id.clone(), file.clone())
                    {
                        return Err(mismatch(
                            file,
                            format!(
                                "{}: sample {id} is in {other} too: a shard's report given twice (or relabelled)",
                                at()
                            ),
                        ));
                    }
                }
            }
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

/// The latest plausible level start (the year 2100), and the earliest (2000): a start outside is
/// not an instant this run had.
const START_BOUNDS: (f64, f64) = (946_684_800.0, 4_102_444_800.0);
/// The longest plausible duration of one request or level, s (a week).
const MAX_SECONDS: f64 = 7.0 * 86_400.0;

/// Why a shard's level cannot be merged: a number that is not one the bench writes, a sample
/// without its identity or with another shard's (`prefix`: this shard's ids' start).
fn check_level(l: &LevelStats, prefix: &str) -> Result<(), String> {
    let plausible = |what: &str, v: f64| {
        if v.is_finite() && (0.0..=MAX_SECONDS).contains(&v) {
            Ok(())
        } else {
            Err(format!("{what} is {v}: not a duration this run measured"))
        }
    };
    if let Some(t) = l.started_unix_s
        && !(t.is_finite() && (START_BOUNDS.0..=START_BOUNDS.1).contains(&t))
    {
        return Err(format!("its start is {t}: not an instant of this run"));
    }
    plausible("its wall time", l.wall_s)?;
    for (i, s) in l.samples.iter().flatten().enumerate() {
        let sample = |what: &str| format!("sample {i}'s {what}");
        let id = s.request_id.as_deref().ok_or_else(|| {
            format!("sample {i} has no request id (made by an older tokenprobe?)")
        })?;
        if !id.starts_with(prefix) {
            return Err(format!(
                "sample {i} ({id}) was sent by another shard than the one this report says it is"
            ));
        }
        for (what, v) in [
            ("ttft_s", s.ttft_s),
            ("ttfo_s", s.ttfo_s),
            ("tpot_s", s.tpot_s),
            ("e2e_s", s.e2e_s),
            ("failure_s", s.failure_s),
            ("sent_s", Some(s.sent_s)),
            ("end_s", Some(s.end_s)),
            ("lag_s", Some(s.lag_s)),
        ] {
            if let Some(v) = v {
                plausible(&sample(what), v)?;
            }
        }
        if let Some(d) = s.decode_tokens_per_s
            && !(d.is_finite() && d >= 0.0)
        {
            return Err(format!("{} is {d}", sample("decode_tokens_per_s")));
        }
        if s.end_s + 1e-6 < s.sent_s {
            return Err(format!("{} is before its sent_s", sample("end_s")));
        }
        if s.output_tokens > 1_000_000_000 {
            return Err(format!(
                "{} is {}",
                sample("output_tokens"),
                s.output_tokens
            ));
        }
    }
    Ok(())
}

/// Whether the shards' parts of a level ran at the same time: every two of those that sent
/// requests overlap for at least half of the shorter one. `None` when they did; else the two
/// parts' indices.
fn apart(parts: &[&LevelStats]) -> Option<(usize, usize)> {
    let spans: Vec<(usize, f64, f64)> = parts
        .iter()
        .enumerate()
        .filter(|(_, l)| l.samples.as_ref().is_some_and(|s| !s.is_empty()))
        .filter_map(|(i, l)| l.started_unix_s.map(|t| (i, t, t + l.wall_s)))
        .collect();
    for (k, a) in spans.iter().enumerate() {
        for b in &spans[k + 1..] {
            let overlap = a.2.min(b.2) - a.1.max(b.1);
            let shorter = (a.2 - a.1).min(b.2 - b.1);
            if overlap < 0.5 * shorter {
                return Some((a.0, b.0));
            }
        }
    }
    None
}

/// One level of the merged run from the same level of every shard (its cost at `price`; a
/// session workload's `sessions` block recomputed, each shard's sessions kept apart).
fn merge_level(
    parts: &[&LevelStats],
    slos: &[super::criteria::Slo],
    price: Option<&crate::config::Price>,
    sessions: Option<&super::session::SessionMode>,
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
    for (i, l) in parts.iter().enumerate() {
        let off = offset(l);
        wall_s = wall_s.max(off + l.wall_s);
        samples.extend(l.samples.iter().flatten().map(|s| Sample {
            sent_s: s.sent_s + off,
            end_s: s.end_s + off,
            // Each shard numbers its sessions from 0: its part's number keeps them apart.
            session: s.session.map(|id| ((i as u64) << 40) | id),
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
    // A shard that could not measure its part makes the merged level unmeasured too; the CPU
    // wait is each shard's process's own, summed.
    out.cpu_wait_s = parts
        .iter()
        .filter_map(|l| l.cpu_wait_s)
        .reduce(|a, b| a + b);
    out.cpu_timeslices = parts
        .iter()
        .filter_map(|l| l.cpu_timeslices)
        .reduce(u64::saturating_add);
    let bound: Vec<String> = parts
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            l.client_bound
                .as_ref()
                .map(|w| format!("shard part {}: {w}", i + 1))
        })
        .collect();
    out.client_bound = (!bound.is_empty()).then(|| bound.join("; "));
    out.start_offset_s = parts
        .iter()
        .filter_map(|l| l.start_offset_s)
        .reduce(f64::max);
    // Every shard scraped the same server over the same (aligned) level: any shard's view is the
    // whole load's; the first one's is kept.
    out.server = parts.iter().find_map(|l| l.server.clone());
    out.efficiency.server_cache = parts.iter().find_map(|l| l.efficiency.server_cache.clone());
    for n in parts.iter().flat_map(|l| &l.notes) {
        if !out.notes.contains(n) {
            out.notes.push(n.clone());
        }
    }
    // A shard's part stopped before its amount makes the whole level partial.
    out.partial = parts.iter().any(|l| l.partial);
    out.stopped = parts.iter().find_map(|l| l.stopped.clone());
    out.sessions = sessions.and_then(|m| super::session::SessionLevel::of(&samples, slos, m));
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
        .map(|(mi, m)| -> Result<ModelReport, MergeError> {
            let levels: Vec<LevelStats> = (0..m.levels.len())
                .map(|li| {
                    let parts: Vec<&LevelStats> = reports
                        .iter()
                        .map(|(_, r)| &r.models[mi].levels[li])
                        .collect();
                    let at = format!("{} @ {}", m.model, parts[0].key.label());
                    if let Some((a, b)) = apart(&parts) {
                        return Err(MergeError::Mismatch {
                            file: reports[b].0.clone(),
                            reason: format!(
                                "{at} did not run at the same time as in {} (shards of one run need --start-at, or a start within the level)",
                                reports[a].0
                            ),
                        });
                    }
                    let merged = merge_level(
                        &parts,
                        slos,
                        m.price.as_ref(),
                        first.mode.sessions.as_ref(),
                    );
                    let sent = merged.samples.as_ref().map_or(0, Vec::len) as u64;
                    if let Some(asked) = first.mode.requests_per_level
                        && sent < asked
                        && parts.iter().all(|l| l.notes.is_empty())
                    {
                        return Err(MergeError::Mismatch {
                            file: reports[0].0.clone(),
                            reason: format!(
                                "{at} has {sent} requests of the {asked} the run asked for, and no shard says why: a shard's part is missing"
                            ),
                        });
                    }
                    Ok(merged)
                })
                .collect::<Result<Vec<_>, MergeError>>()?;
            let mut lengths = Lengths::default();
            for l in &levels {
                lengths.add(l.samples.as_deref().unwrap_or_default());
            }
            let (input_tokens_mean, output_tokens_mean) = lengths.means();
            Ok(ModelReport {
                levels,
                input_tokens_mean,
                output_tokens_mean,
                knee: None,
                capacity: None,
                // A shard's load of the model stopped by its errors says so for the run.
                stopped_early: reports
                    .iter()
                    .find_map(|(_, r)| r.models[mi].stopped_early.clone()),
                ..m.clone()
            })
        })
        .collect::<Result<Vec<_>, MergeError>>()?;
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
        also_at: None,
        slo_capacity: None,
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
    use crate::bench::criteria::NO_SLO;
    use crate::bench::stats::{LevelKey, Summary};

    /// Request `i` of a level: TTFT and E2E that differ per request, so any mix-up shows.
    fn sample(i: usize) -> Sample {
        let t = 0.05 + 0.001 * ((i * 37) % 101) as f64;
        let ok = !i.is_multiple_of(13);
        Sample {
            error_type: (!ok).then_some(crate::outcome::ErrorType::ServerError),
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
        let mut l = LevelStats::from_samples(key, &samples, wall, &[0.001, 0.002], &NO_SLO, 0);
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
            gpus: None,
            gpu_hour_price: None,
            input_tokens_mean: None,
            output_tokens_mean: None,
            levels,
            knee: None,
            capacity: None,
            stopped_early: None,
            check: None,
        }];
        r.selection = None;
        r.comparison = None;
        r.run = Some(RunInfo {
            id: id.into(),
            shard: shard.map(str::to_owned),
            start_at: None,
            merged_from: Vec::new(),
        });
        // Each sample's identity, as bench gives it: the run, the shard, a number.
        let index = shard.and_then(|s| s.split('/').next()).unwrap_or("0");
        let mut n = 0;
        for l in &mut r.models[0].levels {
            for s in l.samples.iter_mut().flatten() {
                s.request_id = Some(format!("tp-{id}-{index}-{n}"));
                n += 1;
            }
        }
        r
    }

    /// A plausible wall-clock instant of a level's start.
    const T0: f64 = 1_700_000_000.0;

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
            .map(|k| level(*k, (0..200).map(sample).collect(), T0))
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
        // Sent from 1 s into the level on (a shard's own instants are never before its start).
        let all: Vec<Sample> = (0..301)
            .map(sample)
            .map(|s| Sample {
                sent_s: s.sent_s + 1.0,
                end_s: s.end_s + 1.0,
                ..s
            })
            .collect();
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
        let a = report(Some("0/2"), "run2", vec![level(KEYS[0], even, T0)]);
        let mut b = report(
            Some("1/2"),
            "run2",
            vec![level(KEYS[0], odd_local, T0 + late)],
        );
        b.models[0].levels[0].loop_lag_s = Summary::of([0.004, 0.009]);
        let m = merge(&[("b.json".into(), b), ("a.json".into(), a)], &[]).unwrap();
        let got = &m.models[0].levels[0];
        let wall = all.iter().map(|s| s.end_s).fold(0.0, f64::max);
        let want = LevelStats::from_samples(KEYS[0], &all, wall, &[], &NO_SLO, 0);
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
        assert_eq!(got.started_unix_s, Some(T0));
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
        let lv = |k| vec![level(k, (0..10).map(sample).collect(), T0)];
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

    /// What would merge silently wrong is refused, naming the file and the reason.
    #[test]
    fn a_shard_the_client_could_not_measure_marks_the_merged_level() {
        let lv = |start: f64| vec![level(KEYS[0], (0..10).map(sample).collect(), start)];
        let mut a = report(Some("0/2"), "r", lv(T0));
        a.models[0].levels[0].cpu_wait_s = Some(0.25);
        a.models[0].levels[0].cpu_timeslices = Some(10_000);
        let mut b = report(Some("1/2"), "r", lv(T0 + 0.01));
        b.models[0].levels[0].client_bound = Some("starved".into());
        b.models[0].levels[0].cpu_wait_s = Some(1.5);
        b.models[0].levels[0].cpu_timeslices = Some(150);
        let m = merge(&[("a.json".into(), a), ("b.json".into(), b)], &[]).unwrap();
        let l = &m.models[0].levels[0];
        assert_eq!(l.client_bound.as_deref(), Some("shard part 2: starved"));
        // Each shard's process's own waits and slices, summed.
        assert_eq!(l.cpu_wait_s, Some(1.75));
        assert_eq!(l.cpu_timeslices, Some(10_150));
    }

    /// Issue 40: a shard whose part of a level was stopped (partial) makes the merged level
    /// partial, with its reason; a shard whose load of a model stopped before a level the other
    /// ran is not a shard of the same run (never an index out of bounds).
    #[test]
    fn a_shards_partial_level_marks_the_merged_level_and_a_missing_one_is_refused() {
        let lv = |start: f64| vec![level(KEYS[0], (0..10).map(sample).collect(), start)];
        let a = report(Some("0/2"), "r", lv(T0));
        let mut b = report(Some("1/2"), "r", lv(T0 + 0.01));
        let stopped = crate::bench::health::Stopped {
            by: crate::bench::health::StopCause::Errors,
            reason: "10 requests in a row failed with auth".into(),
            unfinished: 0,
            messages: Default::default(),
        };
        b.models[0].levels[0].partial = true;
        b.models[0].levels[0].stopped = Some(stopped.clone());
        b.models[0].stopped_early = Some("load stopped at 1".into());
        let m = merge(&[("a.json".into(), a.clone()), ("b.json".into(), b)], &[]).unwrap();
        let l = &m.models[0].levels[0];
        assert!(l.partial);
        assert_eq!(l.stopped.as_ref(), Some(&stopped));
        assert_eq!(
            m.models[0].stopped_early.as_deref(),
            Some("load stopped at 1")
        );
        // Two models, the second stopped on one shard before the level the other ran.
        let two = |r: &Report| {
            let mut r = r.clone();
            let mut second = r.models[0].clone();
            second.model = "n".into();
            for s in second
                .levels
                .iter_mut()
                .flat_map(|l| l.samples.iter_mut().flatten())
            {
                s.request_id = s.request_id.as_ref().map(|id| format!("{id}-n"));
            }
            r.models.push(second);
            r
        };
        let a2 = two(&a);
        let mut b2 = two(&report(Some("1/2"), "r", lv(T0 + 0.01)));
        b2.models[1].levels.clear();
        let e = merge(&[("a.json".into(), a2), ("b.json".into(), b2)], &[]).unwrap_err();
        assert!(e.to_string().contains("its levels is"), "{e}");
    }

    #[test]
    fn what_would_merge_silently_wrong_is_refused() {
        let lv = |start: f64| vec![level(KEYS[0], (0..10).map(sample).collect(), start)];
        let a = report(Some("0/2"), "r", lv(T0));
        let b = report(Some("1/2"), "r", lv(T0 + 0.01));
        let err = |x: &Report, y: &Report| {
            merge(
                &[("a.json".into(), x.clone()), ("b.json".into(), y.clone())],
                &[],
            )
            .unwrap_err()
            .to_string()
        };
        assert!(
            merge(
                &[("a.json".into(), a.clone()), ("b.json".into(), b.clone())],
                &[]
            )
            .is_ok()
        );
        // A shard's file relabelled as the other shard: its samples are the first shard's.
        let mut relabelled = a.clone();
        relabelled.run.as_mut().unwrap().shard = Some("1/2".into());
        let e = err(&a, &relabelled);
        assert!(
            e.starts_with("b.json: m @ 2: sample 0 (tp-r-0-0) was sent by another shard"),
            "{e}"
        );
        // The same sample in two files.
        let mut twice = b.clone();
        twice.models[0].levels[0].samples.as_mut().unwrap()[3].request_id = Some("tp-r-1-0".into());
        let e = err(&a, &twice);
        assert!(e.contains("sample tp-r-1-0 is in b.json too"), "{e}");
        // Numbers no run measures.
        for (field, v) in [("ttft", -5.0), ("ttft", 1e300), ("e2e", f64::NAN)] {
            let mut bad = b.clone();
            let s = &mut bad.models[0].levels[0].samples.as_mut().unwrap()[1];
            match field {
                "ttft" => s.ttft_s = Some(v),
                _ => s.e2e_s = Some(v),
            }
            let e = err(&a, &bad);
            assert!(
                e.starts_with("b.json: m @ 2: sample 1's") && e.contains("not a duration"),
                "{v}: {e}"
            );
        }
        let mut far = b.clone();
        far.models[0].levels[0].started_unix_s = Some(1e18);
        assert!(
            err(&a, &far).contains("its start is 1000000000000000000"),
            "{}",
            err(&a, &far)
        );
        // Shards that ran 5 s apart: their levels (about 0.4 s) never overlap.
        let later = report(Some("1/2"), "r", lv(T0 + 5.0));
        let e = err(&a, &later);
        assert!(
            e.starts_with("b.json: m @ 2 did not run at the same time as in a.json"),
            "{e}"
        );
        // Fewer requests than asked, and nothing says why; then a shard's note that does.
        let mut asked = a.clone();
        asked.mode.requests_per_level = Some(30);
        let mut asked_b = b.clone();
        asked_b.mode.requests_per_level = Some(30);
        let e = err(&asked, &asked_b);
        assert!(
            e.contains("has 20 requests of the 30 the run asked for"),
            "{e}"
        );
        asked_b.models[0].levels[0]
            .notes
            .push("shard 1/2 had no worker at concurrency 2".into());
        let m = merge(&[("a.json".into(), asked), ("b.json".into(), asked_b)], &[]).unwrap();
        assert_eq!(
            m.models[0].levels[0].notes,
            ["shard 1/2 had no worker at concurrency 2"]
        );
    }
}
