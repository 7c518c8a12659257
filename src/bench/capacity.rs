//! `bench --find-capacity` (pure): the search for a model's capacity within its SLOs, the highest
//! load whose SLO attainment is at least the target. Double the load from the start until a level
//! fails (or the upper bound passes), then bisect between the last level that passed and the
//! first that failed: to one stream in closed loop, to the tolerance in open loop. The caller runs
//! each level the search asks for and says how it went; the search never runs anything itself.
//!
//! The search assumes attainment falls as load grows. A level that passes above one that failed
//! is kept in the report, but the capacity stays below the lowest failure (said in `stopped`).

use super::stats::{CapacityLimit, LevelKey, LevelStats, Load};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `--find-capacity` without a level length: each level runs in parts of this long...
pub const AUTO_PART: Duration = Duration::from_secs(10);
/// ...and runs on, part after part, while its decision is unclear, up to this many parts in all
/// (two minutes a level).
pub const AUTO_PARTS: u32 = 12;
/// `--capacity-extend`'s default when a level length is given.
pub const DEFAULT_EXTENSIONS: u32 = 3;

/// True when `samples`' SLO attainment under `slos` cannot decide whether it reaches `target` at
/// 95% confidence: its Wilson interval holds the target (reaches across it). The one rule for a
/// capacity search's extensions and a fixed sweep's `--until-clear`.
pub fn unclear(
    samples: &[super::stats::Sample],
    slos: &[super::criteria::Slo],
    target: f64,
) -> bool {
    undecided(super::stats::Attainment::of(samples, slos).as_ref(), target)
}

/// True when attainment `a` cannot decide whether it reaches `target` at 95% confidence: its
/// Wilson interval holds the target. [`unclear`]'s rule, for an attainment over sessions too.
pub fn undecided(a: Option<&super::stats::Attainment>, target: f64) -> bool {
    a.and_then(|a| a.interval)
        .is_some_and(|[lo, hi]| lo < target && target <= hi)
}

/// Whether an answer is clear at 95% confidence: the attainment interval of the load it gives
/// (`passed`) lies at or above `target`, and that of the load that failed above it (`failed`)
/// below (an absent one leaves no doubt). When not, the levels were too short to tell the loads
/// apart. The one rule of [`Capacity::clear`] and of a fixed sweep's answer.
pub fn clear(passed: Option<[f64; 2]>, failed: Option<[f64; 2]>, target: f64) -> bool {
    passed.is_none_or(|[lo, _]| lo >= target) && failed.is_none_or(|[_, hi]| hi < target)
}

/// How level `l` went against `target` SLO attainment: it passes with measured requests, at least
/// `target` of them within every objective, and figures that are the server's (not
/// client-bound); it cannot be judged without them. The one rule of the capacity search and of
/// a fixed sweep's answer.
pub fn verdict(l: &LevelStats, target: f64) -> Verdict {
    if let Some(why) = &l.client_bound {
        return Verdict::Invalid(format!("client_bound: {why}"));
    }
    if let Some(why) = l.session_invalid() {
        return Verdict::Invalid(why.to_owned());
    }
    match l.judged_attainment() {
        None => Verdict::Invalid("no SLO".into()),
        Some(a) if a.counted == 0 => Verdict::Invalid("no request was measured".into()),
        Some(a) if a.share >= target => Verdict::Pass,
        Some(a) => Verdict::Fail(a.limited_by()),
    }
}

/// `--find-capacity` as the run applies it to each model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityPlan {
    /// The search.
    pub search: Search,
    /// Open loop: the in-flight cap of every level.
    pub cap: u32,
    /// Each model's search stops after this much time (between levels), keeping what it found.
    pub budget: Option<Duration>,
    /// How many more times a level is run while its decision is unclear (0: never).
    pub extensions: u32,
}

impl CapacityPlan {
    /// The level of a load the search asks for.
    pub fn key(&self, load: f64) -> LevelKey {
        if self.search.open {
            LevelKey {
                concurrency: self.cap,
                rate: Some(load),
            }
        } else {
            LevelKey {
                concurrency: load as u32,
                rate: None,
            }
        }
    }

