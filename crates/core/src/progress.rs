//! Progress counters shared between the engine and whoever displays them, and the final report.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::transport::{ConnectionStats, RoundTrips};
use crate::verification::Verification;

/// Counters for one lane.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LaneSnapshot {
    pub lane: usize,
    pub label: String,
    /// Bytes received by this lane in this run, including bytes later discarded.
    pub bytes: u64,
    /// Chunks this lane fetched that were verified.
    pub chunks: u64,
    /// Time spent reading bodies.
    #[serde(serialize_with = "secs")]
    pub busy: Duration,
    pub retries: u64,
    /// How the lane's first request reached its first byte.
    pub round_trips: Option<RoundTrips>,
}

impl LaneSnapshot {
    /// Zeroed counters for lanes `0..n`, as a transfer starts.
    pub fn fresh(n: usize) -> Vec<Self> {
        (0..n)
            .map(|lane| Self {
                lane,
                ..Self::default()
            })
            .collect()
    }
}

/// A consistent view of a transfer in progress.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProgressSnapshot {
    /// Size of the resource.
    pub total: u64,
    /// Bytes in verified chunks, including those resumed from a journal.
    pub verified: u64,
    /// Bytes verified by an earlier run (resumed).
    pub resumed: u64,
    /// Bytes received in this run by all lanes.
    pub received: u64,
    #[serde(serialize_with = "secs")]
    pub elapsed: Duration,
    pub lanes: Vec<LaneSnapshot>,
    pub retries: u64,
    pub digest_mismatches: u64,
    pub duplicates: u64,
    /// Verified chunks whose bytes matched a digest the server sent for them (this run's,
    /// and resumed chunks whose journal record says so).
    pub server_digest_chunks: u64,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Shared progress state. Cheap to clone (an `Arc`); lock held for microseconds per update.
#[derive(Debug, Clone)]
pub struct Progress {
    inner: Arc<Mutex<ProgressSnapshot>>,
    started: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(ProgressSnapshot::default())),
            started: Instant::now(),
        }
    }

    pub fn snapshot(&self) -> ProgressSnapshot {
        let mut s = self.inner.lock().map(|s| s.clone()).unwrap_or_default();
        s.elapsed = self.started.elapsed();
        s
    }

    /// Record work done outside the engine (a whole file sent in one request by its
    /// caller): `total` bytes in all, `done` of them sent. The counters never go down.
    pub fn advance_to(&self, total: u64, done: u64) {
        self.update(|s| {
            s.total = total;
            s.verified = s.verified.max(done);
            s.received = s.received.max(done);
        });
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut ProgressSnapshot)) {
        if let Ok(mut s) = self.inner.lock() {
            f(&mut s);
        }
    }

    pub(crate) fn lane(&self, lane: usize, f: impl FnOnce(&mut LaneSnapshot)) {
        self.update(|s| {
            if let Some(l) = s.lanes.get_mut(lane) {
                f(l);
            }
        });
    }
}

/// Goodput over a sliding window, from successive snapshots: "now" for a progress display.
#[derive(Debug, Clone)]
pub struct RateMeter {
    window: Duration,
    samples: std::collections::VecDeque<(Duration, u64)>,
}

impl RateMeter {
    /// A meter averaging over `window` (e.g. 2 s).
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            samples: Default::default(),
        }
    }

    /// Record `bytes` (a monotonic counter) at `elapsed`; returns bytes per second over the window.
    pub fn sample(&mut self, elapsed: Duration, bytes: u64) -> f64 {
        self.samples.push_back((elapsed, bytes));
        while self.samples.len() > 2
            && self
                .samples
                .front()
                .is_some_and(|&(t, _)| elapsed.saturating_sub(t) > self.window)
        {
            self.samples.pop_front();
        }
        match (self.samples.front(), self.samples.back()) {
            (Some(&(t0, b0)), Some(&(t1, b1))) if t1 > t0 => {
                b1.saturating_sub(b0) as f64 / (t1 - t0).as_secs_f64()
            }
            _ => 0.0,
        }
    }
}

/// Per-lane figures in the final report.
#[derive(Debug, Clone, Serialize)]
pub struct LaneReport {
    pub lane: usize,
    pub label: String,
    pub bytes: u64,
    pub chunks: u64,
    pub busy_seconds: f64,
    /// Bits per second while busy.
    pub throughput_bps: f64,
    pub retries: u64,
    /// Round trips from the lane's start to its first byte (docs/design.md, "Start-up").
    pub round_trips: Option<RoundTrips>,
}

