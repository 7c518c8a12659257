//! The answer's rules: its load, ties, the order by distance when no model passes, what limited
//! a knee or a capacity.

use super::*;
use crate::bench::report::Cause;
use crate::bench::select::tests::{level, model};
use crate::servermetrics::level::{ServerLevel, SignalStats};
use std::collections::BTreeMap;

/// `l` with `share` of its 100 requests within the SLOs.
fn within(mut l: LevelStats, share: f64) -> LevelStats {
    l.slo_attainment = Some(crate::bench::stats::Attainment {
        met: (share * 100.0).round() as u64,
        counted: 100,
        share,
        interval: None,
        missed: BTreeMap::from([("ttft<=200.0 ms".to_owned(), 100 - (share * 100.0) as u64)]),
        failed: 0,
    });
    l
}

fn weighted(w: &str) -> Criteria {
    Criteria {
        weights: crate::bench::criteria::parse_weights(w).unwrap(),
        ..Criteria::default()
    }
}

/// Issue 40: a fixed sweep opened with "ranked at 1: 1. gemma3, 2. smollm2" and ended with
/// "Selection at 20: 1. smollm2, 2. gemma3". One answer now: at 1, the highest load both serve
/// within the SLOs; 20 is a view at another load, where only smollm2 is measured as faster.
#[test]
fn one_answer_at_the_highest_load_every_model_serves_within_the_slos() {
    let gemma = model(
        "gemma3",
        vec![
            within(level(1, 100.0, 0.1, 0.0), 1.0),
            within(level(4, 120.0, 0.9, 0.0), 0.4),
            within(level(20, 110.0, 4.0, 0.0), 0.0),
        ],
    );
    let smol = model(
        "smollm2",
        vec![
            within(level(1, 60.0, 0.15, 0.0), 1.0),
            within(level(4, 200.0, 0.16, 0.0), 0.97),
            within(level(20, 400.0, 1.0, 0.0), 0.2),
        ],
    );
    let models = [gemma, smol];
    let c = weighted("ttft=1");
    assert_eq!(
        answer_load(&models, &c),
        (Some(1.0), AnswerLoad::WithinSlos)
    );
    let (s, also) = answer(&models, &c);
    assert_eq!(
        (s.level.to_string().as_str(), s.load),
        ("1", Some(AnswerLoad::WithinSlos))
    );
    let ranked: Vec<(usize, &str)> = s
        .ranked
        .iter()
        .map(|r| (r.rank, r.model.as_str()))
        .collect();
    assert_eq!(ranked, [(1, "gemma3"), (2, "smollm2")]);
    let also = also.expect("a view at the highest load run");
    assert_eq!(
        (also.level.to_string().as_str(), also.load),
        ("20", Some(AnswerLoad::HighestCommon))
    );
    assert_eq!(also.ranked[0].model, "smollm2");
    // Asked for a load: that load, and the view at 20 beside it.
    let at4 = Criteria {
        select_at: Some(4.0),
        ..c.clone()
    };
    let (s, also) = answer(&models, &at4);
    assert_eq!(
        (s.level.to_string().as_str(), s.load),
        ("4", Some(AnswerLoad::Asked))
    );
    assert_eq!(also.map(|a| a.level.to_string()), Some("20".to_owned()));
    // Asked for the highest load itself: no second view.
    let at20 = Criteria {
        select_at: Some(20.0),
        ..c.clone()
    };
    assert!(answer(&models, &at20).1.is_none());
    // Without SLOs: the highest load every model ran, and no other view.
    let plain: Vec<ModelReport> = models
        .iter()
        .cloned()
        .map(|mut m| {
            for l in &mut m.levels {
                l.slo_attainment = None;
            }
            m
        })
        .collect();
    let (s, also) = answer(&plain, &c);
    assert_eq!(
        (s.level.to_string().as_str(), s.load),
        ("20", Some(AnswerLoad::HighestCommon))
    );
    assert!(also.is_none());
}

