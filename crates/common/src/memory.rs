//! One memory budget for the bytes a server process holds on their way out: blocks read ahead
//! from disk (or generated), blocks waiting in an HTTP/2 or HTTP/1.1 send queue, blocks a QUIC
//! stream keeps until the peer acknowledges them.
//!
//! Every such block is a [`BudgetBuf`] frozen into [`Bytes`] whose owner returns its bytes to
//! the budget when the last reference goes away, wherever that happens (hyper, h2, quinn).
//! A reader that finds the budget spent waits, first come first served, instead of growing the
//! process. So the bytes of all blocks alive at once never exceed [`MemoryBudget::limit`],
//! however many connections and streams there are.
//!
//! Freed buffers are kept for the next block (allocated once, never fragmenting the heap of the
//! many blocking-pool threads that read); when nothing is borrowed any more the kept buffers are
//! freed and, with glibc, `malloc_trim` hands the pages back to the system, so resident memory
//! falls back after a burst instead of staying at its peak.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default budget: 512 MiB. Enough for about 680 responses at full speed with the default
/// 256 KiB blocks and one block of read-ahead, or a few QUIC connections each keeping a large
/// window of unacknowledged data in flight.
pub const DEFAULT_MEMORY_BUDGET: u64 = 512 << 20;

/// Smallest budget accepted: 1 MiB.
pub const MIN_MEMORY_BUDGET: u64 = 1 << 20;

/// Largest budget accepted: 1 TiB.
pub const MAX_MEMORY_BUDGET: u64 = 1 << 40;

/// The system gets idle memory back at most this often.
const TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// Bytes of outgoing blocks shared by every connection and stream of a server process. Cheap to
/// clone: clones share the budget.
#[derive(Clone)]
pub struct MemoryBudget {
    inner: Arc<Inner>,
}

struct Inner {
    limit: u64,
    /// One permit per byte.
    permits: Arc<Semaphore>,
    /// Buffers returned by blocks that ended, for the next blocks of the same length.
    pool: Mutex<Pool>,
    /// Milliseconds since `epoch` of the last trim.
    last_trim_ms: AtomicU64,
    /// A trim is scheduled.
    trim_pending: AtomicBool,
    epoch: Instant,
}

#[derive(Default)]
struct Pool {
    free: Vec<Vec<u8>>,
    bytes: u64,
}

/// Why a buffer could not be had.
#[derive(Debug, thiserror::Error)]
#[error("a block of {len} bytes does not fit a memory budget of {limit} bytes")]
pub struct BudgetError {
    pub len: usize,
    pub limit: u64,
}

impl fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("limit", &self.inner.limit)
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl Default for MemoryBudget {
    fn default() -> Self {
        Self::new(DEFAULT_MEMORY_BUDGET)
    }
}

/// Two configurations are equal when they share one budget.
impl PartialEq for MemoryBudget {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for MemoryBudget {}

impl MemoryBudget {
    /// A budget of `limit` bytes (clamped to what a semaphore can count; servers accept
    /// [`MIN_MEMORY_BUDGET`] to [`MAX_MEMORY_BUDGET`]).
    pub fn new(limit: u64) -> Self {
        let limit = limit.min(Semaphore::MAX_PERMITS as u64);
        Self {
            inner: Arc::new(Inner {
                limit,
                permits: Arc::new(Semaphore::new(limit as usize)),
                pool: Mutex::new(Pool::default()),
                last_trim_ms: AtomicU64::new(0),
                trim_pending: AtomicBool::new(false),
                epoch: Instant::now(),
            }),
        }
    }

    /// Bytes the budget allows at once.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// Bytes held by blocks alive now.
    pub fn in_use(&self) -> u64 {
        self.inner.limit - self.inner.permits.available_permits() as u64
    }

    /// A zeroed (or reused) buffer of `len` bytes, once the budget has room for it. Waits in
    /// line behind earlier callers; fails only when `len` alone exceeds the whole budget.
    pub async fn buffer(&self, len: usize) -> Result<BudgetBuf, BudgetError> {
        let too_big = BudgetError {
            len,
            limit: self.inner.limit,
        };
        let Ok(n) = u32::try_from(len) else {
            return Err(too_big);
        };
        if len as u64 > self.inner.limit {
            return Err(too_big);
        }
        let permit = match Arc::clone(&self.inner.permits).acquire_many_owned(n).await {
            Ok(p) => p,
            // The semaphore is never closed.
            Err(_) => return Err(too_big),
        };
        let buf = self.take_buffer(len);
        Ok(BudgetBuf {
            buf,
            permit: Some(permit),
            budget: self.clone(),
        })
    }

