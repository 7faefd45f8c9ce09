//! QUIC tuning knobs shared by client and server, and their translation into quinn's
//! `TransportConfig`/`EndpointConfig`.
//!
//! # Design point
//! Defaults are sized for **1 Gbit/s at 100 ms RTT**. Its bandwidth-delay product is
//! 1e9 / 8 × 0.1 s = **12.5 MB**: that many bytes must be unacknowledged in flight to keep the
//! link full, so every window on the path must hold at least that, or throughput is capped at
//! `window / RTT`.
//!
//! quinn's own defaults are sized for 100 Mbit/s × 100 ms (a 1.25 MB stream window, an 10 MB
//! send window) and were measured at about 0.2 Gbit/s on a 50 ms link. xfer raises them:
//!
//! | knob | quinn default | xfer default | why |
//! |---|---|---|---|
//! | stream receive window | 1.25 MB | 16 MiB | one stream alone can fill the design-point BDP |
//! | connection receive window | unlimited | 128 MiB (server: 64 MiB) | K = 4 streams, each with its next body requested ahead, at full windows; bounded memory |
//! | send window | 10 MB | 64 MiB | the sender must retain ≥ 1 BDP of unacked data, per connection |
//! | UDP socket buffers | kernel default (~208 KiB) | 32 MiB | bursts of a 1 Gbit/s flow outlast a small buffer |
//! | largest datagram (MTU discovery bound) | 1452 | what the client's route takes (1472 on Ethernet, 8972 on jumbo frames, 65507 on loopback) | every byte of an Ethernet frame; fewer packets per GiB where the path takes more |
//! | acknowledgements asked of the receiver | every 2nd packet | every 10th (xfer's BBR) | each acknowledgement costs both ends a packet's work |
//!
//! This module does not open sockets (see `socket`) and holds no per-role settings such as
//! connection counts (see the client and server configs).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use quinn::congestion::{BbrConfig, ControllerFactory, CubicConfig, NewRenoConfig};

use crate::loss_bound::LossBoundFactory;
use quinn::{AckFrequencyConfig, MtuDiscoveryConfig, TransportConfig, VarInt};

pub use xfer_core::error::ConfigError;

/// Congestion controller run by the sending side (for a download: the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CongestionControl {
    /// CUBIC (RFC 9438): quinn's default and the most exercised. Backs off by 30% on each loss
    /// event, so random (non-congestive) loss on a long path holds it well below capacity:
    /// measured through the emulator at 1 Gbit/s, 100 ms, 2 connections: 722 Mbit/s without
    /// loss, 75 at 0.01% loss, 12 at 0.1% (`docs/results.md`).
    Cubic,
    /// NewReno (RFC 9002 §7): halves on loss; slower than CUBIC to regain a large window.
    NewReno,
    /// xfer's BBR ([`crate::bbr`]): a window of twice the measured bandwidth-delay product,
    /// the bandwidth a delivery rate measured as TCP's BBR measures it, so it keeps its rate
    /// under random loss and follows a Careful Resume jump instead of falling back from it.
    /// The default, as BBR is for TCP.
    #[default]
    Bbr,
    /// quinn's own BBR (0.11), marked **experimental** by quinn: it held 703, 705 and 630 Mbit/s
    /// at 0, 0.01% and 0.1% loss on the emulated link where CUBIC fell to 75 and 12, but its
    /// bandwidth estimate follows how the receiver batches acknowledgements (see
    /// [`crate::bbr`]). Kept for comparison.
    QuinnBbr,
}

impl CongestionControl {
    /// The name reports print.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cubic => "cubic",
            Self::NewReno => "newreno",
            Self::Bbr => "bbr",
            Self::QuinnBbr => "quinn-bbr",
        }
    }
}

impl fmt::Display for CongestionControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CongestionControl {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "cubic" => Ok(Self::Cubic),
            "newreno" | "reno" => Ok(Self::NewReno),
            "bbr" => Ok(Self::Bbr),
            "quinn-bbr" => Ok(Self::QuinnBbr),
            _ => Err(ConfigError::new(
                "congestion",
                s,
                "cubic, newreno, bbr or quinn-bbr",
            )),
        }
    }
}

