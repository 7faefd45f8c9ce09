//! The server: serves files under a root and the synthetic resource over `xfer/1`.
//!
//! This is a codec over the request core (`xfer_service`), like the HTTP server: it decodes
//! `xfer/1` into a core request, encodes the plan into a [`ResponseHead`], and pumps the core's
//! body stream with `write_chunk` (which hands the `Bytes` to quinn without a copy), ending
//! with the binary digest trailer. What it owns: the accept loops, stream limits, the request
//! timeout, the write-stall watchdog (a stream whose client takes nothing for `stall_timeout`
//! is reset), stream aborts and draining on shutdown. Which connections are served is
//! decided by the same admission as HTTP's (`xfer_service::admission`: a total cap, a
//! per-address cap, idle connections closed to make room); a refused handshake is answered
//! with CONNECTION_REFUSED before any connection state exists. One task per connection
//! accepts streams; one task per stream reads the request and answers it.
//!
//! LIST answers with the core's manifest of a directory, streamed to FIN.
//!
//! What it does not do: WebDAV, third-party copy, compression.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn::{Connection, Endpoint, RecvStream, SendStream, WriteError};
use tokio::sync::watch;
use tokio::task::JoinSet;
use xfer_common::path_share::PathShare;
use xfer_service::admission::{self, Admission, Admit, Ticket};
use xfer_service::upload::{self, UploadBody, UploadHead};
use xfer_service::{Body, BodyEvent, ResponsePlan, Service, ServiceConfig, ServiceSource};

use crate::resume::{CarefulResume, PathCache, PerPeerConfig};
use crate::socket::{bind_udp, wrap_for_quinn, SocketBuffers};
use crate::tuning::{ConfigError, QuicTuning};
use crate::wire::{
    encode_trailer, fit_message, status, ErrorCode, Method, Request, ResponseHead, ALPN,
    MAX_REQUEST_LEN,
};

/// How long a client may take to send its whole request once it opened a stream.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may stay silent before the server drops it. Clients send
/// keep-alives, so this only reaps vanished peers.
const SERVER_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `serve` waits, once every connection is closed, for the peers to learn it.
const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// Server settings.
#[derive(Debug, Clone)]
pub struct QuicServerConfig {
    /// The request core this server is the `xfer/1` codec of: shared with the HTTP server
    /// (`xfer serve`), or built from a [`ServiceConfig`] when the server binds. Its root, digests,
    /// checksums, uploads, access rules and streaming (block size, read-ahead, memory budget)
    /// are the server's. `xfer/1` has no `COPY` and no field for mirrors, so a core's
    /// third-party copy and mirrors are HTTP's alone.
    pub service: ServiceSource,
    /// UDP address to listen on (port 0 picks a free one; see [`QuicServer::local_addr`]).
    pub listen: SocketAddr,
    /// Certificate and key; the server sets ALPN to `xfer/1` itself, and early data as
    /// [`QuicServerConfig::early_data`] says.
    pub tls: Arc<rustls::ServerConfig>,
    /// Windows, congestion control (the server is the sender of a download, so its controller
    /// is the one that matters), MTU, UDP buffers.
    pub tuning: QuicTuning,
    /// Connections served at once. When full, a connection that moved no stream data for
    /// 2 s is closed to make room; when none is idle, further handshakes are refused (the
    /// client sees a retryable connect error). Default 1024, as HTTP's. Allowed 1 to 100000.
    pub max_connections: usize,
    /// Connections served at once from one client address; beyond it handshakes are refused.
    /// Default 128, as HTTP's. Allowed 1 to 100000.
    pub max_connections_per_address: usize,
    /// On shutdown, how long requests in flight may take to finish before their connections
    /// are closed. New connections and new requests are refused meanwhile. Default 30 s, as
    /// HTTP's. Allowed up to 1 h.
    pub shutdown_grace: Duration,
    /// Key of the stateless resets this server sends for connections it does not know.
    /// Derived from a secret that survives restarts ([`reset_key_from_secret`] of the TLS
    /// key, as `xfer serve` does), a restarted server tells the clients of the one before at
    /// once that their connections are gone, and they reconnect within about a second
    /// instead of waiting out their idle timeout. `None`: a random key per start.
    pub stateless_reset_key: Option<[u8; 32]>,
    /// Bidirectional streams (requests) a client may have open at once per connection.
    /// Default 64: well above the client's default of 4 and bounds per-connection memory to
    /// about 64 × (1 + read-ahead) × 256 KiB. Allowed 1 to 10000.
    pub max_streams_per_connection: u32,
    /// A response stream whose client takes no bytes for this long (its flow-control window
    /// stays shut while the connection lives on keep-alives) is reset with
    /// [`ErrorCode::Stalled`], which frees its send buffer and read-ahead. Default 60 s:
    /// far above any pause of a reading client on a 300 ms path, and it caps how long a
    /// client that stops reading holds up to a stream window of server memory. Allowed 1 s
    /// to 1 h.
    pub stall_timeout: Duration,
    /// Take reads (GET, STAT, LIST) that a returning client sends as 0-RTT early data and
    /// answer them before its handshake completes, saving the client a round trip; uploads
    /// still wait for the handshake. Session tickets are single-use (the server's session
    /// cache), so early data cannot be replayed to this server. Default on; turn it off when
    /// clients authenticate with certificates, whose identity is known only once the
    /// handshake is complete.
    pub early_data: bool,
    /// Start each connection from the path its peer's last connection measured (RFC 9959
    /// Careful Resume; the server is the sender of downloads). Default on.
    pub careful_resume: CarefulResume,
    /// Paths the process's other senders measured (`xfer serve`: the HTTP server's TCP
    /// resume), saved for Careful Resume as if a QUIC connection had measured them. Default:
    /// shared with nothing.
    pub path_share: PathShare,
}

