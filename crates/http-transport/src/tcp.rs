//! TCP socket tuning shared by the HTTP client and server: buffer sizes, congestion control,
//! `TCP_NODELAY`, and reading back what the kernel actually granted (`TCP_INFO`).
//!
//! Options that shape the handshake (the receive buffer decides the window scale factor) are set
//! before `connect`/`listen`: [`apply_before_connect`], [`apply_listener`]. Options that may be
//! changed later are re-applied on accepted sockets by [`apply_connected`]. [`connect`] builds a
//! client socket that way and connects it with a deadline.
//!
//! This module does not do TLS, HTTP, or name resolution; it is Linux-first (other systems get
//! the portable subset and no `TCP_INFO`).

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use socket2::{SockRef, Socket};
use tokio::net::{TcpSocket, TcpStream};
use xfer_common::sockbuf::{self, Direction};

use crate::config::TcpConfig;

/// Where the kernel lists the congestion control algorithms it can use right now.
const AVAILABLE_CC_PATH: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// The algorithm [`TcpConfig::default`] asks for; when the kernel lacks it we quietly keep the
/// kernel default instead of refusing to start, since nobody asked for it by hand.
const PREFERRED_CC: &str = "bbr";

/// A socket option that could not be applied, or a connection that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TcpError {
    /// A `setsockopt`/`getsockopt` call failed.
    #[error("cannot set {option} on tcp socket")]
    Option {
        option: &'static str,
        #[source]
        source: io::Error,
    },
    /// The requested congestion control algorithm is not offered by this kernel.
    #[error("congestion control {requested:?} is not available (kernel offers: {available})")]
    CongestionUnavailable {
        requested: String,
        available: String,
    },
    /// Creating the socket or connecting it failed.
    #[error("cannot connect to {peer}")]
    Connect {
        peer: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The connection attempt did not finish in time.
    #[error("connecting to {peer} timed out after {after:?}")]
    ConnectTimeout { peer: SocketAddr, after: Duration },
}

/// What the kernel granted after tuning a socket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AppliedTcp {
    /// Usable send buffer in bytes (half of what `SO_SNDBUF` reports: the kernel doubles the
    /// request to account for its bookkeeping). `None` when not set (autotuning).
    pub send_buffer: Option<u64>,
    /// Usable receive buffer in bytes, as above.
    pub recv_buffer: Option<u64>,
    /// Congestion control in effect, as the kernel reports it.
    pub congestion: Option<String>,
    /// Whether `TCP_NODELAY` is on.
    pub nodelay: bool,
}

/// One `TCP_INFO` reading.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TcpInfoSnapshot {
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u64,
    /// Round-trip time variation, microseconds.
    pub rttvar_us: u64,
    /// Smallest round-trip time seen, microseconds (kernel 4.10+).
    pub min_rtt_us: Option<u64>,
    /// Congestion window in bytes: `snd_cwnd` segments × `snd_mss`.
    pub cwnd_bytes: u64,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub retransmits: u64,
    /// Congestion control algorithm in use.
    pub congestion: String,
    /// Payload bytes received (kernel 4.1+).
    pub bytes_received: Option<u64>,
    /// Payload bytes acknowledged by the peer (kernel 4.1+).
    pub bytes_acked: Option<u64>,
    /// Current pacing rate, bytes per second (kernel 3.15+).
    pub pacing_rate: Option<u64>,
    /// Microseconds the sender was limited by the peer's receive window (kernel 4.9+).
    pub rwnd_limited_us: Option<u64>,
    /// Microseconds the sender was limited by its own send buffer (kernel 4.9+).
    pub sndbuf_limited_us: Option<u64>,
    /// Usable send buffer, bytes (half the `SO_SNDBUF` read-back).
    pub send_buffer: u64,
    /// Usable receive buffer, bytes (half the `SO_RCVBUF` read-back).
    pub recv_buffer: u64,
    /// Packets that arrived out of order and waited for a hole to fill (kernel 5.4+): the
    /// receiving side's view of loss on the path towards it, which a downloading client cannot
    /// see in its own retransmit counter.
    pub rcv_ooopack: Option<u64>,
}

