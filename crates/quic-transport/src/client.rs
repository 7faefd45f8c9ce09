//! The client: [`QuicTransport`] implements `xfer_core::transport::Transport` over `xfer/1`.
//!
//! Lanes map onto M connections (lane `i` rides connection `i % M`), each with its own UDP
//! socket and quinn endpoint: quinn drives all connections of one endpoint from one task, so
//! separate endpoints let M connections use M cores. A lane's request is one bidirectional
//! stream. Connections are opened on first use and reopened after they die.
//!
//! It does not retry: errors are classified (`TransferError::is_retryable`) and the engine
//! decides.

use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut as _, Bytes, BytesMut};
use quinn::{Connection, ConnectionError, Endpoint, ReadError, ReadExactError, RecvStream};
use tokio::io::AsyncReadExt as _;
use xfer_common::listing::manifest::MANIFEST_MEDIA_TYPE;
use xfer_common::secret::Secret;
use xfer_common::tls::{self, ClientTlsOptions};
use xfer_core::checksum::{Checksum, ChecksumAlgorithm};
use xfer_core::transport::{
    BoxFuture, ConnectionStats, FirstBody, FirstRequest, Lane, ListRequest, ListResponse, Opened,
    RangeBody, RangeRequest, RemoteInfo, RoundTrips, Speculated, TlsStart, Transport,
};
use xfer_core::{Sha256Digest, TransferError};

use crate::socket::{bind_udp, route_max_udp_payload, wrap_for_quinn, SocketBuffers};
use crate::tuning::{ConfigError, QuicTuning};
use crate::url::QuicUrl;
use crate::wire::{
    self, decode_trailer, status, ErrorCode, Method, Request, ResponseHead, ALPN, TRAILER_LEN,
};
use xfer_core::layout::{LaneLayout, Lanes};

/// Client settings.
#[derive(Debug, Clone, PartialEq)]
pub struct QuicClientConfig {
    /// QUIC windows, congestion control, MTU, UDP buffers.
    pub tuning: QuicTuning,
    /// Whom to trust.
    pub tls: ClientTlsOptions,
    /// Lanes as M connections × K streams. Default M = 2: one quinn connection is driven by
    /// about one core (crypto and packet processing), so a second one uses the other core of a
    /// small machine; more than the core count gains nothing. Allowed 1 to 64. Default K = 4:
    /// enough parallel requests to hide per-request round trips; the connection window
    /// (64 MiB) holds four full 16 MiB stream windows. Allowed 1 to 1024 (the server's stream
    /// cap must allow it).
    pub lanes: LaneLayout,
    /// Limit on name resolution plus handshake. Default 10 s. Allowed 1 ms to 10 min.
    pub connect_timeout: Duration,
    /// A connection with no packets for this long is dead (quinn's idle timeout; the smaller
    /// of both ends' values applies): a server that vanished is given up within it. Keep-alives
    /// go out every third of it, at most 1 s apart, so an idle but healthy connection survives
    /// and a restarted server is noticed within about a second. Also bounds the wait for a response head and for each
    /// read of a body: a stream that delivers nothing for this long fails (retryable) even
    /// while its connection lives. Default 30 s. Allowed 1 s to 1 h.
    pub idle_timeout: Duration,
    /// Bearer token sent with every request. Default none.
    pub token: Option<Secret>,
}

impl Default for QuicClientConfig {
    fn default() -> Self {
        Self {
            tuning: QuicTuning::default(),
            tls: ClientTlsOptions::default(),
            lanes: LaneLayout::default(),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            token: None,
        }
    }
}

impl QuicClientConfig {
    /// The layout with QUIC's defaults (2 × 4) filled in.
    pub fn layout(&self) -> Lanes {
        self.lanes.resolve(Lanes::new(2, 4))
    }

