//! Facts in, verdict out: a pure function, so every rule is tested over fixed facts.
//!
//! The model is the one behind ESnet's fasterdata host-tuning advice: one TCP connection moves
//! at most one window per round trip, and the window is bounded by the socket buffers the
//! kernel lets it grow to (`tcp_wmem` max on the sender, the advertised share of `tcp_rmem` max
//! on the receiver). A cap below the rate the user wants is a limit; the fix is the sysctl that
//! lifts the buffer past twice the bandwidth-delay product.

use serde::Serialize;
use xfer::format_bps;

use super::facts::Facts;

/// The RTT assumed when no URL was given to measure one, milliseconds.
pub const ASSUMED_RTT_MS: f64 = 100.0;
/// Rates the bandwidth-delay product is shown for when the user names none, bits per second.
pub const DEFAULT_RATES_BPS: [f64; 2] = [1e9, 10e9];
/// Socket buffers never advised below this, bytes (fasterdata's smallest suggestion).
const MIN_ADVISED_BUFFER: u64 = 16 << 20;
/// xfer's default UDP buffer for QUIC, bytes (`QuicTuning::udp_*_buffer`).
const QUIC_UDP_BUFFER: u64 = 32 << 20;
/// What `xfer serve` asks for its send buffer by default, bytes.
const SERVE_SEND_BUFFER: u64 = 32 << 20;
/// The default receive buffer (`tcp_rmem`'s middle value) advised for long paths, bytes.
const ADVISED_RMEM_DEFAULT: u64 = 16 << 20;
/// Paths shorter than this are not told about the first receive window, milliseconds.
const INITIAL_WINDOW_MIN_RTT_MS: f64 = 20.0;
/// The kernel's initial congestion window, 10 segments of 1448 bytes.
const INITIAL_CWND_BYTES: f64 = 14_480.0;

/// What the analysis is asked to check against.
#[derive(Debug, Clone, PartialEq)]
pub struct Targets {
    /// The rate one connection should reach, bits per second; the first is checked, all are
    /// shown as bandwidth-delay-product lines.
    pub rates_bps: Vec<f64>,
    /// RTT to use when the facts hold none, milliseconds.
    pub assumed_rtt_ms: f64,
}

impl Default for Targets {
    fn default() -> Self {
        Self {
            rates_bps: DEFAULT_RATES_BPS.to_vec(),
            assumed_rtt_ms: ASSUMED_RTT_MS,
        }
    }
}

/// A finding that holds the path back (exit 6) or only advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Limit,
    Advice,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable identifier for scripts: `send_buffer_cap`, `recv_buffer_cap`, ...
    pub id: &'static str,
    pub severity: Severity,
    pub message: String,
    /// Commands that would fix it (`sysctl -w ...`, `modprobe ...`).
    pub fix: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BdpLine {
    pub rate_bps: f64,
    pub rtt_ms: f64,
    pub bytes: u64,
    /// Where the rate came from: `target` or `measured`.
    pub source: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub rtt_ms: f64,
    /// `measured` or `assumed`.
    pub rtt_source: &'static str,
    pub bdp: Vec<BdpLine>,
    /// What the autotuning buffers allow one TCP connection, bits per second.
    pub send_cap_bps: Option<f64>,
    pub recv_cap_bps: Option<f64>,
    pub findings: Vec<Finding>,
    /// Every `sysctl -w` line of the findings, in order, without repeats.
    pub sysctl_lines: Vec<String>,
    /// The same settings as a file for `/etc/sysctl.d/`, empty when nothing is to change.
    pub sysctl_d: String,
    /// Which lanes and protocol xfer will use on this path and why.
    pub plan: String,
}

impl Verdict {
    pub fn is_limited(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Limit)
    }
}

/// The bytes a window must hold to keep `rate_bps` going over `rtt_ms`.
pub fn bdp_bytes(rate_bps: f64, rtt_ms: f64) -> u64 {
    (rate_bps / 8.0 * rtt_ms / 1000.0).max(0.0) as u64
}