/// Tune a fresh client socket before it connects. The receive buffer must be set here: the
/// window scale is fixed by the SYN.
pub fn apply_before_connect(socket: &Socket, cfg: &TcpConfig) -> Result<AppliedTcp, TcpError> {
    apply_all(socket, cfg)
}

/// Tune a listening socket before `listen`; accepted sockets inherit buffers, congestion control
/// and `TCP_NODELAY` from it.
pub fn apply_listener(socket: &Socket, cfg: &TcpConfig) -> Result<AppliedTcp, TcpError> {
    apply_all(socket, cfg)
}

/// Tune an established (typically accepted) socket: everything except the receive buffer,
/// which no longer changes the negotiated window scale (set it on the listener instead).
pub fn apply_connected(socket: &Socket, cfg: &TcpConfig) -> Result<AppliedTcp, TcpError> {
    let mut applied = apply(socket, cfg, false)?;
    // Report what the socket has (inherited from the listener) when a size was asked for.
    applied.recv_buffer = cfg
        .recv_buffer
        .and_then(|_| socket.recv_buffer_size().ok())
        .map(|v| v as u64 / 2);
    Ok(applied)
}

fn apply_all(socket: &Socket, cfg: &TcpConfig) -> Result<AppliedTcp, TcpError> {
    apply(socket, cfg, true)
}

fn apply(socket: &Socket, cfg: &TcpConfig, recv: bool) -> Result<AppliedTcp, TcpError> {
    let send_buffer = match cfg.send_buffer {
        Some(req) => Some(set_buffer(socket, Direction::Send, req, cfg.force_buffers)?),
        None => None,
    };
    let recv_buffer = match cfg.recv_buffer.filter(|_| recv) {
        Some(req) => Some(set_buffer(socket, Direction::Recv, req, cfg.force_buffers)?),
        None => None,
    };
    if let Some(start) = cfg
        .initial_recv_buffer
        .filter(|_| recv && recv_buffer.is_none())
    {
        start_recv_buffer(socket, start, cfg.force_buffers)?;
    }
    if let Some(clamp) = cfg.window_clamp.filter(|_| recv) {
        let v = libc::c_int::try_from(clamp).unwrap_or(libc::c_int::MAX);
        set_int(socket, libc::TCP_WINDOW_CLAMP, v).map_err(|source| TcpError::Option {
            option: "TCP_WINDOW_CLAMP",
            source,
        })?;
    }
    let congestion = set_congestion(socket, cfg.congestion.as_deref())?;
    socket
        .set_nodelay(cfg.nodelay)
        .map_err(|source| TcpError::Option {
            option: "TCP_NODELAY",
            source,
        })?;
    Ok(AppliedTcp {
        send_buffer,
        recv_buffer,
        congestion: congestion.or_else(|| read_congestion(socket)),
        nodelay: cfg.nodelay,
    })
}

/// Create a socket for `addr`, tune it with `cfg` before the handshake, and connect within
/// `timeout`.
pub async fn connect(
    addr: SocketAddr,
    cfg: &TcpConfig,
    timeout: Duration,
) -> Result<(TcpStream, AppliedTcp), TcpError> {
    connect_fast_open(addr, cfg, timeout, false).await
}

/// [`connect`], with TCP Fast Open when `fast_open` and [`TcpConfig::fast_open`]: when the
/// kernel holds a cookie for the server, the connection returns at once and the first write
/// goes out in the SYN. Only for protocols whose first bytes may be delivered twice.
pub async fn connect_fast_open(
    addr: SocketAddr,
    cfg: &TcpConfig,
    timeout: Duration,
    fast_open: bool,
) -> Result<(TcpStream, AppliedTcp), TcpError> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(|source| TcpError::Connect { peer: addr, source })?;
    let applied = apply_before_connect(&SockRef::from(&socket), cfg)?;
    if fast_open && cfg.fast_open {
        if let Err(e) = set_int(&socket, FAST_OPEN_CONNECT, 1) {
            // Kernels before 4.11: the ordinary handshake.
            tracing::debug!(error = %e, "TCP_FASTOPEN_CONNECT not available");
        }
    }
    match tokio::time::timeout(timeout, socket.connect(addr)).await {
        Ok(Ok(stream)) => Ok((stream, applied)),
        Ok(Err(source)) => Err(TcpError::Connect { peer: addr, source }),
        Err(_) => Err(TcpError::ConnectTimeout {
            peer: addr,
            after: timeout,
        }),
    }
}

