//! The block function on the x86 SHA extensions (`sha256rnds2`, `sha256msg1`, `sha256msg2`),
//! for one stream and for two interleaved. The only `unsafe` of the crate: the intrinsics need
//! the CPU features the safe wrappers check first, and the loads read whole blocks.

use std::arch::x86_64::*;

use super::BLOCK;

/// The round constants (FIPS 180-4, 4.2.2), four per `sha256rnds2` pair.
const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// Whether this CPU has the SHA extensions and the SSE levels the kernels use.
pub(super) fn available() -> bool {
    // The standard library caches the CPUID answer after the first call.
    std::is_x86_feature_detected!("sha")
        && std::is_x86_feature_detected!("sse4.1")
        && std::is_x86_feature_detected!("ssse3")
}

/// [`one`] where the CPU has the features; `false` (and nothing done) where not.
pub(super) fn try_one(state: &mut [u32; 8], blocks: &[u8]) -> bool {
    if !available() {
        return false;
    }
    // SAFETY: the features `one` is compiled for are present (checked above).
    unsafe { one(state, blocks) };
    true
}

/// [`two`] where the CPU has the features; `false` (and nothing done) where not.
pub(super) fn try_two(
    a: &mut [u32; 8],
    a_blocks: &[u8],
    b: &mut [u32; 8],
    b_blocks: &[u8],
) -> bool {
    if !available() || a_blocks.len() != b_blocks.len() {
        return false;
    }
    // SAFETY: the features `two` is compiled for are present and the lengths equal (checked
    // above).
    unsafe { two(a, a_blocks, b, b_blocks) };
    true
}

/// One stream's working state in the layout `sha256rnds2` takes: ABEF and CDGH.
#[derive(Clone, Copy)]
struct Lane {
    abef: __m128i,
    cdgh: __m128i,
    /// The last four quad-words of the message schedule, `w[j % 4]` for quad-round `j`.
    w: [__m128i; 4],
}

#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
unsafe fn load_state(state: &[u32; 8]) -> Lane {
    let p = state.as_ptr().cast::<__m128i>();
    // SAFETY: `state` is 32 readable bytes; unaligned loads.
    let (dcba, hgfe) = unsafe { (_mm_loadu_si128(p), _mm_loadu_si128(p.add(1))) };
    let cdab = _mm_shuffle_epi32(dcba, 0xB1);
    let efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    Lane {
        abef: _mm_alignr_epi8(cdab, efgh, 8),
        cdgh: _mm_blend_epi16(efgh, cdab, 0xF0),
        w: [_mm_setzero_si128(); 4],
    }
}

#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
unsafe fn store_state(lane: &Lane, state: &mut [u32; 8]) {
    let feba = _mm_shuffle_epi32(lane.abef, 0x1B);
    let dchg = _mm_shuffle_epi32(lane.cdgh, 0xB1);
    let dcba = _mm_blend_epi16(feba, dchg, 0xF0);
    let hgef = _mm_alignr_epi8(dchg, feba, 8);
    let p = state.as_mut_ptr().cast::<__m128i>();
    // SAFETY: `state` is 32 writable bytes; unaligned stores.
    unsafe {
        _mm_storeu_si128(p, dcba);
        _mm_storeu_si128(p.add(1), hgef);
    }
}

/// Message words are big-endian; this shuffle swaps each 32-bit word's bytes.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
fn byte_swap() -> __m128i {
    _mm_set_epi64x(0x0c0d_0e0f_0809_0a0b, 0x0405_0607_0001_0203)
}