    /// A pooled buffer of exactly `len` bytes, or a new one. Kept buffers plus borrowed ones
    /// stay within the limit: kept ones of other lengths are freed to make room.
    fn take_buffer(&self, len: usize) -> Vec<u8> {
        let in_use = self.in_use();
        let mut pool = self.inner.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = pool.free.iter().rposition(|b| b.len() == len) {
            let buf = pool.free.swap_remove(i);
            pool.bytes -= len as u64;
            return buf;
        }
        while pool.bytes + in_use > self.inner.limit {
            let Some(old) = pool.free.pop() else { break };
            pool.bytes -= old.len() as u64;
        }
        drop(pool);
        vec![0u8; len]
    }

    /// A buffer comes back, to be reused; its permit is released by the caller right after.
    fn give_back(&self, buf: Vec<u8>) {
        let mut pool = self.inner.pool.lock().unwrap_or_else(|e| e.into_inner());
        pool.bytes += buf.len() as u64;
        pool.free.push(buf);
    }

    /// Nothing borrowed (checked after the last permit went back, so concurrent releases
    /// cannot each see the other's block): keep nothing, and let the allocator return the
    /// pages.
    fn release_if_idle(&self) {
        if self.in_use() != 0 {
            return;
        }
        let dropped = {
            let mut pool = self.inner.pool.lock().unwrap_or_else(|e| e.into_inner());
            pool.bytes = 0;
            std::mem::take(&mut pool.free)
        };
        drop(dropped);
        self.trim();
    }

    /// Return freed heap pages to the system, at most once per [`TRIM_INTERVAL`]: a request
    /// within the interval is deferred to its end rather than dropped, so the last burst's
    /// pages go back too. Runs on the blocking pool when there is a runtime.
    fn trim(&self) {
        if self.inner.trim_pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let now = self.inner.epoch.elapsed();
        let last = Duration::from_millis(self.inner.last_trim_ms.load(Ordering::Relaxed));
        let wait = (last + TRIM_INTERVAL).saturating_sub(now);
        let inner = Arc::clone(&self.inner);
        let run = move || {
            inner.trim_pending.store(false, Ordering::Release);
            let at = inner.epoch.elapsed().as_millis() as u64;
            inner.last_trim_ms.store(at, Ordering::Relaxed);
            release_free_heap();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    tokio::time::sleep(wait).await;
                    let _ = tokio::task::spawn_blocking(run).await;
                });
            }
            Err(_) => run(),
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_heap() {
    // SAFETY: malloc_trim only walks glibc's own arenas; it takes no pointers from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_heap() {}

/// A buffer lent by a [`MemoryBudget`]; its bytes count against the budget until it, or the
/// [`Bytes`] made of it, is dropped.
pub struct BudgetBuf {
    buf: Vec<u8>,
    permit: Option<OwnedSemaphorePermit>,
    budget: MemoryBudget,
}

impl BudgetBuf {
    /// Shareable bytes that keep the budget's share until the last clone is dropped.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl fmt::Debug for BudgetBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetBuf")
            .field("len", &self.buf.len())
            .finish()
    }
}

impl AsRef<[u8]> for BudgetBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Deref for BudgetBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl DerefMut for BudgetBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for BudgetBuf {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        self.budget.give_back(std::mem::take(&mut self.buf));
        drop(permit);
        self.budget.release_if_idle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn blocks_wait_for_room_and_return_it_when_dropped() {
        let budget = MemoryBudget::new(1 << 20);
        let a = budget.buffer(600 << 10).await.expect("fits").freeze();
        let clone = a.clone();
        assert_eq!(budget.in_use(), 600 << 10);
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.buffer(600 << 10).await.map(|b| b.len()) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "over the budget: it waits");
        drop(a);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a clone still holds the bytes");
        drop(clone);
        assert_eq!(waiting.await.expect("task").expect("fits"), 600 << 10);
        assert_eq!(budget.in_use(), 0, "the waiter's buffer was dropped too");
    }

    #[tokio::test]
    async fn a_block_larger_than_the_budget_is_an_error_not_a_hang() {
        let budget = MemoryBudget::new(1 << 20);
        let err = budget.buffer(2 << 20).await.expect_err("too big");
        assert_eq!(err.len, 2 << 20);
    }

    #[tokio::test]
    async fn kept_buffers_and_borrowed_ones_stay_within_the_limit() {
        let budget = MemoryBudget::new(1 << 20);
        let keep = budget.buffer(256 << 10).await.expect("fits");
        let mut old = Vec::new();
        for _ in 0..3 {
            old.push(budget.buffer(256 << 10).await.expect("fits"));
        }
        drop(old);
        // Three buffers kept for reuse; a block of another length frees them to make room.
        let other = budget.buffer(512 << 10).await.expect("fits");
        let pool = budget.inner.pool.lock().expect("pool").bytes;
        assert!(pool + budget.in_use() <= budget.limit(), "pool {pool}");
        drop((keep, other));
        assert_eq!(
            budget.inner.pool.lock().expect("pool").bytes,
            0,
            "idle: nothing kept"
        );
    }
}