/// The rate one window of `bytes` sustains over `rtt_ms`.
pub fn window_rate_bps(bytes: u64, rtt_ms: f64) -> f64 {
    bytes as f64 * 8.0 / (rtt_ms.max(0.001) / 1000.0)
}

/// The part of a receive buffer advertised as window: `space - space >> scale` (scale > 0),
/// `space >> -scale` otherwise; kernels from 6.6 estimate it per connection, about half.
fn advertised(space: u64, adv_win_scale: Option<i32>) -> u64 {
    match adv_win_scale.unwrap_or(1) {
        s if s > 0 => space - (space >> s.min(31)),
        s => space >> (-s).min(31),
    }
}

/// Twice the BDP, rounded up to a power of two, at least 16 MiB.
fn advised_buffer(bdp: u64) -> u64 {
    (bdp.saturating_mul(2))
        .next_power_of_two()
        .max(MIN_ADVISED_BUFFER)
}

fn mib(bytes: u64) -> String {
    xfer::HumanBytes(bytes).to_string()
}

pub fn analyse(facts: &Facts, targets: &Targets) -> Verdict {
    // QUIC-only paths have no TCP probes; the transfer's connections still know the RTT.
    let connection_rtt = facts
        .transfers
        .iter()
        .flat_map(|t| t.connections.iter().filter_map(|c| c.rtt_us))
        .min()
        .map(|us| us as f64 / 1000.0);
    let measured_rtt = facts
        .path
        .as_ref()
        .and_then(|p| p.rtt_ms())
        .or(connection_rtt);
    let (rtt_ms, rtt_source) = match measured_rtt {
        Some(r) if r > 0.0 => (r, "measured"),
        _ => (targets.assumed_rtt_ms, "assumed"),
    };
    let goal = targets
        .rates_bps
        .first()
        .copied()
        .unwrap_or(DEFAULT_RATES_BPS[0]);
    let mut bdp: Vec<BdpLine> = targets
        .rates_bps
        .iter()
        .map(|&r| BdpLine {
            rate_bps: r,
            rtt_ms,
            bytes: bdp_bytes(r, rtt_ms),
            source: "target",
        })
        .collect();
    let best = facts
        .transfers
        .iter()
        .filter(|t| t.error.is_none())
        .map(|t| t.goodput_bps)
        .fold(0.0, f64::max);
    if best > 0.0 {
        bdp.push(BdpLine {
            rate_bps: best,
            rtt_ms,
            bytes: bdp_bytes(best, rtt_ms),
            source: "measured",
        });
    }
    let goal_bdp = bdp_bytes(goal, rtt_ms);
    let advised = advised_buffer(goal_bdp);
    let h = &facts.host;
    let at = format!("{rtt_ms:.0} ms RTT");
    let mut findings = Vec::new();

    let send_cap_bps = h.tcp_wmem.map(|w| window_rate_bps(w[2], rtt_ms));
    if let (Some(w), Some(cap)) = (h.tcp_wmem, send_cap_bps) {
        if cap < goal {
            findings.push(Finding {
                id: "send_buffer_cap",
                severity: Severity::Limit,
                message: format!(
                    "tcp_wmem max {} at {at}: at most {} per connection sending from this host \
                     ({} needs {})",
                    mib(w[2]),
                    format_bps(cap),
                    format_bps(goal),
                    mib(goal_bdp)
                ),
                fix: vec![format!(
                    "sysctl -w net.ipv4.tcp_wmem=\"{} {} {advised}\"",
                    w[0], w[1]
                )],
            });
        }
    }
    let recv_cap_bps = h
        .tcp_rmem
        .map(|r| window_rate_bps(advertised(r[2], h.tcp_adv_win_scale), rtt_ms));
    let recv_capped = recv_cap_bps.is_some_and(|cap| cap < goal);
    // A new connection's receive window starts at the advertised share of its first buffer
    // and doubles per round trip as data arrives: on a long path that is a slow start of its
    // own, which a sender starting from a saved window (TCP resume) cannot skip. The first
    // buffer is tcp_rmem's default, or xfer's head start where the kernel granted a larger one
    // (the kernel reports a buffer at half what it accounts, tcp_rmem counts the whole).
    let head_start = h.recv_head_start.map_or(0, |g| g.saturating_mul(2));
    let initial_window = h.tcp_rmem.and_then(|r| {
        let start = r[1].max(head_start);
        let first = advertised(start, h.tcp_adv_win_scale).max(1);
        let rounds = (goal_bdp as f64 / first as f64).log2().ceil();
        (rtt_ms >= INITIAL_WINDOW_MIN_RTT_MS && start < ADVISED_RMEM_DEFAULT && rounds >= 4.0)
            .then_some((first, rounds as u32))
    });
    // Without CAP_NET_ADMIN the head start stops at rmem_max; raising that is the narrower fix
    // (it changes nothing for other programs, which do not ask for a size).
    let head_start_capped = h.recv_head_start.is_some() && !h.can_force_buffers;
    let rmem_line = |r: [u64; 3]| {
        let default = if initial_window.is_some() && !head_start_capped {
            ADVISED_RMEM_DEFAULT
        } else {
            r[1]
        };
        let max = if recv_capped {
            advised.saturating_mul(2)
        } else {
            r[2]
        };
        format!(
            "sysctl -w net.ipv4.tcp_rmem=\"{} {default} {}\"",
            r[0],
            max.max(default)
        )
    };
    if let (Some(r), Some(cap)) = (h.tcp_rmem, recv_cap_bps) {
        if cap < goal {
            findings.push(Finding {
                id: "recv_buffer_cap",
                severity: Severity::Limit,
                message: format!(
                    "tcp_rmem max {} (window about {}) at {at}: at most {} per connection \
                     receiving on this host ({} needs {})",
                    mib(r[2]),
                    mib(advertised(r[2], h.tcp_adv_win_scale)),
                    format_bps(cap),
                    format_bps(goal),
                    mib(goal_bdp)
                ),
                fix: vec![rmem_line(r)],
            });
        }
    }
    if let (Some(r), Some((first, rounds))) = (h.tcp_rmem, initial_window) {
        let (what, fix) = match h.rmem_max.filter(|_| head_start_capped) {
            Some(max) => (
                format!(
                    "rmem_max {} and no CAP_NET_ADMIN: xfer's receive-buffer head start is held \
                     to it",
                    mib(max)
                ),
                format!("sysctl -w net.core.rmem_max={advised}"),
            ),
            None => (format!("tcp_rmem default {}", mib(r[1])), rmem_line(r)),
        };
        findings.push(Finding {
            id: "initial_recv_window",
            severity: Severity::Advice,
            message: format!(
                "{what}: a new connection's receive window starts at about {} and doubles per \
                 round trip, so at {at} every connection needs {rounds} round trips ({:.1} s) \
                 before it may carry {}, even from a server that skips slow start (xfer serve's \
                 TCP resume); buffers are limits, not allocations",
                mib(first),
                f64::from(rounds) * rtt_ms / 1000.0,
                format_bps(goal),
            ),
            fix: vec![fix],
        });
    }
    // Explicit buffers (QUIC's UDP sockets, `xfer serve`'s SO_SNDBUF) stop at *mem_max unless
    // forced, which needs CAP_NET_ADMIN.
    if !h.can_force_buffers {
        let need = goal_bdp
            .min(QUIC_UDP_BUFFER)
            .max(goal_bdp.min(SERVE_SEND_BUFFER));
        for (id, key, max) in [
            ("rmem_max_cap", "net.core.rmem_max", h.rmem_max),
            ("wmem_max_cap", "net.core.wmem_max", h.wmem_max),
        ] {
            if let Some(max) = max.filter(|&m| m < need) {
                findings.push(Finding {
                    id,
                    severity: Severity::Limit,
                    message: format!(
                        "{key} {} and no CAP_NET_ADMIN to force past it: QUIC's UDP buffers and \
                         `xfer serve`'s send buffer stay at {}, at most {} per connection",
                        mib(max),
                        mib(max),
                        format_bps(window_rate_bps(max, rtt_ms))
                    ),
                    fix: vec![format!("sysctl -w {key}={advised}")],
                });
            }
        }
    }

    let retrans: u64 = facts.transfers.iter().map(|t| t.retransmits()).sum();
    let cc = h.congestion_default.as_deref().unwrap_or("");
    let has_bbr = h.congestion_available.iter().any(|c| c == "bbr");
    if !cc.is_empty() && cc != "bbr" {
        let lossy = retrans > 0;
        let (severity, why) = if lossy {
            (
                Severity::Limit,
                format!("the measured transfer retransmitted {retrans} segments and {cc} halves its window on every loss"),
            )
        } else {
            (
                Severity::Advice,
                format!("{cc} backs off on every loss, which costs most on long paths"),
            )
        };
        let fix = if has_bbr {
            vec!["sysctl -w net.ipv4.tcp_congestion_control=bbr".to_string()]
        } else {
            vec![
                "modprobe tcp_bbr".to_string(),
                "sysctl -w net.ipv4.tcp_congestion_control=bbr".to_string(),
            ]
        };
        findings.push(Finding {
            id: "congestion_control",
            severity,
            message: format!(
                "default congestion control is {cc}{}: {why}; xfer asks for bbr on its own \
                 sockets when the kernel has it, other tools and the far end do not",
                if has_bbr {
                    " though bbr is available"
                } else {
                    " and bbr is not loaded"
                }
            ),
            fix,
        });
    }
    if has_bbr && h.default_qdisc.as_deref().is_some_and(|q| q != "fq") {
        findings.push(Finding {
            id: "qdisc",
            severity: Severity::Advice,
            message: format!(
                "default qdisc is {}: fq paces every flow, which fasterdata advises with bbr",
                h.default_qdisc.as_deref().unwrap_or("?")
            ),
            fix: vec!["sysctl -w net.core.default_qdisc=fq".to_string()],
        });
    }
    let mtu = facts.path.as_ref().and_then(|p| p.path_mtu).or(h.route_mtu);
    if let Some(m) = mtu.filter(|&m| m < 1500) {
        findings.push(Finding {
            id: "mtu",
            severity: Severity::Advice,
            message: format!(
                "path MTU {m} bytes, below Ethernet's 1500: every packet carries less payload, \
                 and a tunnel or PPPoE on the path is likely; MTU probing recovers when \
                 ICMP \"fragmentation needed\" is filtered on the way"
            ),
            fix: vec!["sysctl -w net.ipv4.tcp_mtu_probing=1".to_string()],
        });
    }

    if let Some(v) = h.tcp_fastopen.filter(|v| v & 0x3 != 0x3) {
        findings.push(Finding {
            id: "tcp_fastopen",
            severity: Severity::Advice,
            message: format!(
                "net.ipv4.tcp_fastopen is {v}: {} (TCP Fast Open saves TCP's round trip on \
                 every connection after the first to a server, when both ends allow it)",
                match (v & 1 != 0, v & 2 != 0) {
                    (true, false) => "xfer serve here cannot take data in SYNs",
                    (false, true) => "xfer here cannot send data in SYNs",
                    _ => "neither xfer nor xfer serve here can use it",
                }
            ),
            fix: vec!["sysctl -w net.ipv4.tcp_fastopen=3".to_string()],
        });
    }

    if rtt_source == "measured" {
        findings.extend(opt_in_mechanisms(rtt_ms, goal_bdp));
    }

    let mut sysctl_lines: Vec<String> = Vec::new();
    for f in &findings {
        for line in f.fix.iter().filter(|l| l.starts_with("sysctl -w ")) {
            if !sysctl_lines.contains(line) {
                sysctl_lines.push(line.clone());
            }
        }
    }
    let sysctl_d = if sysctl_lines.is_empty() {
        String::new()
    } else {
        let mut s = String::from("# /etc/sysctl.d/90-xfer.conf, then: sysctl --system\n");
        for line in &sysctl_lines {
            let kv = line.trim_start_matches("sysctl -w ").replace('"', "");
            if let Some((k, v)) = kv.split_once('=') {
                s.push_str(&format!("{k} = {v}\n"));
            }
        }
        s
    };
    let plan = plan(send_cap_bps.min_opt(recv_cap_bps), goal, rtt_ms);
    Verdict {
        rtt_ms,
        rtt_source,
        bdp,
        send_cap_bps,
        recv_cap_bps,
        findings,
        sysctl_lines,
        sysctl_d,
        plan,
    }
}

