//! Reading the files a config names (datasets, tokenizers, key files, CA files, the config
//! itself): on a thread of their own, bounded in time and in size, and only regular files.
//!
//! A FIFO without a writer blocks its opener, a hung NFS or FUSE mount blocks even `stat`, and
//! `/dev/zero` never ends: none of them may hold a runtime or grow memory. Each read runs on a
//! thread of its own and is abandoned at its time bound (the thread stays blocked in the kernel;
//! a path whose read is still blocked is not read again until it returns, so a hung file holds
//! one thread, not one per attempt). What is not a regular file (after symlinks) is refused by
//! its name, before it is opened, unless the caller accepts a pipe (the config file may be one:
//! `--config.file <(envsubst < c.yml)`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// How long reading one file a config names may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a file could not be read. Every message names the file (what it is for, and its path),
/// never its content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// The file cannot be opened, or a read failed.
    #[error("cannot read {what} {path}: {reason}")]
    Io {
        /// What the file is for (`dataset`, `api_key_file`).
        what: String,
        /// The path as configured.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
    /// A FIFO, a device, a socket or a directory.
    #[error("{what} {path} is not a regular file (a {kind})")]
    NotRegular {
        /// What the file is for.
        what: String,
        /// The path.
        path: String,
        /// What it is instead.
        kind: &'static str,
    },
    /// Larger than the bound for its kind.
    #[error("{what} {path} is larger than {limit}")]
    TooLarge {
        /// What the file is for.
        what: String,
        /// The path.
        path: String,
        /// The bound, for people (`8 MiB`).
        limit: String,
    },
    /// No answer within the time bound.
    #[error("{what} {path}: no answer within {} (a FIFO without a writer, or a hung mount?)", humantime::format_duration(*.timeout))]
    Hung {
        /// What the file is for.
        what: String,
        /// The path.
        path: String,
        /// The bound that passed.
        timeout: Duration,
    },
}

/// A bounded read of one file.
#[derive(Debug, Clone)]
pub struct Read<'a> {
    /// What the file is for, in messages (`dataset`, `tokenizer`, `api_key_file`, `ca_file`).
    pub what: &'a str,
    /// The largest content accepted, in bytes.
    pub max_bytes: u64,
    /// How long the read may take.
    pub timeout: Duration,
    /// Whether a FIFO or a character device is read like a file (only the config file).
    pub pipes: bool,
}

impl Read<'_> {
    /// Reads `path` within the bounds, blocking the calling thread for at most the timeout.
    ///
    /// # Errors
    /// [`FileError`] naming the file.
    pub fn run(&self, path: &Path) -> Result<Vec<u8>, FileError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.spawn(path, move |r| {
            let _ = tx.send(r);
        })?;
        match rx.recv_timeout(self.timeout) {
            Ok(r) => r,
            Err(_) => Err(self.hung(path)),
        }
    }

    /// As [`Read::run`], waiting without blocking the async runtime it is awaited on.
    ///
    /// # Errors
    /// [`FileError`] naming the file.
    pub async fn run_async(&self, path: &Path) -> Result<Vec<u8>, FileError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.spawn(path, move |r| {
            let _ = tx.send(r);
        })?;
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(r)) => r,
            _ => Err(self.hung(path)),
        }
    }

    fn hung(&self, path: &Path) -> FileError {
        FileError::Hung {
            what: self.what.to_owned(),
            path: path.display().to_string(),
            timeout: self.timeout,
        }
    }

    /// Starts the read on a thread of its own; `done` gets its result. A read of the same file
    /// (with the same bounds) already under way is joined, not repeated: every caller gets its
    /// result (each within its own time bound), so concurrent users of one key file all read it,
    /// and a file whose read hangs holds one thread, not one per attempt.
    fn spawn(
        &self,
        path: &Path,
        done: impl FnOnce(Result<Vec<u8>, FileError>) + Send + 'static,
    ) -> Result<(), FileError> {
        let key = ReadKey {
            path: path.to_owned(),
            what: self.what.to_owned(),
            max: self.max_bytes,
            pipes: self.pipes,
        };
        {
            let Ok(mut busy) = IN_FLIGHT.lock() else {
                return Err(self.hung(path));
            };
            if let Some((_, waiters)) = busy.iter_mut().find(|(k, _)| *k == key) {
                waiters.push(Box::new(done));
                return Ok(());
            }
            busy.push((key.clone(), vec![Box::new(done)]));
        }
        let owned = key.clone();
        let spawned = std::thread::Builder::new()
            .name("tokenprobe-file".into())
            .spawn(move || {
                let r = read_now(&owned.path, &owned.what, owned.max, owned.pipes);
                for w in take_waiters(&owned) {
                    w(r.clone());
                }
            });
        spawned.map(|_| ()).map_err(|e| {
            let _ = take_waiters(&key);
            FileError::Io {
                what: self.what.to_owned(),
                path: path.display().to_string(),
                reason: format!("cannot start a thread: {e}"),
            }
        })
    }
}

/// One read: the file and its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReadKey {
    path: PathBuf,
    what: String,
    max: u64,
    pipes: bool,
}

/// Who waits for a read's result.
type Waiter = Box<dyn FnOnce(Result<Vec<u8>, FileError>) + Send>;

/// Reads under way (a blocked one stays until it returns), with who waits for each.
static IN_FLIGHT: Mutex<Vec<(ReadKey, Vec<Waiter>)>> = Mutex::new(Vec::new());

/// Ends the read of `key`: its waiters, taken out of [`IN_FLIGHT`].
fn take_waiters(key: &ReadKey) -> Vec<Waiter> {
    let Ok(mut busy) = IN_FLIGHT.lock() else {
        return Vec::new();
    };
    match busy.iter().position(|(k, _)| k == key) {
        Some(i) => busy.swap_remove(i).1,
        None => Vec::new(),
    }
}

