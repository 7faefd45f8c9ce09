//! Tuning knobs for the HTTP transports: TCP sockets and HTTP/2.
//!
//! # Design point
//! Defaults are sized for **1 Gbit/s at 100 ms RTT**, the long fat pipe between distant sites.
//! Its bandwidth-delay product is 1e9 / 8 × 0.1 = **12.5 MB**: that many bytes must be in flight,
//! unacknowledged, for the link to stay full. Every window and buffer on the path (TCP send
//! buffer at the server, TCP receive buffer at the client, HTTP/2 stream and connection windows)
//! must hold at least one BDP, or it caps throughput at `window / RTT`.
//! hyper's own HTTP/2 defaults (64 KiB stream window, 16 KiB frames) cap one stream at
//! 64 KiB / 100 ms ≈ 5 Mbit/s on that link.

pub use xfer_core::error::ConfigError;

/// Largest legal HTTP/2 `SETTINGS_MAX_FRAME_SIZE` (RFC 9113 §6.5.2): 2^24 - 1.
pub const H2_MAX_FRAME_SIZE_LIMIT: u64 = (1 << 24) - 1;
/// Smallest legal, and default, `SETTINGS_MAX_FRAME_SIZE`: 2^14.
pub const H2_MIN_FRAME_SIZE: u64 = 1 << 14;
/// Largest legal flow-control window (RFC 9113 §6.9.1): 2^31 - 1.
pub const H2_MAX_WINDOW: u64 = (1 << 31) - 1;

/// Which HTTP version the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpVersion {
    /// HTTP/1.1, one lane per connection. The default.
    #[default]
    Http1,
    /// HTTP/2: over TLS by ALPN `h2`, over plain TCP as h2c with prior knowledge.
    Http2,
    /// Offer `h2` and `http/1.1` by ALPN and use what the server picks; plain TCP means HTTP/1.1.
    Auto,
}

/// Socket options applied to every TCP connection, client and server side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// `SO_SNDBUF` in bytes; `None` leaves the kernel's autotuning (bounded by `tcp_wmem[2]`,
    /// 4 MiB on a stock kernel: about 335 Mbit/s per connection at 100 ms).
    /// Setting it disables autotuning for that socket. The kernel doubles the value for its
    /// bookkeeping and clamps it to `net.core.wmem_max` unless [`TcpConfig::force_buffers`].
    pub send_buffer: Option<u64>,
    /// `SO_RCVBUF` in bytes; `None` leaves autotuning (bounded by `tcp_rmem[2]`, 6 MiB stock).
    /// Set before connect/listen so the window scale is negotiated for it.
    pub recv_buffer: Option<u64>,
    /// Receive buffer a connection starts with, bytes, after which the kernel's autotuning
    /// goes on growing it (`SO_RCVBUF`, forced past `net.core.rmem_max` like the other
    /// buffers, then unlocked with `SO_BUF_LOCK`, Linux 5.14+). Autotuning alone starts from
    /// `tcp_rmem[1]` (128 KiB stock) and at best doubles it per round trip, so on a long path
    /// the receive window, not the sender, holds the first second of a connection back. Clamped
    /// silently to `rmem_max` without `CAP_NET_ADMIN`; ignored when
    /// [`TcpConfig::recv_buffer`] fixes the size. Default 16 MiB (one BDP of 1 Gbit/s at
    /// 130 ms); `None` leaves the kernel's start.
    pub initial_recv_buffer: Option<u64>,
    /// `TCP_WINDOW_CLAMP` in bytes: the most a connection advertises as its receive window,
    /// whatever its buffer; `None` (the default) leaves the kernel's bound. Unlike
    /// [`TcpConfig::recv_buffer`] it keeps autotuning and is not capped by
    /// `net.core.rmem_max`. Several connections to one bottleneck whose windows together stay
    /// near the bandwidth-delay product cannot overflow its queue: at 1 Gbit/s x 100 ms, 8 lanes
    /// clamped at 2 MB each retransmitted nothing where unclamped ones retransmitted
    /// 96,000-156,000 segments per GiB (`docs/results.md`). Set before connect.
    pub window_clamp: Option<u64>,
    /// Use `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE` to go beyond `net.core.[wr]mem_max` when the
    /// process has `CAP_NET_ADMIN`; falls back to the clamped value (and says so once) when not.
    pub force_buffers: bool,
    /// `TCP_CONGESTION` algorithm name (`bbr`, `cubic`, `reno`...). `None` keeps the kernel
    /// default. An algorithm the kernel does not offer is refused at start-up.
    pub congestion: Option<String>,
    /// `TCP_NODELAY`: requests and small frames (HTTP/2 WINDOW_UPDATE, SETTINGS) leave at once.
    pub nodelay: bool,
    /// TCP Fast Open (RFC 7413, Linux), TLS connections only (their first bytes, the
    /// ClientHello, are safe to repeat; a plain request might not be). Client:
    /// `TCP_FASTOPEN_CONNECT`, so the first write rides in the SYN once the kernel holds a
    /// cookie from an earlier connection to the server (any process); that saves TCP's round
    /// trip. Server: `TCP_FASTOPEN` on the listener, with [`TcpConfig::fast_open_queue`];
    /// the kernel takes data in SYNs only when `net.ipv4.tcp_fastopen` has bit 0x2 (stock
    /// kernels have 1, client only: `xfer doctor` says so). Default on.
    pub fast_open: bool,
    /// Server: connections whose SYN data the kernel may hold before they are accepted; more
    /// fall back to the ordinary handshake. Default 256 connections. Ignored by the client.
    pub fast_open_queue: u32,
    /// Client: once a queue stands at the bottleneck (the receivers' RTT a quarter above the
    /// path's minimum), clamp the receive windows of a transfer's connections together to 5/4
    /// of goodput x minimum RTT (`TCP_WINDOW_CLAMP`), so that several senders cannot overflow
    /// its queue; the cap follows goodput up. Paths under 5 ms are left alone, and so is a
    /// fixed [`TcpConfig::window_clamp`]. Default on. Ignored by the server.
    pub window_cap: bool,
}