impl QuicServerConfig {
    /// A configuration with default limits and tuning.
    pub fn new(root: PathBuf, listen: SocketAddr, tls: Arc<rustls::ServerConfig>) -> Self {
        Self::with_service(ServiceConfig::new(root).into(), listen, tls)
    }

    /// Default limits and tuning, serving `service`.
    pub fn with_service(
        service: ServiceSource,
        listen: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
    ) -> Self {
        Self {
            service,
            listen,
            tls,
            tuning: QuicTuning::for_server(),
            max_connections: 1024,
            max_connections_per_address: 128,
            shutdown_grace: Duration::from_secs(30),
            stateless_reset_key: None,
            max_streams_per_connection: 64,
            stall_timeout: Duration::from_secs(60),
            early_data: true,
            careful_resume: CarefulResume::default(),
            path_share: PathShare::default(),
        }
    }

    /// Reject values outside what the server supports, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.tuning.validate()?;
        self.careful_resume.validate()?;
        xfer_service::check_stream_options(&self.service.config().stream)?;
        if !(1..=100_000).contains(&self.max_connections) {
            return Err(ConfigError::new(
                "max_connections",
                self.max_connections,
                "1 to 100000",
            ));
        }
        if !(1..=100_000).contains(&self.max_connections_per_address) {
            return Err(ConfigError::new(
                "max_connections_per_address",
                self.max_connections_per_address,
                "1 to 100000",
            ));
        }
        if self.shutdown_grace > Duration::from_secs(3600) {
            return Err(ConfigError::new(
                "shutdown_grace",
                format!("{:?}", self.shutdown_grace),
                "up to 1 h",
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.stall_timeout) {
            return Err(ConfigError::new(
                "stall_timeout",
                format!("{:?}", self.stall_timeout),
                "1 s to 1 h",
            ));
        }
        if !(1..=10_000).contains(&self.max_streams_per_connection) {
            return Err(ConfigError::new(
                "max_streams_per_connection",
                self.max_streams_per_connection,
                "1 to 10000",
            ));
        }
        Ok(())
    }
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot use the path cache")]
    PathCache(#[source] io::Error),
    #[error("tls configuration unusable for quic: {0}")]
    Tls(String),
    #[error("cannot listen on udp {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// A bound server, ready to [`serve`](QuicServer::serve).
pub struct QuicServer {
    endpoint: Endpoint,
    local_addr: SocketAddr,
    buffers: SocketBuffers,
    state: Arc<State>,
}

struct State {
    early_data: bool,
    max_connections: usize,
    max_connections_per_address: usize,
    shutdown_grace: Duration,
    stall_timeout: Duration,
    service: Arc<Service>,
    resume: Option<PerPeerConfig>,
}

impl QuicServer {
    /// Validate the configuration, bind the UDP socket with tuned buffers and start the
    /// endpoint. Connections are accepted once [`QuicServer::serve`] runs.
    pub async fn bind(config: QuicServerConfig) -> Result<Self, ServerError> {
        config.validate()?;
        let mut tls = (*config.tls).clone();
        tls.alpn_protocols = vec![ALPN.to_vec()];
        // QUIC allows only 0 or u32::MAX.
        tls.max_early_data_size = if config.early_data { u32::MAX } else { 0 };
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls))
            .map_err(|e| ServerError::Tls(e.to_string()))?;
        // Clients announce what their route takes; MTU discovery stops at the smaller.
        let largest = config.tuning.largest_udp_payload();
        let transport = config.tuning.transport_config(
            SERVER_IDLE_TIMEOUT,
            config.max_streams_per_connection,
            None,
            largest,
        )?;
        let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        server_config.transport_config(Arc::new(transport));
        let resume = match config.careful_resume.enabled {
            true => Some(PerPeerConfig::new(
                config.careful_resume.clone(),
                {
                    let cache = config
                        .careful_resume
                        .open_cache()
                        .map_err(ServerError::PathCache)?;
                    cache.learn_from(&config.path_share);
                    cache
                },
                server_config.clone(),
                config.tuning.clone(),
                SERVER_IDLE_TIMEOUT,
                config.max_streams_per_connection,
                largest,
            )),
            false => None,
        };
        let bind_err = |source| ServerError::Bind {
            addr: config.listen,
            source,
        };
        let (socket, buffers) = bind_udp(config.listen, &config.tuning).map_err(bind_err)?;
        let runtime = quinn::default_runtime()
            .ok_or_else(|| bind_err(io::Error::other("no async runtime for quinn")))?;
        let (socket, offload) = wrap_for_quinn(socket, runtime.as_ref()).map_err(bind_err)?;
        let mut endpoint_config = config.tuning.endpoint_config(largest)?;
        if let Some(key) = config.stateless_reset_key {
            endpoint_config.reset_key(Arc::new(ResetKey(key)));
            // quinn answers a packet for an unknown connection only when its connection ID
            // validates, which for its (default) hashed IDs needs the same hash key as the
            // process that issued them.
            let tag = hmac_sha256(&key, b"connection id hash key");
            let mut cid_key = [0u8; 8];
            cid_key.copy_from_slice(&tag[..8]);
            let cid_key = u64::from_le_bytes(cid_key);
            endpoint_config.cid_generator(move || {
                Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
            });
        }
        let endpoint = Endpoint::new_with_abstract_socket(
            endpoint_config,
            Some(server_config),
            socket,
            runtime,
        )
        .map_err(bind_err)?;
        let local_addr = endpoint.local_addr().map_err(bind_err)?;
        let service = config.service.into_service();
        tracing::info!(addr = %local_addr, root = %service.config().root.display(), gso_segments = offload.gso_segments, gro_segments = offload.gro_segments, "quic server bound");
        Ok(Self {
            endpoint,
            local_addr,
            buffers,
            state: Arc::new(State {
                early_data: config.early_data,
                max_connections: config.max_connections,
                max_connections_per_address: config.max_connections_per_address,
                shutdown_grace: config.shutdown_grace,
                stall_timeout: config.stall_timeout,
                resume,
                service,
            }),
        })
    }

    /// The bound address (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// UDP socket buffer sizes the kernel granted.
    pub fn socket_buffers(&self) -> SocketBuffers {
        self.buffers
    }

    /// Saved path state and Careful Resume counters; `None` when Careful Resume is off.
    pub fn path_cache(&self) -> Option<PathCache> {
        self.state.resume.as_ref().map(|r| r.cache().clone())
    }

    /// Accept connections until `shutdown` completes, then drain: refuse new connections
    /// and new requests, let requests in flight finish for up to `shutdown_grace`, close each
    /// connection once its last request is done (code [`ErrorCode::ServerBusy`]), and close
    /// what remains when the grace period is over.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send) {
        tokio::pin!(shutdown);
        let _saver = self
            .state
            .resume
            .as_ref()
            .and_then(crate::resume::spawn_saver);
        let admission = Admission::new_quic(
            self.state.max_connections,
            self.state.max_connections_per_address,
        );
        let (drain_tx, drain) = watch::channel(false);
        let mut connections = JoinSet::new();
        let mut sampler = tokio::time::interval(admission::IDLE_FOR_EVICTION / 4);
        sampler.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut refused = 0u64;
        let mut last_warning: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                incoming = self.endpoint.accept() => {
                    let Some(incoming) = incoming else { break };
                    let peer = incoming.remote_address();
                    let progress = Arc::new(AtomicU64::new(0));
                    match admission.admit(peer.ip(), Arc::clone(&progress)) {
                        Admit::Serve(ticket) => {
                            let slot = Slot { ticket, progress, drain: drain.clone() };
                            connections.spawn(handle_connection(incoming, self.state.clone(), slot));
                        }
                        Admit::Refuse(why) => {
                            refused += 1;
                            // At most one warning per second: a flood must not become a log flood.
                            if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                                tracing::warn!(%peer, max = self.state.max_connections, per_address = self.state.max_connections_per_address, refused, why, "refusing new quic connections");
                                last_warning = Some(Instant::now());
                            }
                            // Before the handshake: the refusal costs one datagram and no state.
                            incoming.refuse();
                        }
                    }
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                _ = sampler.tick() => admission.sample(),
            }
        }
        let _ = drain_tx.send(true);
        let grace = self.state.shutdown_grace;
        if !connections.is_empty() {
            tracing::info!(
                connections = connections.len(),
                ?grace,
                "quic: shutting down; refusing new connections and requests, letting requests in flight finish"
            );
        }
        let drained = tokio::time::timeout(grace, async {
            loop {
                tokio::select! {
                    Some(incoming) = self.endpoint.accept() => incoming.refuse(),
                    ended = connections.join_next() => if ended.is_none() { break },
                }
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                connections = connections.len(),
                ?grace,
                "quic: shutdown grace period over; closing connections with requests still in flight"
            );
        }
        self.endpoint
            .close(ErrorCode::ServerBusy.varint(), b"server shutting down");
        connections.abort_all();
        let _ = tokio::time::timeout(CLOSE_LINGER, self.endpoint.wait_idle()).await;
        if let Some(r) = &self.state.resume {
            if let Some(file) = &r.knobs().file {
                crate::resume::save_cache(r.cache(), file);
            }
        }
    }
}

