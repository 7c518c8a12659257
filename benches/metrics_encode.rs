//! Benchmark: time to encode `/metrics` (both formats) at a given number of exposed series.
//!
//! `cargo bench --bench metrics_encode` prints one line per size: jobs, series (sample lines),
//! and the median / p99 encode time over 200 runs. Under `cargo test` it runs a few iterations only.

use std::time::{Duration, Instant, SystemTime};
use tokenprobe::config::Buckets;
use tokenprobe::measure::Measurement;
use tokenprobe::metrics::{JobInfo, JobLabels, Metrics};
use tokenprobe::protocol::EventMeaning;

fn filled(jobs: usize) -> Metrics {
    let m = Metrics::new(&Buckets::default());
    for j in 0..jobs {
        let labels = JobLabels {
            target: format!("target-{}", j % 5),
            model: format!("model-{j}"),
            prompt: "hello".into(),
        };
        let series = m.register_job(
            JobInfo {
                job: labels,
                api: "openai-chat".into(),
                connection: "new".into(),
                nonce: "true".into(),
                stream: "true".into(),
                workload: "messages".into(),
            },
            tokenprobe::config::Histograms::ALL,
        );
        let t0 = Instant::now();
        let mut meas = Measurement::new(t0);
        let tok = EventMeaning {
            token: true,
            output: true,
            ..EventMeaning::default()
        };
        for k in 0..20u64 {
            meas.event(t0 + Duration::from_millis(300 + 20 * k), &tok);
        }
        meas.event(
            t0 + Duration::from_millis(800),
            &EventMeaning {
                terminal: true,
                ..EventMeaning::default()
            },
        );
        series.record(&meas.finish(), SystemTime::now());
    }
    m
}

fn sample_lines(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count()
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let runs = if bench { 200 } else { 3 };
    println!(
        "{:>5} {:>8} {:>12} {:>12} {:>12} {:>12}",
        "jobs", "series", "text p50", "text p99", "om p50", "om p99"
    );
    for jobs in [1, 4, 10, 40] {
        let m = filled(jobs);
        let series = sample_lines(&m.encode_text().expect("encode"));
        let mut text = Vec::with_capacity(runs);
        let mut om = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            std::hint::black_box(m.encode_text().expect("encode"));
            text.push(t.elapsed());
            let t = Instant::now();
            std::hint::black_box(m.encode_openmetrics().expect("encode"));
            om.push(t.elapsed());
        }
        text.sort();
        om.sort();
        let q =
            |v: &[Duration], p: f64| v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1000.0;
        println!(
            "{jobs:>5} {series:>8} {:>9.3} ms {:>9.3} ms {:>9.3} ms {:>9.3} ms",
            q(&text, 0.5),
            q(&text, 0.99),
            q(&om, 0.5),
            q(&om, 0.99)
        );
    }
}
