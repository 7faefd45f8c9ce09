//! The relay: one thread in the initial namespace holding both TUN devices. Packets read from
//! one device pass through that direction's [`model::LinkModel`] and are written to the other
//! device when their delivery time comes.
//!
//! ```text
//!  server ns TUN --read--> [ s2c model: queue, rate, loss, delay ] --ring/FIFO--> write--> client ns TUN
//!  client ns TUN --read--> [ c2s model ...                      ] --ring/FIFO--> write--> server ns TUN
//! ```
//!
//! Delivery is FIFO per direction (delay is constant plus monotonic jitter), so a byte ring and
//! a deque of entries replace a timing wheel. The thread sleeps in `ppoll` until the next
//! delivery or the next readable packet, with a 1 µs timer slack.
//!
//! Wake-ups, not bytes, dominate the relay's CPU cost (each is a context switch), so under load
//! they are coalesced: when a wake-up that found work comes less than `2G` after the previous
//! one, the thread sleeps a fixed interval `G` (see [`coalesce_interval`]) before looking again.
//! To keep timing unbiased, packets read after such a sleep are stamped as arriving in the
//! middle of it, and packets due up to `G/2` after the wake-up are delivered with it; so under
//! load each stage is off by at most `±G/2`, zero on average. An idle link (a lone ping) is
//! exact: the thread is then in the full wait, which wakes at once for input and exactly at
//! delivery time.
//!
//! A sleep can last far longer than `G` (the host did not run the thread: 43 ms instead of
//! 0.5 ms was seen on a loaded 2-core VM). The correction stays capped at `G/2` then (see
//! [`after_sleep`]): what arrived during the overrun is stamped late, what fell due is
//! delivered late, as on a router that stalled, and nothing is ever more than `G/2` early.
//! Stamping such packets in the middle of the overrun made some up to half of it early, and
//! a sender's minimum-RTT filter keeps exactly those: TCP BBR over a 50 ms link took 22 ms as
//! its minimum, and its window shrank to match. [`RelayStats::late_wakeups`] counts overruns.

pub(crate) mod gso;
pub(crate) mod model;
mod ring;
pub(crate) mod stats;

use crate::sys::relay as sys;

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::LinkConfig;
use crate::error::LabError;
use gso::{Super, VnetHdr, GSO_NONE, VNET_HDR_LEN};
use model::{Fate, LinkModel};
use ring::{Ring, Span};
use stats::{bump, Counters, RelayStats, Timing};

/// Room for the largest packet a read can return: vnet header plus a 64 KiB super-packet.
const SLOT: usize = VNET_HDR_LEN + 65_536 + 512;
/// Upper bound on one direction's packet store (untouched pages cost no memory).
const MAX_RING_BYTES: usize = 2 << 30;
/// Packets read from one device in one go before the other gets its turn.
const READ_BATCH: usize = 64;
/// Wire packets of one super-packet travel together only while their delivery times lie this
/// close; beyond it the super-packet is cut so no byte arrives much later than the model says
/// (a 64 KiB burst takes 5 ms at 100 Mbit/s).
const MAX_COALESCE_NS: u64 = 200_000;
/// How long before a timed delivery the thread stops sleeping and spins: timer wake-ups come
/// 50-250 µs late on the virtual machines this runs on, which would bias every RTT upwards.
/// Costs up to this much CPU per timed wake-up; loaded links coalesce instead and do not spin.
const SPIN_NS: u64 = 150_000;

/// The wake-up coalescing interval `G` for links with these round-trip times: 1/100 of the
/// shorter RTT, clamped to 50 µs ..= 1 ms. Under load each of the four stages a round trip
/// crosses (two arrivals, two deliveries) is then off by at most ±G/2 and zero on average, so
/// the worst case stays within 2% of the RTT. At 1 Gbit/s and 100 ms this bounds wake-ups to
/// 1,000 a second.
pub(crate) fn coalesce_interval(a: &LinkConfig, b: &LinkConfig) -> u64 {
    let rtt = a.rtt.min(b.rtt).as_nanos() as u64;
    (rtt / 100).clamp(50_000, 1_000_000)
}

