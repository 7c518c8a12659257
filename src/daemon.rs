//! The `serve` runtime: the loaded config, the registry, the scheduler, and config reload.
//! Probes run on the probing runtime given to [`Daemon::start`]; everything else (the web
//! endpoints, reloads, signals) runs elsewhere.
//!
//! A reload (SIGHUP or `POST /-/reload`) reads and validates the file again; an invalid config is
//! refused and the running one keeps going. Otherwise unchanged jobs keep their series and their
//! schedule, removed jobs' series are deleted and new or changed jobs start
//! ([`Scheduler::apply`]). `tokenprobe_config_last_reload_successful` and
//! `tokenprobe_config_last_reload_success_timestamp_seconds` report the outcome, as Prometheus does.

use crate::config::{Buckets, Config, ConfigError, Job};
use crate::metrics::Metrics;
use crate::scheduler::{Applied, Scheduler, Sinks};
use crate::transport::TransportError;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

/// Why `serve` could not start or a reload was refused.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The config file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An HTTP client could not be built (CA file, proxy URL).
    #[error(transparent)]
    Client(#[from] TransportError),
    /// Histogram layouts are fixed for the life of the process.
    #[error("the buckets section changed: histogram layouts can only change with a restart")]
    BucketsChanged,
    /// The `location` label is fixed for the life of the process.
    #[error("the location changed: the location label can only change with a restart")]
    LocationChanged,
    /// `--location` is not a valid location.
    #[error("--location: {0}")]
    Location(String),
    /// The daemon is shutting down.
    #[error("shutting down")]
    ShuttingDown,
    /// The reload itself failed (its thread did not finish).
    #[error("{0}")]
    Reload(String),
}

/// The running service.
#[derive(Debug)]
pub struct Daemon {
    path: PathBuf,
    buckets: Buckets,
    /// `--location`, which wins over the config's `location:`.
    location_flag: Option<String>,
    /// The location label in use.
    location: Option<String>,
    metrics: Arc<Metrics>,
    scheduler: tokio::sync::Mutex<Option<Scheduler>>,
    /// The loaded config's jobs (the `/` page lists them).
    jobs: RwLock<Vec<Job>>,
}

impl Daemon {
    /// Loads `path` and starts every job on `probing` (the probing runtime, apart from the one
    /// serving the web endpoints, so scrapes cannot delay a probe's timestamps). `location` (the
    /// `--location` flag) wins over the config's `location:`. Every job's probes record into the
    /// registry and, with `otlp`, into those instruments (`serve`'s OTLP export): the scheduler's
    /// result sinks, made here once.
    ///
    /// # Errors
    /// [`DaemonError::Config`], [`DaemonError::Client`] or [`DaemonError::Location`].
    pub fn start(
        path: &Path,
        probing: tokio::runtime::Handle,
        location: Option<String>,
        otlp: Option<Arc<crate::otlp::Instruments>>,
    ) -> Result<Arc<Daemon>, DaemonError> {
        if let Some(l) = &location {
            crate::config::check_location(l).map_err(DaemonError::Location)?;
        }
        let config = Config::load(path)?;
        let location_flag = location;
        let location = location_flag.clone().or_else(|| config.location.clone());
        let metrics = Arc::new(Metrics::with_location(&config.buckets, location.as_deref()));
        // Every exporter a result goes to, built once: reloads keep them.
        let mut sinks: Sinks = vec![metrics.clone()];
        if let Some(instruments) = otlp {
            let otlp = crate::otlp::serve::ServeSink::new(instruments, location.as_deref());
            sinks.push(Arc::new(otlp));
        }
        let scheduler = Scheduler::start(&config.jobs, sinks, probing)?;
        metrics.reload_result(true, SystemTime::now());
        Ok(Arc::new(Daemon {
            path: path.to_owned(),
            buckets: config.buckets.clone(),
            location_flag,
            location,
            metrics,
            scheduler: tokio::sync::Mutex::new(Some(scheduler)),
            jobs: RwLock::new(config.jobs),
        }))
    }

    /// The registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The `location` label in use, if any.
    pub fn location(&self) -> Option<&str> {
        self.location.as_deref()
    }

    /// The config file.
    pub fn config_path(&self) -> &Path {
        &self.path
    }

