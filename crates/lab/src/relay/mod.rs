//! The relay: one thread per direction, each reading packets from one TUN device, passing them
//! through that direction's [`model::LinkModel`] and writing them to the other device when their
//! delivery time comes.
//!
//! ```text
//!  server ns TUN --read--> [ model: queue, rate, loss, delay ] --ring/FIFO--> write--> client ns TUN
//!  client ns TUN --read--> [ model ...                      ] --ring/FIFO--> write--> server ns TUN
//! ```
//!
//! Delivery is FIFO per direction (delay is constant plus monotonic jitter), so a byte ring and
//! a deque of entries replace a timing wheel. Threads sleep in `ppoll` until the next delivery
//! or the next readable packet, with a 1 µs timer slack for precise wake-ups.

pub(crate) mod gso;
pub(crate) mod model;
mod ring;
pub(crate) mod stats;

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::LinkConfig;
use crate::error::LabError;
use gso::{TcpSuper, VnetHdr, VNET_HDR_LEN};
use model::{Fate, LinkModel};
use ring::{Ring, Span};
use stats::{bump, Counters, DirectionStats, RelayStats};

/// Room for the largest packet a read can return: vnet header plus a 64 KiB super-packet.
const SLOT: usize = VNET_HDR_LEN + 65_536 + 512;
/// Packets read in one go before the thread sleeps again.
const READ_BATCH: usize = 64;
/// Wire packets of one super-packet travel together only while their delivery times lie this
/// close; beyond it the super-packet is cut so no byte arrives much later than the model says
/// (a 64 KiB burst takes 5 ms at 100 Mbit/s).
const MAX_COALESCE_NS: u64 = 200_000;

/// The running relay; [`Relay::stop`] (or drop) ends both threads.
pub(crate) struct Relay {
    stop: Arc<OwnedFd>,
    threads: Vec<JoinHandle<()>>,
    counters: Vec<Arc<Counters>>,
    started: Instant,
}

impl Relay {
    pub(crate) fn start(
        server_tun: OwnedFd,
        client_tun: OwnedFd,
        server_to_client: &LinkConfig,
        client_to_server: &LinkConfig,
        offload: bool,
    ) -> Result<Self, LabError> {
        // SAFETY: plain syscall; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(LabError::Thread {
                name: "relay eventfd".into(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: efd is a fresh descriptor owned by nobody else.
        let stop = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
        let server_tun = Arc::new(server_tun);
        let client_tun = Arc::new(client_tun);
        let mut relay = Self {
            stop,
            threads: Vec::new(),
            counters: Vec::new(),
            started: Instant::now(),
        };
        for (name, input, output, cfg) in [
            ("lab-s2c", &server_tun, &client_tun, server_to_client),
            ("lab-c2s", &client_tun, &server_tun, client_to_server),
        ] {
            let counters = Arc::new(Counters::default());
            let pump = Pump::new(
                input.clone(),
                output.clone(),
                relay.stop.clone(),
                cfg,
                offload,
                counters.clone(),
            );
            let handle = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || pump.run())
                .map_err(|source| LabError::Thread {
                    name: name.into(),
                    source,
                })?;
            relay.threads.push(handle);
            relay.counters.push(counters);
        }
        Ok(relay)
    }

    pub(crate) fn stats(&self) -> RelayStats {
        let dir = |i: usize| -> DirectionStats {
            let Some(counters) = self.counters.get(i) else {
                return DirectionStats::default();
            };
            let final_ns = counters.final_cpu_ns.load(Relaxed);
            let cpu = if final_ns > 0 {
                Duration::from_nanos(final_ns)
            } else {
                self.threads.get(i).and_then(thread_cpu).unwrap_or_default()
            };
            counters.snapshot(cpu)
        };
        RelayStats {
            server_to_client: dir(0),
            client_to_server: dir(1),
            elapsed: self.started.elapsed(),
        }
    }

