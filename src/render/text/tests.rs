//! Unit and snapshot tests of the text outputs: the table, Markdown, CSV and JSON.

use super::*;
use crate::bench::criteria::Criteria;
use crate::bench::report::model_names;
use crate::bench::report::tests::synthetic;
use crate::bench::select::select;
use crate::render::shown::Shown;

#[test]
fn a_client_bound_level_is_marked_beside_its_knee() {
    let mut r = synthetic();
    // alpha's knee is at 8 (its third level); its first level is not a knee.
    r.models[0].levels[2].client_bound = Some("starved".into());
    r.models[0].levels[0].client_bound = Some("starved".into());
    let t = table::render(&Shown::of(&r));
    assert!(t.contains("◆ knee, CLIENT-BOUND"), "{t}");
    let md = markdown::render(&Shown::of(&r));
    assert!(md.contains("| **knee**, **CLIENT-BOUND** |"), "{md}");
    assert!(md.contains("| **CLIENT-BOUND** |"), "{md}");
}

/// Issue 40: one answer, first, at one stated load; ties as ties; no second ranking by capacity;
/// the knee and the capacity side by side with what limited each; the view at another load
/// labelled as that view, without ranks.
#[test]
fn one_answer_first_and_other_loads_labelled() {
    let mut r = synthetic();
    let t = table::render(&Shown::of(&r));
    assert!(
        t.starts_with("Answer at 8 concurrent streams, the highest load every model ran (limits: error_rate < 1.00%; weights: "),
        "{t}"
    );
    assert!(t.contains("\n  1. alpha score 1.000\n"), "{t}");
    assert!(
        !t.contains("ranked by capacity") && !t.contains("Selection at"),
        "{t}"
    );
    assert_eq!(t.matches(". alpha score").count(), 1, "one ranking: {t}");
    assert!(
        t.contains("  alpha: knee at 8 concurrent streams, capacity ceiling 4 (agg tokens/s +4%, TTFT p95 +300%)"),
        "{t}"
    );
    assert!(
        t.contains("; why: queueing, from the client's view (from 4 to 8: TTFT p95 190.2 ms → 761.0 ms (+300%), TPOT p50 20.0 ms → 20.0 ms (+0%); TPOT held: requests waited before they started)"),
        "{t}"
    );
    assert!(
        t.contains("  alpha: SLO capacity up to 4 concurrent streams of the levels run: 100.0% [83.9%, 100.0%] there; at 8, 0.0% [0.0%, 16.1%], limited by ttft<=300.0 ms"),
        "{t}"
    );
    assert!(t.contains("; why: queueing, as at the knee\n"), "{t}");
    assert!(
        t.contains("  beta: SLO capacity none of the levels run; at 2, 50.0% [29.9%, 70.1%], limited by ttft<=300.0 ms\n"),
        "{t}"
    );
    // A tie: both rank 1, each said to be tied.
    let mut s = r.selection.clone().unwrap();
    let mut second = s.ranked[0].clone();
    second.model = "gamma".into();
    s.ranked.push(second);
    r.selection = Some(s);
    let t = answer::render(&Shown::of(&r), Style::Terminal);
    assert!(
        t.contains("  1. alpha score 1.000, tied\n  1. gamma score 1.000, tied\n"),
        "{t}"
    );
}

/// When no model passes, the answer lists them closest first, with each limit's distance and the
/// weighted score, said to be no pass; a view at another load names who passes there, unranked.
#[test]
fn no_pass_is_ordered_by_distance_and_another_load_is_a_view() {
    let mut r = synthetic();
    let c = Criteria {
        limits: vec!["ttft_p95<100ms".parse().unwrap()],
        select_at: Some(4.0),
        ..Criteria::default()
    };
    let (s, also) = crate::bench::answer::answer(&r.models, &c);
    (r.selection, r.also_at) = (Some(s), also);
    let t = table::render(&Shown::of(&r));
    assert!(
        t.starts_with("Answer at 4 concurrent streams, as asked (select_at) (limits: ttft_p95 < 100.0 ms; weights: "),
        "{t}"
    );
    assert!(
        t.contains("  no model passes every limit; closest first"),
        "{t}"
    );
    assert!(
        t.contains("  1. alpha: ttft_p95 = 190.2 ms (limit ttft_p95 < 100.0 ms), 90.25% beyond; passes every limit at no level run; weighted score 1.000 among the models measured there (not a pass)\n  2. beta: ttft_p95 = 381.5 ms"),
        "{t}"
    );
    assert!(
        t.contains("\nA view at 8 concurrent streams, the highest load every model ran, where no model passes every limit (not the answer; "),
        "{t}"
    );
    assert!(t.contains("  alpha fails: ttft_p95 = 761.0 ms"), "{t}");
}

