//! The run store on the command line: `--history FILE` / `--no-history` of `bench` and `bench
//! merge` (every run recorded), `--baseline last|ID` (a stored run as the baseline), and `bench
//! history` (runs listed newest first, one model's trend in the terminal, as JSON or on a page).

use crate::bench::BenchError;
use crate::bench::baseline::Fit;
use crate::bench::report::Report;
use crate::exit::Exit;
use crate::history::{Filter, HistoryError, RunRef, Store, default_path, trend};
use std::path::{Path, PathBuf};

/// The run store's flags (of `bench`, `bench merge` and `bench history`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StoreArgs {
    /// The run store, an SQLite file (default: runs.sqlite3 in the user's data directory, e.g.
    /// ~/.local/share/tokenprobe/).
    #[arg(long, env = "TOKENPROBE_HISTORY", value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Do not record this run in the run store.
    #[arg(long)]
    pub no_history: bool,
}

fn usage(e: &HistoryError) -> BenchError {
    BenchError::Usage(e.to_string())
}

impl StoreArgs {
    /// The store's file: `--history`, or the default; `None` where neither names one.
    pub fn path(&self) -> Option<PathBuf> {
        self.history.clone().or_else(default_path)
    }

    /// The store this run will be recorded in, opened (made, migrated, checked whole and for a
    /// write) before anything is sent, so that a store that cannot take the run is known first;
    /// `None` with `--no-history` or where the system names no data directory (said on stderr).
    /// The default store's directory is made; the one `--history` names must exist.
    ///
    /// # Errors
    /// [`BenchError::Usage`] for a store that cannot be opened or written.
    pub fn open_for_recording(&self) -> Result<Option<Store>, BenchError> {
        if self.no_history {
            return Ok(None);
        }
        let Some(path) = self.path() else {
            crate::output::print_stderr_line(
                "tokenprobe bench: no data directory (HOME is not set): this run is not recorded; give --history FILE to keep it",
            );
            return Ok(None);
        };
        if self.history.is_none() {
            Store::make_directory(&path).map_err(|e| usage(&e))?;
        }
        let mut store = Store::open(&path).map_err(|e| usage(&e))?;
        store.check_writable().map_err(|e| usage(&e))?;
        Ok(Some(store))
    }
}

/// Records `report` in `store` and says so on stderr. A failed write is said, the run's outputs
/// stand, and its `exit` becomes [`Exit::NotRecorded`] unless another prevails (the run's own
/// verdict, beside which the line says it is not recorded).
pub fn record(store: Option<Store>, report: &Report, exit: Exit) -> Exit {
    let Some(mut store) = store else {
        return exit;
    };
    match store.record(report.clone()) {
        Ok(id) => {
            crate::output::print_stderr_line(&format!(
                "tokenprobe bench: recorded as run {id} in {} (--baseline {id}, or last; bench history)",
                store.path().display()
            ));
            exit
        }
        Err(e) => {
            let exit = exit.with(Exit::NotRecorded);
            crate::output::print_stderr_line(&format!(
                "tokenprobe bench: this run is not recorded: {e}{}",
                if exit == Exit::NotRecorded {
                    format!(" (exit {})", exit.code())
                } else {
                    String::new()
                }
            ));
            exit
        }
    }
}

/// The most stored runs `--baseline last` reads, newest first, for one that fits.
pub const MAX_BASELINE_CANDIDATES: usize = 100;

/// Stored run `id` of the store `history` names (else the default store), for `bench report`.
///
/// # Errors
/// [`BenchError::Usage`] when there is no store, no such run, or its report cannot be read.
pub fn stored(history: Option<&Path>, id: i64) -> Result<Report, BenchError> {
    let Some(path) = history.map(Path::to_owned).or_else(default_path) else {
        return Err(BenchError::Usage(format!(
            "run {id}: no run store (no data directory); give --history FILE"
        )));
    };
    let Some(s) = Store::open_existing(&path).map_err(|e| usage(&e))? else {
        return Err(BenchError::Usage(format!(
            "run {id}: no run is recorded ({} does not exist)",
            path.display()
        )));
    };
    s.report(id).map_err(|e| usage(&e))
}

