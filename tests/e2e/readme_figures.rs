//! The README's measured figures and its test list stay true:
//! - the figures block of README.md is what `scripts/bench/figures.py` renders from `docs/figures.md`,
//!   every row there has a date and machine and is written by the script it names, and no size
//!   or latency figure sits in the README outside that block (a hand-copied number goes stale:
//!   "12.5 MB" stayed while the binary grew to 12.7 MB);
//! - every `tests/*.rs` is named in the README's "Tests" section;
//! - the README's sentence on `config/example-full.yml` names every problem `check-config`
//!   reports for it (it said "the missing key file" while two unset variables were reported too);
//! - the figures hold against the real artefact: the release binary's size and `serve`'s memory,
//!   measured again by the script that recorded them (`scripts/bench/rss.sh --check`; the README
//!   once said 12.7 MB of a 17.6 MB binary).

use crate::common;

use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &str) -> String {
    std::fs::read_to_string(repo().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"))
}

const BEGIN: &str = "<!-- figures -->";
const END: &str = "<!-- /figures -->";

#[test]
fn readme_figures_come_from_docs_figures_md() {
    let readme = read("README.md");
    let (before, rest) = readme
        .split_once(BEGIN)
        .expect("README has a figures block");
    let (block, after) = rest.split_once(END).expect("the figures block ends");

    // Same text as scripts/bench/figures.py renders (the rendering rule lives there).
    let out = Command::new("python3")
        .arg(repo().join("scripts/bench/figures.py"))
        .arg("check")
        .output()
        .expect("run python3 scripts/bench/figures.py check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Every row: dated, with a machine, written by the script it names; quoted in the block.
    let figures = read("docs/figures.md");
    let date = regex::Regex::new(r"^\d{4}-\d{2}-\d{2}$").expect("regex");
    let mut keys = Vec::new();
    for line in figures.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() != 6 || cells[0] == "key" {
            continue;
        }
        let [key, what, value, measured, machine, by] = cells[..] else {
            unreachable!()
        };
        assert!(date.is_match(measured), "{key}: date {measured:?}");
        assert!(machine.contains("CPUs"), "{key}: machine {machine:?}");
        let script = read(by);
        assert!(
            script.contains(&format!("figures.py set {key} ")),
            "{key} is not written by {by}"
        );
        assert!(
            block.contains(&format!(
                "{what}: **{value}** ({measured}, {machine}, `{by}`)"
            )),
            "README's block does not quote {key} = {value}:\n{block}"
        );
        keys.push(key.to_owned());
    }
    keys.sort();
    assert_eq!(
        keys,
        [
            "binary_size",
            "honest_false_mismatch",
            "metrics_encode",
            "serve_rss",
            "substitution_detection"
        ]
    );

    // No size or latency figure elsewhere in the README (it would not be updated).
    let figure =
        regex::Regex::new(r"\b\d+(\.\d+)? ?(MB|MiB|KiB|GB)\b|\d ms \(?p\d\d").expect("regex");
    for (i, line) in before.lines().chain(after.lines()).enumerate() {
        assert!(
            !figure.is_match(line),
            "a measured figure outside the figures block (line {}): {line}",
            i + 1
        );
    }
}

#[test]
fn every_test_file_is_named_in_the_readme() {
    let readme = read("README.md");
    let tests = readme
        .split_once("## Tests")
        .and_then(|(_, t)| t.split_once("\n## "))
        .map(|(t, _)| t)
        .expect("a Tests section");
    // Every test file: a binary of one file (`tests/x.rs`), or a module of a binary
    // (`tests/e2e/x.rs`, beside its `main.rs`).
    let mut files = Vec::new();
    for e in std::fs::read_dir(repo().join("tests")).expect("tests/") {
        let path = e.expect("entry").path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(name) = name else { continue };
        if name.ends_with(".rs") {
            files.push(format!("tests/{name}"));
        } else if path.join("main.rs").is_file() {
            for m in std::fs::read_dir(&path).expect("a test binary's folder") {
                let m = m.expect("entry").file_name().to_string_lossy().into_owned();
                if m.ends_with(".rs") && m != "main.rs" {
                    files.push(format!("tests/{name}/{m}"));
                }
            }
        }
    }
    assert!(files.len() > 20, "{files:?}");
    let mut missing: Vec<String> = files.into_iter().filter(|f| !tests.contains(f)).collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "not named in README's Tests section: {missing:?}"
    );
}

