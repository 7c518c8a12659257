//! `bench --find-capacity` (pure): the search for a model's capacity within its SLOs, the highest
//! load whose SLO attainment is at least the target. Double the load from the start until a level
//! fails (or the upper bound passes), then bisect between the last level that passed and the
//! first that failed: to one stream in closed loop, to the tolerance in open loop. The caller runs
//! each level the search asks for and says how it went; the search never runs anything itself.
//!
//! The search assumes attainment falls as load grows. A level that passes above one that failed
//! is kept in the report, but the capacity stays below the lowest failure (said in `stopped`).

use super::stats::{LevelKey, LevelStats};
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
    super::stats::Attainment::of(samples, slos)
        .and_then(|a| a.interval)
        .is_some_and(|[lo, hi]| lo < target && target <= hi)
}

/// Whether an answer is clear at 95% confidence: the attainment interval of the load it gives
/// (`passed`) lies at or above `target`, and that of the load that failed above it (`failed`)
/// below (an absent one leaves no doubt). When not, the levels were too short to tell the loads
/// apart. The one rule of [`Capacity::clear`] and of a fixed sweep's answer.
pub fn clear(passed: Option<[f64; 2]>, failed: Option<[f64; 2]>, target: f64) -> bool {
    passed.is_none_or(|[lo, _]| lo >= target) && failed.is_none_or(|[_, hi]| hi < target)
}

/// What an answer that is not [`clear`] says of its doubt, after its sentence (nothing when it
/// is clear): the one wording of every output, a capacity of none as much as a load.
pub fn doubt(clear: bool) -> &'static str {
    if clear {
        ""
    } else {
        " (not clear at 95% confidence: an interval reaches across the target; longer levels would decide)"
    }
}