impl Default for TcpConfig {
    /// Client-side defaults: kernel buffer autotuning, `bbr` when the kernel offers it (it keeps
    /// its rate under random loss, where cubic backs off), `TCP_NODELAY` on.
    fn default() -> Self {
        Self {
            send_buffer: None,
            recv_buffer: None,
            initial_recv_buffer: Some(16 << 20),
            window_clamp: None,
            force_buffers: true,
            congestion: Some("bbr".to_string()),
            nodelay: true,
            fast_open: true,
            fast_open_queue: 256,
            window_cap: true,
        }
    }
}

impl TcpConfig {
    /// Server-side defaults: a 32 MiB send buffer (two and a half BDPs of the design point) so a
    /// single connection is not held to `tcp_wmem[2]` per RTT; otherwise as [`Default`].
    pub fn server_default() -> Self {
        Self {
            send_buffer: Some(32 << 20),
            ..Self::default()
        }
    }

    /// Reject impossible values (zero buffers, empty algorithm names).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, v) in [
            ("send_buffer", self.send_buffer),
            ("recv_buffer", self.recv_buffer),
            ("initial_recv_buffer", self.initial_recv_buffer),
            ("window_clamp", self.window_clamp),
        ] {
            if let Some(v) = v {
                if !(4096..=(1 << 31)).contains(&v) {
                    return Err(ConfigError::new(field, v, "4096 to 2147483648 bytes"));
                }
            }
        }
        if self.fast_open_queue > 65_535 {
            return Err(ConfigError::new(
                "fast_open_queue",
                self.fast_open_queue,
                "0 to 65535 connections",
            ));
        }
        if let Some(cc) = &self.congestion {
            if cc.is_empty()
                || cc.len() > 15
                || !cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(ConfigError::new(
                    "congestion",
                    cc,
                    "a kernel congestion control name such as bbr or cubic",
                ));
            }
        }
        Ok(())
    }
}

