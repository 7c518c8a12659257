use super::*;
use crate::bench::report::tests::synthetic;

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn report(started: &str, ttft_scale: f64) -> Report {
    let mut r = synthetic();
    r.started_at = started.into();
    for l in r.models.iter_mut().flat_map(|m| &mut m.levels) {
        if let Some(s) = &mut l.ttft_s {
            s.p95 *= ttft_scale;
        }
    }
    r
}

#[test]
fn a_run_is_recorded_listed_and_read_back_without_its_samples() {
    let d = dir();
    // The directory is made.
    let path = d.path().join("a/b/runs.sqlite3");
    let mut s = Store::open(&path).unwrap();
    let mut r = report("2026-12-01T10:00:00+01:00", 1.0);
    r.models[0].levels[0].samples = Some(crate::bench::report::tests::samples(5, 0.1, 8, 0.01, 0));
    let id = s.record(r.clone()).unwrap();
    let id2 = s.record(report("2026-12-02T09:00:00Z", 2.0)).unwrap();
    assert!(id2 > id);
    let runs = s.list(&Filter::default()).unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].id, id2, "newest first");
    let first = &runs[1];
    assert_eq!(first.started_at, "2026-12-01T09:00:00Z", "stored as UTC");
    assert_eq!(first.models, ["alpha", "beta"]);
    assert_eq!(first.levels, ["2", "4", "8"]);
    assert_eq!(first.target, "local");
    assert!(!first.open_loop);
    assert_eq!(first.baseline.as_deref(), Some("old.json"));
    assert_eq!(
        first.regressions,
        Some(r.comparison.as_ref().unwrap().regressions.len() as u64)
    );
    let back = s.report(id).unwrap();
    assert!(back.models[0].levels.iter().all(|l| l.samples.is_none()));
    assert_eq!(
        back.models[1].levels[2].ttft_s,
        r.models[1].levels[2].ttft_s
    );
    assert!(matches!(s.report(999), Err(HistoryError::NotFound { .. })));
    // Reopened, it is the same store.
    drop(s);
    let s = Store::open(&path).unwrap();
    assert_eq!(s.list(&Filter::default()).unwrap().len(), 2);
}

#[test]
fn listings_filter_by_model_target_prompt_and_date() {
    let d = dir();
    let mut s = Store::open(&d.path().join("runs.sqlite3")).unwrap();
    for day in 1..=4 {
        let mut r = report(&format!("2026-11-0{day}T12:00:00Z"), 1.0);
        if day == 4 {
            r.models.remove(0);
            r.prompt = "long".into();
        }
        s.record(r).unwrap();
    }
    let ids = |f: Filter| -> Vec<i64> { s.list(&f).unwrap().iter().map(|r| r.id).collect() };
    assert_eq!(ids(Filter::default()), [4, 3, 2, 1]);
    let alpha = Filter {
        model: Some("alpha".into()),
        ..Filter::default()
    };
    assert_eq!(ids(alpha.clone()), [3, 2, 1]);
    let by_pair = Filter {
        model: Some("local/beta".into()),
        prompt: Some("long".into()),
        ..Filter::default()
    };
    assert_eq!(ids(by_pair), [4]);
    let dated = Filter {
        since: Some("2026-11-02T00:00:00Z".into()),
        until: Some("2026-11-04T00:00:00+00:00".into()),
        ..Filter::default()
    };
    assert_eq!(ids(dated), [3, 2]);
    let newest_two = Filter { limit: 2, ..alpha };
    assert_eq!(ids(newest_two), [3, 2]);
    let other = Filter {
        target: Some("elsewhere".into()),
        ..Filter::default()
    };
    assert!(ids(other).is_empty());
    // The model's runs carry its levels by load.
    let runs = s.model_runs("beta", &Filter::default()).unwrap();
    assert_eq!(runs.len(), 4);
    assert_eq!(runs[0].prompt, "long");
    let xs: Vec<f64> = runs[1].levels.iter().map(|l| l.x).collect();
    assert_eq!(xs, [2.0, 4.0, 8.0]);
    assert!(runs[1].levels[1].error_rate > 0.0);
}

