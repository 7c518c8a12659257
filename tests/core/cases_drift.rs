//! The drift check: `tests/cases/` is the repository's byte-exact copy of the workspace's shared
//! stream cases. When `../shared/cases` exists beside the repository (the project's workspace, not a
//! clone from GitHub), every file there must be in `tests/cases/` with the same bytes, so a case that
//! arrives there reaches the suite the next time anyone runs it. This is the only place in the
//! repository that reads `../shared`; without it the test checks only that the copy is complete in
//! itself (every `.expect.json` has its `.txt`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every regular file below `dir`, as paths relative to it.
fn files_below(dir: &Path) -> BTreeSet<PathBuf> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else if let Ok(rel) = p.strip_prefix(base) {
                out.insert(rel.to_path_buf());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn tests_cases_holds_every_shared_case_byte_for_byte() {
    let shared = repo().join("../shared/cases");
    if !shared.is_dir() {
        eprintln!("no ../shared/cases beside the repository: nothing to compare with");
        return;
    }
    let ours = repo().join("tests/cases");
    let mut problems = Vec::new();
    for rel in files_below(&shared) {
        let theirs = std::fs::read(shared.join(&rel));
        let mine = std::fs::read(ours.join(&rel));
        match (theirs, mine) {
            (Ok(a), Ok(b)) if a == b => {}
            (Ok(_), Ok(_)) => problems.push(format!("{} differs", rel.display())),
            (Ok(_), Err(_)) => problems.push(format!("{} is missing", rel.display())),
            (Err(e), _) => problems.push(format!(
                "{}: cannot read the shared file: {e}",
                rel.display()
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "tests/cases/ has drifted from ../shared/cases (copy them in: cp -a ../shared/cases/. tests/cases/):\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn every_expect_file_has_its_stream() {
    let ours = repo().join("tests/cases");
    let files = files_below(&ours);
    let expects: Vec<&PathBuf> = files
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(".expect.json"))
        .collect();
    assert!(
        expects.len() >= 51,
        "tests/cases holds {} expect files; the shared set has 51",
        expects.len()
    );
    for e in expects {
        let txt = PathBuf::from(e.to_string_lossy().replace(".expect.json", ".txt"));
        assert!(
            files.contains(&txt),
            "{} has no {}",
            e.display(),
            txt.display()
        );
    }
}
