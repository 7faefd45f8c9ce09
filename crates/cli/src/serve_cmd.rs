//! `xfer serve`: serve a directory; uploads and third-party copies where access rules allow.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{ArgMatches, Args, FromArgMatches as _};
use xfer::crates::common::mechanisms::{self, Setting, Switches};
use xfer::crates::common::tls::{self, CertOrigin};
use xfer::crates::http::server::tcp_resume::TcpResumeStatus;
use xfer::crates::quic::CarefulResume;
use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer::{ChecksumAlgorithm, Http2Config, QuicTuning};

use crate::monitoring_args::LogFormat;

use crate::client_args::{duration_arg, duration_text, size_arg, size_text, QuicCongestion};
use crate::config_file;
use crate::exit::UsageError;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory to serve. Written only with --allow-upload, where the access rules grant
    /// write scope. Also serves /.xfer/synthetic?size=SIZE&seed=N.
    #[arg(required_unless_present_any = ["config", "print_config", "mechanisms"])]
    pub dir: Option<PathBuf>,
    /// Read flags from this TOML file: each key is a long flag without its dashes
    /// (`tcp-send-buffer = "32MiB"`, `no-quic = true`, `mirror = ["https://a", "https://b"]`),
    /// DIR is `dir`. Flags on the command line win. See docs/operations.md.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration (command line, config file and defaults) as TOML,
    /// secrets redacted, and exit.
    #[arg(long)]
    pub print_config: bool,
    /// TCP address for HTTP; QUIC listens on the same address over UDP.
    #[arg(short, long, default_value = "[::]:8443")]
    pub listen: SocketAddr,
    /// TLS certificate chain (PEM). Read again, with the key, on SIGHUP: a renewed
    /// certificate needs no restart, and one that does not load leaves the old in use.
    #[arg(long, requires = "tls_key", value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert", value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// Generate a self-signed certificate; clients trust it with --ca-cert <cert-dir>/cert.pem.
    #[arg(long, conflicts_with_all = ["tls_cert", "plain"])]
    pub self_signed: bool,
    /// Where --self-signed keeps cert.pem and key.pem. A usable certificate already there is
    /// reused, so clients that trust it keep working across restarts.
    #[arg(long, default_value = "xfer-cert")]
    pub cert_dir: PathBuf,
    /// More names for the self-signed certificate (DNS names or IPs), besides localhost,
    /// 127.0.0.1, ::1, this host's name and the listen addresses. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub cert_name: Vec<String>,
    /// Replace the certificate in --cert-dir with a new one even if it is still usable
    /// (clients must then be given the new cert.pem).
    #[arg(long, requires = "self_signed")]
    pub new_cert: bool,
    /// Serve plain HTTP (no TLS, no QUIC). Anyone on the path can read and alter the data.
    #[arg(long, conflicts_with = "tls_cert")]
    pub plain: bool,
    /// Do not serve QUIC.
    #[arg(long)]
    pub no_quic: bool,
    /// A different UDP address for QUIC.
    #[arg(long)]
    pub quic_listen: Option<SocketAddr>,
    /// TCP send buffer per connection (SO_SNDBUF, forced past net.core.wmem_max when root).
    #[arg(long, value_parser = size_arg, default_value = "32MiB", value_name = "SIZE")]
    pub tcp_send_buffer: u64,
    /// Do not take data in SYNs (TCP Fast Open) on the TLS listener. Taking it also needs
    /// net.ipv4.tcp_fastopen with bit 0x2 (see xfer doctor).
    #[arg(long)]
    pub no_tcp_fastopen: bool,
    /// Refuse TLS 1.3 early data over TCP (by default reads that arrive in it are answered at
    /// once and other requests get 425 Too Early). Off anyway with --client-ca.
    #[arg(long)]
    pub no_early_data: bool,
    /// Turn a speed mechanism on or off (repeatable); `xfer serve --mechanisms` lists them.
    /// Those that load kernel programs (tcp-resume) are off unless asked for. A --no-* flag of one mechanism is the same as NAME=off.
    #[arg(long = "mechanism", value_name = "NAME=on|off")]
    pub mechanism: Vec<Setting>,
    /// Print every server-side speed mechanism, whether it runs here and why (after the
    /// --mechanism settings given), and exit.
    #[arg(long)]
    pub mechanisms: bool,
    /// TCP congestion control for served connections.
    #[arg(long, value_name = "NAME")]
    pub congestion: Option<String>,
    /// HTTP/2 max frame size we accept (affects what clients send: requests only).
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub h2_frame_size: Option<u64>,
    /// HTTP/2 cap on concurrent streams per connection.
    #[arg(long, default_value_t = Http2Config::default().max_concurrent_streams)]
    pub h2_max_streams: u32,
    /// HTTP/2 send buffer per stream.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub h2_send_buffer: Option<u64>,
    /// QUIC congestion controller of the server, which is the sender of a download (default
    /// bbr, xfer's own).
    #[arg(long, value_enum)]
    pub quic_congestion: Option<QuicCongestion>,
    /// Let QUIC's BBR ignore loss as quinn's does: the default since the bound cost 60% of the
    /// goodput at 1% random loss; `--mechanism quic-loss-bound=on` bounds the window when a
    /// round trip loses more than 2% (docs/design.md, "QUIC loss bound").
    #[arg(long)]
    pub no_quic_loss_bound: bool,
    /// Packets a QUIC client may receive before it must acknowledge (for downloads, where the
    /// server sends), or `off` for QUIC's every second packet. Default 9 while xfer's BBR
    /// sends (`--mechanism quic-ack-frequency=off` turns the default off).
    #[arg(long, value_parser = crate::client_args::ack_threshold_arg, value_name = "PACKETS")]
    pub quic_ack_threshold: Option<crate::client_args::AckThreshold>,
    /// QUIC send window: unacknowledged bytes per connection.
    #[arg(long, value_parser = size_arg, value_name = "SIZE",
          default_value = size_text(QuicTuning::for_server().send_window))]
    pub quic_send_window: u64,
    /// Largest UDP payload QUIC sends or accepts, bytes (1200-65527). Default 65527: each
    /// client announces what its route takes (1472 on 1500-byte Ethernet over IPv4, 8972 on
    /// jumbo frames, 65507 on loopback) and MTU discovery stops there.
    #[arg(long, value_name = "BYTES")]
    pub quic_max_datagram: Option<u16>,
    /// Do not start QUIC connections from the path their client's last connection measured
    /// (Careful Resume, RFC 9959): every connection pays slow start.
    #[arg(long)]
    pub no_careful_resume: bool,
    /// Keep the QUIC path state (bandwidth-delay product and RTT per client address) in FILE
    /// across restarts. Default: memory only.
    #[arg(long, value_name = "FILE", conflicts_with = "no_careful_resume")]
    pub path_cache: Option<PathBuf>,
    /// How long saved QUIC path state stays usable.
    #[arg(long, value_parser = duration_arg, value_name = "DURATION", conflicts_with = "no_careful_resume",
          default_value = duration_text(CarefulResume::default().lifetime))]
    pub careful_resume_lifetime: std::time::Duration,
    /// Largest congestion window a resumed QUIC connection jumps to (at most half the saved
    /// bandwidth-delay product in any case).
    #[arg(long, value_parser = size_arg, value_name = "SIZE", conflicts_with = "no_careful_resume",
          default_value = size_text(CarefulResume::default().max_jump))]
    pub careful_resume_max_jump: u64,
    /// UDP socket send and receive buffers for QUIC (forced past net.core.rmem_max and
    /// wmem_max when root).
    #[arg(long, value_parser = size_arg, value_name = "SIZE",
          default_value = size_text(QuicTuning::for_server().udp_send_buffer.unwrap_or_default()))]
    pub udp_buffer: u64,
    /// Most simultaneous connections, per protocol (HTTP over TCP; QUIC). When full, a
    /// connection idle for 2 s is closed to make room; otherwise newcomers are refused.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Most simultaneous connections from one client address, per protocol.
    #[arg(long, default_value_t = 128)]
    pub max_connections_per_address: usize,
    /// On SIGTERM or SIGINT: stop taking connections and requests, let responses in flight
    /// finish for up to this long (HTTP/1.1, HTTP/2 and QUIC alike), then close what remains.
    #[arg(long, value_parser = duration_arg, default_value = "30s", value_name = "DURATION")]
    pub shutdown_grace: std::time::Duration,
    /// Memory for outgoing data of the whole server, all protocols together: blocks read
    /// ahead, queued for HTTP/1.1 and HTTP/2, and unacknowledged on QUIC. A response whose
    /// next block does not fit waits for room. See docs/security.md for the process's bound.
    #[arg(long, value_parser = size_arg, default_value = "512MiB", value_name = "SIZE")]
    pub memory_budget: u64,
    /// A response that sends nothing for this long while it has data to send is ended
    /// (HTTP/2 stream reset, HTTP/1.1 connection closed, QUIC stream reset with STALLED)
    /// and its memory returned.
    #[arg(long, value_parser = duration_arg, default_value = "60s", value_name = "DURATION")]
    pub stall_timeout: std::time::Duration,
    /// Do not compute whole-file digests in the background (no Repr-Digest).
    #[arg(long)]
    pub no_repr_digest: bool,
    /// Checksums computed while a whole file is sent, so that `Want-Digest` asked later (FTS
    /// checks adler32 after each copy) needs no second read: a comma-separated list of
    /// adler32, md5, sha256, or `none`.
    #[arg(long, value_name = "ALGS", default_value = "adler32", value_parser = checksum_list)]
    pub checksums_on_send: ChecksumList,
    /// Base URL of a mirror holding the same tree (repeatable): every file's answer names its
    /// copy there in `Link: <URL/path>; rel=duplicate` (RFC 6249), for clients to fetch from
    /// both.
    #[arg(long, value_name = "URL", value_parser = mirror_arg)]
    pub mirror: Vec<String>,
    /// Access file (TOML): bearer tokens and client certificates with their scopes (read or
    /// write, under a path prefix). Reloaded when it changes and on SIGHUP. See docs/access.md.
    #[arg(long, alias = "tokens", value_name = "FILE")]
    pub access: Option<PathBuf>,
    /// Refuse reads without credentials (writes always need them).
    #[arg(long)]
    pub no_anonymous_read: bool,
    /// Ask clients for a certificate signed by a CA in this PEM file; the access file maps
    /// its DNS names to scopes. Clients without one connect as anonymous.
    #[arg(long, value_name = "PEM", conflicts_with = "plain")]
    pub client_ca: Option<PathBuf>,
    /// As --client-ca, with the CAs of an OpenSSL hashed directory (`<hash>.0` certificates,
    /// `<hash>.r0` CRLs), e.g. /etc/grid-security/certificates: a revoked client certificate
    /// fails the handshake; a CA without a CRL is not checked for revocation. Read again on
    /// SIGHUP (after fetch-crl).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["plain", "client_ca"])]
    pub client_ca_dir: Option<PathBuf>,
    /// Accept uploads (PUT, and xfer put's parallel uploads) from callers the access file
    /// gives write access.
    #[arg(long)]
    pub allow_upload: bool,
    /// Remove a parallel upload that received nothing for this long (its staging file and
    /// record).
    #[arg(long, value_parser = duration_arg, default_value = "24h", value_name = "DURATION")]
    pub upload_expiry: std::time::Duration,
    /// Refuse HTTP third-party copy (COPY with Source or Destination; docs/tpc.md).
    #[arg(long)]
    pub no_tpc: bool,
    /// Third-party copies running at once; more are answered 429.
    #[arg(long, default_value_t = xfer::crates::service::TpcConfig::default().max_active, value_name = "N")]
    pub tpc_max_active: usize,
    /// Trust this CA (PEM) when a third-party copy connects to a remote, instead of the
    /// Mozilla roots. Repeatable.
    #[arg(long, value_name = "PEM")]
    pub tpc_ca_cert: Vec<PathBuf>,
    /// Trust the CAs of this OpenSSL hashed directory (with its CRLs, honoured) when a
    /// third-party copy connects to a remote, e.g. /etc/grid-security/certificates.
    #[arg(long, value_name = "DIR")]
    pub tpc_ca_dir: Option<PathBuf>,
    /// Largest number of lanes a third-party copy runs (X-Number-Of-Streams is capped here;
    /// without it a copy runs 8 HTTP/1.1 connections).
    #[arg(long, default_value_t = xfer::crates::service::TpcConfig::default().max_streams, value_name = "N")]
    pub tpc_max_streams: usize,
    /// Let third-party copies (both directions, redirects too) reach this host name or
    /// network (CIDR, e.g. 10.1.0.0/16, or one address) although it is internal: loopback,
    /// private, link-local, multicast and this host's own addresses are refused otherwise.
    /// Repeatable.
    #[arg(long, value_name = "HOST|CIDR", value_parser = |s: &str| s.parse::<xfer::crates::service::tpc::Allowance>())]
    pub tpc_allow: Vec<xfer::crates::service::tpc::Allowance>,
    #[command(flatten)]
    pub monitoring: crate::monitoring_args::MonitoringArgs,
}

