//! Who gets a connection slot, for every server codec (HTTP over TCP and `xfer/1` over QUIC
//! share one policy and the same `--max-connections` flags; each server keeps its own slots).
//!
//! Slots are limited in all (`max_connections`) and per client address
//! (`max_connections_per_address`), so one host cannot take them all. When the server is
//! full, a connection that has moved no bytes for [`IDLE_FOR_EVICTION`] (a keep-alive
//! connection between requests, or one that never sent a request) is asked to close so the
//! newcomer can be served; only when every slot is busy is the newcomer refused. How a
//! refusal is told is the codec's: HTTP answers 503 with `Retry-After` from a small pool of
//! [`REFUSAL_SLOTS`] (beyond it, closed at accept); QUIC refuses the handshake before it
//! holds any connection state.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use xfer_common::metrics;

/// A connection that moved no bytes for this long may be closed to make room.
pub const IDLE_FOR_EVICTION: Duration = Duration::from_secs(2);
/// Connections kept open at once only to be told 503.
pub const REFUSAL_SLOTS: usize = 64;

/// What happens to a new connection.
#[derive(Debug)]
pub enum Admit {
    /// Serve it; the ticket frees the slot when dropped.
    Serve(Ticket),
    /// Answer 503 and close; `why` for the log.
    Refuse(&'static str),
}

#[derive(Debug)]
struct Conn {
    addr: IpAddr,
    progress: Arc<AtomicU64>,
    /// Progress when last sampled, and since when it has been that.
    seen: (u64, Instant),
    evict: CancellationToken,
    evicting: bool,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    conns: HashMap<u64, Conn>,
    per_address: HashMap<IpAddr, usize>,
}

/// The server's slots.
#[derive(Debug)]
pub struct Admission {
    /// Index in [`xfer_common::metrics::TRANSPORTS`], for the metrics.
    transport: usize,
    max_total: usize,
    max_per_address: usize,
    state: Mutex<State>,
}

/// A held slot.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    id: u64,
    /// Cancelled when the server wants this idle connection closed.
    pub evict: CancellationToken,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.admission.lock();
        if let Some(c) = s.conns.remove(&self.id) {
            if let Some(n) = s.per_address.get_mut(&c.addr) {
                *n -= 1;
                if *n == 0 {
                    s.per_address.remove(&c.addr);
                }
            }
        }
    }
}

impl Admission {
    /// At most `max_total` connections, `max_per_address` of them from one address (both at
    /// least 1), over TCP.
    pub fn new(max_total: usize, max_per_address: usize) -> Arc<Self> {
        Self::with_transport(0, max_total, max_per_address)
    }

    /// As [`Admission::new`], for QUIC connections.
    pub fn new_quic(max_total: usize, max_per_address: usize) -> Arc<Self> {
        Self::with_transport(1, max_total, max_per_address)
    }

    fn with_transport(transport: usize, max_total: usize, max_per_address: usize) -> Arc<Self> {
        Arc::new(Self {
            transport,
            max_total: max_total.max(1),
            max_per_address: max_per_address.max(1),
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Decide for a connection from `addr` whose bytes are counted in `progress`.
    pub fn admit(self: &Arc<Self>, addr: IpAddr, progress: Arc<AtomicU64>) -> Admit {
        let now = Instant::now();
        let mut s = self.lock();
        if s.per_address.get(&addr).copied().unwrap_or(0) >= self.max_per_address {
            metrics::global().count_refusal(self.transport, 0);
            return Admit::Refuse("per-address connection limit");
        }
        // Connections already asked to close still count until they have: the total stays
        // bounded by the limit plus those on their way out.
        let evicting = s.conns.values().filter(|c| c.evicting).count();
        if s.conns.len() - evicting >= self.max_total {
            let idle = s
                .conns
                .values_mut()
                .filter(|c| !c.evicting)
                .filter_map(|c| {
                    let now_seen = c.progress.load(Ordering::Relaxed);
                    if now_seen != c.seen.0 {
                        c.seen = (now_seen, now);
                    }
                    let quiet = now.duration_since(c.seen.1);
                    (quiet >= IDLE_FOR_EVICTION).then_some((quiet, c))
                })
                .max_by_key(|(quiet, _)| *quiet);
            match idle {
                Some((_, c)) => {
                    c.evicting = true;
                    c.evict.cancel();
                }
                None => {
                    metrics::global().count_refusal(self.transport, 1);
                    return Admit::Refuse("connection limit, every connection busy");
                }
            }
        }
        let id = s.next;
        s.next += 1;
        let evict = CancellationToken::new();
        let seen = (progress.load(Ordering::Relaxed), now);
        s.conns.insert(
            id,
            Conn {
                addr,
                progress,
                seen,
                evict: evict.clone(),
                evicting: false,
            },
        );
        *s.per_address.entry(addr).or_insert(0) += 1;
        Admit::Serve(Ticket {
            admission: Arc::clone(self),
            id,
            evict,
        })
    }

    /// Note which connections moved bytes: an idle one is one whose count stood still since
    /// an earlier look. Called periodically so idleness is known when the server fills up.
    pub fn sample(&self) {
        let now = Instant::now();
        let mut s = self.lock();
        for c in s.conns.values_mut() {
            let v = c.progress.load(Ordering::Relaxed);
            if v != c.seen.0 {
                c.seen = (v, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn per_address_and_total_limits() {
        let a = Admission::new(3, 2);
        let p = || Arc::new(AtomicU64::new(0));
        let t1 = a.admit(ip(1), p());
        let t2 = a.admit(ip(1), p());
        assert!(matches!(t1, Admit::Serve(_)) && matches!(t2, Admit::Serve(_)));
        assert!(matches!(a.admit(ip(1), p()), Admit::Refuse(_)));
        let t3 = a.admit(ip(2), p());
        assert!(matches!(t3, Admit::Serve(_)));
        // Full, and nobody has been idle long enough to be asked to leave.
        assert!(matches!(a.admit(ip(3), p()), Admit::Refuse(_)));
        drop(t1);
        assert!(matches!(a.admit(ip(3), p()), Admit::Serve(_)));
    }

    #[test]
    fn an_idle_connection_makes_room() {
        let a = Admission::new(1, 8);
        let busy = Arc::new(AtomicU64::new(0));
        let Admit::Serve(first) = a.admit(ip(1), Arc::clone(&busy)) else {
            panic!("first connection refused");
        };
        // Pretend it has been quiet for longer than the eviction threshold.
        a.lock()
            .conns
            .values_mut()
            .for_each(|c| c.seen.1 -= IDLE_FOR_EVICTION * 2);
        assert!(matches!(
            a.admit(ip(2), Arc::new(AtomicU64::new(0))),
            Admit::Serve(_)
        ));
        assert!(
            first.evict.is_cancelled(),
            "the idle connection was not asked to close"
        );
    }
}