    /// The load of a level.
    pub fn load(&self, key: &LevelKey) -> f64 {
        key.x()
    }

    /// True when `samples`' attainment under `slos` cannot decide the level at 95% confidence:
    /// its interval holds the target (it reaches across it).
    pub fn unclear(&self, samples: &[super::stats::Sample], slos: &[super::criteria::Slo]) -> bool {
        unclear(samples, slos, self.search.attainment)
    }

    /// How a level went for the search.
    pub fn verdict(&self, l: &LevelStats) -> Verdict {
        verdict(l, self.search.attainment)
    }

    /// The report's capacity from the search's `end` over `levels` (those it ran among them).
    pub fn capacity(
        &self,
        end: &SearchEnd,
        tried: &[(f64, Verdict)],
        levels: &[LevelStats],
    ) -> Capacity {
        let at = end
            .load
            .and_then(|x| levels.iter().find(|l| self.load(&l.key) == x));
        let ran: Vec<&LevelStats> = levels
            .iter()
            .filter(|l| tried.iter().any(|(x, _)| *x == self.load(&l.key)))
            .collect();
        let failed = end
            .failed_at
            .as_ref()
            .and_then(|(x, _)| levels.iter().find(|l| self.load(&l.key) == *x));
        let interval = |l: Option<&LevelStats>| {
            l.and_then(LevelStats::judged_attainment)
                .and_then(|a| a.interval)
        };
        Capacity {
            clear: clear(interval(at), interval(failed), self.search.attainment),
            concurrency: end.load.filter(|_| !self.search.open).map(|x| x as u32),
            rate: end.load.filter(|_| self.search.open),
            target_attainment: self.search.attainment,
            attainment: at.and_then(LevelStats::judged_attainment).map(|a| a.share),
            attainment_interval: at
                .and_then(LevelStats::judged_attainment)
                .and_then(|a| a.interval),
            limited_by: end.failed_at.as_ref().and_then(|f| f.1.clone()),
            failed_at: end.failed_at.as_ref().map(|f| f.0),
            levels_tried: tried.iter().map(|t| t.0).collect(),
            stopped: end.stopped.clone(),
            requests: ran.iter().map(|l| l.requests).sum(),
            seconds: ran.iter().map(|l| l.wall_s).sum(),
            sessions: false,
            gpu_cost_per_mtok: None,
        }
    }
}

/// What the search looks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Search {
    /// The attainment a level must reach to pass (0..1).
    pub attainment: f64,
    /// The first load tried (concurrency, or requests/s in open loop).
    pub start: f64,
    /// The highest load tried.
    pub max: f64,
    /// Open loop: bisect until `hi / lo - 1 <= tolerance`; closed loop: to one stream.
    pub tolerance: f64,
    /// Open loop (rates) rather than closed loop (integer concurrency).
    pub open: bool,
}

/// How a level the search asked for went.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Its attainment reached the target.
    Pass,
    /// It did not; what limited it (an objective, or errors), when something did.
    Fail(Option<CapacityLimit>),
    /// It cannot be judged: the client could not measure it, or nothing was measured (why).
    Invalid(String),
}

/// What the search asks for next ([`Search::next`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Run a level at this load.
    Run(f64),
    /// The search is over.
    Done(SearchEnd),
}

/// Where the search ended.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchEnd {
    /// The highest load that passed (`None`: none did).
    pub load: Option<f64>,
    /// The lowest load that failed, and what limited it there.
    pub failed_at: Option<(f64, Option<CapacityLimit>)>,
    /// Why the search stopped.
    pub stopped: SearchStop,
}

