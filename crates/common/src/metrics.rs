//! The server's Prometheus metrics: counters, gauges and histograms kept in atomics, and
//! their text exposition (format 0.0.4) for `xfer serve --metrics-listen`.
//!
//! One registry per process ([`global`]): a metric is one series however many servers the
//! process runs, and it is recorded where the event happens (the digest cache, the request
//! core, a codec's stall watch) without a handle threaded through every layer.
//!
//! Labels are bounded by construction: every label value is an index into a fixed table
//! (protocols, methods, status classes, refusal reasons, results), never a path, a peer
//! address or a token.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::MemoryBudget;

/// Application protocols, as `Request::protocol` names them.
pub const PROTOCOLS: [&str; 4] = ["http/1.1", "h2", "h2c", "quic"];
/// Transports that hold connections (admission is per transport).
pub const TRANSPORTS: [&str; 2] = ["tcp", "quic"];
/// Methods counted by name; anything else is `other`.
pub const METHODS: [&str; 13] = [
    "GET", "HEAD", "PUT", "POST", "PATCH", "DELETE", "OPTIONS", "PROPFIND", "MKCOL", "MOVE",
    "COPY", "LIST", "other",
];
/// Why admission turned a connection away.
pub const REFUSAL_REASONS: [&str; 2] = ["per_address", "total"];
const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
const RESULTS: [&str; 2] = ["success", "failure"];
const COPY_DIRECTIONS: [&str; 2] = ["pull", "push"];
/// `download`: the server sent a file's bytes; `upload`: it received them.
const TRANSFER_DIRECTIONS: [&str; 2] = ["download", "upload"];

/// Histogram bounds of a transfer's duration, seconds: 10 ms to about 3 hours.
const DURATION_BOUNDS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 10800.0,
];
/// Histogram bounds of a transfer's size, bytes: 4 KiB to 64 GiB in powers of 16.
const SIZE_BOUNDS: [f64; 6] = [
    4096.0,
    65536.0,
    1048576.0,
    16777216.0,
    268435456.0,
    68719476736.0,
];

/// Index of `protocol` in [`PROTOCOLS`]; unknown names count as HTTP/1.1.
pub fn protocol_index(protocol: &str) -> usize {
    PROTOCOLS.iter().position(|p| *p == protocol).unwrap_or(0)
}

fn method_index(method: &str) -> usize {
    METHODS
        .iter()
        .position(|m| *m == method)
        .unwrap_or(METHODS.len() - 1)
}

/// A transfer's direction, for the duration and size histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferDirection {
    Download,
    Upload,
}

/// A third-party copy's direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyDirection {
    Pull,
    Push,
}