/// Let a listening socket take data in SYNs (TCP Fast Open, server side), holding up to
/// `queue` such connections before they are accepted. It takes effect only when
/// `net.ipv4.tcp_fastopen` has bit 0x2 ([`fast_open_server_enabled`]).
pub fn enable_fast_open_listener(socket: &impl AsFd, queue: u32) -> Result<(), TcpError> {
    let queue = i32::try_from(queue).unwrap_or(i32::MAX);
    set_int(socket, FAST_OPEN, queue).map_err(|source| TcpError::Option {
        option: "TCP_FASTOPEN",
        source,
    })
}

/// `net.ipv4.tcp_fastopen` of the calling process's network namespace: bit 0x1 lets clients
/// send data in SYNs, 0x2 lets servers take it. `None` when it cannot be read.
pub fn fast_open_sysctl() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether listeners here take data in SYNs: `net.ipv4.tcp_fastopen` has bit 0x2.
pub fn fast_open_server_enabled() -> bool {
    fast_open_sysctl().is_some_and(|v| v & 0x2 != 0)
}

#[cfg(target_os = "linux")]
const FAST_OPEN: libc::c_int = libc::TCP_FASTOPEN;
#[cfg(target_os = "linux")]
const FAST_OPEN_CONNECT: libc::c_int = libc::TCP_FASTOPEN_CONNECT;
#[cfg(not(target_os = "linux"))]
const FAST_OPEN: libc::c_int = -1;
#[cfg(not(target_os = "linux"))]
const FAST_OPEN_CONNECT: libc::c_int = -1;

/// An integer `IPPROTO_TCP` option.
fn set_int(socket: &impl AsFd, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    if option < 0 {
        return Err(io::ErrorKind::Unsupported.into());
    }
    xfer_common::sockopt::set_int(socket.as_fd(), libc::IPPROTO_TCP, option, value)
}

/// Check that the congestion control `cfg` asks for exists, without a socket: for start-up
/// validation. Returns the algorithm that will be used (`None`: the kernel default).
pub fn check_congestion(cfg: &TcpConfig) -> Result<Option<String>, TcpError> {
    resolve_congestion(cfg.congestion.as_deref())
}

/// The congestion control algorithms this kernel offers, from procfs.
pub fn available_congestion() -> Option<Vec<String>> {
    std::fs::read_to_string(AVAILABLE_CC_PATH)
        .ok()
        .map(|s| s.split_whitespace().map(str::to_string).collect())
}

fn resolve_congestion(requested: Option<&str>) -> Result<Option<String>, TcpError> {
    let Some(requested) = requested else {
        return Ok(None);
    };
    // Without procfs we cannot check in advance; setsockopt will tell.
    let Some(available) = available_congestion() else {
        return Ok(Some(requested.to_string()));
    };
    if available.iter().any(|a| a == requested) {
        Ok(Some(requested.to_string()))
    } else if requested == PREFERRED_CC {
        tracing::debug!(
            available = %available.join(" "),
            "bbr not offered by this kernel; keeping the default congestion control"
        );
        Ok(None)
    } else {
        Err(TcpError::CongestionUnavailable {
            requested: requested.to_string(),
            available: available.join(" "),
        })
    }
}

#[cfg(target_os = "linux")]
fn set_congestion(socket: &Socket, requested: Option<&str>) -> Result<Option<String>, TcpError> {
    let Some(name) = resolve_congestion(requested)? else {
        return Ok(None);
    };
    socket
        .set_tcp_congestion(name.as_bytes())
        .map_err(|source| TcpError::Option {
            option: "TCP_CONGESTION",
            source,
        })?;
    Ok(read_congestion(socket).or(Some(name)))
}

#[cfg(not(target_os = "linux"))]
fn set_congestion(_socket: &Socket, requested: Option<&str>) -> Result<Option<String>, TcpError> {
    match requested {
        None | Some(PREFERRED_CC) => Ok(None),
        Some(other) => Err(TcpError::CongestionUnavailable {
            requested: other.to_string(),
            available: "none (not linux)".to_string(),
        }),
    }
}