/// Why a capacity search stopped. Written as the sentence reports have always carried
/// (`bisected: passed at 5, failed at 6`) and read back from it; loads as written, to a
/// thousandth.
#[derive(Debug, Clone, PartialEq)]
pub enum SearchStop {
    /// The level at `load` could not be judged (`why`): the search concludes nothing from it.
    Unjudged {
        /// The load.
        load: f64,
        /// Why not (`client_bound: ...`, `no SLO`).
        why: String,
    },
    /// Every load up to the upper bound `max` passed.
    UpperBoundPassed {
        /// The upper bound.
        max: f64,
    },
    /// Even the lowest load to try, `load`, failed.
    EvenFailed {
        /// That load.
        load: f64,
        /// A higher load passed (the capacity is kept below the lowest failure).
        passed_above: bool,
    },
    /// The bisection closed in: it passed at `passed` and failed at `failed`, which are one
    /// stream apart, or in open loop `within` percent of each other.
    Bisected {
        /// The load that passed.
        passed: f64,
        /// The load that failed.
        failed: f64,
        /// Open loop: the tolerance, %.
        within: Option<f64>,
        /// A higher load passed (the capacity is kept below the lowest failure).
        passed_above: bool,
    },
    /// Its time budget was spent first.
    OutOfTime(Duration),
    /// Words this version does not read (a report of another version), kept as written.
    Other(String),
}

const PASSED_ABOVE: &str =
    "; a higher load passed again, so the capacity is kept below the lowest failure";

/// A load as the report writes it, to a thousandth.
fn to_thousandth(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl std::fmt::Display for SearchStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |x: f64| crate::units::trim_float(x);
        let above = |passed_above: bool| if passed_above { PASSED_ABOVE } else { "" };
        match self {
            SearchStop::Unjudged { load, why } => write!(
                f,
                "the level at {} cannot be judged ({why}): the search does not conclude from it",
                show(*load)
            ),
            SearchStop::UpperBoundPassed { max } => {
                write!(f, "the upper bound {} passed", show(*max))
            }
            SearchStop::EvenFailed { load, passed_above } => {
                write!(f, "even {} failed{}", show(*load), above(*passed_above))
            }
            SearchStop::Bisected {
                passed,
                failed,
                within,
                passed_above,
            } => {
                let (p, x) = (show(*passed), show(*failed));
                match within {
                    Some(w) => write!(
                        f,
                        "bisected: within {}% (passed at {p}, failed at {x})",
                        show(*w)
                    ),
                    None => write!(f, "bisected: passed at {p}, failed at {x}"),
                }?;
                f.write_str(above(*passed_above))
            }
            SearchStop::OutOfTime(d) => write!(
                f,
                "its time budget ({}) was spent",
                humantime::format_duration(*d)
            ),
            SearchStop::Other(words) => f.write_str(words),
        }
    }
}

impl SearchStop {
    /// The stop `words` say (as [`Display`](std::fmt::Display) writes it), else
    /// [`SearchStop::Other`].
    pub fn read(words: &str) -> SearchStop {
        let num = |s: &str| s.parse::<f64>().ok().filter(|x| x.is_finite());
        let (rest, passed_above) = match words.strip_suffix(PASSED_ABOVE) {
            Some(rest) => (rest, true),
            None => (words, false),
        };
        let read = || -> Option<SearchStop> {
            if let Some(r) = words
                .strip_prefix("the level at ")
                .and_then(|r| r.strip_suffix("): the search does not conclude from it"))
            {
                let (load, why) = r.split_once(" cannot be judged (")?;
                return Some(SearchStop::Unjudged {
                    load: num(load)?,
                    why: why.to_owned(),
                });
            }
            if let Some(m) = words
                .strip_prefix("the upper bound ")
                .and_then(|r| r.strip_suffix(" passed"))
            {
                return Some(SearchStop::UpperBoundPassed { max: num(m)? });
            }
            if let Some(d) = words
                .strip_prefix("its time budget (")
                .and_then(|r| r.strip_suffix(") was spent"))
            {
                return humantime::parse_duration(d).ok().map(SearchStop::OutOfTime);
            }
            if let Some(l) = rest
                .strip_prefix("even ")
                .and_then(|r| r.strip_suffix(" failed"))
            {
                return Some(SearchStop::EvenFailed {
                    load: num(l)?,
                    passed_above,
                });
            }
            let b = rest.strip_prefix("bisected: ")?;
            let (within, pair) = match b.strip_prefix("within ") {
                Some(w) => {
                    let (w, pair) = w.split_once("% (")?;
                    (Some(num(w)?), pair.strip_suffix(')')?)
                }
                None => (None, b),
            };
            let (p, x) = pair
                .strip_prefix("passed at ")?
                .split_once(", failed at ")?;
            Some(SearchStop::Bisected {
                passed: num(p)?,
                failed: num(x)?,
                within,
                passed_above,
            })
        };
        read()
            .filter(|s| s.to_string() == words)
            .unwrap_or_else(|| SearchStop::Other(words.to_owned()))
    }
}

