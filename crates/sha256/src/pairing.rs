//! A streaming SHA-256 that hashes two streams at once when two are waiting on one thread.
//!
//! Lanes on one runtime thread take turns: lane A's bytes arrive, then lane B's. Each
//! [`PairingSha256::update`] leaves its bytes *waiting* and offers its stream on the thread's
//! one-place exchange; the next update on that thread, from any other stream, takes the offer
//! and hashes both streams' waiting blocks in one interleaved pass ([`compress_two`]). A stream
//! hashes its oldest bytes alone once more than `WAIT_BUDGET` (512 KiB) wait, and everything
//! left at [`finish`], so a lone lane costs what a plain hasher costs, plus a lock.
//!
//! Order within a stream is kept: a stream's bytes are hashed front first, by whichever thread
//! holds the stream's lock. An offer whose stream is locked by another thread is simply not
//! paired (`try_lock`), never waited for.
//!
//! [`finish`]: PairingSha256::finish

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use bytes::{Buf, Bytes};

use crate::compress::{compress_one, compress_two, pairs_help, BLOCK, INITIAL_STATE};

/// Streaming SHA-256 over [`Bytes`] fed in order; see the module documentation.
pub struct PairingSha256 {
    stream: Arc<Mutex<Stream>>,
    /// Whether to defer and pair at all: false where the CPU gains nothing from pairs.
    pairing: bool,
}

/// Bytes a stream keeps waiting for a partner before it hashes the oldest alone. HTTP/1.1
/// bodies arrive in pieces of about 200 KiB (hyper's read buffer), and a lane's body often
/// yields two or three in a row before another lane runs. Measured on loopback, 8 lanes on two
/// runtime threads: 128 KiB paired 55-61 % of the bytes, 512 KiB 92-97 %, 2 MiB no more.
const WAIT_BUDGET: usize = 512 << 10;

/// One stream's hashing state. Its unhashed bytes are `tail[..tail_len]` then `waiting` in
/// order; between calls either `waiting` is empty or the tail is empty and `waiting[0]` holds
/// at least a block (see [`Stream::settle`]).
struct Stream {
    state: [u32; 8],
    /// Bytes fed so far, hashed or not.
    len: u64,
    tail: [u8; BLOCK],
    tail_len: usize,
    waiting: VecDeque<Bytes>,
    /// Total length of `waiting`.
    waiting_len: usize,
}

thread_local! {
    /// The stream offered for pairing on this thread, if any.
    static OFFER: RefCell<Weak<Mutex<Stream>>> = const { RefCell::new(Weak::new()) };
}

static PAIRED_BYTES: AtomicU64 = AtomicU64::new(0);
static ALONE_BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's share of the counts above, so a test on its own thread sees its own.
    static THREAD_BYTES: std::cell::Cell<PairingStats> = const {
        std::cell::Cell::new(PairingStats { paired_bytes: 0, alone_bytes: 0 })
    };
}

fn count(paired: u64, alone: u64) {
    PAIRED_BYTES.fetch_add(paired, Ordering::Relaxed);
    ALONE_BYTES.fetch_add(alone, Ordering::Relaxed);
    // `try_with`: a hasher used while this thread's locals are being torn down still hashes.
    let _ = THREAD_BYTES.try_with(|c| {
        let mut s = c.get();
        s.paired_bytes += paired;
        s.alone_bytes += alone;
        c.set(s);
    });
}

/// Bytes hashed by every [`PairingSha256`] of this process so far, in pairs and alone (bytes
/// that pass through a stream's partial-block buffer are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PairingStats {
    pub paired_bytes: u64,
    pub alone_bytes: u64,
}

/// This process's [`PairingStats`] so far.
pub fn pairing_stats() -> PairingStats {
    PairingStats {
        paired_bytes: PAIRED_BYTES.load(Ordering::Relaxed),
        alone_bytes: ALONE_BYTES.load(Ordering::Relaxed),
    }
}