/// The serving side's opt-in mechanisms that would pay on a measured path of `rtt_ms`
/// (docs/tuning.md, "Mechanisms"): off by default because they need root, so only an
/// operator can turn them on.
fn opt_in_mechanisms(rtt_ms: f64, bdp: u64) -> Vec<Finding> {
    if rtt_ms < INITIAL_WINDOW_MIN_RTT_MS {
        return Vec::new();
    }
    let mut out = Vec::new();
    // Slow start doubles from the kernel's 10 segments each round trip.
    let rounds = (bdp as f64 / INITIAL_CWND_BYTES).log2().ceil();
    if rounds >= 4.0 {
        out.push(Finding {
            id: "mechanism_tcp_resume",
            severity: Severity::Advice,
            message: format!(
                "slow start takes about {rounds:.0} round trips ({:.1} s) to fill {} at \
                 {rtt_ms:.0} ms: a server run as root with a mounted cgroup2 and `--mechanism \
                 tcp-resume=on` starts a returning client's connections from the path it \
                 measured last time",
                rounds * rtt_ms / 1000.0,
                mib(bdp)
            ),
            fix: vec!["xfer serve --mechanism tcp-resume=on".to_string()],
        });
    }
    out
}

/// How xfer gets past a per-connection cap: lanes, each its own window.
fn plan(per_connection: Option<f64>, goal: f64, rtt_ms: f64) -> String {
    const HTTP1_LANES: f64 = 8.0;
    let Some(cap) = per_connection else {
        return "xfer will use its defaults: 8 HTTP/1.1 lanes, or 2 QUIC connections with 4 \
                streams each for quic:// URLs"
            .to_string();
    };
    if cap >= goal {
        return format!(
            "one connection can reach {} at {rtt_ms:.0} ms, so the protocol is free: HTTP/2 \
             (one connection, 8 streams) or QUIC (2 connections) need the fewest sockets; \
             HTTP/1.1 with 8 lanes stays the default",
            format_bps(goal)
        );
    }
    let lanes = (goal / cap).ceil();
    format!(
        "one TCP connection tops out at {} here, so {} needs {lanes:.0} connections: xfer's 8 \
         HTTP/1.1 lanes reach about {}{}; raise the buffers above rather than adding lanes, \
         since every lane also competes for the bottleneck",
        format_bps(cap),
        format_bps(goal),
        format_bps(cap * HTTP1_LANES),
        if lanes > HTTP1_LANES {
            format!(" (use -c {lanes:.0} for more)")
        } else {
            String::new()
        }
    )
}