impl Serialize for SearchStop {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SearchStop {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(SearchStop::read(&std::borrow::Cow::<str>::deserialize(d)?))
    }
}

/// A model's capacity as the report keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// Closed loop: the highest concurrency within the SLOs at the target attainment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Open loop: the highest arrival rate (requests/s) within them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// The target attainment (0..1).
    pub target_attainment: f64,
    /// The attainment measured at the capacity, and its 95% Wilson interval.
    pub attainment: Option<f64>,
    /// Its interval.
    pub attainment_interval: Option<[f64; 2]>,
    /// What failed first above the capacity: an objective (`ttft<=2.00 s`), or `errors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<CapacityLimit>,
    /// The load that failed first above the capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<f64>,
    /// Whether the answer is clear at 95% confidence: the attainment interval at the capacity
    /// lies at or above the target and the one where it failed lies below it. When not, the
    /// levels were too short to tell those loads apart (longer levels decide).
    pub clear: bool,
    /// Every load tried, in the order run.
    pub levels_tried: Vec<f64>,
    /// Why the search stopped.
    pub stopped: SearchStop,
    /// Requests the search sent (warm-up excluded) and its wall time, s.
    pub requests: u64,
    /// Seconds the search's levels took.
    pub seconds: f64,
    /// A session workload's: the loads are sessions (concurrent sessions in closed loop,
    /// sessions started per second in open loop), judged by their sessions' attainment.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sessions: bool,
    /// The self-hosted cost per million output tokens at the capacity (its level's, with the
    /// model's GPU count and `gpu_hour_price:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_cost_per_mtok: Option<f64>,
}

impl Capacity {
    /// The capacity: a concurrency, or in open loop a rate (`None`: no load passed).
    pub fn load(&self) -> Option<Load> {
        match (self.concurrency, self.rate) {
            (Some(n), _) => Some(Load::Concurrency(n)),
            (None, Some(r)) => Some(Load::Rate(r)),
            (None, None) => None,
        }
    }
}

impl Search {
    fn round(&self, x: f64) -> f64 {
        if self.open { x } else { x.round().max(1.0) }
    }

    fn close_enough(&self, lo: f64, hi: f64) -> bool {
        if self.open {
            hi / lo - 1.0 <= self.tolerance
        } else {
            hi - lo <= 1.0
        }
    }

