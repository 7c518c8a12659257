//! `--find-capacity`: each series' levels are those the pure [`Search`] asks for, from the
//! verdicts of the levels it ran, until it ends or its time budget is spent; its end is the
//! series' capacity.
//!
//! [`Search`]: crate::bench::capacity::Search

use super::{Extension, Level, Schedule};
use crate::bench::capacity::{CapacityPlan, Next, SearchStop, Verdict};
use crate::bench::report::ModelReport;
use crate::bench::stats::LevelKey;
use std::time::Instant;

/// The capacity search of one series.
#[derive(Debug, Clone)]
pub struct CapacitySearch {
    plan: CapacityPlan,
    /// When the series asked for its first level (its time budget counts from there).
    began: Option<Instant>,
}

impl CapacitySearch {
    /// The search `plan` describes.
    pub fn new(plan: CapacityPlan) -> Self {
        CapacitySearch { plan, began: None }
    }

    /// The search's plan.
    pub fn plan(&self) -> &CapacityPlan {
        &self.plan
    }

    /// Each level of `series` the search can conclude from (a partial one it cannot), with its
    /// verdict, in the order run.
    fn tried(&self, series: &ModelReport) -> Vec<(f64, Verdict)> {
        series
            .levels
            .iter()
            .filter(|l| !l.partial)
            .map(|l| (self.plan.load(&l.key), self.plan.verdict(l)))
            .collect()
    }
}

impl Schedule for CapacitySearch {
    fn fresh(&self) -> Box<dyn Schedule> {
        Box::new(CapacitySearch::new(self.plan))
    }

    fn words(&self) -> String {
        let s = &self.plan.search;
        let show = |x: f64| crate::units::trim_float((x * 1000.0).round() / 1000.0);
        let unit = if s.open {
            "requests/s"
        } else {
            "concurrent streams"
        };
        format!(
            "a capacity search from {} to {} {unit}, up to {}",
            show(s.start),
            show(s.max),
            crate::units::count(s.most_levels(), "level")
        )
    }

    fn most_levels(&self) -> usize {
        self.plan.search.most_levels()
    }

    fn planned(&self) -> Option<&[LevelKey]> {
        None
    }

    fn open(&self) -> bool {
        self.plan.search.open
    }

    fn extension(&self) -> Option<Extension> {
        Some(Extension {
            most: self.plan.extensions,
            target: self.plan.search.attainment,
        })
    }

    fn next(&mut self, series: &mut ModelReport) -> Option<Level> {
        let began = *self.began.get_or_insert_with(Instant::now);
        let tried = self.tried(series);
        let next = match self.plan.budget.filter(|b| began.elapsed() >= *b) {
            Some(b) => Next::Done(self.plan.search.stopped(&tried, SearchStop::OutOfTime(b))),
            None => self.plan.search.next(&tried),
        };
        match next {
            Next::Run(load) => Some(Level::at(self.plan.key(load))),
            Next::Done(end) => {
                series.sort_levels_by_load();
                series.capacity = Some(self.plan.capacity(&end, &tried, &series.levels));
                None
            }
        }
    }

    fn left_out(&self) -> &[LevelKey] {
        &[]
    }
}