/// A stateless-reset key that is the same in every process started with the same secret.
struct ResetKey([u8; 32]);

impl quinn_proto::crypto::HmacKey for ResetKey {
    fn sign(&self, data: &[u8], signature_out: &mut [u8]) {
        let tag = hmac_sha256(&self.0, data);
        let n = signature_out.len().min(tag.len());
        signature_out[..n].copy_from_slice(&tag[..n]);
    }

    fn signature_len(&self) -> usize {
        32
    }

    fn verify(
        &self,
        data: &[u8],
        signature: &[u8],
    ) -> Result<(), quinn_proto::crypto::CryptoError> {
        let tag = hmac_sha256(&self.0, data);
        // Constant time: the tag is a secret until it matches.
        let differ = tag.len() != signature.len()
            || tag
                .iter()
                .zip(signature)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                != 0;
        if differ {
            Err(quinn_proto::crypto::CryptoError)
        } else {
            Ok(())
        }
    }
}

/// HMAC-SHA-256 (RFC 2104).
fn hmac_sha256(key: &[u8; 32], data: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(data)
        .finalize();
    Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// A [`QuicServerConfig::stateless_reset_key`] derived from `secret` (the TLS private key's
/// file, say): the same secret gives the same key after a restart, and the key reveals
/// nothing of the secret.
pub fn reset_key_from_secret(secret: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let label: [u8; 32] = Sha256::digest(b"xfer/1 quic stateless reset key").into();
    hmac_sha256(&label, secret)
}

/// What a connection holds from the server: its admission slot, the count of stream frames
/// it moved (the admission's measure of idleness), and the shutdown signal.
struct Slot {
    ticket: Ticket,
    progress: Arc<AtomicU64>,
    drain: watch::Receiver<bool>,
}

async fn handle_connection(incoming: quinn::Incoming, state: Arc<State>, slot: Slot) {
    let peer = incoming.remote_address();
    let _open = xfer_common::metrics::global().open_connection("quic");
    // Counted while it is open and acknowledged: concurrent connections from one client split
    // a jump.
    let open = state
        .resume
        .as_ref()
        .map(|r| (r, r.cache().open(crate::resume::PathKey::of(peer))));
    let accepted = match open.as_ref().map(|(r, o)| r.for_peer(peer, o.liveness())) {
        Some(Ok(config)) => incoming.accept_with(config),
        Some(Err(e)) => {
            tracing::warn!(%peer, error = %e, "careful resume unavailable for this connection");
            incoming.accept()
        }
        None => incoming.accept(),
    };
    let connecting = match accepted {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "quic handshake failed");
            return;
        }
    };
    // `Some(confirmed)` once the handshake is complete. With early data on, requests are
    // answered from the first flight (0.5-RTT); uploads wait for it.
    let (done_tx, done) = tokio::sync::watch::channel(None);
    let early = if state.early_data {
        connecting.into_0rtt()
    } else {
        Err(connecting)
    };
    let connection = match early {
        Ok((connection, accepted)) => {
            tokio::spawn(async move {
                let _ = done_tx.send(Some(accepted.await));
            });
            connection
        }
        Err(connecting) => match connecting.await {
            Ok(c) => {
                let _ = done_tx.send(Some(true));
                c
            }
            Err(e) => {
                tracing::debug!(%peer, error = %e, "quic handshake failed");
                return;
            }
        },
    };
    // Verified against the client CA during the handshake, when the server asks for one
    // (early data is then off, so the handshake is complete here).
    let client_certificate = connection
        .peer_identity()
        .and_then(|id| {
            id.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|chain| chain.first().map(|c| Arc::new(c.as_ref().to_vec())));
    tracing::debug!(%peer, client_certificate = client_certificate.is_some(), "quic connection accepted");
    serve_streams(&connection, &state, peer, client_certificate, done, slot).await;
    let s = connection.stats();
    // What a slow download's sender did: datagram size reached, losses, and how many
    // datagrams each send call carried (above 1 only with GSO). quinn counts received
    // datagrams per packet, not per system call: no GRO figure here.
    tracing::debug!(
        %peer,
        reason = ?connection.close_reason(),
        mtu = s.path.current_mtu,
        black_holes = s.path.black_holes_detected,
        sent_packets = s.path.sent_packets,
        lost_packets = s.path.lost_packets,
        congestion_events = s.path.congestion_events,
        datagrams_per_send = s.udp_tx.datagrams as f64 / s.udp_tx.ios.max(1) as f64,
        "quic connection ended"
    );
}

