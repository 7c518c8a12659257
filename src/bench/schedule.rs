//! What a series runs next. A series (one model with one prompt) runs level after level; which
//! level comes next is its schedule's to say, from the levels the series has run so far. Every
//! way of choosing levels is one implementation of [`Schedule`], each in a file of its own:
//!
//! - [`fixed`]: the levels as given, in turn, left once clearly past saturation, then levels
//!   added where the knee lies (`--knee-levels`);
//! - [`search`]: `--find-capacity`, the levels [`super::capacity::Search`] asks for;
//! - [`replay`]: a trace prompt's one level, the whole trace.
//!
//! The sweep (`bench/sweep.rs`) asks, runs the level it is given (`bench/level.rs`) and asks
//! again, whatever the schedule: a new way of choosing levels is a new file here, not a branch
//! there.

pub mod fixed;
pub mod replay;
pub mod search;

pub use fixed::FixedSweep;
pub use replay::Replay;
pub use search::CapacitySearch;

use super::report::ModelReport;
use super::stats::LevelKey;

/// A level a schedule asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    /// Its load.
    pub key: LevelKey,
    /// Why it was added between the levels already run, when it was (a note the level keeps):
    /// such a level joins the series at its load rather than after its last level.
    pub added: Option<String>,
}

impl Level {
    /// A level at `key`, run after those before it.
    pub fn at(key: LevelKey) -> Level {
        Level { key, added: None }
    }
}

/// How a level runs on while its decision is unclear: up to `most` more times at its amount,
/// while its SLO attainment's 95% interval reaches across `target`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Extension {
    /// The most runs added to a level.
    pub most: u32,
    /// The attainment the level's decision is about (0..1).
    pub target: f64,
}

/// How a series chooses its levels: GuideLLM's `Profile.next_strategy` in this tool's terms.
/// One value serves one series ([`Schedule::fresh`] makes the next series' own).
pub trait Schedule: Send + Sync + std::fmt::Debug {
    /// This schedule from its start, for another series.
    fn fresh(&self) -> Box<dyn Schedule>;

    /// What each series runs, as the start line says it: `3 levels`, or a search's bounds and
    /// the most levels it may take.
    fn words(&self) -> String;

    /// The most levels one series runs (what the progress counts).
    fn most_levels(&self) -> usize;

    /// The levels known before anything is sent, in order; `None` when they are chosen as the
    /// series runs (a search).
    fn planned(&self) -> Option<&[LevelKey]>;

    /// Open loop: the levels are arrival rates.
    fn open(&self) -> bool;

    /// How a level runs on while its decision is unclear; `None` when it does not.
    fn extension(&self) -> Option<Extension>;

    /// The next level of the series whose report so far is `series` (its levels, each as it
    /// ended); `None` when the series is done. What a schedule concludes goes into `series`
    /// (`stopped_early` when it leaves planned levels out, `capacity` when a search ends).
    fn next(&mut self, series: &mut ModelReport) -> Option<Level>;

    /// The planned levels a series leaves out when its load stops at the level it ran last.
    fn left_out(&self) -> &[LevelKey];
}