    /// The loaded jobs.
    pub fn jobs(&self) -> Vec<Job> {
        self.jobs.read().map(|j| j.clone()).unwrap_or_default()
    }

    /// Reloads the config file (see the module doc). Concurrent reloads run one after another.
    ///
    /// # Errors
    /// Why the new config was refused; the previous one keeps running.
    pub async fn reload(&self) -> Result<Applied, DaemonError> {
        let result = self.try_reload().await;
        self.metrics
            .reload_result(result.is_ok(), SystemTime::now());
        match &result {
            Ok(a) => tracing::info!(
                config = %self.path.display(),
                started = a.started,
                stopped = a.stopped,
                kept = a.kept,
                "config reloaded"
            ),
            Err(e) => {
                tracing::error!(config = %self.path.display(), error = %e, "config reload refused; the previous config keeps running")
            }
        }
        result
    }

    async fn try_reload(&self) -> Result<Applied, DaemonError> {
        // Reading and parsing the config and the files it names (bounded, but a dataset is
        // megabytes) happens on a blocking thread, never on the web runtime that serves /metrics.
        let path = self.path.clone();
        let config = tokio::task::spawn_blocking(move || Config::load(&path))
            .await
            .map_err(|e| DaemonError::Reload(format!("the config load did not finish: {e}")))??;
        if config.buckets != self.buckets {
            return Err(DaemonError::BucketsChanged);
        }
        if self.location_flag.is_none() && config.location != self.location {
            return Err(DaemonError::LocationChanged);
        }
        let mut guard = self.scheduler.lock().await;
        let scheduler = guard.as_mut().ok_or(DaemonError::ShuttingDown)?;
        let applied = scheduler.apply(&config.jobs)?;
        let running = scheduler.running_jobs(&config.jobs);
        drop(config);
        if let Ok(mut jobs) = self.jobs.write() {
            *jobs = running;
        }
        drop(guard);
        // What the old config and the parse freed goes back to the system (see the function).
        let _ = tokio::task::spawn_blocking(crate::resources::release_freed_memory).await;
        Ok(applied)
    }

    /// Stops scheduling and waits up to `grace` for in-flight probes; true when they all finished.
    pub async fn shutdown(&self, grace: Duration) -> bool {
        let scheduler = self.scheduler.lock().await.take();
        match scheduler {
            Some(s) => s.shutdown(grace).await,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(location: &str) -> String {
        format!(
            "{location}prompts:\n  - name: p\n    messages: [{{role: user, content: hi}}]\ntargets:\n  - name: a\n    base_url: http://127.0.0.1:9/v1\n    models: [m]\n    interval: 1h\n"
        )
    }

    /// Issue 13: the location is a constant label; the flag wins over the file, a reload that
    /// changes the file's location is refused (the labels of every series would change), and a
    /// bad flag value is refused before anything starts.
    #[tokio::test]
    async fn location_comes_from_the_flag_or_the_file_and_cannot_change_on_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, config("location: eu-west-1\n")).unwrap();
        let rt = tokio::runtime::Handle::current();
        let d = Daemon::start(&path, rt.clone(), None, None).unwrap();
        assert_eq!(d.location(), Some("eu-west-1"));
        let text = d.metrics().encode_text().unwrap();
        assert!(text.contains("location=\"eu-west-1\""), "{text}");
        std::fs::write(&path, config("location: us-east-1\n")).unwrap();
        assert!(matches!(
            d.reload().await,
            Err(DaemonError::LocationChanged)
        ));
        std::fs::write(&path, config("")).unwrap();
        assert!(matches!(
            d.reload().await,
            Err(DaemonError::LocationChanged)
        ));
        std::fs::write(&path, config("location: eu-west-1\n")).unwrap();
        d.reload().await.unwrap();
        d.shutdown(Duration::ZERO).await;

        let f = Daemon::start(&path, rt.clone(), Some("ap-south-1".into()), None).unwrap();
        assert_eq!(f.location(), Some("ap-south-1"));
        std::fs::write(&path, config("location: us-east-1\n")).unwrap();
        f.reload().await.unwrap();
        f.shutdown(Duration::ZERO).await;

        let Err(e) = Daemon::start(&path, rt, Some("ap south".into()), None) else {
            panic!("a bad --location must be refused");
        };
        assert!(e.to_string().starts_with("--location: "), "{e}");
    }
}