#[cfg(target_os = "linux")]
fn read_congestion(socket: &Socket) -> Option<String> {
    socket
        .tcp_congestion()
        .ok()
        .map(|raw| {
            String::from_utf8_lossy(&raw)
                .trim_end_matches('\0')
                .to_string()
        })
        .filter(|s| !s.is_empty())
}

#[cfg(not(target_os = "linux"))]
fn read_congestion(_socket: &Socket) -> Option<String> {
    None
}

static WARNED_SEND_CLAMP: AtomicBool = AtomicBool::new(false);
static WARNED_RECV_CLAMP: AtomicBool = AtomicBool::new(false);

/// Set one buffer, forcing past the sysctl limit when allowed, and return the usable size the
/// kernel granted. A grant below the request is logged once per process and direction.
fn set_buffer(
    socket: &Socket,
    dir: Direction,
    requested: u64,
    force: bool,
) -> Result<u64, TcpError> {
    let (plain_name, sysctl, warned) = match dir {
        Direction::Send => ("SO_SNDBUF", "net.core.wmem_max", &WARNED_SEND_CLAMP),
        Direction::Recv => ("SO_RCVBUF", "net.core.rmem_max", &WARNED_RECV_CLAMP),
    };
    // The kernel doubles whatever it accepts; asking for more than i32::MAX / 2 overflows it.
    let req = usize::try_from(requested.min(i32::MAX as u64 / 2)).unwrap_or(usize::MAX / 2);
    sockbuf::request(socket, dir, req, force).map_err(|source| TcpError::Option {
        option: plain_name,
        source,
    })?;
    let granted = match dir {
        Direction::Send => socket.send_buffer_size(),
        Direction::Recv => socket.recv_buffer_size(),
    }
    .map_err(|source| TcpError::Option {
        option: plain_name,
        source,
    })? as u64
        / 2;
    if granted < req as u64 && !warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            option = plain_name,
            requested = req,
            granted,
            "kernel clamped the socket buffer; raise sysctl {sysctl} (or run with CAP_NET_ADMIN) \
             for the full size"
        );
    }
    Ok(granted)
}

/// [`TcpConfig::initial_recv_buffer`]: a head start for autotuning. Quiet when the kernel grants
/// less (no `CAP_NET_ADMIN`: `rmem_max`) or cannot unlock the size again (before 5.14): this is a
/// default, not something the user asked for.
fn start_recv_buffer(
    socket: &Socket,
    requested: u64,
    force: bool,
) -> Result<Option<u64>, TcpError> {
    let req = usize::try_from(requested.min(i32::MAX as u64 / 2)).unwrap_or(usize::MAX / 2);
    let granted = sockbuf::start_at(socket, Direction::Recv, req, force).map_err(|source| {
        TcpError::Option {
            option: "SO_RCVBUF",
            source,
        }
    })?;
    tracing::trace!(requested = req, ?granted, "receive buffer head start");
    Ok(granted.map(|g| g as u64))
}

/// The usable receive buffer a new connection made with `cfg` starts with on this host and
/// with this process's privileges ([`TcpConfig::initial_recv_buffer`] as the kernel grants it),
/// bytes: what `xfer doctor` reasons from. `None` when there is no head start (none asked for,
/// or a kernel that could not unlock it).
pub fn recv_head_start(cfg: &TcpConfig) -> Option<u64> {
    let start = cfg
        .initial_recv_buffer
        .filter(|_| cfg.recv_buffer.is_none())?;
    let socket = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    start_recv_buffer(&socket, start, cfg.force_buffers)
        .ok()
        .flatten()
}

/// The usable receive buffer the kernel grants a fixed (locked) `SO_RCVBUF` of `requested`
/// bytes on this host with this process's privileges (`force`: try `SO_RCVBUFFORCE` first),
/// found on a socket that never connects. `None` when the probe itself fails.
pub fn fixed_recv_grant(requested: u64, force: bool) -> Option<u64> {
    let socket = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    let req = usize::try_from(requested.min(i32::MAX as u64 / 2)).ok()?;
    sockbuf::request(&socket, Direction::Recv, req, force).ok()?;
    socket.recv_buffer_size().ok().map(|v| v as u64 / 2)
}

