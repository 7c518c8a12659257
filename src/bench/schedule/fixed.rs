//! A fixed sweep: the levels as given, in turn, unless the series is clearly past saturation
//! (the rest are left out and the report says why); then, with `--knee-levels N`, up to N levels
//! added between the capacity ceiling and the knee, each where the fit of throughput against
//! load puts the bend or to confirm it.

use super::{Extension, Level, Schedule};
use crate::bench::criteria::KneeRule;
use crate::bench::report::ModelReport;
use crate::bench::select;
use crate::bench::stats::LevelKey;

/// The levels as given, and the knee's added ones.
#[derive(Debug, Clone)]
pub struct FixedSweep {
    levels: Vec<LevelKey>,
    /// At most this many levels added per series (0: the levels as given, and none left out).
    knee_levels: u32,
    /// `--until-clear N`: a level runs on up to N more times while its SLO attainment is unclear.
    until_clear: u32,
    knee: KneeRule,
    /// The planned levels run so far.
    ran: usize,
    /// The planned levels are done (run, or left out): levels are added now.
    refining: bool,
    /// Levels added so far.
    added: u32,
}

impl FixedSweep {
    /// `levels` in turn, then up to `knee_levels` added where the `knee` rule puts the bend
    /// (0 in runs of several shards, or with `--start-at`, where every shard runs the same
    /// levels); each level run on up to `until_clear` more times while its SLO attainment is
    /// unclear (0: never; it needs SLOs, which the plan checks).
    pub fn new(levels: Vec<LevelKey>, knee_levels: u32, until_clear: u32, knee: KneeRule) -> Self {
        FixedSweep {
            levels,
            knee_levels,
            until_clear,
            knee,
            ran: 0,
            refining: false,
            added: 0,
        }
    }

    /// Why the series is clearly past saturation at its last level run (a knee below it, then
    /// [`select::far_past`]); `None` while it is not, or when the levels do not rise.
    fn far_past(&self, series: &ModelReport) -> Option<String> {
        let last = series.levels.last()?;
        if series.levels.iter().any(|l| l.key.x() > last.key.x()) {
            return None;
        }
        let knee = select::find_knee(&series.levels, &self.knee)?;
        let ceiling = series.levels.get(knee.index.checked_sub(1)?)?;
        (knee.level.x() <= last.key.x())
            .then(|| select::far_past(ceiling, last))
            .flatten()
    }

    /// The next planned level, unless the series is clearly past saturation (then the rest are
    /// left out, and `series.stopped_early` says why); `None` once they are done.
    fn next_planned(&mut self, series: &mut ModelReport) -> Option<Level> {
        let planned = *self.levels.get(self.ran)?;
        if let Some(why) = (self.knee_levels > 0)
            .then(|| self.far_past(series))
            .flatten()
        {
            let left: Vec<String> = self.levels[self.ran..]
                .iter()
                .map(LevelKey::label)
                .collect();
            series.stopped_early = Some(format!(
                "stopped before {}: clearly past saturation ({why})",
                left.join(", ")
            ));
            return None;
        }
        self.ran += 1;
        Some(Level::at(planned))
    }

    /// A level added between the capacity ceiling and the knee, where the fit puts the bend or
    /// to confirm it; `None` when none is (no knee, or it is placed to one stream or 5% of the
    /// rate), or enough were.
    fn next_added(&mut self, series: &mut ModelReport) -> Option<Level> {
        if self.added >= self.knee_levels {
            return None;
        }
        series.sort_levels_by_load();
        let knee = select::find_knee(&series.levels, &self.knee)?;
        let ceiling = knee.ceiling?;
        let closed = knee.level.rate.is_none();
        let load = select::next_knee_load(
            ceiling.x(),
            knee.level.x(),
            knee.estimate,
            closed,
            select::KNEE_RATE_TOLERANCE,
        )?;
        if series
            .levels
            .iter()
            .any(|l| (l.key.x() - load).abs() < 1e-9)
        {
            return None;
        }
        self.added += 1;
        let key = if closed {
            // A whole number of streams, from 2 up (below the knee's own).
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let c = load as u32;
            LevelKey {
                concurrency: c,
                rate: None,
            }
        } else {
            LevelKey {
                rate: Some(load),
                ..knee.level
            }
        };
        Some(Level {
            key,
            added: Some(format!(
                "added between {} and {} to place the knee",
                ceiling.label(),
                knee.level.label()
            )),
        })
    }
}

