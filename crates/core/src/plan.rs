//! How a resource of known size is cut into chunks: the unit of scheduling, verification and
//! resume.

use std::ops::Range;

/// Default chunk size: 16 MiB.
///
/// Trade-offs, at the design point of 8 lanes on 1 Gbit/s × 100 ms (125 Mbit/s per lane):
/// - each HTTP/1.1 request costs one idle round trip on its lane (no pipelining), so a chunk
///   must take much longer than one RTT to send: 16 MiB takes ~1.07 s per lane, a 100 ms gap
///   costs ~9%; 64 MiB would cost ~2% but see below;
/// - an interrupted transfer re-fetches at most `lanes × chunk_size` (128 MiB here);
/// - the tail (end-game duplicates, buffered in memory) costs up to one chunk per idle lane;
/// - the per-chunk digest is checked once per chunk, so smaller chunks find corruption sooner.
pub const DEFAULT_CHUNK_SIZE: u64 = 16 << 20;

/// Smallest chunk accepted: below this, per-request overhead dominates.
pub const MIN_CHUNK_SIZE: u64 = 64 << 10;

/// Index of a chunk in a [`ChunkPlan`].
pub type ChunkIndex = u32;

/// `[0, size)` cut into `chunk_size` pieces, the last one possibly shorter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPlan {
    size: u64,
    chunk_size: u64,
}

/// A plan that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("chunk size {0} is below the minimum of {MIN_CHUNK_SIZE} bytes")]
    ChunkTooSmall(u64),
    #[error("a file of {size} bytes in chunks of {chunk_size} bytes makes more than 2^32 chunks")]
    TooManyChunks { size: u64, chunk_size: u64 },
}

impl ChunkPlan {
    pub fn new(size: u64, chunk_size: u64) -> Result<Self, PlanError> {
        if chunk_size < MIN_CHUNK_SIZE {
            return Err(PlanError::ChunkTooSmall(chunk_size));
        }
        if size.div_ceil(chunk_size) > u64::from(u32::MAX) {
            return Err(PlanError::TooManyChunks { size, chunk_size });
        }
        Ok(Self { size, chunk_size })
    }

    /// One chunk covering the whole resource, for servers that do not accept ranges.
    pub fn whole(size: u64) -> Self {
        Self {
            size,
            chunk_size: size.max(1),
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    pub fn chunk_count(&self) -> u32 {
        // Bounded by the check in `new` (and 1 for `whole`).
        u32::try_from(self.size.div_ceil(self.chunk_size)).unwrap_or(u32::MAX)
    }

    /// The byte range of chunk `index`. Panics on an index outside the plan (a logic error).
    pub fn range(&self, index: ChunkIndex) -> Range<u64> {
        let start = u64::from(index) * self.chunk_size;
        assert!(
            start < self.size,
            "chunk {index} outside a plan of {} bytes",
            self.size
        );
        start..(start + self.chunk_size).min(self.size)
    }

    pub fn len(&self, index: ChunkIndex) -> u64 {
        let r = self.range(index);
        r.end - r.start
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_exactly() {
        let p = ChunkPlan::new(10 * MIN_CHUNK_SIZE + 5, 3 * MIN_CHUNK_SIZE).unwrap();
        assert_eq!(p.chunk_count(), 4);
        let mut next = 0;
        for i in 0..p.chunk_count() {
            let r = p.range(i);
            assert_eq!(r.start, next);
            next = r.end;
        }
        assert_eq!(next, p.size());
        assert_eq!(p.len(3), MIN_CHUNK_SIZE + 5);
    }

    #[test]
    fn rejects_bad_plans() {
        assert_eq!(ChunkPlan::new(1, 1), Err(PlanError::ChunkTooSmall(1)));
        assert!(ChunkPlan::new(u64::MAX, MIN_CHUNK_SIZE).is_err());
        assert_eq!(
            ChunkPlan::new(0, MIN_CHUNK_SIZE).map(|p| p.chunk_count()),
            Ok(0)
        );
        assert_eq!(ChunkPlan::whole(0).chunk_count(), 0);
        assert_eq!(ChunkPlan::whole(5).chunk_count(), 1);
    }
}
