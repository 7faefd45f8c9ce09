//! Written bytes kept in memory until the whole-file hasher reaches them.
//!
//! SHA-256 must see the file in order, and chunks are written out of order. Reading a sealed
//! chunk back from the part file is one more pass over memory for every byte: measured on a
//! 2-core host, the read-back cost the hash thread as much CPU as the hash itself (its source
//! pages are cold by then). So the writer keeps the bytes it writes (the same `Bytes` the lanes
//! received: no copy) up to a budget and hands a sealed chunk's bytes to the hasher with the
//! seal; a chunk it could not keep whole is read back as before. When the budget is spent,
//! bytes nearer the start of the file push out those further on: the hasher needs them first.
//!
//! What is kept is exactly what was written at those offsets: a later write over a range
//! forgets what was kept for it (an end-game duplicate's buffer over a loser's bytes, a retry
//! over a failed attempt's). With a budget of 0 every chunk is read back, which also checks
//! the bytes as the part file holds them.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::plan::ChunkIndex;

/// The least a kept piece is charged. A piece may hold on to a larger receive buffer than its
/// own length, and a peer that sends its body in tiny pieces must not be able to make the
/// writer keep millions of them: at 16 KiB a piece (a TLS record, a default HTTP/2 frame), a
/// 256 MiB budget keeps at most 16,384 pieces.
const MIN_CHARGE: u64 = 16 << 10;

fn charge(piece: &Bytes) -> u64 {
    (piece.len() as u64).max(MIN_CHARGE)
}

/// A chunk the writer has sealed, with its bytes when it kept all of them.
#[derive(Debug)]
pub struct Sealed {
    pub chunk: ChunkIndex,
    pub bytes: Option<KeptChunk>,
}

/// Bytes kept between the writer and the hasher, against one limit. Shared: the writer
/// claims, whoever drops a [`KeptChunk`] releases.
#[derive(Debug, Clone)]
pub struct Budget {
    limit: u64,
    used: Arc<AtomicU64>,
}

impl Budget {
    /// `limit` bytes; 0 keeps nothing.
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            used: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Bytes kept now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn try_claim(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|&t| t <= self.limit)
            })
            .is_ok()
    }

    fn release(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(n))
            });
    }
}

/// One chunk's bytes, in order and contiguous; releases its share of the budget when dropped.
#[derive(Debug)]
pub struct KeptChunk {
    pieces: Vec<Bytes>,
    len: u64,
    charged: u64,
    budget: Budget,
}

impl KeptChunk {
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for KeptChunk {
    fn drop(&mut self) {
        self.budget.release(self.charged);
    }
}

/// The writer's side: what it wrote and still keeps, by offset. Entries never overlap.
#[derive(Debug)]
pub struct Kept {
    pieces: BTreeMap<u64, Bytes>,
    budget: Budget,
}

impl Kept {
    pub fn new(budget: Budget) -> Self {
        Self {
            pieces: BTreeMap::new(),
            budget,
        }
    }

    /// `data` was written at `offset`: forget what was kept for that range, then keep `data`
    /// if the budget allows.
    pub fn wrote(&mut self, offset: u64, data: &Bytes) {
        if data.is_empty() {
            return;
        }
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return;
        };
        self.forget(offset..end);
        let n = charge(data);
        // The hasher goes in order: when the budget is spent, bytes further on than these are
        // worth less, so they make room (and will be read back instead).
        while !self.budget.try_claim(n) {
            match self.pieces.last_key_value() {
                Some((&s, _)) if s > offset => {
                    if let Some(b) = self.pieces.remove(&s) {
                        self.budget.release(charge(&b));
                    }
                }
                _ => return,
            }
        }
        self.pieces.insert(offset, data.clone());
    }