#[test]
fn example_full_sentence_names_what_check_config_reports() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokenprobe"));
    cmd.args(["check-config", "--config.file", "config/example-full.yml"])
        .current_dir(repo());
    for v in ["VLLM_API_KEY", "AZURE_OPENAI_API_KEY"] {
        cmd.env_remove(v);
    }
    let out = cmd.output().expect("run check-config");
    assert_eq!(out.status.code(), Some(2));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let var = regex::Regex::new(r"environment variable (\w+) is not set").expect("regex");
    let file = regex::Regex::new(r"api_key_file: [^/]*(/[\w./-]+)").expect("regex");
    let named: Vec<String> = var
        .captures_iter(&text)
        .chain(file.captures_iter(&text))
        .map(|c| c[1].to_owned())
        .collect();
    assert_eq!(named.len(), 3, "{text}");
    let readme = read("README.md");
    let sentence = readme
        .split_once("`config/example-full.yml` shows every option")
        .and_then(|(_, t)| t.split_once(").").map(|(s, _)| s.replace('\n', " ")))
        .expect("the README's example-full sentence");
    for n in named {
        assert!(
            sentence.contains(&format!("`{n}`")),
            "README's example-full sentence does not name `{n}`: {sentence}"
        );
    }
}

#[test]
fn figures_hold_against_the_release_binary() {
    let out = Command::new("bash")
        .arg(repo().join("scripts/bench/rss.sh"))
        .arg("--check")
        .env("TOKENPROBE_RELEASE_BIN", common::release_bin())
        .env("SECONDS_TO_RUN", "10")
        .current_dir(repo())
        .output()
        .expect("run scripts/bench/rss.sh --check");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "a recorded figure does not hold:\n{text}"
    );
    assert_eq!(text.matches(": holds").count(), 2, "{text}");
}

/// docs/architecture.md's module map names every top-level module of the library (as `src/lib.rs`
/// declares them) in a row of its own, and no module that is not there.
#[test]
fn the_architecture_map_names_every_module() {
    let owned = lib_modules();
    let modules: Vec<&str> = owned.iter().map(String::as_str).collect();
    assert!(modules.len() > 20, "{modules:?}");
    let doc = read("docs/architecture.md");
    let rows: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`').map(|(m, _)| m))
        .filter(|m| !m.contains(':') && *m != "module")
        .collect();
    let missing: Vec<&&str> = modules.iter().filter(|m| !rows.contains(m)).collect();
    assert!(
        missing.is_empty(),
        "modules without a row in docs/architecture.md: {missing:?}"
    );
    let unknown: Vec<&&str> = rows.iter().filter(|r| !modules.contains(r)).collect();
    assert!(
        unknown.is_empty(),
        "rows in docs/architecture.md naming no module: {unknown:?}"
    );
}

/// The top-level modules `src/lib.rs` declares, in its order.
fn lib_modules() -> Vec<String> {
    read("src/lib.rs")
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
                .or_else(|| l.strip_prefix("mod "))?;
            l.strip_suffix(';').map(str::to_owned)
        })
        .collect()
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The files of the test-only modules `file` declares (`#[cfg(test)] mod x;`): `x.rs` or
/// `x/mod.rs` beside it (for a `mod.rs`, a `lib.rs` or a `main.rs`) or in the folder named after
/// it.
fn test_module_files(file: &Path, text: &str) -> Vec<std::path::PathBuf> {
    let dir = file.parent().expect("a file's folder");
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let dir = if ["mod", "lib", "main"].contains(&stem) {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    let mut out = Vec::new();
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if line != "#[cfg(test)]" {
            continue;
        }
        let Some(decl) = lines.by_ref().find(|l| !l.starts_with("#[")) else {
            break;
        };
        let name = ["mod ", "pub mod ", "pub(crate) mod ", "pub(super) mod "]
            .iter()
            .find_map(|p| decl.strip_prefix(p))
            .and_then(|rest| rest.strip_suffix(';'));
        if let Some(name) = name {
            out.push(dir.join(format!("{name}.rs")));
            out.push(dir.join(name));
        }
    }
    out
}

/// The top-level modules `module` names as `crate::X`, outside comments and its test modules
/// (a file's inline `#[cfg(test)] mod tests` is its last item; a `#[cfg(test)] mod x;` is a
/// file, or a folder, of its own), sorted.
fn imports_of(module: &str, modules: &[String]) -> Vec<String> {
    let src = repo().join("src");
    let mut files = Vec::new();
    let single = src.join(format!("{module}.rs"));
    if single.exists() {
        files.push(single);
    }
    rust_files(&src.join(module), &mut files);
    let texts: Vec<(std::path::PathBuf, String)> = files
        .into_iter()
        .map(|f| {
            let text =
                std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            (f, text)
        })
        .collect();
    let test_only: Vec<std::path::PathBuf> = texts
        .iter()
        .flat_map(|(f, text)| test_module_files(f, text))
        .collect();
    let mut deps = std::collections::BTreeSet::new();
    for (f, text) in texts {
        if test_only.iter().any(|t| f.starts_with(t)) {
            continue;
        }
        let code = [
            "#[cfg(test)]\nmod tests",
            "#[cfg(test)]\npub(crate) mod tests",
        ]
        .iter()
        .filter_map(|m| text.find(m))
        .min()
        .map_or(text.as_str(), |i| &text[..i]);
        for line in code.lines() {
            let line = line.split_once("//").map_or(line, |(c, _)| c);
            for (i, _) in line.match_indices("crate::") {
                let before = line[..i].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue; // `tokenprobe::crate::`-like words, `$crate::`
                }
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name != module && modules.contains(&name) {
                    deps.insert(name);
                }
            }
        }
    }
    deps.into_iter().collect()
}