/// Accept and answer `connection`'s requests until it ends. It is closed by the server when
/// the admission asks its slot back while no request runs (it was idle and the server is
/// full), or on shutdown once its requests in flight are done; requests that arrive after
/// either are reset with [`ErrorCode::ServerBusy`].
async fn serve_streams(
    connection: &Connection,
    state: &Arc<State>,
    peer: SocketAddr,
    client_certificate: Option<Arc<Vec<u8>>>,
    done: watch::Receiver<Option<bool>>,
    slot: Slot,
) {
    let Slot {
        ticket,
        progress,
        mut drain,
    } = slot;
    // The blocks of this connection's streams count against its share of the memory budget
    // (shared with HTTP by `xfer serve`) and its address's, as HTTP's do.
    let account = state.service.config().stream.budget.account(peer.ip());
    let mut streams = JoinSet::new();
    let mut closing: Option<&'static [u8]> = None;
    let mut sampler = tokio::time::interval(admission::IDLE_FOR_EVICTION / 4);
    sampler.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if let (Some(reason), true) = (closing, streams.is_empty()) {
            connection.close(ErrorCode::ServerBusy.varint(), reason);
            return;
        }
        tokio::select! {
            accepted = connection.accept_bi() => match accepted {
                Ok((mut send, mut recv)) if closing.is_some() => {
                    abort_stream(&mut send, &mut recv, ErrorCode::ServerBusy, peer);
                }
                Ok((send, recv)) => {
                    let state = state.clone();
                    let cert = client_certificate.clone();
                    let done = done.clone();
                    streams.spawn(account.clone().scope(async move {
                        handle_stream(send, recv, &state, peer, cert, done).await
                    }));
                }
                Err(e) => {
                    tracing::debug!(%peer, reason = %e, "quic connection closed");
                    return;
                }
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
            _ = drain.wait_for(|d| *d), if closing.is_none() => {
                closing = Some(b"server shutting down");
            }
            _ = ticket.evict.cancelled(), if closing.is_none() => {
                tracing::debug!(%peer, "closing an idle quic connection to make room");
                closing = Some(b"idle connection closed to make room");
            }
            _ = sampler.tick() => {
                // Stream frames, not packets: keep-alives do not make a connection busy.
                let s = connection.stats();
                progress.store(s.frame_tx.stream + s.frame_rx.stream, Ordering::Relaxed);
            }
        }
    }
}

