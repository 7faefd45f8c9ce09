//! Operation sizes: a normal distribution truncated below at one byte, drawn from a seeded
//! generator so a run's sequence of sizes can be repeated.
//!
//! Not a statistics library: the normal deviates come from the Box–Muller transform, which is
//! plenty for spreading request sizes around a mean.

use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};

/// How far the standard deviation is given: bytes, or a share of the mean.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spread {
    /// Standard deviation in bytes.
    Bytes(u64),
    /// Standard deviation as a fraction of the mean (`0.2` for `20%`).
    OfMean(f64),
}

impl Spread {
    /// Parse `20%` (share of the mean) or a size such as `4MiB` or `0`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(pct) = s.strip_suffix('%') {
            let v: f64 = pct
                .trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a percentage"))?;
            if !(0.0..=1000.0).contains(&v) {
                return Err(format!(
                    "{s}: the spread must be within 0% to 1000% of the mean"
                ));
            }
            return Ok(Self::OfMean(v / 100.0));
        }
        xfer::parse_size(s)
            .map(Self::Bytes)
            .map_err(|e| e.to_string())
    }

    /// The standard deviation in bytes for `mean`.
    pub fn bytes(&self, mean: u64) -> f64 {
        match *self {
            Self::Bytes(b) => b as f64,
            Self::OfMean(f) => mean as f64 * f,
        }
    }
}

/// A seeded source of operation sizes in `1..=max`.
pub struct SizeDist {
    rng: SmallRng,
    mean: f64,
    sd: f64,
    max: u64,
}

/// Draws below one byte are redrawn this many times before the size is clamped to one byte;
/// only a spread far wider than the mean gets there.
const REDRAWS: u32 = 64;

impl SizeDist {
    /// Sizes around `mean` with standard deviation `sd` bytes, never above `max`. `stream`
    /// separates generators that share a seed (one per lane).
    pub fn new(mean: u64, sd: f64, max: u64, seed: u64, stream: u64) -> Self {
        // Distinct lanes get unrelated sequences from one user seed.
        let mixed = seed ^ stream.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Self {
            rng: SmallRng::seed_from_u64(mixed),
            mean: mean as f64,
            sd,
            max: max.max(1),
        }
    }

    /// The next size.
    pub fn next_size(&mut self) -> u64 {
        if self.sd <= 0.0 {
            return (self.mean.round() as u64).clamp(1, self.max);
        }
        for _ in 0..REDRAWS {
            let v = (self.mean + self.sd * self.standard_normal()).round();
            if v >= 1.0 {
                // `as` saturates for floats beyond u64, and `max` bounds it anyway.
                return (v as u64).min(self.max);
            }
        }
        1
    }

    fn standard_normal(&mut self) -> f64 {
        // u1 in (0, 1] keeps ln finite.
        let u1 = 1.0 - self.rng.gen::<f64>();
        let u2 = self.rng.gen::<f64>();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_parses_percent_and_sizes() {
        assert_eq!(Spread::parse("20%"), Ok(Spread::OfMean(0.2)));
        assert_eq!(Spread::parse("1MiB"), Ok(Spread::Bytes(1 << 20)));
        assert_eq!(Spread::parse("0"), Ok(Spread::Bytes(0)));
        assert!(Spread::parse("x%").is_err());
        assert!(Spread::parse("-5%").is_err());
        assert!((Spread::OfMean(0.2).bytes(1000) - 200.0).abs() < 1e-9);
    }

    #[test]
    fn same_seed_same_sizes_and_truncated_at_one_byte() {
        let draw = |seed, stream| {
            let mut d = SizeDist::new(100, 400.0, u64::MAX, seed, stream);
            (0..2000).map(|_| d.next_size()).collect::<Vec<_>>()
        };
        let a = draw(7, 0);
        assert_eq!(a, draw(7, 0));
        assert_ne!(a, draw(7, 1));
        assert_ne!(a, draw(8, 0));
        assert!(a.iter().all(|&s| s >= 1));
    }

    #[test]
    fn mean_and_spread_are_roughly_as_asked() {
        let mut d = SizeDist::new(1_000_000, 200_000.0, u64::MAX, 1, 0);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|_| d.next_size() as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!((mean - 1e6).abs() < 1e4, "mean {mean}");
        assert!((var.sqrt() - 2e5).abs() < 1e4, "sd {}", var.sqrt());
    }

    #[test]
    fn zero_spread_and_cap() {
        let mut d = SizeDist::new(4096, 0.0, u64::MAX, 0, 0);
        assert_eq!(d.next_size(), 4096);
        let mut d = SizeDist::new(4096, 0.0, 100, 0, 0);
        assert_eq!(d.next_size(), 100);
    }
}
