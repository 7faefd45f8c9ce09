//! SHA-256 compression: one stream, or two streams interleaved on one core.
//!
//! One stream's rounds form a single dependency chain: each `sha256rnds2` waits for the one
//! before, so a core with SHA extensions hashes one stream at the latency of that instruction
//! (1.9 GiB/s on the Zen 5 cores this was measured on). Two independent streams give the core
//! a second chain to fill those waits with: 2.6-2.7 GiB/s for the two together, 1.43 × (`xfer
//! bench --floor` measures both rates; three streams reached only 8 % more than two).
//! Without SHA extensions both functions fall back to `sha2`'s portable code, one stream after
//! the other.

/// Bytes per SHA-256 block.
pub const BLOCK: usize = 64;

/// SHA-256's initial hash value (FIPS 180-4, 5.3.3).
pub const INITIAL_STATE: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// Whether this CPU hashes two streams faster together than one after the other.
pub fn pairs_help() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        shani::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Advance `state` over `blocks`, whose length is a multiple of [`BLOCK`].
pub fn compress_one(state: &mut [u32; 8], blocks: &[u8]) {
    debug_assert_eq!(blocks.len() % BLOCK, 0);
    #[cfg(target_arch = "x86_64")]
    if shani::try_one(state, blocks) {
        return;
    }
    portable(state, blocks);
}

/// Advance two independent states over their own blocks, of equal length (a multiple of
/// [`BLOCK`]), interleaving their rounds.
pub fn compress_two(a: &mut [u32; 8], a_blocks: &[u8], b: &mut [u32; 8], b_blocks: &[u8]) {
    assert_eq!(
        a_blocks.len(),
        b_blocks.len(),
        "paired streams hash equal lengths"
    );
    debug_assert_eq!(a_blocks.len() % BLOCK, 0);
    #[cfg(target_arch = "x86_64")]
    if shani::try_two(a, a_blocks, b, b_blocks) {
        return;
    }
    portable(a, a_blocks);
    portable(b, b_blocks);
}

fn portable(state: &mut [u32; 8], blocks: &[u8]) {
    use sha2::digest::generic_array::GenericArray;
    for block in blocks.chunks_exact(BLOCK) {
        sha2::compress256(state, std::slice::from_ref(GenericArray::from_slice(block)));
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod shani;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn reference(blocks: &[u8]) -> [u32; 8] {
        let mut s = INITIAL_STATE;
        portable(&mut s, blocks);
        s
    }

    #[test]
    fn one_and_two_match_the_portable_code() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for n in [0usize, 1, 2, 3, 17, 64] {
            let mut a = vec![0u8; n * BLOCK];
            let mut b = vec![0u8; n * BLOCK];
            rng.fill(&mut a[..]);
            rng.fill(&mut b[..]);
            let mut one = INITIAL_STATE;
            compress_one(&mut one, &a);
            assert_eq!(one, reference(&a), "{n} blocks, one stream");
            let (mut sa, mut sb) = (INITIAL_STATE, INITIAL_STATE);
            compress_two(&mut sa, &a, &mut sb, &b);
            assert_eq!(sa, reference(&a), "{n} blocks, first of two");
            assert_eq!(sb, reference(&b), "{n} blocks, second of two");
        }
    }
}
