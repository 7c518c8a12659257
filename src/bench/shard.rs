//! One bench run split across processes (`--shard i/N`, e.g. the pods of a Kubernetes Indexed
//! Job): what shard `i` of `N` sends at every level, the wall-clock instants every shard starts
//! its levels at (`--start-at`), and the run id that ties the shards' reports together (pure).
//!
//! - Closed loop: the level's workers and requests are dealt out, shard `i` getting
//!   `total / N` plus one of the first `total % N` remainders, so the shards add up exactly.
//! - Open loop: each shard arrives at `R / N` with its own seeded arrival stream, so for Poisson
//!   arrivals the shards' union is a Poisson stream at `R`; the in-flight cap is shared out the
//!   same way (at least 1).
//! - `--start-at T`: level `k` (counted over every model's levels, in the order run) starts at
//!   `T + k × (duration per level + level gap)` on every shard; a shard that is still busy then
//!   starts late and says by how much (`start_offset_s`).

use crate::rng::Rng;
use chrono::{DateTime, Utc};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The most shards a run may have.
pub const MAX_SHARDS: u32 = 10_000;

/// Shard `index` (0-based, as Kubernetes' `JOB_COMPLETION_INDEX`) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 0 ≤ index < count.
    pub index: u32,
    /// How many shards the run has.
    pub count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard { index: 0, count: 1 }
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || {
            format!("{s:?}: expected INDEX/COUNT with 0 <= INDEX < COUNT <= {MAX_SHARDS}, e.g. 0/3")
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || count > MAX_SHARDS || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// This shard's part of `total` things dealt out one by one: the parts of every shard add up
    /// to `total`.
    pub fn share(&self, total: u64) -> u64 {
        let n = u64::from(self.count);
        total / n + u64::from(u64::from(self.index) < total % n)
    }

    /// This shard's workers of a closed-loop level of `c` (0 when `c` is below the shard count
    /// and this shard's turn does not come).
    pub fn workers(&self, c: u32) -> u32 {
        u32::try_from(self.share(u64::from(c))).unwrap_or(u32::MAX)
    }

    /// The first of this shard's workers among the `c` of a closed-loop level (the shards
    /// before it hold the ones before).
    fn first_worker(&self, c: u32) -> u64 {
        (0..self.index)
            .map(|i| {
                Shard {
                    index: i,
                    count: self.count,
                }
                .share(u64::from(c))
            })
            .sum()
    }

    /// This shard's requests of a closed-loop level of `c` workers that sends `total` in all:
    /// its workers' part (worker `j` of `c` sends `total / c`, one more while `j < total % c`),
    /// so the shards together send `total` even when one of them has no worker at the level.
    pub fn requests(&self, total: u64, c: u32) -> u64 {
        let c64 = u64::from(c.max(1));
        let first = self.first_worker(c);
        let w = u64::from(self.workers(c));
        (first..first + w)
            .map(|j| total / c64 + u64::from(j < total % c64))
            .sum()
    }

    /// This shard's arrival rate of an open-loop level at `rate`.
    pub fn rate(&self, rate: f64) -> f64 {
        rate / f64::from(self.count)
    }

    /// This shard's in-flight cap of an open-loop level capped at `cap` (at least 1).
    pub fn cap(&self, cap: u32) -> u32 {
        cap.div_ceil(self.count).max(1)
    }

    /// This shard's seed of a level seeded `seed`: the seed itself for a run of one shard (so
    /// `--shard 0/1` sends what a plain run sends), else an independent stream per shard.
    pub fn seed(&self, seed: u64) -> u64 {
        if self.count == 1 {
            return seed;
        }
        Rng::for_request(seed, u64::from(self.index) + 1).next_u64()
    }
}

/// When every shard starts its levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartPlan {
    /// The first level's start, the same on every shard.
    pub start_at: DateTime<Utc>,
    /// From one level's start to the next's: the sending time per level plus the gap left for
    /// warm-up and the last requests to finish.
    pub slot: Duration,
}

