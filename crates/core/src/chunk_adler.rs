//! The whole file's adler32 from its chunks' adler32 values, combined in file order.
//!
//! adler32 combines exactly (zlib's `adler32_combine`, see [`crate::checksum::adler32_combine`]):
//! the adler32 of `A ‖ B` follows from those of `A` and `B` and the length of `B`. So each lane
//! computes its chunk's adler32 while the bytes are in its cache, next to the chunk's SHA-256,
//! and the file's value is a few multiplications per chunk at the end instead of an in-order
//! pass over every byte on one thread.
//!
//! A chunk's value is the one its winning attempt computed over the bytes it received: the
//! same bytes the writer puts at that range (a retry or an end-game duplicate writes the whole
//! chunk again, and is sealed only when it won), and the same bytes a per-chunk SHA-256 is
//! computed over.

use crate::checksum::{Adler32Chain, Checksum};
use crate::plan::{ChunkIndex, ChunkPlan};

/// Per chunk, the adler32 of its final bytes once known.
#[derive(Debug, Clone)]
pub struct ChunkAdlers {
    values: Vec<Option<u32>>,
}

impl ChunkAdlers {
    pub fn new(plan: &ChunkPlan) -> Self {
        Self {
            values: vec![None; plan.chunk_count() as usize],
        }
    }

    /// `chunk`'s bytes are final and their adler32 is `value`; a later call (the chunk fetched
    /// again) replaces it.
    pub fn set(&mut self, chunk: ChunkIndex, value: u32) {
        if let Some(slot) = self.values.get_mut(chunk as usize) {
            *slot = Some(value);
        }
    }

    /// `chunk`'s bytes are no longer known good: it will be fetched again.
    pub fn clear(&mut self, chunk: ChunkIndex) {
        if let Some(slot) = self.values.get_mut(chunk as usize) {
            *slot = None;
        }
    }

    /// The whole file's adler32, or the first chunk with no value.
    pub fn combine(&self, plan: &ChunkPlan) -> Result<Checksum, ChunkIndex> {
        let mut chain = Adler32Chain::new();
        for chunk in 0..plan.chunk_count() {
            let value = self
                .values
                .get(chunk as usize)
                .copied()
                .flatten()
                .ok_or(chunk)?;
            let range = plan.range(chunk);
            chain.push(value, range.end - range.start);
        }
        Ok(chain.finish())
    }
}

#[cfg(test)]
mod tests {
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::checksum::{ChecksumAlgorithm, Checksummer};
    use crate::plan::MIN_CHUNK_SIZE;

    fn adler(data: &[u8]) -> u32 {
        let c = Checksummer::of(ChecksumAlgorithm::Adler32, data);
        u32::from_be_bytes(c.as_bytes().try_into().expect("4 bytes"))
    }

    #[test]
    fn chunks_completed_in_any_order_combine_to_the_whole_files_adler32() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(38);
        for _ in 0..24 {
            let size = rng.gen_range(0..3_000_000u64);
            let chunk = rng.gen_range(MIN_CHUNK_SIZE..=4 * MIN_CHUNK_SIZE);
            let data: Vec<u8> = (0..size).map(|_| rng.gen()).collect();
            // Tapered plans end in smaller chunks: lengths differ within one file.
            let plan = ChunkPlan::with_taper(size, chunk, rng.gen()).expect("plan");
            let mut order: Vec<ChunkIndex> = (0..plan.chunk_count()).collect();
            order.shuffle(&mut rng);
            let mut adlers = ChunkAdlers::new(&plan);
            for c in order {
                let r = plan.range(c);
                adlers.set(c, adler(&data[r.start as usize..r.end as usize]));
            }
            let whole = Checksummer::of(ChecksumAlgorithm::Adler32, &data);
            assert_eq!(
                adlers.combine(&plan),
                Ok(whole),
                "size {size}, chunk {chunk}"
            );
        }
    }

    #[test]
    fn a_refetched_chunk_replaces_its_value_and_a_missing_one_is_named() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 253) as u8).collect();
        let plan = ChunkPlan::new(data.len() as u64, MIN_CHUNK_SIZE).expect("plan");
        let mut adlers = ChunkAdlers::new(&plan);
        for c in 0..plan.chunk_count() {
            let r = plan.range(c);
            adlers.set(c, adler(&data[r.start as usize..r.end as usize]));
        }
        // A damaged copy of chunk 1 was recorded, then found bad and fetched again.
        adlers.set(1, adler(&[0u8; MIN_CHUNK_SIZE as usize]));
        assert_ne!(
            adlers.combine(&plan),
            Ok(Checksummer::of(ChecksumAlgorithm::Adler32, &data))
        );
        adlers.clear(1);
        assert_eq!(adlers.combine(&plan), Err(1));
        let r = plan.range(1);
        adlers.set(1, adler(&data[r.start as usize..r.end as usize]));
        assert_eq!(
            adlers.combine(&plan),
            Ok(Checksummer::of(ChecksumAlgorithm::Adler32, &data))
        );
    }
}