trait MinOpt {
    fn min_opt(self, other: Self) -> Self;
}

impl MinOpt for Option<f64> {
    fn min_opt(self, other: Self) -> Self {
        match (self, other) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::facts::{HostFacts, PathFacts, TransferFacts};

    /// A stock Linux host (Debian/Ubuntu defaults) at `rtt` ms.
    fn stock(rtt: f64) -> Facts {
        Facts {
            host: HostFacts {
                tcp_rmem: Some([4096, 131072, 6291456]),
                tcp_wmem: Some([4096, 16384, 4194304]),
                rmem_max: Some(212992),
                wmem_max: Some(212992),
                tcp_adv_win_scale: Some(1),
                congestion_default: Some("cubic".into()),
                congestion_available: vec!["reno".into(), "cubic".into()],
                congestion_allowed: vec!["reno".into(), "cubic".into()],
                default_qdisc: Some("fq_codel".into()),
                route_dev: Some("eth0".into()),
                route_mtu: Some(1500),
                can_force_buffers: false,
                tcp_fastopen: Some(1),
                // The head start as a stock kernel grants it without CAP_NET_ADMIN: rmem_max.
                recv_head_start: Some(212992),
            },
            path: Some(PathFacts {
                host: "example".into(),
                connect_ms: vec![rtt + 0.4, rtt, rtt + 1.0],
                ..PathFacts::default()
            }),
            transfers: Vec::new(),
        }
    }

    fn tuned(rtt: f64) -> Facts {
        let mut f = stock(rtt);
        let max = 64 << 20;
        f.host.tcp_rmem = Some([4096, 16 << 20, max]);
        f.host.tcp_wmem = Some([4096, 16384, max]);
        f.host.rmem_max = Some(max);
        f.host.wmem_max = Some(max);
        f.host.congestion_default = Some("bbr".into());
        f.host.congestion_available.push("bbr".into());
        f.host.default_qdisc = Some("fq".into());
        f.host.tcp_fastopen = Some(3);
        f.host.recv_head_start = Some(16 << 20);
        f
    }

    fn ids(v: &Verdict) -> Vec<&'static str> {
        v.findings.iter().map(|f| f.id).collect()
    }