#[test]
fn markdown_snapshot() {
    insta::assert_snapshot!(markdown::render(&Shown::of(&synthetic())));
}

/// The table's header line and its cells.
fn header_cells(t: &str) -> (&str, Vec<&str>) {
    let header = t
        .lines()
        .find(|l| l.starts_with('│'))
        .expect("a header line");
    let cells = header
        .trim_matches(|c| c == '│' || c == ' ')
        .split('┆')
        .map(str::trim)
        .collect();
    (header, cells)
}

#[test]
fn every_table_column_has_a_header() {
    let t = table::render(&Shown::of(&synthetic()));
    let (header, cells) = header_cells(&t);
    assert_eq!(cells.len(), 16, "{header}");
    assert!(cells.iter().all(|c| !c.is_empty()), "{header}");
    assert_eq!(cells.last(), Some(&"knee"));
    // The knee row (alpha @ 8) carries the marker under that header.
    let knee_row = t.lines().find(|l| l.contains("◆")).expect("a knee row");
    assert!(
        knee_row.contains("alpha") && knee_row.contains("┆ 8 "),
        "{knee_row}"
    );
}

#[test]
fn mixed_targets_and_prices_get_their_columns_and_names() {
    let mut r = synthetic();
    r.models[1].target = Some("other".into());
    r.models[1].model = "alpha".into(); // the same model at two targets
    for l in &mut r.models[0].levels {
        (l.cost_per_request, l.cost_per_mtok) = (Some(0.0035), Some(35.0));
    }
    assert_eq!(model_names(&r.models), ["local/alpha", "other/alpha"]);
    r.selection = Some(select(&r.models, &Criteria::default()));
    let t = table::render(&Shown::of(&r));
    let (header, cells) = header_cells(&t);
    assert_eq!(cells.len(), 16 + 3, "{header}");
    assert_eq!(&cells[..2], ["model", "target"]);
    assert_eq!(&cells[cells.len() - 3..], ["cost/req", "cost/Mtok", "knee"]);
    let row_cells = |l: &str| -> Vec<String> {
        l.trim_matches(|c| c == '│' || c == ' ')
            .split('┆')
            .map(|c| c.trim().to_owned())
            .collect()
    };
    // The levels' table (the comparison's, below it, has rows of its own).
    let levels_table = t.split("\nBaseline ").next().unwrap_or_default();
    let rows: Vec<Vec<String>> = levels_table
        .lines()
        .filter(|l| l.contains("alpha ┆"))
        .map(row_cells)
        .collect();
    assert_eq!(rows.len(), 6, "{t}");
    assert_eq!(
        (rows[0][1].as_str(), rows[3][1].as_str()),
        ("local", "other")
    );
    let n = rows[0].len();
    assert_eq!(&rows[0][n - 3..n - 1], ["0.0035", "35"]);
    assert_eq!(&rows[3][n - 3..n - 1], ["-", "-"]);
    assert!(
        t.contains(". local/alpha score") && t.contains(". other/alpha score"),
        "{t}"
    );
    assert!(t.contains("local/alpha -/64.0, other/alpha -/60.8"), "{t}");
    let md = markdown::render(&Shown::of(&r));
    let head = md
        .lines()
        .find(|l| l.starts_with("| model"))
        .expect("md header");
    assert!(head.starts_with("| model | target | concurrency"), "{head}");
    assert!(head.ends_with("| cost/req | cost/Mtok | knee |"), "{head}");
    let csv = csv::render(&r).unwrap();
    let line = csv.lines().nth(1).expect("a CSV row");
    assert!(line.starts_with("alpha,local,2,"), "{line}");
    assert!(line.contains(",0.0035,35,"), "{line}");
    // One target: no target column, plain names.
    let one = synthetic();
    let table = table::render(&Shown::of(&one));
    let head = table
        .lines()
        .find(|l| l.starts_with("│ model"))
        .expect("the table's header");
    assert!(!head.contains("target"), "{head}");
    assert_eq!(model_names(&one.models), ["alpha", "beta"]);
}

