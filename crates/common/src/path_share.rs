//! What one of a server's protocols measured of the path to a client, passed to the others.
//!
//! Both senders of `xfer serve` remember a client's path so that its next connection does
//! not pay slow start: the HTTP server over TCP (TCP resume, a BPF initial window) and the
//! QUIC server (Careful Resume). They measure the same path, from the same host to the same
//! client address, so what one learned serves the other: after an HTTP download, the same
//! client's first QUIC connection can start from the rate and RTT the TCP connections saw
//! instead of 14.7 KB. The receiving side validates as it does its own state (RTT check,
//! half the saved window at most, retreat on the first loss), so a path that changed in
//! between costs one retreat, never more than its own measurement would.
//!
//! ```text
//!  TCP resume: client's last connection closes ──publish(addr, rate, min RTT)──► PathShare
//!                                                                                  │ listeners
//!  QUIC Careful Resume ◄── PathCache::insert (BDP = rate × min RTT) ◄─────────────┘
//! ```

use std::net::IpAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// A client's path as a sender measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeasuredPath {
    /// Highest delivery rate to the client over all its connections at once, bytes per
    /// second.
    pub rate: u64,
    /// Smallest round-trip time seen.
    pub min_rtt: Duration,
}

impl MeasuredPath {
    /// The bandwidth-delay product, bytes (saturating).
    pub fn bdp(&self) -> u64 {
        let bdp = u128::from(self.rate) * self.min_rtt.as_nanos() / 1_000_000_000;
        u64::try_from(bdp).unwrap_or(u64::MAX)
    }
}

type Listener = Arc<dyn Fn(IpAddr, MeasuredPath) + Send + Sync>;

/// Where a server's protocols publish the paths they measured and hear of the others'.
/// Cheap to clone; clones share their listeners. The default has none, so publishing is a
/// no-op for a server that shares with nothing.
#[derive(Clone, Default)]
pub struct PathShare {
    listeners: Arc<RwLock<Vec<Listener>>>,
}

impl PathShare {
    /// Call `listener` with every path published from now on.
    pub fn subscribe(&self, listener: impl Fn(IpAddr, MeasuredPath) + Send + Sync + 'static) {
        self.listeners
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::new(listener));
    }

    /// Tell every listener what was measured of the path to `peer`.
    pub fn publish(&self, peer: IpAddr, path: MeasuredPath) {
        let listeners = self
            .listeners
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for l in listeners {
            l(peer, path);
        }
    }
}

impl std::fmt::Debug for PathShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.listeners.read().map_or(0, |l| l.len());
        f.debug_struct("PathShare").field("listeners", &n).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn every_listener_hears_what_is_published_after_it_subscribed() {
        let share = PathShare::default();
        let path = MeasuredPath {
            rate: 125_000_000,
            min_rtt: Duration::from_millis(200),
        };
        let peer: IpAddr = "10.77.0.2".parse().unwrap();
        share.publish(peer, path);
        let heard = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..2 {
            let h = heard.clone();
            share
                .clone()
                .subscribe(move |p, m| h.lock().unwrap().push((p, m)));
        }
        share.publish(peer, path);
        assert_eq!(*heard.lock().unwrap(), vec![(peer, path), (peer, path)]);
        assert_eq!(path.bdp(), 25_000_000);
    }
}