impl StartPlan {
    /// The start instant of level `k`, counted over every model's levels in the order run.
    pub fn level_start(&self, k: usize) -> DateTime<Utc> {
        let offset = self
            .slot
            .saturating_mul(u32::try_from(k).unwrap_or(u32::MAX));
        chrono::Duration::from_std(offset)
            .ok()
            .and_then(|d| self.start_at.checked_add_signed(d))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// How long to wait at `now` for level `k`'s start (zero when it has passed).
    pub fn wait(&self, k: usize, now: DateTime<Utc>) -> Duration {
        (self.level_start(k) - now)
            .to_std()
            .unwrap_or(Duration::ZERO)
    }
}

/// A run id every shard computes alike from what defines the run (the same parts give the same
/// id; a run without `--start-at` adds a part of its own invocation, so that no other run shares
/// it): 16 hex digits of FNV-1a over the parts, each ended by a 0 byte.
pub fn run_id(parts: &[&str]) -> String {
    fingerprint(parts)
}

/// 16 hex digits of FNV-1a over `parts`, each ended by a 0 byte (so that `["ab", "c"]` and
/// `["a", "bc"]` differ): a run's id, a prompt's messages in its report.
pub fn fingerprint(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_loop_requests_follow_the_workers_so_the_shards_send_the_total() {
        let of =
            |i: u32, n: u32, total: u64, c: u32| Shard { index: i, count: n }.requests(total, c);
        // 20 requests, 1 worker, 2 shards: shard 0 has the worker and sends all 20.
        assert_eq!((of(0, 2, 20, 1), of(1, 2, 20, 1)), (20, 0));
        // 20 requests, 3 workers on 2 shards (2 + 1): 7 + 7 and 6.
        assert_eq!((of(0, 2, 20, 3), of(1, 2, 20, 3)), (14, 6));
        for (n, total, c) in [(3, 100, 4), (4, 7, 2), (2, 1, 5), (5, 1000, 64)] {
            let sum: u64 = (0..n).map(|i| of(i, n, total, c)).sum();
            assert_eq!(sum, total, "{n} shards, {total} requests, {c} workers");
        }
        assert_eq!(of(0, 1, 20, 4), 20, "one shard sends everything");
    }

    #[test]
    fn shards_parse_and_refuse_what_is_not_one() {
        assert_eq!("0/3".parse(), Ok(Shard { index: 0, count: 3 }));
        assert_eq!(" 2 / 3 ".parse(), Ok(Shard { index: 2, count: 3 }));
        assert_eq!("0/1".parse::<Shard>().unwrap(), Shard::default());
        for bad in ["3/3", "1/0", "-1/2", "a/2", "2", "", "0/10001", "1/2/3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad:?} accepted");
        }
        assert_eq!(Shard { index: 1, count: 4 }.to_string(), "1/4");
    }

    #[test]
    fn shares_add_up_exactly() {
        for count in 1..=7u32 {
            for total in [0u64, 1, 2, 5, 10, 64, 101] {
                let parts: Vec<u64> = (0..count)
                    .map(|index| Shard { index, count }.share(total))
                    .collect();
                assert_eq!(
                    parts.iter().sum::<u64>(),
                    total,
                    "{count} shards of {total}"
                );
                let (lo, hi) = (parts.iter().min().unwrap(), parts.iter().max().unwrap());
                assert!(hi - lo <= 1, "{parts:?}");
            }
        }
        let s = |index| Shard { index, count: 3 };
        assert_eq!(
            [s(0).workers(5), s(1).workers(5), s(2).workers(5)],
            [2, 2, 1]
        );
        assert_eq!([s(0).workers(1), s(1).workers(1)], [1, 0]);
        assert_eq!(s(2).cap(1000), 334);
        assert_eq!(s(2).cap(1), 1);
        assert!((s(1).rate(30.0) - 10.0).abs() < 1e-12);
    }

    #[test]
    fn one_shard_keeps_the_seed_and_shards_get_their_own() {
        assert_eq!(Shard::default().seed(42), 42);
        let seeds: Vec<u64> = (0..4)
            .map(|index| Shard { index, count: 4 }.seed(42))
            .collect();
        for (i, a) in seeds.iter().enumerate() {
            assert_ne!(*a, 42);
            assert!(!seeds[..i].contains(a), "{seeds:?}");
        }
        assert_eq!(Shard { index: 1, count: 4 }.seed(42), seeds[1]);
    }

    #[test]
    fn levels_start_at_shared_instants() {
        let t: DateTime<Utc> = "2026-12-01T12:00:00Z".parse().unwrap();
        let p = StartPlan {
            start_at: t,
            slot: Duration::from_secs(40),
        };
        assert_eq!(p.level_start(0), t);
        assert_eq!(p.level_start(3).to_rfc3339(), "2026-12-01T12:02:00+00:00");
        assert_eq!(p.wait(1, t), Duration::from_secs(40));
        assert_eq!(p.wait(0, t + chrono::Duration::seconds(5)), Duration::ZERO);
    }

    #[test]
    fn run_ids_depend_on_every_part_and_its_boundaries() {
        let a = run_id(&["sim", "m1,m2", "1,2,4"]);
        assert_eq!(a, run_id(&["sim", "m1,m2", "1,2,4"]));
        assert_eq!(a.len(), 16);
        assert_ne!(a, run_id(&["sim", "m1,m2", "1,2,8"]));
        assert_ne!(run_id(&["ab", "c"]), run_id(&["a", "bc"]));
    }
}