/// What a finished transfer did; `xfer get --json` prints this.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub url: String,
    pub dest: String,
    pub protocol: String,
    pub size: u64,
    pub chunk_size: u64,
    pub chunks: u32,
    /// Bytes already verified by an earlier, interrupted run.
    pub resumed_bytes: u64,
    /// Bytes received in this run, including re-fetches and end-game duplicates.
    pub received_bytes: u64,
    pub seconds: f64,
    /// Bits per second of new verified data: `(size - resumed) * 8 / seconds`.
    pub goodput_bps: f64,
    pub lanes: Vec<LaneReport>,
    pub retries: u64,
    pub digest_mismatches: u64,
    pub duplicates: u64,
    /// Whole-file SHA-256, hex; `null` when verification was off.
    pub sha256: Option<String>,
    /// What the file was checked against, one phrase each ([`Verification::sources`]).
    pub verified_against: Vec<String>,
    /// The same, as counts and flags.
    pub verification: Verification,
    pub connections: Vec<ConnectionStats>,
    /// Per source, when the file came from several (`xfer_core::multi`); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceReport>,
    /// The lane count the controller chose and why, when it ran (`--lanes auto`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive_lanes: Option<crate::adapt::AdaptReport>,
    /// The lanes were spread over more connections than the transfer began with (HTTP/2
    /// under loss): over how many and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<SpreadReport>,
    /// The server's `Last-Modified` (or QUIC mtime) of what was fetched, when it said: a tree
    /// whose listing has no times gives it to the local copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

/// Why and how far a transport spread its lanes over more connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpreadReport {
    /// Connections the lanes were spread over.
    pub connections: usize,
    /// `path_memory`: from the start, because the last transfer to this peer saw loss;
    /// `loss`: during the transfer, after loss episodes on the connections in use.
    pub cause: &'static str,
}

/// What one source of a multi-source download delivered.
#[derive(Debug, Clone, Serialize)]
pub struct SourceReport {
    pub url: String,
    /// Bytes received from it, including chunks that failed or lost an end-game race.
    pub bytes: u64,
    /// Bits per second per lane while its requests were in flight.
    pub goodput_bps: f64,
    /// Lanes on it at the end, and the most it had at once.
    pub lanes: usize,
    pub lanes_max: usize,
    /// Requests it completed, and failures (connection, status, body).
    pub requests: u64,
    pub errors: u64,
    /// Why it was dropped (disagreement, a permanent error), if it was.
    pub dropped: Option<String>,
}

impl Report {
    /// Round trips to the first byte, first lane and later lanes:
    /// `first lane 3 (tcp 1 + handshake 1 full + request 1); later lanes 3 (...)`.
    /// `None` when no lane recorded any (a transport that does not count them).
    pub fn startup(&self) -> Option<String> {
        let mut lanes = self.lanes.iter().filter_map(|l| l.round_trips);
        let first = lanes.next()?;
        let mut later: Vec<(RoundTrips, usize)> = Vec::new();
        for rt in lanes {
            match later.iter_mut().find(|(r, _)| *r == rt) {
                Some((_, n)) => *n += 1,
                None => later.push((rt, 1)),
            }
        }
        let mut s = format!("round trips to first byte: first lane {first}");
        if !later.is_empty() {
            let parts: Vec<String> = later.iter().map(|(rt, n)| format!("{n}× {rt}")).collect();
            s.push_str(&format!("; later lanes {}", parts.join(", ")));
        }
        Some(s)
    }

    /// One human line: `1.00 GiB in 9.21 s, 932.1 Mbit/s, 8 lanes, sha256 ab12…`.
    pub fn summary(&self) -> String {
        let new = self.size - self.resumed_bytes.min(self.size);
        // Lanes that carried a chunk: a file of one chunk was moved by one lane, however many
        // were opened for it.
        let used = self.lanes.iter().filter(|l| l.chunks > 0).count();
        let mut s = format!(
            "{} in {:.2} s, {}, {} over {}",
            crate::size::HumanBytes(new),
            self.seconds,
            format_bps(self.goodput_bps),
            if used == 1 {
                "1 lane".to_string()
            } else {
                format!("{used} lanes")
            },
            self.protocol
        );
        if self.resumed_bytes > 0 {
            s.push_str(&format!(
                ", {} resumed",
                crate::size::HumanBytes(self.resumed_bytes)
            ));
        }
        if self.retries + self.digest_mismatches > 0 {
            s.push_str(&format!(
                ", {} retries, {} digest mismatches",
                self.retries, self.digest_mismatches
            ));
        }
        if let Some(d) = &self.sha256 {
            s.push_str(&format!(", sha256 {d}"));
        }
        s.push_str(&format!("; {}", self.verification.describe()));
        for src in &self.sources {
            s.push_str(&format!(
                "\n  {}: {}, {} per lane, up to {} lanes, {} errors",
                src.url,
                crate::size::HumanBytes(src.bytes),
                format_bps(src.goodput_bps),
                src.lanes_max,
                src.errors
            ));
            if let Some(why) = &src.dropped {
                s.push_str(&format!(", dropped: {why}"));
            }
        }
        s
    }
}

/// `932.1 Mbit/s`.
pub fn format_bps(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1} Mbit/s", bps / 1e6)
    } else {
        format!("{:.1} kbit/s", bps / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_meter_windows() {
        let mut m = RateMeter::new(Duration::from_secs(2));
        assert_eq!(m.sample(Duration::from_secs(0), 0), 0.0);
        assert_eq!(m.sample(Duration::from_secs(1), 100), 100.0);
        assert_eq!(m.sample(Duration::from_secs(2), 200), 100.0);
        // Old samples fall out of the window: the rate follows the recent slope.
        m.sample(Duration::from_secs(10), 1000);
        let r = m.sample(Duration::from_secs(11), 2000);
        assert!((r - 1000.0).abs() < 1e-9, "{r}");
    }
}
