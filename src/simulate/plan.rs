//! What one simulated request will do: its fault, TTFT, output length and the instant each token
//! is ready, drawn from a small seeded PRNG (pure: no I/O, no clocks).
//!
//! Token `i` (0-based) is ready at `ttft + gap_1 + … + gap_i`, each gap `itl` plus uniform jitter,
//! all offsets from the start of generation; the caller turns them into absolute deadlines, so
//! nothing drifts. Chunking follows vLLM's `stream_interval`: the first token goes out alone as
//! soon as it is ready, later chunks hold `tokens_per_chunk` tokens and go out when their last
//! token is ready. So the first token event is at `ttft` and the last at `ttft + Σ gaps` whatever
//! the chunk size, and a client's TPOT equals the mean gap.

use super::Fault;
use crate::rng::Rng;
use std::time::Duration;

/// Timing and length settings shared by every request.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Time to first token, from the start of generation.
    pub ttft: Duration,
    /// Uniform jitter added to the TTFT: `ttft ± ttft_jitter` (never below 0).
    pub ttft_jitter: Duration,
    /// Gap between consecutive tokens.
    pub itl: Duration,
    /// Uniform jitter on each gap: `itl ± itl_jitter` (never below 0).
    pub itl_jitter: Duration,
    /// Output length in tokens.
    pub output_tokens: u32,
    /// Uniform jitter on the output length (never below 1).
    pub output_tokens_jitter: u32,
    /// Tokens per content event after the first (which is always alone).
    pub tokens_per_chunk: u32,
}

/// What the request asks of its output length, and the prefill its input costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ask {
    /// `max_tokens` (or `max_completion_tokens`, `max_output_tokens`): caps the output.
    pub max_tokens: Option<u64>,
    /// `min_tokens` (vLLM): at least this many output tokens (still capped by `max_tokens`).
    pub min_tokens: Option<u64>,
    /// `ignore_eos: true` (vLLM, SGLang, llama.cpp): exactly `max_tokens` output tokens.
    pub ignore_eos: bool,
}

/// The drawn plan of one request.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The fault to inject, if any.
    pub fault: Option<Fault>,
    /// Time to first token for this request.
    pub ttft: Duration,
    /// Output tokens N (after jitter and the request's `max_tokens` cap).
    pub tokens: u32,
    /// The request's `max_tokens` cut the output short (finish reason `length` / `max_tokens`).
    pub capped: bool,
    itl: Duration,
    itl_jitter: Duration,
    per_chunk: u32,
    rng: Rng,
}

impl Plan {
    /// Draws a plan: the fault first, then TTFT, then N; the gaps are drawn as chunks are taken.
    /// N is the profile's (with jitter), raised to `min_tokens`, capped by `max_tokens`; with
    /// `ignore_eos` it is `max_tokens` (the profile's N without one).
    pub(crate) fn draw(
        t: &Timing,
        error_rate: f64,
        errors: &[Fault],
        ask: &Ask,
        mut rng: Rng,
    ) -> Self {
        let fault = if error_rate > 0.0 && !errors.is_empty() && rng.unit() < error_rate {
            let i = rng.below(errors.len() as u64) as usize;
            errors.get(i).copied()
        } else {
            None
        };
        let ttft = jitter(&mut rng, t.ttft, t.ttft_jitter);
        let drawn = (i128::from(t.output_tokens) + rng.symmetric(u64::from(t.output_tokens_jitter)))
            .clamp(1, i128::from(u32::MAX)) as u32;
        let to_u32 = |m: u64| m.clamp(1, u64::from(u32::MAX)) as u32;
        let cap = ask.max_tokens.map(to_u32);
        let n = match (ask.ignore_eos, cap) {
            (true, Some(c)) => c,
            _ => drawn.max(ask.min_tokens.map_or(1, to_u32)),
        };
        let (tokens, capped) = match cap {
            Some(c) if c <= n && (c < n || ask.ignore_eos) => (c, true),
            _ => (n, false),
        };
        Plan {
            fault,
            ttft,
            tokens,
            capped,
            itl: t.itl,
            itl_jitter: t.itl_jitter,
            per_chunk: t.tokens_per_chunk.max(1),
            rng,
        }
    }

