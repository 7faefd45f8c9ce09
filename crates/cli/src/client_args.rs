//! Client-side options shared by `xfer get` and `xfer bench`: protocol, parallelism, TLS trust,
//! and every transport knob. Raw flags become an [`xfer::ClientConfig`] here, in one place.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, ValueEnum};
use xfer::crates::common::mechanisms::{self, Setting, Switches};
use xfer::crates::common::secret::Secret;
use xfer::{
    ClientConfig, ClientTlsOptions, CongestionControl, Http2Config, HttpVersion, LaneLayout,
    QuicTuning,
};

use crate::exit::UsageError;

/// A byte count with an optional unit suffix (`64MiB`, `1G`, `1.5GB`).
pub fn size_arg(s: &str) -> Result<u64, String> {
    xfer::parse_size(s).map_err(|e| e.to_string())
}

/// `bytes` in the size grammar, for a flag's default taken from the code: `64MiB`, `1500B`
/// (the largest binary unit that divides exactly).
pub fn size_text(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        let mult = 1u64 << shift;
        if bytes >= mult && bytes % mult == 0 {
            return format!("{}{unit}", bytes / mult);
        }
    }
    format!("{bytes}B")
}

/// `d` in the duration grammar, for a flag's default taken from the code: `1h`, `90s`,
/// `250ms` (the largest unit that divides exactly).
pub fn duration_text(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    for (unit, per) in [("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms >= per && ms % per == 0 && d.subsec_nanos() % 1_000_000 == 0 {
            return format!("{}{unit}", ms / per);
        }
    }
    if d.subsec_nanos() % 1_000_000 == 0 {
        format!("{ms}ms")
    } else {
        format!("{}us", d.as_micros())
    }
}

/// A duration flag: `5s`, `250ms`, `1m`, `1.5s`, `100us`; a bare number is seconds.
pub fn duration_arg(s: &str) -> Result<std::time::Duration, String> {
    xfer::parse_duration(s).map_err(|e| e.to_string())
}

/// A duration flag that once took bare milliseconds: a unit is required, so that an old
/// `--quic-initial-rtt 100` is refused instead of read as 100 seconds.
pub fn duration_with_unit_arg(s: &str) -> Result<std::time::Duration, String> {
    if s.trim().bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!(
            "{s:?} needs a unit (e.g. {s}ms): this flag took bare milliseconds before"
        ));
    }
    duration_arg(s)
}

/// A QUIC acknowledgement frequency to ask of the peer: packets it may receive before it
/// must acknowledge, or `off` to ask nothing (the peer acknowledges every second packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckThreshold(pub Option<u32>);

/// The acknowledgement threshold a sender asks for: `--quic-ack-threshold` when given; else
/// the default's every tenth packet when the `quic-ack-frequency` mechanism is on and xfer's
/// BBR sends, as only its window keeps the floor that threshold needs on a short path.
pub fn ack_threshold(
    mechanism_on: bool,
    congestion: CongestionControl,
    asked: Option<AckThreshold>,
) -> Option<u32> {
    match asked {
        Some(AckThreshold(v)) => v,
        None if mechanism_on && congestion == CongestionControl::Bbr => {
            Some(QuicTuning::DEFAULT_ACK_ELICITING_THRESHOLD)
        }
        None => None,
    }
}

