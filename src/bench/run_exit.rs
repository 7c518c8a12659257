//! A judged run's exit (pure): every [`Exit`] its report calls for, the one that prevails by
//! [`Exit::PRECEDENCE`], and the stderr line that says why. `bench` and `bench merge` exit
//! through [`of`]; the run store's [`Exit::NotRecorded`] joins it after the write
//! ([`crate::cli::bench_history::record`]).

use super::report::Report;
use crate::exit::Exit;

/// What the invocation accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitRules {
    /// `--keep-going`: a model whose connectivity check failed does not fail the run while
    /// another passed.
    pub keep_going: bool,
    /// `--accept-client-bound`: a level the client could not measure does not fail the run.
    pub accept_client_bound: bool,
}

/// The run's exit and, when something other than its table says why, the stderr line saying
/// it (a stopped run's line is the renderer's, which knows what it wrote).
pub fn of(report: &Report, rules: ExitRules) -> (Exit, Option<String>) {
    let mut found: Vec<(Exit, Option<String>)> = Vec::new();
    if report.interrupted.is_some() {
        found.push((Exit::Interrupted, None));
    }
    if let Some((exit, line)) = super::health::unusable(report, rules.keep_going) {
        found.push((exit, Some(line)));
    }
    if !rules.accept_client_bound
        && let Some(line) = client_bound(report)
    {
        found.push((Exit::ClientBound, Some(line)));
    }
    match &report.comparison {
        Some(c) if !c.regressions.is_empty() => found.push((Exit::Regression, None)),
        Some(c) if c.compared == 0 => found.push((
            Exit::NothingCompared,
            Some(format!(
                "tokenprobe bench: nothing was compared with the baseline {}: it has none of this run's (model, level) values, so no regression could be found (exit {})",
                c.baseline,
                Exit::NothingCompared.code()
            )),
        )),
        Some(c) if c.judged == Some(0) => {
            let mut why: Vec<&str> = c
                .values
                .iter()
                .filter_map(|v| v.not_judged.as_deref())
                .collect();
            why.sort_unstable();
            why.dedup();
            found.push((
                Exit::NothingCompared,
                Some(format!(
                    "tokenprobe bench: nothing could be judged against the baseline {}: {} values compared, none tested ({}), so no regression could be found (exit {})",
                    c.baseline,
                    c.compared,
                    why.join("; "),
                    Exit::NothingCompared.code()
                )),
            ));
        }
        _ => {}
    }
    found
        .into_iter()
        .fold((Exit::Done, None), |(exit, line), (e, l)| {
            if exit.with(e) == exit {
                (exit, line)
            } else {
                (e, l)
            }
        })
}

/// The line naming the levels the client could not measure, if any.
fn client_bound(report: &Report) -> Option<String> {
    let bound: Vec<String> = report
        .models
        .iter()
        .flat_map(|m| {
            m.levels
                .iter()
                .filter(|l| l.client_bound.is_some())
                .map(move |l| format!("{} @ {}", m.name(), l.key.label()))
        })
        .collect();
    (!bound.is_empty()).then(|| {
        format!(
            "tokenprobe bench: the client could not measure {}: its figures are its own starvation's, not the server's (exit {}; --accept-client-bound to accept them)",
            bound.join(", "),
            Exit::ClientBound.code()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::Interrupted;
    use crate::bench::report::tests::synthetic;

    const STRICT: ExitRules = ExitRules {
        keep_going: false,
        accept_client_bound: false,
    };

    fn exit(r: &Report, rules: ExitRules) -> Exit {
        of(r, rules).0
    }

    /// Issue 39 item 5: a comparison that compared nothing is not a pass; one that compared
    /// values without a regression is, and a regression is 3.
    #[test]
    fn a_gate_that_compared_nothing_does_not_pass() {
        let mut r = synthetic();
        assert_eq!(
            exit(&r, STRICT),
            Exit::Regression,
            "the synthetic run regressed"
        );
        let cmp = r.comparison.as_mut().unwrap();
        cmp.regressions.clear();
        assert_eq!(of(&r, STRICT), (Exit::Done, None));
        let cmp = r.comparison.as_mut().unwrap();
        cmp.compared = 0;
        cmp.values.clear();
        let (e, line) = of(&r, STRICT);
        assert_eq!(e, Exit::NothingCompared);
        let line = line.unwrap();
        assert!(
            line.contains("nothing was compared") && line.ends_with("(exit 6)"),
            "{line}"
        );
        // Issue 40: nor is a comparison whose every value was not judged.
        let mut none_judged = synthetic();
        let cmp = none_judged.comparison.as_mut().unwrap();
        cmp.regressions.clear();
        cmp.judged = Some(0);
        for v in &mut cmp.values {
            v.not_judged = Some("too few values for a p95 (72 needed)".into());
        }
        let (e, line) = of(&none_judged, STRICT);
        assert_eq!(e, Exit::NothingCompared);
        assert!(
            line.unwrap().contains("nothing could be judged"),
            "the reasons named"
        );
        r.comparison = None;
        assert_eq!(exit(&r, STRICT), Exit::Done, "no baseline, no gate");
    }

    /// Issue 41 item 5: the decision of several exits is one, by the one precedence, and the
    /// line said is the prevailing exit's: a run that regressed, had a client-bound level and a
    /// model whose check failed exits 7 saying so, not 4 or 3; a stop prevails over all.
    #[test]
    fn the_exit_that_prevails_is_the_one_said() {
        let mut r = synthetic();
        r.models[0].levels[0].client_bound = Some("starved".into());
        let (e, line) = of(&r, STRICT);
        assert_eq!(
            e,
            Exit::ClientBound,
            "a client-bound level over a regression"
        );
        assert!(line.unwrap().contains("(exit 4;"));
        let accepting = ExitRules {
            accept_client_bound: true,
            ..STRICT
        };
        assert_eq!(of(&r, accepting), (Exit::Regression, None));

        r.models[0].check = Some(crate::bench::health::Check {
            ok: false,
            error_type: None,
            http_status: None,
            message: None,
            seconds: 0.0,
        });
        let (e, line) = of(&r, STRICT);
        assert_eq!(e, Exit::CheckFailed);
        let line = line.unwrap();
        assert!(
            line.contains("connectivity check failed") && line.contains("exit 7"),
            "{line}"
        );

        r.interrupted = Some(Interrupted {
            signal: "SIGINT".into(),
            level_left_out: None,
        });
        assert_eq!(of(&r, STRICT), (Exit::Interrupted, None));
    }
}