#[test]
fn table_snapshot() {
    insta::assert_snapshot!(table::render(&Shown::of(&synthetic())));
}

#[test]
fn csv_snapshot() {
    insta::assert_snapshot!(csv::render(&synthetic()).unwrap());
}

/// A sweep that asked for lengths shows requested→reached input and output lengths in the
/// table and Markdown, the calibration and the requests off their length in the notes.
#[test]
fn lengths_are_shown_when_asked_for() {
    let mut r = synthetic();
    assert!(
        !table::render(&Shown::of(&r)).contains("ISL"),
        "no lengths asked: no columns"
    );
    let m = &mut r.models[0];
    m.prompt = Some("isl512".into());
    m.calibration = Some(crate::probe::Calibration {
        overhead_tokens: 30.0,
        tokens_per_word: 1.0,
        requests: 3,
        seconds: 0.5,
        points: vec![(16, 46), (64, 94), (256, 286)],
        error: None,
        tokenizer: None,
        tokenizer_error: None,
    });
    let l = &mut m.levels[0].lengths;
    l.requested_input_tokens_mean = Some(512.0);
    l.input_tokens_mean = Some(514.0);
    l.requested_output_tokens_mean = Some(64.0);
    l.output_tokens_mean = Some(64.0);
    l.input_length_off = 2;
    r.models[1].calibration = r.models[0].calibration.clone();
    r.models[1].model = "alpha".into();
    let table = table::render(&Shown::of(&r));
    assert_eq!(
        table.matches("calibrated with").count(),
        1,
        "said once per model: {table}"
    );
    assert!(
        table.contains("ISL req→got") && table.contains("512→514"),
        "{table}"
    );
    assert!(table.contains("alpha · isl512"), "{table}");
    assert!(table.contains("alpha · isl512: calibrated with 3 requests in 0.50 s: 30.0 tokens of template + 1.000 tokens per word"), "{table}");
    assert!(
        table.contains("alpha · isl512 @ 2: 2 of 20 successes off the requested input length"),
        "{table}"
    );
    let md = markdown::render(&Shown::of(&r));
    assert!(
        md.contains("| ISL req→got | OSL req→got |") && md.contains("| 512→514 | 64→64 |"),
        "{md}"
    );
    assert!(
        md.contains("| -→- | -→64 |"),
        "unasked levels show what they have: {md}"
    );
    let csv = csv::render(&r).unwrap();
    assert!(
        csv.lines()
            .nth(1)
            .unwrap()
            .ends_with(",isl512,512,514,64,64,2"),
        "{csv}"
    );
    let back: Report = serde_json::from_str(&json(&r)).unwrap();
    let (a, b) = (&back.models[0], &r.models[0]);
    assert_eq!((&a.prompt, &a.calibration), (&b.prompt, &b.calibration));
    assert_eq!(a.levels[0].lengths, b.levels[0].lengths);
}

#[test]
fn json_round_trips() {
    let r = synthetic();
    let back: Report = serde_json::from_str(&json(&r)).unwrap();
    // serde_json parses floats to within an ulp, not always bit-exactly: compare the shape
    // and values to 1e-12.
    assert_eq!(back.models.len(), r.models.len());
    for (a, b) in back.models.iter().zip(&r.models) {
        assert_eq!(
            (&a.model, a.levels.len(), &a.knee),
            (&b.model, b.levels.len(), &b.knee)
        );
        for (x, y) in a.levels.iter().zip(&b.levels) {
            let (p, q) = (x.ttft_s.unwrap(), y.ttft_s.unwrap());
            assert!((p.p95 - q.p95).abs() < 1e-12 && x.requests == y.requests);
            assert_eq!(x.errors, y.errors);
        }
    }
    assert_eq!(back.selection, r.selection);
    assert_eq!(back.comparison, r.comparison);
}