/// docs/architecture.md's list of imports between top-level modules is the code's, and the code's
/// form no cycle.
#[test]
fn the_architecture_imports_are_the_codes_and_form_no_cycle() {
    let modules = lib_modules();
    let graph: Vec<(String, Vec<String>)> = {
        let mut v: Vec<(String, Vec<String>)> = modules
            .iter()
            .map(|m| (m.clone(), imports_of(m, &modules)))
            .collect();
        v.sort();
        v
    };
    let want: String = graph
        .iter()
        .map(|(m, d)| {
            if d.is_empty() {
                format!("{m}:\n")
            } else {
                format!("{m}: {}\n", d.join(", "))
            }
        })
        .collect();
    let doc = read("docs/architecture.md");
    let marker = "form\nno cycle:\n\n```\n";
    let start = doc
        .find(marker)
        .expect("docs/architecture.md lists the imports between modules")
        + marker.len();
    let listed = &doc[start..start + doc[start..].find("```").expect("the list ends")];
    assert_eq!(
        listed, want,
        "docs/architecture.md's imports differ from the code's; the code's are:\n{want}"
    );
    // The pure core imports no I/O module: besides each other only these pure ones (as the
    // sentence before the list says; `measure` once imported `kstamp` for a plain-data type).
    let core = ["sse", "protocol", "measure", "outcome", "workload"];
    let pure = ["ratelimit", "units", "rng", "plausible"];
    for (m, deps) in &graph {
        if core.contains(&m.as_str()) || pure.contains(&m.as_str()) {
            let io: Vec<&String> = deps
                .iter()
                .filter(|d| !core.contains(&d.as_str()) && !pure.contains(&d.as_str()))
                .collect();
            assert!(io.is_empty(), "the pure core's {m} imports {io:?}");
        }
    }
    // No cycle: repeatedly remove modules that import nothing left.
    let mut left: Vec<(String, Vec<String>)> = graph;
    loop {
        let leaves: Vec<String> = left
            .iter()
            .filter(|(_, d)| d.iter().all(|x| !left.iter().any(|(m, _)| m == x)))
            .map(|(m, _)| m.clone())
            .collect();
        if leaves.is_empty() {
            break;
        }
        left.retain(|(m, _)| !leaves.contains(m));
    }
    assert!(left.is_empty(), "modules in an import cycle: {left:?}");
}

/// docs/bench.md's exit codes are `tokenprobe::exit::Exit`'s, the one list: every code `bench`
/// can exit with is named there in bold, and the order it says prevails is
/// `Exit::PRECEDENCE`, rendered from it.
#[test]
fn the_bench_guide_lists_the_exits_the_code_has() {
    use tokenprobe::exit::Exit;
    let doc = read("docs/bench.md");
    let start = doc
        .find("\nExit codes: ")
        .expect("docs/bench.md lists the exit codes");
    let para = &doc[start..start + doc[start..].find("\n\n").expect("the paragraph ends")];
    for e in Exit::ALL {
        if e == Exit::Failed {
            continue; // `probe`'s and a second signal's, not `bench`'s
        }
        assert!(
            para.contains(&format!("**{}**", e.code())),
            "docs/bench.md's exit codes lack {e:?} ({}):\n{para}",
            e.code()
        );
    }
    let codes: Vec<String> = Exit::PRECEDENCE
        .iter()
        .filter(|e| **e != Exit::Done)
        .map(|e| e.code().to_string())
        .collect();
    let order = format!(
        "When several apply: {}, then {}.",
        codes[0],
        codes[1..].join(", ")
    );
    assert!(
        para.replace('\n', " ").contains(&order),
        "docs/bench.md does not say the precedence as Exit::PRECEDENCE has it ({order}):\n{para}"
    );
}