/// A model stopped early (its last level 10) against one that ran to 20: the answer is stated at
/// 10, the highest load both ran, not at each one's last level under the first one's label; with
/// no load in common, at each model's last level, said as such.
#[test]
fn the_answer_compares_like_loads() {
    let a = model(
        "a",
        vec![level(5, 100.0, 0.1, 0.0), level(10, 150.0, 0.2, 0.0)],
    );
    let b = model(
        "b",
        vec![
            level(5, 100.0, 0.1, 0.0),
            level(10, 150.0, 0.2, 0.0),
            level(20, 150.0, 0.9, 0.0),
        ],
    );
    let (s, also) = answer(&[b.clone(), a.clone()], &Criteria::default());
    assert_eq!(
        (s.level.to_string().as_str(), s.load),
        ("10", Some(AnswerLoad::HighestCommon))
    );
    assert!(also.is_none());
    // Equal figures: a tie, one rank, listed by name.
    let ranked: Vec<(usize, &str)> = s
        .ranked
        .iter()
        .map(|r| (r.rank, r.model.as_str()))
        .collect();
    assert_eq!(ranked, [(1, "a"), (1, "b")]);
    let apart = model("c", vec![level(7, 100.0, 0.1, 0.0)]);
    let (s, _) = answer(&[a, apart], &Criteria::default());
    assert_eq!(
        (s.level.to_string().as_str(), s.load),
        ("last", Some(AnswerLoad::LastLevels))
    );
}

/// Ties share a rank and the next rank skips theirs (1, 1, 3), also by SLO capacity, where equal
/// capacities are listed as equals, never as first and second.
#[test]
fn ties_are_ties() {
    let m = |name: &str, ttft: f64| model(name, vec![within(level(4, 100.0, ttft, 0.0), 1.0)]);
    let models = [m("x", 0.2), m("b", 0.1), m("a", 0.1)];
    let (s, _) = answer(&models, &weighted("ttft=1"));
    let ranked: Vec<(usize, &str)> = s
        .ranked
        .iter()
        .map(|r| (r.rank, r.model.as_str()))
        .collect();
    assert_eq!(ranked, [(1, "a"), (1, "b"), (3, "x")]);
    let caps = slo_capacity(&models).expect("SLOs");
    let loads: Vec<Option<f64>> = caps.models.iter().map(|c| c.level.map(|k| k.x())).collect();
    assert_eq!(loads, [Some(4.0); 3]);
    // None within the SLOs for either: both none, in the models' order, no rank at all.
    let none = |name: &str| model(name, vec![within(level(4, 100.0, 0.5, 0.0), 0.5)]);
    let caps = slo_capacity(&[none("gemma3"), none("smollm2")]).expect("SLOs");
    assert!(caps.models.iter().all(|c| c.level.is_none()));
    assert_eq!(caps.models[1].model, "smollm2");
}

