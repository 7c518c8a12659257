//! The SQLite run store (I/O): its schema, migrations, and reading and writing runs.
//!
//! The file is marked with its own `application_id`, so a database of another application is
//! refused rather than written into, and its `user_version` is the schema. An older schema is
//! migrated step by step, each step one transaction; a newer one is refused. A run is recorded in
//! one transaction (its row, its models, its levels), so a crash mid-write leaves the store as it
//! was before (SQLite's rollback journal). Concurrent runs wait for each other's writes (a busy
//! timeout), and a stored report is read only up to [`crate::bench::MAX_REPORT_FILE_BYTES`].

use super::{Filter, HistoryError};
use crate::bench::report::Report;
use rusqlite::{Connection, OptionalExtension as _, Transaction, TransactionBehavior, params};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `PRAGMA application_id` of a tokenprobe run store ("tkpr").
const APPLICATION_ID: i64 = 0x746B_7072;

/// The schema this build writes; the store's `user_version`.
pub const SCHEMA: i64 = 3;

/// How long a write waits for another process's.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The most runs a listing or trend reads.
pub const MAX_LIST: usize = 10_000;

/// Schema 1: each run's row and its report. Schema 2: every run's models and levels as columns
/// (what listings, filters and trends read), filled from the stored reports when migrating.
/// Schema 3: each run's provenance (what served it) and what changed in it since its baseline,
/// as columns, filled from the stored reports when migrating.
const SCHEMA_1: &str = "
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    version TEXT NOT NULL,
    run_id TEXT,
    target TEXT NOT NULL,
    prompt TEXT NOT NULL,
    open_loop INTEGER NOT NULL,
    interrupted INTEGER NOT NULL,
    baseline TEXT,
    regressions INTEGER,
    command TEXT,
    report TEXT NOT NULL
);
CREATE INDEX runs_by_start ON runs(started_at);
";

const SCHEMA_3: &str = "
ALTER TABLE runs ADD COLUMN provenance TEXT;
ALTER TABLE runs ADD COLUMN changed TEXT;
";

const SCHEMA_2: &str = "
CREATE TABLE models (
    run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    ord INTEGER NOT NULL,
    model TEXT NOT NULL,
    target TEXT NOT NULL,
    prompt TEXT NOT NULL,
    capacity REAL,
    PRIMARY KEY (run, ord)
);
CREATE INDEX models_by_name ON models(model);
CREATE TABLE levels (
    run INTEGER NOT NULL,
    ord INTEGER NOT NULL,
    level TEXT NOT NULL,
    x REAL NOT NULL,
    requests INTEGER NOT NULL,
    error_rate REAL NOT NULL,
    ttft_p50 REAL,
    ttft_p95 REAL,
    tpot_p50 REAL,
    e2e_p95 REAL,
    output_tokens_per_s REAL NOT NULL,
    slo_attainment REAL,
    client_bound INTEGER NOT NULL,
    PRIMARY KEY (run, ord, level),
    FOREIGN KEY (run, ord) REFERENCES models(run, ord) ON DELETE CASCADE
);
";

/// One stored run, as listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredRun {
    /// Its id in the store (`--baseline ID`).
    pub id: i64,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// The tokenprobe that ran it.
    pub version: String,
    /// The run id its report carries (equal for every shard of one run).
    pub run_id: Option<String>,
    /// Its target(s).
    pub target: String,
    /// Its prompt(s).
    pub prompt: String,
    /// Open loop (arrival rates) rather than closed (concurrency).
    pub open_loop: bool,
    /// Its models, in order.
    pub models: Vec<String>,
    /// Its levels' labels, in the order of the first model's.
    pub levels: Vec<String>,
    /// Stopped by a signal before its end.
    pub interrupted: bool,
    /// The baseline it was compared with, if any.
    pub baseline: Option<String>,
    /// Its regressions against that baseline.
    pub regressions: Option<u64>,
    /// Its command line.
    pub command: Option<String>,
    /// What changed in what served it since its baseline ("vLLM 0.10.1 → 0.11.0", "GPUs 8 →
    /// 4"), beside its regressions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
}