impl Schedule for FixedSweep {
    fn fresh(&self) -> Box<dyn Schedule> {
        Box::new(FixedSweep::new(
            self.levels.clone(),
            self.knee_levels,
            self.until_clear,
            self.knee,
        ))
    }

    fn words(&self) -> String {
        let planned = crate::units::count(self.levels.len(), "level");
        match self.knee_levels {
            0 => planned,
            n => format!("{planned}, up to {n} more to place the knee"),
        }
    }

    fn most_levels(&self) -> usize {
        self.levels.len() + self.knee_levels as usize
    }

    fn planned(&self) -> Option<&[LevelKey]> {
        Some(&self.levels)
    }

    fn open(&self) -> bool {
        self.levels.iter().any(|k| k.rate.is_some())
    }

    fn extension(&self) -> Option<Extension> {
        (self.until_clear > 0).then_some(Extension {
            most: self.until_clear,
            target: select::ANSWER_ATTAINMENT,
        })
    }

    fn next(&mut self, series: &mut ModelReport) -> Option<Level> {
        if !self.refining {
            if let Some(level) = self.next_planned(series) {
                return Some(level);
            }
            self.refining = true;
        }
        self.next_added(series)
    }

    fn left_out(&self) -> &[LevelKey] {
        if self.refining {
            &[]
        } else {
            &self.levels[self.ran..]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::select::tests::level;

    fn closed(c: &[u32]) -> Vec<LevelKey> {
        c.iter()
            .map(|&c| LevelKey {
                concurrency: c,
                rate: None,
            })
            .collect()
    }

    fn series() -> ModelReport {
        crate::bench::report::tests::synthetic().models[0].clone()
    }

    /// The levels as given, in turn, and none after them without `--knee-levels`; a stop at
    /// the first leaves the later ones out.
    #[test]
    fn a_fixed_sweep_runs_its_levels_in_turn() {
        let mut s = FixedSweep::new(closed(&[1, 4, 2]), 0, 0, KneeRule::default());
        let mut m = series();
        m.levels.clear();
        let first = s.next(&mut m).expect("1");
        assert_eq!((first.key.concurrency, &first.added), (1, &None));
        assert_eq!(
            s.left_out().iter().map(LevelKey::label).collect::<Vec<_>>(),
            ["4", "2"]
        );
        m.levels.push(level(1, 10.0, 0.1, 0.0));
        assert_eq!(s.next(&mut m).map(|l| l.key.concurrency), Some(4));
        m.levels.push(level(4, 40.0, 0.1, 0.0));
        assert_eq!(s.next(&mut m).map(|l| l.key.concurrency), Some(2));
        m.levels.push(level(2, 20.0, 0.1, 0.0));
        assert_eq!(s.next(&mut m), None);
        assert!(s.left_out().is_empty());
        assert_eq!(
            m.levels
                .iter()
                .map(|l| l.key.concurrency)
                .collect::<Vec<_>>(),
            [1, 4, 2],
            "the levels as run: only added levels sort them"
        );
        assert_eq!((s.words(), s.most_levels()), ("3 levels".to_owned(), 3));
        let fresh = s.fresh();
        assert_eq!(fresh.left_out().len(), 3, "a new series starts over");
        let knee = FixedSweep::new(closed(&[1, 4]), 2, 0, KneeRule::default());
        assert_eq!(
            (knee.words(), knee.most_levels()),
            ("2 levels, up to 2 more to place the knee".to_owned(), 4)
        );
    }
}
