//! `bench`'s HTML page in a real browser (headless Chromium, `tests/common/browser.rs`), from
//! real runs against `tokenprobe simulate` and from a hand-made report with server signals:
//!
//! - two simulators of different speed (TTFT 40 ms / ITL 4 ms and 160 ms / 12 ms, each
//!   generating at most 4 answers at once) benched separately and put side by side by `bench report`:
//!   the page ranks the fast one first, finds both knees at 8 (where the simulators start to
//!   queue), and `--limit ttft_p95<300ms` rejects the slow one (its queued TTFT is about
//!   500 ms, the fast one's about 140 ms: a margin no load on the machine closes) and draws the
//!   limit line;
//! - `-o run.html` of a run is the page of the same run's `-o run.json`; the fast sweep run again
//!   with `--baseline` shows every compared value beside the current one;
//! - the server-signals report renders its GPU, KV cache and queue plots and its findings;
//! - every page: loads from `file://` with the network disabled, no console error, no CSP
//!   violation, its script runs; the ranking, the tables and every plot are drawn (not blank in
//!   the screenshot, the series' colour present), each plot's axes labelled; every number shown
//!   equals the embedded JSON report's, and the embedded report equals the JSON file.
//!
//! Screenshots go to `target/report-screenshots/` (a CI artefact), and to `docs/images/` with
//! `TOKENPROBE_UPDATE_SCREENSHOTS=1` (the two in docs/bench.md).

use crate::common;
use common::browser::{self, Loaded};
use common::e2e::*;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::e2e::start_simulate as simulate;

fn config(dir: &Path, target: &str, url: &str) -> PathBuf {
    let path = dir.join(format!("{target}.yml"));
    std::fs::write(
        &path,
        format!(
            "prompts:\n  - name: hello\n    messages: [{{role: user, content: \"Say hello\"}}]\n    max_tokens: 16\n\
             targets:\n  - name: {target}\n    base_url: {url}/v1\n    models: [llm]\n"
        ),
    )
    .expect("write config");
    path
}

fn bench(args: &[&str]) -> (Option<i32>, String, String) {
    bench_in(Path::new("."), args)
}

/// `tokenprobe bench ARGS` run in `dir`.
fn bench_in(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.arg("bench").args(args).current_dir(dir);
    for v in common::PROXY_ENV_VARS {
        cmd.env_remove(v);
    }
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(120));
    (st.code(), out, err)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&read(p)).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// The report the page embeds.
fn embedded(html: &str) -> Value {
    let open = r#"<script type="application/json" id="report-data">"#;
    let start = html.find(open).expect("embedded JSON") + open.len();
    let end = start + html[start..].find("</script>").expect("</script>");
    serde_json::from_str(&html[start..end]).expect("the embedded JSON parses")
}

/// Every key and value of `part` is in `whole` (numbers equal as numbers).
fn assert_within(part: &Value, whole: &Value, at: &str) {
    match (part, whole) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let w = b.get(k).unwrap_or_else(|| panic!("{at}/{k} was lost"));
                assert_within(v, w, &format!("{at}/{k}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{at}: length");
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                assert_within(v, w, &format!("{at}/{i}"));
            }
        }
        (Value::Number(a), Value::Number(b)) => assert_eq!(a.as_f64(), b.as_f64(), "{at}"),
        (a, b) => assert_eq!(a, b, "{at}"),
    }
}

/// How the page should show the value at `ptr`: ×1000 for seconds (shown in ms), ×100 for
/// ratios (shown in %), else as is — this test's own reading of the units.
fn scale(doc: &Value, ptr: &str) -> f64 {
    const SECONDS: [&str; 11] = [
        "ttft_s",
        "ttfo_s",
        "tpot_s",
        "e2e_s",
        "lag_s",
        "loop_lag_s",
        "read_lag_s",
        "send_lag_s",
        "wire_ttft_s",
        "ramp_s",
        "failure_s",
    ];
    let segs: Vec<&str> = ptr.split('/').collect();
    let last = *segs.last().expect("a pointer");
    let parent = ptr.rsplit_once('/').map_or("", |p| p.0);
    let metric = doc
        .pointer(parent)
        .and_then(|p| p.get("metric"))
        .and_then(Value::as_str)
        .map_or_else(
            || {
                if segs.contains(&"values") {
                    last.to_owned()
                } else {
                    String::new()
                }
            },
            str::to_owned,
        );
    let time_metric =
        ["ttft", "ttfo", "tpot", "e2e", "lag"].contains(&metric.split('_').next().unwrap_or(""));
    // A server signal's statistic: ratios in %, seconds in ms.
    if let Some(i) = segs.iter().position(|s| *s == "server")
        && let Some(sig) = segs.get(i + 1)
        && segs.len() > i + 2
    {
        return if sig.ends_with("_ratio") || sig.ends_with("_utilization") {
            100.0
        } else if sig.ends_with("_s") && !sig.ends_with("_per_s") {
            1e3
        } else {
            1.0
        };
    }
    // A comparison's p-values are plain; its intervals, like its changes, in %.
    let in_values = segs.contains(&"values");
    if in_values && ["p_value", "p_holm"].contains(&last) {
        return 1.0;
    }
    if last == "error_rate"
        || metric == "error_rate"
        || (in_values && segs.contains(&"interval"))
        || last == "share"
        || last == "change"
        || last.ends_with("_growth")
        || last.starts_with("tolerance")
    {
        100.0
    } else if time_metric || (last != "n" && segs.iter().any(|s| SECONDS.contains(s))) {
        1e3
    } else {
        1.0
    }
}