/// One model's level in a stored run, as the trend reads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredLevel {
    /// Its label (`8`, `4/s`).
    pub level: String,
    /// Its load (concurrency, or rate).
    pub x: f64,
    /// Measured requests.
    pub requests: u64,
    /// Failed share of them.
    pub error_rate: f64,
    /// TTFT p50 (s).
    pub ttft_p50_s: Option<f64>,
    /// TTFT p95 (s).
    pub ttft_p95_s: Option<f64>,
    /// TPOT p50 (s).
    pub tpot_p50_s: Option<f64>,
    /// E2E p95 (s).
    pub e2e_p95_s: Option<f64>,
    /// Aggregate output tokens/s.
    pub output_tokens_per_s: f64,
    /// SLO attainment, when the run had objectives.
    pub slo_attainment: Option<f64>,
    /// The client could not measure it.
    pub client_bound: bool,
}

/// One model in one stored run: the run, its capacity, its levels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelRun {
    /// The run.
    pub run: StoredRun,
    /// The model's target.
    pub target: String,
    /// The model's prompt.
    pub prompt: String,
    /// Its capacity within the SLOs, when the run searched it.
    pub capacity: Option<f64>,
    /// Its levels, by load.
    pub levels: Vec<StoredLevel>,
    /// What served the run (absent for runs of older versions).
    pub provenance: Option<crate::bench::provenance::Provenance>,
}

/// An open run store.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// `started_at` as UTC with a `Z` (so that stored instants sort as text); as given when it is
/// not RFC 3339.
pub fn utc(instant: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(instant).map_or_else(
        |_| instant.to_owned(),
        |t| {
            t.with_timezone(&chrono::Utc)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        },
    )
}

