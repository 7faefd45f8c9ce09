//! The running feature (Linux): the map, the linked program, and the per-peer measurements.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use xfer_common::metrics::{self, TcpResumeEvent};
use xfer_common::path_share::{MeasuredPath, PathShare};

use super::{cgroup, PathMeasurement, SavedTcpPath, TcpResumeConfig};
use crate::sys::bpf;
use crate::sys::monotonic_ns;

/// The running feature: the map, the linked program and what open connections measure.
#[derive(Debug)]
pub struct TcpResume {
    map: bpf::PathMap,
    _attached: bpf::Attached,
    cfg: TcpResumeConfig,
    peers: Mutex<HashMap<Ipv6Addr, Peer>>,
    next_id: AtomicU64,
    /// Hears every path measured, for the process's other senders.
    share: PathShare,
}

/// What a peer's open connections measured in this busy period.
#[derive(Debug, Default)]
struct Peer {
    /// Latest delivery rate per open connection, bytes per second.
    rates: HashMap<u64, u64>,
    /// Largest sum of `rates` seen.
    best: u64,
    min_rtt_us: u32,
    mss: u32,
}

/// Key of a peer: IPv4 addresses mapped into IPv6, as the kernel program builds it.
fn key(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

impl TcpResume {
    /// Create the map, load the program for connections accepted on `port` and link it to
    /// this process's cgroup; every path measured is also published to `share`. Errors say
    /// which step failed (usually: not root).
    pub fn start(port: u16, cfg: &TcpResumeConfig, share: PathShare) -> io::Result<Arc<Self>> {
        cfg.validate().map_err(io::Error::other)?;
        let map = bpf::PathMap::create(cfg.max_paths)
            .map_err(|e| io::Error::new(e.kind(), format!("creating the path map: {e}")))?;
        let cgroup = cgroup::open_own()?;
        let attached = bpf::attach(&map, port, &cgroup)?;
        Ok(Arc::new(Self {
            map,
            _attached: attached,
            cfg: cfg.clone(),
            peers: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            share,
        }))
    }

    /// Start measuring an accepted connection (`socket`, read once here for the log).
    pub(crate) fn probe(self: &Arc<Self>, peer: IpAddr, socket: BorrowedFd<'_>) -> ConnProbe {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Some(s) = crate::tcp::path_sample(&socket).filter(|s| s.cwnd > 10) {
            tracing::debug!(%peer, cwnd = s.cwnd, "tcp resume: connection starts from the saved path");
            metrics::global().count_tcp_resume(TcpResumeEvent::Jump);
        }
        let peer = key(peer);
        self.lock().entry(peer).or_default().rates.insert(id, 0);
        ConnProbe {
            resume: Arc::clone(self),
            peer,
            id,
        }
    }

    /// What the kernel holds for `peer`.
    pub fn saved(&self, peer: IpAddr) -> io::Result<Option<SavedTcpPath>> {
        let now = monotonic_ns();
        Ok(self.map.get(&key(peer).octets())?.map(|v| SavedTcpPath {
            budget_segments: v.budget,
            rtt: Duration::from_micros(u64::from(v.rtt_us)),
            expires_in: Duration::from_nanos(v.expires_ns.saturating_sub(now)),
        }))
    }

    /// Save a path for `peer` now, as its last connection closing would: the next connection
    /// from it may start with half the path's bandwidth-delay product (within `max_jump`).
    /// Returns the segments granted, 0 when the path is too small to be worth a jump.
    pub fn save(&self, peer: IpAddr, m: PathMeasurement) -> io::Result<u32> {
        let rtt_us = u32::try_from(m.rtt.as_micros()).unwrap_or(u32::MAX).max(1);
        let bdp = u128::from(m.rate) * u128::from(rtt_us) / 1_000_000;
        let jump = (bdp / 2).min(u128::from(self.cfg.max_jump));
        let segments = u32::try_from(jump / u128::from(m.mss.max(536))).unwrap_or(u32::MAX);
        if segments <= 10 {
            return Ok(0);
        }
        let value = bpf::MapValue {
            budget: segments,
            rtt_us,
            expires_ns: monotonic_ns().saturating_add(self.cfg.lifetime.as_nanos() as u64),
        };
        self.map.put(&key(peer).octets(), &value)?;
        tracing::debug!(%peer, rate = m.rate, rtt_us, segments, "tcp resume: path saved");
        metrics::global().count_tcp_resume(TcpResumeEvent::PathSaved);
        Ok(segments)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Ipv6Addr, Peer>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sample(&self, peer: Ipv6Addr, id: u64, s: crate::tcp::PathSample) {
        let mut peers = self.lock();
        let Some(p) = peers.get_mut(&peer) else {
            return;
        };
        p.rates.insert(id, s.delivery_rate);
        p.best = p.best.max(p.rates.values().sum());
        if s.min_rtt_us > 0 {
            p.min_rtt_us = if p.min_rtt_us == 0 {
                s.min_rtt_us
            } else {
                p.min_rtt_us.min(s.min_rtt_us)
            };
        }
        p.mss = p.mss.max(s.mss);
    }

    fn closed(&self, peer: Ipv6Addr, id: u64) {
        let done = {
            let mut peers = self.lock();
            let Some(p) = peers.get_mut(&peer) else {
                return;
            };
            p.rates.remove(&id);
            if !p.rates.is_empty() {
                return;
            }
            peers.remove(&peer)
        };
        let Some(p) = done else { return };
        if p.best == 0 || p.min_rtt_us == 0 || p.mss == 0 {
            return;
        }
        let m = PathMeasurement {
            rate: p.best,
            rtt: Duration::from_micros(u64::from(p.min_rtt_us)),
            mss: p.mss,
        };
        let ip = match peer.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(peer),
        };
        match self.save(ip, m) {
            // Too small a path to jump from (a connection that carried one small answer):
            // it must not replace what the other senders saved either.
            Ok(0) => {}
            Ok(_) => self.share.publish(
                ip,
                MeasuredPath {
                    rate: m.rate,
                    min_rtt: m.rtt,
                },
            ),
            Err(e) => tracing::debug!(%peer, error = %e, "tcp resume: saving the path failed"),
        }
    }
}

/// Measures one accepted connection while it sends (its I/O wrapper reads the socket every
/// [`super::SAMPLE_INTERVAL`]); tells the feature when it closes.
#[derive(Debug)]
pub(crate) struct ConnProbe {
    resume: Arc<TcpResume>,
    peer: Ipv6Addr,
    id: u64,
}

impl crate::server::io::SendPolicy for ConnProbe {
    fn sample(&mut self, path: crate::tcp::PathSample) {
        self.resume.sample(self.peer, self.id, path);
    }
}

impl Drop for ConnProbe {
    fn drop(&mut self) {
        self.resume.closed(self.peer, self.id);
    }
}
