//! TCP resume: the second transfer to a site does not pay TCP's slow start again.
//!
//! Over TCP the congestion window belongs to the kernel, and a new connection starts from 10
//! segments: at 1 Gbit/s and 100 ms, ten round trips (about a second) before the link is
//! full, for every new `xfer get`. QUIC's Careful Resume (in the QUIC transport) solves this
//! for QUIC; this is the same idea for the HTTP server:
//!
//! - while a peer's connections send, each samples its `TCP_INFO` (delivery rate, minimum
//!   RTT) at most every [`SAMPLE_INTERVAL`]; the peer's path is the largest sum of its
//!   connections' delivery rates × the smallest RTT seen;
//! - when the peer's last connection closes, half that bandwidth-delay product (capped by
//!   [`TcpResumeConfig::max_jump`]) becomes the peer's *budget*, in a BPF map;
//! - a `sock_ops` program linked to this process's cgroup gives each connection accepted from
//!   that peer half of the budget left (at least 64 KiB while it lasts) as its initial
//!   congestion window (`TCP_BPF_IW`), if the entry has not expired and the handshake's RTT
//!   lies within [saved / 2, saved × 10]. The lanes of one transfer, opening together, thus
//!   share at most the saved half-BDP; once it is spent, connections start as usual.
//!
//! The kernel's own congestion control then validates the jump: BBR's startup measures the
//! delivery rate from the first round trip, CUBIC backs off on the first loss. The program
//! only acts on connections to this server's port from peers in the map, and the link is
//! undone when the server exits. It needs `CAP_BPF` and `CAP_NET_ADMIN` (root), a kernel
//! with BPF links for cgroups (5.7) and a cgroup2 file system already mounted (xfer never
//! mounts one); without them the server logs why and serves as before. Off unless asked for
//! (`--mechanism tcp-resume=on`): loading a kernel program is not what a file server does
//! unasked.

#[cfg(target_os = "linux")]
mod cgroup;
#[cfg(target_os = "linux")]
mod runtime;

use std::time::Duration;

use crate::config::ConfigError;

#[cfg(target_os = "linux")]
pub use runtime::TcpResume;

/// How often a sending connection reads its `TCP_INFO`.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// TCP resume knobs of the HTTP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpResumeConfig {
    /// Remember each peer's path and start its next connection's window from it. Default off
    /// (it loads a BPF program, so it runs only when asked; it needs root and a mounted
    /// cgroup2, and without them the server says why at start and carries on).
    pub enabled: bool,
    /// How long a saved path stays usable. Default 1 hour (as QUIC's Careful Resume);
    /// allowed 1 s to 7 days.
    pub lifetime: Duration,
    /// Largest initial window granted, bytes. Default 64 MiB; allowed 64 KiB to 4 GiB. The
    /// grant is at most half the saved bandwidth-delay product in any case.
    pub max_jump: u64,
    /// Peers remembered at once (the least recently used is forgotten). Default 4096;
    /// allowed 1 to 1,000,000.
    pub max_paths: u32,
}

impl Default for TcpResumeConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            lifetime: Duration::from_secs(3600),
            max_jump: 64 << 20,
            max_paths: 4096,
        }
    }
}

impl TcpResumeConfig {
    /// Reject values out of range, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        xfer_core::path_resume::validate_resume_knobs(
            xfer_core::path_resume::ResumeFieldNames {
                lifetime: "tcp_resume.lifetime",
                max_jump: "tcp_resume.max_jump",
                max_paths: "tcp_resume.max_paths",
            },
            self.lifetime,
            self.max_jump,
            u64::from(self.max_paths),
        )
    }
}

/// Whether a server runs TCP resume, for its start-up banner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpResumeStatus {
    /// Turned off in the configuration.
    Off,
    /// The program is linked: returning clients start from their saved path.
    On,
    /// Asked for but not possible here (not root, no BPF, no cgroup v2), and why.
    Unavailable(String),
}

/// A peer's saved path as the kernel program sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedTcpPath {
    /// Segments left for the next connections (each takes half, at least 45 while it lasts).
    pub budget_segments: u32,
    /// The path's minimum RTT.
    pub rtt: Duration,
    /// Time left before the entry expires.
    pub expires_in: Duration,
}

/// One path measurement, to save for a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathMeasurement {
    /// Delivery rate, bytes per second.
    pub rate: u64,
    /// Minimum RTT.
    pub rtt: Duration,
    /// Segment size, bytes.
    pub mss: u32,
}