/// The [`PairingStats`] of the hashing done on the calling thread so far.
pub fn thread_pairing_stats() -> PairingStats {
    THREAD_BYTES
        .try_with(std::cell::Cell::get)
        .unwrap_or_default()
}

impl Default for PairingSha256 {
    fn default() -> Self {
        Self::new()
    }
}

impl PairingSha256 {
    pub fn new() -> Self {
        Self {
            stream: Arc::new(Mutex::new(Stream {
                state: INITIAL_STATE,
                len: 0,
                tail: [0; BLOCK],
                tail_len: 0,
                waiting: VecDeque::new(),
                waiting_len: 0,
            })),
            pairing: pairs_help(),
        }
    }

    /// Feed the next bytes. They may be hashed now, paired with another stream's later, or
    /// hashed by this stream's next `update` or `finish`; `data` is kept (not copied) until then.
    pub fn update(&mut self, data: Bytes) {
        let mut me = lock(&self.stream);
        me.len += data.len() as u64;
        me.waiting_len += data.len();
        me.waiting.push_back(data);
        me.settle();
        if !self.pairing {
            me.hash_alone(0);
            return;
        }
        while !me.front_blocks().is_empty() {
            if let Paired::No = self.pair_with_offer(&mut me) {
                break;
            }
        }
        me.hash_alone(WAIT_BUDGET);
        if !me.front_blocks().is_empty() {
            offer(&self.stream);
        }
    }

    /// The digest of everything fed.
    pub fn finish(self) -> [u8; 32] {
        let mut me = lock(&self.stream);
        while !me.front_blocks().is_empty() {
            if let Paired::No = self.pair_with_offer(&mut me) {
                break;
            }
        }
        me.hash_alone(0);
        let _ = OFFER.try_with(|o| {
            let mut o = o.borrow_mut();
            if std::ptr::eq(o.as_ptr(), Arc::as_ptr(&self.stream)) {
                *o = Weak::new();
            }
        });
        me.pad_and_finish()
    }

    /// Hash the whole blocks at the front of this stream's and the offered stream's waiting
    /// bytes, as many as both have, in one interleaved pass. What the other stream has left
    /// is offered again.
    fn pair_with_offer(&self, me: &mut Stream) -> Paired {
        let taken = OFFER.try_with(|o| std::mem::take(&mut *o.borrow_mut()).upgrade());
        let Some(other) = taken.ok().flatten() else {
            return Paired::No;
        };
        if Arc::ptr_eq(&other, &self.stream) {
            return Paired::No;
        }
        // Its owner holds it, on another thread: not ours to pair now.
        let Ok(mut them) = other.try_lock() else {
            return Paired::No;
        };
        let n = me.front_blocks().len().min(them.front_blocks().len());
        if n == 0 {
            return Paired::No;
        }
        let them = &mut *them;
        compress_two(
            &mut me.state,
            &me.waiting[0][..n],
            &mut them.state,
            &them.waiting[0][..n],
        );
        count(2 * n as u64, 0);
        me.consume(n);
        them.consume(n);
        if !them.front_blocks().is_empty() {
            offer(&other);
        }
        Paired::Yes
    }
}

enum Paired {
    Yes,
    No,
}

impl Stream {
    /// Restore the invariant: the tail is empty and the first waiting piece holds a whole
    /// block, or nothing waits. Bytes that straddle pieces go through the tail, hashed alone
    /// as the block they complete.
    fn settle(&mut self) {
        while let Some(front) = self.waiting.front_mut() {
            if self.tail_len == 0 && front.len() >= BLOCK {
                return;
            }
            let take = (BLOCK - self.tail_len).min(front.len());
            self.tail[self.tail_len..self.tail_len + take].copy_from_slice(&front[..take]);
            self.tail_len += take;
            front.advance(take);
            self.waiting_len -= take;
            if front.is_empty() {
                self.waiting.pop_front();
            }
            if self.tail_len == BLOCK {
                let block = self.tail;
                compress_one(&mut self.state, &block);
                self.tail_len = 0;
            }
        }
    }

