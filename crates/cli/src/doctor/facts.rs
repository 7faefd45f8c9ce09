//! What the probes measured, as plain data: the input of [`super::analysis::analyse`]. Every
//! field is optional where a host or path may not tell (no procfs, no `ip`, a QUIC-only URL).

use serde::Serialize;
use xfer::ConnectionStats;

/// Settings of this host that bound one connection's throughput.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostFacts {
    /// `net.ipv4.tcp_rmem`: min, default, max bytes (the autotuning range).
    pub tcp_rmem: Option<[u64; 3]>,
    /// `net.ipv4.tcp_wmem`: min, default, max bytes.
    pub tcp_wmem: Option<[u64; 3]>,
    /// `net.core.rmem_max`: the cap on an explicit `SO_RCVBUF` (and UDP buffers), bytes.
    pub rmem_max: Option<u64>,
    /// `net.core.wmem_max`: the cap on an explicit `SO_SNDBUF`, bytes.
    pub wmem_max: Option<u64>,
    /// `net.ipv4.tcp_adv_win_scale`: how much of the receive buffer is advertised as window.
    pub tcp_adv_win_scale: Option<i32>,
    pub congestion_default: Option<String>,
    pub congestion_available: Vec<String>,
    pub congestion_allowed: Vec<String>,
    /// `net.core.default_qdisc`.
    pub default_qdisc: Option<String>,
    /// The interface the route (to the URL's host, else the default route) leaves by.
    pub route_dev: Option<String>,
    /// That route's MTU (the route's own `mtu` or the interface's), bytes.
    pub route_mtu: Option<u32>,
    /// Root or `CAP_NET_ADMIN`: `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE` may pass `*mem_max`.
    pub can_force_buffers: bool,
    /// `net.ipv4.tcp_fastopen`: 0x1 clients send data in SYNs, 0x2 servers take it.
    pub tcp_fastopen: Option<u32>,
    /// The usable receive buffer an xfer connection starts with here, bytes: its head start
    /// (`TcpConfig::initial_recv_buffer`) as this kernel and these privileges grant it. `None`
    /// without one (a kernel before 5.14 cannot unlock it for autotuning).
    pub recv_head_start: Option<u64>,
}

/// What a few connections to the URL's host showed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PathFacts {
    pub host: String,
    pub addr: Option<String>,
    /// TCP connect (handshake) times, milliseconds.
    pub connect_ms: Vec<f64>,
    /// The kernel's smoothed RTT on the last probe connection, milliseconds.
    pub tcp_rtt_ms: Option<f64>,
    /// `IP_MTU` of a connected socket: the path MTU the kernel knows, bytes.
    pub path_mtu: Option<u32>,
}

impl PathFacts {
    /// The best RTT estimate: the smallest connect time, else the kernel's RTT.
    pub fn rtt_ms(&self) -> Option<f64> {
        self.connect_ms
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .reduce(f64::min)
            .or(self.tcp_rtt_ms)
    }
}

/// One short measured transfer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TransferFacts {
    pub url: String,
    pub protocol: String,
    pub bytes: u64,
    pub seconds: f64,
    pub goodput_bps: f64,
    pub lanes: usize,
    pub connections: Vec<ConnectionStats>,
    /// Why the transfer did not run or finish.
    pub error: Option<String>,
}

impl TransferFacts {
    pub fn retransmits(&self) -> u64 {
        self.connections.iter().filter_map(|c| c.retransmits).sum()
    }
}

/// Everything measured in one `xfer doctor` run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Facts {
    pub host: HostFacts,
    pub path: Option<PathFacts>,
    pub transfers: Vec<TransferFacts>,
}