    /// Reject values outside what the client supports, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.tuning.validate()?;
        self.lanes.validate(64, 1024, "1 to 64", "1 to 1024")?;
        if let Some(Err(why)) = self.token.as_ref().map(Secret::check_bearer) {
            return Err(ConfigError::new("token", "(not shown)", why));
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(600)).contains(&self.connect_timeout) {
            return Err(ConfigError::new(
                "connect_timeout",
                format!("{:?}", self.connect_timeout),
                "1 ms to 10 min",
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.idle_timeout) {
            return Err(ConfigError::new(
                "idle_timeout",
                format!("{:?}", self.idle_timeout),
                "1 s to 1 h",
            ));
        }
        Ok(())
    }
}

/// The client's transport settings with MTU discovery bounded by `max_udp_payload`.
fn transport_config(
    config: &QuicClientConfig,
    max_udp_payload: u16,
) -> Result<quinn::TransportConfig, ConfigError> {
    config.tuning.transport_config(
        config.idle_timeout,
        // Servers open no streams to clients.
        0,
        Some(keep_alive(config.idle_timeout)),
        max_udp_payload,
    )
}

/// Longest pause between keep-alives. A ping after a second of silence is what finds out
/// that a server restarted: the new process answers it with a stateless reset (its reset key
/// is derived from a secret that survives restarts), and the connection is reopened at once
/// instead of waiting out the idle timeout. A second of silence costs a 40-byte datagram.
const KEEP_ALIVE_MAX: Duration = Duration::from_secs(1);

/// Keep-alives every third of the idle timeout, at most [`KEEP_ALIVE_MAX`] apart.
fn keep_alive(idle: Duration) -> Duration {
    (idle / 3).min(KEEP_ALIVE_MAX)
}

/// A client for one `quic://` resource.
pub struct QuicTransport {
    inner: Arc<Inner>,
}

#[path = "client_upload.rs"]
mod upload;

struct Inner {
    url: String,
    target: QuicUrl,
    /// `host:port` for error messages.
    peer: String,
    config: QuicClientConfig,
    /// TLS for every connection; the transport settings are made per connection, as the
    /// largest datagram depends on the route.
    crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
    /// Shared with every [`QuicTransport::sibling`]: one tree, one set of connections.
    slots: Arc<Vec<Slot>>,
}

/// One of the M connections.
#[derive(Default)]
struct Slot {
    /// Serializes (re)connecting so concurrent lanes share one handshake.
    connect: tokio::sync::Mutex<()>,
    live: Mutex<Option<Live>>,
}

#[derive(Clone)]
struct Live {
    /// Kept so the endpoint (and its socket) lives as long as the connection.
    endpoint: Endpoint,
    connection: Connection,
    buffers: SocketBuffers,
    /// Round trips the connection cost before a request could go: 1 for a handshake, 0 when
    /// it was opened with 0-RTT (requests ride in early data).
    setup: RoundTrips,
    ready: Instant,
    /// `Some(accepted)` once the handshake is complete (whether the server took the 0-RTT
    /// data); `None` before.
    handshake: tokio::sync::watch::Receiver<Option<bool>>,
    /// Set when a connection opened with 0-RTT learned, before its handshake completed, that
    /// nothing listens on the server's port (ICMP port unreachable): it was closed, and its
    /// requests fail as refused instead of waiting out the idle timeout for a head.
    refused: Arc<std::sync::atomic::AtomicBool>,
}

impl Live {
    /// Wait until the handshake is complete: requests that are not safe to replay (uploads)
    /// never go as early data.
    async fn confirmed(&self) {
        let mut rx = self.handshake.clone();
        let _ = rx.wait_for(Option::is_some).await;
    }
}

impl QuicTransport {
    /// Check the URL and configuration and prepare TLS. Connects on first use.
    pub fn new(url: &str, config: QuicClientConfig) -> Result<Self, TransferError> {
        let target = QuicUrl::parse(url)
            .map_err(|reason| TransferError::Config(format!("invalid url {url:?}: {reason}")))?;
        config
            .validate()
            .map_err(|e| TransferError::Config(e.to_string()))?;
        let peer = target.authority();
        let mut rustls_config = tls::client_config(&config.tls, &[ALPN]).map_err(|e| {
            TransferError::Config(format!(
                "tls set-up for {peer}: {}",
                xfer_core::error::error_chain(&e)
            ))
        })?;
        // Reads (GET, STAT, LIST) on a connection opened after a first one to the same server
        // go as 0-RTT early data with its session ticket; uploads wait for the handshake.
        rustls_config.enable_early_data = true;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(rustls_config)
            .map_err(|e| TransferError::Config(format!("tls set-up for {peer}: {e}")))?;
        // Refuse what quinn would refuse now, not at the first connection.
        let largest = config.tuning.max_udp_payload(None);
        config
            .tuning
            .endpoint_config(largest)
            .and_then(|_| transport_config(&config, largest))
            .map_err(|e| TransferError::Config(e.to_string()))?;
        let slots = (0..config.layout().connections)
            .map(|_| Slot::default())
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                url: url.to_string(),
                target,
                peer,
                config,
                crypto: Arc::new(crypto),
                slots: Arc::new(slots),
            }),
        })
    }

    /// A transport for `url` on the same server that shares this one's connections.
    pub fn sibling(&self, url: &str) -> Result<Self, TransferError> {
        let target = QuicUrl::parse(url)
            .map_err(|reason| TransferError::Config(format!("invalid url {url:?}: {reason}")))?;
        let inner = &self.inner;
        if target.authority() != inner.peer {
            return Err(TransferError::Config(format!(
                "{url} is not on {}: it cannot share its connections",
                inner.peer
            )));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                url: url.to_string(),
                target,
                peer: inner.peer.clone(),
                config: inner.config.clone(),
                crypto: Arc::clone(&inner.crypto),
                slots: Arc::clone(&inner.slots),
            }),
        })
    }

    /// Lane `index`, whose first request is a GET of `range` (all of the resource without
    /// one), with the answer's head and body stream: the opening of `open_first` and
    /// `open_speculative`.
    async fn lane_asking(
        &self,
        index: usize,
        range: Option<Range<u64>>,
        want_digest: bool,
    ) -> Result<(ResponseHead, RecvStream, Box<QuicLane>), TransferError> {
        let inner = &self.inner;
        let layout = inner.config.layout();
        let conn = layout.connection_of(index);
        let created = Instant::now();
        let req = Request {
            upload: None,
            token: inner.config.token.as_ref().map(|t| t.expose().to_string()),
            method: Method::Get,
            path: inner.target.path_and_query.clone(),
            range,
            want_digest,
            checksums: Vec::new(),
            validator: None,
        };
        let (head, recv, rt) = inner
            .exchange_since(conn, &req, None, Some(created))
            .await?;
        let lane = Box::new(QuicLane {
            inner: inner.clone(),
            conn,
            slot: layout.slot_of(index),
            created,
            first: Some(rt),
        });
        Ok((head, recv, lane))
    }

    /// The first request of a download doubles as its stat: a GET of bytes `0..first.len`,
    /// whose head carries size, validators and the known digest, and whose body is the first
    /// chunk (the server clips the range to the resource).
    async fn open_with_first_range(
        &self,
        index: usize,
        first: FirstRequest,
    ) -> Result<Opened, TransferError> {
        let inner = &self.inner;
        let range = (first.len > 0).then_some(0..first.len);
        let (head, recv, lane) = self.lane_asking(index, range, first.want_digest).await?;
        let what = format!("GET {} bytes 0..{}", inner.target.path_and_query, first.len);
        let empty = head.status == status::RANGE_NOT_SATISFIABLE && head.size == 0;
        if head.status != status::PARTIAL_CONTENT && head.status != status::OK && !empty {
            return Err(inner.status_error(&head, what));
        }
        let info = inner.remote_info(&head);
        let expected = 0..first.len.min(head.size);
        if expected.is_empty() {
            return Ok(Opened {
                info,
                lane,
                first: None,
            });
        }
        if head.range.as_ref() != Some(&expected) {
            return Err(TransferError::Unexpected {
                peer: inner.peer.clone(),
                message: format!("{what}: got bytes {:?}", head.range),
            });
        }
        let body = QuicBody::new(inner, recv, &expected, head.trailer);
        Ok(Opened {
            info,
            lane,
            first: Some(FirstBody {
                range: expected,
                whole: false,
                body: Box::new(body),
            }),
        })
    }

    /// [`Transport::open_speculative`] over QUIC: a `GET` of `range` on the lane's stream slot
    /// as soon as its connection is up. Only a `206` for exactly those bytes (or their part up
    /// to the end) is kept.
    async fn open_speculative_range(
        &self,
        index: usize,
        range: Range<u64>,
        want_digest: bool,
    ) -> Result<Speculated, TransferError> {
        let inner = &self.inner;
        let (head, recv, lane) = self
            .lane_asking(index, Some(range.clone()), want_digest)
            .await?;
        let expected = range.start..range.end.min(head.size);
        if head.status != status::PARTIAL_CONTENT
            || expected.is_empty()
            || head.range.as_ref() != Some(&expected)
        {
            tracing::debug!(status = head.status, range = ?head.range, "the speculative range brought no chunk");
            return Ok(Speculated { lane, answer: None });
        }
        let info = inner.remote_info(&head);
        let body = QuicBody::new(inner, recv, &expected, head.trailer);
        let first = FirstBody {
            range: expected,
            whole: false,
            body: Box::new(body),
        };
        Ok(Speculated {
            lane,
            answer: Some((info, first)),
        })
    }

    async fn list_manifest(&self, dir_url: &str) -> Result<ListResponse, TransferError> {
        let inner = &self.inner;
        let target = QuicUrl::parse(dir_url).map_err(|reason| {
            TransferError::Config(format!("invalid url {dir_url:?}: {reason}"))
        })?;
        let req = Request {
            upload: None,
            method: Method::List,
            path: target.path_and_query,
            range: None,
            want_digest: false,
            checksums: Vec::new(),
            validator: None,
            token: inner.config.token.as_ref().map(|t| t.expose().to_string()),
        };
        let (head, recv) = inner.exchange(0, &req).await?;
        let what = format!("LIST {}", req.path);
        if head.status != status::OK {
            return Err(inner.status_error(&head, what));
        }
        if !head.streamed {
            return Err(TransferError::Unexpected {
                peer: inner.peer.clone(),
                message: format!("{what}: the answer is not a streamed listing"),
            });
        }
        Ok(ListResponse {
            url: dir_url.to_string(),
            media_type: Some(MANIFEST_MEDIA_TYPE.to_string()),
            body: Box::new(StreamedBody {
                peer: inner.peer.clone(),
                what,
                recv,
                idle: inner.config.idle_timeout,
                done: false,
            }),
        })
    }
}