    #[test]
    fn stock_host_at_100ms_is_capped_by_its_send_buffer() {
        let v = analyse(&stock(100.0), &Targets::default());
        assert_eq!(v.rtt_source, "measured");
        assert!((v.rtt_ms - 100.0).abs() < 1e-9);
        let send = v
            .findings
            .iter()
            .find(|f| f.id == "send_buffer_cap")
            .unwrap_or_else(|| panic!("no send cap in {:?}", ids(&v)));
        // 4 MiB per 100 ms: 335.5 Mbit/s.
        assert!(send.message.contains("4.00 MiB"), "{}", send.message);
        assert!(send.message.contains("335"), "{}", send.message);
        assert_eq!(send.severity, Severity::Limit);
        // 1 Gbit/s x 100 ms = 12.5 MB; twice that rounds up to 32 MiB.
        assert_eq!(
            send.fix,
            vec!["sysctl -w net.ipv4.tcp_wmem=\"4096 16384 33554432\"".to_string()]
        );
        assert!(ids(&v).contains(&"recv_buffer_cap"));
        assert!(ids(&v).contains(&"wmem_max_cap"));
        assert!(v
            .sysctl_lines
            .contains(&"sysctl -w net.core.wmem_max=33554432".to_string()));
        assert!(v
            .sysctl_d
            .contains("net.ipv4.tcp_wmem = 4096 16384 33554432\n"));
        assert!(v.is_limited());
        assert_eq!(v.bdp[0].bytes, 12_500_000);
    }

