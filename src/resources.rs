//! The exporter's own resources: the file-descriptor budget shared by the web server and the
//! probes, recognising the exporter's own fd exhaustion (`EMFILE`/`ENFILE`, "Too many open files")
//! so it is never blamed on a target, the lower CPU priority of the web threads, and handing the
//! memory a config reload freed back to the system.
//!
//! The web server may hold at most [`web_connection_limit`] connections at once, computed from
//! `RLIMIT_NOFILE` with [`PROBE_FD_RESERVE`] descriptors kept for probes (each probe needs one
//! socket, plus DNS), so no number of scrapers or half-open clients can starve a probe of fds.

use std::error::Error;

/// Descriptors kept free for probes, their DNS look-ups, config reloads and key files.
pub const PROBE_FD_RESERVE: u64 = 256;
/// The most web connections served at once, whatever the fd limit.
pub const MAX_WEB_CONNECTIONS: usize = 1024;
/// The fewest web connections served at once, even under a tiny fd limit.
pub const MIN_WEB_CONNECTIONS: usize = 4;

/// Hands memory the allocator holds but no longer uses back to the system.
///
/// A reload parses the new config (and its datasets, megabytes) on a blocking thread while the old
/// one still runs. glibc keeps what the old config freed in the arena of the thread that
/// allocated it, and the next reload may parse on another blocking thread, in another arena, so
/// without this each reload could leave a dataset's worth of freed memory resident (seen: 16 MiB
/// more after the third of five reloads of an 8 MiB dataset). Blocking: it walks every arena
/// (milliseconds for a heap of 100 MiB); call it off the web runtime. Does nothing elsewhere.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointers and only releases free pages; glibc serialises it
    // with every other allocator call through each arena's lock.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Caps glibc's malloc arenas at two for `serve`, a long-running process that reloads datasets,
/// unless `MALLOC_ARENA_MAX` already says how many.
///
/// glibc gives threads up to eight arenas per core; a reload's parse that lands in a fresh arena
/// leaves the old arena's memory resident even after [`release_freed_memory`] (seen: 42 MiB at
/// start, 59 after the first reload of an 8 MiB dataset and 75 after the third; with two arenas
/// 43 MiB after each of five, or one step to 59 and flat after). Small allocations stay per thread (glibc's tcache), so probes do
/// not queue on an arena's lock. Call it before any thread starts. Does nothing elsewhere.
pub fn limit_allocator_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: `mallopt` takes plain integers; it runs before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// The soft `RLIMIT_NOFILE` after raising it to the hard limit (as Go programs do at start-up);
/// `None` when unknown or unlimited.
pub fn raise_fd_limit() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut lim = getrlimit(Resource::Nofile);
        if lim.current != lim.maximum {
            lim.current = lim.maximum;
            let _ = setrlimit(Resource::Nofile, lim);
        }
        getrlimit(Resource::Nofile).current
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// How many web connections to serve at once under a soft fd limit of `nofile`: a quarter of what
/// is left after [`PROBE_FD_RESERVE`], between [`MIN_WEB_CONNECTIONS`] and
/// [`MAX_WEB_CONNECTIONS`] (a quarter, so the web side holds well under the limit even counting
/// the runtime's own descriptors).
pub fn web_connection_limit(nofile: Option<u64>) -> usize {
    match nofile {
        None => MAX_WEB_CONNECTIONS,
        Some(n) => {
            let spare = n.saturating_sub(PROBE_FD_RESERVE) / 4;
            usize::try_from(spare)
                .unwrap_or(MAX_WEB_CONNECTIONS)
                .clamp(MIN_WEB_CONNECTIONS, MAX_WEB_CONNECTIONS)
        }
    }
}

/// True when `e` or one of its causes is the process (`EMFILE`) or the system (`ENFILE`) running
/// out of file descriptors: the exporter's own exhaustion, not the target's failure.
pub fn is_fd_exhaustion(e: &(dyn Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && is_fd_exhaustion_io(io)
        {
            return true;
        }
        cur = c.source();
    }
    false
}

/// [`is_fd_exhaustion`] for one I/O error.
pub fn is_fd_exhaustion_io(e: &std::io::Error) -> bool {
    // EMFILE = 24, ENFILE = 23 on Linux and the BSDs.
    matches!(e.raw_os_error(), Some(23 | 24))
}

/// Lowers the calling thread's CPU priority by `nice` steps (Linux: niceness is per thread), so
/// the web threads yield the CPU to the probing threads when both want it. Best effort.
pub fn lower_thread_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        let _ = rustix::process::setpriority_process(Some(tid), nice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_limit_keeps_a_reserve_under_the_fd_limit() {
        assert_eq!(web_connection_limit(Some(1024)), 192);
        assert_eq!(web_connection_limit(Some(100)), MIN_WEB_CONNECTIONS);
        assert_eq!(web_connection_limit(Some(1 << 20)), MAX_WEB_CONNECTIONS);
        assert_eq!(web_connection_limit(None), MAX_WEB_CONNECTIONS);
        for n in [300u64, 512, 1024, 4096, 65536] {
            let l = web_connection_limit(Some(n)) as u64;
            assert!(l + PROBE_FD_RESERVE / 2 < n, "{l} of {n}");
        }
    }

    #[test]
    fn recognises_emfile_and_enfile_through_a_chain() {
        #[derive(Debug)]
        struct Wrap(std::io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "client error (Connect)")
            }
        }
        impl Error for Wrap {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let emfile = Wrap(std::io::Error::from_raw_os_error(24));
        assert!(is_fd_exhaustion(&emfile));
        assert!(is_fd_exhaustion(&Wrap(std::io::Error::from_raw_os_error(
            23
        ))));
        assert!(!is_fd_exhaustion(&Wrap(std::io::Error::from_raw_os_error(
            111
        ))));
    }
}