/// Read `TCP_INFO`, the congestion control and the buffer sizes of a connected socket. `None`
/// when the descriptor is not a TCP socket (or not on Linux).
#[cfg(target_os = "linux")]
pub fn tcp_info(fd: &impl AsFd) -> Option<TcpInfoSnapshot> {
    use std::mem::offset_of;

    let fd = fd.as_fd();
    let (raw, len) = raw_tcp_info(&fd)?;
    let has = |end: usize| len >= end;
    if !has(offset_of!(libc::tcp_info, tcpi_total_retrans) + 4) {
        return None;
    }
    let opt64 = |end: usize, v: u64| has(end).then_some(v);
    let sock = SockRef::from(&fd);
    Some(TcpInfoSnapshot {
        rtt_us: u64::from(raw.tcpi_rtt),
        rttvar_us: u64::from(raw.tcpi_rttvar),
        min_rtt_us: opt64(
            offset_of!(libc::tcp_info, tcpi_min_rtt) + 4,
            u64::from(raw.tcpi_min_rtt),
        ),
        cwnd_bytes: u64::from(raw.tcpi_snd_cwnd) * u64::from(raw.tcpi_snd_mss),
        retransmits: u64::from(raw.tcpi_total_retrans),
        congestion: read_congestion(&sock).unwrap_or_default(),
        bytes_received: opt64(
            offset_of!(libc::tcp_info, tcpi_bytes_received) + 8,
            raw.tcpi_bytes_received,
        ),
        bytes_acked: opt64(
            offset_of!(libc::tcp_info, tcpi_bytes_acked) + 8,
            raw.tcpi_bytes_acked,
        ),
        pacing_rate: opt64(
            offset_of!(libc::tcp_info, tcpi_pacing_rate) + 8,
            raw.tcpi_pacing_rate,
        ),
        rwnd_limited_us: opt64(
            offset_of!(libc::tcp_info, tcpi_rwnd_limited) + 8,
            raw.tcpi_rwnd_limited,
        ),
        sndbuf_limited_us: opt64(
            offset_of!(libc::tcp_info, tcpi_sndbuf_limited) + 8,
            raw.tcpi_sndbuf_limited,
        ),
        send_buffer: sock.send_buffer_size().map_or(0, |v| v as u64 / 2),
        recv_buffer: sock.recv_buffer_size().map_or(0, |v| v as u64 / 2),
        rcv_ooopack: opt64(
            offset_of!(libc::tcp_info, tcpi_rcv_ooopack) + 4,
            u64::from(raw.tcpi_rcv_ooopack),
        ),
    })
}

/// What TCP resume (sender) and the receive-window cap (receiver) read of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathSample {
    /// The kernel's latest delivery rate sample, bytes per second (kernel 4.9+).
    pub delivery_rate: u64,
    /// Smallest RTT seen, microseconds (kernel 4.10+).
    pub min_rtt_us: u32,
    /// Sending segment size, bytes.
    pub mss: u32,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Payload bytes received (kernel 4.1+).
    pub bytes_received: u64,
    /// The receiver's current RTT estimate, microseconds; 0 when unknown.
    pub rcv_rtt_us: u32,
    /// Packets that arrived beyond a hole so far; 0 where the kernel does not count them
    /// (before 5.4).
    pub rcv_ooopack: u32,
}

/// One `getsockopt(TCP_INFO)`, nothing else: cheap enough to call every few milliseconds.
#[cfg(target_os = "linux")]
pub(crate) fn path_sample(fd: &impl AsFd) -> Option<PathSample> {
    let (raw, len) = raw_tcp_info(fd)?;
    path_sample_of(&raw, len)
}

#[cfg(target_os = "linux")]
fn path_sample_of(raw: &libc::tcp_info, len: usize) -> Option<PathSample> {
    use std::mem::offset_of;
    if len < offset_of!(libc::tcp_info, tcpi_delivery_rate) + 8 {
        return None;
    }
    Some(PathSample {
        delivery_rate: raw.tcpi_delivery_rate,
        min_rtt_us: raw.tcpi_min_rtt,
        mss: raw.tcpi_snd_mss,
        cwnd: raw.tcpi_snd_cwnd,
        bytes_received: raw.tcpi_bytes_received,
        rcv_rtt_us: raw.tcpi_rcv_rtt,
        rcv_ooopack: if len >= offset_of!(libc::tcp_info, tcpi_rcv_ooopack) + 4 {
            raw.tcpi_rcv_ooopack
        } else {
            0
        },
    })
}