impl Inner {
    /// A STAT of this transport's resource, asking for `checksums`.
    fn stat_request(&self, checksums: Vec<ChecksumAlgorithm>) -> Request {
        Request {
            upload: None,
            token: self.config.token.as_ref().map(|t| t.expose().to_string()),
            method: Method::Stat,
            path: self.target.path_and_query.clone(),
            range: None,
            want_digest: false,
            checksums,
            validator: None,
        }
    }

    /// The live connection of slot `index`, connecting when there is none or it died.
    async fn connection(&self, index: usize) -> Result<Live, TransferError> {
        let slot = &self.slots[index % self.slots.len()];
        if let Some(c) = slot.alive() {
            return Ok(c);
        }
        let _guard = slot.connect.lock().await;
        if let Some(c) = slot.alive() {
            return Ok(c);
        }
        let after = self.config.connect_timeout;
        let live = tokio::time::timeout(after, self.connect())
            .await
            .map_err(|_| TransferError::Timeout {
                peer: self.peer.clone(),
                what: "quic connect and handshake".into(),
                after,
            })??;
        if let Ok(mut l) = slot.live.lock() {
            *l = Some(live.clone());
        }
        tracing::debug!(peer = %self.peer, slot = index, early = live.setup.tls == TlsStart::EarlyData, "quic connection established");
        Ok(live)
    }