    /// Stops both threads and waits for them; the TUN descriptors close with the last thread.
    /// Statistics stay readable afterwards.
    pub(crate) fn stop(&mut self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to an eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        for handle in self.threads.drain(..) {
            if handle.join().is_err() {
                tracing::error!("relay thread panicked");
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop();
        }
    }
}

fn thread_cpu(handle: &JoinHandle<()>) -> Option<Duration> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the thread is not joined yet, so its pthread_t is valid.
    if unsafe { libc::pthread_getcpuclockid(handle.as_pthread_t(), &mut clock) } != 0 {
        return None;
    }
    clock_ns(clock).map(Duration::from_nanos)
}

fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

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
    stop: Arc<OwnedFd>,
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
        stop: Arc<OwnedFd>,
        cfg: &LinkConfig,
        offload: bool,
        counters: Arc<Counters>,
    ) -> Self {
        // Bytes that can be waiting at once: the queue plus what is in flight over the delay;
        // doubled for stored vnet headers, small packets and the ring's wrap-around slack.
        let in_flight = (cfg.rate_bps as u128 * (cfg.rtt / 2 + cfg.jitter).as_nanos()
            / 8_000_000_000) as usize;
        let capacity = (2 * (cfg.effective_queue_bytes() as usize + in_flight) + 8 * SLOT)
            .max(4 << 20);
        Self {
            input,
            output,
            stop,
            model: LinkModel::new(cfg),
            ring: Ring::new(capacity),
            fifo: VecDeque::with_capacity(4096),
            scratch: vec![0u8; SLOT].into_boxed_slice(),
            fates: Vec::with_capacity(64),
            offload,
            counters,
        }
    }

    fn run(mut self) {
        // SAFETY: prctl with an integer argument; affects only this thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
        'outer: loop {
            self.deliver_due(now_ns());
            let mut batch = 0;
            while batch < READ_BATCH {
                match self.read_one() {
                    ReadOutcome::Packet => batch += 1,
                    ReadOutcome::Empty => break,
                    ReadOutcome::Failed => break 'outer,
                }
                self.deliver_due(now_ns());
            }
            if batch == READ_BATCH {
                continue;
            }
            let timeout = self.fifo.front().map(|e| e.at.saturating_sub(now_ns()));
            if timeout == Some(0) {
                continue;
            }
            if self.wait(timeout) {
                break;
            }
        }
        let cpu = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(1).max(1);
        self.counters.final_cpu_ns.store(cpu, Relaxed);
    }

    /// Sleeps until the input is readable, `timeout_ns` passed, or stop was requested (true).
    fn wait(&self, timeout_ns: Option<u64>) -> bool {
        let mut fds = [
            libc::pollfd {
                fd: self.input.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = timeout_ns.map(|ns| libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: fds and ts outlive the call; a null sigmask keeps the current one.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, ts_ptr, std::ptr::null()) };
        n > 0 && fds[1].revents != 0
    }

    fn read_one(&mut self) -> ReadOutcome {
        let fd = self.input.as_raw_fd();
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
        self.handle_packet(off, n, now_ns());
        ReadOutcome::Packet
    }

    fn handle_packet(&mut self, off: usize, n: usize, now: u64) {
        let stored = self.ring.slot_mut(off, n);
        let wire = if self.offload {
            let (Some(vnet), Some(ip)) = (VnetHdr::parse(stored), stored.get(VNET_HDR_LEN..))
            else {
                return;
            };
            if let Some(sup) = TcpSuper::parse(&vnet, ip) {
                self.handle_super(off, n, sup, now);
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
    fn handle_super(&mut self, off: usize, n: usize, sup: TcpSuper, now: u64) {
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
            let all = self.fates.iter().all(|(f, _)| matches!(f, Fate::Deliver(_)));
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

    fn deliver_due(&mut self, now: u64) {
        let fd = self.output.as_raw_fd();
        while let Some(e) = self.fifo.front().copied() {
            if e.at > now {
                break;
            }
            let bytes = self.ring.slice(e.span);
            let ok = loop {
                // SAFETY: bytes is a live slice of the ring.
                let r = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
                if r >= 0 {
                    break true;
                }
                let err = io::Error::last_os_error();
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
    }
}

/// One `read`: `Ok(None)` when nothing is waiting.
fn read_into(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        // SAFETY: buf is a live, writable slice.
        let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if r >= 0 {
            return Ok(Some(r as usize));
        }
        let err = io::Error::last_os_error();
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