/// Bytes the kernel holds for the application that it has not read yet (`SIOCINQ`).
#[cfg(target_os = "linux")]
pub(crate) fn unread_bytes(fd: &impl AsFd) -> Option<u64> {
    crate::sys::unread_bytes(fd.as_fd())
}

/// Bound the window a socket advertises (`TCP_WINDOW_CLAMP`), bytes; the kernel raises it
/// again when asked, and never shrinks a window it has already offered.
#[cfg(target_os = "linux")]
pub(crate) fn set_window_clamp(fd: &impl AsFd, bytes: u64) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int(fd, libc::TCP_WINDOW_CLAMP, v)
}

/// The kernel's `struct tcp_info`, as libc declares it, and how many of its bytes the kernel
/// filled (older kernels fill a prefix).
#[cfg(target_os = "linux")]
fn raw_tcp_info(fd: &impl AsFd) -> Option<(libc::tcp_info, usize)> {
    crate::sys::tcp_info(fd.as_fd())
}

/// `TCPI_OPT_SYN_DATA` in `tcpi_options` (linux/tcp.h): the SYN-ACK acknowledged data sent
/// in the SYN (or, on the server, data arrived in the SYN).
#[cfg(target_os = "linux")]
const TCPI_OPT_SYN_DATA: u8 = 32;

/// Whether data the connection sent in its SYN (TCP Fast Open) was acknowledged by the
/// server's SYN-ACK: then TCP's handshake cost no round trip of its own. False before the
/// SYN-ACK, when no data went in the SYN, or when the server did not take it.
#[cfg(target_os = "linux")]
pub fn syn_data_acked(fd: &impl AsFd) -> bool {
    raw_tcp_info(fd).is_some_and(|(raw, _)| raw.tcpi_options & TCPI_OPT_SYN_DATA != 0)
}

/// TCP Fast Open is not used off Linux.
#[cfg(not(target_os = "linux"))]
pub fn syn_data_acked(_fd: &impl AsFd) -> bool {
    false
}