    /// The whole blocks at the front of the waiting bytes (settled).
    fn front_blocks(&self) -> &[u8] {
        match self.waiting.front() {
            Some(front) if self.tail_len == 0 => &front[..front.len() / BLOCK * BLOCK],
            _ => &[],
        }
    }

    /// Drop `n` hashed bytes from the front and settle.
    fn consume(&mut self, n: usize) {
        if let Some(front) = self.waiting.front_mut() {
            front.advance(n);
            if front.is_empty() {
                self.waiting.pop_front();
            }
        }
        self.waiting_len -= n;
        self.settle();
    }

    /// Hash waiting bytes alone, oldest first, until no more than `keep` wait.
    fn hash_alone(&mut self, keep: usize) {
        while self.waiting_len > keep {
            let excess = (self.waiting_len - keep).div_ceil(BLOCK) * BLOCK;
            let n = self.front_blocks().len().min(excess);
            if n == 0 {
                break;
            }
            let front = &self.waiting[0];
            compress_one(&mut self.state, &front[..n]);
            count(0, n as u64);
            self.consume(n);
        }
    }

    /// FIPS 180-4 padding: 0x80, zeros, the length in bits, big-endian. Everything else has
    /// been hashed: only the tail remains.
    fn pad_and_finish(&mut self) -> [u8; 32] {
        debug_assert!(self.waiting.is_empty());
        let bits = self.len.wrapping_mul(8);
        let mut last = [0u8; 2 * BLOCK];
        last[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        last[self.tail_len] = 0x80;
        let end = if self.tail_len < BLOCK - 8 {
            BLOCK
        } else {
            2 * BLOCK
        };
        last[end - 8..end].copy_from_slice(&bits.to_be_bytes());
        compress_one(&mut self.state, &last[..end]);
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(self.state) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        out
    }
}

/// Offer `stream` on this thread's exchange (its bytes then wait for the next update here).
fn offer(stream: &Arc<Mutex<Stream>>) {
    let _ = OFFER.try_with(|o| *o.borrow_mut() = Arc::downgrade(stream));
}

fn lock(stream: &Mutex<Stream>) -> MutexGuard<'_, Stream> {
    // A panic inside a hash call leaves no half-updated invariant that matters more than the
    // digest it would then fail to match.
    stream.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use sha2::Digest as _;

    fn reference(data: &[u8]) -> [u8; 32] {
        sha2::Sha256::digest(data).into()
    }

    /// Feed `streams` of up to `max_len` bytes in random interleavings and random piece sizes
    /// on one thread, pairing on or off.
    fn interleaved(seed: u64, streams: usize, max_piece: usize, max_len: usize, pairing: bool) {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let data: Vec<Vec<u8>> = (0..streams)
            .map(|_| {
                let mut d = vec![0u8; rng.gen_range(0..max_len)];
                rng.fill(&mut d[..]);
                d
            })
            .collect();
        let mut hashers: Vec<_> = (0..streams)
            .map(|_| {
                let mut h = PairingSha256::new();
                h.pairing &= pairing;
                Some(h)
            })
            .collect();
        let mut fed = vec![0usize; streams];
        let mut done = vec![None; streams];
        while done.iter().any(Option::is_none) {
            let i = rng.gen_range(0..streams);
            if done[i].is_some() {
                continue;
            }
            if fed[i] == data[i].len() {
                done[i] = hashers[i].take().map(PairingSha256::finish);
                continue;
            }
            let n = rng.gen_range(0..=max_piece).min(data[i].len() - fed[i]);
            let piece = Bytes::copy_from_slice(&data[i][fed[i]..fed[i] + n]);
            if let Some(h) = hashers[i].as_mut() {
                h.update(piece);
            }
            fed[i] += n;
        }
        for (i, d) in done.into_iter().enumerate() {
            assert_eq!(
                d,
                Some(reference(&data[i])),
                "seed {seed}, stream {i} of {streams}"
            );
        }
    }