#[test]
fn last_is_the_newest_complete_run_of_the_same_pair_prompt_and_loop() {
    let d = dir();
    let mut s = Store::open(&d.path().join("runs.sqlite3")).unwrap();
    let pairs = [("local".to_owned(), "alpha".to_owned())];
    assert!(matches!(
        s.baseline(RunRef::Last, &pairs, "hello", false),
        Err(HistoryError::NotFound { .. })
    ));
    let a = s.record(report("2026-11-01T00:00:00Z", 1.0)).unwrap();
    let b = s.record(report("2026-11-02T00:00:00Z", 1.0)).unwrap();
    let mut stopped = report("2026-11-03T00:00:00Z", 1.0);
    stopped.interrupted = Some(crate::bench::report::Interrupted {
        signal: "SIGINT".into(),
        level_left_out: None,
    });
    s.record(stopped).unwrap();
    let mut open = report("2026-11-04T00:00:00Z", 1.0);
    open.mode.kind = "open".into();
    s.record(open).unwrap();
    let mut other_prompt = report("2026-11-05T00:00:00Z", 1.0);
    other_prompt.prompt = "long".into();
    s.record(other_prompt).unwrap();
    let (id, _) = s.baseline(RunRef::Last, &pairs, "hello", false).unwrap();
    assert_eq!(
        id, b,
        "not the interrupted, open-loop or other prompt's run"
    );
    let (id, r) = s.baseline(RunRef::Id(a), &pairs, "ignored", true).unwrap();
    assert_eq!((id, r.started_at.as_str()), (a, "2026-11-01T00:00:00Z"));
    let nobody = [("local".to_owned(), "gamma".to_owned())];
    assert!(matches!(
        s.baseline(RunRef::Last, &nobody, "hello", false),
        Err(HistoryError::NotFound { .. })
    ));
}