/// Every number the page shows (`data-k` pointer, `data-v`, text) is the report's; returns
/// how many.
fn check_numbers(doc: &Value, html: &str) -> usize {
    let re = regex::Regex::new(r#"data-k="([^"]+)" data-v="([^"]+)">([^<]*)<"#).unwrap();
    let mut n = 0;
    for c in re.captures_iter(html) {
        let (ptr, v, text) = (c[1].replace("&amp;", "&"), &c[2], &c[3]);
        let want = doc
            .pointer(&ptr)
            .and_then(Value::as_f64)
            .unwrap_or_else(|| panic!("{ptr}: no number in the report"));
        assert_eq!(v.parse::<f64>().expect("data-v"), want, "{ptr}: data-v");
        let factor = scale(doc, &ptr);
        let scaled = want * factor;
        // A percentage has two decimals, and a tiny one is a bound (`<0.01`, `>-0.01`).
        let text = text.replace("&lt;", "<").replace("&gt;", ">");
        if let Some(bound) = text.strip_prefix('<') {
            assert!(
                scaled > 0.0 && scaled < bound.parse::<f64>().unwrap(),
                "{ptr}: {text}"
            );
            n += 1;
            continue;
        }
        if let Some(bound) = text.strip_prefix('>') {
            let b: f64 = bound.parse().unwrap();
            assert!(
                scaled > b && scaled.abs() < b.abs().max(100.0),
                "{ptr}: {text}"
            );
            n += 1;
            continue;
        }
        let shown: f64 = text
            .parse()
            .unwrap_or_else(|_| panic!("{ptr}: {text:?} is not a number"));
        let rounding = if factor == 100.0 { 0.005 } else { 0.0 };
        assert!(
            (shown - scaled).abs() <= 0.005 * scaled.abs() + rounding + 1e-9,
            "{ptr}: the page shows {text}, the report has {want}"
        );
        n += 1;
    }
    n
}

/// `#rrggbb` → RGB.
fn rgb(hex: &str) -> [u8; 3] {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).expect("hex colour");
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

/// The first series colour of the page's charts (tokenprobe::render::chart::PALETTE[0]).
const FIRST_SERIES: &str = "#0072b2";

/// Loads `page` in Chromium and checks what every page must do; `plots` are the figure ids
/// the page must have (and no others), `tables` the element ids that must be drawn.
fn check_in_browser(page: &Path, name: &str, plots: &[&str], tables: &[&str]) -> Loaded {
    let shots = repo_root().join("target/report-screenshots");
    std::fs::create_dir_all(&shots).expect("target/report-screenshots");
    let png = shots.join(format!("{name}.png"));
    let t = std::time::Instant::now();
    let l = browser::load(page, 1280, &png);
    eprintln!(
        "{name}: page {} bytes, loaded and captured in {:.1} s, screenshot {}x{} at {}",
        std::fs::metadata(page).map(|m| m.len()).unwrap_or(0),
        t.elapsed().as_secs_f64(),
        l.shot.width,
        l.shot.height,
        png.display()
    );
    assert!(
        l.errors.is_empty(),
        "{name}: errors in the page: {:?}",
        l.errors
    );
    assert!(
        l.console.is_empty(),
        "{name}: console lines: {:?}",
        l.console
    );
    assert!(l.js_ok, "{name}: the page's script did not run to its end");
    for id in tables {
        let b = *l
            .boxes
            .get(*id)
            .unwrap_or_else(|| panic!("{name}: no #{id}"));
        let (ink, _) = l.shot.region(b, None);
        assert!(
            b[2] > 100 && b[3] > 10 && ink > 0.02,
            "{name}: #{id} at {b:?} looks blank (ink {ink:.3})"
        );
    }
    let figures: Vec<&String> = l.axes.keys().collect();
    let mut want: Vec<&str> = plots.to_vec();
    want.sort_unstable();
    assert_eq!(figures, want, "{name}: the page's plots");
    for id in plots {
        let b = l.boxes[&format!("{id}/svg")];
        // Axes, ticks and grid alone are grey: the series' colour inside the plot's own SVG
        // (the legend is outside it) means the data was drawn.
        let (ink, colour) = l.shot.region(b, Some(rgb(FIRST_SERIES)));
        assert!(
            b[2] > 300 && b[3] > 150 && ink > 0.01 && colour >= 30,
            "{name}: plot {id} at {b:?} looks blank (ink {ink:.3}, {colour} pixels of the first series' colour)"
        );
        let (x, y, xw, yh, gap) = &l.axes[*id];
        assert!(
            !x.is_empty() && !y.is_empty() && *xw > 20.0 && *yh > 20.0,
            "{name}: plot {id} axes: {x:?} ({xw} px), {y:?} ({yh} px)"
        );
        assert!(
            *gap >= 0.0,
            "{name}: plot {id}'s legend overlaps the chart by {gap} px"
        );
    }
    // The comparison table is wider than the window, but its model (first) and knee (last)
    // columns stay in view: drawn inside the table's scrolling box.
    let [left, right, model, knee, width] = l.edges["levels-table"];
    assert!(
        model >= left - 1.0 && knee <= right + 1.0,
        "{name}: model at {model}, knee ending at {knee}, outside the view {left}..{right} (table {width} px)"
    );
    // The comparison table sorts by a click on a column head (ascending, then descending);
    // the page shows the run's order without script.
    let [before, up, down] = l.sorted.get("levels-table").expect("levels-table sorted");
    let mut asc = before.clone();
    asc.sort_by(f64::total_cmp);
    assert_eq!(up, &asc, "{name}: TTFT p95 ascending after one click");
    asc.reverse();
    assert_eq!(down, &asc, "{name}: descending after two");
    if ["comparison", "server"].contains(&name)
        && std::env::var("TOKENPROBE_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1")
    {
        let docs = repo_root().join("docs/images");
        std::fs::create_dir_all(&docs).expect("docs/images");
        // The answer and the plots: the page down to its tables' heading.
        let top = l.boxes.get("levels").map_or(l.shot.height, |b| b[1] + 40);
        l.shot
            .write_top(&docs.join(format!("bench-report-{name}.png")), top);
    }
    l
}

/// The model names of `selection.ranked` / `.rejected`.
fn names(doc: &Value, list: &str) -> Vec<String> {
    doc["selection"][list]
        .as_array()
        .unwrap_or_else(|| panic!("selection.{list}"))
        .iter()
        .map(|m| m["model"].as_str().expect("model").to_owned())
        .collect()
}

fn knee_level(doc: &Value, model: usize) -> Option<u64> {
    let m = &doc["models"][model];
    let i = m["knee"]["index"].as_u64()? as usize;
    m["levels"][i]["concurrency"].as_u64()
}

#[test]
fn two_servers_of_different_speed_rank_and_reject_as_their_timing_implies() {
    let _serial = serial();
    let _wd = Watchdog::new(
        "two_servers_of_different_speed_rank_and_reject_as_their_timing_implies",
        Duration::from_secs(300),
    );
    browser::chromium();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let sim = |ttft: &str, itl: &str| {
        simulate(
            dir,
            &[
                "--ttft",
                ttft,
                "--itl",
                itl,
                "--output-tokens",
                "16",
                "--max-concurrency",
                "4",
            ],
        )
    };
    let (_fast_sim, fast_url) = sim("40ms", "4ms");
    let (_slow_sim, slow_url) = sim("160ms", "12ms");
    let runs: Vec<(String, PathBuf)> = [("fast", fast_url), ("slow", slow_url)]
        .into_iter()
        .map(|(t, url)| (t.to_owned(), config(dir, t, &url)))
        .collect();
    // Both sweeps at once (each server is its own), 8 requests per level.
    let handles: Vec<_> = runs
        .iter()
        .map(|(t, cfg)| {
            let (t, cfg, dir) = (t.clone(), cfg.clone(), dir.to_owned());
            std::thread::spawn(move || {
                let json = dir.join(format!("{t}.json"));
                let html = dir.join(format!("{t}.html"));
                let r = bench(&[
                    "--config.file",
                    s(&cfg),
                    "--concurrency",
                    "1,2,4,8",
                    // The levels as given: the page's knees are checked at 8.
                    "--knee-levels",
                    "0",
                    "--requests-per-level",
                    "8",
                    "--samples",
                    "-o",
                    s(&json),
                    "-o",
                    s(&html),
                ]);
                (r, json, html)
            })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        let ((code, stdout, err), json, html) = h.join().expect("bench thread");
        assert_eq!(code, Some(0), "{stdout}\n{err}");
        out.push((json, html));
    }
    let (fast_json, fast_html) = &out[0];

    // `-o run.html` is the page of the run's JSON report, numbers and all.
    let fast_doc = read_json(fast_json);
    let page = read(fast_html);
    assert_eq!(embedded(&page), fast_doc);
    assert!(check_numbers(&fast_doc, &page) > 200);
    let cmd = fast_doc["command"].as_str().expect("the command line");
    assert!(
        cmd.contains(" bench --config.file ") && cmd.contains("--concurrency 1,2,4,8"),
        "{cmd}"
    );
    assert!(
        page.contains(&format!("<code>{}</code>", cmd.replace('\'', "&#x27;"))),
        "command on the page"
    );

    let plots = [
        "plot-ttft",
        "plot-tps",
        "plot-curve",
        "plot-scatter-0",
        "plot-scatter-1",
    ];
    merged_page(dir, &plots);
    limited_page(dir, &plots);
    baseline_page(dir, &runs[0].1);
}

#[test]
fn server_signals_and_findings_render_in_a_browser() {
    let _serial = serial();
    browser::chromium();
    let tmp = tempfile::tempdir().expect("tempdir");
    // A real run's report with `server` blocks and findings added by hand (the shape of issue 12).
    let input = repo_root().join("tests/bench-report/server.json");
    let page = tmp.path().join("server.html");
    let (code, o, e) = bench(&["report", s(&input), "-o", s(&page)]);
    assert_eq!(code, Some(0), "{o}\n{e}");
    let doc = read_json(&input);
    let html = read(&page);
    // The page embeds the report as this version reads it: everything the file holds, and the
    // defaults of what an older report leaves out.
    let shown = embedded(&html);
    assert_within(&doc, &shown, "");
    let doc = shown;
    assert!(check_numbers(&doc, &html) > 300);
    for f in doc["findings"].as_array().expect("findings") {
        let msg = f["message"].as_str().expect("message");
        let (model, level) = (f["model"].as_str().unwrap(), f["level"].as_str().unwrap());
        let shown = format!("<b>{model}</b> at {level}: {}", msg.replace('\'', "&#x27;"));
        assert!(html.contains(&shown), "{shown}");
    }
    check_in_browser(
        &page,
        "server",
        &[
            "plot-ttft",
            "plot-tps",
            "plot-curve",
            "plot-scatter-0",
            "plot-scatter-1",
            "plot-server-gpu-utilization",
            "plot-server-kv-cache-usage-ratio",
            "plot-server-requests-waiting",
        ],
        &[
            "ranking",
            "rejected",
            "findings",
            "levels-table",
            "server-table",
        ],
    );

    // Bad invocations exit 2 and write nothing.
    let out = tmp.path().join("x.html");
    for args in [
        vec!["report", "/nonexistent/run.json", "-o", s(&out)],
        vec!["report", s(&input), "-o", "x.txt"],
        vec!["report", s(&repo_root().join("Cargo.toml")), "-o", s(&out)],
        vec!["report", s(&input), "-o", s(&out), "--config.file", "c.yml"],
    ] {
        let (code, _, err) = bench(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote a page");
    }
}

/// `bench report fast.json slow.json`: fast first, both knees at 8, in the browser.
fn merged_page(dir: &Path, plots: &[&str]) {
    // Side by side in `bench report`: fast first, both knees at 8.
    let merged_html = dir.join("merged.html");
    let merged_json = dir.join("merged.json");
    // Run in the runs' directory, so the page names its inputs as `fast.json` and `slow.json`.
    let (code, o, e) = bench_in(
        dir,
        &[
            "report",
            "fast.json",
            "slow.json",
            "-o",
            s(&merged_html),
            "-o",
            s(&merged_json),
        ],
    );
    assert_eq!(code, Some(0), "{o}\n{e}");
    let doc = read_json(&merged_json);
    assert_eq!(
        names(&doc, "ranked"),
        ["fast/llm", "slow/llm"],
        "{:#}",
        doc["selection"]
    );
    assert_eq!(
        (knee_level(&doc, 0), knee_level(&doc, 1)),
        (Some(8), Some(8)),
        "the knees"
    );
    let page = read(&merged_html);
    assert_eq!(embedded(&page), doc);
    let n = check_numbers(&doc, &page);
    let ranking = &page[page.find(r#"id="ranking""#).expect("the ranking table")..];
    assert!(
        ranking.find(r#"<tr data-model="fast/llm">"#)
            < ranking.find(r#"<tr data-model="slow/llm">"#),
        "fast ranked above slow on the page"
    );
    for m in ["fast/llm", "slow/llm"] {
        assert!(
            page.contains(&format!(
                r#"<b>{m}</b>: <span class="knee">knee at 8</span>"#
            )),
            "{m}'s knee"
        );
    }
    assert!(
        page.contains("knee, circled: fast/llm at 8; slow/llm at 8"),
        "the knee in the legend"
    );
    eprintln!("merged page: {n} numbers checked against the report");
    check_in_browser(
        &merged_html,
        "comparison",
        plots,
        &["ranking", "levels-table", "percentiles-table"],
    );
    let size = std::fs::metadata(&merged_html).expect("page").len();
    assert!(size < 300_000, "the page is {size} bytes");
}

/// `bench report … --limit ttft_p95<300ms`: the slow server rejected with its value, the
/// limit drawn.
fn limited_page(dir: &Path, plots: &[&str]) {
    // A limit the slow server fails: rejected with its value, the limit drawn.
    let limited = dir.join("limited.html");
    let limited_json = dir.join("limited.json");
    let (code, o, e) = bench_in(
        dir,
        &[
            "report",
            "fast.json",
            "slow.json",
            "--limit",
            "ttft_p95<300ms",
            "-o",
            s(&limited),
            "-o",
            s(&limited_json),
        ],
    );
    assert_eq!(code, Some(0), "{o}\n{e}");
    let doc = read_json(&limited_json);
    assert_eq!(
        names(&doc, "ranked"),
        ["fast/llm"],
        "{:#}",
        doc["selection"]
    );
    assert_eq!(names(&doc, "rejected"), ["slow/llm"]);
    let page = read(&limited);
    check_numbers(&doc, &page);
    assert!(
        page.contains("<li><b>slow/llm</b> failed: ttft_p95 = "),
        "the rejection"
    );
    assert!(page.contains("(limit ttft_p95 &lt; 300.0 ms)"));
    let fig = &page[page.find(r#"id="plot-ttft""#).expect("plot-ttft")..];
    let fig = &fig[..fig.find("</figure>").expect("</figure>")];
    assert!(
        fig.contains(r#"class="hline""#)
            && fig.contains("<title>limit ttft_p95 &lt; 300.0 ms</title>"),
        "the limit line in the TTFT plot"
    );
    let l = check_in_browser(
        &limited,
        "limit",
        plots,
        &["ranking", "rejected", "levels-table"],
    );
    let (_, red) = l
        .shot
        .region(l.boxes["plot-ttft/svg"], Some(rgb("#d62728")));
    assert!(
        red >= 100,
        "the limit line is drawn in the TTFT plot ({red} red pixels)"
    );
}

/// The fast sweep again with `--baseline fast.json`: every compared value beside the current
/// one, the baseline's lines dashed beside the current ones.
fn baseline_page(dir: &Path, cfg: &Path) {
    let html = dir.join("again.html");
    let json = dir.join("again.json");
    let (code, o, e) = bench(&[
        "--config.file",
        s(cfg),
        "--concurrency",
        "1,2,4,8",
        "--knee-levels",
        "0",
        "--requests-per-level",
        "8",
        "--baseline",
        s(&dir.join("fast.json")),
        "-o",
        s(&json),
        "-o",
        s(&html),
    ]);
    // 3 when the machine's load moved a value past the tolerance: the page shows it either way.
    assert!(matches!(code, Some(0 | 3)), "{o}\n{e}");
    let doc = read_json(&json);
    let values = doc["comparison"]["values"]
        .as_array()
        .expect("comparison.values");
    assert_eq!(
        Some(values.len() as u64),
        doc["comparison"]["compared"].as_u64()
    );
    assert!(values.len() >= 4 * 8, "{} values compared", values.len());
    let page = read(&html);
    assert_eq!(embedded(&page), doc);
    check_numbers(&doc, &page);
    for m in ["llm baseline ttft_p95", "llm baseline agg_tps"] {
        assert!(page.contains(m), "no {m:?} series");
    }
    check_in_browser(
        &html,
        "baseline",
        &["plot-ttft", "plot-tps", "plot-curve"],
        &["levels-table", "baseline-table"],
    );
}
