//! The bench report: totals from every lane, goodput over the window, spread across lanes,
//! time to first byte, client CPU cost. Printed as text or JSON.

use std::time::Duration;

use serde::Serialize;
use xfer::crates::core::digest::PairingStats;
use xfer::{format_bps, HumanBytes};

use super::cpu::CpuTimes;
use super::load::{LaneTally, OpError};

/// At most this many failed operations are listed one by one; the count is always exact.
const ERROR_SAMPLES: usize = 20;

/// Everything `xfer bench` reports. Byte counts satisfy
/// `bytes_received == completed_bytes + cut_bytes + errored_bytes`.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// Transport names as negotiated (`http/1.1`, `h2`, `h2c`, `quic`), per server.
    pub protocols: Vec<String>,
    pub servers: Vec<ServerLine>,
    pub concurrency: usize,
    pub verify: bool,
    pub mean_size: u64,
    pub size_sd: f64,
    pub seed: u64,
    /// The measurement window: start of load to the deadline, seconds.
    pub window_s: f64,
    /// Operations fully received (and checked, when verifying) before the deadline.
    pub operations: u64,
    /// Operations cancelled at the deadline; their bytes count, they do not.
    pub cut_at_deadline: u64,
    /// Operations that failed.
    pub errors: u64,
    pub error_samples: Vec<OpError>,
    /// Every body byte received before the deadline.
    pub bytes_received: u64,
    /// Sum of the sizes of completed operations.
    pub completed_bytes: u64,
    /// Bytes that cut operations had received by the deadline.
    pub cut_bytes: u64,
    /// Bytes that failed operations had received before failing.
    pub errored_bytes: u64,
    /// `bytes_received × 8 / window_s`.
    pub goodput_bps: f64,
    pub per_lane_bps: Spread,
    pub ttfb_ms: Latency,
    pub cpu: Cpu,
}