pub fn ack_threshold_arg(s: &str) -> Result<AckThreshold, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(AckThreshold(None));
    }
    match s.parse::<u32>() {
        Ok(n) if n <= QuicTuning::MAX_ACK_ELICITING_THRESHOLD => Ok(AckThreshold(Some(n))),
        _ => Err(format!(
            "{s:?}: expected 0 to {} packets, or off",
            QuicTuning::MAX_ACK_ELICITING_THRESHOLD
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Protocol {
    /// HTTP/1.1, one lane per connection.
    Http1,
    /// HTTP/2: ALPN h2 over TLS, h2c with prior knowledge over plain TCP.
    Http2,
    /// What ALPN negotiates (h2 preferred); HTTP/1.1 over plain TCP.
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuicCongestion {
    Cubic,
    Newreno,
    /// xfer's BBR (the default).
    Bbr,
    /// quinn's own BBR, experimental in quinn; for comparison.
    QuinnBbr,
}

impl From<QuicCongestion> for CongestionControl {
    fn from(cc: QuicCongestion) -> Self {
        match cc {
            QuicCongestion::Cubic => CongestionControl::Cubic,
            QuicCongestion::Newreno => CongestionControl::NewReno,
            QuicCongestion::Bbr => CongestionControl::Bbr,
            QuicCongestion::QuinnBbr => CongestionControl::QuinnBbr,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// HTTP version for http(s):// URLs. quic:// URLs always use QUIC. Default: http1 for one
    /// file; auto (HTTP/2 where the server offers it) for a tree.
    #[arg(long, value_enum, env = "XFER_PROTOCOL")]
    pub protocol: Option<Protocol>,
    /// Connections: HTTP/1.1 lanes (default 8), HTTP/2 connections M (default 1), QUIC
    /// connections (default 2).
    #[arg(short = 'c', long)]
    pub connections: Option<usize>,
    /// Streams in flight per connection, K, for HTTP/2 (default 8) and QUIC (default 4).
    #[arg(long)]
    pub streams: Option<usize>,

    /// Trust this CA (or self-signed server certificate) PEM instead of the built-in roots.
    #[arg(long, value_name = "PEM", env = "XFER_CA_CERT")]
    pub ca_cert: Vec<PathBuf>,
    /// Trust the CAs of this OpenSSL hashed directory (`<hash>.0` certificates, `<hash>.r0`
    /// CRLs, honoured), e.g. /etc/grid-security/certificates, instead of the built-in roots.
    #[arg(long, value_name = "DIR", env = "XFER_CA_DIR")]
    pub ca_dir: Option<PathBuf>,
    /// Accept any server certificate. Dangerous: anyone on the path can read and alter data.
    #[arg(long)]
    pub insecure: bool,
    /// File whose first line is a bearer token, sent to the URL's origin (never to another
    /// origin a redirect points at). Without it: $BEARER_TOKEN, then $BEARER_TOKEN_FILE, as in
    /// WLCG bearer token discovery.
    #[arg(long, env = "XFER_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Client certificate (PEM chain) to present when the server asks for one.
    #[arg(long, requires = "client_key", value_name = "PEM")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "client_cert", value_name = "PEM")]
    pub client_key: Option<PathBuf>,

    /// TCP send buffer (SO_SNDBUF); default: kernel autotuning.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub tcp_send_buffer: Option<u64>,
    /// TCP receive buffer (SO_RCVBUF); default: kernel autotuning.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub tcp_recv_buffer: Option<u64>,
    /// Receive buffer each TCP connection starts with before autotuning grows it (0: the
    /// kernel's `tcp_rmem` default, 128 KiB stock). Beyond `net.core.rmem_max` only with
    /// CAP_NET_ADMIN. Default 16MiB.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub tcp_initial_recv_buffer: Option<u64>,
    /// Largest receive window each TCP connection advertises (TCP_WINDOW_CLAMP), keeping
    /// autotuning; default: the kernel's. Lanes whose windows together stay near the path's
    /// bandwidth-delay product cannot overflow the bottleneck's queue.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub tcp_window_clamp: Option<u64>,
    /// TCP congestion control (bbr, cubic, reno...). Default bbr when the kernel has it.
    #[arg(long, value_name = "NAME")]
    pub congestion: Option<String>,
    /// Leave Nagle's algorithm on (TCP_NODELAY off).
    #[arg(long)]
    pub no_nodelay: bool,
    /// Do not use TCP Fast Open (by default a TLS connection puts its ClientHello in the SYN
    /// once the kernel holds a cookie from an earlier connection to the server).
    #[arg(long)]
    pub no_tcp_fastopen: bool,
    /// Do not cap the receive windows of a transfer's TCP connections (by default, once a
    /// queue stands at the bottleneck of a path of 5 ms or more, together they may hold 5/4 of
    /// goodput x RTT, so that the senders, or one in its startup, do not overflow it).
    #[arg(long)]
    pub no_window_cap: bool,
    /// Do not send reads as TLS 1.3 early data over TCP (by default a connection that resumes
    /// a session sends its first GET with the ClientHello). QUIC's 0-RTT is not affected.
    #[arg(long)]
    pub no_early_data: bool,
    /// Turn a speed mechanism on or off (repeatable); `xfer get --mechanisms` lists them with
    /// their defaults. A --no-* flag of one mechanism is the same as NAME=off.
    #[arg(long = "mechanism", value_name = "NAME=on|off")]
    pub mechanism: Vec<Setting>,

    /// Start from hyper's/the spec's HTTP/2 defaults (16 KiB frames, 64 KiB windows), for
    /// comparison; other --h2-* flags still apply on top.
    #[arg(long)]
    pub h2_spec_defaults: bool,
    /// HTTP/2 SETTINGS_MAX_FRAME_SIZE we accept (16KiB to 16MiB-1). Default 1MiB.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub h2_frame_size: Option<u64>,
    /// HTTP/2 per-stream receive window. Default 16MiB.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub h2_stream_window: Option<u64>,
    /// HTTP/2 connection receive window. Default 64MiB.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub h2_connection_window: Option<u64>,
    /// Let hyper size HTTP/2 windows from its BDP estimate instead of the fixed ones.
    #[arg(long)]
    pub h2_adaptive_window: bool,
    /// HTTP/2 send buffer per stream. Default 4MiB.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub h2_send_buffer: Option<u64>,
    /// HTTP/2 without -c: connections to spread the lanes over once the connection in use
    /// has seen loss (1: never). Default 8.
    #[arg(long, value_name = "N")]
    pub h2_loss_connections: Option<usize>,
    /// File where xfer remembers, per server, whether the last transfer there lost packets,
    /// so that HTTP/2 starts spread over --h2-loss-connections. Default
    /// $XDG_CACHE_HOME/xfer/paths (~/.cache/xfer/paths).
    #[arg(long, value_name = "FILE", env = "XFER_PATH_MEMORY")]
    pub path_memory: Option<std::path::PathBuf>,
    /// Remember nothing about paths between transfers.
    #[arg(long)]
    pub no_path_memory: bool,

    /// Start from quinn's defaults (sized for 100 Mbit/s at 100 ms), for comparison.
    #[arg(long)]
    pub quic_stock_defaults: bool,
    /// QUIC per-stream receive window. Default 16MiB.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub quic_stream_window: Option<u64>,
    /// QUIC connection receive window. Default 128MiB: two stream windows per stream, so
    /// lanes can request ahead (see --request-ahead).
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub quic_connection_window: Option<u64>,
    /// QUIC send window. Default 64MiB.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub quic_send_window: Option<u64>,
    /// QUIC congestion controller.
    #[arg(long, value_enum)]
    pub quic_congestion: Option<QuicCongestion>,
    /// Let QUIC's BBR ignore loss as quinn's does (for uploads, where the client sends): the
    /// default; `--mechanism quic-loss-bound=on` bounds the window when a round trip loses more
    /// than 2%.
    #[arg(long)]
    pub no_quic_loss_bound: bool,
    /// Packets the server may receive before it must acknowledge (for uploads, where the client
    /// sends), or `off` for QUIC's every second packet. Default 9 while xfer's BBR sends
    /// (`--mechanism quic-ack-frequency=off` turns the default off).
    #[arg(long, value_parser = ack_threshold_arg, value_name = "PACKETS")]
    pub quic_ack_threshold: Option<AckThreshold>,
    /// QUIC initial RTT estimate (`300ms`; a unit is required).
    #[arg(long, value_parser = duration_with_unit_arg, value_name = "DURATION")]
    pub quic_initial_rtt: Option<Duration>,
    /// QUIC initial MTU, bytes.
    #[arg(long)]
    pub quic_initial_mtu: Option<u16>,
    /// Turn QUIC path MTU discovery off.
    #[arg(long)]
    pub quic_no_mtu_discovery: bool,
    /// Largest UDP payload QUIC may use, bytes (1200-65527). Default: what the route to the
    /// server takes (1472 on 1500-byte Ethernet over IPv4, 8972 on jumbo frames, 65507 on
    /// loopback; 8972 where the kernel does not say).
    #[arg(long, value_name = "BYTES")]
    pub quic_max_datagram: Option<u16>,
    /// Turn UDP segmentation offload (GSO) off.
    #[arg(long)]
    pub quic_no_gso: bool,
    /// UDP socket send and receive buffers. Default 32MiB.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub udp_buffer: Option<u64>,

    /// Give up connecting after this long (`10s`, `500ms`; a bare number is seconds).
    #[arg(long, value_parser = duration_arg, value_name = "DURATION", default_value = "10s")]
    pub connect_timeout: Duration,
    /// Fail a request that receives nothing for this long (a bare number is seconds).
    #[arg(long, value_parser = duration_arg, value_name = "DURATION", default_value = "30s")]
    pub idle_timeout: Duration,
}

/// `$XDG_CACHE_HOME/xfer/paths`, else `$HOME/.cache/xfer/paths`; none when neither names an
/// absolute directory.
fn default_path_memory() -> Option<std::path::PathBuf> {
    let absolute = |v: std::ffi::OsString| {
        let p = std::path::PathBuf::from(v);
        p.is_absolute().then_some(p)
    };
    std::env::var_os("XDG_CACHE_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".cache"))
        })
        .map(|c| c.join("xfer").join("paths"))
}

impl ClientArgs {
    /// The mechanisms asked for, the older --no-* flags folded in.
    pub fn switches(&self) -> Switches {
        Switches::new(self.mechanism.iter().copied()).turn_off_flagged(&[
            (self.no_tcp_fastopen, mechanisms::TCP_FASTOPEN),
            (self.no_window_cap, mechanisms::WINDOW_CAP),
            (self.no_early_data, mechanisms::EARLY_DATA),
            (self.no_path_memory, mechanisms::PATH_MEMORY),
            (self.no_quic_loss_bound, mechanisms::QUIC_LOSS_BOUND),
        ])
    }

    /// Turn the flags into a validated configuration; a bad value is a usage error (exit 2).
    pub fn to_config(&self) -> Result<ClientConfig, UsageError> {
        self.build().map_err(|e| UsageError(format!("{e:#}")))
    }

    /// The bearer token: `--token-file` (or `XFER_TOKEN_FILE`), else WLCG discovery's
    /// environment variables. The well-known file locations of that discovery are not read:
    /// a token found without being named would go to whatever server the URL names.
    fn token(&self) -> anyhow::Result<Option<Secret>> {
        let from_file = |path: &std::path::Path| {
            Secret::from_file(path)
                .with_context(|| format!("cannot read the token file {}", path.display()))
        };
        if let Some(path) = &self.token_file {
            return from_file(path).map(Some);
        }
        if let Some(token) = std::env::var("BEARER_TOKEN")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
        {
            return Ok(Some(Secret::new(token)));
        }
        if let Some(path) = std::env::var_os("BEARER_TOKEN_FILE") {
            return from_file(std::path::Path::new(&path)).map(Some);
        }
        Ok(None)
    }

    fn build(&self) -> anyhow::Result<ClientConfig> {
        let mut c = ClientConfig::default()
            .with_tls(ClientTlsOptions {
                ca_certs: self.ca_cert.iter().chain(&self.ca_dir).cloned().collect(),
                dangerous_insecure: self.insecure,
                client_identity: match (&self.client_cert, &self.client_key) {
                    (Some(cert), Some(key)) => Some(xfer::crates::common::tls::ClientIdentity {
                        cert: cert.clone(),
                        key: key.clone(),
                    }),
                    _ => None,
                },
            })
            .with_lanes(LaneLayout {
                connections: self.connections,
                streams_per_connection: self.streams,
            });
        let (connect, idle) = (self.connect_timeout, self.idle_timeout);

        let h = &mut c.http;
        h.version = match self.protocol.unwrap_or(Protocol::Http1) {
            Protocol::Http1 => HttpVersion::Http1,
            Protocol::Http2 => HttpVersion::Http2,
            Protocol::Auto => HttpVersion::Auto,
        };
        h.connect_timeout = connect;
        h.idle_timeout = idle;
        if self.h2_spec_defaults {
            h.http2 = Http2Config::hyper_defaults();
        }
        if let Some(v) = self.h2_frame_size {
            h.http2.max_frame_size = v;
        }
        if let Some(v) = self.h2_stream_window {
            h.http2.stream_window = v;
        }
        if let Some(v) = self.h2_connection_window {
            h.http2.connection_window = v;
        }
        if self.h2_adaptive_window {
            h.http2.adaptive_window = true;
        }
        if let Some(v) = self.h2_send_buffer {
            h.http2.max_send_buffer = v;
        }
        let sw = self.switches();
        if let Some(v) = self.h2_loss_connections {
            h.h2_loss_connections = v;
        }
        if !sw.is_on(mechanisms::H2_LOSS_SPREAD) {
            h.h2_loss_connections = 1;
        }
        h.path_memory = if sw.is_on(mechanisms::PATH_MEMORY) {
            self.path_memory.clone().or_else(default_path_memory)
        } else {
            None
        };
        h.tcp.send_buffer = self.tcp_send_buffer.or(h.tcp.send_buffer);
        h.tcp.recv_buffer = self.tcp_recv_buffer.or(h.tcp.recv_buffer);
        h.tcp.window_clamp = self.tcp_window_clamp.or(h.tcp.window_clamp);
        if let Some(v) = self.tcp_initial_recv_buffer {
            h.tcp.initial_recv_buffer = (v > 0).then_some(v);
        }
        if !sw.is_on(mechanisms::INITIAL_RECV_BUFFER) {
            h.tcp.initial_recv_buffer = None;
        }
        if !sw.is_on(mechanisms::TCP_BBR) {
            h.tcp.congestion = None;
        }
        if let Some(cc) = &self.congestion {
            h.tcp.congestion = Some(cc.clone());
        }
        if self.no_nodelay {
            h.tcp.nodelay = false;
        }
        h.tcp.fast_open = sw.is_on(mechanisms::TCP_FASTOPEN);
        h.tcp.window_cap = sw.is_on(mechanisms::WINDOW_CAP);
        h.early_data = sw.is_on(mechanisms::EARLY_DATA);
        h.validate().context("invalid HTTP client setting")?;

        let q = &mut c.quic;
        if self.quic_stock_defaults {
            q.tuning = QuicTuning::quinn_defaults();
        }
        q.connect_timeout = connect;
        q.idle_timeout = idle.max(Duration::from_secs(1));
        let t = &mut q.tuning;
        if let Some(v) = self.quic_stream_window {
            t.stream_receive_window = v;
        }
        if let Some(v) = self.quic_connection_window {
            t.connection_receive_window = v;
        }
        if let Some(v) = self.quic_send_window {
            t.send_window = v;
        }
        if let Some(cc) = self.quic_congestion {
            t.congestion = cc.into();
        }
        if !sw.is_on(mechanisms::QUIC_LOSS_BOUND) {
            t.loss_bound = false;
        }
        t.ack_eliciting_threshold = ack_threshold(
            sw.is_on(mechanisms::QUIC_ACK_FREQUENCY),
            t.congestion,
            self.quic_ack_threshold,
        );
        if let Some(rtt) = self.quic_initial_rtt {
            t.initial_rtt = rtt;
        }
        if let Some(mtu) = self.quic_initial_mtu {
            t.initial_mtu = mtu;
        }
        if self.quic_no_mtu_discovery {
            t.mtu_discovery = false;
        }
        if let Some(v) = self.quic_max_datagram {
            t.mtu_discovery_upper_bound = v;
        }
        if self.quic_no_gso {
            t.gso = false;
        }
        if let Some(v) = self.udp_buffer {
            t.udp_send_buffer = Some(v);
            t.udp_recv_buffer = Some(v);
        }
        q.validate().context("invalid QUIC client setting")?;
        if self.insecure && (!self.ca_cert.is_empty() || self.ca_dir.is_some()) {
            bail!("--insecure and --ca-cert/--ca-dir contradict each other: pick one");
        }
        if let Some(token) = self.token()? {
            c = c.with_token(token);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod default_text_tests {
    use super::*;

    #[test]
    fn defaults_print_in_the_grammar_that_reads_them_back() {
        for bytes in [0, 1500, 1 << 10, 32 << 20, 64 << 20, 3 << 30, (1 << 20) + 1] {
            assert_eq!(
                size_arg(&size_text(bytes)),
                Ok(bytes),
                "{}",
                size_text(bytes)
            );
        }
        assert_eq!(size_text(64 << 20), "64MiB");
        for d in [
            Duration::from_secs(3600),
            Duration::from_secs(90),
            Duration::from_millis(333),
            Duration::from_micros(250),
            Duration::ZERO,
        ] {
            assert_eq!(
                duration_arg(&duration_text(d)),
                Ok(d),
                "{}",
                duration_text(d)
            );
        }
        assert_eq!(duration_text(Duration::from_secs(3600)), "1h");
    }
}

#[cfg(test)]
mod ack_threshold_tests {
    use super::*;

    #[test]
    fn the_default_threshold_needs_the_mechanism_and_xfers_bbr() {
        let bbr = CongestionControl::Bbr;
        assert_eq!(ack_threshold(true, bbr, None), Some(9));
        assert_eq!(ack_threshold(false, bbr, None), None);
        for other in [
            CongestionControl::Cubic,
            CongestionControl::NewReno,
            CongestionControl::QuinnBbr,
        ] {
            assert_eq!(ack_threshold(true, other, None), None, "{other:?}");
        }
        // What the flag asks wins either way, `off` included.
        assert_eq!(
            ack_threshold(
                false,
                CongestionControl::Cubic,
                Some(AckThreshold(Some(31)))
            ),
            Some(31)
        );
        assert_eq!(ack_threshold(true, bbr, Some(AckThreshold(None))), None);
    }

    #[test]
    fn the_mechanism_switch_reaches_the_quic_tuning() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            client: ClientArgs,
        }
        let tuning = |args: &[&str]| {
            let cli = Cli::try_parse_from(std::iter::once("xfer").chain(args.iter().copied()))
                .expect("arguments parse");
            cli.client
                .to_config()
                .expect("a valid configuration")
                .quic
                .tuning
                .ack_eliciting_threshold
        };
        assert_eq!(tuning(&[]), Some(9));
        assert_eq!(tuning(&["--mechanism", "quic-ack-frequency=off"]), None);
        assert_eq!(tuning(&["--quic-congestion", "cubic"]), None);
        assert_eq!(tuning(&["--quic-ack-threshold", "3"]), Some(3));
    }
}