/// Quad-round `J` (rounds 4J..4J+4) of one lane over the block at `block`: the schedule's
/// next quad-word (loaded for J < 4, derived after), then two `sha256rnds2`.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
#[inline]
unsafe fn quad<const J: usize>(lane: &mut Lane, block: *const __m128i, swap: __m128i) {
    let w = if J < 4 {
        // SAFETY: the caller passes a pointer to a whole 64-byte block.
        _mm_shuffle_epi8(unsafe { _mm_loadu_si128(block.add(J)) }, swap)
    } else {
        let w4 = lane.w[J % 4];
        let w3 = lane.w[(J + 1) % 4];
        let w2 = lane.w[(J + 2) % 4];
        let w1 = lane.w[(J + 3) % 4];
        let partial = _mm_add_epi32(_mm_sha256msg1_epu32(w4, w3), _mm_alignr_epi8(w1, w2, 4));
        _mm_sha256msg2_epu32(partial, w1)
    };
    lane.w[J % 4] = w;
    // SAFETY: `K` has 64 entries and J < 16.
    let k = unsafe { _mm_loadu_si128(K.as_ptr().add(4 * J).cast::<__m128i>()) };
    let wk = _mm_add_epi32(w, k);
    lane.cdgh = _mm_sha256rnds2_epu32(lane.cdgh, lane.abef, wk);
    lane.abef = _mm_sha256rnds2_epu32(lane.abef, lane.cdgh, _mm_shuffle_epi32(wk, 0x0E));
}

/// The sixteen quad-rounds of one block, for each lane named, interleaved quad by quad.
macro_rules! block_rounds {
    ($swap:expr; $(($lane:expr, $ptr:expr)),+) => {
        block_rounds!(@quads $swap; [$(($lane, $ptr)),+]; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@quads $swap:expr; $lanes:tt; $($j:literal)+) => {
        $( block_rounds!(@one $swap; $lanes; $j); )+
    };
    (@one $swap:expr; [$(($lane:expr, $ptr:expr)),+]; $j:literal) => {
        // SAFETY: each pointer is at a whole 64-byte block; features as the caller's.
        $( unsafe { quad::<$j>($lane, $ptr, $swap) }; )+
    };
}

/// # Safety
/// The CPU must have SHA, SSE2, SSSE3 and SSE4.1; `blocks.len()` a multiple of 64.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
pub(super) unsafe fn one(state: &mut [u32; 8], blocks: &[u8]) {
    let swap = byte_swap();
    // SAFETY: features as required by this function's contract.
    let mut lane = unsafe { load_state(state) };
    for block in blocks.chunks_exact(BLOCK) {
        let (abef, cdgh) = (lane.abef, lane.cdgh);
        let p = block.as_ptr().cast::<__m128i>();
        block_rounds!(swap; (&mut lane, p));
        lane.abef = _mm_add_epi32(lane.abef, abef);
        lane.cdgh = _mm_add_epi32(lane.cdgh, cdgh);
    }
    // SAFETY: as above.
    unsafe { store_state(&lane, state) };
}

/// # Safety
/// As [`one`]; `a_blocks` and `b_blocks` of equal length.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
pub(super) unsafe fn two(a: &mut [u32; 8], a_blocks: &[u8], b: &mut [u32; 8], b_blocks: &[u8]) {
    let swap = byte_swap();
    // SAFETY: features as required by this function's contract.
    let (mut la, mut lb) = unsafe { (load_state(a), load_state(b)) };
    for (ba, bb) in a_blocks
        .chunks_exact(BLOCK)
        .zip(b_blocks.chunks_exact(BLOCK))
    {
        let saved = (la.abef, la.cdgh, lb.abef, lb.cdgh);
        let (pa, pb) = (ba.as_ptr().cast::<__m128i>(), bb.as_ptr().cast::<__m128i>());
        block_rounds!(swap; (&mut la, pa), (&mut lb, pb));
        la.abef = _mm_add_epi32(la.abef, saved.0);
        la.cdgh = _mm_add_epi32(la.cdgh, saved.1);
        lb.abef = _mm_add_epi32(lb.abef, saved.2);
        lb.cdgh = _mm_add_epi32(lb.cdgh, saved.3);
    }
    // SAFETY: as above.
    unsafe {
        store_state(&la, a);
        store_state(&lb, b);
    }
}