    async fn connect(&self) -> Result<Live, TransferError> {
        let connect_err = |source: io::Error| TransferError::Connect {
            peer: self.peer.clone(),
            source,
        };
        let addr = tokio::net::lookup_host((self.target.host.as_str(), self.target.port))
            .await
            .map_err(connect_err)?
            .next()
            .ok_or_else(|| {
                connect_err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "name resolved to no address",
                ))
            })?;
        let local: SocketAddr = if addr.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let (socket, buffers) = bind_udp(local, &self.config.tuning).map_err(connect_err)?;
        let runtime = quinn::default_runtime()
            .ok_or_else(|| connect_err(io::Error::other("no async runtime for quinn")))?;
        let (socket, offload) = wrap_for_quinn(socket, runtime.as_ref()).map_err(connect_err)?;
        // The server sends the download: announcing what the route takes lets its MTU
        // discovery go straight to the largest datagram that fits the first hop.
        let route = route_max_udp_payload(addr);
        let payload = self.config.tuning.max_udp_payload(route);
        let config_err = |e: ConfigError| TransferError::Config(e.to_string());
        let endpoint_config = self
            .config
            .tuning
            .endpoint_config(payload)
            .map_err(config_err)?;
        let mut quinn_config = quinn::ClientConfig::new(self.crypto.clone());
        quinn_config.transport_config(Arc::new(
            transport_config(&self.config, payload).map_err(config_err)?,
        ));
        tracing::debug!(peer = %self.peer, ?route, payload, ?offload, "quic endpoint");
        let endpoint = Endpoint::new_with_abstract_socket(endpoint_config, None, socket, runtime)
            .map_err(connect_err)?;
        let connecting = endpoint
            .connect_with(quinn_config, addr, &self.target.host)
            .map_err(|e| TransferError::Config(format!("cannot connect to {}: {e}", self.peer)))?;
        let (done_tx, done_rx) = tokio::sync::watch::channel(None);
        // With a ticket from an earlier connection to this server, requests go at once as
        // early data (0-RTT); without one, after the handshake's round trip.
        let connecting = match connecting.into_0rtt() {
            Ok((connection, accepted)) => {
                let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let watch = (connection.clone(), Arc::clone(&refused));
                tokio::spawn(async move {
                    tokio::select! {
                        accepted = accepted => {
                            let _ = done_tx.send(Some(accepted));
                        }
                        // A server gone for good, reached with a ticket of its last run.
                        _ = port_unreachable(addr) => {
                            watch.1.store(true, std::sync::atomic::Ordering::Release);
                            watch.0.close(ErrorCode::NoError.varint(), b"port unreachable");
                        }
                    }
                });
                return Ok(Live {
                    refused,
                    endpoint,
                    connection,
                    buffers,
                    setup: RoundTrips {
                        tls: TlsStart::EarlyData,
                        ..RoundTrips::default()
                    },
                    ready: Instant::now(),
                    handshake: done_rx,
                });
            }
            Err(connecting) => connecting,
        };
        let handshake = tokio::select! {
            handshake = connecting => handshake,
            refusal = port_unreachable(addr) => {
                return Err(connect_err(refusal));
            }
        };
        let connection = handshake.map_err(|e| {
            // A handshake that failed for reasons other than TLS never connected.
            match connection_error(&self.peer, e, "handshake", self.config.idle_timeout) {
                TransferError::Io { peer, source } => TransferError::Connect { peer, source },
                other => other,
            }
        })?;
        let _ = done_tx.send(Some(false));
        Ok(Live {
            endpoint,
            connection,
            buffers,
            setup: RoundTrips {
                handshake: 1,
                tls: TlsStart::Full,
                ..RoundTrips::default()
            },
            ready: Instant::now(),
            handshake: done_rx,
            refused: Arc::default(),
        })
    }

    /// Send `req` on a new stream of connection `conn` and read the response head.
    async fn exchange(
        &self,
        conn: usize,
        req: &Request,
    ) -> Result<(ResponseHead, RecvStream), TransferError> {
        self.exchange_with(conn, req, None)
            .await
            .map(|(head, recv, _)| (head, recv))
    }

    /// [`Inner::exchange`], with an upload's body sent after the request, and the round
    /// trips it took to the head, counting the connection's set-up when it was made after
    /// `since`. A request sent as early data that the server refused (it did not accept the
    /// 0-RTT data) is sent again once the handshake is complete; only reads go early.
    pub(crate) async fn exchange_with(
        &self,
        conn: usize,
        req: &Request,
        body: Option<Bytes>,
    ) -> Result<(ResponseHead, RecvStream, RoundTrips), TransferError> {
        self.exchange_since(conn, req, body, None).await
    }

    async fn exchange_since(
        &self,
        conn: usize,
        req: &Request,
        body: Option<Bytes>,
        since: Option<Instant>,
    ) -> Result<(ResponseHead, RecvStream, RoundTrips), TransferError> {
        let wire = Bytes::from(
            req.encode()
                .map_err(|e| TransferError::Config(format!("cannot send {}: {e}", req.path)))?,
        );
        let live = self.connection(conn).await?;
        if req.method == Method::Put {
            live.confirmed().await;
        }
        let mut rt = match since {
            Some(since) if live.ready >= since => live.setup,
            _ => RoundTrips::default(),
        };
        if rt.tls == TlsStart::EarlyData && *live.handshake.borrow() == Some(false) {
            // The server refused the early data before this request went: it goes after the
            // handshake.
            rt.handshake = 1;
            rt.tls = TlsStart::EarlyDataRefused;
        }
        rt.requests = 1;
        let result = match self
            .exchange_on(&live, req, wire.clone(), body.clone())
            .await
        {
            Err(Exchange::Rejected) => {
                tracing::debug!(peer = %self.peer, path = %req.path, "0-rtt refused; sending the request again");
                live.confirmed().await;
                rt.handshake = 1;
                rt.tls = TlsStart::EarlyDataRefused;
                match self.exchange_on(&live, req, wire, body).await {
                    Ok((head, recv)) => Ok((head, recv, rt)),
                    Err(Exchange::Failed(e)) => Err(e),
                    Err(Exchange::Rejected) => Err(TransferError::Protocol {
                        peer: self.peer.clone(),
                        message: format!("{}: early data refused after the handshake", req.path),
                    }),
                }
            }
            Err(Exchange::Failed(e)) => Err(e),
            Ok((head, recv)) => Ok((head, recv, rt)),
        };
        match result {
            Err(_) if live.refused.load(std::sync::atomic::Ordering::Acquire) => {
                Err(TransferError::Connect {
                    peer: self.peer.clone(),
                    source: refusal(live.connection.remote_address()),
                })
            }
            other => other,
        }
    }

    async fn exchange_on(
        &self,
        live: &Live,
        req: &Request,
        wire: Bytes,
        body: Option<Bytes>,
    ) -> Result<(ResponseHead, RecvStream), Exchange> {
        let (mut send, mut recv) = live.connection.open_bi().await.map_err(|e| {
            Exchange::Failed(connection_error(
                &self.peer,
                e,
                "opening a stream",
                self.config.idle_timeout,
            ))
        })?;
        let write_err = |e: quinn::WriteError| match e {
            quinn::WriteError::ZeroRttRejected => Exchange::Rejected,
            e => Exchange::Failed(TransferError::Io {
                peer: self.peer.clone(),
                source: e.into(),
            }),
        };
        send.write_chunk(wire).await.map_err(write_err)?;
        if let Some(body) = body {
            send.write_chunk(body).await.map_err(write_err)?;
        }
        // The request is complete; FIN tells the server so (it reads to the end).
        if let Err(e) = send.finish() {
            // A refusal of the early data that lands between the write and the FIN resets
            // the stream under it: that is a refusal too, and the request goes again.
            live.confirmed().await;
            if *live.handshake.borrow() == Some(false) {
                return Err(Exchange::Rejected);
            }
            return Err(Exchange::Failed(TransferError::Io {
                peer: self.peer.clone(),
                source: io::Error::other(e.to_string()),
            }));
        }
        let after = self.config.idle_timeout;
        let head = tokio::time::timeout(after, read_head(&self.peer, &mut recv, after))
            .await
            .map_err(|_| {
                Exchange::Failed(TransferError::Timeout {
                    peer: self.peer.clone(),
                    what: format!("response head for {}", req.path),
                    after,
                })
            })?;
        match head {
            Ok(head) => Ok((head, recv)),
            Err(HeadError::Rejected) => Err(Exchange::Rejected),
            Err(HeadError::Failed(e)) => Err(Exchange::Failed(e)),
        }
    }

    /// The resource as an answer's head describes it.
    fn remote_info(&self, head: &ResponseHead) -> RemoteInfo {
        RemoteInfo {
            url: self.url.clone(),
            size: head.size,
            etag: head.etag.clone(),
            last_modified: head.last_modified.clone(),
            accepts_ranges: true,
            sha256: head.repr_sha256,
        }
    }

    fn status_error(&self, head: &ResponseHead, what: String) -> TransferError {
        if head.status == status::PRECONDITION_FAILED {
            return TransferError::RemoteChanged {
                url: self.url.clone(),
                what: format!(
                    "validator no longer matches (now {})",
                    head.etag.as_deref().unwrap_or("no etag")
                ),
            };
        }
        let what = match &head.message {
            Some(m) => format!("{what} ({m})"),
            None => what,
        };
        TransferError::Status {
            peer: self.peer.clone(),
            status: head.status,
            what,
        }
    }
}

