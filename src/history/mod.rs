//! The run store: every `bench` run kept in an embedded SQLite database (by default
//! `runs.sqlite3` in the user's data directory), listed newest first, one model's trend across
//! runs, and a stored run as a baseline (`--baseline last`, `--baseline 12`).
//!
//! - [`store`]: the database (I/O): its schema and migrations, recording a run in one
//!   transaction, reading runs back.
//! - [`trend`]: one model's figures run after run, and their change (pure).
//!
//! What is stored of a run is its typed report without the per-request samples: the command, the
//! target (URL redacted), API, prompt, load, every level's statistics, the server view, the
//! findings, the knee, the capacity and the comparison with its own baseline. The config file's
//! text is not stored, since it may hold a key inline; what the run used of it is in the report.
//! Each level's headline figures are also kept as columns (`levels`), so a trend is a query.

pub mod store;
pub mod trend;

pub use store::{Store, StoredRun};

use std::path::{Path, PathBuf};

/// The store's file name in the user's data directory.
pub const FILE_NAME: &str = "runs.sqlite3";

/// The default store: `$XDG_DATA_HOME/tokenprobe/runs.sqlite3` (`~/.local/share/...` on Linux,
/// `~/Library/Application Support/...` on macOS); `None` where the system names no data
/// directory (no `HOME`).
pub fn default_path() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("tokenprobe").join(FILE_NAME))
}

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// SQLite failed (the file cannot be opened, is locked for too long, or is damaged).
    #[error("run store {path}: {source}")]
    Sqlite {
        /// The store.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file is a database of something else.
    #[error(
        "run store {path}: not a tokenprobe run store (a database of another application); give another file with --history"
    )]
    Foreign {
        /// The file.
        path: PathBuf,
    },
    /// A newer tokenprobe wrote the store.
    #[error(
        "run store {path}: written by a newer tokenprobe (schema {found}; this one reads up to {known}); upgrade tokenprobe, or give another file with --history"
    )]
    Newer {
        /// The store.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest this build knows.
        known: i64,
    },
    /// The path is there but is not a regular file (a directory, a FIFO, a device): SQLite would
    /// hang on a FIFO and write into `/dev/null` or `/dev/zero` as if it kept the runs.
    #[error("run store {path}: not a regular file")]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// Its directory could not be made (the default store's), or the file in it.
    #[error("run store {path}: cannot make {what}: {source}")]
    Make {
        /// The store.
        path: PathBuf,
        /// `its directory` or `it`.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The directory `--history` names does not exist (only the default store's is made, so a
    /// mistyped path makes nothing).
    #[error("run store {path}: the directory {dir} does not exist")]
    NoDirectory {
        /// The store.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// The path cannot be looked at (a symbolic link loop, a regular file where a directory
    /// should be, no permission).
    #[error("run store {path}: {source}")]
    Path {
        /// The store.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// SQLite's `quick_check` found the file damaged: a run written into it, or read from it,
    /// could be lost or wrong.
    #[error(
        "run store {path}: the file is damaged ({problems}); give another file with --history (sqlite3's .recover salvages what it can)"
    )]
    Damaged {
        /// The store.
        path: PathBuf,
        /// The first problems `quick_check` found.
        problems: String,
    },
    /// The store cannot take a run (read-only, locked by another process, no room for its
    /// journal): found before anything is sent.
    #[error("run store {path}: cannot record a run in it: {source}")]
    NotWritable {
        /// The store.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A stored report cannot be read back.
    #[error("run store {path}: run {id}: {reason}")]
    Report {
        /// The store.
        path: PathBuf,
        /// The run's id.
        id: i64,
        /// Why.
        reason: String,
    },
    /// No stored run matches.
    #[error("run store {path}: {what}")]
    NotFound {
        /// The store.
        path: PathBuf,
        /// What was asked.
        what: String,
    },
}

impl HistoryError {
    pub(crate) fn sqlite(path: &Path) -> impl FnOnce(rusqlite::Error) -> Self + '_ {
        move |source| Self::Sqlite {
            path: path.to_owned(),
            source,
        }
    }
}

/// A stored run named on the command line: `last` or its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunRef {
    /// The newest complete run of the same target, prompt and load kind sharing a model.
    Last,
    /// The run with this id.
    Id(i64),
}

impl RunRef {
    /// `last` or a run id (digits); anything else is not a stored run's name.
    pub fn parse(v: &str) -> Option<Self> {
        if v == "last" {
            return Some(Self::Last);
        }
        if !v.is_empty() && v.len() <= 18 && v.bytes().all(|b| b.is_ascii_digit()) {
            return v.parse().ok().map(Self::Id);
        }
        None
    }
}

/// Which runs a listing or a trend reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Runs with this model (its name, or `target/model`).
    pub model: Option<String>,
    /// Runs of this target.
    pub target: Option<String>,
    /// Runs of this prompt.
    pub prompt: Option<String>,
    /// Runs started at or after this instant (RFC 3339).
    pub since: Option<String>,
    /// Runs started before this instant (RFC 3339).
    pub until: Option<String>,
    /// At most this many runs, the newest.
    pub limit: usize,
}