/// Issue 40: when no model passes the limits, every model is listed by its distance to them
/// (fewest limits failed, then the smallest relative miss), with the distance to each limit and
/// its weighted score; a model without a success comes last.
#[test]
fn when_no_model_passes_they_are_ordered_by_distance_to_the_limits() {
    let c = Criteria {
        limits: vec![
            "ttft_p95<1s".parse().unwrap(),
            "error_rate<1%".parse().unwrap(),
        ],
        ..weighted("ttft=1")
    };
    let mut dead = level(8, 0.0, 1.0, 1.0);
    dead.successes = 0;
    dead.ttft_s = None;
    let models = [
        model("two", vec![level(8, 100.0, 1.05, 0.02)]),
        model("far", vec![level(8, 100.0, 1.5, 0.0)]),
        model("dead", vec![dead]),
        model("near", vec![level(8, 100.0, 1.1, 0.0)]),
        model("twin", vec![level(8, 100.0, 1.1, 0.0)]),
    ];
    let s = select(&models, &c);
    assert!(s.ranked.is_empty());
    let order: Vec<(&str, Option<usize>)> = s
        .rejected
        .iter()
        .map(|r| (r.model.as_str(), r.closest))
        .collect();
    assert_eq!(
        order,
        [
            ("near", Some(1)),
            ("twin", Some(1)),
            ("far", Some(3)),
            ("two", Some(4)),
            ("dead", Some(5))
        ]
    );
    let near = &s.rejected[0];
    assert_eq!(near.misses.len(), 1);
    assert!((near.misses[0].distance.unwrap() - 0.1).abs() < 1e-9);
    assert_eq!(
        near.reasons,
        ["ttft_p95 = 1.10 s (limit ttft_p95 < 1.00 s), 10.00% beyond"]
    );
    let two = &s.rejected[3];
    let d: Vec<f64> = two.misses.iter().filter_map(|m| m.distance).collect();
    assert!(
        (d[0] - 0.05).abs() < 1e-9 && (d[1] - 1.0).abs() < 1e-9,
        "{d:?}"
    );
    // The weighted score is kept among the measured models: the fastest TTFT scores 1.
    assert_eq!(two.score, Some(1.0));
    assert!((s.rejected[2].score.unwrap() - 1.05 / 1.5).abs() < 1e-9);
    assert_eq!(s.rejected[4].score, None);
    // With a model that passes, the rejected ones are closest first, without places or scores.
    let mut models = models.to_vec();
    models.push(model("ok", vec![level(8, 100.0, 0.5, 0.0)]));
    let s = select(&models, &c);
    assert_eq!(s.ranked[0].model, "ok");
    assert_eq!(s.rejected[0].model, "near");
    assert!(
        s.rejected
            .iter()
            .all(|r| r.closest.is_none() && r.score.is_none())
    );
}

#[test]
fn the_distance_to_a_limit_is_relative() {
    use crate::bench::select::distance;
    assert!((distance(1.5, 1.0) - 0.5).abs() < 1e-12);
    assert!(
        (distance(20.0, 30.0) - 1.0 / 3.0).abs() < 1e-12,
        "below a > limit"
    );
    assert!(
        (distance(0.02, 0.0) - 0.02).abs() < 1e-12,
        "a limit of 0: the value"
    );
}

fn with_server(mut l: LevelStats, waiting: f64, running: f64) -> LevelStats {
    let mm = |v: f64| SignalStats {
        mean: Some(v),
        max: Some(v),
        ..SignalStats::default()
    };
    let mut s = ServerLevel::default();
    s.signals.insert("requests_waiting".into(), mm(waiting));
    s.signals.insert("requests_running".into(), mm(running));
    l.server = Some(s);
    l
}

fn tpot(mut l: LevelStats, v: f64) -> LevelStats {
    if let Some(s) = l.tpot_s.as_mut() {
        s.p50 = v;
    }
    l
}