/// A connection told to close, until its CONNECTION_CLOSE has left.
struct Closing {
    connection: Connection,
    sent_before: u64,
    _endpoint: Endpoint,
}

impl Closing {
    fn sent(&self) -> bool {
        self.connection.stats().udp_tx.datagrams > self.sent_before
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.close();
    }
}

impl Slot {
    /// Closes the connection, if one is open, telling the server now rather than let it wait
    /// out its idle timeout: it counts a client's open connections (Careful Resume shares a
    /// jump among them). The endpoint's driver sends the goodbye: returned is what shows it
    /// has, the connection with the datagrams it had sent before.
    fn close(&self) -> Option<Closing> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        let s = live.connection.stats();
        // The receiving side of a download: datagram size reached. (quinn counts received
        // datagrams per packet it handles, not per system call, so its statistics cannot tell
        // whether GRO coalesced them; the UDP `InDatagrams` counter of /proc/net/snmp can.)
        tracing::debug!(
            peer = %live.connection.remote_address(),
            mtu = s.path.current_mtu,
            rtt = ?s.path.rtt,
            datagrams_received = s.udp_rx.datagrams,
            // What acknowledging cost this side: every ACK frame rides a datagram it sends.
            acks_sent = s.frame_tx.acks,
            datagrams_sent = s.udp_tx.datagrams,
            "quic connection done"
        );
        live.connection.close(ErrorCode::NoError.varint(), b"done");
        Some(Closing {
            sent_before: s.udp_tx.datagrams,
            connection: live.connection,
            _endpoint: live.endpoint,
        })
    }

    fn alive(&self) -> Option<Live> {
        let live = self.live.lock().ok()?;
        live.as_ref()
            .filter(|l| l.connection.close_reason().is_none())
            .cloned()
    }
}

/// Why an exchange failed: the server refused the early data it was sent in, or anything else.
enum Exchange {
    Rejected,
    Failed(TransferError),
}

enum HeadError {
    Rejected,
    Failed(TransferError),
}

async fn read_head(
    peer: &str,
    recv: &mut RecvStream,
    idle: Duration,
) -> Result<ResponseHead, HeadError> {
    let fail = |e: ReadExactError| match e {
        ReadExactError::ReadError(ReadError::ZeroRttRejected) => HeadError::Rejected,
        e => HeadError::Failed(read_exact_error(peer, e, "response head", idle)),
    };
    let mut prefix = [0u8; 2];
    recv.read_exact(&mut prefix).await.map_err(fail)?;
    let len =
        ResponseHead::decode_len(prefix).map_err(|e| HeadError::Failed(protocol(peer, &e)))?;
    let mut buf = vec![0u8; len];
    recv.read_exact(&mut buf).await.map_err(fail)?;
    ResponseHead::decode(&buf).map_err(|e| HeadError::Failed(protocol(peer, &e)))
}

fn protocol(peer: &str, e: &wire::WireError) -> TransferError {
    TransferError::Protocol {
        peer: peer.to_string(),
        message: e.to_string(),
    }
}

fn read_exact_error(peer: &str, e: ReadExactError, what: &str, idle: Duration) -> TransferError {
    match e {
        ReadExactError::FinishedEarly(got) => TransferError::Protocol {
            peer: peer.to_string(),
            message: format!("stream ended inside the {what} after {got} bytes"),
        },
        ReadExactError::ReadError(e) => read_error(peer, e, what, idle),
    }
}

/// `idle` is the connection's idle timeout, named when the connection died of it.
fn read_error(peer: &str, e: ReadError, what: &str, idle: Duration) -> TransferError {
    match e {
        ReadError::Reset(code) => TransferError::Protocol {
            peer: peer.to_string(),
            message: format!(
                "server reset the stream while sending the {what}: {}",
                describe_code(code.into_inner())
            ),
        },
        ReadError::ConnectionLost(e) => connection_error(peer, e, what, idle),
        other => TransferError::Io {
            peer: peer.to_string(),
            source: other.into(),
        },
    }
}

fn describe_code(code: u64) -> String {
    match ErrorCode::from_code(code) {
        Some(c) => c.to_string(),
        None => format!("unknown code 0x{code:x}"),
    }
}

/// Resolves with a "connection refused" error if `addr`'s host answers datagrams with ICMP
/// port unreachable (nothing listens on that UDP port); never resolves otherwise.
///
/// quinn's endpoint socket is unconnected, so the kernel does not report ICMP errors to it and
/// a handshake to a closed port would wait out the whole connect timeout. A connected socket
/// beside it gets them: it sends a one-byte datagram, which a QUIC server drops as too short
/// to be a packet, a few times in case one is lost.
async fn port_unreachable(addr: SocketAddr) -> io::Error {
    let local: SocketAddr = if addr.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let refused = |e: &io::Error| e.kind() == io::ErrorKind::ConnectionRefused;
    if let Ok(socket) = tokio::net::UdpSocket::bind(local).await {
        if socket.connect(addr).await.is_ok() {
            let mut buf = [0u8; 64];
            for wait in [100, 400, 1500].map(Duration::from_millis) {
                if let Err(e) = socket.send(&[0]).await {
                    if refused(&e) {
                        return refusal(addr);
                    }
                }
                if let Ok(Err(e)) = tokio::time::timeout(wait, socket.recv(&mut buf)).await {
                    if refused(&e) {
                        return refusal(addr);
                    }
                }
            }
        }
    }
    std::future::pending().await
}