struct Histogram<const N: usize> {
    bounds: [f64; N],
    /// Per bound (not cumulative); the last slot is `+Inf`.
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// The sum in micro-units, so it stays an integer atomic.
    sum_micros: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    fn new(bounds: [f64; N]) -> Self {
        Self {
            bounds,
            buckets: (0..=N).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    fn observe(&self, v: f64) {
        let i = self.bounds.iter().position(|b| v <= *b).unwrap_or(N);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((v * 1e6) as u64, Ordering::Relaxed);
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (i, bound) in self.bounds.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.buckets[N].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

fn counters(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

/// Every series the server exports.
pub struct Metrics {
    /// [protocol][0 = received, 1 = sent]
    bytes: Vec<AtomicU64>,
    /// [method][status class]
    requests: Vec<AtomicU64>,
    /// Per application protocol.
    connections: Vec<AtomicI64>,
    /// [transport][reason]
    refusals: Vec<AtomicU64>,
    uploads: Vec<AtomicU64>,
    /// [direction][result]
    copies: Vec<AtomicU64>,
    stalled: Vec<AtomicU64>,
    digest_hits: AtomicU64,
    digest_misses: AtomicU64,
    access_log_dropped: AtomicU64,
    /// [`TcpResumeEvent`] as index.
    tcp_resume: [AtomicU64; 2],
    durations: [Histogram<12>; 2],
    sizes: [Histogram<6>; 2],
    budget: Mutex<Option<MemoryBudget>>,
}

/// The process's metrics.
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

impl Metrics {
    fn new() -> Self {
        Self {
            bytes: counters(PROTOCOLS.len() * 2),
            requests: counters(METHODS.len() * STATUS_CLASSES.len()),
            connections: (0..PROTOCOLS.len()).map(|_| AtomicI64::new(0)).collect(),
            refusals: counters(TRANSPORTS.len() * REFUSAL_REASONS.len()),
            uploads: counters(RESULTS.len()),
            copies: counters(COPY_DIRECTIONS.len() * RESULTS.len()),
            stalled: counters(PROTOCOLS.len()),
            digest_hits: AtomicU64::new(0),
            digest_misses: AtomicU64::new(0),
            access_log_dropped: AtomicU64::new(0),
            tcp_resume: [AtomicU64::new(0), AtomicU64::new(0)],
            durations: [
                Histogram::new(DURATION_BOUNDS),
                Histogram::new(DURATION_BOUNDS),
            ],
            sizes: [Histogram::new(SIZE_BOUNDS), Histogram::new(SIZE_BOUNDS)],
            budget: Mutex::new(None),
        }
    }

    /// Body bytes received from clients over `protocol`.
    pub fn add_bytes_in(&self, protocol: &str, n: u64) {
        self.bytes[protocol_index(protocol) * 2].fetch_add(n, Ordering::Relaxed);
    }

    /// Body bytes sent to clients over `protocol`.
    pub fn add_bytes_out(&self, protocol: &str, n: u64) {
        self.bytes[protocol_index(protocol) * 2 + 1].fetch_add(n, Ordering::Relaxed);
    }

    /// Body bytes received and sent, all protocols together.
    pub fn bytes_totals(&self) -> (u64, u64) {
        let sum = |dir: usize| {
            (0..PROTOCOLS.len())
                .map(|p| self.bytes[p * 2 + dir].load(Ordering::Relaxed))
                .sum()
        };
        (sum(0), sum(1))
    }

    /// A finished request.
    pub fn count_request(&self, method: &str, status: u16) {
        let class = usize::from((status / 100).clamp(1, 5) - 1);
        self.requests[method_index(method) * STATUS_CLASSES.len() + class]
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A client connection admitted over `protocol`, counted as open until the guard drops.
    pub fn open_connection(&'static self, protocol: &str) -> OpenConnection {
        let i = protocol_index(protocol);
        self.connections[i].fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            gauge: &self.connections[i],
        }
    }

    /// Admission turned a connection away on `transport` for `reason` (indices in
    /// [`TRANSPORTS`] and [`REFUSAL_REASONS`]).
    pub fn count_refusal(&self, transport: usize, reason: usize) {
        if let Some(c) = self
            .refusals
            .get(transport * REFUSAL_REASONS.len() + reason)
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A finished upload (a `PUT` or the completion of a parallel or resumable upload).
    pub fn count_upload(&self, success: bool) {
        self.uploads[usize::from(!success)].fetch_add(1, Ordering::Relaxed);
    }

    /// A finished third-party copy.
    pub fn count_copy(&self, direction: CopyDirection, success: bool) {
        let d = usize::from(direction == CopyDirection::Push);
        self.copies[d * RESULTS.len() + usize::from(!success)].fetch_add(1, Ordering::Relaxed);
    }

    /// A response stream ended because its client took nothing for the stall timeout.
    pub fn count_stall_reset(&self, protocol: &str) {
        self.stalled[protocol_index(protocol)].fetch_add(1, Ordering::Relaxed);
    }

    /// A whole-resource digest looked up in the digest cache.
    pub fn count_digest_lookup(&self, hit: bool) {
        let c = if hit {
            &self.digest_hits
        } else {
            &self.digest_misses
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Something TCP resume did (`--mechanism tcp-resume=on`).
    pub fn count_tcp_resume(&self, event: TcpResumeEvent) {
        self.tcp_resume[event as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// An access-log line dropped because the writer fell behind.
    pub fn count_access_log_drop(&self) {
        self.access_log_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// A file transfer that ended: how long it took and how many body bytes it moved.
    pub fn observe_transfer(&self, direction: TransferDirection, seconds: f64, bytes: u64) {
        let d = usize::from(direction == TransferDirection::Upload);
        self.durations[d].observe(seconds);
        self.sizes[d].observe(bytes as f64);
    }

    /// Export this budget's use and limit.
    pub fn watch_memory_budget(&self, budget: MemoryBudget) {
        *self.budget.lock().unwrap_or_else(|p| p.into_inner()) = Some(budget);
    }

    /// The text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        header(&mut out, "xfer_transferred_bytes_total", "counter", "Body bytes moved, by application protocol and direction (in: received from clients, out: sent to them).");
        for (p, proto) in PROTOCOLS.iter().enumerate() {
            for (d, dir) in ["in", "out"].iter().enumerate() {
                let v = load(&self.bytes[p * 2 + d]);
                let _ = writeln!(
                    out,
                    "xfer_transferred_bytes_total{{protocol=\"{proto}\",direction=\"{dir}\"}} {v}"
                );
            }
        }
        header(
            &mut out,
            "xfer_requests_total",
            "counter",
            "Requests answered, by method and status class.",
        );
        for (m, method) in METHODS.iter().enumerate() {
            for (c, class) in STATUS_CLASSES.iter().enumerate() {
                let v = load(&self.requests[m * STATUS_CLASSES.len() + c]);
                let _ = writeln!(
                    out,
                    "xfer_requests_total{{method=\"{method}\",status=\"{class}\"}} {v}"
                );
            }
        }
        header(
            &mut out,
            "xfer_connections_active",
            "gauge",
            "Client connections open, by application protocol.",
        );
        for (p, proto) in PROTOCOLS.iter().enumerate() {
            let v = self.connections[p].load(Ordering::Relaxed);
            let _ = writeln!(out, "xfer_connections_active{{protocol=\"{proto}\"}} {v}");
        }
        header(
            &mut out,
            "xfer_admission_refusals_total",
            "counter",
            "Connections turned away at admission, by transport and limit reached.",
        );
        for (t, transport) in TRANSPORTS.iter().enumerate() {
            for (r, reason) in REFUSAL_REASONS.iter().enumerate() {
                let v = load(&self.refusals[t * REFUSAL_REASONS.len() + r]);
                let _ = writeln!(
                    out,
                    "xfer_admission_refusals_total{{transport=\"{transport}\",reason=\"{reason}\"}} {v}"
                );
            }
        }
        header(
            &mut out,
            "xfer_uploads_total",
            "counter",
            "Uploads finished, by result.",
        );
        for (r, result) in RESULTS.iter().enumerate() {
            let v = load(&self.uploads[r]);
            let _ = writeln!(out, "xfer_uploads_total{{result=\"{result}\"}} {v}");
        }
        header(
            &mut out,
            "xfer_tpc_copies_total",
            "counter",
            "Third-party copies finished, by direction and result.",
        );
        for (d, dir) in COPY_DIRECTIONS.iter().enumerate() {
            for (r, result) in RESULTS.iter().enumerate() {
                let v = load(&self.copies[d * RESULTS.len() + r]);
                let _ = writeln!(
                    out,
                    "xfer_tpc_copies_total{{direction=\"{dir}\",result=\"{result}\"}} {v}"
                );
            }
        }
        let budget = self
            .budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (in_use, limit) = budget.map_or((0, 0), |b| (b.in_use(), b.limit()));
        header(
            &mut out,
            "xfer_memory_budget_in_use_bytes",
            "gauge",
            "Memory of outgoing data held now, all protocols together.",
        );
        let _ = writeln!(out, "xfer_memory_budget_in_use_bytes {in_use}");
        header(
            &mut out,
            "xfer_memory_budget_limit_bytes",
            "gauge",
            "The memory budget (--memory-budget).",
        );
        let _ = writeln!(out, "xfer_memory_budget_limit_bytes {limit}");
        header(
            &mut out,
            "xfer_stalled_streams_reset_total",
            "counter",
            "Responses ended because the client took nothing for the stall timeout.",
        );
        for (p, proto) in PROTOCOLS.iter().enumerate() {
            let v = load(&self.stalled[p]);
            let _ = writeln!(
                out,
                "xfer_stalled_streams_reset_total{{protocol=\"{proto}\"}} {v}"
            );
        }
        header(
            &mut out,
            "xfer_digest_cache_lookups_total",
            "counter",
            "Whole-file SHA-256 lookups in the digest cache, by result.",
        );
        let _ = writeln!(
            out,
            "xfer_digest_cache_lookups_total{{result=\"hit\"}} {}",
            load(&self.digest_hits)
        );
        let _ = writeln!(
            out,
            "xfer_digest_cache_lookups_total{{result=\"miss\"}} {}",
            load(&self.digest_misses)
        );
        header(
            &mut out,
            "xfer_tcp_resume_events_total",
            "counter",
            "TCP resume (--mechanism tcp-resume=on): paths saved as a client's last connection closed, and connections that started from a saved path.",
        );
        for (event, name) in [
            (TcpResumeEvent::PathSaved, "path_saved"),
            (TcpResumeEvent::Jump, "jump"),
        ] {
            let v = load(&self.tcp_resume[event as usize]);
            let _ = writeln!(out, "xfer_tcp_resume_events_total{{event=\"{name}\"}} {v}");
        }
        header(
            &mut out,
            "xfer_access_log_dropped_total",
            "counter",
            "Access-log lines dropped because the writer fell behind.",
        );
        let _ = writeln!(
            out,
            "xfer_access_log_dropped_total {}",
            load(&self.access_log_dropped)
        );
        header(
            &mut out,
            "xfer_transfer_duration_seconds",
            "histogram",
            "How long file transfers (GET bodies, uploads) took, by direction.",
        );
        for (d, dir) in TRANSFER_DIRECTIONS.iter().enumerate() {
            self.durations[d].write(
                &mut out,
                "xfer_transfer_duration_seconds",
                &format!("direction=\"{dir}\""),
            );
        }
        header(
            &mut out,
            "xfer_transfer_size_bytes",
            "histogram",
            "Body bytes moved by file transfers, by direction.",
        );
        for (d, dir) in TRANSFER_DIRECTIONS.iter().enumerate() {
            self.sizes[d].write(
                &mut out,
                "xfer_transfer_size_bytes",
                &format!("direction=\"{dir}\""),
            );
        }
        out
    }
}

/// An open connection, as counted in `xfer_connections_active`.
#[derive(Debug)]
pub struct OpenConnection {
    gauge: &'static AtomicI64,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.gauge.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What TCP resume counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpResumeEvent {
    /// A client's path was saved for its next connections.
    PathSaved = 0,
    /// A connection started with a window from a saved path.
    Jump = 1,
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new([1.0, 10.0]);
        h.observe(0.5);
        h.observe(5.0);
        h.observe(50.0);
        let mut out = String::new();
        h.write(&mut out, "x", "d=\"a\"");
        assert!(out.contains("x_bucket{d=\"a\",le=\"1\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{d=\"a\",le=\"10\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{d=\"a\",le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_sum{d=\"a\"} 55.5\n"), "{out}");
        assert!(out.contains("x_count{d=\"a\"} 3\n"), "{out}");
    }

    #[test]
    fn labels_stay_in_their_tables() {
        let m = Metrics::new();
        m.count_request("GET", 206);
        m.count_request("/etc/passwd", 404);
        m.count_request("GET", 999);
        m.add_bytes_out("h2", 10);
        m.add_bytes_out("not-a-protocol", 1);
        let out = m.render();
        assert!(out.contains("xfer_requests_total{method=\"GET\",status=\"2xx\"} 1\n"));
        assert!(out.contains("xfer_requests_total{method=\"GET\",status=\"5xx\"} 1\n"));
        assert!(out.contains("xfer_requests_total{method=\"other\",status=\"4xx\"} 1\n"));
        assert!(!out.contains("passwd"));
        assert!(
            out.contains("xfer_transferred_bytes_total{protocol=\"h2\",direction=\"out\"} 10\n")
        );
        assert_eq!(m.bytes_totals(), (0, 11));
        m.count_tcp_resume(TcpResumeEvent::Jump);
        let out = m.render();
        assert!(out.contains("xfer_tcp_resume_events_total{event=\"jump\"} 1\n"));
        assert!(out.contains("xfer_tcp_resume_events_total{event=\"path_saved\"} 0\n"));
        let g = global();
        let open = g.open_connection("quic");
        assert!(g
            .render()
            .contains("xfer_connections_active{protocol=\"quic\"} "));
        drop(open);
    }
}
