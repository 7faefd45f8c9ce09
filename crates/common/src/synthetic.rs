//! The synthetic resource: deterministic pseudo-random bytes of any size, generated on the fly,
//! for memory-to-memory runs that measure the network and not the disks.
//!
//! Served at [`SYNTHETIC_PATH`] with a query `size=10G&seed=1`. Byte `i` depends only on
//! `(seed, i)`: each little-endian 8-byte word `w` is a 64-bit mix of the seed and `w`, so any
//! range can be produced independently, by any server, at 13 GB/s per core (50 with AVX-512). The bytes are
//! not cryptographically random and are not meant to be.

use std::fmt;

use percent_encoding::percent_decode_str;
use xfer_core::size::parse_size;

/// Path of the synthetic resource on every xfer server.
pub const SYNTHETIC_PATH: &str = "/.xfer/synthetic";

/// Largest synthetic resource: 1 PiB (beyond any real run; keeps sizes far from `u64` overflow).
pub const MAX_SYNTHETIC_SIZE: u64 = 1 << 50;

/// Which synthetic resource: its size and seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyntheticSpec {
    /// Size in bytes, at most [`MAX_SYNTHETIC_SIZE`].
    pub size: u64,
    /// Seed of the byte generator; default 0.
    pub seed: u64,
}

/// A synthetic query that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad synthetic resource query {query:?}: {reason}")]
pub struct SyntheticQueryError {
    pub query: String,
    pub reason: String,
}

impl SyntheticSpec {
    /// Read `size=<size>&seed=<u64>` (any order). `size` is required and takes unit suffixes
    /// (`10G`, `1.5GB`); unknown or repeated keys are refused so typos do not go unnoticed.
    pub fn from_query(query: &str) -> Result<Self, SyntheticQueryError> {
        let err = |reason: String| SyntheticQueryError {
            query: query.to_string(),
            reason,
        };
        let mut size = None;
        let mut seed = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode_str(value)
                .decode_utf8()
                .map_err(|_| err(format!("{key} is not UTF-8")))?;
            match key {
                "size" => {
                    if size.is_some() {
                        return Err(err("size given twice".into()));
                    }
                    let s = parse_size(&value).map_err(|e| err(e.to_string()))?;
                    if s > MAX_SYNTHETIC_SIZE {
                        return Err(err(format!(
                            "size {s} exceeds the maximum of {MAX_SYNTHETIC_SIZE} bytes (1 PiB)"
                        )));
                    }
                    size = Some(s);
                }
                "seed" => {
                    if seed.is_some() {
                        return Err(err("seed given twice".into()));
                    }
                    seed = Some(
                        value
                            .trim()
                            .parse::<u64>()
                            .map_err(|_| err(format!("seed {value:?} is not a u64")))?,
                    );
                }
                other => return Err(err(format!("unknown key {other:?} (use size, seed)"))),
            }
        }
        Ok(Self {
            size: size.ok_or_else(|| err("size is missing".into()))?,
            seed: seed.unwrap_or(0),
        })
    }

    /// The query string that names this resource, `size=<bytes>&seed=<seed>`.
    pub fn to_query(&self) -> String {
        format!("size={}&seed={}", self.size, self.seed)
    }

    /// Path and query, e.g. `/.xfer/synthetic?size=1024&seed=0`, to append to a base URL.
    pub fn path_and_query(&self) -> String {
        format!("{SYNTHETIC_PATH}?{}", self.to_query())
    }

    /// Strong entity tag derived from size and seed (and the generator version, so a change
    /// of generator never validates old bytes).
    pub fn etag(&self) -> String {
        format!(
            "\"xfer-syn{GENERATOR_VERSION}-{:x}-{:x}\"",
            self.size, self.seed
        )
    }

    /// Fill `buf` with this resource's bytes starting at `offset` (clipped to nothing is not
    /// checked here: bytes past `size` are still generated).
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        fill(self.seed, offset, buf);
    }
}

impl fmt::Display for SyntheticSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "synthetic(size={}, seed={})", self.size, self.seed)
    }
}

/// Bumped whenever the byte sequence [`fill`] produces changes.
const GENERATOR_VERSION: u32 = 1;

/// Fill `buf` with the synthetic bytes for `seed` starting at byte `offset`.
///
/// Any offset and length work; the result equals the matching slice of one long fill.
pub fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    if buf.is_empty() || crate::sys::fill_wide(seed, offset, buf) {
        return;
    }
    fill_words(seed, offset, buf);
}

/// Whether [`fill`] runs on wide vector units here (x86-64 with AVX-512DQ, whose 64-bit
/// multiplies the mix needs): about 50 GB/s per core instead of 13, cheap enough for a server
/// to generate a block on the task that sends it.
pub fn fill_is_wide() -> bool {
    crate::sys::wide_fill_available()
}