/// The running relay; [`Relay::stop`] (or drop) ends its thread.
pub(crate) struct Relay {
    stop: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    counters: [Arc<Counters>; 2],
    final_cpu_ns: Arc<AtomicU64>,
    timing: Arc<Timing>,
    started: Instant,
}

impl Relay {
    pub(crate) fn start(
        server_tun: OwnedFd,
        client_tun: OwnedFd,
        server_to_client: &LinkConfig,
        client_to_server: &LinkConfig,
        offload: bool,
        realtime: bool,
    ) -> Result<Self, LabError> {
        let stop = Arc::new(sys::eventfd().map_err(|source| LabError::Thread {
            name: "relay eventfd".into(),
            source,
        })?);
        let server_tun = Arc::new(server_tun);
        let client_tun = Arc::new(client_tun);
        let counters = [Arc::default(), Arc::default()];
        let pumps = [
            Pump::new(
                server_tun.clone(),
                client_tun.clone(),
                server_to_client,
                offload,
                Arc::clone(&counters[0]),
            ),
            Pump::new(
                client_tun,
                server_tun,
                client_to_server,
                offload,
                Arc::clone(&counters[1]),
            ),
        ];
        let final_cpu_ns = Arc::new(AtomicU64::new(0));
        let timing = Arc::new(Timing::default());
        let worker = Worker {
            pumps,
            stop: stop.clone(),
            coalesce: coalesce_interval(server_to_client, client_to_server),
            realtime,
            final_cpu_ns: final_cpu_ns.clone(),
            timing: Arc::clone(&timing),
        };
        let thread = std::thread::Builder::new()
            .name("lab-relay".into())
            .spawn(move || worker.run())
            .map_err(|source| LabError::Thread {
                name: "lab-relay".into(),
                source,
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
            counters,
            final_cpu_ns,
            timing,
            started: Instant::now(),
        })
    }

    pub(crate) fn stats(&self) -> RelayStats {
        let final_ns = self.final_cpu_ns.load(Relaxed);
        let cpu_time = if final_ns > 0 {
            Duration::from_nanos(final_ns)
        } else {
            self.thread
                .as_ref()
                .and_then(thread_cpu)
                .unwrap_or_default()
        };
        RelayStats {
            server_to_client: self.counters[0].snapshot(),
            client_to_server: self.counters[1].snapshot(),
            cpu_time,
            elapsed: self.started.elapsed(),
            late_wakeups: self.timing.late_wakeups.load(Relaxed),
            worst_late: Duration::from_nanos(self.timing.worst_late_ns.load(Relaxed)),
        }
    }