/// The baseline `--baseline` names, if it fits the run (`fit`: the same effective workload and
/// a (model, level) in common): a JSON report's file, or a stored run (`last`, or its id, when no
/// file has that name) of `store`. `last` is the newest complete run of the same load kind that
/// ran one of the run's (target, model) pairs with its prompt and fits it; the newer ones passed
/// over are said on stderr with why.
///
/// # Errors
/// [`BenchError`] when the file or the stored run cannot be read or does not fit (what differs
/// is named), or no stored run fits.
pub fn baseline(
    arg: Option<&Path>,
    store: &StoreArgs,
    fit: &Fit,
) -> Result<Option<(Report, String)>, BenchError> {
    let Some(arg) = arg else {
        return Ok(None);
    };
    let stored = arg.to_str().and_then(RunRef::parse);
    let Some(which) = stored.filter(|_| !arg.exists()) else {
        let report = crate::bench::load_baseline(arg)?;
        if let Some(why) = fit.misfit(&report) {
            return Err(BenchError::Baseline {
                path: arg.to_owned(),
                reason: why,
            });
        }
        return Ok(Some((report, arg.display().to_string())));
    };
    let Some(path) = store.path() else {
        return Err(BenchError::Usage(format!(
            "--baseline {}: no run store (no data directory); give --history FILE",
            arg.display()
        )));
    };
    let Some(s) = Store::open_existing(&path).map_err(|e| usage(&e))? else {
        return Err(BenchError::Usage(format!(
            "--baseline {}: no run is recorded yet ({} does not exist)",
            arg.display(),
            path.display()
        )));
    };
    let (id, report, passed) = match which {
        RunRef::Id(id) => {
            let report = s.report(id).map_err(|e| usage(&e))?;
            if let Some(why) = fit.misfit(&report) {
                return Err(BenchError::Usage(format!(
                    "--baseline {id}: run {id} of {}: {why}",
                    path.display()
                )));
            }
            (id, report, Vec::new())
        }
        RunRef::Last => last(&s, fit)?,
    };
    let passed = if passed.is_empty() {
        String::new()
    } else {
        format!(
            ": the newest that fits this run; passed over {}",
            passed.join("; ")
        )
    };
    crate::output::print_stderr_line(&format!(
        "tokenprobe bench: baseline: run {id} of {}, started {}{passed}",
        path.display(),
        report.started_at
    ));
    let name = format!("run {id} ({})", report.started_at);
    Ok(Some((report, name)))
}

/// `--baseline last`: the newest candidate of `s` that fits, with the newer ones passed over
/// (`run N: why`).
///
/// # Errors
/// [`BenchError::Usage`] when no candidate fits (the newest ones' reasons named) or the store
/// cannot be read.
fn last(s: &Store, fit: &Fit) -> Result<(i64, Report, Vec<String>), BenchError> {
    let kind = if fit.open_loop {
        "open-loop"
    } else {
        "closed-loop"
    };
    let models = fit
        .models
        .iter()
        .map(|(t, m)| format!("{t}/{m}"))
        .collect::<Vec<_>>()
        .join(", ");
    let prompt = &fit.workload.prompt;
    let ids = s
        .candidates(&fit.models, prompt, fit.open_loop, MAX_BASELINE_CANDIDATES)
        .map_err(|e| usage(&e))?;
    let mut passed = Vec::new();
    for &id in &ids {
        let why = match s.report(id) {
            Ok(report) => match fit.misfit(&report) {
                None => return Ok((id, report, passed)),
                Some(why) => why,
            },
            Err(e @ HistoryError::Report { .. }) => e.to_string(),
            Err(e) => return Err(usage(&e)),
        };
        passed.push(format!("run {id}: {why}"));
    }
    let store = s.path().display();
    if ids.is_empty() {
        return Err(BenchError::Usage(format!(
            "run store {store}: no earlier complete {kind} run of prompt {prompt} with {models} to compare with (--baseline last)"
        )));
    }
    const SHOWN: usize = 3;
    let more = passed.len().saturating_sub(SHOWN);
    passed.truncate(SHOWN);
    Err(BenchError::Usage(format!(
        "run store {store}: no earlier complete {kind} run of prompt {prompt} with {models} fits this run (--baseline last; {} read, newest first): {}{}",
        ids.len(),
        passed.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        }
    )))
}