/// [`fill`]'s body, inlined into each caller so that [`crate::sys`] can compile it once more
/// for wide vector units (the loop is the same; only the instructions differ).
#[inline(always)]
pub(crate) fn fill_words(seed: u64, offset: u64, buf: &mut [u8]) {
    let key = mix(seed ^ 0x5851_f42d_4c95_7f2d);
    let mut word = offset / 8;
    let mut pos = 0usize;
    // Unaligned head: the tail end of word `offset / 8`.
    let skip = usize::try_from(offset % 8).unwrap_or(0);
    if skip != 0 {
        let bytes = word_bytes(key, word);
        let n = (8 - skip).min(buf.len());
        buf[..n].copy_from_slice(&bytes[skip..skip + n]);
        pos = n;
        word = word.wrapping_add(1);
    }
    // Four independent words per step keep the multipliers busy (about 1.6x the throughput
    // of one word at a time on x86-64 without vector multiplies).
    let mut quads = buf[pos..].chunks_exact_mut(32);
    for quad in &mut quads {
        let x = word.wrapping_mul(GOLDEN);
        let words = [
            mix(x ^ key),
            mix(x.wrapping_add(GOLDEN) ^ key),
            mix(x.wrapping_add(GOLDEN.wrapping_mul(2)) ^ key),
            mix(x.wrapping_add(GOLDEN.wrapping_mul(3)) ^ key),
        ];
        for (dst, w) in quad.chunks_exact_mut(8).zip(words) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        word = word.wrapping_add(4);
    }
    let mut chunks = quads.into_remainder().chunks_exact_mut(8);
    for chunk in &mut chunks {
        chunk.copy_from_slice(&word_bytes(key, word));
        word = word.wrapping_add(1);
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let bytes = word_bytes(key, word);
        let n = tail.len();
        tail.copy_from_slice(&bytes[..n]);
    }
}

/// 2^64 / golden ratio: spreads consecutive word indices across the input space.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline(always)]
fn word_bytes(key: u64, word: u64) -> [u8; 8] {
    mix(word.wrapping_mul(GOLDEN) ^ key).to_le_bytes()
}

/// A 64-bit finalizer (the splitmix64 output function): every input bit affects every output bit.
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_fill_makes_the_same_bytes() {
        // Every head and tail alignment, and lengths around the 32-byte step; on a CPU without
        // AVX-512DQ both sides are the same code and this checks nothing more than that.
        let mut wide = vec![0u8; 4096 + 64];
        let mut narrow = vec![0u8; 4096 + 64];
        for offset in [0u64, 1, 7, 8, 31, 33, (1 << 40) + 5] {
            for len in [1usize, 7, 8, 31, 32, 33, 100, 4096 + 63] {
                fill(9, offset, &mut wide[..len]);
                fill_words(9, offset, &mut narrow[..len]);
                assert_eq!(wide[..len], narrow[..len], "offset {offset}, length {len}");
            }
        }
    }

    #[test]
    fn query_parsing() {
        assert_eq!(
            SyntheticSpec::from_query("size=10G&seed=1"),
            Ok(SyntheticSpec {
                size: 10 << 30,
                seed: 1
            })
        );
        assert_eq!(
            SyntheticSpec::from_query("seed=7&size=1.5GB"),
            Ok(SyntheticSpec {
                size: 1_500_000_000,
                seed: 7
            })
        );
        assert_eq!(
            SyntheticSpec::from_query("size=4096").map(|s| s.seed),
            Ok(0)
        );
        assert_eq!(
            SyntheticSpec::from_query("size=1%20KiB").map(|s| s.size),
            Ok(1024)
        );
        for bad in [
            "",
            "seed=1",
            "size=abc",
            "size=2000TiB",
            "size=1&size=2",
            "size=1&seed=-1",
            "size=1&bogus=2",
            "size=%ff",
        ] {
            assert!(SyntheticSpec::from_query(bad).is_err(), "{bad:?}");
        }
        let spec = SyntheticSpec { size: 5, seed: 9 };
        assert_eq!(SyntheticSpec::from_query(&spec.to_query()), Ok(spec));
    }

    #[test]
    fn etag_depends_on_size_and_seed() {
        let a = SyntheticSpec { size: 5, seed: 1 };
        let b = SyntheticSpec { size: 5, seed: 2 };
        let c = SyntheticSpec { size: 6, seed: 1 };
        assert_ne!(a.etag(), b.etag());
        assert_ne!(a.etag(), c.etag());
        assert!(a.etag().starts_with('"') && a.etag().ends_with('"'));
    }

    #[test]
    fn unaligned_fills_match_slices_of_a_whole_fill() {
        let mut whole = vec![0u8; 4096 + 13];
        fill(42, 0, &mut whole);
        // A cheap deterministic sequence of (offset, len) pairs covering every alignment.
        let mut state = 0x1234_5678_u64;
        for _ in 0..2000 {
            state = mix(state.wrapping_add(1));
            let off = usize::try_from(state % whole.len() as u64).unwrap_or(0);
            let max_len = whole.len() - off;
            let len = usize::try_from((state >> 32) % (max_len as u64 + 1)).unwrap_or(0);
            let mut part = vec![0u8; len];
            fill(42, off as u64, &mut part);
            assert_eq!(part, whole[off..off + len], "offset {off} len {len}");
        }
    }

    #[test]
    fn seeds_differ_and_output_is_not_trivial() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        fill(0, 0, &mut a);
        fill(1, 0, &mut b);
        assert_ne!(a, b);
        assert!(a.iter().any(|&x| x != 0));
        // Far offsets work without overflow.
        let mut far = [0u8; 16];
        fill(3, MAX_SYNTHETIC_SIZE - 16, &mut far);
        fill(3, u64::MAX - 15, &mut far);
    }
}