    /// Stops the thread and waits for it; the TUN descriptors close with it. Statistics stay
    /// readable afterwards.
    pub(crate) fn stop(&mut self) {
        sys::signal_eventfd(self.stop.as_fd());
        if let Some(handle) = self.thread.take() {
            if handle.join().is_err() {
                tracing::error!("relay thread panicked");
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

fn thread_cpu(handle: &JoinHandle<()>) -> Option<Duration> {
    sys::thread_cpu_ns(handle).map(Duration::from_nanos)
}

fn now_ns() -> u64 {
    sys::monotonic_ns().unwrap_or(0)
}

/// The relay thread's state: both directions and the wake-up policy.
struct Worker {
    pumps: [Pump; 2],
    stop: Arc<OwnedFd>,
    coalesce: u64,
    realtime: bool,
    final_cpu_ns: Arc<AtomicU64>,
    timing: Arc<Timing>,
}

/// After a coalescing sleep from `from` to `to` (ns) that was to last `g`: how far past the
/// wake-up to deliver now, and the arrival stamp of packets read now. Both are half the
/// sleep, centring each stage's error on zero, but never more than `g / 2`: an overrun only
/// makes packets late, never early (see the module's notes).
fn after_sleep(from: u64, to: u64, g: u64) -> (u64, u64) {
    let half = (to.saturating_sub(from) / 2).min(g / 2);
    (half, to.saturating_sub(half))
}

/// The arrival stamp of a packet read at `now`. After a coalescing sleep, `after` holds the
/// stamp [`after_sleep`] gave and the most a stamp may lie before its read (`G/2`): a read
/// that comes long after the sleep ended (the host stalled the thread between reads, or the
/// deliveries before it ran the receiving stack for a while) must not take a stamp from
/// before the stall. A ping through a 50 ms link came back in 36 ms while that happened.
fn arrival_stamp(after: Option<(u64, u64)>, now: u64) -> u64 {
    match after {
        Some((stamp, max_early)) => stamp.max(now.saturating_sub(max_early)),
        None => now,
    }
}

impl Worker {
    fn run(mut self) {
        sys::set_timer_slack_ns(1000);
        if self.realtime {
            // A low real-time priority lets timer wake-ups run at once even when the machine's
            // cores are busy, as netem's softirq would; the kernel's real-time throttling still
            // caps the thread if it ever spun.
            if let Err(error) = sys::set_fifo_priority(10) {
                tracing::warn!(
                    %error,
                    "relay keeps normal scheduling; timing may suffer on a busy machine"
                );
            }
        }
        let g = self.coalesce;
        // Set after a coalescing sleep: (when it began, when it ended).
        let mut slept: Option<(u64, u64)> = None;
        let mut last_woke = 0u64;
        'outer: loop {
            let woke = now_ns();
            // Coalesce only while wake-ups come close together, so sparse traffic keeps exact
            // timing.
            let busy = woke.saturating_sub(last_woke) < 2 * g;
            last_woke = woke;
            // After a coalescing sleep, deliver what falls due in the first half of the next
            // interval now, and stamp arrivals in the middle of the sleep.
            let (horizon, stamp) = match slept {
                Some((from, to)) => {
                    let (ahead, stamp) = after_sleep(from, to, g);
                    (woke + ahead, Some((stamp, g / 2)))
                }
                None => (woke, None),
            };
            let mut worked = false;
            let mut more = false;
            for pump in &mut self.pumps {
                worked |= pump.deliver_due(horizon);
                match pump.read_batch(stamp, horizon) {
                    Err(()) => break 'outer,
                    Ok(n) => {
                        worked |= n > 0;
                        more |= n == READ_BATCH;
                    }
                }
            }
            if more {
                slept = None;
                continue;
            }
            let now = now_ns();
            if worked && busy && now < woke + g {
                if self.wait(woke + g - now, false).stop {
                    break;
                }
                let to = now_ns();
                self.timing.note_sleep(to.saturating_sub(now), g);
                slept = Some((now, to));
                continue;
            }
            slept = None;
            let next = self
                .pumps
                .iter()
                .filter_map(|p| p.fifo.front().map(|e| e.at))
                .min();
            let Some(at) = next else {
                if self.wait(u64::MAX, true).stop {
                    break;
                }
                continue;
            };
            if at <= now {
                continue;
            }
            // Timers fire late by tens of microseconds (more in a VM): sleep until shortly
            // before the delivery time and spin the rest.
            if at - now > SPIN_NS {
                let woke_by = self.wait(at - now - SPIN_NS, true);
                if woke_by.stop {
                    break;
                }
                if woke_by.input {
                    continue;
                }
            }
            while now_ns() < at {
                std::hint::spin_loop();
            }
        }
        let cpu = sys::own_cpu_ns().unwrap_or(1).max(1);
        self.final_cpu_ns.store(cpu, Relaxed);
    }

    /// Sleeps for `timeout_ns` (`u64::MAX`: no limit), until stop was requested or, with
    /// `watch_input`, until either device is readable.
    fn wait(&self, timeout_ns: u64, watch_input: bool) -> Woken {
        let fds = [
            self.stop.as_fd(),
            self.pumps[0].input.as_fd(),
            self.pumps[1].input.as_fd(),
        ];
        let watched = if watch_input { 3 } else { 1 };
        let Ok((n, stop)) = sys::poll_readable(fds, watched, timeout_ns) else {
            // EINTR and the like: treat as an early wake-up, the loop re-evaluates.
            return Woken {
                stop: false,
                input: true,
            };
        };
        Woken { stop, input: n > 0 }
    }
}

/// Why [`Worker::wait`] returned.
struct Woken {
    stop: bool,
    input: bool,
}

/// A stored packet (or piece of a super-packet) waiting for its delivery time.
#[derive(Debug, Clone, Copy)]
struct Entry {
    span: Span,
    at: u64,
    segments: u64,
    wire_bytes: u64,
}

/// One direction: reads, decides, stores, delivers.
struct Pump {
    input: Arc<OwnedFd>,
    output: Arc<OwnedFd>,
    model: LinkModel,
    ring: Ring,
    fifo: VecDeque<Entry>,
    /// Where a super-packet is copied before being cut into pieces, and where packets go when
    /// the ring is full.
    scratch: Box<[u8]>,
    fates: Vec<(Fate, u64)>,
    offload: bool,
    counters: Arc<Counters>,
}

enum ReadOutcome {
    Packet,
    Empty,
    Failed,
}

impl Pump {
    fn new(
        input: Arc<OwnedFd>,
        output: Arc<OwnedFd>,
        cfg: &LinkConfig,
        offload: bool,
        counters: Arc<Counters>,
    ) -> Self {
        // Bytes that can be waiting at once: the queue plus what is in flight over the delay;
        // doubled for stored vnet headers, small packets and the ring's wrap-around slack.
        let in_flight =
            (cfg.rate_bps as u128 * (cfg.rtt / 2 + cfg.jitter).as_nanos() / 8_000_000_000) as usize;
        let wanted =
            (2 * (cfg.effective_queue_bytes() as usize + in_flight) + 8 * SLOT).max(4 << 20);
        let capacity = wanted.min(MAX_RING_BYTES);
        if capacity < wanted {
            tracing::warn!(
                wanted,
                capacity,
                "relay packet store capped; packets beyond it count as relay drops"
            );
        }
        Self {
            input,
            output,
            model: LinkModel::new(cfg),
            ring: Ring::new(capacity),
            fifo: VecDeque::with_capacity(4096),
            scratch: vec![0u8; SLOT].into_boxed_slice(),
            fates: Vec::with_capacity(64),
            offload,
            counters,
        }
    }

    /// Reads up to [`READ_BATCH`] packets, delivering due ones in between. Arrivals are stamped
    /// as [`arrival_stamp`] says. `Err` when the device failed.
    fn read_batch(&mut self, stamp: Option<(u64, u64)>, horizon: u64) -> Result<usize, ()> {
        let mut n = 0;
        while n < READ_BATCH {
            match self.read_one(stamp) {
                ReadOutcome::Packet => n += 1,
                ReadOutcome::Empty => break,
                ReadOutcome::Failed => return Err(()),
            }
            self.deliver_due(horizon.max(now_ns()));
        }
        Ok(n)
    }

    fn read_one(&mut self, stamp: Option<(u64, u64)>) -> ReadOutcome {
        let fd = self.input.as_fd();
        let Some(off) = self.ring.reserve(SLOT) else {
            // The store is full: drain one packet so the device does not stall, and drop it.
            return match read_into(fd, &mut self.scratch) {
                Ok(Some(_)) => {
                    bump(&self.counters.packets_dropped_relay, 1);
                    ReadOutcome::Packet
                }
                Ok(None) => ReadOutcome::Empty,
                Err(e) => read_failed(e),
            };
        };
        let n = match read_into(fd, self.ring.slot_mut(off, SLOT)) {
            Ok(Some(n)) => n,
            Ok(None) => return ReadOutcome::Empty,
            Err(e) => return read_failed(e),
        };
        bump(&self.counters.reads, 1);
        self.handle_packet(off, n, arrival_stamp(stamp, now_ns()));
        ReadOutcome::Packet
    }

    fn handle_packet(&mut self, off: usize, n: usize, now: u64) {
        let stored = self.ring.slot_mut(off, n);
        let wire = if self.offload {
            let (Some(vnet), Some(ip)) = (VnetHdr::parse(stored), stored.get(VNET_HDR_LEN..))
            else {
                return;
            };
            if let Some(sup) = Super::parse(&vnet, ip) {
                self.handle_super(off, n, sup, now);
                return;
            }
            if vnet.gso_type != GSO_NONE && vnet.gso_size > 0 {
                let (hdr, gso) = (usize::from(vnet.hdr_len), usize::from(vnet.gso_size));
                let (ip_len, segments) = (ip.len(), ip.len().saturating_sub(hdr).div_ceil(gso));
                self.handle_uncut(off, n, ip_len, segments.max(1), now);
                return;
            }
            ip.len() as u64
        } else {
            n as u64
        };
        bump(&self.counters.packets_in, 1);
        bump(&self.counters.bytes_in, wire);
        match self.model.offer(now, wire as u32) {
            Fate::Deliver(at) => {
                let span = self.ring.commit(off, n);
                self.fifo.push_back(Entry {
                    span,
                    at,
                    segments: 1,
                    wire_bytes: wire,
                });
            }
            fate => self.count_drop(fate, 1, wire),
        }
    }

    /// An offloaded packet the relay cannot cut (IPv6): its wire packets meet the model one by
    /// one, and it is delivered whole when all of them are, else dropped whole (the packets the
    /// model would have delivered count as relay drops).
    fn handle_uncut(&mut self, off: usize, n: usize, ip_len: usize, segments: usize, now: u64) {
        let mut last = None;
        let mut lost = 0;
        for i in 0..segments {
            let wire = (ip_len / segments + usize::from(i < ip_len % segments)) as u64;
            bump(&self.counters.packets_in, 1);
            bump(&self.counters.bytes_in, wire);
            match self.model.offer(now, wire as u32) {
                Fate::Deliver(at) => last = Some(at),
                fate => {
                    self.count_drop(fate, 1, wire);
                    lost += 1;
                }
            }
        }
        match last {
            Some(at) if lost == 0 => {
                let span = self.ring.commit(off, n);
                self.fifo.push_back(Entry {
                    span,
                    at,
                    segments: segments as u64,
                    wire_bytes: ip_len as u64,
                });
            }
            _ => bump(
                &self.counters.packets_dropped_relay,
                (segments - lost) as u64,
            ),
        }
    }

    fn count_drop(&self, fate: Fate, packets: u64, bytes: u64) {
        let c = &self.counters;
        match fate {
            Fate::DropQueue => {
                bump(&c.packets_dropped_queue, packets);
                bump(&c.bytes_dropped_queue, bytes);
            }
            Fate::DropLoss => {
                bump(&c.packets_dropped_loss, packets);
                bump(&c.bytes_dropped_loss, bytes);
            }
            Fate::Deliver(_) => {}
        }
    }

    /// A super-packet: every wire packet in it meets the model on its own; runs of delivered
    /// ones whose delivery times lie within [`MAX_COALESCE_NS`] travel as one piece.
    fn handle_super(&mut self, off: usize, n: usize, sup: Super, now: u64) {
        let segments = sup.segments();
        self.fates.clear();
        for i in 0..segments {
            let wire = sup.wire_len(i) as u64;
            bump(&self.counters.packets_in, 1);
            bump(&self.counters.bytes_in, wire);
            let fate = self.model.offer(now, wire as u32);
            self.count_drop(fate, 1, wire);
            self.fates.push((fate, wire));
        }
        // Whole super-packet delivered as one piece: forward it untouched.
        if let (Some((Fate::Deliver(first), _)), Some((Fate::Deliver(last), _))) =
            (self.fates.first(), self.fates.last())
        {
            let all = self
                .fates
                .iter()
                .all(|(f, _)| matches!(f, Fate::Deliver(_)));
            if all && last - first <= MAX_COALESCE_NS {
                let wire_bytes = self.fates.iter().map(|(_, w)| w).sum();
                let span = self.ring.commit(off, n);
                self.fifo.push_back(Entry {
                    span,
                    at: *last,
                    segments: segments as u64,
                    wire_bytes,
                });
                return;
            }
        }
        self.scratch[..n].copy_from_slice(self.ring.slot_mut(off, n));
        let mut i = 0;
        while i < segments {
            let Fate::Deliver(start_at) = self.fates[i].0 else {
                i += 1;
                continue;
            };
            let mut end = i + 1;
            let mut at = start_at;
            let mut wire_bytes = self.fates[i].1;
            while let Some(&(Fate::Deliver(next_at), w)) = self.fates.get(end) {
                if next_at - start_at > MAX_COALESCE_NS {
                    break;
                }
                at = next_at;
                wire_bytes += w;
                end += 1;
            }
            let count = end - i;
            let len = sup.piece_len(i, count);
            match self.ring.reserve(len) {
                Some(piece_off) => {
                    let out = self.ring.slot_mut(piece_off, len);
                    let written = sup.write_piece(&self.scratch[VNET_HDR_LEN..n], i, count, out);
                    let span = self.ring.commit(piece_off, written);
                    self.fifo.push_back(Entry {
                        span,
                        at,
                        segments: count as u64,
                        wire_bytes,
                    });
                }
                None => bump(&self.counters.packets_dropped_relay, count as u64),
            }
            i = end;
        }
    }

    /// Writes every packet whose delivery time has come; true if there was any.
    fn deliver_due(&mut self, now: u64) -> bool {
        let fd = self.output.as_fd();
        let mut any = false;
        while let Some(e) = self.fifo.front().copied() {
            if e.at > now {
                break;
            }
            any = true;
            let bytes = self.ring.slice(e.span);
            let ok = loop {
                let Err(err) = sys::write(fd, bytes) else {
                    break true;
                };
                if err.kind() != io::ErrorKind::Interrupted {
                    tracing::debug!(error = %err, len = bytes.len(), "write to tun failed");
                    break false;
                }
            };
            let c = &self.counters;
            bump(&c.writes, 1);
            if ok {
                bump(&c.packets_forwarded, e.segments);
                bump(&c.bytes_forwarded, e.wire_bytes);
            } else {
                bump(&c.packets_dropped_relay, e.segments);
            }
            self.ring.release(e.span);
            self.fifo.pop_front();
        }
        any
    }
}

/// One `read`: `Ok(None)` when nothing is waiting.
fn read_into(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        let err = match sys::read(fd, buf) {
            Ok(n) => return Ok(Some(n)),
            Err(err) => err,
        };
        match err.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(None),
            _ => return Err(err),
        }
    }
}

fn read_failed(e: io::Error) -> ReadOutcome {
    tracing::warn!(error = %e, "reading from tun failed; relay direction stops");
    ReadOutcome::Failed
}

#[cfg(test)]
mod tests {
    use super::{after_sleep, arrival_stamp};

