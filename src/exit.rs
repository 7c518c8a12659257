//! Every exit status of the process, in one list, and which one a `bench` run exits with when
//! several apply ([`Exit::PRECEDENCE`]). Every command exits through [`Exit`]; `main.rs`,
//! [`crate::cli`] and [`crate::bench`] point here, and docs/bench.md's list is held to this one
//! by a test (`readme_figures`). Pure: no I/O.

use std::process::ExitCode;

/// An exit status of `tokenprobe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done. A bench whose requests failed is done too: failures are results.
    Done,
    /// 1: the probe failed, or its prompt could not be sized (`probe`); a second stop signal
    /// (`serve`, `simulate`, `bench`).
    Failed,
    /// 2: bad usage, an invalid config, bench file, baseline or output path (checked before any
    /// request is sent), an output that cannot be written, or any other error that ends a
    /// command (a runtime or a listener that cannot start).
    Usage,
    /// 3: a metric regressed against `--baseline` beyond the tolerance.
    Regression,
    /// 4: a level the client could not measure (its own starvation), without
    /// `--accept-client-bound`.
    ClientBound,
    /// 5: the run could not be recorded in the run store at its end.
    NotRecorded,
    /// 6: the comparison with `--baseline` compared no value (a gate that decided nothing does
    /// not pass).
    NothingCompared,
    /// 7: a model's connectivity check failed (no model was loaded; with `--keep-going` only
    /// when every model failed it).
    CheckFailed,
    /// 8: a level whose every request failed, or a model's load stopped early by errors more
    /// load cannot change.
    AllErrors,
    /// 130: stopped by a signal (as a shell reports SIGINT: 128 + 2).
    Interrupted,
}

impl Exit {
    /// A `bench` run's exits, the one it exits with first when several apply: a stop, then what
    /// left a model or a level unmeasured, a level the client could not measure, the gate's
    /// verdict, and last the run store. (1 and 2 end a command before any of these is decided.)
    pub const PRECEDENCE: [Exit; 8] = [
        Exit::Interrupted,
        Exit::CheckFailed,
        Exit::AllErrors,
        Exit::ClientBound,
        Exit::Regression,
        Exit::NothingCompared,
        Exit::NotRecorded,
        Exit::Done,
    ];

    /// Every exit status, by code.
    pub const ALL: [Exit; 10] = [
        Exit::Done,
        Exit::Failed,
        Exit::Usage,
        Exit::Regression,
        Exit::ClientBound,
        Exit::NotRecorded,
        Exit::NothingCompared,
        Exit::CheckFailed,
        Exit::AllErrors,
        Exit::Interrupted,
    ];

    /// The process's exit status.
    pub const fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Regression => 3,
            Exit::ClientBound => 4,
            Exit::NotRecorded => 5,
            Exit::NothingCompared => 6,
            Exit::CheckFailed => 7,
            Exit::AllErrors => 8,
            Exit::Interrupted => 130,
        }
    }

    /// The exit when `other` applies too: whichever comes first in [`Exit::PRECEDENCE`] (1 and
    /// 2, which end a command, before all of them).
    #[must_use]
    pub fn with(self, other: Exit) -> Exit {
        if other.rank() < self.rank() {
            other
        } else {
            self
        }
    }

    /// The place in the precedence, lower first.
    fn rank(self) -> usize {
        match self {
            Exit::Usage => 0,
            Exit::Failed => 1,
            e => 2 + Exit::PRECEDENCE.iter().position(|p| *p == e).unwrap_or(0),
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;

    #[test]
    fn the_first_in_precedence_prevails_in_either_order() {
        let p = Exit::PRECEDENCE;
        for (i, a) in p.iter().enumerate() {
            for b in &p[i..] {
                assert_eq!(a.with(*b), *a, "{a:?} over {b:?}");
                assert_eq!(b.with(*a), *a, "{a:?} over {b:?}");
            }
        }
        assert_eq!(Exit::Done.with(Exit::NotRecorded), Exit::NotRecorded);
        assert_eq!(Exit::Regression.with(Exit::NotRecorded), Exit::Regression);
        assert_eq!(Exit::Interrupted.with(Exit::Usage), Exit::Usage);
    }

    #[test]
    fn codes_are_distinct_and_in_order() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6, 7, 8, 130]);
        for e in Exit::PRECEDENCE {
            assert!(Exit::ALL.contains(&e));
        }
    }
}