impl Store {
    /// Opens the store at `path`, making the file when absent (its directory must exist: see
    /// [`Store::make_directory`]), migrating an older schema, and checking it whole (SQLite's
    /// `quick_check`, which reads every page once). A new file that could not be made a store is
    /// removed again.
    ///
    /// # Errors
    /// [`HistoryError`] for a path that cannot be looked at or is not a regular file, a missing
    /// directory, a file that cannot be opened or made, another application's database, a newer
    /// schema, a failed migration, or a damaged file.
    pub fn open(path: &Path) -> Result<Self, HistoryError> {
        let made = if Self::exists(path)? {
            false
        } else {
            Self::make(path)?
        };
        Self::connect(path).inspect_err(|_| {
            // Only the empty file this call made: a store another process filled meanwhile stays.
            if made && std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
                let _ = std::fs::remove_file(path);
            }
        })
    }

    /// Makes the directory of the store at `path` (the default store's, in the user's data
    /// directory; a store `--history` names must be in a directory that exists).
    ///
    /// # Errors
    /// [`HistoryError::Make`] when it cannot be made.
    pub fn make_directory(path: &Path) -> Result<(), HistoryError> {
        match path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => std::fs::create_dir_all(dir).map_err(|source| HistoryError::Make {
                path: path.to_owned(),
                what: "its directory",
                source,
            }),
            None => Ok(()),
        }
    }

    /// Whether a regular file is at `path` (following links); absent is `false`.
    ///
    /// # Errors
    /// [`HistoryError::NotAFile`] for something else than a regular file,
    /// [`HistoryError::Path`] for a path that cannot be looked at (a link loop, a file where a
    /// directory should be, no permission).
    fn exists(path: &Path) -> Result<bool, HistoryError> {
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => Ok(true),
            Ok(_) => Err(HistoryError::NotAFile {
                path: path.to_owned(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(HistoryError::Path {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// Makes the empty file of a new store; `false` when another process made it first.
    fn make(path: &Path) -> Result<bool, HistoryError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            return Err(HistoryError::NoDirectory {
                path: path.to_owned(),
                dir: dir.to_owned(),
            });
        }
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(source) => Err(HistoryError::Make {
                path: path.to_owned(),
                what: "it",
                source,
            }),
        }
    }

    /// The connection, prepared and checked.
    fn connect(path: &Path) -> Result<Self, HistoryError> {
        let conn = Connection::open(path).map_err(HistoryError::sqlite(path))?;
        let mut store = Self {
            conn,
            path: path.to_owned(),
        };
        store.prepare()?;
        store.check()?;
        Ok(store)
    }

    /// Opens an existing store (a listing makes none); `None` when there is no file.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_existing(path: &Path) -> Result<Option<Self>, HistoryError> {
        if !Self::exists(path)? {
            return Ok(None);
        }
        Self::open(path).map(Some)
    }

    /// SQLite's `quick_check`: every page read once, the b-trees' structure and the records'
    /// shape checked (not the indexes' agreement with their tables, which `integrity_check`
    /// adds at a higher cost).
    ///
    /// # Errors
    /// [`HistoryError::Damaged`] with the first problems found.
    fn check(&self) -> Result<(), HistoryError> {
        let damaged = |problems: String| HistoryError::Damaged {
            path: self.path.clone(),
            problems,
        };
        let mut stmt = self
            .conn
            .prepare("PRAGMA quick_check(5)")
            .map_err(|e| damaged(e.to_string()))?;
        let found: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| damaged(e.to_string()))?;
        if found.len() == 1 && found[0] == "ok" {
            return Ok(());
        }
        // Each problem on a line of its own, under a `*** in database main ***` heading.
        let problems: Vec<&str> = found
            .iter()
            .flat_map(|f| f.lines())
            .filter(|l| !l.starts_with("***") && !l.trim().is_empty())
            .collect();
        Err(damaged(problems.join("; ")))
    }

    /// Checks that a run can be recorded now, before anything is sent, and leaves the store as
    /// it was: an exclusive transaction (waiting, as a write does, for another process's lock),
    /// in which the schema version is written again (so the rollback journal is made and written
    /// beside the file), then rolled back. It finds a read-only file or mount, a lock another
    /// process keeps, and a disk without room for the journal; a disk with room for the
    /// journal but not the run is found only when the run is recorded.
    ///
    /// # Errors
    /// [`HistoryError::NotWritable`] with SQLite's error.
    pub fn check_writable(&mut self) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let fail = |source| HistoryError::NotWritable {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Exclusive)
            .map_err(fail)?;
        tx.pragma_update(None, "user_version", SCHEMA)
            .map_err(fail)?;
        tx.rollback().map_err(fail)
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self) -> impl FnOnce(rusqlite::Error) -> HistoryError + '_ {
        HistoryError::sqlite(&self.path)
    }

    /// Busy timeout, foreign keys, the file checked as ours, its schema brought up to date.
    fn prepare(&mut self) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let foreign = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase) => HistoryError::Foreign { path: path.clone() },
            _ => HistoryError::sqlite(&path)(e),
        };
        self.conn.busy_timeout(BUSY_TIMEOUT).map_err(&foreign)?;
        self.conn
            .pragma_update(None, "foreign_keys", true)
            .map_err(&foreign)?;
        loop {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(&foreign)?;
            let app: i64 = tx
                .pragma_query_value(None, "application_id", |r| r.get(0))
                .map_err(&foreign)?;
            let version: i64 = tx
                .pragma_query_value(None, "user_version", |r| r.get(0))
                .map_err(&foreign)?;
            let tables: i64 = tx
                .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
                .map_err(&foreign)?;
            if app != APPLICATION_ID && (app != 0 || version != 0 || tables != 0) {
                return Err(HistoryError::Foreign { path });
            }
            if version > SCHEMA {
                return Err(HistoryError::Newer {
                    path,
                    found: version,
                    known: SCHEMA,
                });
            }
            if version == SCHEMA {
                return Ok(());
            }
            migrate(&tx, version).map_err(&foreign)?;
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(&foreign)?;
            tx.pragma_update(None, "user_version", version + 1)
                .map_err(&foreign)?;
            tx.commit().map_err(&foreign)?;
        }
    }

    /// Records a finished run (samples left out) in one transaction; its id.
    ///
    /// # Errors
    /// [`HistoryError::Sqlite`] when the write fails (nothing of the run is then stored).
    pub fn record(&mut self, mut report: Report) -> Result<i64, HistoryError> {
        for l in report.models.iter_mut().flat_map(|m| &mut m.levels) {
            l.samples = None;
        }
        let json = serde_json::to_string(&report).map_err(|e| HistoryError::Report {
            path: self.path.clone(),
            id: 0,
            reason: e.to_string(),
        })?;
        let path = self.path.clone();
        let err = HistoryError::sqlite(&path);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(HistoryError::sqlite(&path))?;
        let id = insert_run(&tx, &report, &json)
            .and_then(|id| index(&tx, id, &report).map(|()| id))
            .map_err(HistoryError::sqlite(&path))?;
        tx.commit().map_err(err)?;
        Ok(id)
    }

    /// Runs matching `f`, newest first.
    ///
    /// # Errors
    /// [`HistoryError::Sqlite`] when the store cannot be read.
    pub fn list(&self, f: &Filter) -> Result<Vec<StoredRun>, HistoryError> {
        let limit = if f.limit == 0 { MAX_LIST } else { f.limit };
        let sql = "SELECT id, started_at, version, run_id, target, prompt, open_loop, interrupted,
                baseline, regressions, command, changed FROM runs r
            WHERE (?1 IS NULL OR EXISTS (SELECT 1 FROM models m WHERE m.run = r.id
                    AND (m.model = ?1 OR m.target || '/' || m.model = ?1)))
              AND (?2 IS NULL OR EXISTS (SELECT 1 FROM models m WHERE m.run = r.id AND m.target = ?2))
              AND (?3 IS NULL OR EXISTS (SELECT 1 FROM models m WHERE m.run = r.id AND m.prompt = ?3))
              AND (?4 IS NULL OR started_at >= ?4)
              AND (?5 IS NULL OR started_at < ?5)
            ORDER BY started_at DESC, id DESC LIMIT ?6";
        let mut stmt = self.conn.prepare(sql).map_err(self.err())?;
        let rows = stmt
            .query_map(
                params![
                    f.model,
                    f.target,
                    f.prompt,
                    f.since.as_deref().map(utc),
                    f.until.as_deref().map(utc),
                    i64::try_from(limit.min(MAX_LIST)).unwrap_or(i64::MAX)
                ],
                |r| {
                    Ok(StoredRun {
                        id: r.get(0)?,
                        started_at: r.get(1)?,
                        version: r.get(2)?,
                        run_id: r.get(3)?,
                        target: r.get(4)?,
                        prompt: r.get(5)?,
                        open_loop: r.get(6)?,
                        interrupted: r.get(7)?,
                        baseline: r.get(8)?,
                        regressions: r
                            .get::<_, Option<i64>>(9)?
                            .map(|n| u64::try_from(n).unwrap_or(0)),
                        command: r.get(10)?,
                        changed: r
                            .get::<_, Option<String>>(11)?
                            .and_then(|j| serde_json::from_str(&j).ok())
                            .unwrap_or_default(),
                        models: Vec::new(),
                        levels: Vec::new(),
                    })
                },
            )
            .map_err(self.err())?;
        let mut runs = Vec::new();
        for run in rows {
            let mut run = run.map_err(self.err())?;
            run.models = self.strings(
                "SELECT CASE WHEN (SELECT count(DISTINCT target) FROM models WHERE run = ?1) > 1
                    THEN target || '/' || model ELSE model END
                 FROM models WHERE run = ?1 ORDER BY ord",
                run.id,
            )?;
            run.levels = self.strings(
                "SELECT level FROM levels WHERE run = ?1 AND ord = (SELECT min(ord) FROM levels WHERE run = ?1) ORDER BY x",
                run.id,
            )?;
            runs.push(run);
        }
        Ok(runs)
    }

    fn strings(&self, sql: &str, id: i64) -> Result<Vec<String>, HistoryError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(self.err())?;
        let rows = stmt
            .query_map([id], |r| r.get::<_, String>(0))
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// `model`'s stored runs matching `f` (`model` or `target/model`), newest first, each with
    /// its levels.
    ///
    /// # Errors
    /// [`HistoryError::Sqlite`] when the store cannot be read.
    pub fn model_runs(&self, model: &str, f: &Filter) -> Result<Vec<ModelRun>, HistoryError> {
        let f = Filter {
            model: Some(model.to_owned()),
            ..f.clone()
        };
        let mut out = Vec::new();
        for run in self.list(&f)? {
            let mut stmt = self
                .conn
                .prepare_cached(
                    "SELECT ord, target, prompt, capacity FROM models WHERE run = ?1
                       AND (model = ?2 OR target || '/' || model = ?2)
                       AND (?3 IS NULL OR target = ?3) AND (?4 IS NULL OR prompt = ?4)
                     ORDER BY ord LIMIT 1",
                )
                .map_err(self.err())?;
            let found = stmt
                .query_row(params![run.id, model, f.target, f.prompt], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<f64>>(3)?,
                    ))
                })
                .optional()
                .map_err(self.err())?;
            let Some((ord, target, prompt, capacity)) = found else {
                continue;
            };
            let levels = self.levels(run.id, ord)?;
            let provenance = self
                .conn
                .query_row("SELECT provenance FROM runs WHERE id = ?1", [run.id], |r| {
                    r.get::<_, Option<String>>(0)
                })
                .map_err(self.err())?
                .and_then(|j| serde_json::from_str(&j).ok());
            out.push(ModelRun {
                run,
                target,
                prompt,
                capacity,
                levels,
                provenance,
            });
        }
        Ok(out)
    }

    fn levels(&self, run: i64, ord: i64) -> Result<Vec<StoredLevel>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT level, x, requests, error_rate, ttft_p50, ttft_p95, tpot_p50, e2e_p95,
                        output_tokens_per_s, slo_attainment, client_bound
                 FROM levels WHERE run = ?1 AND ord = ?2 ORDER BY x",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map([run, ord], |r| {
                Ok(StoredLevel {
                    level: r.get(0)?,
                    x: r.get(1)?,
                    requests: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                    error_rate: r.get(3)?,
                    ttft_p50_s: r.get(4)?,
                    ttft_p95_s: r.get(5)?,
                    tpot_p50_s: r.get(6)?,
                    e2e_p95_s: r.get(7)?,
                    output_tokens_per_s: r.get(8)?,
                    slo_attainment: r.get(9)?,
                    client_bound: r.get(10)?,
                })
            })
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// The stored runs `--baseline last` chooses among, newest first (at most `limit`): complete
    /// (not stopped by a signal) runs of the same load kind that ran one of `models` (target,
    /// model) with `prompt` through at least one whole level (a model whose check failed, or whose
    /// only level was stopped early, ran none). Which of them fits the run is
    /// [`crate::bench::baseline::Fit`]'s to say, from their reports.
    ///
    /// # Errors
    /// [`HistoryError::Sqlite`] when the store cannot be read.
    pub fn candidates(
        &self,
        models: &[(String, String)],
        prompt: &str,
        open_loop: bool,
        limit: usize,
    ) -> Result<Vec<i64>, HistoryError> {
        let mut found: Vec<(String, i64)> = Vec::new();
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT r.started_at, r.id FROM runs r WHERE r.interrupted = 0
                   AND r.open_loop = ?1 AND EXISTS (SELECT 1 FROM models m
                   WHERE m.run = r.id AND m.target = ?2 AND m.model = ?3 AND m.prompt = ?4
                   AND EXISTS (SELECT 1 FROM levels l WHERE l.run = m.run AND l.ord = m.ord))
                 ORDER BY r.started_at DESC, r.id DESC LIMIT ?5",
            )
            .map_err(self.err())?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        for (target, model) in models {
            let rows = stmt
                .query_map(params![open_loop, target, model, prompt, limit], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                })
                .map_err(self.err())?;
            for row in rows {
                found.push(row.map_err(self.err())?);
            }
        }
        found.sort_unstable_by(|a, b| b.cmp(a));
        found.dedup();
        Ok(found
            .into_iter()
            .map(|(_, id)| id)
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect())
    }

    /// Run `id`'s report (without samples).
    ///
    /// # Errors
    /// [`HistoryError::NotFound`] for no such run, [`HistoryError::Report`] for a report that is
    /// too large or not a report.
    pub fn report(&self, id: i64) -> Result<Report, HistoryError> {
        let found = self
            .conn
            .query_row(
                "SELECT length(report) <= ?2, CASE WHEN length(report) <= ?2 THEN report END FROM runs WHERE id = ?1",
                params![
                    id,
                    i64::try_from(crate::bench::MAX_REPORT_FILE_BYTES).unwrap_or(i64::MAX)
                ],
                |r| Ok((r.get::<_, bool>(0)?, r.get::<_, Option<String>>(1)?)),
            )
            .optional()
            .map_err(self.err())?;
        let bad = |reason: String| HistoryError::Report {
            path: self.path.clone(),
            id,
            reason,
        };
        match found {
            None => Err(HistoryError::NotFound {
                path: self.path.clone(),
                what: format!("no run {id}"),
            }),
            Some((false, _) | (_, None)) => Err(bad(format!(
                "its report is larger than {}",
                crate::units::fmt_bytes(crate::bench::MAX_REPORT_FILE_BYTES)
            ))),
            Some((true, Some(json))) => serde_json::from_str(&json)
                .map_err(|e| bad(format!("not a tokenprobe bench report ({e})"))),
        }
    }
}