/// Knobs of one QUIC endpoint, client or server. All sizes in bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct QuicTuning {
    /// Receive window of one stream: bytes the peer may send on a stream beyond what the
    /// application has read. Default 16 MiB (> 12.5 MB BDP) so a single stream is never
    /// window-bound at the design point. Larger costs memory only when the reader falls behind.
    /// Allowed 64 KiB to 1 GiB.
    pub stream_receive_window: u64,
    /// Receive window of a whole connection, across its streams. Default 128 MiB: two full
    /// stream windows for each of the four streams (the default K), as a lane's next body,
    /// requested ahead, waits in its window until the current one ends; below that the
    /// engine requests nothing ahead, and every lane idles a round trip between chunks.
    /// It bounds the client's buffered memory per connection. A server reads every stream
    /// as it arrives and takes 64 MiB ([`QuicTuning::for_server`]). Allowed from
    /// `stream_receive_window` to 4 GiB.
    pub connection_receive_window: u64,
    /// Bytes of written but unacknowledged data quinn retains per connection (sender side).
    /// Default 64 MiB: the sender cannot have more than this in flight, so it must exceed the
    /// BDP with room for loss recovery; costs up to that much server memory per connection.
    /// Allowed 64 KiB to 4 GiB.
    pub send_window: u64,
    /// Congestion controller of the sending side. Default xfer's BBR, measured far ahead of
    /// CUBIC under random loss (see [`CongestionControl`]).
    pub congestion: CongestionControl,
    /// Bound BBR's window when a round trip loses more than 2 % of what it settled, at 5/4 of
    /// what the path delivered per minimum RTT, raised again while no loss follows
    /// ([`crate::loss_bound`]). BBR ignores loss, and through a one-BDP queue quinn's lost
    /// 0.4-1.6 million datagrams per 2 GiB. Default off: on paths with random loss (1 % in
    /// issue 39's held-out matrix) it bound the window round after round and cost 60 % of the
    /// goodput; xfer's own BBR did not overfill a one-BDP queue without it. Only the two BBRs
    /// are affected (CUBIC and NewReno back off on loss themselves).
    pub loss_bound: bool,
    /// RTT assumed before the first sample, which sets the first retransmission timers.
    /// Default 333 ms (RFC 9002 §6.2.2): shorter recovers a lost handshake packet sooner but
    /// retransmits spuriously on paths longer than it. Allowed 1 ms to 10 s.
    pub initial_rtt: Duration,
    /// UDP payload size used before path MTU discovery, bytes. Default 1200, the QUIC minimum
    /// every path must carry; larger saves per-packet cost from the start but a path that drops
    /// it stalls until black-hole detection backs off. Allowed 1200 to 65527.
    pub initial_mtu: u16,
    /// Probe for a larger path MTU (DPLPMTUD, RFC 8899) after the handshake. Default on: fewer,
    /// larger packets mean less CPU per byte. Off keeps `initial_mtu` for the connection.
    pub mtu_discovery: bool,
    /// Largest UDP payload this endpoint probes for (MTU discovery) and accepts, bytes.
    /// Default 65527, QUIC's largest: the route decides. The client lowers it for each
    /// connection to what the route to the server takes (the kernel's route MTU less IP and UDP
    /// headers: 1472 on an IPv4 path of 1500-byte Ethernet, 8972 on 9000-byte jumbo frames,
    /// 65507 on loopback; 8972 where the kernel does not say) and announces that to the server
    /// as its `max_udp_payload_size`, so the server, the sender of a download, never probes
    /// beyond the client's first hop. quinn's own default, 1452, left 20 bytes of every IPv4
    /// datagram unused and kept loopback at Ethernet size; each datagram costs both ends a
    /// packet's work, so loopback at 65507 bytes moves about twice what it moved at 6550 for
    /// the same CPU (docs/results.md, "Datagrams as large as the route"). With GSO, batches
    /// larger than one send are split ([`crate::send_batch`]). A larger value costs only
    /// probes that a smaller hop further on drops, and receive buffer address space (quinn
    /// sizes it from this). Allowed 1200 to 65527.
    pub mtu_discovery_upper_bound: u16,
    /// How long after quinn's black-hole detector fired (it takes bursts of lost full-size
    /// packets for a path that shrank, falls back to 1200-byte datagrams) MTU discovery waits
    /// before probing again. Default 5 s; quinn's 60 s. Anything that loses bursts of
    /// full-size packets trips it, not only a shrunken path: seen with GSO batches the kernel
    /// refused (see the datagram bound), and a drop-tail queue overflowing drops such bursts
    /// too; with 60 s a transfer then runs at 1200 bytes for a minute. A real black hole costs
    /// only a few lost probes per wait. Allowed 100 ms to 1 h.
    pub mtu_black_hole_cooldown: Duration,
    /// Generic segmentation offload: hand the kernel one large buffer of many equal datagrams
    /// per send call. Default on: a large CPU saving on bulk sends; quinn turns it off by
    /// itself when the kernel or NIC refuses it. Turn off for packet captures that must see
    /// individual datagrams or when a driver misbehaves.
    pub gso: bool,
    /// `SO_SNDBUF` of the UDP socket, bytes. Default 32 MiB (2.5 BDPs); `None` leaves the
    /// kernel default (~208 KiB, what quinn uses), too small for bursts at 1 Gbit/s. The
    /// kernel clamps to `net.core.wmem_max` unless [`QuicTuning::force_buffers`] succeeds.
    /// Allowed 64 KiB to 1 GiB.
    pub udp_send_buffer: Option<u64>,
    /// `SO_RCVBUF` of the UDP socket, bytes. Default 32 MiB: datagrams arriving while the
    /// receiving task is busy wait here; when it overflows they are dropped and read as
    /// congestion. `None` leaves the kernel default. Clamped to `net.core.rmem_max` unless
    /// forced. Allowed 64 KiB to 1 GiB.
    pub udp_recv_buffer: Option<u64>,
    /// Try `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE` (needs `CAP_NET_ADMIN`) to exceed the sysctl
    /// maxima. Default on; when refused, the clamped size is used and a warning is logged once.
    pub force_buffers: bool,
    /// Acknowledgement frequency this endpoint, when it sends, asks of its peer
    /// (draft-ietf-quic-ack-frequency, which quinn implements; a peer without it ignores the
    /// request): the number of ack-eliciting packets the peer may receive before it must
    /// acknowledge. `None` asks nothing, and the peer acknowledges every second packet (RFC 9000
    /// §13.2.2), which is what `Some(1)` asks too. The peer still acknowledges at once when a
    /// packet arrives out of order, and within its `max_ack_delay` (25 ms) otherwise.
    /// Default 9 ([`QuicTuning::DEFAULT_ACK_ELICITING_THRESHOLD`], every tenth packet): each
    /// acknowledgement costs the receiver a packet to build, seal and send and the sender one
    /// to open and process, and where the CPU is the limit (a fast, short path) the fewer of
    /// them, the more goes through: on loopback QUIC × 8 moved twice as much with 25-50 % less
    /// CPU per GiB on each end (docs/results.md, "QUIC acknowledges every tenth packet"). With
    /// a threshold, xfer's BBR keeps at least 2 × (N + 1) datagrams in flight, so that a short
    /// path's small window never waits for the delay timer; CUBIC and NewReno have no such
    /// floor, and the command line asks for the threshold only when xfer's BBR sends
    /// (`--mechanism quic-ack-frequency`). Allowed 0 to 1000.
    pub ack_eliciting_threshold: Option<u32>,
}