    const G: u64 = 500_000;

    #[test]
    fn a_sleep_as_asked_centres_the_error() {
        // Slept G: deliver G/2 ahead, stamp arrivals in the middle.
        assert_eq!(
            after_sleep(1_000_000, 1_000_000 + G, G),
            (G / 2, 1_000_000 + G / 2)
        );
        // A short sleep: half of it, both ways.
        assert_eq!(after_sleep(1_000_000, 1_100_000, G), (50_000, 1_050_000));
    }

    #[test]
    fn an_overrun_is_never_more_than_half_the_interval_early() {
        // Asked for 0.5 ms, slept 43 ms: a packet that came just before the wake-up is
        // stamped at most G/2 before it, and nothing due later than G/2 from now goes now.
        let (from, to) = (10_000_000, 53_000_000);
        let (ahead, stamp) = after_sleep(from, to, G);
        assert_eq!(ahead, G / 2);
        assert_eq!(stamp, to - G / 2);
    }

    #[test]
    fn a_clock_that_did_not_move_gives_no_correction() {
        assert_eq!(after_sleep(7, 7, G), (0, 7));
        assert_eq!(after_sleep(9, 7, G), (0, 7));
    }

    #[test]
    fn a_read_long_after_the_sleep_is_stamped_near_the_read() {
        let after = Some((1_000_000, G / 2));
        // Right after the sleep: the sleep's stamp.
        assert_eq!(arrival_stamp(after, 1_100_000), 1_000_000);
        // 20 ms later (the thread was stalled): at most G/2 before the read.
        assert_eq!(arrival_stamp(after, 21_000_000), 21_000_000 - G / 2);
        // No sleep before: the read's own time.
        assert_eq!(arrival_stamp(None, 5), 5);
    }
}
