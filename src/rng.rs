//! The one pseudo-random generator of the crate (SplitMix64), seeded for reproducible runs: the
//! simulator's jitter and fault mix, bench's Poisson and gamma arrivals (it is a `rand_core`
//! generator, so `rand_distr`'s distributions draw from it); and the one fingerprint of text
//! ([`fingerprint`], FNV-1a).

/// SplitMix64: tiny, fast, good enough for jitter, fault mixes and arrival gaps (not for
/// cryptography).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator whose sequence is fixed by `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The generator of request number `seq` under `seed` (independent streams per request).
    pub(crate) fn for_request(seed: u64, seq: u64) -> Self {
        let mut r = Rng(seed ^ seq.wrapping_mul(0xA076_1D64_78BD_642F));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`; 0 when `n == 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform integer in `[-j, +j]`.
    pub(crate) fn symmetric(&mut self, j: u64) -> i128 {
        if j == 0 {
            return 0;
        }
        i128::from(self.below(j.saturating_mul(2).saturating_add(1))) - i128::from(j)
    }
}

/// `rand_core`'s view of the generator: `rand_distr` samples through it (infallible).
impl rand_core::TryRng for Rng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok((self.next_u64() >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(self.next_u64())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        Ok(())
    }
}
/// 16 hex digits of FNV-1a over `parts`, each ended by a 0 byte (so that `["ab", "c"]` and
/// `["a", "bc"]` differ): the crate's one fingerprint of text (a bench run's id, a prompt's
/// messages in its report, a deterministic answer's hash). Not a cryptographic digest: it tells
/// texts apart, it does not resist a forger.
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