    /// Take the bytes of a sealed chunk: `Some` when every byte of `range` is kept, in order;
    /// otherwise what was kept of it is let go and the hasher reads the chunk back.
    pub fn take(&mut self, range: Range<u64>) -> Option<KeptChunk> {
        // A piece that starts before the range and reaches into it would leave a gap at the
        // start; entries are per attempt, within one chunk, so this only guards the logic.
        let straddles = self
            .pieces
            .range(..range.start)
            .next_back()
            .is_some_and(|(&s, b)| s + b.len() as u64 > range.start);
        let starts: Vec<u64> = self.pieces.range(range.clone()).map(|(&s, _)| s).collect();
        let mut pieces = Vec::with_capacity(starts.len());
        let mut at = range.start;
        let mut whole = !straddles;
        let (mut len, mut charged) = (0u64, 0u64);
        for s in starts {
            if let Some(b) = self.pieces.remove(&s) {
                whole &= s == at;
                at = s + b.len() as u64;
                len += b.len() as u64;
                charged += charge(&b);
                pieces.push(b);
            }
        }
        let chunk = KeptChunk {
            pieces,
            len,
            charged,
            budget: self.budget.clone(),
        };
        // Dropping `chunk` releases what it held.
        (whole && at == range.end && !range.is_empty()).then_some(chunk)
    }