/// HTTP/2 settings, used by both the client and the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http2Config {
    /// `SETTINGS_MAX_FRAME_SIZE` we advertise, in bytes (16 KiB to 16 MiB - 1). The peer may send
    /// DATA frames up to this size. Default 1 MiB: 64× fewer frame headers and wake-ups than
    /// 16 KiB; a 1 MiB frame occupies a 1 Gbit/s link for 8 ms, short next to a 100 ms RTT.
    pub max_frame_size: u64,
    /// `SETTINGS_INITIAL_WINDOW_SIZE`: per-stream receive window, in bytes. Default 16 MiB:
    /// one stream alone can keep the design-point BDP (12.5 MB) in flight, so the last stream
    /// of a transfer is not window-bound.
    pub stream_window: u64,
    /// Connection-level receive window, in bytes. Default 64 MiB: five BDPs, so 8 streams
    /// in flight are not throttled by the connection window; costs up to that much client
    /// memory when the application reads slower than the network.
    pub connection_window: u64,
    /// hyper's adaptive window (estimates the BDP from PING round trips and grows windows to
    /// match). When on, it replaces the two fixed windows above. Default off: the fixed windows
    /// are already sized for the design point and do not need ramp-up time.
    pub adaptive_window: bool,
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`; on the server, the cap on streams a client may open
    /// at once. Default 256.
    pub max_concurrent_streams: u32,
    /// Bytes the sender may buffer per stream before waiting for the socket (hyper's
    /// `max_send_buf_size`). Default 4 MiB: enough to keep a 1 MiB frame train going.
    pub max_send_buffer: u64,
}

impl Default for Http2Config {
    fn default() -> Self {
        Self {
            max_frame_size: 1 << 20,
            stream_window: 16 << 20,
            connection_window: 64 << 20,
            adaptive_window: false,
            max_concurrent_streams: 256,
            max_send_buffer: 4 << 20,
        }
    }
}

impl Http2Config {
    /// The frame size as hyper takes it; [`Http2Config::validate`] keeps it in range.
    pub fn frame_size_u32(&self) -> u32 {
        u32::try_from(self.max_frame_size).unwrap_or(u32::MAX)
    }

    /// The stream window as hyper takes it.
    pub fn stream_window_u32(&self) -> u32 {
        u32::try_from(self.stream_window).unwrap_or(u32::MAX)
    }

    /// The connection window as hyper takes it.
    pub fn connection_window_u32(&self) -> u32 {
        u32::try_from(self.connection_window).unwrap_or(u32::MAX)
    }

    /// The send buffer as hyper takes it.
    pub fn send_buffer_usize(&self) -> usize {
        usize::try_from(self.max_send_buffer).unwrap_or(usize::MAX)
    }

    /// hyper's (and the HTTP/2 specification's) defaults, kept for side-by-side comparison:
    /// 16 KiB frames, 64 KiB - 1 windows... as hyper 1.x sets them.
    pub fn hyper_defaults() -> Self {
        Self {
            max_frame_size: H2_MIN_FRAME_SIZE,
            stream_window: 65_535,
            connection_window: 65_535,
            adaptive_window: false,
            max_concurrent_streams: 200,
            max_send_buffer: 400 * 1024,
        }
    }

    /// Reject values HTTP/2 or the implementation cannot take, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(H2_MIN_FRAME_SIZE..=H2_MAX_FRAME_SIZE_LIMIT).contains(&self.max_frame_size) {
            return Err(ConfigError::new(
                "max_frame_size",
                self.max_frame_size,
                "16384 to 16777215 bytes",
            ));
        }
        for (field, v) in [
            ("stream_window", self.stream_window),
            ("connection_window", self.connection_window),
        ] {
            if !(65_535..=H2_MAX_WINDOW).contains(&v) {
                return Err(ConfigError::new(field, v, "65535 to 2147483647 bytes"));
            }
        }
        if self.max_concurrent_streams == 0 {
            return Err(ConfigError::new("max_concurrent_streams", 0, "at least 1"));
        }
        if !(16 * 1024..=(1 << 30)).contains(&self.max_send_buffer) {
            return Err(ConfigError::new(
                "max_send_buffer",
                self.max_send_buffer,
                "16 KiB to 1 GiB",
            ));
        }
        Ok(())
    }
}
