//! A trace prompt's replay: one level, the whole trace, each request at its own instant (the
//! level's rate is the trace's mean, its in-flight cap one `--concurrency`).

use super::{Extension, Level, Schedule};
use crate::bench::report::ModelReport;
use crate::bench::stats::LevelKey;

/// The trace's one level.
#[derive(Debug, Clone)]
pub struct Replay {
    level: [LevelKey; 1],
    ran: bool,
}

impl Replay {
    /// The replay of a trace at `key` (its mean rate, its in-flight cap).
    pub fn new(key: LevelKey) -> Self {
        Replay {
            level: [key],
            ran: false,
        }
    }
}

impl Schedule for Replay {
    fn fresh(&self) -> Box<dyn Schedule> {
        Box::new(Replay::new(self.level[0]))
    }

    fn words(&self) -> String {
        crate::units::count(1, "level")
    }

    fn most_levels(&self) -> usize {
        1
    }

    fn planned(&self) -> Option<&[LevelKey]> {
        Some(&self.level)
    }

    fn open(&self) -> bool {
        true
    }

    fn extension(&self) -> Option<Extension> {
        None
    }

    fn next(&mut self, _: &mut ModelReport) -> Option<Level> {
        (!std::mem::replace(&mut self.ran, true)).then(|| Level::at(self.level[0]))
    }

    fn left_out(&self) -> &[LevelKey] {
        &[]
    }
}
