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
    // The default store's directory is made.
    let path = d.path().join("a/b/runs.sqlite3");
    Store::make_directory(&path).unwrap();
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
fn last_chooses_among_complete_runs_of_the_same_pair_prompt_and_loop_newest_first() {
    let d = dir();
    let mut s = Store::open(&d.path().join("runs.sqlite3")).unwrap();
    let pairs = [("local".to_owned(), "alpha".to_owned())];
    assert!(s.candidates(&pairs, "hello", false, 10).unwrap().is_empty());
    let a = s.record(report("2026-11-01T00:00:00Z", 1.0)).unwrap();
    let b = s.record(report("2026-11-02T00:00:00Z", 1.0)).unwrap();
    let mut stopped = report("2026-11-03T00:00:00Z", 1.0);
    stopped.interrupted = Some(crate::bench::report::Interrupted {
        signal: "SIGINT".into(),
        level_left_out: None,
    });
    s.record(stopped).unwrap();
    let mut open = report("2026-11-04T00:00:00Z", 1.0);
    open.mode.kind = crate::bench::report::LoadKind::Open;
    let o = s.record(open).unwrap();
    let mut other_prompt = report("2026-11-05T00:00:00Z", 1.0);
    other_prompt.prompt = "long".into();
    s.record(other_prompt).unwrap();
    assert_eq!(
        s.candidates(&pairs, "hello", false, 10).unwrap(),
        [b, a],
        "not the interrupted, open-loop or other prompt's run"
    );
    assert_eq!(s.candidates(&pairs, "hello", false, 1).unwrap(), [b]);
    assert_eq!(s.candidates(&pairs, "hello", true, 10).unwrap(), [o]);
    // Two of the run's models in one stored run: that run once.
    let both = [
        ("local".to_owned(), "alpha".to_owned()),
        ("local".to_owned(), "beta".to_owned()),
    ];
    assert_eq!(s.candidates(&both, "hello", false, 10).unwrap(), [b, a]);
    let nobody = [("local".to_owned(), "gamma".to_owned())];
    assert!(
        s.candidates(&nobody, "hello", false, 10)
            .unwrap()
            .is_empty()
    );
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
                found: 4,
                known: 3,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("written by a newer tokenprobe (schema 4; this one reads up to 3)")
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

/// Issue 44: a schema 2 store gains each run's provenance and what changed since its baseline,
/// filled from the stored reports; a run recorded now keeps them too, and the listing shows what
/// changed beside the regressions.
#[test]
fn a_schema_2_store_gains_what_served_each_run() {
    use crate::bench::provenance::{Provenance, ServerInfo, ServerKind};
    let d = dir();
    let path = d.path().join("v2.sqlite3");
    let served = |v: &str| Provenance {
        tokenprobe: "0.1.0".into(),
        servers: vec![ServerInfo {
            target: "local".into(),
            server: Some(ServerKind::Vllm),
            version: Some(v.into()),
            ..ServerInfo::default()
        }],
        ..Provenance::default()
    };
    let mut old = report("2026-10-01T00:00:00Z", 1.0);
    old.provenance = Some(served("0.10.1"));
    if let Some(c) = &mut old.comparison {
        c.changed = vec!["GPUs 8 → 4".into()];
    }
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(SCHEMA_1).unwrap();
        c.execute_batch(SCHEMA_2).unwrap();
        c.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        c.pragma_update(None, "user_version", 2).unwrap();
        let json = serde_json::to_string(&old).unwrap();
        c.execute(
            "INSERT INTO runs (started_at, recorded_at, version, target, prompt, open_loop, interrupted, baseline, regressions, report)
             VALUES ('2026-10-01T00:00:00Z', '2026-10-01T00:01:00Z', '0.1.0', 'local', 'hello', 0, 0, 'old.json', 1, ?1)",
            [json],
        )
        .unwrap();
        let id = c.last_insert_rowid();
        let tx = c.unchecked_transaction().unwrap();
        index(&tx, id, &old).unwrap();
        tx.commit().unwrap();
    }
    let mut s = Store::open(&path).unwrap();
    let mut new = report("2026-10-02T00:00:00Z", 2.0);
    new.provenance = Some(served("0.11.0"));
    if let Some(c) = &mut new.comparison {
        c.changed = vec!["vLLM 0.10.1 → 0.11.0".into()];
    }
    s.record(new).unwrap();
    let runs = s.list(&Filter::default()).unwrap();
    assert_eq!(runs[0].changed, ["vLLM 0.10.1 → 0.11.0"]);
    assert_eq!(runs[1].changed, ["GPUs 8 → 4"]);
    let m = s.model_runs("alpha", &Filter::default()).unwrap();
    let versions: Vec<Option<&str>> = m
        .iter()
        .map(|r| {
            r.provenance
                .as_ref()
                .and_then(|p| p.servers[0].version.as_deref())
        })
        .collect();
    assert_eq!(versions, [Some("0.11.0"), Some("0.10.1")]);
    let t = crate::history::trend::trend("alpha", &m, None);
    assert_eq!(t.points[1].changed, ["vLLM 0.10.1 → 0.11.0"]);
}