fn refusal(addr: SocketAddr) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionRefused,
        format!("nothing listens on UDP {addr} (ICMP port unreachable)"),
    )
}

/// The TLS `unknown_ca` alert (RFC 8446 §6.2).
const UNKNOWN_CA_ALERT: u64 = 48;

/// Longest [`Transport::close`] waits for the endpoints' drivers to send the goodbyes.
const CLOSE_GRACE: Duration = Duration::from_millis(50);

/// Classify a dead connection: TLS alerts (QUIC crypto errors 0x100-0x1ff) are not retried,
/// timeouts and everything else are. `idle` is the client's idle timeout: quinn ends a
/// connection that received nothing for the smaller of both ends' values, so a timeout names it.
fn connection_error(peer: &str, e: ConnectionError, during: &str, idle: Duration) -> TransferError {
    let crypto = |code: u64| (0x100..0x200).contains(&code);
    match &e {
        // Our own verifier refused the server's certificate: rustls sends unknown_ca for an
        // unknown issuer (RFC 9001 §4.8: crypto error 0x100 + the TLS alert).
        ConnectionError::TransportError(t) if u64::from(t.code) == 0x100 + UNKNOWN_CA_ALERT => {
            TransferError::Tls {
                peer: peer.to_string(),
                message: format!("{e}: {}", tls::UNKNOWN_ISSUER_HINT),
            }
        }
        ConnectionError::TransportError(t) if crypto(u64::from(t.code)) => TransferError::Tls {
            peer: peer.to_string(),
            message: e.to_string(),
        },
        ConnectionError::ConnectionClosed(c) if crypto(u64::from(c.error_code)) => {
            TransferError::Tls {
                peer: peer.to_string(),
                message: e.to_string(),
            }
        }
        ConnectionError::TimedOut => TransferError::Timeout {
            peer: peer.to_string(),
            what: format!(
                "no packet from the server (quic idle timeout) during the {during}; \
                 the server is gone or the path is down"
            ),
            after: idle,
        },
        _ => TransferError::Io {
            peer: peer.to_string(),
            source: io::Error::new(io::ErrorKind::ConnectionAborted, format!("{during}: {e}")),
        },
    }
}

impl Transport for QuicTransport {
    fn stat(&self) -> BoxFuture<'_, Result<RemoteInfo, TransferError>> {
        Box::pin(async move {
            let inner = &self.inner;
            let req = inner.stat_request(Vec::new());
            let (head, _recv) = inner.exchange(0, &req).await?;
            if head.status != status::OK {
                return Err(inner.status_error(&head, format!("STAT {}", req.path)));
            }
            Ok(inner.remote_info(&head))
        })
    }

    fn checksum(
        &self,
        algorithm: ChecksumAlgorithm,
    ) -> BoxFuture<'_, Result<Option<Checksum>, TransferError>> {
        Box::pin(async move {
            let inner = &self.inner;
            // A server that predates CHECKSUMS resets the stream as malformed: an error, not a
            // silent "no checksum".
            let req = inner.stat_request(vec![algorithm]);
            let (head, _recv) = inner.exchange(0, &req).await?;
            if head.status != status::OK {
                return Err(
                    inner.status_error(&head, format!("STAT {} (checksum {algorithm})", req.path))
                );
            }
            Ok(head
                .checksums
                .into_iter()
                .find(|c| c.algorithm == algorithm))
        })
    }

    fn open_first(
        &self,
        index: usize,
        first: FirstRequest,
    ) -> BoxFuture<'_, Result<Opened, TransferError>> {
        Box::pin(self.open_with_first_range(index, first))
    }

    fn open_speculative(
        &self,
        index: usize,
        range: Range<u64>,
        want_digest: bool,
    ) -> BoxFuture<'_, Result<Speculated, TransferError>> {
        Box::pin(self.open_speculative_range(index, range, want_digest))
    }

    fn open_lane(&self, index: usize) -> BoxFuture<'_, Result<Box<dyn Lane>, TransferError>> {
        Box::pin(async move {
            let layout = self.inner.config.layout();
            let conn = layout.connection_of(index);
            let created = Instant::now();
            // Connect now so a bad certificate or unreachable server shows at lane set-up.
            self.inner.connection(conn).await?;
            Ok(Box::new(QuicLane {
                inner: self.inner.clone(),
                conn,
                slot: layout.slot_of(index),
                created,
                first: None,
            }) as Box<dyn Lane>)
        })
    }

    fn connection_stats(&self) -> Vec<ConnectionStats> {
        let congestion = self.inner.config.tuning.congestion.name().to_string();
        self.inner
            .slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                let live = slot.live.lock().ok()?.clone()?;
                let c = &live.connection;
                let s = c.stats();
                Some(ConnectionStats {
                    index,
                    peer: c.remote_address().to_string(),
                    congestion: Some(congestion.clone()),
                    rtt_us: Some(u64::try_from(c.rtt().as_micros()).unwrap_or(u64::MAX)),
                    cwnd_bytes: Some(s.path.cwnd),
                    retransmits: Some(s.path.lost_packets),
                    // quinn counts what this end sent and lost, not what it received out
                    // of order.
                    out_of_order_packets: None,
                    congestion_events: Some(s.path.congestion_events),
                    bytes_received: Some(s.udp_rx.bytes),
                    send_buffer: Some(live.buffers.send as u64),
                    recv_buffer: Some(live.buffers.recv as u64),
                })
            })
            .collect()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let closing: Vec<Closing> = self.inner.slots.iter().filter_map(Slot::close).collect();
            // The CONNECTION_CLOSE leaves when the endpoint's driver next runs: within a
            // millisecond or so, but not before the process exits unless something waits.
            // quinn tells nobody when it has sent it (`Endpoint::wait_idle` waits for the
            // connection to drain, 3 PTOs, most of a second on a long path), so its datagram
            // counter is watched, for a bounded time.
            let deadline = Instant::now() + CLOSE_GRACE;
            while !closing.iter().all(Closing::sent) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    }

    fn protocol(&self) -> String {
        "quic".to_string()
    }

    fn request_ahead(&self) -> Option<bool> {
        let t = &self.inner.config.tuning;
        let lanes = self.inner.config.layout().streams_per_connection as u64;
        (t.connection_receive_window >= 2 * lanes * t.stream_receive_window).then_some(true)
    }

    fn default_lanes(&self) -> usize {
        self.inner.config.layout().count()
    }

    fn list<'a>(
        &'a self,
        dir_url: &'a str,
        request: ListRequest,
    ) -> BoxFuture<'a, Result<ListResponse, TransferError>> {
        Box::pin(async move {
            match request {
                ListRequest::Manifest => self.list_manifest(dir_url).await,
                // xfer/1 has one listing; a QUIC server is xfer's.
                ListRequest::Propfind | ListRequest::Index => Err(TransferError::Config(format!(
                    "xfer/1 lists {dir_url} with LIST only"
                ))),
            }
        })
    }

    fn sibling(&self, url: &str) -> Result<Arc<dyn Transport>, TransferError> {
        Ok(Arc::new(QuicTransport::sibling(self, url)?))
    }
}