    #[test]
    fn interleaved_streams_hash_as_sha2_does() {
        let pieces = [1, 63, 64, 65, 1000, 70_000];
        for seed in 0..40 {
            let (streams, piece) = (1 + seed as usize % 5, pieces[seed as usize % 6]);
            interleaved(seed, streams, piece, 200_000, true);
        }
    }

    #[test]
    fn pieces_beyond_the_wait_budget_hash_as_sha2_does() {
        // Pieces of up to 300 KiB: more than WAIT_BUDGET waits, so the oldest bytes are hashed
        // alone while the newest wait.
        for seed in 0..6 {
            interleaved(seed, 2 + seed as usize % 3, 300 << 10, 3 << 20, true);
        }
    }

    #[test]
    fn without_pairs_the_digests_are_the_same() {
        for seed in 0..6 {
            interleaved(seed, 3, 70_000, 200_000, false);
        }
    }

    #[test]
    fn the_padding_edges_match() {
        for len in [0usize, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 129] {
            let data = vec![0xa5u8; len];
            let mut h = PairingSha256::new();
            h.update(Bytes::from(data.clone()));
            assert_eq!(h.finish(), reference(&data), "{len} bytes");
        }
    }

    #[test]
    fn two_streams_on_one_thread_are_hashed_in_pairs() {
        if !pairs_help() {
            eprintln!("skipped: this CPU has no SHA extensions, so nothing is paired");
            return;
        }
        let before = thread_pairing_stats().paired_bytes;
        let (a, b) = (vec![1u8; 1 << 20], vec![2u8; 1 << 20]);
        let (mut ha, mut hb) = (PairingSha256::new(), PairingSha256::new());
        for i in 0..16 {
            let r = i << 16..(i + 1) << 16;
            ha.update(Bytes::copy_from_slice(&a[r.clone()]));
            hb.update(Bytes::copy_from_slice(&b[r]));
        }
        assert_eq!(ha.finish(), reference(&a));
        assert_eq!(hb.finish(), reference(&b));
        assert_eq!(thread_pairing_stats().paired_bytes - before, 2 << 20);
    }

    #[test]
    fn streams_fed_from_several_threads_keep_their_order() {
        // Each stream is fed by whichever thread picks it, so offers on one thread point at
        // streams that another thread is updating.
        const PIECE: usize = 10_007;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(99);
        let data: Vec<Vec<u8>> = (0..6)
            .map(|_| {
                let mut d = vec![0u8; 40 * PIECE];
                rng.fill(&mut d[..]);
                d
            })
            .collect();
        let streams: Vec<_> = (0..6)
            .map(|_| Mutex::new((PairingSha256::new(), 0usize)))
            .collect();
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (data, streams) = (&data, &streams);
                s.spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(t);
                    for _ in 0..400 {
                        let i = rng.gen_range(0..6);
                        let mut slot = streams[i].lock().unwrap_or_else(PoisonError::into_inner);
                        let (h, next) = &mut *slot;
                        if *next < 40 {
                            h.update(Bytes::copy_from_slice(
                                &data[i][*next * PIECE..(*next + 1) * PIECE],
                            ));
                            *next += 1;
                        }
                    }
                });
            }
        });
        for (i, slot) in streams.into_iter().enumerate() {
            let (mut h, next) = slot.into_inner().unwrap_or_else(PoisonError::into_inner);
            for k in next..40 {
                h.update(Bytes::copy_from_slice(&data[i][k * PIECE..(k + 1) * PIECE]));
            }
            assert_eq!(h.finish(), reference(&data[i]), "stream {i}");
        }
    }
}