    /// The next step after `tried` (each load run so far, with its verdict, in order).
    pub fn next(&self, tried: &[(f64, Verdict)]) -> Next {
        if let Some((load, why)) = tried.iter().find_map(|(l, v)| match v {
            Verdict::Invalid(why) => Some((*l, why.clone())),
            _ => None,
        }) {
            return Next::Done(SearchEnd {
                load: self.passed_below(tried, load),
                failed_at: None,
                stopped: SearchStop::Unjudged {
                    load: to_thousandth(load),
                    why,
                },
            });
        }
        let fail = tried
            .iter()
            .filter_map(|(l, v)| match v {
                Verdict::Fail(why) => Some((*l, why.clone())),
                _ => None,
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let hi = fail.as_ref().map(|f| f.0);
        let lo = self.passed_below(tried, hi.unwrap_or(f64::INFINITY));
        let non_monotone =
            hi.is_some_and(|h| tried.iter().any(|(l, v)| *v == Verdict::Pass && *l > h));
        let done = |load: Option<f64>, stopped: SearchStop| {
            Next::Done(SearchEnd {
                load,
                failed_at: fail.clone(),
                stopped,
            })
        };
        let even_failed = |load: f64| SearchStop::EvenFailed {
            load: to_thousandth(load),
            passed_above: non_monotone,
        };
        match (lo, hi) {
            (None, None) => Next::Run(self.round(self.start)),
            (Some(lo), None) => {
                if lo >= self.max {
                    done(
                        Some(lo),
                        SearchStop::UpperBoundPassed {
                            max: to_thousandth(self.max),
                        },
                    )
                } else {
                    Next::Run(self.round((lo * 2.0).min(self.max)))
                }
            }
            (None, Some(hi)) => {
                let floor = if self.open { self.start / 64.0 } else { 1.0 };
                if hi <= floor || (!self.open && hi <= 1.0) {
                    done(None, even_failed(hi))
                } else {
                    let next = self.round(hi / 2.0);
                    if tried.iter().any(|(l, _)| *l == next) {
                        done(None, even_failed(next))
                    } else {
                        Next::Run(next)
                    }
                }
            }
            (Some(lo), Some(hi)) => {
                if self.close_enough(lo, hi) {
                    let stopped = SearchStop::Bisected {
                        passed: to_thousandth(lo),
                        failed: to_thousandth(hi),
                        within: self.open.then(|| to_thousandth(self.tolerance * 100.0)),
                        passed_above: non_monotone,
                    };
                    done(Some(lo), stopped)
                } else {
                    let mid = if self.open {
                        (lo * hi).sqrt()
                    } else {
                        ((lo + hi) / 2.0).floor()
                    };
                    Next::Run(self.round(mid))
                }
            }
        }
    }

    /// The most levels the search may run, whatever their verdicts: it doubles the load from
    /// the start while levels pass (or halves it while they fail), then bisects between the last
    /// pass and the first failure, each level halving the gap; a level that cannot be judged
    /// ends it sooner.
    pub fn most_levels(&self) -> usize {
        // A bound on every loop below, should a load not grow or a gap not close.
        const MOST: usize = 64;
        let mut up = vec![self.round(self.start)];
        while let Some(&lo) = up.last()
            && lo < self.max
            && up.len() < MOST
        {
            let next = self.round((lo * 2.0).min(self.max));
            if next <= lo {
                break;
            }
            up.push(next);
        }
        // All pass; or the first failure at up[i], then the bisection below it.
        let mut most = up.len();
        for i in 1..up.len() {
            most = most.max(i + 1 + self.bisections(up[i - 1], up[i]));
        }
        // The start fails: halving while levels fail; a pass, then the bisection above it.
        let floor = if self.open { self.start / 64.0 } else { 1.0 };
        let mut down = vec![up[0]];
        while let Some(&hi) = down.last()
            && hi > floor
            && (self.open || hi > 1.0)
            && down.len() < MOST
        {
            let next = self.round(hi / 2.0);
            if down.contains(&next) {
                break;
            }
            down.push(next);
            most = most.max(down.len() + self.bisections(next, hi));
        }
        most.max(down.len())
    }

    /// The most levels a bisection between a pass at `lo` and a failure at `hi` runs: each
    /// leaves at most the upper part of the gap (closed loop: its larger half).
    fn bisections(&self, mut lo: f64, hi: f64) -> usize {
        let mut n = 0;
        while !self.close_enough(lo, hi) && n < 64 {
            lo = self.round(if self.open {
                (lo * hi).sqrt()
            } else {
                ((lo + hi) / 2.0).floor()
            });
            n += 1;
        }
        n
    }

    /// Where the search ends when it is stopped from outside (`why`: its time budget): the best
    /// found so far.
    pub fn stopped(&self, tried: &[(f64, Verdict)], why: SearchStop) -> SearchEnd {
        let failed_at = tried
            .iter()
            .filter_map(|(l, v)| match v {
                Verdict::Fail(w) => Some((*l, w.clone())),
                _ => None,
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let limit = failed_at.as_ref().map_or(f64::INFINITY, |f| f.0);
        SearchEnd {
            load: self.passed_below(tried, limit),
            failed_at,
            stopped: why,
        }
    }

    /// The highest load that passed below `limit`.
    fn passed_below(&self, tried: &[(f64, Verdict)], limit: f64) -> Option<f64> {
        tried
            .iter()
            .filter(|(l, v)| *v == Verdict::Pass && *l < limit)
            .map(|(l, _)| *l)
            .max_by(f64::total_cmp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(max: f64) -> Search {
        Search {
            attainment: 0.95,
            start: 1.0,
            max,
            tolerance: 0.0,
            open: false,
        }
    }

    fn ttft() -> CapacityLimit {
        CapacityLimit::Objective("ttft<=1.00 s".into())
    }

    /// Runs the search against a server whose levels pass up to `capacity`.
    fn run(s: &Search, passes: impl Fn(f64) -> bool) -> (SearchEnd, Vec<f64>) {
        let mut tried = Vec::new();
        loop {
            match s.next(&tried) {
                Next::Run(l) => {
                    assert!(tried.iter().all(|(t, _)| *t != l), "{l} twice: {tried:?}");
                    let v = if passes(l) {
                        Verdict::Pass
                    } else {
                        Verdict::Fail(Some(ttft()))
                    };
                    tried.push((l, v));
                }
                Next::Done(o) => return (o, tried.into_iter().map(|t| t.0).collect()),
            }
        }
    }

    #[test]
    fn closed_loop_finds_the_exact_concurrency() {
        for cap in 1..=100 {
            let (o, tried) = run(&closed(256.0), |c| c <= f64::from(cap));
            assert_eq!(o.load, Some(f64::from(cap)), "{tried:?}");
            assert_eq!(o.failed_at.as_ref().map(|f| f.0), Some(f64::from(cap + 1)));
            // Doubling then bisecting: about 2 log2(cap) levels.
            let bound = 2.0 * f64::from(cap).log2().ceil() + 2.0;
            assert!(tried.len() as f64 <= bound, "cap {cap}: {tried:?}");
        }
        // 5 slots: 1, 2, 4, 8 (fails), 6 (fails), 5.
        let (o, tried) = run(&closed(256.0), |c| c <= 5.0);
        assert_eq!(tried, [1.0, 2.0, 4.0, 8.0, 6.0, 5.0]);
        assert_eq!(
            o.stopped,
            SearchStop::Bisected {
                passed: 5.0,
                failed: 6.0,
                within: None,
                passed_above: false
            }
        );
        assert_eq!(o.stopped.to_string(), "bisected: passed at 5, failed at 6");
    }

    #[test]
    fn the_bounds_and_a_first_failure_end_the_search() {
        let (o, tried) = run(&closed(16.0), |_| true);
        assert_eq!(
            (o.load, tried),
            (Some(16.0), vec![1.0, 2.0, 4.0, 8.0, 16.0])
        );
        assert_eq!(o.stopped, SearchStop::UpperBoundPassed { max: 16.0 });
        let (o, tried) = run(&closed(16.0), |_| false);
        assert_eq!((o.load, tried), (None, vec![1.0]));
        assert_eq!(
            o.stopped,
            SearchStop::EvenFailed {
                load: 1.0,
                passed_above: false
            }
        );
        // Starting high, a failure bisects downwards.
        let s = Search {
            start: 32.0,
            ..closed(64.0)
        };
        let (o, _) = run(&s, |c| c <= 3.0);
        assert_eq!(o.load, Some(3.0));
    }

    #[test]
    fn open_loop_bisects_to_the_tolerance() {
        let s = Search {
            attainment: 0.95,
            start: 1.0,
            max: 1000.0,
            tolerance: 0.05,
            open: true,
        };
        let (o, tried) = run(&s, |r| r <= 37.3);
        let (lo, hi) = (o.load.unwrap(), o.failed_at.unwrap().0);
        assert!(
            lo <= 37.3 && hi > 37.3 && hi / lo - 1.0 <= 0.05,
            "{lo} {hi} {tried:?}"
        );
        // The stop is written to a thousandth, within 5%.
        assert!(
            matches!(o.stopped, SearchStop::Bisected { within: Some(w), passed, .. }
                if w == 5.0 && passed == (lo * 1000.0).round() / 1000.0),
            "{:?}",
            o.stopped
        );
    }

    #[test]
    fn a_level_that_cannot_be_judged_ends_the_search_without_a_conclusion_from_it() {
        let s = closed(64.0);
        let tried = vec![
            (1.0, Verdict::Pass),
            (2.0, Verdict::Pass),
            (4.0, Verdict::Invalid("client_bound".into())),
        ];
        match s.next(&tried) {
            Next::Done(o) => {
                assert_eq!(o.load, Some(2.0));
                assert_eq!(
                    o.stopped,
                    SearchStop::Unjudged {
                        load: 4.0,
                        why: "client_bound".into()
                    }
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_answer_is_clear_only_when_both_intervals_leave_the_target() {
        use crate::bench::stats::Attainment;
        let plan = CapacityPlan {
            search: closed(64.0),
            cap: 1000,
            budget: None,
            extensions: 0,
        };
        let level = |c: u32, met: u64, counted: u64| {
            let mut l = crate::bench::select::tests::level(c, 100.0, 0.1, 0.0);
            l.slo_attainment = Some(Attainment {
                met,
                counted,
                share: met as f64 / counted as f64,
                interval: crate::bench::confidence::wilson(met, counted),
                missed: Default::default(),
                failed: 0,
            });
            l
        };
        let tried = [(5.0, Verdict::Pass), (6.0, Verdict::Fail(Some(ttft())))];
        let end = SearchEnd {
            load: Some(5.0),
            failed_at: Some((6.0, Some(ttft()))),
            stopped: SearchStop::Bisected {
                passed: 5.0,
                failed: 6.0,
                within: None,
                passed_above: false,
            },
        };
        // 400 of 400 and 300 of 400: [99.0%, 100%] and [70.5%, 79.1%], both off 95%.
        let c = plan.capacity(&end, &tried, &[level(5, 400, 400), level(6, 300, 400)]);
        assert!(
            c.clear && c.attainment == Some(1.0) && c.requests == 200,
            "{c:?}"
        );
        // 20 of 20 passes, but its interval [83.9%, 100%] reaches below 95%.
        let c = plan.capacity(&end, &tried, &[level(5, 20, 20), level(6, 15, 20)]);
        assert!(!c.clear, "{c:?}");
        assert_eq!(
            (c.load(), c.limited_by, c.failed_at),
            (Some(Load::Concurrency(5)), Some(ttft()), Some(6.0))
        );
        // None passed: 75 of 80 failed at 5, but [86.2%, 97.3%] reaches across 95%: a capacity
        // of none is as unclear as a load.
        let none = SearchEnd {
            load: None,
            failed_at: Some((5.0, Some(CapacityLimit::Errors))),
            stopped: SearchStop::EvenFailed {
                load: 5.0,
                passed_above: false,
            },
        };
        let tried = [(5.0, Verdict::Fail(Some(CapacityLimit::Errors)))];
        let c = plan.capacity(&none, &tried, &[level(5, 75, 80)]);
        assert!(!c.clear && c.load().is_none(), "{c:?}");
        let c = plan.capacity(&none, &tried, &[level(5, 60, 80)]);
        assert!(c.clear, "{c:?}");
    }

    /// Why the search stopped is written as the sentence reports have carried, and read back
    /// from it; words of another version are kept as written.
    #[test]
    fn a_stop_is_written_and_read_as_its_sentence() {
        for (stop, words) in [
            (
                SearchStop::Unjudged {
                    load: 4.0,
                    why: "client_bound: the bench's threads waited (x)".into(),
                },
                "the level at 4 cannot be judged (client_bound: the bench's threads waited (x)): the search does not conclude from it",
            ),
            (
                SearchStop::UpperBoundPassed { max: 256.0 },
                "the upper bound 256 passed",
            ),
            (
                SearchStop::EvenFailed {
                    load: 0.016,
                    passed_above: true,
                },
                "even 0.016 failed; a higher load passed again, so the capacity is kept below the lowest failure",
            ),
            (
                SearchStop::Bisected {
                    passed: 37.216,
                    failed: 38.5,
                    within: Some(5.0),
                    passed_above: false,
                },
                "bisected: within 5% (passed at 37.216, failed at 38.5)",
            ),
            (
                SearchStop::OutOfTime(Duration::from_secs(90)),
                "its time budget (1m 30s) was spent",
            ),
            (
                SearchStop::Other("the run was stopped".into()),
                "the run was stopped",
            ),
        ] {
            assert_eq!(stop.to_string(), words);
            assert_eq!(SearchStop::read(words), stop);
            let json = serde_json::to_string(&stop).unwrap();
            assert_eq!(serde_json::from_str::<SearchStop>(&json).unwrap(), stop);
        }
        // What only looks like a stop this version writes is kept as written.
        assert_eq!(
            SearchStop::read("even 01 failed"),
            SearchStop::Other("even 01 failed".into())
        );
    }

    /// The most levels any verdicts make the search run, by trying every sequence of them.
    fn longest(s: &Search, tried: &mut Vec<(f64, Verdict)>) -> usize {
        match s.next(tried) {
            Next::Done(_) => tried.len(),
            Next::Run(l) => [Verdict::Pass, Verdict::Fail(Some(ttft()))]
                .into_iter()
                .map(|v| {
                    tried.push((l, v));
                    let n = longest(s, tried);
                    tried.pop();
                    n
                })
                .max()
                .unwrap_or(0),
        }
    }

    /// The bound the start line and the progress give is the search's own longest path, closed
    /// and open loop, from bounds that start and end on a power of two or between them.
    #[test]
    fn the_most_levels_are_the_longest_search() {
        for start in [1.0, 2.0, 3.0, 5.0] {
            for max in 2..=40 {
                let s = Search {
                    start,
                    ..closed(f64::from(max))
                };
                if s.start >= s.max {
                    continue;
                }
                assert_eq!(s.most_levels(), longest(&s, &mut Vec::new()), "{s:?}");
            }
        }
        for (start, max, tolerance) in [
            (1.0, 8.0, 0.05),
            (0.5, 100.0, 0.1),
            (3.0, 10.0, 0.2),
            (1.0, 1000.0, 0.05),
        ] {
            let s = Search {
                attainment: 0.95,
                start,
                max,
                tolerance,
                open: true,
            };
            assert_eq!(s.most_levels(), longest(&s, &mut Vec::new()), "{s:?}");
        }
        // 1 to 256 streams: 9 doublings, then 7 bisections below 256.
        assert_eq!(closed(256.0).most_levels(), 16);
    }

    #[test]
    fn a_pass_above_a_failure_is_said() {
        let s = closed(64.0);
        let tried = vec![
            (1.0, Verdict::Pass),
            (2.0, Verdict::Fail(Some(CapacityLimit::Errors))),
            (4.0, Verdict::Pass),
        ];
        match s.next(&tried) {
            Next::Done(o) => {
                assert_eq!(o.load, Some(1.0));
                assert!(
                    matches!(
                        o.stopped,
                        SearchStop::Bisected {
                            passed_above: true,
                            ..
                        }
                    ),
                    "{:?}",
                    o.stopped
                );
                assert!(
                    o.stopped.to_string().contains("passed again"),
                    "{}",
                    o.stopped
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
