//! `tokenprobe bench report FILE.json… -o OUT…`: an earlier run's JSON report (or several, side
//! by side) rendered again as HTML, Markdown, CSV or JSON, without sending a request (one of
//! [`super::bench::BenchAction`]).

use crate::bench::BenchError;
use crate::bench::combine;
use crate::bench::criteria::{Criteria, parse_weights};
use crate::exit::Exit;
use std::path::PathBuf;

/// Flags of `tokenprobe bench report`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// JSON reports written by `bench -o FILE.json`, or stored runs by their id in the run store
    /// (`bench history` lists them); several: their models side by side.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// The run store stored runs are read from (default: runs.sqlite3 in the user's data
    /// directory).
    #[arg(long, env = "TOKENPROBE_HISTORY", value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Write to FILE.html, FILE.md, FILE.csv or FILE.json (by extension; repeatable).
    #[arg(long = "output", short = 'o', required = true)]
    pub outputs: Vec<PathBuf>,
    /// Judge the (combined) models again by this bench file (limits, weights, SLOs, selection
    /// level), as `bench --bench.file`; --limit and --weight add to it.
    #[arg(long = "bench.file")]
    pub bench_file: Option<PathBuf>,
    /// Judge the (combined) models again with this hard limit (repeatable), as `bench --limit`.
    #[arg(long = "limit")]
    pub limits: Vec<String>,
    /// Judge again with these score weights (repeatable), as `bench --weight`.
    #[arg(long = "weight")]
    pub weights: Vec<String>,
    /// Judge again at this level (concurrency, or rate in open loop).
    #[arg(long)]
    pub select_at: Option<f64>,
    /// Leave every request's sample out (a smaller page: no per-request scatter).
    #[arg(long)]
    pub no_samples: bool,
}

impl ReportArgs {
    /// The criteria of a new judgement, when any flag asks for one.
    fn criteria(&self) -> Result<Option<Criteria>, BenchError> {
        if self.bench_file.is_none()
            && self.limits.is_empty()
            && self.weights.is_empty()
            && self.select_at.is_none()
        {
            return Ok(None);
        }
        let mut c = match &self.bench_file {
            Some(p) => Criteria::load_file(p)?,
            None => Criteria::default(),
        };
        for l in &self.limits {
            c.limits.push(l.parse()?);
        }
        if !self.weights.is_empty() {
            c.weights.clear();
            for w in &self.weights {
                c.weights.extend(parse_weights(w)?);
            }
        }
        if self.select_at.is_some() {
            c.select_at = self.select_at;
        }
        Ok(Some(c))
    }
}

/// Runs `bench report`: reads and combines the inputs, judges again when asked, writes every
/// output. Exit 0, or 2 (an input that is not a report, an output that cannot be written).
///
/// # Errors
/// [`BenchError`] for a bad flag, input or output.
pub fn run(a: &ReportArgs) -> Result<Exit, BenchError> {
    let outputs = crate::render::Outputs::check(&a.outputs, None)?;
    let criteria = a.criteria()?;
    let mut docs = Vec::new();
    for p in &a.inputs {
        // A run id that names no file is a stored run.
        let stored = p
            .to_str()
            .and_then(crate::history::RunRef::parse)
            .filter(|_| !p.exists());
        let (name, r) = match stored {
            Some(crate::history::RunRef::Id(id)) => (
                format!("run {id}"),
                super::bench_history::stored(a.history.as_deref(), id)?,
            ),
            _ => (
                p.display().to_string(),
                crate::bench::read_report(p)
                    .map_err(|reason| BenchError::Usage(format!("{}: {reason}", p.display())))?,
            ),
        };
        docs.push((name, r));
    }
    let mut report = combine::combine(docs, criteria.as_ref()).map_err(BenchError::Usage)?;
    if a.no_samples {
        combine::drop_samples(&mut report);
    }
    let shown = crate::render::shown::Shown::of(&report);
    crate::render::write_outputs(&shown, &outputs, &criteria.unwrap_or_default())?;
    Ok(Exit::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::bench::{BenchAction, BenchArgs};
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cmd::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench)
    }

    fn report(args: &[&str]) -> ReportArgs {
        match parse(args).expect("parses").action {
            Some(BenchAction::Report(r)) => r,
            _ => panic!("not the report subcommand"),
        }
    }

    #[test]
    fn a_run_keeps_its_flags_and_report_is_a_subcommand() {
        let run = parse(&[
            "--config.file",
            "c.yml",
            "--requests-per-level",
            "3",
            "-o",
            "r.html",
        ])
        .expect("a run");
        assert!(run.action.is_none());
        assert_eq!(
            run.config_file.as_deref(),
            Some(std::path::Path::new("c.yml"))
        );
        assert_eq!(run.outputs, [PathBuf::from("r.html")]);
        let r = report(&[
            "report",
            "a.json",
            "b.json",
            "-o",
            "m.html",
            "--limit",
            "ttft_p95<1s",
            "--no-samples",
        ]);
        assert_eq!(r.inputs, [PathBuf::from("a.json"), PathBuf::from("b.json")]);
        assert_eq!(r.outputs, [PathBuf::from("m.html")]);
        assert!(r.no_samples);
        assert_eq!(
            r.criteria()
                .expect("criteria")
                .expect("judged")
                .limits
                .len(),
            1
        );
    }

    #[test]
    fn report_judges_again_by_a_bench_file_as_bench_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("judge.yml");
        std::fs::write(
            &file,
            "limits: [ttft_p95<2s, error_rate<1%]\nweights: {ttft: 1}\nselect_at: 8\n",
        )
        .expect("write");
        let path = file.to_str().expect("path");
        let r = report(&["report", "a.json", "-o", "m.html", "--bench.file", path]);
        let c = r.criteria().expect("criteria").expect("judged");
        assert_eq!((c.limits.len(), c.select_at), (2, Some(8.0)));
        // A flag adds to the file.
        let r = report(&[
            "report",
            "a.json",
            "-o",
            "m.html",
            "--bench.file",
            path,
            "--limit",
            "tps_p50>30",
        ]);
        assert_eq!(
            r.criteria()
                .expect("criteria")
                .expect("judged")
                .limits
                .len(),
            3
        );
    }

    #[test]
    fn what_does_not_fit_is_refused() {
        // A run still needs its config and amount; a report its inputs and outputs; a run's
        // flags do not go with `report`.
        for args in [
            &["--requests-per-level", "3"][..],
            &["report", "a.json"],
            &["report", "-o", "x.html"],
            &[
                "--config.file",
                "c.yml",
                "--requests-per-level",
                "3",
                "report",
                "a.json",
                "-o",
                "x.html",
            ],
        ] {
            assert!(parse(args).is_err(), "{args:?} accepted");
        }
        let r = report(&["report", "a.json", "-o", "x.txt"]);
        assert!(matches!(run(&r), Err(BenchError::Usage(m)) if m.contains(".html")));
    }
}
