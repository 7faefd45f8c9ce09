//! SHA-256 values of byte ranges a server has already sent with a `Content-Digest` trailer, so
//! the next request for the same range of the same content is answered without hashing it
//! again.
//!
//! Clients split a file into the same chunks every time (the chunk plan depends only on the
//! size and the chunk size), so a file fetched by many clients, or fetched again after a
//! failure, asks for the same ranges over and over; hashing each of them on every send costs a
//! server about 0.6 CPU seconds per GiB. A remembered digest describes the content as it was
//! when hashed: keys are [`ContentKey`]s (inode, size, mtime and ctime for files), so a file
//! that is rewritten gets new keys, and a range whose bytes differ from what was hashed (an
//! in-place change the stamps missed, a bad disk read) fails the client's check instead of
//! being vouched for.
//!
//! Entries are forgotten oldest first. Ranges shorter than a minimum are not kept: they are
//! cheap to hash, and a client asking for many tiny ranges must not push the chunk digests out.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

use xfer_core::Sha256Digest;

use crate::resource::{ContentKey, Resource};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RangeKey {
    content: ContentKey,
    start: u64,
    end: u64,
}

#[derive(Default)]
struct State {
    digests: HashMap<RangeKey, Sha256Digest>,
    /// Keys in insertion order, for eviction.
    order: VecDeque<RangeKey>,
}

/// A bounded map from (content, range) to the range's SHA-256.
pub(crate) struct RangeDigests {
    max_entries: usize,
    min_len: u64,
    state: Mutex<State>,
}

impl RangeDigests {
    /// Keep at most `max_entries` digests (0 keeps none) of ranges of at least `min_len` bytes.
    pub(crate) fn new(max_entries: usize, min_len: u64) -> Self {
        Self {
            max_entries,
            min_len,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Inserts and removals leave the map and the order consistent at every step.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wanted(&self, range: &Range<u64>) -> bool {
        self.max_entries > 0 && range.end > range.start && range.end - range.start >= self.min_len
    }

    pub(crate) fn get(&self, resource: &Resource, range: &Range<u64>) -> Option<Sha256Digest> {
        if !self.wanted(range) {
            return None;
        }
        let key = RangeKey {
            content: resource.content_key(),
            start: range.start,
            end: range.end,
        };
        self.lock().digests.get(&key).copied()
    }

    /// Remember `digest` for `range` of `resource`, if the file is still the one that was read.
    pub(crate) fn insert(&self, resource: &Resource, range: &Range<u64>, digest: Sha256Digest) {
        if !self.wanted(range) || resource.check_still_same().is_err() {
            return;
        }
        let key = RangeKey {
            content: resource.content_key(),
            start: range.start,
            end: range.end,
        };
        let mut st = self.lock();
        if st.digests.insert(key.clone(), digest).is_some() {
            return;
        }
        st.order.push_back(key);
        while st.order.len() > self.max_entries {
            if let Some(old) = st.order.pop_front() {
                st.digests.remove(&old);
            }
        }
    }

    /// Drop the digests of every content `gone` says no longer exists.
    pub(crate) fn forget(&self, gone: impl Fn(&ContentKey) -> bool) {
        let mut st = self.lock();
        st.digests.retain(|k, _| !gone(&k.content));
        st.order.retain(|k| !gone(&k.content));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().digests.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::SyntheticSpec;

    fn digest(b: u8) -> Sha256Digest {
        Sha256Digest::of(&[b])
    }

    #[test]
    fn remembers_per_content_and_range() {
        let ranges = RangeDigests::new(8, 10);
        let a = Resource::synthetic(SyntheticSpec { size: 100, seed: 1 });
        let b = Resource::synthetic(SyntheticSpec { size: 100, seed: 2 });
        ranges.insert(&a, &(0..50), digest(1));
        assert_eq!(ranges.get(&a, &(0..50)), Some(digest(1)));
        assert_eq!(ranges.get(&a, &(0..51)), None);
        assert_eq!(ranges.get(&a, &(1..50)), None);
        assert_eq!(ranges.get(&b, &(0..50)), None);
    }

    #[test]
    fn short_ranges_and_a_zero_capacity_keep_nothing() {
        let r = Resource::synthetic(SyntheticSpec { size: 100, seed: 1 });
        let ranges = RangeDigests::new(8, 10);
        ranges.insert(&r, &(0..9), digest(1));
        assert_eq!(ranges.get(&r, &(0..9)), None);
        ranges.insert(&r, &(5..5), digest(1));
        assert_eq!(ranges.len(), 0);
        let off = RangeDigests::new(0, 0);
        off.insert(&r, &(0..50), digest(1));
        assert_eq!(off.get(&r, &(0..50)), None);
    }

    #[test]
    fn oldest_entries_go_first() {
        let r = Resource::synthetic(SyntheticSpec {
            size: 1000,
            seed: 1,
        });
        let ranges = RangeDigests::new(3, 1);
        for i in 0..5u8 {
            let start = u64::from(i) * 10;
            ranges.insert(&r, &(start..start + 10), digest(i));
        }
        assert_eq!(ranges.len(), 3);
        assert_eq!(ranges.get(&r, &(0..10)), None);
        assert_eq!(ranges.get(&r, &(10..20)), None);
        assert_eq!(ranges.get(&r, &(40..50)), Some(digest(4)));
        // Re-inserting a known range neither duplicates it in the order nor evicts another.
        ranges.insert(&r, &(40..50), digest(4));
        assert_eq!(ranges.len(), 3);
        assert_eq!(ranges.get(&r, &(20..30)), Some(digest(2)));
    }

    #[test]
    fn a_rewritten_file_is_not_recorded_nor_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 100]).expect("write");
        let old = Resource::open(dir.path(), "/f", None).expect("open");
        let ranges = RangeDigests::new(8, 1);
        ranges.insert(&old, &(0..100), digest(1));
        assert_eq!(ranges.get(&old, &(0..100)), Some(digest(1)));
        // Another size too, so the change shows even where timestamps are coarse.
        std::fs::write(&path, vec![2u8; 120]).expect("rewrite");
        let new = Resource::open(dir.path(), "/f", None).expect("open");
        assert_eq!(ranges.get(&new, &(0..100)), None);
        // The old descriptor's file changed under it: what was read from it is not recorded.
        ranges.insert(&old, &(0..50), digest(3));
        assert_eq!(ranges.get(&old, &(0..50)), None);
    }
}