/// One model whose only level, at concurrency 2, had 75 of 80 requests within the SLO: 93.8%,
/// interval [86.2%, 97.3%], which reaches across 95%. With `search`, the capacity search's
/// report of it (none passed, 2 failed).
fn seventy_five_of_eighty(search: bool) -> Report {
    use crate::bench::capacity::{CapacityPlan, Search, SearchEnd, SearchStop, Verdict};
    use crate::bench::stats::CapacityLimit;
    let mut r = synthetic();
    r.models.truncate(1);
    let m = &mut r.models[0];
    m.levels.truncate(1);
    m.levels[0].slo_attainment = Some(crate::bench::stats::Attainment {
        met: 75,
        counted: 80,
        share: 75.0 / 80.0,
        interval: crate::bench::confidence::wilson(75, 80),
        missed: Default::default(),
        failed: 5,
    });
    if search {
        let plan = CapacityPlan {
            search: Search {
                attainment: 0.95,
                start: 2.0,
                max: 64.0,
                tolerance: 0.0,
                open: false,
            },
            cap: 1000,
            budget: None,
            extensions: 0,
        };
        let tried = [(2.0, Verdict::Fail(Some(CapacityLimit::Errors)))];
        let outcome = SearchEnd {
            load: None,
            failed_at: Some((2.0, Some(CapacityLimit::Errors))),
            stopped: SearchStop::EvenFailed {
                load: 2.0,
                passed_above: false,
            },
        };
        m.capacity = Some(plan.capacity(&outcome, &tried, &m.levels));
    }
    (r.selection, r.also_at) = (None, None);
    r.slo_capacity = crate::bench::answer::slo_capacity(&r.models);
    r
}

/// Issue 39: a capacity of none at 75 of 80 within the SLO (interval [86%, 97%]) said nothing of
/// its doubt while the JSON said `clear: false`; every answer that is not clear says so, in the
/// passing case's words.
#[test]
fn a_none_capacity_states_its_doubt() {
    let doubt = " (not clear at 95% confidence: an interval reaches across the target; longer levels would decide)";
    let r = seventy_five_of_eighty(true);
    let json: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
    let c = &json["models"][0]["capacity"];
    assert_eq!(c["clear"], false, "{c:#}");
    assert!(c.get("concurrency").is_none(), "{c:#}");
    let t = answer::render(&Shown::of(&r), Style::Terminal);
    assert!(
        t.contains(&format!(
            "  alpha: SLO capacity none: no load tried met the target{doubt}; even 2 failed (1 level, 20 requests, "
        )),
        "{t}"
    );
    assert!(markdown::render(&Shown::of(&r)).contains(&format!("target{doubt}; even 2 failed")));
    // A fixed sweep's answer of none, by the same rule.
    let t = answer::render(&Shown::of(&seventy_five_of_eighty(false)), Style::Terminal);
    assert!(
        t.contains(&format!(
            "  alpha: SLO capacity none of the levels run; at 2, 93.8% [86.2%, 97.3%], limited by errors{doubt}; why: errors, from the client's view (at 2: 5 of 80 requests failed)\n"
        )),
        "{t}"
    );
}

/// Issue 40: a session's later turns read as slower ("first turn 922.8 ms, later turns 1.37 s")
/// while the cache's share was in the JSON only: each turn's TTFT is shown beside the input it
/// was sent with and the share of it the cache served, and the server's hits when collected.
#[test]
fn each_turn_shows_its_input_and_cached_share() {
    use crate::bench::stats::TurnStats;
    let mut r = synthetic();
    let s = |v: f64| {
        r.models[0].levels[0].ttft_s.map(|mut s| {
            s.p50 = v;
            s
        })
    };
    let turns = vec![
        TurnStats {
            turn: 1,
            successes: 10,
            ttft_s: s(0.9228),
            input_tokens_mean: Some(38.0),
            cached_share: Some(0.0),
        },
        TurnStats {
            turn: 2,
            successes: 10,
            ttft_s: s(1.37),
            input_tokens_mean: Some(412.4),
            cached_share: Some(0.69),
        },
    ];
    let l = &mut r.models[0].levels[0];
    l.lengths.turns = turns;
    let mut server = crate::servermetrics::level::ServerLevel::default();
    server.signals.insert(
        "prompt_cache_hit_ratio".into(),
        crate::servermetrics::level::SignalStats {
            mean: Some(0.6912),
            ..Default::default()
        },
    );
    l.server = Some(server);
    let t = table::render(&Shown::of(&r));
    assert!(
        t.contains("  alpha @ 2: TTFT p50 by turn: turn 1 922.8 ms at 38 input tokens, 0.00% cached; turn 2 1.37 s at 412 input tokens, 69.00% cached; the server's prefix-cache hits over the level 69.12%\n"),
        "{t}"
    );
}

