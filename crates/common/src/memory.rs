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
//!
//! # Fair shares
//!
//! One budget for everyone lets one client starve the others: a client that opens many HTTP/2
//! streams on large files and never reads (a zero or tiny flow-control window) makes each
//! stream hold its read-ahead and a block in the send queue until the stall timeout (60 s)
//! resets it, and every other request then waits, first come first served, behind the
//! abuser's queued requests. So the bytes are also counted per connection and per client
//! address, each with a ceiling, and a reserve is kept for connections holding little:
//!
//! | share | of the budget `B` | default (`B` = 512 MiB) |
//! |---|---|---|
//! | one connection ([`BudgetAccount`]) | `B / 8` | 64 MiB: a QUIC send window, or 16 HTTP/2 streams' 4 MiB send queues |
//! | one client address | `B / 4` | 128 MiB: 170 HTTP/1.1 responses' 3 blocks |
//! | reserve, only for a connection holding under [`RESERVE_FLOOR`] | `B / 8` | 64 MiB: 64 connections' first 1 MiB |
//!
//! A request waits at its connection's ceiling, then at its address's, and only then for the
//! shared bytes, so a client at its ceiling queues in its own line, never ahead of others in
//! the shared one. One address thus holds at most `B / 4`, and the other clients have `3 B / 4`
//! among them; it takes four addresses at their ceilings to fill the shared part, and even then
//! a connection's first [`RESERVE_FLOOR`] bytes come from the reserve. A block larger than a
//! ceiling takes the whole ceiling (one block at a time), so small budgets still serve.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
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

