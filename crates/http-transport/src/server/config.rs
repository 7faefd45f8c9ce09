//! [`ServerConfig`]: what the HTTP server serves, where it listens and how it treats peers.

use std::net::{Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use xfer_service::{AccessControl, ChecksumCache, ServiceConfig, Tpc, UploadConfig, Uploads};

use xfer_common::memory::{MAX_MEMORY_BUDGET, MIN_MEMORY_BUDGET};
use xfer_common::path_share::PathShare;
use xfer_common::resource::{StreamOptions, DEFAULT_BLOCK_SIZE};
use xfer_common::{DigestCache, DigestCacheConfig, FaultInjection, MemoryBudget};
use xfer_core::checksum::ChecksumAlgorithm;

use crate::config::{ConfigError, Http2Config, TcpConfig};

use super::tcp_resume::TcpResumeConfig;
use super::ServerError;

/// Default [`ServerConfig::max_early_data_size`]: 16 KiB.
pub const DEFAULT_MAX_EARLY_DATA: u32 = 16 << 10;

/// Settings of an [`super::HttpServer`]. All fields but `root` have a [`Default`].
///
/// Some describe the request core rather than HTTP (root, streaming and memory budget, digests,
/// access, uploads, third-party copy, mirrors, checksums on send, the test fault):
/// [`ServerConfig::service_config`] turns them into the core's configuration. A server handed a
/// core ([`super::HttpServer::bind_with`]) reads only the rest.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Directory served (written only by uploads the access rules allow). Files outside it
    /// are never read, whatever the request path or symlinks say. Must exist.
    pub root: PathBuf,
    /// Address to listen on. Default `[::]:8443` (all interfaces, IPv6 and, where the
    /// system maps them, IPv4). Port 0 picks a free port, see [`super::HttpServer::local_addr`].
    pub listen: SocketAddr,
    /// TLS: `Some` serves HTTPS, offering ALPN `h2` then `http/1.1` (the server sets the ALPN
    /// list itself, whatever the given config holds). `None` serves plain TCP, where each
    /// connection is HTTP/1.1 or HTTP/2 with prior knowledge (h2c), told apart by its first
    /// 24 bytes. Build one with [`xfer_common::tls::server_config`]. Default `None`.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Socket options; default [`TcpConfig::server_default`] (32 MiB send buffer, bbr).
    pub tcp: TcpConfig,
    /// TLS 1.3 early data (0-RTT) a client resuming a session may send before the handshake
    /// completes, in bytes; 0 turns early data off. Default 16 KiB: a few request heads, or
    /// the HTTP/2 preface and a request, while bounding what an unconfirmed client makes the
    /// server hold. Reads in early data are answered at once (before the client's `Finished`);
    /// other requests get `425 Too Early` until the handshake completes (RFC 8470). Tickets
    /// are single-use, so early data cannot be replayed to the same server. Set it to 0 when
    /// clients authenticate with certificates (`xfer serve --client-ca` does).
    pub max_early_data_size: u32,
    /// HTTP/2 settings; the server applies frame size, windows, adaptive window, concurrent
    /// streams cap and send buffer. Default [`Http2Config::default`].
    pub http2: Http2Config,
    /// Time a client has to finish the TLS handshake, send the h2c preface, or send an HTTP/1.1
    /// request head (also between keep-alive requests). Default 30 s. Shorter frees slots
    /// held by slow or silent clients sooner; too short drops clients on very slow links.
    pub header_read_timeout: Duration,
    /// A connection on which nothing was read or written for this long is closed. Default
    /// 120 s. Covers idle HTTP/2 connections and clients that stopped reading a response.
    pub idle_timeout: Duration,
    /// Connections served at once. Default 1024. When full, a connection idle for 2 s is
    /// closed to make room; when none is, a newcomer gets 503 with `Retry-After`.
    /// Each costs up to a socket send buffer (32 MiB by default, mostly untouched unless the
    /// peer is slow) and `(1 + read_ahead) × read_block_size` per active response.
    pub max_connections: usize,
    /// Connections served at once from one client address. Default 128 (a tree download
    /// runs up to 64 HTTP/1.1 connections). One host cannot take every slot; over it a
    /// client is answered 503 with `Retry-After`.
    pub max_connections_per_address: usize,
    /// Bytes read from disk (or generated) per block and sent per body frame. Default 256 KiB.
    /// Larger means fewer thread-pool hops and frames; more memory per response in flight.
    pub read_block_size: usize,
    /// Blocks read ahead of the one being sent. Default 1 (one read in flight while the
    /// previous block is written). Raise for slow or networked storage.
    pub read_ahead: usize,
    /// Bytes of outgoing blocks (read-ahead, HTTP/2 and HTTP/1.1 send queues, and QUIC's
    /// unacknowledged data when `xfer serve` shares the request core with it) held at once by
    /// the whole process. Default [`xfer_common::DEFAULT_MEMORY_BUDGET`] (512 MiB), at least
    /// two blocks. A response whose next block does not fit waits for room. One connection
    /// holds at most 1/8 of it and one client address 1/4, and 1/8 is kept for connections
    /// holding under 1 MiB, so one client cannot make others wait. Clones of the config share
    /// one budget; see `docs/security.md` ("Memory", "Fair shares") for the process's bound.
    pub memory_budget: MemoryBudget,
    /// A response that sends nothing for this long while it has data to send (the client
    /// does not open its flow-control window, does not read, or the budget has no room) is
    /// ended: its HTTP/2 stream is reset (`RST_STREAM`), its HTTP/1.1 connection closed, and
    /// its blocks return to the budget. Default 60 s; 1 s to 1 h. Progress is counted in
    /// blocks handed to the protocol, so a client slower than `read_block_size` per stall
    /// timeout (about 4 KiB/s with the defaults) is cut off too.
    pub stall_timeout: Duration,
    /// Compute whole-resource SHA-256 in the background and send it as `Repr-Digest` once
    /// known. Default on. Hashing reads the whole file once more, competing with transfers
    /// for disk and one core; see [`ServerConfig::digest_cache`] for limits.
    pub repr_digest: bool,
    /// Limits of the background hashing behind `Repr-Digest`.
    pub digest_cache: DigestCacheConfig,
    /// Time in-flight responses get to finish after shutdown is requested. Default 30 s.
    pub shutdown_grace: Duration,
    /// **Test only.** Corrupt one byte of some responses after their digest was computed, to
    /// exercise clients' verification. Default `None`; never set in production.
    pub dangerous_fault: Option<Arc<FaultInjection>>,
    /// Who may read and write what (tokens, client certificates). Default: anonymous reads,
    /// no writes. Part of the request core, which `xfer serve` shares with the QUIC server.
    pub access: Arc<AccessControl>,
    /// Accept uploads (`PUT`). Default off.
    pub uploads: Option<UploadConfig>,
    /// Parallel uploads in progress; part of the request core, as `access` is.
    pub upload_state: Uploads,
    /// Checksums computed while a whole file is sent, for `Want-Digest` / `Want-Repr-Digest`
    /// asked later (FTS checks adler32 after every copy). Default adler32; empty turns it off.
    pub checksums_on_send: Vec<ChecksumAlgorithm>,
    /// HTTP third-party copy (`COPY` with `Source` or `Destination`): the runner that moves
    /// the bytes, and its limits. Default off; `xfer serve` supplies one over xfer's client.
    pub tpc: Option<Tpc>,
    /// Base URLs of mirrors that hold the same tree: each file's answer names its copy there
    /// (`Link: <base/path>; rel=duplicate`, RFC 6249), which clients may fetch from as well.
    /// Default none.
    pub mirrors: Vec<String>,
    /// TCP resume: start a returning peer's next connection from half its measured
    /// bandwidth-delay product instead of 10 segments ([`super::tcp_resume`]). Default off:
    /// it loads a BPF program into the process's cgroup, which an operator must ask for
    /// (`--mechanism tcp-resume=on`); it needs root, and without it the server logs why and
    /// starts every connection as usual.
    pub tcp_resume: TcpResumeConfig,
    /// Where TCP resume publishes each client's measured path for the process's other
    /// senders (`xfer serve` hands the QUIC server the same one: its Careful Resume then
    /// starts a client's first QUIC connection from what HTTP measured). Default: shared with
    /// nothing.
    pub path_share: PathShare,
}