/// Issue 42 item 1: the cached share of the input and the mean reasoning tokens get a column when
/// some level has them (a `-` for a level without), in the terminal and in Markdown, and travel
/// in the JSON.
#[test]
fn cached_share_and_reasoning_get_columns_when_some_level_has_them() {
    let mut r = synthetic();
    let table = table::render(&Shown::of(&r));
    assert!(
        !table.contains("cached in") && !table.contains("reasoning"),
        "{table}"
    );
    let l = &mut r.models[0].levels[0].lengths;
    l.cached_input_share = Some(0.9375);
    l.reasoning_tokens_mean = Some(41.6);
    let table = table::render(&Shown::of(&r));
    let (header, _) = header_cells(&table);
    assert!(
        header.contains("cached in") && header.contains("reasoning"),
        "{table}"
    );
    assert!(
        table.contains("93.75%") && table.contains(" 42 "),
        "{table}"
    );
    // Markdown's columns are chosen by the same rule: the same two, last.
    let md = markdown::render(&Shown::of(&r));
    let head = md.lines().find(|l| l.starts_with("| model")).unwrap();
    assert!(head.ends_with("| knee | cached in | reasoning |"), "{head}");
    assert!(md.contains("| 93.75% | 42 |"), "{md}");
    assert!(md.contains("|  | - | - |"), "{md}");
    let back: Report = serde_json::from_str(&json(&r)).unwrap();
    let l = &back.models[0].levels[0].lengths;
    assert_eq!(
        (l.cached_input_share, l.reasoning_tokens_mean),
        (Some(0.9375), Some(41.6))
    );
}

/// A capacity search's answer in words: the load, its attainment and interval, what failed first
/// above it, and its doubt when the intervals do not decide; a capacity of none says its doubt
/// as a load does.
#[test]
fn capacity_words_say_the_load_what_limited_it_and_the_doubt() {
    use crate::bench::capacity::{Capacity, SearchStop};
    use crate::bench::stats::CapacityLimit;
    let doubt = " (not clear at 95% confidence: an interval reaches across the target; longer levels would decide)";
    let mut c = Capacity {
        concurrency: Some(5),
        rate: None,
        target_attainment: 0.95,
        attainment: Some(1.0),
        attainment_interval: Some([0.839, 1.0]),
        limited_by: Some(CapacityLimit::Objective("ttft<=1.00 s".into())),
        failed_at: Some(6.0),
        clear: false,
        levels_tried: vec![1.0, 2.0, 4.0, 8.0, 6.0, 5.0],
        stopped: SearchStop::Bisected {
            passed: 5.0,
            failed: 6.0,
            within: None,
            passed_above: false,
        },
        requests: 120,
        seconds: 6.0,
        sessions: false,
        gpu_cost_per_mtok: None,
    };
    assert_eq!(
        answer::capacity_words(&c),
        format!(
            "up to 5 concurrent streams at 100.0% attainment [83.9%, 100.0%], limited by ttft<=1.00 s (failed at 6){doubt}"
        )
    );
    // A session workload's search answers in sessions.
    let sessions = Capacity {
        sessions: true,
        ..c.clone()
    };
    assert!(
        answer::capacity_words(&sessions).starts_with("up to 5 concurrent sessions at 100.0%"),
        "{}",
        answer::capacity_words(&sessions)
    );
    let open = Capacity {
        concurrency: None,
        rate: Some(0.75),
        ..sessions
    };
    assert!(answer::capacity_words(&open).starts_with("up to 0.75 sessions/s at"));
    (c.concurrency, c.rate, c.attainment_interval) = (None, Some(2.5004), None);
    c.clear = true;
    assert_eq!(
        answer::capacity_words(&c),
        "up to 2.5 requests/s at 100.0% attainment, limited by ttft<=1.00 s (failed at 6)"
    );
    // With the model's GPU count and price, the cost at the capacity is stated.
    c.gpu_cost_per_mtok = Some(1.496);
    assert_eq!(
        answer::capacity_words(&c),
        "up to 2.5 requests/s at 100.0% attainment, limited by ttft<=1.00 s (failed at 6), 1.496 per million output tokens on its GPUs there"
    );
    c.gpu_cost_per_mtok = None;
    c.rate = None;
    assert_eq!(
        answer::capacity_words(&c),
        "none: no load tried met the target"
    );
    c.clear = false;
    assert_eq!(
        answer::capacity_words(&c),
        format!("none: no load tried met the target{doubt}")
    );
}