    /// Adds the prefill of the request's uncached input tokens to its TTFT (every token moves
    /// by it; the gaps stay).
    pub(crate) fn add_prefill(&mut self, prefill: Duration) {
        self.ttft = self.ttft.saturating_add(prefill);
    }

    /// The token index at which a mid-stream fault (truncate, malformed, stall-mid) strikes:
    /// halfway, and never before the first token.
    pub(crate) fn cut(&self) -> u32 {
        (self.tokens / 2).max(1)
    }

    /// The content events, in order (consumes the gap draws).
    pub(crate) fn chunks(&mut self) -> Chunks<'_> {
        Chunks {
            plan: self,
            next: 0,
            ready: Duration::ZERO,
        }
    }
}

/// `base ± j`, uniform, clamped at 0.
fn jitter(rng: &mut Rng, base: Duration, j: Duration) -> Duration {
    if j.is_zero() {
        return base;
    }
    let j_ns = u64::try_from(j.as_nanos()).unwrap_or(u64::MAX);
    let ns = (base.as_nanos() as i128 + rng.symmetric(j_ns)).max(0);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// One content event: when it is due (offset from the start of generation) and its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Due offset from the start of generation: the ready instant of its last token.
    pub due: Duration,
    /// Index of its first token.
    pub start: u32,
    /// Number of tokens in it.
    pub count: u32,
}

/// Iterator over a plan's content events.
pub(crate) struct Chunks<'a> {
    plan: &'a mut Plan,
    next: u32,
    ready: Duration,
}

