//! Issue 9 item 2: when the exporter itself is out of file descriptors (`EMFILE`), a probe is not
//! the target's `connect` failure: it counts in `tokenprobe_internal_errors_total{reason=
//! "fd_exhausted"}` and not in the job's probes. In-process (the scheduler and the registry of
//! the library), in a test binary of its own because it fills this process's fd table.

#![cfg(target_os = "linux")]

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;
use tokenprobe::config::Config;
use tokenprobe::metrics::Metrics;
use tokenprobe::scheduler::Scheduler;

/// The value of one series (`name{k="v"}`) of an exposition, read by the crate's parser.
fn sample(text: &str, series: &str) -> Option<f64> {
    common::e2e::Samples::parse(text).series(series)
}

#[test]
fn the_exporters_own_fd_exhaustion_is_not_the_targets_failure() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // A target that accepts connections (in the backlog) and never answers.
    let target = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = target.local_addr().unwrap();
    let config = Config::parse(&format!(
        "defaults: {{interval: 100ms, timeouts: {{first_token: 300ms}}}}\n\
         prompts: [{{name: p, messages: [{{role: user, content: hi}}]}}]\n\
         targets: [{{name: t, base_url: 'http://{addr}/v1', models: [m], proxy: none}}]\n"
    ))
    .unwrap();
    let metrics = Arc::new(Metrics::new(&config.buckets));

    // Fill the fd table: lower the soft limit, then open /dev/null until EMFILE.
    let saved = getrlimit(Resource::Nofile);
    let mut low = saved;
    low.current = Some(128);
    setrlimit(Resource::Nofile, low).unwrap();
    let mut filler = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => filler.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(24), "{e}");
                break;
            }
        }
    }

    let job = "target=\"t\",model=\"m\",prompt=\"p\"";
    let internal = "tokenprobe_internal_errors_total{reason=\"fd_exhausted\"}";
    let first_token =
        format!("tokenprobe_probe_errors_total{{{job},error_type=\"timeout_first_token\"}}");
    // Polls the registry until `done` holds (every 50 ms, at most 20 s).
    let poll = |done: &dyn Fn(&str) -> bool| -> String {
        let end = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let text = metrics.encode_text().unwrap();
            if done(&text) || std::time::Instant::now() > end {
                return text;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    let scheduler =
        Scheduler::start(&config.jobs, vec![metrics.clone()], rt.handle().clone()).unwrap();
    // Three ticks that found the fd table full.
    let full = poll(&|t| sample(t, internal).is_some_and(|n| n >= 3.0));
    drop(filler);
    setrlimit(Resource::Nofile, saved).unwrap();
    // With fds again, probes reach the target (which never answers: timeout_first_token).
    let after = poll(&|t| sample(t, &first_token).is_some_and(|n| n >= 1.0));
    rt.block_on(scheduler.shutdown(Duration::from_secs(1)));

    let connect = format!("tokenprobe_probe_errors_total{{{job},error_type=\"connect\"}}");
    let probes = format!("tokenprobe_probes_total{{{job}}}");
    assert!(
        sample(&full, internal).unwrap() >= 3.0,
        "fd exhaustion counted as the exporter's own:\n{full}"
    );
    assert_eq!(
        sample(&full, &connect),
        Some(0.0),
        "never the target's connect"
    );
    assert_eq!(
        sample(&full, &probes),
        Some(0.0),
        "not a probe of the target"
    );
    assert!(
        sample(&after, &first_token).unwrap() >= 1.0,
        "with fds back, probes reach the target:\n{after}"
    );
    assert_eq!(sample(&after, &connect), Some(0.0));
}