/// The read itself, on its own thread: the kind of file first (no FIFO is opened), then at most
/// `max + 1` bytes.
fn read_now(path: &Path, what: &str, max: u64, pipes: bool) -> Result<Vec<u8>, FileError> {
    use std::io::Read as _;
    let io = |e: std::io::Error| FileError::Io {
        what: what.to_owned(),
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    let ft = meta.file_type();
    let kind = kind_of(&ft);
    let readable = ft.is_file() || (pipes && matches!(kind, "FIFO" | "character device"));
    if !readable {
        return Err(FileError::NotRegular {
            what: what.to_owned(),
            path: path.display().to_string(),
            kind,
        });
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(max.saturating_add(1)).read_to_end(&mut bytes))
        .map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(FileError::TooLarge {
            what: what.to_owned(),
            path: path.display().to_string(),
            limit: crate::units::fmt_bytes(max),
        });
    }
    Ok(bytes)
}

/// What a file that is not regular is, for the message.
fn kind_of(ft: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if ft.is_fifo() {
            return "FIFO";
        }
        if ft.is_char_device() {
            return "character device";
        }
        if ft.is_block_device() {
            return "block device";
        }
        if ft.is_socket() {
            return "socket";
        }
    }
    if ft.is_dir() {
        "directory"
    } else if ft.is_file() {
        "regular file"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn read(what: &str, max: u64) -> Read<'_> {
        Read {
            what,
            max_bytes: max,
            timeout: Duration::from_millis(300),
            pipes: false,
        }
    }

    #[test]
    fn a_regular_file_is_read_whole_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.jsonl");
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read("dataset", 10).run(&p).unwrap(), b"0123456789");
        let e = read("dataset", 9).run(&p).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { .. }), "{e}");
        assert!(e.to_string().starts_with("dataset "), "{e}");
        let e = read("dataset", 9)
            .run(&dir.path().join("none"))
            .unwrap_err();
        assert!(e.to_string().contains("cannot read dataset"), "{e}");
    }

    /// A FIFO named `name` in `dir`.
    fn mkfifo(dir: &Path, name: &str) -> std::path::PathBuf {
        let fifo = dir.join(name);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", fifo.display());
        fifo
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused_by_name_without_opening_it() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = mkfifo(dir.path(), "fifo");
        let t = Instant::now();
        let e = read("dataset", 1 << 20).run(&fifo).unwrap_err();
        assert!(
            t.elapsed() < Duration::from_millis(250),
            "not opened: {:?}",
            t.elapsed()
        );
        assert_eq!(
            e.to_string(),
            format!("dataset {} is not a regular file (a FIFO)", fifo.display())
        );
        let e = read("tokenizer", 1 << 20).run(dir.path()).unwrap_err();
        assert!(e.to_string().ends_with("(a directory)"), "{e}");
        let e = read("ca_file", 1 << 20)
            .run(Path::new("/dev/zero"))
            .unwrap_err();
        assert!(e.to_string().ends_with("(a character device)"), "{e}");
    }

    #[test]
    fn a_pipe_is_read_when_accepted_and_abandoned_at_the_bound_when_it_hangs() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = mkfifo(dir.path(), "config.yml");
        let piped = Read {
            pipes: true,
            ..read("config file", 1 << 20)
        };
        // No writer: the open blocks in the kernel; the read gives up at its bound.
        let t = Instant::now();
        let e = piped.run(&fifo).unwrap_err();
        let took = t.elapsed();
        assert!(matches!(e, FileError::Hung { .. }), "{e}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );
        // A second read of the same path while the first still hangs joins it (no second
        // thread) and gives up at its own bound.
        let in_flight = || {
            IN_FLIGHT
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.path == fifo)
                .count()
        };
        let t = Instant::now();
        assert!(matches!(piped.run(&fifo), Err(FileError::Hung { .. })));
        assert!(t.elapsed() >= Duration::from_millis(300));
        assert_eq!(in_flight(), 1, "one blocked read of the path, not two");
        // A writer unblocks the first thread (it reads an empty file and ends); once it has, the
        // path can be read again.
        std::fs::write(&fifo, b"").unwrap();
        while in_flight() > 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let writer = std::thread::spawn({
            let fifo = fifo.clone();
            move || std::fs::write(&fifo, b"x: 1\n")
        });
        let got = piped.run(&fifo);
        writer.join().unwrap().unwrap();
        assert_eq!(got.unwrap(), b"x: 1\n");
    }

    /// Many users of one file at once (the workers of a bench level reading one key file) all
    /// get its content: a read under way is joined, never failed as hung. A FIFO holds the read
    /// open until every reader has joined, so they overlap for certain.
    #[test]
    fn concurrent_reads_of_one_file_all_get_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = mkfifo(dir.path(), "key");
        let r = Read {
            pipes: true,
            timeout: Duration::from_secs(10),
            ..read("api_key_file", 1 << 10)
        };
        let readers: Vec<_> = (0..16)
            .map(|_| {
                let (r, fifo) = (r.clone(), fifo.clone());
                std::thread::spawn(move || r.run(&fifo))
            })
            .collect();
        // Every reader has joined the one read (one entry, 16 waiters) before the content comes.
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let waiting: usize = IN_FLIGHT
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.path == fifo)
                .map(|(_, w)| w.len())
                .sum();
            if waiting == 16 {
                break;
            }
            assert!(Instant::now() < end, "{waiting} of 16 readers joined");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::fs::write(&fifo, b"sk-one\n").unwrap();
        for h in readers {
            assert_eq!(h.join().unwrap().unwrap(), b"sk-one\n");
        }
    }
}
