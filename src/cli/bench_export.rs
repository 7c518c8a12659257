//! `tokenprobe bench`'s exports: the `--remote-write URL` flags (headers, TLS trust, timeout)
//! converted into a validated [`RemoteWriteSpec`], the OTLP export the `OTEL_*` variables ask for,
//! and both started beside a run and finished after it ([`Exports`]).

use crate::bench::BenchError;
use crate::bench::plan::BenchPlan;
use crate::remotewrite::{RemoteWrite, RemoteWriteSpec};
use crate::transport::TlsOptions;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The export flags of `tokenprobe bench`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ExportArgs {
    /// Send every level's results, as it ends, to this Prometheus remote-write receiver (e.g.
    /// http://prometheus:9090/api/v1/write; `user:password@` in it is sent as Basic
    /// credentials), as tokenprobe_bench_* series labelled run_id, model, target, prompt, level.
    #[arg(long, value_name = "URL")]
    pub remote_write: Option<String>,
    /// A header sent with every remote-write request, NAME=VALUE (repeatable; e.g.
    /// Authorization='Bearer ...', X-Scope-OrgID=team-a); its value is hidden in every output.
    #[arg(
        long = "remote-write-header",
        value_name = "NAME=VALUE",
        requires = "remote_write"
    )]
    pub remote_write_headers: Vec<String>,
    /// PEM CA certificates the remote-write receiver's certificate may chain to, besides the
    /// bundled roots.
    #[arg(long, value_name = "FILE", requires = "remote_write")]
    pub remote_write_ca_file: Option<PathBuf>,
    /// Accept any certificate from the remote-write receiver.
    #[arg(long, requires = "remote_write")]
    pub remote_write_insecure_skip_verify: bool,
    /// Each remote-write request's time limit.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, requires = "remote_write")]
    pub remote_write_timeout: Duration,
}

impl ExportArgs {
    /// The remote write asked for, checked: an `http(s)` URL, headers that are valid HTTP, a
    /// timeout from 100 ms to 5 minutes.
    ///
    /// # Errors
    /// [`BenchError::Usage`] saying which flag is wrong (never quoting a header's value).
    pub fn remote_write(&self) -> Result<Option<RemoteWriteSpec>, BenchError> {
        let Some(url) = &self.remote_write else {
            return Ok(None);
        };
        let usage = |m: String| Err(BenchError::Usage(format!("--remote-write: {m}")));
        match url::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => {
                return usage(format!(
                    "{}: not an http:// or https:// URL",
                    crate::redact::redact_url(url)
                ));
            }
        }
        let t = self.remote_write_timeout;
        if t < Duration::from_millis(100) || t > Duration::from_secs(300) {
            return usage("--remote-write-timeout must be between 100ms and 5m".into());
        }
        let mut headers = Vec::new();
        for h in &self.remote_write_headers {
            let Some((name, value)) = h.split_once('=') else {
                return usage("a --remote-write-header is NAME=VALUE".into());
            };
            match crate::transport::sensitive_header(name, value) {
                Ok(header) => headers.push(header),
                Err(reason) => return usage(reason),
            }
        }
        Ok(Some(RemoteWriteSpec {
            url: url.clone(),
            headers,
            tls: TlsOptions {
                ca_file: self.remote_write_ca_file.clone(),
                insecure_skip_verify: self.remote_write_insecure_skip_verify,
                ..TlsOptions::default()
            },
            timeout: t,
        }))
    }
}

/// How long a run waits at its end for each export to finish.
const DRAIN: Duration = Duration::from_secs(30);

/// The OTLP exports' results: sent, failed, dropped.
type Counts = Arc<[AtomicU64; 3]>;

/// The exports running beside a bench run.
#[derive(Debug)]
pub struct Exports {
    remote: Option<RemoteWrite>,
    otlp: Option<(crate::otlp::exporter::Exporter, Counts, String)>,
}