async fn handle_stream(
    mut send: SendStream,
    mut recv: RecvStream,
    state: &State,
    peer: SocketAddr,
    client_certificate: Option<Arc<Vec<u8>>>,
    mut handshake: tokio::sync::watch::Receiver<Option<bool>>,
) {
    let read = tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut recv)).await;
    let (request, leftover) = match read {
        Ok(Ok(r)) => r,
        Ok(Err(RequestError::TooLong)) => {
            return abort_stream(&mut send, &mut recv, ErrorCode::RequestTooLarge, peer)
        }
        Ok(Err(RequestError::Read(e))) => {
            tracing::debug!(%peer, error = %e, "request stream failed");
            return;
        }
        Ok(Err(RequestError::Wire(e))) => {
            tracing::debug!(%peer, error = %e, "malformed request");
            return abort_stream(&mut send, &mut recv, ErrorCode::for_wire_error(&e), peer);
        }
        Err(_) => return abort_stream(&mut send, &mut recv, ErrorCode::RequestTimeout, peer),
    };
    if request.method == Method::Put {
        // An upload changes state: never act on it before the handshake proves the client
        // is live (early data could be a replay).
        if handshake.wait_for(Option::is_some).await.is_err() {
            return;
        }
    }
    let mut body = StreamBody {
        leftover: Some(leftover).filter(|b| !b.is_empty()),
        recv,
    };
    let caller = Caller {
        peer,
        client_certificate,
    };
    if let Err(e) = respond(&mut send, &request, &mut body, state, &caller).await {
        match e {
            SendError::Write(WriteError::Stopped(code)) => {
                tracing::debug!(%peer, path = %request.path, code = %code, "client stopped the stream");
            }
            SendError::Write(e) => {
                tracing::debug!(%peer, path = %request.path, error = %e, "sending failed");
            }
            SendError::Read(e) => {
                tracing::warn!(%peer, path = %request.path, error = %e, "read failed mid-body; resetting stream");
                let _ = send.reset(ErrorCode::InternalError.varint());
            }
            SendError::Stalled(after) => {
                tracing::info!(%peer, path = %request.path, ?after, "client took nothing for the stall timeout; resetting stream");
                xfer_common::metrics::global().count_stall_reset("quic");
                let _ = send.reset(ErrorCode::Stalled.varint());
            }
        }
    }
}

