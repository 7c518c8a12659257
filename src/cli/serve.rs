//! `tokenprobe serve`: its flags, and the exporter's process: two runtimes (probing apart from
//! everything else), the web server, reload on SIGHUP, and a bounded graceful shutdown.

use crate::daemon::Daemon;
use crate::endpoints::router;
use crate::exit::Exit;
use crate::stop::StopSignals;
use crate::web::{Limits, WebConfig};
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Flags of `tokenprobe serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The YAML config file.
    #[arg(long = "config.file", default_value = "tokenprobe.yml")]
    pub config_file: PathBuf,
    /// Address to listen on for /metrics and the other endpoints.
    #[arg(long = "web.listen-address", default_value = "127.0.0.1:9464")]
    pub listen: String,
    /// How long in-flight probes may run after SIGTERM/SIGINT.
    #[arg(long = "shutdown.grace", default_value = "10s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// TLS and basic auth for the endpoints (Prometheus exporter-toolkit format).
    #[arg(long = "web.config.file")]
    pub web_config: Option<PathBuf>,
    /// Where this exporter probes from (e.g. eu-west-1): a constant `location` label on every
    /// series; wins over the config's `location:`.
    #[arg(long)]
    pub location: Option<String>,
}

/// `serve` runs on two runtimes: probes on their own (every core), everything else (the web
/// endpoints, bcrypt, reloads, signals) on one worker thread at a lower CPU priority, so no scrape
/// or login can delay a probe's timestamps (issue 9, item 5).
pub fn run(args: ServeArgs) -> Exit {
    let ServeArgs {
        config_file,
        listen,
        grace,
        web_config,
        location,
    } = args;
    crate::resources::limit_allocator_arenas();
    let nofile = crate::resources::raise_fd_limit();
    let probing = tokio::runtime::Builder::new_multi_thread()
        .thread_name("tokenprobe-probe")
        .enable_all()
        .build();
    let web = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tokenprobe-web")
        .on_thread_start(|| crate::resources::lower_thread_priority(10))
        .enable_all()
        .build();
    let (probing, web) = match (probing, web) {
        (Ok(p), Ok(w)) => (p, w),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("tokenprobe: cannot start the runtime: {e}");
            return Exit::Usage;
        }
    };
    let handle = probing.handle().clone();
    let task = web.spawn(serve(
        config_file,
        listen,
        grace,
        web_config,
        location,
        handle,
        nofile,
    ));
    let result = web
        .block_on(task)
        .unwrap_or_else(|e| Err(anyhow::anyhow!("serve task failed: {e}")));
    // The grace period is over: whatever still runs (a probe past it) is dropped, not waited for.
    probing.shutdown_timeout(Duration::from_millis(200));
    web.shutdown_timeout(Duration::from_millis(200));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tokenprobe: {e:#}");
            Exit::Usage
        }
    }
}

async fn serve(
    config_file: PathBuf,
    listen: String,
    grace: Duration,
    web_config: Option<PathBuf>,
    location: Option<String>,
    probing: tokio::runtime::Handle,
    nofile: Option<u64>,
) -> Result<Exit> {
    // Signal handlers first: a SIGTERM or SIGHUP that arrives while the first probes start must
    // not meet the default action (which ends the process at once).
    let stop_signals = StopSignals::install();
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    let web = match &web_config {
        Some(p) => WebConfig::load(p)?,
        None => WebConfig::default(),
    };
    let otlp = crate::otlp::OtlpConfig::from_env(|k| std::env::var(k).ok())
        .context("the OTEL_* variables")?;
    let instruments = otlp.as_ref().map(|_| crate::otlp::Instruments::new());
    let daemon = Daemon::start(&config_file, probing, location, instruments.clone())
        .with_context(|| format!("loading {}", config_file.display()))?;
    // On this (the web) runtime: an export never runs beside the probes.
    let exporter = match (otlp, instruments) {
        (Some(cfg), Some(instruments)) => {
            tracing::info!(
                endpoint = %crate::redact::redact_url(&cfg.endpoint),
                interval_ms = cfg.interval.as_millis(),
                "exporting OTLP metrics"
            );
            let metrics = daemon.metrics().clone();
            let on_result: crate::otlp::exporter::OnResult =
                std::sync::Arc::new(move |r| metrics.otlp_export(r.as_str()));
            Some(crate::otlp::exporter::Exporter::start(
                cfg,
                instruments,
                on_result,
            )?)
        }
        _ => None,
    };
    let listener = std::net::TcpListener::bind(&listen)
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr().context("listener address")?;
    #[cfg(unix)]
    spawn_sighup_reloader(daemon.clone(), hup);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(stop_signals.watch(stop.clone()));
    let limits = Limits {
        max_connections: crate::resources::web_connection_limit(nofile),
        ..Limits::default()
    };
    tracing::info!(
        address = %addr,
        tls = web.tls.is_some(),
        basic_auth = !web.users.is_empty(),
        jobs = daemon.jobs().len(),
        location = daemon.location(),
        config = %config_file.display(),
        max_web_connections = limits.max_connections,
        fd_limit = nofile,
        "tokenprobe serving"
    );
    let app = router(daemon.clone());
    let stopped = stop.clone();
    let mut web_task = tokio::spawn(async move {
        crate::web::serve(
            listener,
            app,
            &web,
            limits,
            async move { stopped.cancelled().await },
            grace,
        )
        .await
    });
    // `biased`: when the stop signal has come, the web server (which stops on the same signal and
    // may already be done) must not be taken for one that ended by itself, or the process would
    // exit without waiting for the probes in flight.
    let mut web_ended = None;
    tokio::select! {
        biased;
        () = stop.cancelled() => {}
        r = &mut web_task => {
            if !stop.is_cancelled() {
                // The web server only ends by itself on an error (an unusable certificate).
                r.context("HTTP server")?.context("HTTP server")?;
                return Ok(Exit::Done);
            }
            web_ended = Some(r);
        }
    }
    // One deadline for everything: in-flight probes and open web connections both get `grace`.
    tracing::info!(grace = %humantime::format_duration(grace), "shutting down: waiting for in-flight probes and web connections");
    let deadline = tokio::time::Instant::now() + grace;
    let web_done = async move {
        match web_ended {
            Some(r) => Ok(r),
            None => tokio::time::timeout_at(deadline, web_task).await,
        }
    };
    let (probes_done, web_done) = tokio::join!(daemon.shutdown(grace), web_done);
    if !probes_done {
        tracing::warn!("in-flight probes did not finish within the grace period");
    }
    // The last export, with what the last probes recorded (bounded by its own timeout).
    if let Some(e) = exporter {
        e.shutdown(grace.max(Duration::from_secs(1))).await;
    }
    if let Ok(Ok(Err(e))) = web_done {
        tracing::warn!(error = %e, "HTTP server");
    }
    Ok(Exit::Done)
}

/// SIGHUP reloads the config, as Prometheus and its exporters do.
#[cfg(unix)]
fn spawn_sighup_reloader(daemon: Arc<Daemon>, hup: std::io::Result<tokio::signal::unix::Signal>) {
    tokio::spawn(async move {
        let mut hup = match hup {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGHUP; reload with POST /-/reload");
                return;
            }
        };
        while hup.recv().await.is_some() {
            let _ = daemon.reload().await;
        }
    });
}