/// A connection holding less than this may take its next block from the reserve when the
/// shared part of the budget is spent: 1 MiB, a block being sent and one read ahead for two
/// streams at the default 256 KiB blocks.
pub const RESERVE_FLOOR: u64 = 1 << 20;

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
    /// One permit per byte of the shared part: `limit - reserve`.
    permits: Arc<Semaphore>,
    /// One permit per byte of the reserve, for connections holding under [`RESERVE_FLOOR`].
    reserve: Arc<Semaphore>,
    reserve_limit: u64,
    /// Each client address's share, while a connection of it holds an account.
    addresses: Mutex<HashMap<IpAddr, Weak<Ceiling>>>,
    /// Requests that found the shared part (and the reserve, where allowed) without room.
    shared_waits: AtomicU64,
    /// Requests that found their connection's or address's ceiling reached.
    ceiling_waits: AtomicU64,
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
        let reserve_limit = limit / 8;
        Self {
            inner: Arc::new(Inner {
                limit,
                permits: Arc::new(Semaphore::new((limit - reserve_limit) as usize)),
                reserve: Arc::new(Semaphore::new(reserve_limit as usize)),
                reserve_limit,
                addresses: Mutex::new(HashMap::new()),
                shared_waits: AtomicU64::new(0),
                ceiling_waits: AtomicU64::new(0),
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
        self.inner.limit
            - self.inner.permits.available_permits() as u64
            - self.inner.reserve.available_permits() as u64
    }

    /// How often requests waited, and for what.
    pub fn stats(&self) -> BudgetStats {
        BudgetStats {
            shared_waits: self.inner.shared_waits.load(Ordering::Relaxed),
            ceiling_waits: self.inner.ceiling_waits.load(Ordering::Relaxed),
        }
    }

    /// The share of one connection from `addr`: its blocks count against its own ceiling,
    /// its address's (shared with the address's other connections) and the budget.
    pub fn account(&self, addr: IpAddr) -> BudgetAccount {
        let address = {
            let mut map = self
                .inner
                .addresses
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match map.get(&addr).and_then(Weak::upgrade) {
                Some(a) => a,
                None => {
                    let a = Arc::new(Ceiling::new(
                        self.inner.limit / 4,
                        Some((addr, Arc::downgrade(&self.inner))),
                    ));
                    map.insert(addr, Arc::downgrade(&a));
                    a
                }
            }
        };
        BudgetAccount {
            budget: self.clone(),
            connection: Arc::new(Ceiling::new(self.inner.limit / 8, None)),
            address,
        }
    }

    /// A zeroed (or reused) buffer of `len` bytes, once the budget has room for it, counted
    /// against no connection. Waits in line behind earlier callers; fails only when `len`
    /// alone exceeds the whole budget.
    pub async fn buffer(&self, len: usize) -> Result<BudgetBuf, BudgetError> {
        self.lend(len, None).await
    }

    async fn lend(
        &self,
        len: usize,
        account: Option<&BudgetAccount>,
    ) -> Result<BudgetBuf, BudgetError> {
        let too_big = BudgetError {
            len,
            limit: self.inner.limit,
        };
        let Ok(n) = u32::try_from(len) else {
            return Err(too_big);
        };
        if len as u64 > self.inner.limit - self.inner.reserve_limit {
            return Err(too_big);
        }
        let mut ceilings = Vec::new();
        let mut floor = true;
        if let Some(account) = account {
            floor = account.in_use() < RESERVE_FLOOR;
            for ceiling in [&account.connection, &account.address] {
                let taken = ceiling.take(len, &self.inner.ceiling_waits).await;
                ceilings.push(taken.ok_or(BudgetError {
                    len,
                    limit: self.inner.limit,
                })?);
            }
        }
        let shared = Arc::clone(&self.inner.permits);
        let permit = match shared.clone().try_acquire_many_owned(n) {
            Ok(p) => p,
            Err(_) => {
                let reserve = Arc::clone(&self.inner.reserve);
                let from_reserve = if floor && account.is_some() {
                    reserve.clone().try_acquire_many_owned(n).ok()
                } else {
                    None
                };
                match from_reserve {
                    Some(p) => p,
                    None => {
                        self.inner.shared_waits.fetch_add(1, Ordering::Relaxed);
                        let acquired = if floor && account.is_some() {
                            tokio::select! {
                                p = shared.acquire_many_owned(n) => p,
                                p = reserve.acquire_many_owned(n) => p,
                            }
                        } else {
                            shared.acquire_many_owned(n).await
                        };
                        // The semaphores are never closed.
                        acquired.map_err(|_| too_big)?
                    }
                }
            }
        };
        let buf = self.take_buffer(len);
        Ok(BudgetBuf {
            buf,
            permit: Some(permit),
            ceilings,
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

/// How often requests for room waited, and for what (see [`MemoryBudget::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetStats {
    /// Requests that found the shared part of the budget spent: they waited for bytes other
    /// clients held. Stays 0 while every client keeps within its ceilings and the others
    /// leave room.
    pub shared_waits: u64,
    /// Requests that found their own connection's or address's ceiling reached: a client
    /// waiting for itself.
    pub ceiling_waits: u64,
}

/// A connection's or an address's part of a budget.
struct Ceiling {
    limit: u64,
    permits: Arc<Semaphore>,
    /// For an address: its key and the budget whose map names it, to leave the map with the
    /// last connection.
    address: Option<(IpAddr, Weak<Inner>)>,
}

impl Ceiling {
    fn new(limit: u64, address: Option<(IpAddr, Weak<Inner>)>) -> Self {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS as u64);
        Self {
            limit,
            permits: Arc::new(Semaphore::new(limit as usize)),
            address,
        }
    }

    fn in_use(&self) -> u64 {
        self.limit - self.permits.available_permits() as u64
    }

    /// Room for a block of `len` bytes, or the whole ceiling for a larger one (so a budget
    /// smaller than eight blocks still serves each connection one block at a time).
    /// `None` only if the semaphore were closed, which it never is.
    async fn take(&self, len: usize, waits: &AtomicU64) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from((len as u64).min(self.limit)).ok()?;
        let permits = Arc::clone(&self.permits);
        if let Ok(p) = permits.clone().try_acquire_many_owned(n) {
            return Some(p);
        }
        waits.fetch_add(1, Ordering::Relaxed);
        permits.acquire_many_owned(n).await.ok()
    }
}

impl Drop for Ceiling {
    fn drop(&mut self) {
        let Some((addr, inner)) = &self.address else {
            return;
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let mut map = inner.addresses.lock().unwrap_or_else(|e| e.into_inner());
        // A newer share for the same address may have taken the key already.
        if map.get(addr).is_some_and(|w| w.strong_count() == 0) {
            map.remove(addr);
        }
    }
}

tokio::task_local! {
    static ACCOUNT: BudgetAccount;
}

/// One connection's share of a [`MemoryBudget`] ([`MemoryBudget::account`]). Cheap to clone:
/// clones are the same connection. Blocks lent through it count against the connection's
/// ceiling (`B / 8`), its address's (`B / 4`) and the budget.
#[derive(Clone)]
pub struct BudgetAccount {
    budget: MemoryBudget,
    connection: Arc<Ceiling>,
    address: Arc<Ceiling>,
}

impl fmt::Debug for BudgetAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetAccount")
            .field("in_use", &self.in_use())
            .field("address_in_use", &self.address.in_use())
            .finish()
    }
}

impl BudgetAccount {
    /// The budget this account draws on.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Bytes this connection holds.
    pub fn in_use(&self) -> u64 {
        self.connection.in_use()
    }

    /// Bytes all connections of this address hold.
    pub fn address_in_use(&self) -> u64 {
        self.address.in_use()
    }

    /// As [`MemoryBudget::buffer`], counted against this connection and its address.
    pub async fn buffer(&self, len: usize) -> Result<BudgetBuf, BudgetError> {
        self.budget.lend(len, Some(self)).await
    }

    /// Run `fut` with this account as the task's current one: the blocks the streams created
    /// inside read ([`crate::resource::BlockStream`]) count against it. A server wraps each
    /// connection's (or stream's) task in it, so the request core needs no connection handle.
    pub fn scope<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        ACCOUNT.scope(self, fut)
    }

    /// [`BudgetAccount::scope`] for one synchronous call (a poll).
    pub fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        ACCOUNT.sync_scope(self.clone(), f)
    }

    /// The account in scope, if any.
    pub fn current() -> Option<Self> {
        ACCOUNT.try_with(Clone::clone).ok()
    }
}