/// `TCP_INFO` is Linux-only here.
#[cfg(not(target_os = "linux"))]
pub fn tcp_info(_fd: &impl AsFd) -> Option<TcpInfoSnapshot> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TcpConfig {
        TcpConfig {
            send_buffer: Some(1 << 20),
            recv_buffer: Some(2 << 20),
            force_buffers: false,
            congestion: None,
            nodelay: true,
            ..TcpConfig::default()
        }
    }

    #[test]
    fn buffers_are_read_back() -> Result<(), Box<dyn std::error::Error>> {
        let s = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        let applied = apply_before_connect(&s, &cfg())?;
        // 1 and 2 MiB are below the 4 MiB sysctl limits of the machines this runs on, and the
        // usable size is half the doubled read-back, so the grant equals the request.
        assert_eq!(applied.send_buffer, Some(1 << 20));
        assert_eq!(applied.recv_buffer, Some(2 << 20));
        assert!(applied.nodelay);
        assert!(s.nodelay()?);
        Ok(())
    }

    #[test]
    fn a_fixed_receive_buffer_probe_reports_what_the_kernel_grants() {
        // 64 KiB is below every kernel's default `rmem_max`: granted whole, with or without
        // privileges.
        assert_eq!(fixed_recv_grant(64 << 10, false), Some(64 << 10));
        // Far beyond any maximum without force: granted less, never more.
        let big = 1 << 30;
        let granted = fixed_recv_grant(big, false).expect("probe socket");
        assert!(granted < big, "granted {granted}");
    }

    #[test]
    fn the_window_clamp_is_set_before_connect() -> Result<(), Box<dyn std::error::Error>> {
        let s = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        let c = TcpConfig {
            window_clamp: Some(2_000_000),
            ..cfg()
        };
        apply_before_connect(&s, &c)?;
        let v =
            xfer_common::sockopt::get_int(s.as_fd(), libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP)?;
        assert_eq!(v, 2_000_000);
        assert!(TcpConfig {
            window_clamp: Some(100),
            ..cfg()
        }
        .validate()
        .is_err());
        Ok(())
    }

    #[test]
    fn unknown_congestion_is_refused_naming_what_exists() {
        let c = TcpConfig {
            congestion: Some("nosuchcc".into()),
            ..cfg()
        };
        match check_congestion(&c) {
            Err(TcpError::CongestionUnavailable {
                requested,
                available,
            }) => {
                assert_eq!(requested, "nosuchcc");
                assert!(available.contains("reno"), "{available}");
            }
            other => panic!("expected CongestionUnavailable, got {other:?}"),
        }
    }

    #[test]
    fn available_congestion_is_applied() -> Result<(), Box<dyn std::error::Error>> {
        let Some(avail) = available_congestion() else {
            return Ok(());
        };
        let Some(algo) = avail
            .iter()
            .find(|a| a.as_str() != "reno")
            .or(avail.first())
        else {
            return Ok(());
        };
        let s = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        let applied = apply_before_connect(
            &s,
            &TcpConfig {
                congestion: Some(algo.clone()),
                ..cfg()
            },
        )?;
        assert_eq!(applied.congestion.as_deref(), Some(algo.as_str()));
        Ok(())
    }

    #[tokio::test]
    async fn connect_and_tcp_info() -> Result<(), Box<dyn std::error::Error>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(async move { listener.accept().await });
        let (stream, applied) = connect(addr, &cfg(), Duration::from_secs(5)).await?;
        let _server = accept.await??;
        let info = tcp_info(&stream).ok_or("no tcp_info on a connected socket")?;
        assert_eq!(info.recv_buffer, 2 << 20);
        assert_eq!(Some(info.recv_buffer), applied.recv_buffer);
        assert!(!info.congestion.is_empty());
        assert!(info.cwnd_bytes > 0);
        Ok(())
    }

    #[tokio::test]
    async fn a_connection_starts_with_its_head_start_and_autotuning_free(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            let first = listener.accept().await?;
            let second = listener.accept().await?;
            Ok::<_, io::Error>((first, second))
        });
        let start: u64 = 8 << 20;
        let c = TcpConfig {
            recv_buffer: None,
            initial_recv_buffer: Some(start),
            ..cfg()
        };
        let (stream, applied) = connect(addr, &c, Duration::from_secs(5)).await?;
        assert_eq!(
            applied.recv_buffer, None,
            "a head start is not a fixed size"
        );
        let Ok(locks) =
            xfer_common::sockopt::get_int(stream.as_fd(), libc::SOL_SOCKET, libc::SO_BUF_LOCK)
        else {
            xfer_test_support::gate::absent(
                "a head start leaves the receive buffer unlocked",
                "this kernel has no SO_BUF_LOCK (Linux 5.14+)",
            );
            return Ok(());
        };
        assert_eq!(
            locks & 2,
            0,
            "receive buffer left locked: autotuning is off"
        );
        let info = tcp_info(&stream).ok_or("no tcp_info on a connected socket")?;
        // Forced as root; otherwise what rmem_max allows.
        let rmem_max: u64 = std::fs::read_to_string("/proc/sys/net/core/rmem_max")?
            .trim()
            .parse()?;
        let expect = if info.recv_buffer >= start {
            start
        } else {
            start.min(rmem_max)
        };
        assert!(
            info.recv_buffer >= expect,
            "receive buffer {} below the head start {expect}",
            info.recv_buffer
        );
        // Without a head start the kernel's default applies (tcp_rmem[1], far below 8 MiB).
        let (plain, _) = connect(
            addr,
            &TcpConfig {
                initial_recv_buffer: None,
                ..c
            },
            Duration::from_secs(5),
        )
        .await?;
        let _servers = accept.await??;
        let plain = tcp_info(&plain).ok_or("no tcp_info")?;
        assert!(
            plain.recv_buffer < expect,
            "{} without a head start",
            plain.recv_buffer
        );
        Ok(())
    }

    #[tokio::test]
    async fn connect_refused_is_an_error() -> Result<(), Box<dyn std::error::Error>> {
        // Bind then drop to get a port nobody listens on.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        match connect(addr, &cfg(), Duration::from_secs(5)).await {
            Err(TcpError::Connect { peer, .. }) => assert_eq!(peer, addr),
            other => panic!("expected Connect error, got {:?}", other.map(|_| ())),
        }
        Ok(())
    }
}