impl ServeArgs {
    /// The mechanisms asked for, the older --no-* flags folded in.
    fn switches(&self) -> Switches {
        Switches::new(self.mechanism.iter().copied()).turn_off_flagged(&[
            (self.no_tcp_fastopen, mechanisms::TCP_FASTOPEN),
            (self.no_early_data, mechanisms::EARLY_DATA),
            (self.no_quic_loss_bound, mechanisms::QUIC_LOSS_BOUND),
            (self.no_careful_resume, mechanisms::CAREFUL_RESUME),
        ])
    }
}

/// `xfer serve`'s arguments as a command of their own: the config-file keys and the flag
/// tables are read from it.
pub fn command() -> clap::Command {
    let mut cmd = ServeArgs::augment_args(clap::Command::new("serve"));
    cmd.build();
    cmd
}

/// The log format in force, config file included, for setting up logging before [`run`]. A
/// file that does not load is reported by `run`; until then the command line's choice holds.
pub fn log_format(given: &ServeArgs, matches: Option<&ArgMatches>) -> LogFormat {
    let (Some(file), Some(matches)) = (given.config.as_deref(), matches) else {
        return given.monitoring.log_format;
    };
    config_file::effective_matches(&command(), matches, Some(file))
        .ok()
        .and_then(|m| ServeArgs::from_arg_matches(&m).ok())
        .map_or(given.monitoring.log_format, |a| a.monitoring.log_format)
}