    #[test]
    fn a_small_default_receive_buffer_on_a_long_path_is_advised_up() {
        let mut f = tuned(100.0);
        f.host.tcp_rmem = Some([4096, 131072, 64 << 20]);
        // A kernel that cannot unlock a buffer again (before 5.14): no head start.
        f.host.recv_head_start = None;
        let v = analyse(&f, &Targets::default());
        let w = v
            .findings
            .iter()
            .find(|f| f.id == "initial_recv_window")
            .unwrap_or_else(|| panic!("no initial_recv_window in {:?}", ids(&v)));
        assert_eq!(w.severity, Severity::Advice);
        // 64 KiB to 12.5 MB: 8 doublings, 0.8 s at 100 ms.
        assert!(w.message.contains("8 round trips (0.8 s)"), "{}", w.message);
        assert_eq!(
            w.fix,
            vec!["sysctl -w net.ipv4.tcp_rmem=\"4096 16777216 67108864\"".to_string()]
        );
        assert!(!v.is_limited());
        // A LAN is not told.
        let v = analyse(
            &{
                let mut f = f.clone();
                f.path = Some(PathFacts {
                    host: "lan".into(),
                    connect_ms: vec![0.3],
                    ..PathFacts::default()
                });
                f
            },
            &Targets::default(),
        );
        assert!(!ids(&v).contains(&"initial_recv_window"));
        // With a capped maximum too, one tcp_rmem line carries both fixes.
        let mut f = stock(100.0);
        f.host.recv_head_start = None;
        let v = analyse(&f, &Targets::default());
        let lines: Vec<&String> = v
            .sysctl_lines
            .iter()
            .filter(|l| l.contains("tcp_rmem"))
            .collect();
        assert_eq!(
            lines,
            vec!["sysctl -w net.ipv4.tcp_rmem=\"4096 16777216 67108864\""]
        );
    }