/// A streamed body (a listing): bytes to FIN, each read bounded by the idle timeout.
struct StreamedBody {
    peer: String,
    what: String,
    recv: RecvStream,
    idle: Duration,
    done: bool,
}

impl StreamedBody {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.done {
            return Ok(None);
        }
        match tokio::time::timeout(self.idle, self.recv.read_chunk(64 * 1024, true)).await {
            Err(_) => Err(TransferError::Timeout {
                peer: self.peer.clone(),
                what: self.what.clone(),
                after: self.idle,
            }),
            Ok(Ok(Some(chunk))) => Ok(Some(chunk.bytes)),
            Ok(Ok(None)) => {
                self.done = true;
                Ok(None)
            }
            Ok(Err(e)) => Err(read_error(&self.peer, e, &self.what, self.idle)),
        }
    }
}

impl RangeBody for StreamedBody {
    fn next_data(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, TransferError>> {
        Box::pin(self.next())
    }

    fn trailer_digest(&self) -> Option<Sha256Digest> {
        None
    }
}

impl Drop for StreamedBody {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.recv.stop(ErrorCode::Cancelled.varint());
        }
    }
}

/// One stream slot on one connection.
struct QuicLane {
    inner: Arc<Inner>,
    conn: usize,
    slot: usize,
    /// When the lane was asked for: a connection made after this was waited for.
    created: Instant,
    first: Option<RoundTrips>,
}

impl Lane for QuicLane {
    fn put_whole<'a>(
        &'a mut self,
        data: Bytes,
        sha256: xfer_core::Sha256Digest,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        Box::pin(self.inner.put_whole(self.conn, data, sha256))
    }

    fn put_chunk<'a>(
        &'a mut self,
        chunk: &'a xfer_core::transport::ChunkUpload,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        Box::pin(self.inner.put_chunk(self.conn, chunk))
    }

    fn upload_status<'a>(
        &'a mut self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<xfer_core::transport::UploadStatus>, TransferError>> {
        Box::pin(self.inner.upload_status(self.conn, id))
    }

    fn complete_upload<'a>(
        &'a mut self,
        id: &'a str,
        sha256: xfer_core::Sha256Digest,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        Box::pin(self.inner.complete_upload(self.conn, id, sha256))
    }

    fn fetch<'a>(
        &'a mut self,
        req: &'a RangeRequest,
    ) -> BoxFuture<'a, Result<Box<dyn RangeBody + 'a>, TransferError>> {
        Box::pin(async move {
            let inner = &self.inner;
            let wire_req = Request {
                upload: None,
                token: self
                    .inner
                    .config
                    .token
                    .as_ref()
                    .map(|t| t.expose().to_string()),
                method: Method::Get,
                path: inner.target.path_and_query.clone(),
                range: (!req.whole).then(|| req.range.clone()),
                want_digest: req.want_digest,
                checksums: Vec::new(),
                validator: req.validator.clone(),
            };
            let (head, recv, rt) = inner
                .exchange_since(self.conn, &wire_req, None, Some(self.created))
                .await?;
            self.first.get_or_insert(rt);
            let what = || format!("GET {} bytes {:?}", wire_req.path, req.range);
            if head.status != status::OK && head.status != status::PARTIAL_CONTENT {
                return Err(inner.status_error(&head, what()));
            }
            if head.size != req.expected_size {
                return Err(TransferError::RemoteChanged {
                    url: inner.url.clone(),
                    what: format!("size was {} and is now {}", req.expected_size, head.size),
                });
            }
            if let Some(v) = &req.validator {
                if head.etag.as_deref() != Some(v.as_str()) {
                    return Err(TransferError::RemoteChanged {
                        url: inner.url.clone(),
                        what: format!(
                            "etag was {v} and is now {}",
                            head.etag.as_deref().unwrap_or("absent")
                        ),
                    });
                }
            }
            let expected = if req.whole {
                0..req.expected_size
            } else {
                req.range.clone()
            };
            if head.range.as_ref() != Some(&expected) {
                return Err(TransferError::Unexpected {
                    peer: inner.peer.clone(),
                    message: format!("asked for bytes {expected:?}, got {:?}", head.range),
                });
            }
            Ok(
                Box::new(QuicBody::new(inner, recv, &expected, head.trailer))
                    as Box<dyn RangeBody + 'a>,
            )
        })
    }

    fn label(&self) -> String {
        format!("conn {} / stream slot {}", self.conn, self.slot)
    }

    fn first_round_trips(&self) -> Option<RoundTrips> {
        self.first
    }

    fn connection(&self) -> usize {
        self.conn
    }
}

/// The body of one GET: exactly `expected` bytes, then the trailer if announced, then FIN.
struct QuicBody {
    peer: String,
    /// Longest wait for any read (see [`QuicClientConfig::idle_timeout`]).
    stall: Duration,
    recv: RecvStream,
    expected: u64,
    got: u64,
    trailer: bool,
    digest: Option<Sha256Digest>,
    done: bool,
    /// Where received STREAM frames are gathered into pieces; pieces are split off its front
    /// and it is replaced once too little of it is left.
    buf: BytesMut,
}