/// One migration step: from schema `from` to `from + 1`.
fn migrate(tx: &Transaction<'_>, from: i64) -> rusqlite::Result<()> {
    match from {
        0 => tx.execute_batch(SCHEMA_1),
        1 => {
            tx.execute_batch(SCHEMA_2)?;
            let mut stmt = tx.prepare("SELECT id, report FROM runs ORDER BY id")?;
            let runs: Vec<(i64, String)> = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            for (id, json) in runs {
                // A report this build cannot read keeps its row, without models or levels.
                if let Ok(report) = serde_json::from_str::<Report>(&json) {
                    index(tx, id, &report)?;
                }
            }
            Ok(())
        }
        2 => {
            tx.execute_batch(SCHEMA_3)?;
            let mut stmt = tx.prepare("SELECT id, report FROM runs ORDER BY id")?;
            let runs: Vec<(i64, String)> = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            let mut set =
                tx.prepare("UPDATE runs SET provenance = ?2, changed = ?3 WHERE id = ?1")?;
            for (id, json) in runs {
                // A report this build cannot read keeps its row, without them.
                if let Ok(report) = serde_json::from_str::<Report>(&json) {
                    let (provenance, changed) = recorded(&report);
                    set.execute(params![id, provenance, changed])?;
                }
            }
            Ok(())
        }
        _ => Err(rusqlite::Error::InvalidQuery),
    }
}

