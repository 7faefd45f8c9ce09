//! A test-only fault hook every xfer server honours: corrupt one byte on the wire *after* the
//! server computed its digest over the true bytes, so a client must notice the mismatch and
//! refetch.
//!
//! Servers expose it only as a `dangerous_fault` setting; it is never on by default.

use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::{Bytes, BytesMut};

/// Flip the byte at `corrupt_offset` in the first `corrupt_times` responses whose range covers
/// it. Shared between connections via `Arc`.
#[derive(Debug)]
pub struct FaultInjection {
    /// Offset within the resource of the byte to flip; `None` disables the hook.
    pub corrupt_offset: Option<u64>,
    /// How many responses to corrupt before behaving again.
    pub corrupt_times: u32,
    used: AtomicU32,
}

impl FaultInjection {
    pub fn new(corrupt_offset: Option<u64>, corrupt_times: u32) -> Self {
        Self {
            corrupt_offset,
            corrupt_times,
            used: AtomicU32::new(0),
        }
    }

    /// Called once per response: if this response covers the target byte and the budget is
    /// not spent, claims one use and returns the offset to corrupt.
    pub fn claim(&self, range: &Range<u64>) -> Option<u64> {
        let target = self.corrupt_offset?;
        if !range.contains(&target) {
            return None;
        }
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.corrupt_times).then_some(n + 1)
            })
            .ok()
            .map(|_| target)
    }

    /// How many responses were corrupted so far.
    pub fn times_used(&self) -> u32 {
        self.used.load(Ordering::Acquire)
    }
}

/// Flip (xor 0xff) the byte at resource offset `target` if `block`, which starts at resource
/// offset `block_offset`, contains it. Returns the block unchanged otherwise.
pub fn corrupt_block(block: Bytes, block_offset: u64, target: u64) -> Bytes {
    let Some(i) = target.checked_sub(block_offset) else {
        return block;
    };
    let Ok(i) = usize::try_from(i) else {
        return block;
    };
    if i >= block.len() {
        return block;
    }
    let mut copy = BytesMut::from(&block[..]);
    copy[i] ^= 0xff;
    copy.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_only_covering_ranges_and_only_n_times() {
        let f = FaultInjection::new(Some(100), 2);
        assert_eq!(f.claim(&(0..100)), None);
        assert_eq!(f.claim(&(101..200)), None);
        assert_eq!(f.claim(&(50..150)), Some(100));
        assert_eq!(f.claim(&(100..101)), Some(100));
        assert_eq!(f.claim(&(0..1000)), None);
        assert_eq!(f.times_used(), 2);
        assert_eq!(FaultInjection::new(None, 5).claim(&(0..10)), None);
    }

    #[test]
    fn corrupts_exactly_one_byte_in_the_right_block() {
        let block = Bytes::from_static(b"abcdef");
        assert_eq!(corrupt_block(block.clone(), 10, 9), block);
        assert_eq!(corrupt_block(block.clone(), 10, 16), block);
        let c = corrupt_block(block.clone(), 10, 12);
        let diff: Vec<usize> = (0..6).filter(|&i| c[i] != block[i]).collect();
        assert_eq!(diff, vec![2]);
        assert_eq!(c[2], b'c' ^ 0xff);
    }
}