enum RequestError {
    TooLong,
    Read(quinn::ReadError),
    Wire(crate::wire::WireError),
}

/// Read a request: everything up to FIN, or for a PUT the request alone, the body's first
/// bytes coming back as the leftover.
async fn read_request(recv: &mut RecvStream) -> Result<(Request, Bytes), RequestError> {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        // Only a PUT stops early; anything else, malformed or not, is judged whole at FIN,
        // so an oversized request is "too large" whatever its first bytes say.
        if let Ok(Some((req, used))) = Request::decode_prefix(&buf) {
            if req.method == Method::Put {
                return Ok((req, Bytes::copy_from_slice(&buf[used..])));
            }
        }
        match recv.read_chunk(MAX_REQUEST_LEN, true).await {
            Ok(Some(chunk)) => {
                buf.extend_from_slice(&chunk.bytes);
                if buf.len() > MAX_REQUEST_LEN
                    && Request::decode_prefix(&buf)
                        .ok()
                        .flatten()
                        .is_none_or(|(r, _)| r.method != Method::Put)
                {
                    return Err(RequestError::TooLong);
                }
            }
            Ok(None) => {
                return Request::decode(&buf)
                    .map(|r| (r, Bytes::new()))
                    .map_err(RequestError::Wire)
            }
            Err(e) => return Err(RequestError::Read(e)),
        }
    }
}