/// How `bench history` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum HistoryFormat {
    /// Tables for people.
    #[default]
    Text,
    /// The runs (and the trend) as JSON.
    Json,
}

/// Flags of `tokenprobe bench history`.
#[derive(clap::Args, Debug, Clone)]
pub struct HistoryArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Runs of this model (`model` or `target/model`), and its trend across them.
    #[arg(long)]
    pub model: Option<String>,
    /// Runs of this target.
    #[arg(long)]
    pub target: Option<String>,
    /// Runs of this prompt.
    #[arg(long)]
    pub prompt: Option<String>,
    /// Runs started at or after this date or instant (2026-12-01, or RFC 3339).
    #[arg(long, value_parser = parse_instant)]
    pub since: Option<String>,
    /// Runs started before this date or instant.
    #[arg(long, value_parser = parse_instant)]
    pub until: Option<String>,
    /// The newest N runs.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub limit: u64,
    /// The trend's level (`8`, or `4/s`; default: the newest run's highest).
    #[arg(long, requires = "model")]
    pub level: Option<String>,
    /// Print as text or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub format: HistoryFormat,
    /// Write the trend's page to FILE.html (with --model).
    #[arg(long = "output", short = 'o', requires = "model")]
    pub output: Option<PathBuf>,
}

/// `2026-12-01` (midnight UTC) or an RFC 3339 instant, as RFC 3339 UTC.
fn parse_instant(v: &str) -> Result<String, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(crate::history::store::utc(&t.to_rfc3339()));
    }
    chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
        .map(|d| format!("{}T00:00:00Z", d.format("%Y-%m-%d")))
        .map_err(|_| format!("{v:?}: a date (2026-12-01) or an RFC 3339 instant"))
}

/// `bench history`: the matching runs newest first; with `--model`, its trend too.
///
/// # Errors
/// [`BenchError`] for a store that cannot be read or a page that cannot be written.
pub fn run(a: &HistoryArgs) -> Result<Exit, BenchError> {
    if let Some(o) = &a.output
        && o.extension().and_then(|e| e.to_str()) != Some("html")
    {
        return Err(BenchError::Usage(format!(
            "-o {}: the trend's page is FILE.html",
            o.display()
        )));
    }
    let Some(path) = a.store.path() else {
        return Err(BenchError::Usage(
            "no run store: no data directory (HOME is not set); give --history FILE".into(),
        ));
    };
    let filter = Filter {
        model: a.model.clone(),
        target: a.target.clone(),
        prompt: a.prompt.clone(),
        since: a.since.clone(),
        until: a.until.clone(),
        limit: usize::try_from(a.limit).unwrap_or(usize::MAX),
    };
    let store = Store::open_existing(&path).map_err(|e| usage(&e))?;
    let runs = match &store {
        Some(s) => s.list(&filter).map_err(|e| usage(&e))?,
        None => Vec::new(),
    };
    let trend = match (&store, &a.model) {
        (Some(s), Some(m)) => {
            let runs = s.model_runs(m, &filter).map_err(|e| usage(&e))?;
            Some(trend::trend(m, &runs, a.level.as_deref()))
        }
        (None, Some(m)) => Some(trend::trend(m, &[], a.level.as_deref())),
        _ => None,
    };
    match a.format {
        HistoryFormat::Json => {
            let doc = crate::render::history::HistoryDoc {
                store: path.display().to_string(),
                runs: &runs,
                trend: trend.as_ref(),
            };
            crate::output::print_stdout(&crate::render::history::json(&doc));
        }
        HistoryFormat::Text => {
            if store.is_none() {
                crate::output::print_stderr_line(&format!(
                    "tokenprobe bench history: no run is recorded yet ({} does not exist)",
                    path.display()
                ));
            }
            crate::output::print_stdout(&crate::render::history::runs_text(&runs));
            if let Some(t) = &trend {
                crate::output::print_stdout(&crate::render::history::trend_text(t));
            }
        }
    }
    if let (Some(o), Some(t)) = (&a.output, &trend) {
        let page = crate::render::history::page(t, &path.display().to_string());
        std::fs::write(o, page).map_err(|e| BenchError::Output {
            path: o.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(Exit::Done)
}
