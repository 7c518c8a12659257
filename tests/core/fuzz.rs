//! Bounded fuzzing of the parsers that read untrusted bytes: the SSE decoder, the four protocol
//! interpreters with the measurement fold behind them, the whole-body judgement of ruling 1, the
//! config parser, dataset files, metrics expositions (parsed and folded into a level) and shard
//! reports (merged and rendered). The machine has no nightly toolchain for cargo-fuzz, so this is a mutation
//! fuzzer on proptest: inputs are taken from the corpus (`tests/fuzz-corpus/`, plus every stream
//! case's body and every shipped config), mutated (bytes flipped, inserted, deleted, spliced,
//! duplicated), split into reads at random points, and fed through. Properties:
//! - nothing panics, and every probe ends in a result (success or one error type);
//! - the decoder's events do not depend on how the bytes were split into reads;
//! - a successful result obeys the contract's identities (TTFT <= E2E, TPOT * (N - 1) = span);
//! - a whole non-streamed answer (each event's data and the body, read as one) never has a TTFT,
//!   TPOT or gaps, and has an E2E exactly when it succeeded.
//!
//! CI runs `TOKENPROBE_FUZZ_CASES` cases per target (default 3,000 streams and 400 configs, about
//! 10 s in a debug build; a config parse costs ~10 ms there); run longer with
//! e.g. `TOKENPROBE_FUZZ_CASES=200000 cargo test --release --test core fuzz::`. A failing input is
//! shrunk by proptest and written to `target/fuzz-failures/`; add it to the corpus when fixed.

use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, FileFailurePersistence, TestRunner};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokenprobe::measure::Measurement;
use tokenprobe::protocol::Api;
use tokenprobe::sse::SseDecoder;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn cases(default: u32) -> u32 {
    std::env::var("TOKENPROBE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const STREAM_CASES: u32 = 3_000;
const CONFIG_CASES: u32 = 400;

fn files_in(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file() && p.to_string_lossy().ends_with(suffix))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The body bytes of every stream case (markers removed, head dropped) and the stream corpus.
fn stream_corpus() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for p in files_in(&repo().join("tests/cases"), ".txt") {
        let Ok(bytes) = std::fs::read(&p) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let Some(raw) = text.split_once("#---- RAW ----\n").map(|(_, r)| r) else {
            continue;
        };
        let body: String = raw
            .split("%%SEG t=")
            .map(|seg| seg.split_once("s%%\n").map_or(seg, |(_, rest)| rest))
            .collect::<Vec<_>>()
            .concat();
        let body = body.split("%%EOF").next().unwrap_or("");
        let body = body.split("%%RST").next().unwrap_or("");
        let body = body.split_once("\r\n\r\n").map_or(body, |(_, b)| b);
        out.push(body.as_bytes().to_vec());
    }
    for p in files_in(&repo().join("tests/fuzz-corpus"), ".sse") {
        if let Ok(b) = std::fs::read(p) {
            out.push(b);
        }
    }
    assert!(
        out.len() >= 40,
        "stream corpus has only {} inputs",
        out.len()
    );
    out
}

fn config_corpus() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for dir in ["config", "tests/fuzz-corpus"] {
        for p in files_in(&repo().join(dir), ".yml") {
            if let Ok(b) = std::fs::read(p) {
                out.push(b);
            }
        }
    }
    assert!(!out.is_empty(), "no config corpus");
    out
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Duplicate(usize, usize),
    Splice(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let interesting = prop_oneof![
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n\n".to_vec()),
        Just(b"data: ".to_vec()),
        Just(b"data: [DONE]\n\n".to_vec()),
        Just(b"event: error\n".to_vec()),
        Just(b"error: {\"code\":429}\n\n".to_vec()),
        Just(b": ping\n".to_vec()),
        Just(b"{\"error\":{\"code\":\"529\"}}".to_vec()),
        Just(b"\"usage\":{\"completion_tokens\":18446744073709551615}".to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        Just(b"\xff\xfe".to_vec()),
        Just(b"${HOME}".to_vec()),
        Just(b": &a [*a, *a]\n".to_vec()),
        prop::collection::vec(any::<u8>(), 1..16),
    ];
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), interesting).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), 1usize..256).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Mutation::Splice(i, j)),
    ]
}

fn mutate(mut b: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        let len = b.len();
        let at = |i: usize| if len == 0 { 0 } else { i % (len + 1) };
        match m {
            Mutation::Flip(i, x) if len > 0 => b[i % len] ^= x | 1,
            Mutation::Flip(..) => {}
            Mutation::Insert(i, bytes) => {
                let i = at(*i);
                b.splice(i..i, bytes.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let i = at(*i);
                let end = (i + n).min(len);
                b.drain(i..end);
            }
            Mutation::Duplicate(i, n) => {
                let i = at(*i);
                let end = (i + n).min(len);
                let part = b[i..end].to_vec();
                b.splice(i..i, part);
            }
            Mutation::Splice(i, j) => {
                // Move a tail to another place: reorders events and cuts them mid-line.
                let (i, j) = (at(*i), at(*j));
                let tail = b.split_off(i.min(b.len()));
                let j = j.min(b.len());
                b.splice(j..j, tail);
            }
        }
    }
    b
}

