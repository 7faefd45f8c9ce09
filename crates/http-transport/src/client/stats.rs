//! Per-connection TCP statistics for the final report.
//!
//! Each socket is wrapped in a [`MeteredTcp`] that files a duplicate of its descriptor in a
//! shared [`SocketRecord`]. While the socket lives, `TCP_INFO` is read through the duplicate on
//! demand; when it is dropped, a last reading is taken and the duplicate closed first, so the
//! socket closes with the stream as it would without it. The record owns what it reads: no
//! raw descriptor is kept anywhere, and none can name a reused fd. A connection index (as
//! lanes report it) may see several sockets over a transfer (reconnects, redirects): counters
//! add up across them, gauges (RTT, cwnd) come from the newest.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use xfer_core::transport::ConnectionStats;

use crate::tcp::{tcp_info, AppliedTcp, TcpInfoSnapshot};

/// One socket's identity and its latest reading.
#[derive(Debug)]
pub(crate) struct SocketRecord {
    peer: String,
    applied: AppliedTcp,
    /// A duplicate of the socket's descriptor while the stream is open (`None` when the
    /// process was out of descriptors: the report then lacks this socket's figures).
    live: Option<OwnedFd>,
    last: Option<TcpInfoSnapshot>,
    /// Bytes received at the receive-window cap's last look, and when they last grew.
    cap_seen: u64,
    cap_active: Option<std::time::Instant>,
    /// The window clamp last set, bytes.
    cap_set: Option<u64>,
    /// When the cap first saw it receive (it is joining for `JOIN_RTTS` round trips after).
    cap_first: Option<std::time::Instant>,
    /// Start of its current delivery window: when, and bytes received by then.
    cap_mark: Option<(std::time::Instant, u64)>,
    /// Bytes it received over its last round trip.
    cap_delivered: u64,
    /// Packets it had received beyond a hole at the cap's last look, and the hole that count
    /// last grew in.
    cap_ooo: u32,
    cap_hole: Option<super::window::Hole>,
}

impl SocketRecord {
    /// Whether the SYN carried data the server acknowledged (TCP Fast Open); false once the
    /// socket is closed.
    pub fn syn_data_acked(&self) -> bool {
        self.live.as_ref().is_some_and(crate::tcp::syn_data_acked)
    }

    fn snapshot(&mut self) -> Option<TcpInfoSnapshot> {
        if let Some(fd) = &self.live {
            if let Some(s) = tcp_info(fd) {
                self.last = Some(s);
            }
        }
        self.last.clone()
    }
}

/// A TCP stream whose statistics stay readable from outside while hyper owns it.
#[derive(Debug)]
pub(crate) struct MeteredTcp {
    stream: TcpStream,
    record: Arc<Mutex<SocketRecord>>,
    /// Dropped with the socket ([`crate::AddressPolicy::connected`]).
    _watch: Option<crate::client::config::ConnectionWatch>,
}

impl MeteredTcp {
    pub fn new(stream: TcpStream, peer: String, applied: AppliedTcp) -> Self {
        let live = stream
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| tracing::debug!(%peer, error = %e, "no descriptor left to read TCP_INFO"))
            .ok();
        let record = Arc::new(Mutex::new(SocketRecord {
            peer,
            applied,
            live,
            last: None,
            cap_seen: 0,
            cap_active: None,
            cap_set: None,
            cap_first: None,
            cap_mark: None,
            cap_delivered: 0,
            cap_ooo: 0,
            cap_hole: None,
        }));
        Self {
            stream,
            record,
            _watch: None,
        }
    }

    /// Keep `watch` until the socket closes.
    pub fn watched(mut self, watch: Option<crate::client::config::ConnectionWatch>) -> Self {
        self._watch = watch;
        self
    }

    pub fn record(&self) -> Arc<Mutex<SocketRecord>> {
        self.record.clone()
    }
}

impl Drop for MeteredTcp {
    fn drop(&mut self) {
        let mut rec = lock(&self.record);
        rec.snapshot();
        rec.live = None;
    }
}