impl Default for ServerConfig {
    /// Serves the current directory (`.`); set `root` to serve anything else.
    fn default() -> Self {
        Self::new(".")
    }
}

impl ServerConfig {
    /// Defaults for everything but `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            listen: SocketAddr::from((Ipv6Addr::UNSPECIFIED, 8443)),
            tls: None,
            tcp: TcpConfig::server_default(),
            max_early_data_size: DEFAULT_MAX_EARLY_DATA,
            http2: Http2Config::default(),
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            max_connections: 1024,
            max_connections_per_address: 128,
            read_block_size: DEFAULT_BLOCK_SIZE,
            read_ahead: 1,
            memory_budget: MemoryBudget::default(),
            stall_timeout: Duration::from_secs(60),
            repr_digest: true,
            digest_cache: DigestCacheConfig::default(),
            shutdown_grace: Duration::from_secs(30),
            dangerous_fault: None,
            access: Arc::new(AccessControl::anonymous(true)),
            uploads: None,
            upload_state: Uploads::default(),
            path_share: PathShare::default(),
            checksums_on_send: vec![ChecksumAlgorithm::Adler32],
            tpc: None,
            mirrors: Vec::new(),
            tcp_resume: TcpResumeConfig::default(),
        }
    }

    /// Reject values the server cannot work with, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.tcp.validate()?;
        self.http2.validate()?;
        self.tcp_resume.validate()?;
        let secs = |d: Duration| format!("{d:?}");
        if !(Duration::from_millis(100)..=Duration::from_secs(3600))
            .contains(&self.header_read_timeout)
        {
            return Err(ConfigError::new(
                "header_read_timeout",
                secs(self.header_read_timeout),
                "100 ms to 1 h",
            ));
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(86_400)).contains(&self.idle_timeout)
        {
            return Err(ConfigError::new(
                "idle_timeout",
                secs(self.idle_timeout),
                "100 ms to 24 h",
            ));
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            return Err(ConfigError::new(
                "max_connections",
                self.max_connections,
                "1 to 1000000",
            ));
        }
        if !(1..=1_000_000).contains(&self.max_connections_per_address) {
            return Err(ConfigError::new(
                "max_connections_per_address",
                self.max_connections_per_address,
                "1 to 1000000",
            ));
        }
        if !(4096..=(64 << 20)).contains(&self.read_block_size) {
            return Err(ConfigError::new(
                "read_block_size",
                self.read_block_size,
                "4 KiB to 64 MiB",
            ));
        }
        if self.read_ahead > 64 {
            return Err(ConfigError::new("read_ahead", self.read_ahead, "0 to 64"));
        }
        let budget = self.memory_budget.limit();
        let min_budget = MIN_MEMORY_BUDGET.max(2 * self.read_block_size as u64);
        if !(min_budget..=MAX_MEMORY_BUDGET).contains(&budget) {
            return Err(ConfigError::new(
                "memory_budget",
                format!("{budget} bytes (read blocks of {})", self.read_block_size),
                "1 MiB and at least two read blocks, to 1 TiB",
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.stall_timeout) {
            return Err(ConfigError::new(
                "stall_timeout",
                secs(self.stall_timeout),
                "1 s to 1 h",
            ));
        }
        if self.shutdown_grace > Duration::from_secs(3600) {
            return Err(ConfigError::new(
                "shutdown_grace",
                secs(self.shutdown_grace),
                "at most 1 h",
            ));
        }
        if self.max_early_data_size > (1 << 20) {
            return Err(ConfigError::new(
                "max_early_data_size",
                self.max_early_data_size,
                "0 (off) to 1 MiB",
            ));
        }
        if let Some(tpc) = &self.tpc {
            tpc.config
                .validate()
                .map_err(|e| ConfigError::new(e.field, e.value, e.allowed))?;
        }
        if let Err(e) = self.digest_cache.validate() {
            return Err(ConfigError::new(
                "digest_cache",
                format!("{} = {}", e.field, e.value),
                e.allowed,
            ));
        }
        Ok(())
    }

    /// The request core these settings describe, for [`super::HttpServer::bind`] or for a
    /// process that shares one core among its codecs (`xfer serve`): validated, with the root
    /// made canonical and a digest cache of its own. `tpc` and `mirrors` are HTTP's answers;
    /// a codec that cannot express them shares them unused.
    pub fn service_config(&self) -> Result<ServiceConfig, ServerError> {
        self.validate()?;
        let root = self
            .root
            .canonicalize()
            .and_then(|r| {
                if r.is_dir() {
                    Ok(r)
                } else {
                    Err(std::io::Error::other("not a directory"))
                }
            })
            .map_err(|source| ServerError::Root {
                root: self.root.clone(),
                source,
            })?;
        let digests = DigestCache::new(self.digest_cache.clone()).map_err(|e| {
            ConfigError::new(
                "digest_cache",
                format!("{} = {}", e.field, e.value),
                e.allowed,
            )
        })?;
        Ok(ServiceConfig {
            root,
            digests,
            repr_digest: self.repr_digest,
            stream: self.stream_options(),
            dangerous_fault: self.dangerous_fault.clone(),
            access: self.access.clone(),
            uploads: self.uploads.clone(),
            upload_state: self.upload_state.clone(),
            checksums: ChecksumCache::default(),
            checksums_on_send: self.checksums_on_send.clone(),
            tpc: self.tpc.clone(),
            mirrors: self.mirrors.clone(),
        })
    }

    /// How responses read the resource.
    pub fn stream_options(&self) -> StreamOptions {
        StreamOptions {
            block_size: self.read_block_size,
            read_ahead: self.read_ahead,
            budget: self.memory_budget.clone(),
        }
    }
}