/// A PUT's body: what followed the request in its first reads, then the stream to FIN. A
/// client that stops sending for [`BODY_STALL`] fails the upload instead of holding it.
struct StreamBody {
    leftover: Option<Bytes>,
    recv: RecvStream,
}

/// Longest pause in an upload body.
const BODY_STALL: Duration = Duration::from_secs(30);

impl UploadBody for StreamBody {
    fn next_chunk(
        &mut self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<io::Result<Bytes>>> + Send + '_>>
    {
        Box::pin(async move {
            if let Some(b) = self.leftover.take() {
                return Some(Ok(b));
            }
            match tokio::time::timeout(BODY_STALL, self.recv.read_chunk(1 << 20, true)).await {
                Ok(Ok(Some(chunk))) => Some(Ok(chunk.bytes)),
                Ok(Ok(None)) => None,
                Ok(Err(e)) => Some(Err(io::Error::other(e))),
                Err(_) => Some(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the upload body stalled",
                ))),
            }
        })
    }
}

/// Answer a request that cannot be served with an error code on both halves of its stream.
/// The connection stays up.
fn abort_stream(send: &mut SendStream, recv: &mut RecvStream, code: ErrorCode, peer: SocketAddr) {
    tracing::debug!(%peer, %code, "aborting request stream");
    let _ = recv.stop(code.varint());
    let _ = send.reset(code.varint());
}

enum SendError {
    Write(WriteError),
    Read(io::Error),
    /// No byte was taken for this long.
    Stalled(Duration),
}

impl From<WriteError> for SendError {
    fn from(e: WriteError) -> Self {
        Self::Write(e)
    }
}

async fn send_head(send: &mut SendStream, head: &ResponseHead) -> Result<(), SendError> {
    let bytes = match head.encode() {
        Ok(b) => b,
        Err(e) => {
            // Only an over-long server-side field (an odd ETag) gets here.
            tracing::warn!(error = %e, "cannot encode response head");
            ResponseHead::error(status::INTERNAL_ERROR, "response head not encodable")
                .encode()
                .map_err(|e| SendError::Read(io::Error::other(e.to_string())))?
        }
    };
    send.write_chunk(Bytes::from(bytes)).await?;
    Ok(())
}

/// Decode `xfer/1` into the core's request; `STAT` is the core's HEAD and the validator its
/// `If-Match` (a mismatch is 412).
/// Who sent a request.
struct Caller {
    peer: SocketAddr,
    client_certificate: Option<Arc<Vec<u8>>>,
}

fn decode(req: &Request, caller: &Caller) -> xfer_service::Request {
    let peer = caller.peer;
    let method = match req.method {
        Method::Get => xfer_service::Method::Get,
        Method::Stat => xfer_service::Method::Head,
        Method::List => xfer_service::Method::List,
        Method::Put => xfer_service::Method::Put,
    };
    let mut r = xfer_service::Request::new(method, "", peer, "quic").with_target(&req.path);
    r.exact_range = req.range.clone();
    r.if_match = req.validator.clone();
    r.want_content_digest = req.want_digest;
    if !req.checksums.is_empty() {
        // HTTP's `Want-Digest` with equal weights: the strongest asked for is answered.
        let names: Vec<&str> = req.checksums.iter().map(|a| a.rfc3230_name()).collect();
        r.want_digest = vec![names.join(", ")];
    }
    r.trailers_ok = true;
    r.credentials.bearer = req.token.clone().map(xfer_service::Secret::new);
    r.credentials.client_certificate = caller.client_certificate.clone();
    if let Some(u) = &req.upload {
        r.upload = UploadHead {
            content_length: None,
            content_range: match (&req.range, u.total) {
                (Some(range), Some(total)) => Some(format!(
                    "bytes {}-{}/{total}",
                    range.start,
                    range.end.saturating_sub(1)
                )),
                _ => None,
            },
            content_digest: u.content_sha256.map(|d| d.to_header_value()),
            repr_digest: u.repr_sha256.map(|d| d.to_header_value()),
            id: u.id.clone(),
            complete: u.complete,
            // xfer/1 has its own resumption (the parallel scheme); the HTTP draft's fields
            // have no encoding here.
            draft: Default::default(),
        };
        // The range is the upload chunk's, not a range to serve.
        r.exact_range = None;
    }
    r
}

