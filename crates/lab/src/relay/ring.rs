//! A byte ring holding packets between reading and delivery. Packets are released in the order
//! they were stored (delivery is FIFO per direction), so space is handed out and reclaimed like
//! a circular log: no allocation per packet, and each packet is contiguous so it can be read
//! into and written from in place.

/// Where one stored packet lives in the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) off: usize,
    pub(crate) len: usize,
}

#[derive(Debug)]
pub(crate) struct Ring {
    buf: Box<[u8]>,
    /// Start of the oldest stored packet.
    head: usize,
    /// One past the newest stored packet.
    tail: usize,
    /// Set when newer packets restarted at offset 0 while older ones still end at `wrap_end`.
    wrapped: bool,
    live: usize,
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            buf: vec![0u8; capacity].into_boxed_slice(),
            head: 0,
            tail: 0,
            wrapped: false,
            live: 0,
        }
    }

    /// Offset of `len` free contiguous bytes, without claiming them.
    pub(crate) fn reserve(&self, len: usize) -> Option<usize> {
        let cap = self.buf.len();
        if self.live == 0 {
            return (len <= cap).then_some(0);
        }
        if self.wrapped {
            return (self.head - self.tail >= len).then_some(self.tail);
        }
        if cap - self.tail >= len {
            Some(self.tail)
        } else if self.head >= len {
            Some(0)
        } else {
            None
        }
    }

    /// Claims `len` bytes at `off`, which [`Ring::reserve`] returned for at least `len` bytes.
    pub(crate) fn commit(&mut self, off: usize, len: usize) -> Span {
        if self.live == 0 {
            self.head = off;
            self.wrapped = false;
        } else if !self.wrapped && off < self.tail {
            self.wrapped = true;
        }
        self.tail = off + len;
        self.live += 1;
        Span { off, len }
    }

    /// Releases the oldest stored packet.
    pub(crate) fn release(&mut self, span: Span) {
        debug_assert!(self.live > 0);
        if self.wrapped && span.off < self.head {
            self.wrapped = false;
        }
        self.head = span.off + span.len;
        self.live -= 1;
        if self.live == 0 {
            self.head = 0;
            self.tail = 0;
            self.wrapped = false;
        }
    }

    pub(crate) fn slice(&self, span: Span) -> &[u8] {
        &self.buf[span.off..span.off + span.len]
    }

    pub(crate) fn slot_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        &mut self.buf[off..off + len]
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    #[test]
    fn fifo_use_never_overlaps_live_packets() {
        let mut ring = Ring::new(10_000);
        let mut live: VecDeque<(Span, u8)> = VecDeque::new();
        let mut rng = crate::rng::SplitMix64::new(3);
        for i in 0..50_000u32 {
            let len = 1 + rng.below_or_eq(1499) as usize;
            let fill = (i % 251) as u8;
            if rng.below_or_eq(2) > 0 {
                if let Some(off) = ring.reserve(len) {
                    ring.slot_mut(off, len).fill(fill);
                    live.push_back((ring.commit(off, len), fill));
                    continue;
                }
            }
            if let Some((span, fill)) = live.pop_front() {
                assert!(
                    ring.slice(span).iter().all(|&b| b == fill),
                    "corrupted at {i}"
                );
                ring.release(span);
            }
        }
    }

    #[test]
    fn full_ring_refuses() {
        let mut ring = Ring::new(3000);
        let a = ring.commit(0, 1500);
        let off = ring.reserve(1500).unwrap_or(usize::MAX);
        assert_eq!(off, 1500);
        ring.commit(off, 1500);
        assert_eq!(ring.reserve(1), None);
        ring.release(a);
        assert_eq!(ring.reserve(1500), Some(0));
        assert_eq!(ring.reserve(1501), None);
    }
}