    #[test]
    fn a_head_start_held_to_rmem_max_is_advised_through_rmem_max() {
        let v = analyse(&stock(100.0), &Targets::default());
        let w = v
            .findings
            .iter()
            .find(|f| f.id == "initial_recv_window")
            .unwrap_or_else(|| panic!("no initial_recv_window in {:?}", ids(&v)));
        // 416 KiB accounted, 208 KiB advertised, to 12.5 MB: 6 doublings.
        assert!(w.message.contains("rmem_max 208.00 KiB"), "{}", w.message);
        assert!(w.message.contains("6 round trips (0.6 s)"), "{}", w.message);
        assert_eq!(
            w.fix,
            vec!["sysctl -w net.core.rmem_max=33554432".to_string()]
        );
        // The same line as rmem_max_cap's, once; tcp_rmem's default is left alone.
        let rmem_max: Vec<&String> = v
            .sysctl_lines
            .iter()
            .filter(|l| l.contains("rmem_max"))
            .collect();
        assert_eq!(rmem_max, vec!["sysctl -w net.core.rmem_max=33554432"]);
        assert!(
            v.sysctl_lines
                .contains(&"sysctl -w net.ipv4.tcp_rmem=\"4096 131072 67108864\"".to_string()),
            "{:?}",
            v.sysctl_lines
        );
        // With CAP_NET_ADMIN the whole head start is granted and there is nothing to advise.
        let mut f = stock(100.0);
        f.host.can_force_buffers = true;
        f.host.recv_head_start = Some(16 << 20);
        let v = analyse(&f, &Targets::default());
        assert!(!ids(&v).contains(&"initial_recv_window"), "{:?}", ids(&v));
    }

    #[test]
    fn tuned_host_at_100ms_has_no_limit() {
        let v = analyse(&tuned(100.0), &Targets::default());
        assert!(!v.is_limited(), "{:?}", v.findings);
        // Nothing of the host to change; only the server's opt-in mechanisms are advised.
        assert!(
            ids(&v).iter().all(|id| id.starts_with("mechanism_")),
            "{:?}",
            ids(&v)
        );
        assert!(v.sysctl_d.is_empty());
    }

    #[test]
    fn a_host_whose_server_cannot_take_data_in_syns_is_told_how() {
        let v = analyse(&stock(100.0), &Targets::default());
        let tfo = v
            .findings
            .iter()
            .find(|f| f.id == "tcp_fastopen")
            .unwrap_or_else(|| panic!("no tcp_fastopen in {:?}", ids(&v)));
        assert_eq!(tfo.severity, Severity::Advice);
        assert!(
            tfo.message.contains("cannot take data in SYNs"),
            "{}",
            tfo.message
        );
        assert_eq!(
            tfo.fix,
            vec!["sysctl -w net.ipv4.tcp_fastopen=3".to_string()]
        );
        assert!(v.sysctl_d.contains("net.ipv4.tcp_fastopen = 3\n"));
        assert!(!ids(&analyse(&tuned(100.0), &Targets::default())).contains(&"tcp_fastopen"));
    }

    #[test]
    fn stock_host_on_a_lan_is_not_limited_by_buffers() {
        let v = analyse(&stock(1.0), &Targets::default());
        assert!(!ids(&v).contains(&"send_buffer_cap"), "{:?}", ids(&v));
        assert!(!ids(&v).contains(&"recv_buffer_cap"));
    }