/// What limited a level against a lower one: errors; the server's queue; the server running
/// more with no queue (issue 40: one CPU thread shared, TTFT grew with no queue); from the
/// client alone, TPOT's growth or TTFT's alone.
#[test]
fn what_limited_a_level() {
    let cause = |b: &LevelStats, a: &LevelStats| {
        let l = limiter(b, a).expect("a limiter");
        (l.cause, l.view, l.evidence)
    };
    // Errors first: 0% → 6%.
    let (c, v, e) = cause(&level(1, 50.0, 0.5, 0.0), &level(4, 60.0, 2.0, 0.06));
    assert_eq!((c, v), (Cause::Errors, View::Client));
    assert_eq!(e, "from 1 to 4: error rate 0.00% → 6.00%");
    // The server's queue grew to 2.
    let (c, v, e) = cause(
        &with_server(level(1, 50.0, 0.5, 0.0), 0.0, 1.0),
        &with_server(level(4, 60.0, 2.0, 0.0), 2.0, 2.0),
    );
    assert_eq!((c, v), (Cause::Queueing, View::Server));
    assert!(
        e.starts_with("from 1 to 4: the server's requests waiting (mean) 0.0 → 2.0, requests running (max) 1 → 2; TTFT p95 500.0 ms → 2.00 s (+300%)"),
        "{e}"
    );
    // No queue, four running: the compute is shared.
    let (c, v, e) = cause(
        &with_server(level(1, 50.0, 0.5, 0.0), 0.0, 1.0),
        &with_server(level(4, 60.0, 2.0, 0.0), 0.0, 4.0),
    );
    assert_eq!((c, v), (Cause::SharedCompute, View::Server));
    assert!(
        e.starts_with("from 1 to 4: no queue on the server: requests waiting (mean) 0.0 → 0.0, requests running (max) 1 → 4"),
        "{e}"
    );
    // The client alone: TPOT held (20 ms → 21 ms), TTFT grew: requests waited.
    let (c, v, e) = cause(
        &level(1, 50.0, 0.5, 0.0),
        &tpot(level(4, 60.0, 2.0, 0.0), 0.021),
    );
    assert_eq!((c, v), (Cause::Queueing, View::Client));
    assert!(
        e.ends_with("TPOT held: requests waited before they started"),
        "{e}"
    );
    // TPOT grew 50%: the running requests share the compute.
    let (c, _, _) = cause(
        &level(1, 50.0, 0.5, 0.0),
        &tpot(level(4, 60.0, 2.0, 0.0), 0.03),
    );
    assert_eq!(c, Cause::SharedCompute);
    // Nothing grew, or no TPOT to tell by: unknown.
    let (c, _, _) = cause(&level(1, 50.0, 0.5, 0.0), &level(4, 60.0, 0.52, 0.0));
    assert_eq!(c, Cause::Unknown);
    let mut no_tpot = level(4, 60.0, 2.0, 0.0);
    no_tpot.tpot_s = None;
    let (c, _, _) = cause(&level(1, 50.0, 0.5, 0.0), &no_tpot);
    assert_eq!(c, Cause::Unknown);
}

/// A fixed sweep's capacity within the SLOs: the highest level at 95%, the first below it, and
/// what made it fail there, against the capacity's level; the knee's cause beside it.
#[test]
fn a_capacity_says_what_limited_it() {
    let m = model(
        "a",
        vec![
            within(with_server(level(1, 50.0, 0.1, 0.0), 0.0, 1.0), 1.0),
            within(with_server(level(2, 100.0, 0.15, 0.0), 0.0, 2.0), 0.96),
            within(with_server(level(4, 110.0, 0.6, 0.0), 0.0, 4.0), 0.3),
        ],
    );
    let caps = slo_capacity(std::slice::from_ref(&m)).expect("SLOs");
    let c = &caps.models[0];
    assert_eq!(caps.target_attainment, 0.95);
    assert_eq!(
        (c.level.map(|k| k.x()), c.failed_at.map(|k| k.x())),
        (Some(2.0), Some(4.0))
    );
    assert_eq!(
        c.missed,
        Some(CapacityLimit::Objective("ttft<=200.0 ms".into()))
    );
    let l = c.limited_by.as_ref().expect("a limiter");
    assert_eq!((l.cause, l.view), (Cause::SharedCompute, View::Server));
    assert!(l.evidence.starts_with("from 2 to 4:"), "{}", l.evidence);
    let knee = crate::bench::select::find_knee(&m.levels, &Default::default()).expect("knee");
    assert_eq!(
        knee.limited_by.map(|l| (l.cause, l.view)),
        Some((Cause::SharedCompute, View::Server))
    );
    // Failing at its first level with errors: errors, from that level alone.
    let mut failing = level(1, 5.0, 0.1, 0.5);
    failing.slo_attainment = Some(crate::bench::stats::Attainment {
        met: 50,
        counted: 100,
        share: 0.5,
        interval: None,
        missed: BTreeMap::new(),
        failed: 50,
    });
    let caps = slo_capacity(&[model("b", vec![failing])]).expect("SLOs");
    let c = &caps.models[0];
    assert_eq!(
        (c.level, c.missed.clone()),
        (None, Some(CapacityLimit::Errors))
    );
    assert_eq!(
        c.limited_by
            .as_ref()
            .map(|l| (l.cause, l.evidence.as_str())),
        Some((Cause::Errors, "at 1: 50 of 100 requests failed"))
    );
    // Without SLOs: no capacity block.
    assert!(slo_capacity(&[model("c", vec![level(1, 5.0, 0.1, 0.0)])]).is_none());
}
