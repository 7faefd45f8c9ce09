//! Counters the relay threads keep, and the snapshots [`crate::Lab::relay_stats`] returns.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// What one direction of the relay did since the lab started. Packets are wire packets: a
/// segmentation-offload super-packet counts as the MTU packets it stands for, and bytes are the
/// IP bytes those wire packets would have had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Wire packets that reached the bottleneck.
    pub packets_in: u64,
    /// IP bytes that reached the bottleneck.
    pub bytes_in: u64,
    /// Wire packets written to the far device.
    pub packets_forwarded: u64,
    /// IP bytes written to the far device.
    pub bytes_forwarded: u64,
    /// Wire packets dropped because the bottleneck queue was full.
    pub packets_dropped_queue: u64,
    /// IP bytes dropped because the bottleneck queue was full.
    pub bytes_dropped_queue: u64,
    /// Wire packets lost to the random loss process.
    pub packets_dropped_loss: u64,
    /// IP bytes lost to the random loss process.
    pub bytes_dropped_loss: u64,
    /// Wire packets the relay itself failed to carry (its packet store was full, or writing to
    /// the far device failed). Not part of the emulated link; stays 0 unless the relay is
    /// overwhelmed.
    pub packets_dropped_relay: u64,
    /// `read` calls that returned a packet.
    pub reads: u64,
    /// `write` calls (one per delivered packet or piece of a super-packet).
    pub writes: u64,
}

/// Both directions of the relay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    pub server_to_client: DirectionStats,
    pub client_to_server: DirectionStats,
    /// CPU time (user + system) of the relay thread, including the kernel's receive processing
    /// that each write into a TUN device runs on behalf of the receiving namespace.
    pub cpu_time: Duration,
    /// Wall time since the relay started.
    pub elapsed: Duration,
    /// Coalescing sleeps that lasted more than twice the interval asked for: the host did not
    /// run the relay thread in time. Packets waiting then were delivered late (up to
    /// `worst_late`), never early; a count that is not small next to the run's length says the
    /// link's delays were longer than configured for part of it.
    pub late_wakeups: u64,
    /// The longest such overrun beyond the interval asked for.
    pub worst_late: Duration,
}

impl RelayStats {
    /// Relay CPU time used between `earlier` and `self` as a fraction of one core over the
    /// wall time between them (0.25 = a quarter of a core).
    pub fn cpu_fraction_since(&self, earlier: &RelayStats) -> f64 {
        let wall = self.elapsed.saturating_sub(earlier.elapsed).as_secs_f64();
        if wall <= 0.0 {
            return 0.0;
        }
        self.cpu_time.saturating_sub(earlier.cpu_time).as_secs_f64() / wall
    }
}

/// The relay thread's own timing, for [`RelayStats::late_wakeups`].
#[derive(Debug, Default)]
pub(crate) struct Timing {
    pub(crate) late_wakeups: AtomicU64,
    pub(crate) worst_late_ns: AtomicU64,
}

impl Timing {
    /// A coalescing sleep of `slept` ns was to last `asked`.
    pub(crate) fn note_sleep(&self, slept: u64, asked: u64) {
        if slept > 2 * asked {
            bump(&self.late_wakeups, 1);
            let late = slept - asked;
            if late > self.worst_late_ns.load(Relaxed) {
                self.worst_late_ns.store(late, Relaxed);
            }
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) packets_in: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) packets_forwarded: AtomicU64,
    pub(crate) bytes_forwarded: AtomicU64,
    pub(crate) packets_dropped_queue: AtomicU64,
    pub(crate) bytes_dropped_queue: AtomicU64,
    pub(crate) packets_dropped_loss: AtomicU64,
    pub(crate) bytes_dropped_loss: AtomicU64,
    pub(crate) packets_dropped_relay: AtomicU64,
    pub(crate) reads: AtomicU64,
    pub(crate) writes: AtomicU64,
}

/// Adds to a counter that only its own thread writes (so no read-modify-write is needed).
pub(crate) fn bump(c: &AtomicU64, by: u64) {
    c.store(c.load(Relaxed).wrapping_add(by), Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self) -> DirectionStats {
        DirectionStats {
            packets_in: self.packets_in.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            packets_forwarded: self.packets_forwarded.load(Relaxed),
            bytes_forwarded: self.bytes_forwarded.load(Relaxed),
            packets_dropped_queue: self.packets_dropped_queue.load(Relaxed),
            bytes_dropped_queue: self.bytes_dropped_queue.load(Relaxed),
            packets_dropped_loss: self.packets_dropped_loss.load(Relaxed),
            bytes_dropped_loss: self.bytes_dropped_loss.load(Relaxed),
            packets_dropped_relay: self.packets_dropped_relay.load(Relaxed),
            reads: self.reads.load(Relaxed),
            writes: self.writes.load(Relaxed),
        }
    }
}