impl QuicTuning {
    /// The defaults for a server: it reads every stream of an upload as it arrives, so it
    /// keeps no bodies waiting their turn and needs half the client's connection window.
    pub fn for_server() -> Self {
        Self {
            connection_receive_window: 64 << 20,
            ..Self::default()
        }
    }
}

impl Default for QuicTuning {
    fn default() -> Self {
        Self {
            stream_receive_window: 16 << 20,
            connection_receive_window: 128 << 20,
            send_window: 64 << 20,
            congestion: CongestionControl::default(),
            loss_bound: false,
            initial_rtt: Duration::from_millis(333),
            initial_mtu: 1200,
            mtu_discovery: true,
            mtu_discovery_upper_bound: MAX_UDP_PAYLOAD,
            mtu_black_hole_cooldown: Duration::from_secs(5),
            gso: true,
            udp_send_buffer: Some(32 << 20),
            udp_recv_buffer: Some(32 << 20),
            force_buffers: true,
            ack_eliciting_threshold: Some(Self::DEFAULT_ACK_ELICITING_THRESHOLD),
        }
    }
}

/// Largest `max_udp_payload_size` QUIC allows (RFC 9000 §18.2).
const MAX_UDP_PAYLOAD: u16 = 65527;
/// UDP payload of a 9000-byte jumbo frame under IPv4 (9000 - 20 - 8): the bound where the
/// kernel does not say what the route takes.
const JUMBO_UDP_PAYLOAD: u16 = 8972;

impl QuicTuning {
    /// The largest [`QuicTuning::ack_eliciting_threshold`] accepted.
    pub const MAX_ACK_ELICITING_THRESHOLD: u32 = 1000;
    /// [`QuicTuning::ack_eliciting_threshold`] by default: every tenth packet.
    pub const DEFAULT_ACK_ELICITING_THRESHOLD: u32 = 9;