impl AsyncRead for MeteredTcp {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for MeteredTcp {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// All sockets the transport opened, grouped by connection index.
#[derive(Debug, Default)]
pub(crate) struct StatsRegistry {
    by_index: Mutex<Vec<Vec<Arc<Mutex<SocketRecord>>>>>,
}

impl StatsRegistry {
    pub fn register(&self, index: usize, record: Arc<Mutex<SocketRecord>>) {
        let mut all = lock(&self.by_index);
        if all.len() <= index {
            all.resize_with(index + 1, Vec::new);
        }
        all[index].push(record);
    }

    pub fn collect(&self) -> Vec<ConnectionStats> {
        let all = lock(&self.by_index);
        let mut out = Vec::new();
        for (index, records) in all.iter().enumerate() {
            let Some(newest) = records.last() else {
                continue;
            };
            let mut stats = ConnectionStats {
                index,
                ..ConnectionStats::default()
            };
            let mut retransmits = 0;
            let mut received = 0;
            let mut any_received = false;
            let mut out_of_order = None;
            for rec in records {
                if let Some(s) = lock(rec).snapshot() {
                    retransmits += s.retransmits;
                    if let Some(n) = s.rcv_ooopack {
                        out_of_order = Some(out_of_order.unwrap_or(0) + n);
                    }
                    if let Some(b) = s.bytes_received {
                        received += b;
                        any_received = true;
                    }
                }
            }
            let mut newest = lock(newest);
            stats.peer = newest.peer.clone();
            if let Some(s) = newest.snapshot() {
                stats.congestion = Some(s.congestion.clone()).filter(|c| !c.is_empty());
                stats.rtt_us = Some(s.rtt_us);
                stats.cwnd_bytes = Some(s.cwnd_bytes);
                stats.retransmits = Some(retransmits);
                stats.bytes_received = any_received.then_some(received);
                stats.send_buffer = Some(s.send_buffer);
                stats.recv_buffer = Some(s.recv_buffer);
                stats.out_of_order_packets = out_of_order;
            } else {
                stats.congestion = newest.applied.congestion.clone();
                stats.send_buffer = newest.applied.send_buffer;
                stats.recv_buffer = newest.applied.recv_buffer;
            }
            out.push(stats);
        }
        out
    }
}

impl StatsRegistry {
    /// The client's one sampler: read every open socket's `TCP_INFO` once, step the
    /// receive-window cap with those readings when `cap` is given ([`super::window`]: ask the
    /// policy, clamp the windows of the sockets that received since the last step), and
    /// return the totals the path memory counts from. Closed sockets count with their last
    /// reading.
    #[cfg(target_os = "linux")]
    pub fn sample(
        &self,
        cap: Option<&mut super::window::WindowPolicy>,
        now: std::time::Instant,
    ) -> ReceiveTotals {
        let all = lock(&self.by_index);
        let mut received = 0u64;
        let mut out_of_order = 0u64;
        let mut min_rtt_us = u32::MAX;
        let mut current_rtt_us = u32::MAX;
        let mut active = Vec::new();
        let mut app_limited = false;
        for rec in all.iter().flatten() {
            let mut r = lock(rec);
            let sample = r.live.as_ref().and_then(crate::tcp::path_sample);
            let (Some(sample), Some(fd)) = (sample, r.live.as_ref()) else {
                let last = r.last.as_ref();
                received += last.and_then(|s| s.bytes_received).unwrap_or(0);
                out_of_order += last.and_then(|s| s.rcv_ooopack).unwrap_or(0);
                let rtt = last.and_then(|s| s.min_rtt_us).filter(|&us| us > 0);
                min_rtt_us = min_rtt_us
                    .min(rtt.map_or(u32::MAX, |us| u32::try_from(us).unwrap_or(u32::MAX)));
                continue;
            };
            let (bytes, rtt, rcv_rtt) =
                (sample.bytes_received, sample.min_rtt_us, sample.rcv_rtt_us);
            out_of_order += u64::from(sample.rcv_ooopack);
            app_limited |= crate::tcp::unread_bytes(fd)
                .is_some_and(|n| n >= super::window::APP_LIMITED_UNREAD);
            received += bytes;
            if rtt > 0 {
                min_rtt_us = min_rtt_us.min(rtt);
            }
            if sample.rcv_ooopack > r.cap_ooo {
                r.cap_ooo = sample.rcv_ooopack;
                r.cap_hole = Some(super::window::Hole::seen(r.cap_hole, now));
            }
            if bytes > r.cap_seen {
                r.cap_seen = bytes;
                r.cap_active = Some(now);
                r.cap_first.get_or_insert(now);
                if rcv_rtt > 0 {
                    current_rtt_us = current_rtt_us.min(rcv_rtt);
                }
            }
            // What it delivered over its last round trip, scaled to one.
            let round = std::time::Duration::from_micros(u64::from(rtt.max(50_000)));
            match r.cap_mark {
                Some((t, at)) if now.saturating_duration_since(t) >= round => {
                    let span = now.saturating_duration_since(t).as_micros().max(1);
                    r.cap_delivered = u64::try_from(
                        u128::from(bytes.saturating_sub(at)) * round.as_micros() / span,
                    )
                    .unwrap_or(u64::MAX);
                    r.cap_mark = Some((now, bytes));
                }
                Some(_) => {}
                None => r.cap_mark = Some((now, bytes)),
            }
            // Active: received within the last two round trips (a lane between two bodies, or in
            // loss recovery, still holds its share).
            if r.cap_active
                .is_some_and(|t| now.saturating_duration_since(t) <= 2 * round)
            {
                let joining = rtt == 0
                    || r.cap_first.is_some_and(|t| {
                        now.saturating_duration_since(t) < super::window::JOIN_RTTS * round
                    });
                let member = super::window::Member {
                    joining,
                    delivered: r.cap_delivered,
                    hole: r.cap_hole,
                };
                active.push((rec.clone(), member));
            }
        }
        let us = |v: u32| (v != u32::MAX).then(|| std::time::Duration::from_micros(u64::from(v)));
        let totals = ReceiveTotals {
            received,
            out_of_order,
            min_rtt: us(min_rtt_us),
        };
        let Some(policy) = cap else {
            return totals;
        };
        let Some(cap) = policy.step(
            now,
            received,
            active.len(),
            us(min_rtt_us),
            us(current_rtt_us),
            app_limited,
        ) else {
            return totals;
        };
        let members: Vec<_> = active.iter().map(|(_, m)| *m).collect();
        let mut caps = super::window::split(cap, &members);
        super::window::open_for_repairs(&mut caps, &members, now);
        for ((rec, _), cap) in active.into_iter().zip(caps) {
            let mut r = lock(&rec);
            // Re-set only on a change of more than an eighth: each call is a system call.
            if r.cap_set.is_some_and(|old| old.abs_diff(cap) <= old / 8) {
                continue;
            }
            let Some(fd) = r.live.as_ref() else { continue };
            match crate::tcp::set_window_clamp(fd, cap) {
                Ok(()) => {
                    tracing::trace!(peer = %r.peer, cap, "receive window capped");
                    r.cap_set = Some(cap);
                }
                Err(e) => tracing::debug!(peer = %r.peer, error = %e, "TCP_WINDOW_CLAMP failed"),
            }
        }
        totals
    }
}

impl StatsRegistry {
    /// Out-of-order packets received so far on the sockets filed under `indices`, open or
    /// closed (0 where the kernel does not count them), and the smallest RTT any of them has
    /// seen.
    pub fn loss_signal(&self, indices: std::ops::Range<usize>) -> (u64, Option<Duration>) {
        let all = lock(&self.by_index);
        let snapshots: Vec<_> = all
            .iter()
            .skip(indices.start)
            .take(indices.len())
            .flatten()
            .filter_map(|rec| lock(rec).snapshot())
            .collect();
        loss_of(&snapshots)
    }
}

/// Out-of-order packets in all, and the smallest RTT, of these readings.
fn loss_of(snapshots: &[TcpInfoSnapshot]) -> (u64, Option<Duration>) {
    let count = snapshots.iter().filter_map(|s| s.rcv_ooopack).sum();
    let rtt = snapshots
        .iter()
        .filter_map(|s| s.min_rtt_us)
        .filter(|&us| us > 0)
        .min()
        .map(Duration::from_micros);
    (count, rtt)
}

/// Over every socket of a transfer, open or closed, from one reading each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiveTotals {
    /// Bytes received.
    pub received: u64,
    /// Packets that arrived after a hole (`tcpi_rcv_ooopack`).
    pub out_of_order: u64,
    /// The smallest RTT any has seen.
    pub min_rtt: Option<Duration>,
}

/// Statistics are best effort: a panic elsewhere must not hide them, so poisoning is ignored.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