    #[test]
    fn root_may_force_past_mem_max() {
        let mut f = stock(100.0);
        f.host.can_force_buffers = true;
        let v = analyse(&f, &Targets::default());
        assert!(!ids(&v).contains(&"wmem_max_cap"), "{:?}", ids(&v));
    }

    #[test]
    fn a_higher_target_rate_needs_bigger_buffers() {
        let t = Targets {
            rates_bps: vec![10e9],
            ..Targets::default()
        };
        let v = analyse(&tuned(100.0), &t);
        let send = v.findings.iter().find(|f| f.id == "send_buffer_cap");
        // 10 Gbit/s x 100 ms = 125 MB; twice, rounded up: 256 MiB.
        assert_eq!(
            send.map(|f| f.fix.clone()),
            Some(vec![
                "sysctl -w net.ipv4.tcp_wmem=\"4096 16384 268435456\"".into()
            ])
        );
    }

    #[test]
    fn loss_based_congestion_control_on_a_lossy_path_is_a_limit() {
        let mut f = tuned(100.0);
        f.host.congestion_default = Some("cubic".into());
        let v = analyse(&f, &Targets::default());
        let cc = v.findings.iter().find(|x| x.id == "congestion_control");
        assert_eq!(cc.map(|x| x.severity), Some(Severity::Advice));
        f.transfers.push(TransferFacts {
            goodput_bps: 2e8,
            connections: vec![xfer::ConnectionStats {
                retransmits: Some(40),
                ..Default::default()
            }],
            ..TransferFacts::default()
        });
        let v = analyse(&f, &Targets::default());
        let cc = v.findings.iter().find(|x| x.id == "congestion_control");
        assert_eq!(cc.map(|x| x.severity), Some(Severity::Limit));
        assert_eq!(v.bdp.last().map(|b| b.source), Some("measured"));
    }

    #[test]
    fn without_a_url_the_rtt_is_assumed() {
        let mut f = tuned(5.0);
        f.path = None;
        let v = analyse(&f, &Targets::default());
        assert_eq!(v.rtt_source, "assumed");
        assert!((v.rtt_ms - ASSUMED_RTT_MS).abs() < 1e-9);
    }

    #[test]
    fn without_probes_the_connections_give_the_rtt() {
        let mut f = stock(1.0);
        f.path = None;
        f.transfers.push(TransferFacts {
            connections: vec![xfer::ConnectionStats {
                rtt_us: Some(80_000),
                ..Default::default()
            }],
            ..TransferFacts::default()
        });
        let v = analyse(&f, &Targets::default());
        assert_eq!(v.rtt_source, "measured");
        assert!((v.rtt_ms - 80.0).abs() < 1e-9);
    }

    #[test]
    fn a_long_measured_path_is_told_the_opt_in_mechanisms() {
        let v = analyse(&tuned(100.0), &Targets::default());
        assert!(ids(&v).contains(&"mechanism_tcp_resume"), "{:?}", ids(&v));
        assert!(!v.sysctl_lines.iter().any(|l| l.contains("xfer")));
        // A LAN, or no path measured: neither.
        let v = analyse(&tuned(1.0), &Targets::default());
        assert!(!ids(&v).iter().any(|id| id.starts_with("mechanism_")));
        let mut unmeasured = tuned(100.0);
        unmeasured.path = None;
        let v = analyse(&unmeasured, &Targets::default());
        assert!(!ids(&v).iter().any(|id| id.starts_with("mechanism_")));
    }

    #[test]
    fn small_mtu_is_advice() {
        let mut f = tuned(100.0);
        f.host.route_mtu = Some(1420);
        let v = analyse(&f, &Targets::default());
        assert_eq!(ids(&v)[0], "mtu");
        assert!(ids(&v)[1..].iter().all(|id| id.starts_with("mechanism_")));
        assert!(!v.is_limited());
        assert_eq!(v.sysctl_lines, vec!["sysctl -w net.ipv4.tcp_mtu_probing=1"]);
    }
}