/// A report's provenance and what changed since its baseline, as the columns keep them (JSON);
/// `None` each when it has none.
fn recorded(r: &Report) -> (Option<String>, Option<String>) {
    let provenance = r
        .provenance
        .as_ref()
        .and_then(|p| serde_json::to_string(p).ok());
    let changed = r
        .comparison
        .as_ref()
        .filter(|c| !c.changed.is_empty())
        .and_then(|c| serde_json::to_string(&c.changed).ok());
    (provenance, changed)
}

fn insert_run(tx: &Transaction<'_>, r: &Report, json: &str) -> rusqlite::Result<i64> {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let (provenance, changed) = recorded(r);
    tx.execute(
        "INSERT INTO runs (started_at, recorded_at, version, run_id, target, prompt, open_loop,
            interrupted, baseline, regressions, command, report, provenance, changed)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        params![
            utc(&r.started_at),
            now,
            r.version,
            r.run.as_ref().map(|i| &i.id),
            r.target,
            r.prompt,
            r.mode.kind.is_open(),
            r.interrupted.is_some(),
            r.comparison.as_ref().map(|c| &c.baseline),
            r.comparison
                .as_ref()
                .map(|c| i64::try_from(c.regressions.len()).unwrap_or(i64::MAX)),
            r.command,
            json,
            provenance,
            changed,
        ],
    )?;
    Ok(tx.last_insert_rowid())
}