    /// quinn's own defaults (windows and buffers as quinn 0.11 ships them), for comparison in
    /// benchmarks. UDP buffers are left at what the kernel gives.
    pub fn quinn_defaults() -> Self {
        Self {
            stream_receive_window: 1_250_000,
            connection_receive_window: (1 << 32) - 1,
            send_window: 10_000_000,
            congestion: CongestionControl::Cubic,
            loss_bound: false,
            initial_rtt: Duration::from_millis(333),
            initial_mtu: 1200,
            mtu_discovery: true,
            mtu_discovery_upper_bound: 1452,
            mtu_black_hole_cooldown: Duration::from_secs(60),
            gso: true,
            udp_send_buffer: None,
            udp_recv_buffer: None,
            force_buffers: false,
            ack_eliciting_threshold: None,
        }
    }

    /// Reject values quinn or the kernel cannot take, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        const KIB64: u64 = 64 << 10;
        if !(KIB64..=1 << 30).contains(&self.stream_receive_window) {
            return Err(ConfigError::new(
                "stream_receive_window",
                self.stream_receive_window,
                "64 KiB to 1 GiB",
            ));
        }
        if !(self.stream_receive_window..=1 << 32).contains(&self.connection_receive_window) {
            return Err(ConfigError::new(
                "connection_receive_window",
                self.connection_receive_window,
                "stream_receive_window to 4 GiB",
            ));
        }
        if !(KIB64..=1 << 32).contains(&self.send_window) {
            return Err(ConfigError::new(
                "send_window",
                self.send_window,
                "64 KiB to 4 GiB",
            ));
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(10)).contains(&self.initial_rtt) {
            return Err(ConfigError::new(
                "initial_rtt",
                format!("{:?}", self.initial_rtt),
                "1 ms to 10 s",
            ));
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(3600))
            .contains(&self.mtu_black_hole_cooldown)
        {
            return Err(ConfigError::new(
                "mtu_black_hole_cooldown",
                format!("{:?}", self.mtu_black_hole_cooldown),
                "100 ms to 1 h",
            ));
        }
        for (field, v) in [
            ("initial_mtu", self.initial_mtu),
            ("mtu_discovery_upper_bound", self.mtu_discovery_upper_bound),
        ] {
            if !(1200..=MAX_UDP_PAYLOAD).contains(&v) {
                return Err(ConfigError::new(field, v, "1200 to 65527 bytes"));
            }
        }
        for (field, v) in [
            ("udp_send_buffer", self.udp_send_buffer),
            ("udp_recv_buffer", self.udp_recv_buffer),
        ] {
            if let Some(v) = v {
                if !(64 << 10..=1 << 30).contains(&v) {
                    return Err(ConfigError::new(field, v, "64 KiB to 1 GiB"));
                }
            }
        }
        if let Some(n) = self.ack_eliciting_threshold {
            if n > Self::MAX_ACK_ELICITING_THRESHOLD {
                return Err(ConfigError::new("ack_eliciting_threshold", n, "0 to 1000"));
            }
        }
        Ok(())
    }

    /// The largest UDP payload this endpoint accepts and probes for before it knows a route:
    /// the upper bound, never below `initial_mtu`. The server's, for every client: each
    /// client announces what its route takes, and MTU discovery stops at the smaller.
    pub(crate) fn largest_udp_payload(&self) -> u16 {
        self.mtu_discovery_upper_bound.max(self.initial_mtu)
    }

    /// The largest UDP payload to use on a route that takes `route_payload` bytes (`None`:
    /// the kernel did not say, taken as a jumbo frame): the upper bound, lowered to the
    /// route's, never below `initial_mtu`.
    pub(crate) fn max_udp_payload(&self, route_payload: Option<u16>) -> u16 {
        let route = route_payload.unwrap_or(JUMBO_UDP_PAYLOAD);
        self.largest_udp_payload().min(route).max(self.initial_mtu)
    }

    /// quinn's endpoint settings: `max_udp_payload` (see [`QuicTuning::max_udp_payload`]) is
    /// the largest datagram the endpoint accepts, announced to the peer.
    pub(crate) fn endpoint_config(
        &self,
        max_udp_payload: u16,
    ) -> Result<quinn::EndpointConfig, ConfigError> {
        let mut config = quinn::EndpointConfig::default();
        config.max_udp_payload_size(max_udp_payload).map_err(|_| {
            ConfigError::new(
                "mtu_discovery_upper_bound",
                max_udp_payload,
                "1200 to 65527",
            )
        })?;
        Ok(config)
    }

    /// quinn's transport parameters for these knobs. `idle_timeout` and the stream limit are
    /// role-specific and passed in; MTU discovery probes up to `max_udp_payload`. Call
    /// [`QuicTuning::validate`] first.
    pub(crate) fn transport_config(
        &self,
        idle_timeout: Duration,
        max_bidi_streams: u32,
        keep_alive: Option<Duration>,
        max_udp_payload: u16,
    ) -> Result<TransportConfig, ConfigError> {
        self.validate()?;
        let varint = |field: &'static str, v: u64| {
            VarInt::from_u64(v).map_err(|_| ConfigError::new(field, v, "below 2^62"))
        };
        let mut t = TransportConfig::default();
        t.stream_receive_window(varint("stream_receive_window", self.stream_receive_window)?)
            .receive_window(varint(
                "connection_receive_window",
                self.connection_receive_window,
            )?)
            .send_window(self.send_window)
            .initial_rtt(self.initial_rtt)
            .initial_mtu(self.initial_mtu)
            .enable_segmentation_offload(self.gso)
            .max_concurrent_bidi_streams(VarInt::from_u32(max_bidi_streams))
            // xfer uses no unidirectional streams and no datagrams.
            .max_concurrent_uni_streams(VarInt::from_u32(0))
            .datagram_receive_buffer_size(None)
            .keep_alive_interval(keep_alive);
        let idle = quinn::IdleTimeout::try_from(idle_timeout).map_err(|_| {
            ConfigError::new("idle_timeout", format!("{idle_timeout:?}"), "below 2^62 ms")
        })?;
        t.max_idle_timeout(Some(idle));
        if self.mtu_discovery {
            let mut mtud = MtuDiscoveryConfig::default();
            mtud.upper_bound(max_udp_payload.max(self.initial_mtu))
                .black_hole_cooldown(self.mtu_black_hole_cooldown);
            t.mtu_discovery_config(Some(mtud));
        } else {
            t.mtu_discovery_config(None);
        }
        t.congestion_controller_factory(self.controller_factory());
        if let Some(n) = self.ack_eliciting_threshold {
            let mut ack = AckFrequencyConfig::default();
            ack.ack_eliciting_threshold(VarInt::from_u32(n));
            t.ack_frequency_config(Some(ack));
        }
        Ok(t)
    }

    /// What Careful Resume wraps: xfer's BBR as itself, so that a validated jump ends its
    /// startup; any other controller through [`QuicTuning::controller_factory`].
    pub(crate) fn resume_inner(&self) -> crate::resume::controller::InnerFactory {
        use crate::resume::controller::InnerFactory;
        match self.congestion {
            CongestionControl::Bbr => InnerFactory::Bbr(Arc::new(self.bbr_config())),
            _ => InnerFactory::Other(self.controller_factory()),
        }
    }

    fn bbr_config(&self) -> crate::bbr::BbrConfig {
        let defaults = crate::bbr::BbrConfig::default();
        // Two of the peer's acknowledgement groups in flight: with fewer than threshold + 1
        // datagrams in flight the peer acknowledges only when its delay timer fires, and on a
        // short path, where the measured BDP is a few datagrams, every window then waited for
        // that timer (17-31 Mbit/s on loopback with a threshold of 9 or 31).
        let for_acks = self
            .ack_eliciting_threshold
            .map_or(0, |n| 2 * (u64::from(n) + 1));
        crate::bbr::BbrConfig {
            loss_bound: self.loss_bound,
            min_window_packets: defaults.min_window_packets.max(for_acks),
            ..defaults
        }
    }

    /// quinn's factory for [`QuicTuning::congestion`].
    pub(crate) fn controller_factory(&self) -> Arc<dyn ControllerFactory + Send + Sync> {
        match self.congestion {
            CongestionControl::Cubic => Arc::new(CubicConfig::default()),
            CongestionControl::NewReno => Arc::new(NewRenoConfig::default()),
            CongestionControl::Bbr => Arc::new(self.bbr_config()),
            CongestionControl::QuinnBbr if self.loss_bound => Arc::new(LossBoundFactory {
                inner: Arc::new(BbrConfig::default()),
            }),
            CongestionControl::QuinnBbr => Arc::new(BbrConfig::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asking_for_fewer_acknowledgements_raises_the_window_floor() {
        let every_second = QuicTuning {
            ack_eliciting_threshold: None,
            ..QuicTuning::default()
        };
        assert_eq!(
            every_second.bbr_config().min_window_packets,
            crate::bbr::MIN_WINDOW_PACKETS
        );
        assert_eq!(QuicTuning::default().bbr_config().min_window_packets, 20);
        let sparser = QuicTuning {
            ack_eliciting_threshold: Some(31),
            ..QuicTuning::default()
        };
        assert_eq!(sparser.bbr_config().min_window_packets, 64);
    }

    #[test]
    fn defaults_validate_and_build() {
        let t = QuicTuning::default();
        assert!(t.validate().is_ok());
        assert!(t
            .transport_config(Duration::from_secs(30), 64, None, 1472)
            .is_ok());
        assert!(QuicTuning::quinn_defaults().validate().is_ok());
        // The design point: one stream window holds one BDP of 1 Gbit/s × 100 ms.
        assert!(t.stream_receive_window >= 12_500_000);
        for cc in [
            CongestionControl::Cubic,
            CongestionControl::NewReno,
            CongestionControl::Bbr,
            CongestionControl::QuinnBbr,
        ] {
            let t = QuicTuning {
                congestion: cc,
                ..QuicTuning::default()
            };
            assert!(t
                .transport_config(Duration::from_secs(1), 1, None, 1200)
                .is_ok());
            assert_eq!(cc.name().parse::<CongestionControl>(), Ok(cc));
        }
    }

    #[test]
    fn datagrams_fit_the_route_and_the_bound() {
        let t = QuicTuning::default();
        // An IPv4 path of 1500-byte Ethernet: all of it, not quinn's 1452.
        assert_eq!(t.max_udp_payload(Some(1472)), 1472);
        // Jumbo frames and loopback (65536): all of it, GSO or not (batches too large for one
        // send are split by `send_batch`).
        assert_eq!(t.max_udp_payload(Some(8972)), 8972);
        assert_eq!(t.max_udp_payload(Some(65507)), 65507);
        // A route the kernel did not report: a jumbo frame at most.
        assert_eq!(t.max_udp_payload(None), 8972);
        // The server takes whatever its clients announce.
        assert_eq!(t.largest_udp_payload(), 65527);
        let capped = QuicTuning {
            mtu_discovery_upper_bound: 6550,
            ..QuicTuning::default()
        };
        assert_eq!(capped.max_udp_payload(Some(65507)), 6550);
        assert_eq!(capped.largest_udp_payload(), 6550);
        // A route below QUIC's minimum still gets the minimum: the path must carry it.
        assert_eq!(t.max_udp_payload(Some(576)), 1200);
        let small = QuicTuning {
            mtu_discovery_upper_bound: 1300,
            initial_mtu: 1400,
            ..QuicTuning::default()
        };
        assert_eq!(small.max_udp_payload(Some(1472)), 1400);
        assert!(t.endpoint_config(1472).is_ok());
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases: [(QuicTuning, &str); 8] = [
            (
                QuicTuning {
                    mtu_black_hole_cooldown: Duration::ZERO,
                    ..QuicTuning::default()
                },
                "mtu_black_hole_cooldown",
            ),
            (
                QuicTuning {
                    stream_receive_window: 10,
                    ..QuicTuning::default()
                },
                "stream_receive_window",
            ),
            (
                QuicTuning {
                    connection_receive_window: 1 << 20,
                    ..QuicTuning::default()
                },
                "connection_receive_window",
            ),
            (
                QuicTuning {
                    send_window: 0,
                    ..QuicTuning::default()
                },
                "send_window",
            ),
            (
                QuicTuning {
                    initial_rtt: Duration::ZERO,
                    ..QuicTuning::default()
                },
                "initial_rtt",
            ),
            (
                QuicTuning {
                    initial_mtu: 1000,
                    ..QuicTuning::default()
                },
                "initial_mtu",
            ),
            (
                QuicTuning {
                    udp_recv_buffer: Some(1 << 31),
                    ..QuicTuning::default()
                },
                "udp_recv_buffer",
            ),
            (
                QuicTuning {
                    ack_eliciting_threshold: Some(1001),
                    ..QuicTuning::default()
                },
                "ack_eliciting_threshold",
            ),
        ];
        for (t, field) in cases {
            let err = t.validate().expect_err("invalid tuning must be refused");
            assert_eq!(err.field, field);
            assert!(err.to_string().contains(field));
        }
        assert!("vegas".parse::<CongestionControl>().is_err());
    }
}