    /// Forget whatever was kept inside `range`, keeping the parts of pieces outside it.
    fn forget(&mut self, range: Range<u64>) {
        let mut outside = Vec::new();
        // Entries do not overlap, so walking back from the last one that starts before the
        // range's end meets every one that overlaps it, and stops at the first that ends
        // before the range starts.
        while let Some((&s, b)) = self.pieces.range(..range.end).next_back() {
            let e = s + b.len() as u64;
            if e <= range.start {
                break;
            }
            let Some(b) = self.pieces.remove(&s) else {
                break;
            };
            self.budget.release(charge(&b));
            if s < range.start {
                outside.push((s, b.slice(..(range.start - s) as usize)));
            }
            if e > range.end {
                outside.push((range.end, b.slice((range.end - s) as usize..)));
            }
        }
        for (s, b) in outside {
            // Usually fits in what was just released; a trimmed piece under the least charge
            // may not, and is then let go.
            if self.budget.try_claim(charge(&b)) {
                self.pieces.insert(s, b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes and offsets below are in units of the least charge, so a piece is charged its
    /// length.
    const U: u64 = MIN_CHARGE;

    fn bytes(v: u8, units: u64) -> Bytes {
        Bytes::from(vec![v; (units * U) as usize])
    }

    fn wrote(kept: &mut Kept, at: u64, data: &Bytes) {
        kept.wrote(at * U, data);
    }

    fn take(kept: &mut Kept, r: Range<u64>) -> Option<KeptChunk> {
        kept.take(r.start * U..r.end * U)
    }

    fn flat(k: &KeptChunk) -> Vec<u8> {
        k.pieces().iter().flat_map(|b| b.iter().copied()).collect()
    }

    fn run(v: u8, units: u64) -> Vec<u8> {
        vec![v; (units * U) as usize]
    }

    #[test]
    fn a_chunk_written_in_pieces_comes_back_whole_and_releases_its_budget() {
        let budget = Budget::new(1000 * U);
        let mut kept = Kept::new(budget.clone());
        wrote(&mut kept, 100, &bytes(1, 10));
        wrote(&mut kept, 110, &bytes(2, 5));
        wrote(&mut kept, 200, &bytes(9, 50)); // another chunk
        assert_eq!(budget.used(), 65 * U);
        let k = take(&mut kept, 100..115).expect("all kept");
        assert_eq!(flat(&k), [run(1, 10), run(2, 5)].concat());
        assert_eq!(k.len(), 15 * U);
        assert_eq!(budget.used(), 65 * U, "held until hashed");
        drop(k);
        assert_eq!(budget.used(), 50 * U);
    }

    #[test]
    fn a_gap_means_read_back_and_lets_go_of_the_rest() {
        let budget = Budget::new(1000 * U);
        let mut kept = Kept::new(budget.clone());
        wrote(&mut kept, 0, &bytes(1, 10));
        wrote(&mut kept, 20, &bytes(1, 10));
        assert!(take(&mut kept, 0..30).is_none());
        assert_eq!(budget.used(), 0);
        // Short at the end.
        wrote(&mut kept, 0, &bytes(1, 10));
        assert!(take(&mut kept, 0..11).is_none());
        assert_eq!(budget.used(), 0);
        // An empty range is nothing to hash from memory.
        assert!(take(&mut kept, 5..5).is_none());
    }

    #[test]
    fn a_later_write_replaces_what_was_kept_for_its_range() {
        let budget = Budget::new(1000 * U);
        let mut kept = Kept::new(budget.clone());
        // A failed attempt's bytes, then a buffer over the middle of them.
        wrote(&mut kept, 0, &bytes(1, 30));
        wrote(&mut kept, 10, &bytes(7, 10));
        assert_eq!(budget.used(), 30 * U);
        let k = take(&mut kept, 0..30).expect("all kept");
        assert_eq!(flat(&k), [run(1, 10), run(7, 10), run(1, 10)].concat());
        drop(k);
        // A write across two kept pieces trims both.
        wrote(&mut kept, 0, &bytes(1, 10));
        wrote(&mut kept, 10, &bytes(2, 10));
        wrote(&mut kept, 5, &bytes(3, 10));
        let k = take(&mut kept, 0..20).expect("all kept");
        assert_eq!(flat(&k), [run(1, 5), run(3, 10), run(2, 5)].concat());
        drop(k);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn beyond_the_budget_nothing_more_is_kept() {
        let budget = Budget::new(25 * U);
        let mut kept = Kept::new(budget.clone());
        wrote(&mut kept, 0, &bytes(1, 10));
        wrote(&mut kept, 10, &bytes(1, 10));
        wrote(&mut kept, 20, &bytes(1, 10)); // over: not kept
        assert_eq!(budget.used(), 20 * U);
        assert!(take(&mut kept, 0..30).is_none());
        assert!(take(&mut kept, 0..20).is_none(), "taking let go of them");
        assert_eq!(budget.used(), 0);
        // Bytes nearer the start push out those further on, which the hasher needs later.
        wrote(&mut kept, 100, &bytes(1, 10));
        wrote(&mut kept, 110, &bytes(1, 10));
        wrote(&mut kept, 50, &bytes(2, 10));
        assert_eq!(budget.used(), 20 * U);
        assert!(take(&mut kept, 110..120).is_none(), "pushed out");
        assert!(take(&mut kept, 50..60).is_some());
        assert!(take(&mut kept, 100..110).is_some());
        // What the hasher holds cannot be pushed out: a write beyond the budget is not kept.
        let held = {
            wrote(&mut kept, 0, &bytes(3, 20));
            take(&mut kept, 0..20).expect("kept")
        };
        wrote(&mut kept, 30, &bytes(4, 10));
        assert!(take(&mut kept, 30..40).is_none());
        drop(held);
        // Nothing at all with a budget of 0.
        let mut none = Kept::new(Budget::new(0));
        wrote(&mut none, 0, &bytes(1, 10));
        assert!(take(&mut none, 0..10).is_none());
    }

    #[test]
    fn a_piece_reaching_into_the_chunk_from_before_is_a_gap() {
        let mut kept = Kept::new(Budget::new(1000 * U));
        wrote(&mut kept, 0, &bytes(1, 20));
        assert!(take(&mut kept, 10..20).is_none());
    }

    #[test]
    fn tiny_pieces_are_charged_the_least_charge_each() {
        let budget = Budget::new(4 * U);
        let mut kept = Kept::new(budget.clone());
        for i in 0..10u64 {
            kept.wrote(i, &Bytes::from_static(b"x"));
        }
        assert_eq!(budget.used(), 4 * U, "four one-byte pieces fill 4 units");
        assert!(kept.take(0..10).is_none());
        assert_eq!(budget.used(), 0);
        let k = {
            for i in 0..4u64 {
                kept.wrote(i, &Bytes::from_static(b"y"));
            }
            kept.take(0..4).expect("kept")
        };
        assert_eq!(flat(&k), b"yyyy");
        drop(k);
        assert_eq!(budget.used(), 0);
    }
}