/// Issue 39 item 9: a store `--history` names in a directory that does not exist makes no
/// directory; a path that cannot be looked at (a link loop, a file where a directory should be)
/// is named, by a listing too, never taken for "no run yet".
#[test]
fn a_missing_directory_is_not_made_and_a_path_that_cannot_be_looked_at_is_named() {
    let d = dir();
    let nowhere = d.path().join("typo/runs.sqlite3");
    let e = Store::open(&nowhere).unwrap_err();
    assert!(matches!(e, HistoryError::NoDirectory { .. }), "{e}");
    assert!(e.to_string().ends_with("typo does not exist"), "{e}");
    assert!(!d.path().join("typo").exists(), "the directory was made");
    assert!(Store::open_existing(&nowhere).unwrap().is_none());

    let (a, b) = (d.path().join("a"), d.path().join("b"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let notes = d.path().join("notes.txt");
    std::fs::write(&notes, "x").unwrap();
    for (p, says) in [
        (a, "symbolic links"),
        (notes.join("runs.sqlite3"), "Not a directory"),
    ] {
        for e in [
            Store::open(&p).unwrap_err(),
            Store::open_existing(&p).unwrap_err(),
        ] {
            assert!(matches!(e, HistoryError::Path { .. }), "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}

/// A store whose `levels` table has a damaged page: refused when opened, by a listing and by a
/// run alike, before a run is written into it or a baseline read from it.
#[test]
fn a_damaged_store_is_refused_at_open() {
    let d = dir();
    let path = d.path().join("runs.sqlite3");
    let mut s = Store::open(&path).unwrap();
    for day in 1..=3 {
        s.record(report(&format!("2026-11-0{day}T00:00:00Z"), 1.0))
            .unwrap();
    }
    let (root, page_size): (i64, i64) = s
        .conn
        .query_row(
            "SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master WHERE name = 'levels'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    drop(s);
    let before_damage = std::fs::read(&path).unwrap();
    // The page's b-tree header: a leaf page claiming 65,535 cells.
    let mut bytes = before_damage.clone();
    let at = usize::try_from((root - 1) * page_size).unwrap();
    bytes[at..at + 5].copy_from_slice(&[0x0d, 0, 0, 0xff, 0xff]);
    std::fs::write(&path, &bytes).unwrap();
    let e = Store::open(&path).unwrap_err();
    assert!(matches!(e, HistoryError::Damaged { .. }), "{e}");
    assert!(e.to_string().contains("the file is damaged ("), "{e}");
    assert!(matches!(
        Store::open_existing(&path),
        Err(HistoryError::Damaged { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "left as it was");

    // Damage SQLite reads past (the runs stay readable) but `quick_check` reports: an index
    // page's cell area overwritten. Named on one line, the check's heading left out.
    let mut bytes = before_damage;
    let index: i64 = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| {
            c.query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'models_by_name'",
                [],
                |r| r.get(0),
            )
        })
        .unwrap();
    let end = usize::try_from(index * page_size).unwrap();
    bytes[end - 40..end].fill(7);
    std::fs::write(&path, &bytes).unwrap();
    let e = Store::open(&path).unwrap_err().to_string();
    assert!(
        e.contains("the file is damaged (") && e.contains("on page"),
        "{e}"
    );
    assert!(!e.contains('\n') && !e.contains("***"), "{e}");
}

/// Issue 39 item 4: a store that cannot take a write (another process's lock, a read-only file)
/// is found by the check made before anything is sent; the check leaves the file as it was.
#[test]
fn a_store_that_cannot_take_a_write_is_found_before_the_run() {
    let d = dir();
    let path = d.path().join("runs.sqlite3");
    let mut s = Store::open(&path).unwrap();
    s.record(report("2026-11-01T00:00:00Z", 1.0)).unwrap();
    let before = std::fs::read(&path).unwrap();
    s.check_writable().unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "no trace of the check"
    );
    assert!(!d.path().join("runs.sqlite3-journal").exists());

    // Another connection in a read transaction keeps its shared lock: no write can commit.
    let other = Connection::open(&path).unwrap();
    other
        .execute_batch("BEGIN; SELECT count(*) FROM runs;")
        .unwrap();
    s.conn.busy_timeout(Duration::from_millis(50)).unwrap();
    let e = s.check_writable().unwrap_err();
    assert!(matches!(e, HistoryError::NotWritable { .. }), "{e}");
    assert!(e.to_string().contains("database is locked"), "{e}");
    other.execute_batch("COMMIT").unwrap();
    s.check_writable().unwrap();

    // What SQLite opens read-only (as it does a file on a read-only mount).
    let mut ro = Store {
        conn: Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap(),
        path: path.clone(),
    };
    let e = ro.check_writable().unwrap_err();
    assert!(e.to_string().contains("readonly"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
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
    let ids = s.candidates(&pairs, "hello", false, 10).unwrap();
    assert_eq!(ids, [whole], "only runs in which alpha ran a whole level");
    let runs = s.model_runs("alpha", &Filter::default()).unwrap();
    let partial = runs.iter().find(|r| r.run.id == stopped).unwrap();
    assert!(partial.levels.is_empty(), "{:?}", partial.levels);
    assert!(s.report(stopped).unwrap().models[0].levels[0].partial);
    // Beta ran whole levels in every run: its last is the newest.
    let beta = [("local".to_owned(), "beta".to_owned())];
    assert_eq!(
        s.candidates(&beta, "hello", false, 10).unwrap().first(),
        Some(&stopped)
    );
}