/// `given` is what the command line parsed into; `matches` the same, untyped.
pub async fn run(given: ServeArgs, matches: &ArgMatches) -> anyhow::Result<ExitCode> {
    let cmd = command();
    let effective = config_file::effective_matches(&cmd, matches, given.config.as_deref())?;
    if given.print_config {
        print!("{}", config_file::render(&cmd, &effective));
        return Ok(ExitCode::SUCCESS);
    }
    let args = ServeArgs::from_arg_matches(&effective)
        .map_err(|e| UsageError(format!("configuration: {e}")))?;
    let sw = args.switches();
    if args.mechanisms {
        print!("{}", sw.report(mechanisms::Side::Server));
        return Ok(ExitCode::SUCCESS);
    }
    let Some(dir) = args.dir.clone() else {
        return Err(UsageError(
            "no directory to serve: give DIR, or `dir` in the config file".into(),
        )
        .into());
    };
    let tls = if args.plain {
        ServerTls::Plain
    } else if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        ServerTls::Files {
            cert: cert.clone(),
            key: key.clone(),
        }
    } else if args.self_signed {
        let listen: Vec<_> = std::iter::once(args.listen.ip())
            .chain(args.quic_listen.map(|a| a.ip()))
            .collect();
        let mut names = tls::default_cert_names(&listen);
        for name in &args.cert_name {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        ServerTls::SelfSigned {
            dir: args.cert_dir.clone(),
            names,
        }
    } else {
        return Err(UsageError(
            "choose TLS: --tls-cert/--tls-key, --self-signed, or --plain for unencrypted HTTP"
                .into(),
        )
        .into());
    };
    let mut cfg = ServeConfig::new(&dir, tls);
    args.monitoring.apply(&mut cfg);
    cfg.access_file = args.access.clone();
    cfg.anonymous_read = !args.no_anonymous_read;
    // A hashed directory and a PEM file are read by the same loader.
    cfg.client_ca = args.client_ca.clone().or(args.client_ca_dir.clone());
    if args.allow_upload {
        cfg.uploads = Some(xfer::crates::service::UploadConfig {
            expiry: args.upload_expiry,
            ..Default::default()
        });
    }
    cfg.tpc = if args.no_tpc {
        None
    } else {
        let tpc = xfer::crates::service::TpcConfig {
            max_active: args.tpc_max_active,
            max_streams: args.tpc_max_streams,
            remote_policy: xfer::crates::service::RemotePolicy::allowing(args.tpc_allow.clone()),
            ..Default::default()
        };
        tpc.validate().map_err(|e| UsageError(e.to_string()))?;
        Some(tpc)
    };
    if !args.tpc_ca_cert.is_empty() || args.tpc_ca_dir.is_some() {
        cfg.tpc_client = cfg.tpc_client.with_tls(xfer::ClientTlsOptions {
            ca_certs: args
                .tpc_ca_cert
                .iter()
                .chain(&args.tpc_ca_dir)
                .cloned()
                .collect(),
            ..Default::default()
        });
    }
    cfg.http.listen = args.listen;
    cfg.http.tcp.send_buffer = Some(args.tcp_send_buffer);
    if !sw.is_on(mechanisms::TCP_BBR) {
        cfg.http.tcp.congestion = None;
    }
    if let Some(cc) = &args.congestion {
        cfg.http.tcp.congestion = Some(cc.clone());
    }
    cfg.http.tcp.fast_open = sw.is_on(mechanisms::TCP_FASTOPEN);
    cfg.http.tcp_resume.enabled = sw.is_on(mechanisms::TCP_RESUME);
    if !sw.is_on(mechanisms::EARLY_DATA) {
        cfg.http.max_early_data_size = 0;
    }
    if let Some(v) = args.h2_frame_size {
        cfg.http.http2.max_frame_size = v;
    }
    cfg.http.http2.max_concurrent_streams = args.h2_max_streams;
    if let Some(v) = args.h2_send_buffer {
        cfg.http.http2.max_send_buffer = v;
    }
    cfg.http.max_connections = args.max_connections;
    cfg.http.max_connections_per_address = args.max_connections_per_address;
    cfg.http.repr_digest = !args.no_repr_digest;
    cfg.http.checksums_on_send = args.checksums_on_send.0.clone();
    cfg.http.mirrors = args.mirror.clone();
    cfg.http.memory_budget = xfer::crates::common::MemoryBudget::new(args.memory_budget);
    cfg.http.stall_timeout = args.stall_timeout;
    cfg.http.shutdown_grace = args.shutdown_grace;
    cfg.quic = !args.no_quic;
    cfg.quic_listen = args.quic_listen;
    cfg.renew_self_signed = args.new_cert;
    let mut quic = QuicTuning::for_server();
    if let Some(cc) = args.quic_congestion {
        quic.congestion = cc.into();
    }
    quic.loss_bound = sw.is_on(mechanisms::QUIC_LOSS_BOUND);
    quic.ack_eliciting_threshold = crate::client_args::ack_threshold(
        sw.is_on(mechanisms::QUIC_ACK_FREQUENCY),
        quic.congestion,
        args.quic_ack_threshold,
    );
    quic.send_window = args.quic_send_window;
    if let Some(bytes) = args.quic_max_datagram {
        quic.mtu_discovery_upper_bound = bytes;
    }
    quic.udp_send_buffer = Some(args.udp_buffer);
    quic.udp_recv_buffer = Some(args.udp_buffer);
    quic.validate().map_err(|e| UsageError(e.to_string()))?;
    cfg.quic_tuning = quic;
    cfg.quic_resume.enabled = sw.is_on(mechanisms::CAREFUL_RESUME);
    cfg.quic_resume.file = args.path_cache.clone();
    cfg.quic_resume.lifetime = args.careful_resume_lifetime;
    cfg.quic_resume.max_jump = args.careful_resume_max_jump;
    cfg.quic_resume
        .validate()
        .map_err(|e| UsageError(e.to_string()))?;
    if let Err(e) = cfg.http.validate() {
        return Err(UsageError(e.to_string()).into());
    }
    let servers = Servers::start(cfg)
        .await
        .with_context(|| format!("serving {}", dir.display()))?;
    if let (Some(s), Some(origin)) = (&servers.self_signed, &servers.cert_origin) {
        let how = match origin {
            CertOrigin::Reused => "reusing".to_string(),
            CertOrigin::Generated { reason } => format!("generated ({reason})"),
        };
        eprintln!(
            "self-signed certificate: {} (SHA-256 {}), {how}",
            s.cert_path.display(),
            s.sha256_fingerprint
        );
    }
    eprintln!("serving {} at {}", dir.display(), servers.http_base());
    match servers.quic_base() {
        Some(q) => eprintln!("                 and {q}"),
        None if args.plain => eprintln!("QUIC is off: it needs TLS"),
        None => {}
    }
    // One line of what runs; settings asked for that this host cannot honour (TCP resume
    // says below what it found when it tried).
    let mut on = Vec::new();
    for m in mechanisms::MECHANISMS
        .iter()
        .filter(|m| m.side.includes(mechanisms::Side::Server))
    {
        let a = sw.activity(m, &mechanisms::host_allows);
        if m.name == mechanisms::TCP_RESUME {
            if servers.tcp_resume == TcpResumeStatus::On {
                on.push(m.name);
            }
        } else if a.on {
            on.push(m.name);
        } else if args.mechanism.iter().any(|s| s.name == m.name && s.on) {
            eprintln!("{} asked for but off here: {}", m.name, a.why);
        }
    }
    eprintln!("mechanisms on: {}", on.join(", "));
    match &servers.tcp_resume {
        TcpResumeStatus::On => {
            eprintln!("TCP resume on: a returning client's connections start from its saved path")
        }
        TcpResumeStatus::Unavailable(why) => eprintln!(
            "TCP resume asked for but unavailable ({why}): every TCP connection pays slow start"
        ),
        TcpResumeStatus::Off => {}
    }
    let signal = crate::interrupt::stop_signal().await;
    eprintln!(
        "{signal}: shutting down; refusing new connections and requests, letting responses in \
         flight finish (up to {:?})",
        args.shutdown_grace
    );
    servers.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// `--checksums-on-send`: algorithms, or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChecksumList(pub Vec<ChecksumAlgorithm>);

fn checksum_list(s: &str) -> Result<ChecksumList, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(ChecksumList(Vec::new()));
    }
    let mut out = Vec::new();
    for name in s.split(',') {
        let a = ChecksumAlgorithm::parse_user(name).map_err(|e| format!("{e}, or none"))?;
        if !out.contains(&a) {
            out.push(a);
        }
    }
    Ok(ChecksumList(out))
}

fn mirror_arg(s: &str) -> Result<String, String> {
    let scheme = s.split_once("://").map(|(a, _)| a.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) {
        return Err("a mirror is an http:// or https:// base URL".into());
    }
    if s.contains(|c: char| c.is_whitespace() || c.is_control() || c == '>' || c == '<') {
        return Err("a mirror URL has no spaces, control characters, < or >".into());
    }
    Ok(s.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod checksum_list_tests {
    use super::*;

    #[test]
    fn lists_none_and_mistakes() {
        use ChecksumAlgorithm::*;
        assert_eq!(checksum_list("adler32"), Ok(ChecksumList(vec![Adler32])));
        assert_eq!(
            checksum_list("MD5,adler32,md5"),
            Ok(ChecksumList(vec![Md5, Adler32]))
        );
        assert_eq!(checksum_list("none"), Ok(ChecksumList(Vec::new())));
        assert!(checksum_list("crc32c").is_err_and(|e| e.contains("crc32c")));
        assert!(checksum_list("").is_err());
    }
}