/// A run's models and levels as columns.
fn index(tx: &Transaction<'_>, id: i64, r: &Report) -> rusqlite::Result<()> {
    let mut model = tx.prepare_cached(
        "INSERT INTO models (run, ord, model, target, prompt, capacity) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let mut level = tx.prepare_cached(
        "INSERT OR REPLACE INTO levels (run, ord, level, x, requests, error_rate, ttft_p50, ttft_p95,
            tpot_p50, e2e_p95, output_tokens_per_s, slo_attainment, client_bound)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?;
    for (ord, m) in r.models.iter().enumerate() {
        let capacity = m
            .capacity
            .as_ref()
            .and_then(|c| c.rate.or(c.concurrency.map(f64::from)));
        let ord = i64::try_from(ord).unwrap_or(i64::MAX);
        model.execute(params![
            id,
            ord,
            m.model,
            m.target.as_deref().unwrap_or(&r.target),
            m.prompt.as_deref().unwrap_or(&r.prompt),
            capacity,
        ])?;
        // A partial level (stopped before its amount) is never a level of the run's trend: it
        // stays in the stored report, marked, and is not indexed.
        for l in m.levels.iter().filter(|l| !l.partial) {
            level.execute(params![
                id,
                ord,
                l.key.label(),
                l.key.x(),
                i64::try_from(l.requests).unwrap_or(i64::MAX),
                l.error_rate,
                l.ttft_s.map(|s| s.p50),
                l.ttft_s.map(|s| s.p95),
                l.tpot_s.map(|s| s.p50),
                l.e2e_s.map(|s| s.p95),
                l.output_tokens_per_s,
                l.slo_attainment.as_ref().map(|a| a.share),
                l.client_bound.is_some(),
            ])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
