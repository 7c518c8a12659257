//! Scrape load for `scripts/bench/scrape-load.sh`: N concurrent scrapers, each fetching `/metrics`
//! again as soon as the previous answer is read in full, for a fixed time, as Prometheus asks
//! (`Accept: application/openmetrics-text...`, `Accept-Encoding: gzip`, kept-alive connections).
//! Loopback only; stops by itself.
//!
//! ```text
//! cargo run --release --example scrape_load -- http://127.0.0.1:9464/metrics 200 60s [--no-gzip] [--basic USER:PASS]
//! cargo run --release --example scrape_load -- --bcrypt-hash PASSWORD   # prints a cost-10 hash
//! ```
//!
//! Prints one line: answers, errors (an answer that is not 2xx, e.g. 401 for a wrong password),
//! answers/s, bytes per answer, latency p50/p99.

use hyper::header::{ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, HeaderValue};
use std::time::{Duration, Instant};
use tokenprobe::transport::{Fetcher, TlsOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, pass] = args.as_slice()
        && flag == "--bcrypt-hash"
    {
        match bcrypt::hash(pass, 10) {
            Ok(h) => println!("{h}"),
            Err(e) => {
                eprintln!("scrape_load: {e}");
                std::process::exit(2);
            }
        }
        return;
    }
    let usage = "usage: scrape_load URL CONCURRENCY DURATION [--no-gzip] [--basic USER:PASS]";
    let (Some(url), Some(n), Some(d)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let url = url.clone();
    let host_ok = url::Url::parse(&url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .is_some_and(|h| h == "127.0.0.1" || h == "localhost" || h == "[::1]");
    if !host_ok {
        eprintln!("scrape_load: loopback URLs only");
        std::process::exit(2);
    }
    let Ok(n) = n.parse::<usize>() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let Ok(dur) = humantime::parse_duration(d) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let gzip = !args.iter().any(|a| a == "--no-gzip");
    let basic = args
        .iter()
        .position(|a| a == "--basic")
        .and_then(|i| args.get(i + 1))
        .and_then(|c| c.split_once(':'))
        .map(|(u, p)| (u.to_owned(), p.to_owned()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            eprintln!("scrape_load: {e}");
            std::process::exit(2)
        });
    rt.block_on(run(url, n, dur, gzip, basic));
}

async fn run(url: String, n: usize, dur: Duration, gzip: bool, basic: Option<(String, String)>) {
    let end = Instant::now() + dur;
    let mut tasks = Vec::new();
    for _ in 0..n {
        let url = url.clone();
        let basic = basic.clone();
        tasks.push(tokio::spawn(async move {
            // The project's own bounded client (the one bench scrapes with).
            let Ok(mut client) = Fetcher::new(TlsOptions::default(), Duration::from_secs(30))
            else {
                return (Vec::new(), 1, 0);
            };
            let mut headers = vec![(
                ACCEPT,
                HeaderValue::from_static(
                    "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
                ),
            )];
            if gzip {
                headers.push((ACCEPT_ENCODING, HeaderValue::from_static("gzip")));
            }
            if let Some((u, p)) = &basic {
                use base64::Engine as _;
                let v = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
                if let Ok(v) = HeaderValue::from_str(&format!("Basic {v}")) {
                    headers.push((AUTHORIZATION, v));
                }
            }
            let mut lat = Vec::new();
            let (mut errors, mut bytes) = (0u64, 0u64);
            while Instant::now() < end {
                let t = Instant::now();
                let got = tokio::time::timeout(
                    Duration::from_secs(30),
                    client.get(&url, &headers, 256 << 20),
                )
                .await;
                match got {
                    Ok(Ok(r)) if (200..300).contains(&r.status) => {
                        bytes += r.body.len() as u64;
                        lat.push(t.elapsed());
                    }
                    _ => {
                        errors += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            (lat, errors, bytes)
        }));
    }
    let mut lat = Vec::new();
    let (mut errors, mut bytes) = (0u64, 0u64);
    for t in tasks {
        if let Ok((l, e, b)) = t.await {
            lat.extend(l);
            errors += e;
            bytes += b;
        }
    }
    lat.sort();
    let q = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p).round() as usize)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "scrapers={n} duration_s={} gzip={gzip} basic_auth={} scrapes={} errors={errors} scrapes_per_s={:.0} bytes_per_scrape={} scrape_ms_p50={:.1} scrape_ms_p99={:.1}",
        dur.as_secs(),
        basic.is_some(),
        lat.len(),
        lat.len() as f64 / dur.as_secs_f64(),
        bytes / (lat.len() as u64).max(1),
        q(0.5),
        q(0.99),
    );
}