use crate::sys::release_free_heap;

/// A buffer lent by a [`MemoryBudget`]; its bytes count against the budget until it, or the
/// [`Bytes`] made of it, is dropped.
pub struct BudgetBuf {
    buf: Vec<u8>,
    permit: Option<OwnedSemaphorePermit>,
    /// The connection's and the address's part, when lent to a [`BudgetAccount`].
    ceilings: Vec<OwnedSemaphorePermit>,
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
        self.ceilings.clear();
        drop(permit);
        self.budget.release_if_idle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits (at most 10 s) until `count` of the budget's stats reaches `n`: a block that has
    /// to wait counts itself just before it does, so this is the moment it is in line.
    async fn until_waiting(budget: &MemoryBudget, count: fn(&BudgetStats) -> u64, n: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while count(&budget.stats()) < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no block waiting after 10 s: {:?}",
                budget.stats()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

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
        until_waiting(&budget, |s| s.shared_waits, 1).await;
        assert!(!waiting.is_finished(), "over the budget: it waits");
        drop(a);
        // A window for the waiter to be served wrongly: nothing announces that it was not.
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
        // The shared part is 7/8 of the budget: room for three such blocks, not four.
        for _ in 0..2 {
            old.push(budget.buffer(256 << 10).await.expect("fits"));
        }
        drop(old);
        // Two buffers kept for reuse; a block of another length frees them to make room.
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

    #[tokio::test]
    async fn one_address_at_its_ceiling_waits_in_its_own_line() {
        // 8 MiB: a connection may hold 1 MiB, an address 2 MiB, the reserve is 1 MiB.
        let budget = MemoryBudget::new(8 << 20);
        let abuser = [0u8, 1].map(|_| budget.account(IpAddr::from([127, 0, 0, 2])));
        let mut held = Vec::new();
        for a in &abuser {
            for _ in 0..4 {
                held.push(a.buffer(256 << 10).await.expect("fits"));
            }
        }
        assert_eq!(abuser[0].address_in_use(), 2 << 20);
        // Both connections at their ceilings, the address at its own: a third connection of
        // the same address waits, and so does another block of the first.
        let third = budget.account(IpAddr::from([127, 0, 0, 2]));
        for waiting in [abuser[0].clone(), third] {
            let before = budget.stats().ceiling_waits;
            let w = tokio::spawn(async move { waiting.buffer(256 << 10).await.map(|b| b.len()) });
            until_waiting(&budget, |s| s.ceiling_waits, before + 1).await;
            assert!(!w.is_finished(), "over the ceiling: it waits");
            w.abort();
            let _ = w.await;
        }
        // Another address is served at once, from the shared part: it waited for nobody.
        let other = budget.account(IpAddr::from([127, 0, 0, 1]));
        let mine = other.buffer(256 << 10).await.expect("fits");
        let stats = budget.stats();
        assert_eq!(stats.shared_waits, 0, "{stats:?}");
        assert!(stats.ceiling_waits >= 2, "{stats:?}");
        drop((held, mine));
        assert_eq!(budget.in_use(), 0);
        assert_eq!(abuser[0].address_in_use(), 0);
    }

    #[tokio::test]
    async fn a_connection_holding_little_takes_from_the_reserve() {
        // 8 MiB: 7 MiB shared, 1 MiB reserve. Unaccounted blocks take the shared part.
        let budget = MemoryBudget::new(8 << 20);
        let hog = budget.buffer(7 << 20).await.expect("fits");
        let newcomer = budget.account(IpAddr::from([127, 0, 0, 3]));
        let first = tokio::time::timeout(Duration::from_secs(5), newcomer.buffer(256 << 10))
            .await
            .expect("served from the reserve")
            .expect("fits");
        assert_eq!(budget.in_use(), (7 << 20) + (256 << 10));
        assert_eq!(budget.stats().shared_waits, 0);
        drop((hog, first));
    }

    #[tokio::test]
    async fn a_block_larger_than_a_ceiling_takes_the_whole_ceiling() {
        // 1 MiB: a connection's ceiling is 128 KiB, an address's 256 KiB.
        let budget = MemoryBudget::new(1 << 20);
        let a = budget.account(IpAddr::from([127, 0, 0, 4]));
        let block = a.buffer(512 << 10).await.expect("one block at a time");
        assert_eq!(a.in_use(), 128 << 10);
        let next = tokio::spawn({
            let a = a.clone();
            async move { a.buffer(512 << 10).await.map(|b| b.len()) }
        });
        until_waiting(&budget, |s| s.ceiling_waits, 1).await;
        assert!(!next.is_finished(), "the second block waits for the first");
        drop(block);
        assert_eq!(next.await.expect("task").expect("fits"), 512 << 10);
    }

    #[tokio::test]
    async fn an_address_leaves_the_map_with_its_last_connection() {
        let budget = MemoryBudget::new(8 << 20);
        let a = budget.account(IpAddr::from([127, 0, 0, 5]));
        let b = budget.account(IpAddr::from([127, 0, 0, 5]));
        let addresses = || budget.inner.addresses.lock().expect("map").len();
        assert_eq!(addresses(), 1);
        drop(a);
        assert_eq!(addresses(), 1);
        drop(b);
        assert_eq!(addresses(), 0);
    }
}