fn encode_head(plan: &ResponsePlan) -> ResponseHead {
    // An upload's status: its size, and the ranges held in the message.
    let header = |name: &str| {
        plan.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    };
    if let Some(size) = header(upload::UPLOAD_SIZE).and_then(|v| v.parse().ok()) {
        return ResponseHead {
            status: plan.status,
            size,
            message: header(upload::UPLOAD_RECEIVED)
                .filter(|m| !m.is_empty())
                .map(fit_message),
            ..ResponseHead::default()
        };
    }
    // A redirect's location is all a client can act on; otherwise the refusal's detail.
    let message = plan.location.clone().or_else(|| plan.detail.clone());
    let Some(size) = plan.size else {
        return ResponseHead {
            status: plan.status,
            streamed: matches!(plan.body, Body::Listing(_)),
            message: message.map(fit_message),
            // An upload's answer: the digest of what was stored, as HTTP's `Repr-Digest`.
            repr_sha256: plan.repr_digest,
            ..ResponseHead::default()
        };
    };
    ResponseHead {
        status: plan.status,
        size,
        etag: plan.etag.clone(),
        last_modified: plan.last_modified.clone(),
        repr_sha256: plan.repr_digest,
        range: plan.range.clone(),
        trailer: plan.trailer,
        streamed: false,
        message: message.map(fit_message),
        checksums: plan.digest.clone().into_iter().collect(),
    }
}

async fn respond(
    send: &mut SendStream,
    req: &Request,
    body: &mut StreamBody,
    state: &State,
    caller: &Caller,
) -> Result<(), SendError> {
    let plan = state
        .service
        .respond_with_body(&decode(req, caller), body)
        .await;
    let stall = state.stall_timeout;
    send_head(send, &encode_head(&plan)).await?;
    // A refusal's text travels in the head's message; only streams and listings have a body.
    match plan.body {
        Body::Stream(mut body) => {
            // Waiting for the next block counts too: with the memory budget spent, a stream
            // that gets no room for the stall timeout ends like one whose client takes nothing.
            while let Some(event) = tokio::time::timeout(stall, body.next())
                .await
                .map_err(|_| SendError::Stalled(stall))?
            {
                match event.map_err(SendError::Read)? {
                    BodyEvent::Data(block) => write_watched(send, block, stall).await?,
                    BodyEvent::Trailer(digest) => {
                        let trailer = Bytes::copy_from_slice(&encode_trailer(&digest));
                        write_watched(send, trailer, stall).await?
                    }
                }
            }
        }
        Body::Listing(mut listing) => {
            while let Some(chunk) = listing.next().await {
                write_watched(send, chunk.map_err(SendError::Read)?, stall).await?;
            }
        }
        Body::Empty | Body::Message(_) => {}
    }
    let _ = send.finish();
    // The request counts as in flight until the client has every byte: a connection closed
    // on shutdown once its requests are done must not discard a tail still unacknowledged.
    let _ = tokio::time::timeout(stall, send.stopped()).await;
    Ok(())
}

/// `write_chunk`, failing with [`SendError::Stalled`] when the client takes none of it for
/// `stall`. quinn accepts bytes as soon as flow control allows, so a write that waits this
/// long means the client's window stayed shut.
async fn write_watched(
    send: &mut SendStream,
    block: Bytes,
    stall: Duration,
) -> Result<(), SendError> {
    match tokio::time::timeout(stall, send.write_chunk(block)).await {
        Ok(written) => Ok(written?),
        Err(_) => Err(SendError::Stalled(stall)),
    }
}