#[derive(Debug, Serialize)]
pub struct ServerLine {
    pub url: String,
    pub protocol: String,
    /// Operations sent to this server (round-robin).
    pub requests: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct Latency {
    pub samples: usize,
    pub median: f64,
    pub p99: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct Cpu {
    pub user_s: f64,
    pub system_s: f64,
    /// (user + system) seconds per GiB received; null when nothing was received.
    pub s_per_gib: Option<f64>,
    /// Share of the bytes hashed for SHA-256 that were hashed two lanes at once on one core;
    /// null when nothing was hashed.
    pub sha256_paired: Option<f64>,
}

/// What the run was asked to do, for the report header.
pub struct RunInfo {
    pub servers: Vec<ServerLine>,
    pub concurrency: usize,
    pub verify: bool,
    pub mean_size: u64,
    pub size_sd: f64,
    pub seed: u64,
    pub window: Duration,
    pub cpu: CpuTimes,
    /// SHA-256 bytes hashed during the run: in pairs, alone.
    pub sha256_bytes: PairingStats,
}

impl BenchReport {
    pub fn build(info: RunInfo, lanes: Vec<LaneTally>) -> Self {
        let window_s = info.window.as_secs_f64();
        let mut r = Self {
            protocols: info.servers.iter().map(|s| s.protocol.clone()).collect(),
            servers: info.servers,
            concurrency: info.concurrency,
            verify: info.verify,
            mean_size: info.mean_size,
            size_sd: info.size_sd,
            seed: info.seed,
            window_s,
            operations: 0,
            cut_at_deadline: 0,
            errors: 0,
            error_samples: Vec::new(),
            bytes_received: 0,
            completed_bytes: 0,
            cut_bytes: 0,
            errored_bytes: 0,
            goodput_bps: 0.0,
            per_lane_bps: Spread::default(),
            ttfb_ms: Latency::default(),
            cpu: Cpu::default(),
        };
        let rate = |bytes: u64| {
            if window_s > 0.0 {
                bytes as f64 * 8.0 / window_s
            } else {
                0.0
            }
        };
        let mut lane_rates = Vec::with_capacity(lanes.len());
        let mut ttfb = Vec::new();
        for l in lanes {
            r.operations += l.completed;
            r.cut_at_deadline += l.cut;
            r.errors += l.errors.len() as u64;
            r.bytes_received += l.bytes;
            r.completed_bytes += l.completed_bytes;
            r.cut_bytes += l.cut_bytes;
            r.errored_bytes += l.errored_bytes;
            lane_rates.push(rate(l.bytes));
            ttfb.extend(l.ttfb.iter().map(|d| d.as_secs_f64() * 1e3));
            let room = ERROR_SAMPLES.saturating_sub(r.error_samples.len());
            r.error_samples.extend(l.errors.into_iter().take(room));
        }
        r.goodput_bps = rate(r.bytes_received);
        sort(&mut lane_rates);
        r.per_lane_bps = Spread {
            min: lane_rates.first().copied().unwrap_or(0.0),
            median: quantile(&lane_rates, 0.5),
            max: lane_rates.last().copied().unwrap_or(0.0),
        };
        sort(&mut ttfb);
        r.ttfb_ms = Latency {
            samples: ttfb.len(),
            median: quantile(&ttfb, 0.5),
            p99: quantile(&ttfb, 0.99),
        };
        let (user, system) = (info.cpu.user.as_secs_f64(), info.cpu.system.as_secs_f64());
        let gib = r.bytes_received as f64 / (1u64 << 30) as f64;
        r.cpu = Cpu {
            user_s: user,
            system_s: system,
            s_per_gib: (r.bytes_received > 0).then(|| (user + system) / gib),
            sha256_paired: {
                let PairingStats {
                    paired_bytes,
                    alone_bytes,
                } = info.sha256_bytes;
                let all = paired_bytes + alone_bytes;
                (all > 0).then(|| paired_bytes as f64 / all as f64)
            },
        };
        r
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        for s in &self.servers {
            line(format!(
                "server      {} ({}), {} requests",
                s.url, s.protocol, s.requests
            ));
        }
        line(format!(
            "load        {} lanes for {:.1} s, sizes ~N({}, sd {}), seed {}, digests {}",
            self.concurrency,
            self.window_s,
            HumanBytes(self.mean_size),
            HumanBytes(self.size_sd.round() as u64),
            self.seed,
            if self.verify { "checked" } else { "off" }
        ));
        line(format!(
            "operations  {} completed, {} cut at the deadline, {} failed",
            self.operations, self.cut_at_deadline, self.errors
        ));
        line(format!(
            "volume      {} received ({} in completed operations, {} in cut ones, {} in failed ones)",
            HumanBytes(self.bytes_received),
            HumanBytes(self.completed_bytes),
            HumanBytes(self.cut_bytes),
            HumanBytes(self.errored_bytes)
        ));
        line(format!("goodput     {}", format_bps(self.goodput_bps)));
        line(format!(
            "per lane    min {}  median {}  max {}",
            format_bps(self.per_lane_bps.min),
            format_bps(self.per_lane_bps.median),
            format_bps(self.per_lane_bps.max)
        ));
        line(format!(
            "first byte  median {:.2} ms  p99 {:.2} ms  ({} operations)",
            self.ttfb_ms.median, self.ttfb_ms.p99, self.ttfb_ms.samples
        ));
        line(format!(
            "client cpu  {:.2} s user + {:.2} s system{}{}",
            self.cpu.user_s,
            self.cpu.system_s,
            self.cpu
                .s_per_gib
                .map(|v| format!(" = {v:.3} s/GiB"))
                .unwrap_or_default(),
            self.cpu
                .sha256_paired
                .map(|v| format!("; SHA-256 {:.0} % in pairs", 100.0 * v))
                .unwrap_or_default()
        ));
        for e in &self.error_samples {
            line(format!(
                "error       lane {} {} ({} bytes): {}",
                e.lane, e.server, e.size, e.message
            ));
        }
        if self.errors as usize > self.error_samples.len() {
            line(format!(
                "error       ... and {} more",
                self.errors as usize - self.error_samples.len()
            ));
        }
        out
    }
}

fn sort(v: &mut [f64]) {
    v.sort_by(f64::total_cmp);
}

/// Nearest-rank quantile of sorted `v`; 0 when empty.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[3.0], 0.99), 3.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn totals_add_up_across_lanes() {
        let lane = |bytes, done, done_bytes, cut_bytes| LaneTally {
            bytes,
            completed: done,
            completed_bytes: done_bytes,
            cut: 1,
            cut_bytes,
            ttfb: vec![Duration::from_millis(2)],
            ..LaneTally::default()
        };
        let info = RunInfo {
            servers: Vec::new(),
            concurrency: 2,
            verify: true,
            mean_size: 10,
            size_sd: 2.0,
            seed: 0,
            window: Duration::from_secs(2),
            cpu: CpuTimes::default(),
            sha256_bytes: PairingStats::default(),
        };
        let r = BenchReport::build(info, vec![lane(100, 3, 90, 10), lane(300, 5, 280, 20)]);
        assert_eq!(r.operations, 8);
        assert_eq!(r.cut_at_deadline, 2);
        assert_eq!(r.bytes_received, 400);
        assert_eq!(r.completed_bytes + r.cut_bytes + r.errored_bytes, 400);
        assert_eq!(r.goodput_bps, 1600.0);
        assert_eq!(r.per_lane_bps.min, 400.0);
        assert_eq!(r.per_lane_bps.max, 1200.0);
        assert_eq!(r.ttfb_ms.samples, 2);
        assert!(r.cpu.s_per_gib.is_some());
    }
}