fn input(corpus: Vec<Vec<u8>>) -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    (
        prop::sample::select(corpus),
        prop::collection::vec(mutation(), 0..6),
        prop::collection::vec(any::<usize>(), 0..8),
    )
        .prop_map(|(base, ms, cuts)| (mutate(base, &ms), cuts))
}

fn runner(name: &str, cases: u32) -> TestRunner {
    let dir = repo().join("target/fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    TestRunner::new(PtConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(Box::leak(
            dir.join(format!("{name}.txt"))
                .to_string_lossy()
                .into_owned()
                .into_boxed_str(),
        )))),
        ..PtConfig::default()
    })
}

fn split_at(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for p in points {
        out.push(bytes[last..p].to_vec());
        last = p;
    }
    out.push(bytes[last..].to_vec());
    out
}

/// Decodes `reads` in order; the events, or `None` when the decoder refused (too large).
fn decode(reads: &[Vec<u8>]) -> Option<Vec<tokenprobe::sse::SseEvent>> {
    let mut d = SseDecoder::new();
    let mut events = Vec::new();
    for r in reads {
        events.extend(d.feed(r).ok()?);
    }
    events.extend(d.finish().ok()?);
    Some(events)
}

#[test]
fn fuzz_sse_decoder_and_protocols() {
    let started = Instant::now();
    let mut runner = runner("sse_protocols", cases(STREAM_CASES));
    let result = runner.run(&input(stream_corpus()), |(bytes, cuts)| {
        let whole = decode(std::slice::from_ref(&bytes));
        let split = decode(&split_at(&bytes, &cuts));
        prop_assert_eq!(&whole, &split, "events depend on how the bytes were split");
        let events = whole.unwrap_or_default();
        for api in [
            Api::OpenaiChat,
            Api::OpenaiCompletions,
            Api::OpenaiResponses,
            Api::AnthropicMessages,
        ] {
            let t0 = Instant::now();
            let mut m = Measurement::new(t0);
            m.headers(t0 + Duration::from_millis(1), 200);
            for (i, ev) in events.iter().enumerate() {
                let t = t0 + Duration::from_millis(2 + i as u64);
                match api.interpret(ev) {
                    Ok(meaning) => {
                        if m.event(t, &meaning) == tokenprobe::measure::Flow::Stop {
                            break;
                        }
                    }
                    Err(e) => m.fail(tokenprobe::outcome::ErrorType::Malformed, t, e.to_string()),
                }
            }
            m.eof(t0 + Duration::from_secs(1));
            let r = m.finish();
            prop_assert!(r.success() == r.error_type.is_none());
            if r.success() {
                let (ttft, e2e) = (r.ttft_s.unwrap_or(-1.0), r.e2e_s.unwrap_or(-1.0));
                prop_assert!(ttft >= 0.0 && ttft <= e2e, "TTFT {} E2E {}", ttft, e2e);
                if let (Some(tpot), Some(last)) = (r.tpot_s, r.last_token_s) {
                    let span = last - ttft;
                    let n = r.output_tokens as f64;
                    prop_assert!((tpot * (n - 1.0) - span).abs() < 1e-9);
                }
            } else {
                prop_assert!(r.ttft_s.is_none(), "a failed probe has no TTFT");
            }
        }
        let _ = tokenprobe::outcome::judge_non_event_stream(&bytes);
        // Whole non-streamed answers: the body, and every event's (mutated) JSON as one.
        let body = String::from_utf8_lossy(&bytes).into_owned();
        let _ = tokenprobe::outcome::judge_non_answer(&body);
        for data in events
            .iter()
            .map(|e| e.data.as_str())
            .chain([body.as_str()])
        {
            for api in [
                Api::OpenaiChat,
                Api::OpenaiResponses,
                Api::AnthropicMessages,
            ] {
                let t0 = Instant::now();
                let mut m = Measurement::new(t0);
                m.non_stream();
                if let Ok(meaning) = api.interpret_answer(data) {
                    m.answer(t0 + Duration::from_millis(5), meaning);
                }
                let r = m.finish();
                prop_assert!(r.ttft_s.is_none() && r.tpot_s.is_none() && r.chunk_gaps_s.is_empty());
                prop_assert_eq!(r.success(), r.e2e_s.is_some());
            }
        }
        Ok(())
    });
    eprintln!(
        "fuzz sse+protocols: {} cases in {:.1} s",
        cases(STREAM_CASES),
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn fuzz_config_parser() {
    let started = Instant::now();
    let mut runner = runner("config", cases(CONFIG_CASES));
    let result = runner.run(&input(config_corpus()), |(bytes, _)| {
        let text = String::from_utf8_lossy(&bytes);
        // Any outcome but a panic or a hang is fine; an error must say something.
        if let Err(e) = tokenprobe::config::Config::parse(&text) {
            prop_assert!(!e.to_string().trim().is_empty());
        }
        Ok(())
    });
    eprintln!(
        "fuzz config: {} cases in {:.1} s",
        cases(CONFIG_CASES),
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The files of `dir` whose names end in one of `suffixes`.
fn corpus_of(dirs: &[&str], suffixes: &[&str]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for dir in dirs {
        for s in suffixes {
            for p in files_in(&repo().join(dir), s) {
                if let Ok(b) = std::fs::read(p) {
                    out.push(b);
                }
            }
        }
    }
    assert!(!out.is_empty(), "no corpus in {dirs:?} {suffixes:?}");
    out
}

const FILE_CASES: u32 = 600;

/// Dataset files (ShareGPT JSON, JSONL): a conversation list or an error that says where,
/// never a panic; every conversation ends with a user message.
#[test]
fn fuzz_dataset_files() {
    use tokenprobe::workload::dataset::{DatasetFormat, parse};
    let started = Instant::now();
    let mut runner = runner("dataset", cases(FILE_CASES));
    let result = runner.run(
        &input(corpus_of(&["examples/datasets"], &[".json", ".jsonl"])),
        |(bytes, _)| {
            let text = String::from_utf8_lossy(&bytes);
            for format in [DatasetFormat::Sharegpt, DatasetFormat::Jsonl] {
                match parse(&text, format) {
                    Ok(conversations) => {
                        prop_assert!(!conversations.is_empty());
                        for c in &conversations {
                            prop_assert_eq!(c.last().map(|m| m.role.as_str()), Some("user"));
                        }
                    }
                    Err(e) => prop_assert!(!e.trim().is_empty()),
                }
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz datasets: {} cases in {:.1} s",
        cases(FILE_CASES),
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Metrics expositions: parsed strictly (or refused), and folded into a level whose every
/// statistic is a finite number (never `null` in the JSON), whatever the samples hold.
#[test]
fn fuzz_server_metrics_expositions() {
    use tokenprobe::servermetrics::expo::parse;
    use tokenprobe::servermetrics::level::{ENDPOINT_LABEL, LevelScrapes, Snapshot, fold};
    use tokenprobe::servermetrics::signals::known;
    let started = Instant::now();
    let mut runner = runner("expositions", cases(FILE_CASES));
    let signals = known();
    let result = runner.run(
        &input(corpus_of(&["tests/fixtures/servermetrics"], &[".prom"])),
        |(bytes, cuts)| {
            let text = String::from_utf8_lossy(&bytes);
            let Ok(mut samples) = parse(&text) else {
                return Ok(());
            };
            for s in &mut samples {
                s.labels.push((ENDPOINT_LABEL.into(), "0".into()));
            }
            // The same exposition before, during (twice, the second cut short) and after.
            let cut = cuts
                .first()
                .map_or(samples.len(), |c| c % (samples.len() + 1));
            let snap = |at_s: f64, samples: &[tokenprobe::servermetrics::expo::Reading]| Snapshot {
                at_s,
                samples: samples.to_vec(),
            };
            let l = LevelScrapes {
                before: Some(snap(0.0, &samples)),
                during: vec![snap(0.5, &samples), snap(1.0, &samples[..cut])],
                after: Some(snap(1.5, &samples)),
                ..LevelScrapes::default()
            };
            let s = fold(&l, &signals, 1.5);
            let json = serde_json::to_string(&s).expect("a server block serialises");
            prop_assert!(!json.contains("null"), "{}", json);
            for (name, st) in &s.signals {
                for v in [st.mean, st.max, st.p50, st.p95, st.count]
                    .into_iter()
                    .flatten()
                {
                    prop_assert!(v.is_finite(), "{} = {}", name, v);
                }
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz expositions: {} cases in {:.1} s",
        cases(FILE_CASES),
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Shard reports: a mutated report (and itself as the other shard) either merges into a report
/// whose numbers are finite, or is refused with a reason; never a panic.
#[test]
fn fuzz_shard_reports() {
    use tokenprobe::bench::merge::merge;
    use tokenprobe::bench::report::Report;
    let started = Instant::now();
    let mut runner = runner("shard_reports", cases(FILE_CASES / 3));
    let result = runner.run(
        &input(corpus_of(
            &["tests/bench-report", "tests/fuzz-corpus"],
            &[".json"],
        )),
        |(bytes, _)| {
            let Ok(r) = serde_json::from_slice::<Report>(&bytes) else {
                return Ok(());
            };
            for set in [vec![r.clone()], vec![r.clone(), r.clone()]] {
                let named: Vec<(String, Report)> = set
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| (format!("shard{i}.json"), r))
                    .collect();
                match merge(&named, &[]) {
                    Ok(m) => {
                        for l in m.models.iter().flat_map(|m| &m.levels) {
                            prop_assert!(l.wall_s.is_finite() && l.output_tokens_per_s.is_finite());
                        }
                        // The page renders whatever merged.
                        prop_assert!(
                            tokenprobe::render::html::page(&tokenprobe::render::shown::Shown::of(
                                &m
                            ))
                            .is_ok()
                        );
                    }
                    Err(e) => prop_assert!(!e.to_string().trim().is_empty()),
                }
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz shard reports: {} cases in {:.1} s",
        cases(FILE_CASES / 3),
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
