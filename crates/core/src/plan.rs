//! How a resource of known size is cut into chunks: the unit of scheduling, verification and
//! resume.
//!
//! A plan is `chunk_size` pieces from the start, and, when tapered ([`ChunkPlan::tapered`]),
//! smaller pieces over the last [`TAPER_CHUNKS`] chunks' worth of bytes. Lanes take chunks in
//! order, so when the last chunk is handed out each lane still holds what it took last (two
//! chunks where it requests ahead); with uniform chunks the lanes then finish up to two chunk
//! times apart and the link idles in between, which measured 0.2-1.0 s of a 19 s download at
//! 1 Gbit/s × 50 ms (docs/results.md, "The tail"). The taper cuts what is left about sixteen
//! ways whatever the position in the tail: halves for the first 4 chunks' worth, quarters for
//! the next 2, eighths for the last 2.

use std::ops::Range;

/// Default chunk size: 16 MiB.
///
/// Trade-offs, at the design point of 8 lanes on 1 Gbit/s × 100 ms (125 Mbit/s per lane):
/// - each HTTP/1.1 request costs one idle round trip on its lane unless the next is requested
///   ahead, so a chunk must take much longer than one RTT to send: 16 MiB takes ~1.07 s per
///   lane;
/// - an interrupted transfer re-fetches at most `lanes × chunk_size` (128 MiB here);
/// - the tail is cut smaller ([`ChunkPlan::tapered`]), so the chunk size does not set how
///   unevenly the lanes finish;
/// - the per-chunk digest is checked once per chunk, so smaller chunks find corruption sooner.
pub const DEFAULT_CHUNK_SIZE: u64 = 16 << 20;

/// Smallest chunk accepted: below this, per-request overhead dominates.
pub const MIN_CHUNK_SIZE: u64 = 64 << 10;

/// A tapered plan's tail holds this many chunks' worth of bytes.
pub const TAPER_CHUNKS: u64 = 8;

/// The tail's pieces are `chunk_size` divided by 2, 4, then 8 (`chunk_size >> 1..=3`), none
/// below [`MIN_CHUNK_SIZE`]: at the default 16 MiB the smallest, 2 MiB, still takes longer to
/// send than a 100 ms round trip at 125 Mbit/s per lane, so requesting ahead hides the request.
const TAPER_STEPS: u32 = 3;

/// Index of a chunk in a [`ChunkPlan`].
pub type ChunkIndex = u32;

/// `[0, size)` cut into chunks: `chunk_size` pieces up to `tail_start`, the last of them
/// possibly shorter, then the taper's bands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPlan {
    size: u64,
    chunk_size: u64,
    /// Where the taper begins; `size` for a uniform plan.
    tail_start: u64,
}

/// A plan that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("chunk size {0} is below the minimum of {MIN_CHUNK_SIZE} bytes")]
    ChunkTooSmall(u64),
    #[error("a file of {size} bytes in chunks of {chunk_size} bytes makes more than 2^32 chunks")]
    TooManyChunks { size: u64, chunk_size: u64 },
}

/// One band of the tail: `[start, end)` in pieces of `piece` bytes, the last possibly shorter.
#[derive(Debug, Clone, Copy)]
struct Band {
    start: u64,
    end: u64,
    piece: u64,
}

impl Band {
    fn count(&self) -> u64 {
        (self.end - self.start).div_ceil(self.piece)
    }
}

impl ChunkPlan {
    /// `chunk_size` pieces throughout, the last possibly shorter.
    pub fn new(size: u64, chunk_size: u64) -> Result<Self, PlanError> {
        if chunk_size < MIN_CHUNK_SIZE {
            return Err(PlanError::ChunkTooSmall(chunk_size));
        }
        if size.div_ceil(chunk_size) > u64::from(u32::MAX) {
            return Err(PlanError::TooManyChunks { size, chunk_size });
        }
        Ok(Self {
            size,
            chunk_size,
            tail_start: size,
        })
    }