impl Exports {
    /// Starts what `args` and the `OTEL_*` variables ask for, each fed by a sink of `plan`.
    ///
    /// # Errors
    /// [`BenchError`] for a bad flag or variable, or a client that cannot be built.
    pub fn start(args: &ExportArgs, plan: &mut BenchPlan) -> Result<Self, BenchError> {
        let mode = crate::bench::report::LoadKind::of(plan.open()).as_str();
        let remote = match args.remote_write()? {
            Some(spec) => {
                let part = plan.part();
                let shard = (part.shard.count > 1).then(|| part.shard.to_string());
                let prompt = &plan.sent().spec().prompt.name;
                let w = RemoteWrite::start(spec, &part.run_id, mode, shard, prompt)?;
                plan.add_sink(w.sink());
                Some(w)
            }
            None => None,
        };
        let otlp = crate::otlp::OtlpConfig::from_env(|k| std::env::var(k).ok())
            .map_err(|e| BenchError::Usage(format!("the OTEL_* variables: {e}")))?;
        let otlp = match otlp {
            Some(cfg) => {
                let instruments = crate::otlp::Instruments::new();
                let targets = plan.sent().models().iter().map(|m| {
                    (
                        m.target.name.clone(),
                        m.target.api.as_str().to_owned(),
                        m.target.base_url.clone(),
                    )
                });
                let sink = crate::otlp::bench::BenchSink::new(
                    instruments.clone(),
                    &plan.part().run_id,
                    &plan.sent().spec().prompt.name,
                    targets,
                );
                plan.add_sink(Arc::new(sink));
                let counts: Counts = Arc::default();
                let c = counts.clone();
                let url = crate::redact::redact_url(&cfg.endpoint);
                let on_result: crate::otlp::exporter::OnResult = Arc::new(move |r| {
                    use crate::otlp::exporter::ExportResult as R;
                    let i = match r {
                        R::Sent => 0,
                        R::Failed => 1,
                        R::Dropped => 2,
                    };
                    c[i].fetch_add(1, Ordering::Relaxed);
                });
                let e = crate::otlp::exporter::Exporter::start(cfg, instruments, on_result)?;
                Some((e, counts, url))
            }
            None => None,
        };
        Ok(Exports { remote, otlp })
    }

    /// Waits (bounded) for the last batches and exports, and says what became of them on stderr.
    pub async fn finish(self) {
        if let Some(w) = self.remote {
            let url = w.url().to_owned();
            let o = w.finish(DRAIN).await;
            let mut line = format!(
                "tokenprobe bench: remote write to {url}: {} level(s) sent, {} failed, {} dropped (queue full)",
                o.sent, o.failed, o.dropped
            );
            if o.unsent > 0 {
                line.push_str(&format!(", {} not sent in time", o.unsent));
            }
            if let Some(e) = &o.last_error {
                line.push_str(&format!("; last error: {e}"));
            }
            crate::output::print_stderr_line(&line);
        }
        if let Some((e, counts, url)) = self.otlp {
            e.shutdown(DRAIN).await;
            let [sent, failed, dropped] = [0, 1, 2].map(|i| counts[i].load(Ordering::Relaxed));
            crate::output::print_stderr_line(&format!(
                "tokenprobe bench: OTLP export to {url}: {sent} export(s) sent, {failed} failed, {dropped} interval(s) dropped"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str, headers: &[&str]) -> ExportArgs {
        ExportArgs {
            remote_write: Some(url.into()),
            remote_write_headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            remote_write_timeout: Duration::from_secs(10),
            ..ExportArgs::default()
        }
    }

    #[test]
    fn a_remote_write_is_checked_and_never_quotes_a_secret() {
        let s = args(
            "http://u:pw@prom:9090/api/v1/write",
            &["X-Scope-OrgID=a", "Authorization=Bearer s3cret"],
        )
        .remote_write()
        .unwrap()
        .unwrap();
        assert_eq!(s.headers.len(), 2);
        assert!(s.headers.iter().all(|(_, v)| v.is_sensitive()));
        assert_eq!(
            ExportArgs::default().remote_write().unwrap().map(|s| s.url),
            None
        );
        for (bad, want) in [
            (args("ftp://x/", &[]), "not an http:// or https:// URL"),
            (args("http://u:s3cret@/x", &[]), "not an http"),
            (args("http://p/", &["Authorization"]), "NAME=VALUE"),
            (
                args("http://p/", &["Bad Name=s3cret"]),
                "is not a header name",
            ),
            (
                args("http://p/", &["A=s3cret\n"]),
                "not a valid header value",
            ),
        ] {
            let e = bad.remote_write().unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
        let mut slow = args("http://p/", &[]);
        slow.remote_write_timeout = Duration::from_secs(600);
        assert!(slow.remote_write().is_err());
    }
}