/// How level `l` went against `target` SLO attainment: it passes with measured requests, at least
/// `target` of them within every objective, and figures that are the server's (not
/// client-bound); it cannot be judged without them. The one rule of the capacity search and of
/// a fixed sweep's answer.
pub fn verdict(l: &LevelStats, target: f64) -> Verdict {
    if let Some(why) = &l.client_bound {
        return Verdict::Invalid(format!("client_bound: {why}"));
    }
    match &l.slo_attainment {
        None => Verdict::Invalid("no SLO".into()),
        Some(a) if a.counted == 0 => Verdict::Invalid("no request was measured".into()),
        Some(a) if a.share >= target => Verdict::Pass,
        Some(a) => Verdict::Fail(a.limited_by().unwrap_or_else(|| "attainment".into())),
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
            l.and_then(|l| l.slo_attainment.as_ref())
                .and_then(|a| a.interval)
        };
        Capacity {
            clear: clear(interval(at), interval(failed), self.search.attainment),
            concurrency: end.load.filter(|_| !self.search.open).map(|x| x as u32),
            rate: end.load.filter(|_| self.search.open),
            target_attainment: self.search.attainment,
            attainment: at.and_then(|l| l.slo_attainment.as_ref()).map(|a| a.share),
            attainment_interval: at
                .and_then(|l| l.slo_attainment.as_ref())
                .and_then(|a| a.interval),
            limited_by: end.failed_at.as_ref().map(|f| f.1.clone()),
            failed_at: end.failed_at.as_ref().map(|f| f.0),
            levels_tried: tried.iter().map(|t| t.0).collect(),
            stopped: end.stopped.clone(),
            requests: ran.iter().map(|l| l.requests).sum(),
            seconds: ran.iter().map(|l| l.wall_s).sum(),
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
    /// It did not; what limited it (an objective, or `errors`).
    Fail(String),
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
    pub failed_at: Option<(f64, String)>,
    /// Why the search stopped, in words.
    pub stopped: String,
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
    pub limited_by: Option<String>,
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
    pub stopped: String,
    /// Requests the search sent (warm-up excluded) and its wall time, s.
    pub requests: u64,
    /// Seconds the search's levels took.
    pub seconds: f64,
    /// The self-hosted cost per million output tokens at the capacity (its level's, with the
    /// model's GPU count and `gpu_hour_price:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_cost_per_mtok: Option<f64>,
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
                stopped: format!(
                    "the level at {} cannot be judged ({why}): the search does not conclude from it",
                    show(load)
                ),
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
        let done = |load: Option<f64>, stopped: String| {
            let suffix = if non_monotone {
                "; a higher load passed again, so the capacity is kept below the lowest failure"
            } else {
                ""
            };
            Next::Done(SearchEnd {
                load,
                failed_at: fail.clone(),
                stopped: format!("{stopped}{suffix}"),
            })
        };
        match (lo, hi) {
            (None, None) => Next::Run(self.round(self.start)),
            (Some(lo), None) => {
                if lo >= self.max {
                    done(
                        Some(lo),
                        format!("the upper bound {} passed", show(self.max)),
                    )
                } else {
                    Next::Run(self.round((lo * 2.0).min(self.max)))
                }
            }
            (None, Some(hi)) => {
                let floor = if self.open { self.start / 64.0 } else { 1.0 };
                if hi <= floor || (!self.open && hi <= 1.0) {
                    done(None, format!("even {} failed", show(hi)))
                } else {
                    let next = self.round(hi / 2.0);
                    if tried.iter().any(|(l, _)| *l == next) {
                        done(None, format!("even {} failed", show(next)))
                    } else {
                        Next::Run(next)
                    }
                }
            }
            (Some(lo), Some(hi)) => {
                if self.close_enough(lo, hi) {
                    let within = if self.open {
                        format!(
                            "within {}% (passed at {}, failed at {})",
                            show(self.tolerance * 100.0),
                            show(lo),
                            show(hi)
                        )
                    } else {
                        format!("passed at {}, failed at {}", show(lo), show(hi))
                    };
                    done(Some(lo), format!("bisected: {within}"))
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

    /// Where the search ends when it is stopped from outside (its time budget): the best found so
    /// far, `why` it stopped.
    pub fn stopped(&self, tried: &[(f64, Verdict)], why: &str) -> SearchEnd {
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
            stopped: why.to_owned(),
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

/// The capacity in words: `up to 8 concurrent streams at 96.0% attainment [89.1%, 98.9%]`, or
/// `none: no load tried met the target` when no load passed; either with its [`doubt`] when it
/// is not clear.
pub fn describe(c: &Capacity) -> String {
    let unclear = doubt(c.clear);
    let load = match (c.concurrency, c.rate) {
        (Some(n), _) => format!(
            "up to {n} concurrent stream{}",
            if n == 1 { "" } else { "s" }
        ),
        (None, Some(r)) => format!("up to {} requests/s", show(r)),
        (None, None) => return format!("none: no load tried met the target{unclear}"),
    };
    let att = match (c.attainment, c.attainment_interval) {
        (Some(a), Some([lo, hi])) => format!(
            " at {:.1}% attainment [{:.1}%, {:.1}%]",
            a * 100.0,
            lo * 100.0,
            hi * 100.0
        ),
        (Some(a), None) => format!(" at {:.1}% attainment", a * 100.0),
        _ => String::new(),
    };
    let limit = match (&c.limited_by, c.failed_at) {
        (Some(l), Some(f)) => format!(", limited by {l} (failed at {})", show(f)),
        _ => String::new(),
    };
    let cost = c.gpu_cost_per_mtok.map_or_else(String::new, |v| {
        format!(
            ", {} per million output tokens on its GPUs there",
            crate::units::fmt_cost(v)
        )
    });
    format!("{load}{att}{limit}{cost}{unclear}")
}

/// A load as the report writes it (`8`, `2.5`).
fn show(x: f64) -> String {
    crate::units::trim_float((x * 1000.0).round() / 1000.0)
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
                        Verdict::Fail("ttft<=1.00 s".into())
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
        assert!(
            o.stopped.contains("passed at 5, failed at 6"),
            "{}",
            o.stopped
        );
    }

    #[test]
    fn the_bounds_and_a_first_failure_end_the_search() {
        let (o, tried) = run(&closed(16.0), |_| true);
        assert_eq!(
            (o.load, tried),
            (Some(16.0), vec![1.0, 2.0, 4.0, 8.0, 16.0])
        );
        assert!(o.stopped.contains("upper bound 16 passed"));
        let (o, tried) = run(&closed(16.0), |_| false);
        assert_eq!((o.load, tried), (None, vec![1.0]));
        assert!(o.stopped.contains("even 1 failed"));
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
                assert!(
                    o.stopped.contains("cannot be judged (client_bound)"),
                    "{}",
                    o.stopped
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
        let tried = [(5.0, Verdict::Pass), (6.0, Verdict::Fail("ttft".into()))];
        let end = SearchEnd {
            load: Some(5.0),
            failed_at: Some((6.0, "ttft".into())),
            stopped: String::new(),
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
        assert!(
            describe(&c).contains("not clear at 95% confidence"),
            "{}",
            describe(&c)
        );
        // None passed: 75 of 80 failed at 5, but [86.2%, 97.3%] reaches across 95%; a capacity
        // of none says its doubt as a load does.
        let none = SearchEnd {
            load: None,
            failed_at: Some((5.0, "errors".into())),
            stopped: "even 5 failed".into(),
        };
        let tried = [(5.0, Verdict::Fail("errors".into()))];
        let c = plan.capacity(&none, &tried, &[level(5, 75, 80)]);
        assert!(!c.clear && c.concurrency.is_none(), "{c:?}");
        assert_eq!(
            describe(&c),
            "none: no load tried met the target (not clear at 95% confidence: an interval reaches across the target; longer levels would decide)"
        );
        let c = plan.capacity(&none, &tried, &[level(5, 60, 80)]);
        assert_eq!(describe(&c), "none: no load tried met the target");
        // With the model's GPU count and price, the cost at the capacity is stated.
        let tried = [(5.0, Verdict::Pass), (6.0, Verdict::Fail("ttft".into()))];
        let mut c = plan.capacity(&end, &tried, &[level(5, 400, 400), level(6, 300, 400)]);
        c.gpu_cost_per_mtok = Some(1.496);
        assert_eq!(
            describe(&c),
            "up to 5 concurrent streams at 100.0% attainment [99.0%, 100.0%], limited by ttft (failed at 6), 1.496 per million output tokens on its GPUs there"
        );
    }

    /// The most levels any verdicts make the search run, by trying every sequence of them.
    fn longest(s: &Search, tried: &mut Vec<(f64, Verdict)>) -> usize {
        match s.next(tried) {
            Next::Done(_) => tried.len(),
            Next::Run(l) => [Verdict::Pass, Verdict::Fail("ttft".into())]
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
            (2.0, Verdict::Fail("errors".into())),
            (4.0, Verdict::Pass),
        ];
        match s.next(&tried) {
            Next::Done(o) => {
                assert_eq!(o.load, Some(1.0));
                assert!(o.stopped.contains("passed again"), "{}", o.stopped);
            }
            other => panic!("{other:?}"),
        }
    }
}