    /// As [`ChunkPlan::new`], with the last [`TAPER_CHUNKS`] × `chunk_size` bytes cut into
    /// smaller pieces (module documentation), when the file has at least as many bytes before
    /// them. A smaller file keeps equal chunks: its first chunk, `[0, chunk_size)` as the
    /// first request asked before the size was known, would still be streaming on its one
    /// lane after the small pieces were done, alone on the link at the pace of a share of it
    /// (one of two 24 MiB downloads at 100 Mbit/s × 20 ms took 2.9 s tapered from the second
    /// chunk on, against 2.3 s in equal chunks).
    pub fn tapered(size: u64, chunk_size: u64) -> Result<Self, PlanError> {
        let mut plan = Self::new(size, chunk_size)?;
        let tail = TAPER_CHUNKS.saturating_mul(chunk_size);
        if chunk_size >> 1 >= MIN_CHUNK_SIZE && size >= tail.saturating_mul(2) {
            plan.tail_start = size - tail;
        }
        if plan.count() > u64::from(u32::MAX) {
            return Err(PlanError::TooManyChunks { size, chunk_size });
        }
        Ok(plan)
    }

    /// [`ChunkPlan::tapered`] or [`ChunkPlan::new`], as a transfer's configuration (or its
    /// journal) says.
    pub fn with_taper(size: u64, chunk_size: u64, taper: bool) -> Result<Self, PlanError> {
        if taper {
            Self::tapered(size, chunk_size)
        } else {
            Self::new(size, chunk_size)
        }
    }