/// Largest piece [`QuicBody`] hands on. quinn yields one STREAM frame (one datagram, about
/// 1.2-1.4 KB) per `read_chunk`, and everything downstream (the lane's select, timers,
/// progress, the hasher, the write batch, the boxed future of `next_data`) costs per piece, so
/// a body read frame by frame paid that about 800,000 times per GiB. Copying whatever frames
/// are already there into one piece (one lock of the connection, one memcpy) costs less.
const BODY_PIECE: usize = 256 << 10;
/// Capacity of a [`QuicBody`] gathering buffer: four full pieces per allocation.
const BODY_BUFFER: usize = 4 * BODY_PIECE;

impl QuicBody {
    fn new(inner: &Inner, recv: RecvStream, range: &std::ops::Range<u64>, trailer: bool) -> Self {
        Self {
            peer: inner.peer.clone(),
            stall: inner.config.idle_timeout,
            recv,
            expected: range.end - range.start,
            got: 0,
            trailer,
            digest: None,
            done: false,
            buf: BytesMut::new(),
        }
    }

    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.done {
            return Ok(None);
        }
        let remaining = self.expected - self.got;
        if remaining == 0 {
            self.finish().await?;
            return Ok(None);
        }
        // Never read past the body: the trailer follows in the same stream.
        let want = usize::try_from(remaining).map_or(BODY_PIECE, |r| r.min(BODY_PIECE));
        if self.buf.capacity() - self.buf.len() < want {
            self.buf = BytesMut::with_capacity(BODY_BUFFER);
        }
        let mut room = (&mut self.buf).limit(want);
        let read = tokio::time::timeout(self.stall, self.recv.read_buf(&mut room)).await;
        match read.map_err(|_| self.stalled("body"))? {
            Ok(0) => Err(TransferError::Truncated {
                peer: self.peer.clone(),
                expected: self.expected,
                got: self.got,
            }),
            Ok(n) => {
                self.got += n as u64;
                Ok(Some(self.buf.split().freeze()))
            }
            Err(e) => {
                let what = format!("body (after {} of {} bytes)", self.got, self.expected);
                // quinn's `AsyncRead` wraps its `ReadError` in the `io::Error`.
                match e.get_ref().and_then(|i| i.downcast_ref::<ReadError>()) {
                    Some(re) => Err(read_error(&self.peer, re.clone(), &what, self.stall)),
                    None => Err(TransferError::Io {
                        peer: self.peer.clone(),
                        source: e,
                    }),
                }
            }
        }
    }

    /// Read the trailer (if any) and require the end of the stream.
    async fn finish(&mut self) -> Result<(), TransferError> {
        if self.trailer {
            let mut buf = [0u8; TRAILER_LEN];
            tokio::time::timeout(self.stall, self.recv.read_exact(&mut buf))
                .await
                .map_err(|_| self.stalled("trailer"))?
                .map_err(|e| read_exact_error(&self.peer, e, "trailer", self.stall))?;
            self.digest = Some(decode_trailer(&buf).map_err(|e| protocol(&self.peer, &e))?);
        }
        let end = tokio::time::timeout(self.stall, self.recv.read_chunk(1, true)).await;
        match end.map_err(|_| self.stalled("end of the response"))? {
            Ok(None) => {
                self.done = true;
                Ok(())
            }
            Ok(Some(_)) => Err(TransferError::Protocol {
                peer: self.peer.clone(),
                message: "bytes after the end of the response".into(),
            }),
            Err(e) => Err(read_error(&self.peer, e, "end of the response", self.stall)),
        }
    }
}

impl QuicBody {
    fn stalled(&self, what: &str) -> TransferError {
        TransferError::Timeout {
            peer: self.peer.clone(),
            what: format!(
                "stream stalled in the {what} after {} of {} bytes",
                self.got, self.expected
            ),
            after: self.stall,
        }
    }
}

impl RangeBody for QuicBody {
    fn next_data(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, TransferError>> {
        Box::pin(self.next())
    }

    fn trailer_digest(&self) -> Option<Sha256Digest> {
        self.digest
    }
}

impl Drop for QuicBody {
    fn drop(&mut self) {
        if !self.done {
            // Tell the server to stop sending what nobody will read.
            let _ = self.recv.stop(ErrorCode::Cancelled.varint());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_validation_names_fields() {
        assert!(QuicClientConfig::default().validate().is_ok());
        let bad = QuicClientConfig {
            lanes: LaneLayout {
                connections: Some(0),
                streams_per_connection: None,
            },
            ..QuicClientConfig::default()
        };
        assert_eq!(bad.validate().map_err(|e| e.field), Err("connections"));
        let bad = QuicClientConfig {
            lanes: LaneLayout {
                connections: None,
                streams_per_connection: Some(5000),
            },
            ..QuicClientConfig::default()
        };
        assert_eq!(
            bad.validate().map_err(|e| e.field),
            Err("streams_per_connection")
        );
        let bad = QuicClientConfig {
            idle_timeout: Duration::from_millis(10),
            ..QuicClientConfig::default()
        };
        assert_eq!(bad.validate().map_err(|e| e.field), Err("idle_timeout"));
    }

    #[test]
    fn new_refuses_bad_urls_and_reports_lanes() {
        assert!(matches!(
            QuicTransport::new("http://h/", QuicClientConfig::default()),
            Err(TransferError::Config(_))
        ));
        let t = QuicTransport::new("quic://127.0.0.1:1/x", QuicClientConfig::default())
            .expect("valid url and config");
        assert_eq!(t.default_lanes(), 8);
        assert_eq!(t.protocol(), "quic");
        // The default connection window holds two 16 MiB stream windows for each of its 4
        // lanes, so requests go ahead; on 64 MiB unread next bodies could take it all.
        assert_eq!(t.request_ahead(), Some(true));
        assert!(t.connection_stats().is_empty());
        let mut tight = QuicClientConfig::default();
        tight.tuning.connection_receive_window = 64 << 20;
        let t = QuicTransport::new("quic://127.0.0.1:1/x", tight).expect("valid url and config");
        assert_eq!(t.request_ahead(), None);
    }
}