#[test]
fn a_write_that_fails_midway_leaves_nothing_of_its_run() {
    let d = dir();
    let path = d.path().join("runs.sqlite3");
    let mut s = Store::open(&path).unwrap();
    s.record(report("2026-11-01T00:00:00Z", 1.0)).unwrap();
    // The third level row of the run fails after its run and model rows were written.
    s.conn
        .execute_batch(
            "CREATE TRIGGER fail AFTER INSERT ON levels WHEN (SELECT count(*) FROM levels WHERE run = NEW.run) = 3
             BEGIN SELECT RAISE(ABORT, 'disk gone'); END;",
        )
        .unwrap();
    let err = s.record(report("2026-11-02T00:00:00Z", 1.0)).unwrap_err();
    assert!(err.to_string().contains("disk gone"), "{err}");
    let count = |t: &str| -> i64 {
        s.conn
            .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!((count("runs"), count("models"), count("levels")), (1, 2, 6));
}

#[test]
fn a_newer_schema_another_applications_database_and_what_is_no_file_are_refused() {
    let d = dir();
    let newer = d.path().join("newer.sqlite3");
    Store::open(&newer).unwrap();
    Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", SCHEMA + 1)
        .unwrap();
    let e = Store::open(&newer).unwrap_err();
    assert!(
        matches!(
            e,
            HistoryError::Newer {
                found: 3,
                known: 2,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("written by a newer tokenprobe (schema 3; this one reads up to 2)")
    );

    let foreign = d.path().join("other.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE runs (x)")
        .unwrap();
    assert!(matches!(
        Store::open(&foreign),
        Err(HistoryError::Foreign { .. })
    ));
    // Untouched: still the other application's one table, no schema written.
    let c = Connection::open(&foreign).unwrap();
    let v: i64 = c
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, 0);

    let text = d.path().join("notes.txt");
    std::fs::write(&text, "x".repeat(4096)).unwrap();
    let e = Store::open(&text).unwrap_err();
    assert!(matches!(e, HistoryError::Foreign { .. }), "{e}");
    assert_eq!(std::fs::read_to_string(&text).unwrap(), "x".repeat(4096));
    assert!(
        Store::open_existing(&d.path().join("none.sqlite3"))
            .unwrap()
            .is_none()
    );
    // Not a regular file: refused before SQLite opens it (a FIFO would hang it, a device would
    // swallow the runs).
    for p in [
        d.path().to_path_buf(),
        "/dev/null".into(),
        "/dev/zero".into(),
    ] {
        let e = Store::open(&p).unwrap_err();
        assert!(
            matches!(e, HistoryError::NotAFile { .. }),
            "{}: {e}",
            p.display()
        );
    }
    let fifo = d.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    assert!(matches!(
        Store::open(&fifo),
        Err(HistoryError::NotAFile { .. })
    ));
}

#[test]
fn a_schema_1_store_is_migrated_with_its_runs_indexed() {
    let d = dir();
    let path = d.path().join("v1.sqlite3");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(SCHEMA_1).unwrap();
        c.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        let json = serde_json::to_string(&report("2026-10-01T00:00:00Z", 1.0)).unwrap();
        c.execute(
            "INSERT INTO runs (started_at, recorded_at, version, target, prompt, open_loop, interrupted, report)
             VALUES ('2026-10-01T00:00:00Z', '2026-10-01T00:01:00Z', '0.1.0', 'local', 'hello', 0, 0, ?1)",
            [json],
        )
        .unwrap();
        c.execute(
            "INSERT INTO runs (started_at, recorded_at, version, target, prompt, open_loop, interrupted, report)
             VALUES ('2026-10-02T00:00:00Z', '2026-10-02T00:01:00Z', '0.0.1', 'local', 'hello', 0, 0, '{}')",
            [],
        )
        .unwrap();
    }
    let mut s = Store::open(&path).unwrap();
    let v: i64 = s
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA);
    let runs = s.list(&Filter::default()).unwrap();
    assert_eq!(runs.len(), 2);
    // The unreadable report keeps its row, without models.
    assert!(runs[0].models.is_empty());
    assert_eq!(runs[1].models, ["alpha", "beta"]);
    assert_eq!(runs[1].levels, ["2", "4", "8"]);
    assert!(matches!(
        s.report(runs[0].id),
        Err(HistoryError::Report { .. })
    ));
    s.record(report("2026-10-03T00:00:00Z", 1.0)).unwrap();
    assert_eq!(s.model_runs("alpha", &Filter::default()).unwrap().len(), 2);
}

/// Issue 40: a partial level (stopped before its amount) is kept in the stored report but is
/// never a level of the trend, and `--baseline last` never picks a run in which the model ran no
/// whole level (its check failed, or its only level was stopped).
#[test]
fn a_partial_level_is_not_indexed_and_last_needs_a_whole_level() {
    let d = dir();
    let mut s = Store::open(&d.path().join("runs.sqlite3")).unwrap();
    let pairs = [("local".to_owned(), "alpha".to_owned())];
    let whole = s.record(report("2026-11-01T00:00:00Z", 1.0)).unwrap();
    // A later run: alpha's check failed (no level), beta ran.
    let mut unchecked = report("2026-11-02T00:00:00Z", 1.0);
    unchecked.models[0].levels.clear();
    s.record(unchecked).unwrap();
    // A later one still: alpha's only level was stopped, partial.
    let mut stopped = report("2026-11-03T00:00:00Z", 1.0);
    stopped.models[0].levels.truncate(1);
    stopped.models[0].levels[0].partial = true;
    let stopped = s.record(stopped).unwrap();
    let (id, _) = s.baseline(RunRef::Last, &pairs, "hello", false).unwrap();
    assert_eq!(id, whole, "the newest run in which alpha ran a whole level");
    let runs = s.model_runs("alpha", &Filter::default()).unwrap();
    let partial = runs.iter().find(|r| r.run.id == stopped).unwrap();
    assert!(partial.levels.is_empty(), "{:?}", partial.levels);
    assert!(s.report(stopped).unwrap().models[0].levels[0].partial);
    // Beta ran whole levels in every run: its last is the newest.
    let beta = [("local".to_owned(), "beta".to_owned())];
    assert_eq!(
        s.baseline(RunRef::Last, &beta, "hello", false).unwrap().0,
        stopped
    );
}