impl Iterator for Chunks<'_> {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        let p = &mut *self.plan;
        if self.next >= p.tokens {
            return None;
        }
        let start = self.next;
        let count = if start == 0 {
            1
        } else {
            p.per_chunk.min(p.tokens - start)
        };
        for i in start..start + count {
            self.ready = if i == 0 {
                p.ttft
            } else {
                self.ready + jitter(&mut p.rng, p.itl, p.itl_jitter)
            };
        }
        self.next += count;
        Some(Chunk {
            due: self.ready,
            start,
            count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            ttft: Duration::from_millis(200),
            ttft_jitter: Duration::ZERO,
            itl: Duration::from_millis(20),
            itl_jitter: Duration::ZERO,
            output_tokens: 5,
            output_tokens_jitter: 0,
            tokens_per_chunk: 1,
        }
    }

    #[test]
    fn exact_schedule_without_jitter() {
        let mut p = Plan::draw(&timing(), 0.0, &[], &Ask::default(), Rng::new(1));
        let c: Vec<_> = p.chunks().collect();
        assert_eq!(c.len(), 5);
        for (k, ch) in c.iter().enumerate() {
            assert_eq!(ch.due, Duration::from_millis(200 + 20 * k as u64));
            assert_eq!((ch.start, ch.count), (k as u32, 1));
        }
        assert!(!p.capped);
    }

    #[test]
    fn chunking_sends_the_first_token_alone_then_groups() {
        let t = Timing {
            output_tokens: 8,
            tokens_per_chunk: 3,
            ..timing()
        };
        let mut p = Plan::draw(&t, 0.0, &[], &Ask::default(), Rng::new(1));
        let c: Vec<_> = p
            .chunks()
            .map(|c| (c.due.as_millis(), c.start, c.count))
            .collect();
        assert_eq!(c, vec![(200, 0, 1), (260, 1, 3), (320, 4, 3), (340, 7, 1)]);
    }

    fn cap(n: u64) -> Ask {
        Ask {
            max_tokens: Some(n),
            ..Ask::default()
        }
    }

    #[test]
    fn ignore_eos_min_tokens_and_prefill() {
        // (max_tokens, min_tokens, ignore_eos) → (N, capped); the profile's N is 5.
        for (max, min, ignore_eos, want) in [
            (Some(9), None, true, (9, true)),
            (Some(3), None, true, (3, true)),
            (Some(5), None, true, (5, true)),
            (None, None, true, (5, false)),
            (None, Some(8), false, (8, false)),
            (None, Some(2), false, (5, false)),
            (Some(6), Some(8), false, (6, true)),
            (Some(8), Some(8), false, (8, false)),
            (Some(5), None, false, (5, false)),
            (Some(12), Some(3), true, (12, true)),
        ] {
            let ask = Ask {
                max_tokens: max,
                min_tokens: min,
                ignore_eos,
            };
            let p = Plan::draw(&timing(), 0.0, &[], &ask, Rng::new(1));
            assert_eq!((p.tokens, p.capped), want, "{ask:?}");
        }
        let mut p = Plan::draw(&timing(), 0.0, &[], &Ask::default(), Rng::new(1));
        p.add_prefill(Duration::from_micros(3840));
        assert_eq!(p.ttft, Duration::from_micros(203_840));
        let dues: Vec<_> = p.chunks().map(|c| c.due).collect();
        assert_eq!(dues[0], Duration::from_micros(203_840));
        assert_eq!(
            dues[4] - dues[0],
            Duration::from_millis(80),
            "prefill moves the first token only"
        );
    }

    #[test]
    fn max_tokens_caps() {
        let p = Plan::draw(&timing(), 0.0, &[], &cap(3), Rng::new(1));
        assert_eq!((p.tokens, p.capped), (3, true));
        let p = Plan::draw(&timing(), 0.0, &[], &cap(5), Rng::new(1));
        assert_eq!((p.tokens, p.capped), (5, false));
        let p = Plan::draw(&timing(), 0.0, &[], &cap(0), Rng::new(1));
        assert_eq!(p.tokens, 1);
    }

    #[test]
    fn jitter_stays_in_bounds_and_is_seeded() {
        let t = Timing {
            ttft_jitter: Duration::from_millis(50),
            itl_jitter: Duration::from_millis(5),
            output_tokens: 100,
            output_tokens_jitter: 10,
            ..timing()
        };
        let mut seen_n = std::collections::BTreeSet::new();
        for seq in 0..200 {
            let mut p = Plan::draw(&t, 0.0, &[], &Ask::default(), Rng::for_request(7, seq));
            assert!((150..=250).contains(&p.ttft.as_millis()), "{:?}", p.ttft);
            assert!((90..=110).contains(&p.tokens));
            seen_n.insert(p.tokens);
            let dues: Vec<_> = p.chunks().map(|c| c.due).collect();
            for w in dues.windows(2) {
                let gap = w[1] - w[0];
                assert!(gap >= Duration::from_millis(15) && gap <= Duration::from_millis(25));
            }
        }
        assert!(seen_n.len() > 10);
        let a = Plan::draw(&t, 0.0, &[], &Ask::default(), Rng::for_request(7, 3));
        let b = Plan::draw(&t, 0.0, &[], &Ask::default(), Rng::for_request(7, 3));
        assert_eq!((a.ttft, a.tokens), (b.ttft, b.tokens));
    }

    #[test]
    fn fault_mix() {
        let errs = [Fault::Status(429), Fault::Truncate];
        let mut counts = [0; 3];
        for seq in 0..2000 {
            let p = Plan::draw(
                &timing(),
                0.25,
                &errs,
                &Ask::default(),
                Rng::for_request(1, seq),
            );
            match p.fault {
                Some(Fault::Status(429)) => counts[0] += 1,
                Some(Fault::Truncate) => counts[1] += 1,
                None => counts[2] += 1,
                other => panic!("{other:?}"),
            }
        }
        assert!((200..300).contains(&counts[0]), "{counts:?}");
        assert!((200..300).contains(&counts[1]), "{counts:?}");
        let p = Plan::draw(&timing(), 1.0, &errs, &Ask::default(), Rng::new(3));
        assert!(p.fault.is_some());
    }

    #[test]
    fn cut_is_halfway_and_after_the_first_token() {
        let p = Plan::draw(&timing(), 0.0, &[], &cap(1), Rng::new(1));
        assert_eq!(p.cut(), 1);
        let p = Plan::draw(
            &Timing {
                output_tokens: 64,
                ..timing()
            },
            0.0,
            &[],
            &Ask::default(),
            Rng::new(1),
        );
        assert_eq!(p.cut(), 32);
    }
}
