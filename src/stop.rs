//! The stop signals of the long-running commands (`serve`, `simulate`, `bench`): installed before
//! any work starts, so an early SIGTERM never meets the default action; the first one stops
//! gracefully, a second one exits at once.

use std::sync::{Arc, OnceLock};

/// The stop signals, listened to from the moment they are installed.
pub struct StopSignals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Installs the handlers of SIGTERM and SIGINT now (within a runtime).
    pub fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::error!(error = %e, signal = name, "cannot listen for the signal");
                    None
                }
            };
            StopSignals {
                term: listen(SignalKind::terminate(), "SIGTERM"),
                int: listen(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    /// The first SIGTERM or SIGINT cancels `stop` (graceful shutdown within `--shutdown.grace`); a
    /// second one exits at once with status 1.
    pub async fn watch(self, stop: tokio_util::sync::CancellationToken) {
        self.watch_naming(stop, Arc::default()).await;
    }

    /// As [`StopSignals::watch`], recording the first signal's name (`SIGTERM`, `SIGINT`) in
    /// `first` before `stop` is cancelled.
    pub async fn watch_naming(
        self,
        stop: tokio_util::sync::CancellationToken,
        first: Arc<OnceLock<&'static str>>,
    ) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::Signal;
            async fn recv(s: &mut Option<Signal>) {
                let got = match s {
                    Some(s) => s.recv().await.is_some(),
                    None => false,
                };
                if !got {
                    std::future::pending::<()>().await;
                }
            }
            let (mut term, mut int) = (self.term, self.int);
            let name = tokio::select! {
                () = recv(&mut term) => "SIGTERM",
                () = recv(&mut int) => "SIGINT",
            };
            let _ = first.set(name);
            stop.cancel();
            tokio::select! {
                () = recv(&mut term) => {}
                () = recv(&mut int) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            let _ = first.set("Ctrl-C");
            stop.cancel();
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::warn!("second stop signal: exiting now");
        std::process::exit(crate::exit::Exit::Failed.code().into());
    }
}

impl StopSignals {
    /// Waits for the first SIGTERM or SIGINT (for commands with nothing in flight to wait for).
    pub async fn first(self) {
        let stop = tokio_util::sync::CancellationToken::new();
        let watched = stop.clone();
        let task = tokio::spawn(self.watch(watched));
        stop.cancelled().await;
        task.abort();
    }
}