    /// One chunk covering the whole resource, for servers that do not accept ranges.
    pub fn whole(size: u64) -> Self {
        Self {
            size,
            chunk_size: size.max(1),
            tail_start: size,
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    /// Whether the tail is cut smaller ([`ChunkPlan::tapered`]); `false` also for a file too
    /// small to be tapered.
    pub fn is_tapered(&self) -> bool {
        self.tail_start < self.size
    }

    fn head_chunks(&self) -> u64 {
        self.tail_start.div_ceil(self.chunk_size)
    }

    /// The tail's bands in file order. Laid out from the end: the smallest pieces take the
    /// last two chunks' worth (sixteen of them), each larger size the two chunks' worth
    /// before, and the halves the rest; the band that meets `tail_start` is cut there.
    fn bands(&self) -> impl Iterator<Item = Band> + '_ {
        let steps = (1..=TAPER_STEPS)
            .take_while(|&k| self.chunk_size >> k >= MIN_CHUNK_SIZE)
            .count() as u32;
        let mut end = self.size;
        let mut bands = [None; TAPER_STEPS as usize];
        for k in (1..=steps).rev() {
            let piece = self.chunk_size >> k;
            let extent = match k {
                1 => u64::MAX,
                _ if k == steps => 16 * piece,
                _ => 8 * piece,
            };
            let start = end.saturating_sub(extent).max(self.tail_start);
            if start < end {
                bands[k as usize - 1] = Some(Band { start, end, piece });
            }
            end = start;
        }
        bands.into_iter().flatten()
    }

    fn count(&self) -> u64 {
        self.head_chunks() + self.bands().map(|b| b.count()).sum::<u64>()
    }

    pub fn chunk_count(&self) -> u32 {
        // Bounded by the checks in `new` and `tapered`, and 1 for `whole`.
        u32::try_from(self.count()).unwrap_or(u32::MAX)
    }

    /// The byte range of chunk `index`. Panics on an index outside the plan (a logic error).
    pub fn range(&self, index: ChunkIndex) -> Range<u64> {
        let index = u64::from(index);
        let head = self.head_chunks();
        if index < head {
            let start = index * self.chunk_size;
            return start..(start + self.chunk_size).min(self.tail_start);
        }
        let mut j = index - head;
        for band in self.bands() {
            let n = band.count();
            if j < n {
                let start = band.start + j * band.piece;
                return start..(start + band.piece).min(band.end);
            }
            j -= n;
        }
        panic!("chunk {index} outside a plan of {} bytes", self.size);
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

    /// Every range of `p` in order, checked to tile `[0, size)` without gap or overlap.
    fn tiles(p: &ChunkPlan) -> Vec<u64> {
        let mut next = 0;
        let mut lens = Vec::new();
        for i in 0..p.chunk_count() {
            let r = p.range(i);
            assert_eq!(r.start, next, "chunk {i} of {p:?}");
            assert!(r.end > r.start, "chunk {i} of {p:?} is empty");
            next = r.end;
            lens.push(r.end - r.start);
        }
        assert_eq!(next, p.size(), "{p:?}");
        lens
    }

    #[test]
    fn the_tail_is_cut_in_halves_quarters_and_eighths() {
        const C: u64 = 16 << 20;
        let p = ChunkPlan::tapered(128 * C, C).unwrap();
        assert!(p.is_tapered());
        let lens = tiles(&p);
        let mut want = vec![C; 120];
        want.extend([C / 2; 8]);
        want.extend([C / 4; 8]);
        want.extend([C / 8; 16]);
        assert_eq!(lens, want);
        // The same head as the uniform plan: a journal of either resumes those chunks.
        let uniform = ChunkPlan::new(128 * C, C).unwrap();
        assert!((0..120).all(|i| p.range(i) == uniform.range(i)));
    }

    #[test]
    fn a_tapered_plan_tiles_any_size_and_keeps_the_first_chunk_whole() {
        const C: u64 = 1 << 20;
        for size in [
            1,
            C - 1,
            C,
            C + 1,
            2 * C + 12_345,
            5 * C,
            9 * C - 7,
            9 * C,
            9 * C + 1,
            16 * C - 1,
            16 * C,
            16 * C + 1,
            37 * C + 999,
            1000 * C + 3,
        ] {
            let p = ChunkPlan::tapered(size, C).unwrap();
            let lens = tiles(&p);
            assert_eq!(p.range(0), 0..size.min(C), "size {size}");
            if !p.is_tapered() {
                assert_eq!(p, ChunkPlan::new(size, C).unwrap(), "size {size}");
            }
            assert!(
                lens.iter().all(|&l| l <= C),
                "size {size}: {lens:?} has a chunk above the chunk size"
            );
            // At most 32 pieces in the tail, beyond what the uniform plan has.
            let uniform = ChunkPlan::new(size, C).unwrap().chunk_count();
            assert!(p.chunk_count() <= uniform + 32, "size {size}");
            assert_eq!(p.is_tapered(), size >= 16 * C, "size {size}");
        }
        // A file longer than the tail has its first pieces in chunk-size order up to it.
        let p = ChunkPlan::tapered(1000 * C + 3, C).unwrap();
        assert_eq!(p.range(991), 991 * C..992 * C);
        assert_eq!(p.range(992), 992 * C..992 * C + 3);
        assert_eq!(p.len(993), C / 2);
    }

    #[test]
    fn pieces_never_fall_below_the_minimum() {
        // 128 KiB chunks halve once to the 64 KiB minimum and no further.
        let p = ChunkPlan::tapered(40 * 2 * MIN_CHUNK_SIZE, 2 * MIN_CHUNK_SIZE).unwrap();
        assert!(p.is_tapered());
        let lens = tiles(&p);
        assert!(lens.iter().all(|&l| l >= MIN_CHUNK_SIZE), "{lens:?}");
        assert_eq!(lens.iter().filter(|&&l| l == MIN_CHUNK_SIZE).count(), 16);
        // At the minimum itself there is nothing to taper.
        let p = ChunkPlan::tapered(40 * MIN_CHUNK_SIZE, MIN_CHUNK_SIZE).unwrap();
        assert!(!p.is_tapered());
        assert_eq!(
            p,
            ChunkPlan::new(40 * MIN_CHUNK_SIZE, MIN_CHUNK_SIZE).unwrap()
        );
    }

    #[test]
    fn a_tapered_plan_is_refused_where_the_uniform_one_is() {
        assert_eq!(ChunkPlan::tapered(1, 1), Err(PlanError::ChunkTooSmall(1)));
        assert!(ChunkPlan::tapered(u64::MAX, MIN_CHUNK_SIZE).is_err());
        // 2^32 - 1 chunks fit; the taper's extra pieces would not.
        let c = 2 * MIN_CHUNK_SIZE;
        let just = u64::from(u32::MAX) * c;
        assert!(ChunkPlan::new(just, c).is_ok());
        assert_eq!(
            ChunkPlan::tapered(just, c),
            Err(PlanError::TooManyChunks {
                size: just,
                chunk_size: c
            })
        );
        assert!(ChunkPlan::tapered(just / 2, c).is_ok());
    }
}
