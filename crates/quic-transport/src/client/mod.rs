//! The client: [`QuicTransport`] implements `xfer_core::transport::Transport` over `xfer/1`.
//!
//! Lanes map onto M connections (lane `i` rides connection `i % M`), each with its own UDP
//! socket and quinn endpoint: quinn drives all connections of one endpoint from one task, so
//! separate endpoints let M connections use M cores. A lane's request is one bidirectional
//! stream. Connections are opened on first use and reopened after they die.
//!
//! It does not retry: errors are classified (`TransferError::is_retryable`) and the engine
//! decides.

//!
//! - `config`: [`QuicClientConfig`] and the quinn transport settings it becomes;
//! - this module: the connection pool (`Inner`, one slot per connection);
//! - `transport`: the `Transport` implementation (stat, lanes, listings, close);
//! - `lane`: a lane's requests; `body`: response bodies; `head`: response heads;
//! - `errors`: quinn's errors as `TransferError`s; `upload`: the upload requests.

use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use quinn::{Connection, Endpoint, RecvStream};
use xfer_common::listing::manifest::MANIFEST_MEDIA_TYPE;
use xfer_common::tls;
use xfer_core::checksum::ChecksumAlgorithm;
use xfer_core::transport::{
    FirstBody, FirstRequest, ListResponse, Opened, RemoteInfo, RoundTrips, Speculated, TlsStart,
};
use xfer_core::TransferError;

use crate::socket::{bind_udp, route_max_udp_payload, wrap_for_quinn, SocketBuffers};
use crate::tuning::ConfigError;
use crate::url::QuicUrl;
use crate::wire::{status, ErrorCode, Method, Request, ResponseHead, ALPN};

mod body;
mod config;
mod errors;
mod head;
mod lane;
mod transport;
mod upload;

use body::{QuicBody, StreamedBody};
use config::transport_config;
pub use config::QuicClientConfig;
use errors::*;
use head::*;
use lane::QuicLane;

/// A client for one `quic://` resource.
pub struct QuicTransport {
    inner: Arc<Inner>,
}

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use xfer_core::layout::LaneLayout;
    use xfer_core::transport::Transport as _;

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
