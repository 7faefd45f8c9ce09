//! A small seeded pseudo-random generator for loss and jitter draws (SplitMix64). Statistical
//! quality is ample for Bernoulli loss and uniform jitter; it is not for cryptography.

/// Deterministic 64-bit generator: the same seed gives the same sequence.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0 ..= max`.
    pub(crate) fn below_or_eq(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        // Widening multiply keeps the draw unbiased enough for delays (bias < 2^-64 * max).
        ((self.next_u64() as u128 * (max as u128 + 1)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeatable_and_roughly_uniform() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        let mut sum = 0.0;
        for _ in 0..10_000 {
            let x = a.next_f64();
            assert_eq!(x, b.next_f64());
            assert!((0.0..1.0).contains(&x));
            sum += x;
        }
        assert!((sum / 10_000.0 - 0.5).abs() < 0.02);
        assert!((0..1000).all(|_| a.below_or_eq(3) <= 3));
    }
}
