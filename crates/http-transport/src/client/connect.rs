//! Opening one client connection: resolve, tuned TCP connect, TLS with ALPN, and the hyper
//! HTTP/1.1 or HTTP/2 handshake with every [`Http2Config`] knob applied. The connection's
//! driver runs as its own task; the caller gets the request half.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::client::req_body::ReqBody;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use rustls::HandshakeKind;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use xfer_core::transport::{RoundTrips, TlsStart};
use xfer_core::TransferError;

use crate::client::config::AddressPolicy;
use crate::client::early::{EarlyTls, Outcome};
use crate::client::errors::{chain, from_hyper, from_tcp, from_tls_handshake};
use crate::client::stats::{MeteredTcp, SocketRecord};
use crate::client::target::{Origin, Security};
use crate::config::{Http2Config, HttpVersion, TcpConfig};
use crate::tcp;

/// The request half of a connection.
pub(crate) enum Sender {
    H1(http1::SendRequest<ReqBody>),
    H2(http2::SendRequest<ReqBody>),
}

impl Sender {
    pub fn is_closed(&self) -> bool {
        match self {
            Self::H1(s) => s.is_closed(),
            Self::H2(s) => s.is_closed(),
        }
    }

    /// Resolves once the connection can take a request; an error when it closed instead
    /// (an HTTP/1.1 connection whose last response was dropped part-way).
    pub async fn ready(&mut self) -> Result<(), hyper::Error> {
        match self {
            Self::H1(s) => s.ready().await,
            Self::H2(s) => s.ready().await,
        }
    }

    /// Open and between two requests: an HTTP/1.1 connection whose last response was read
    /// to its end (one dropped part-way is not ready, and must not carry another request).
    pub fn is_idle(&self) -> bool {
        match self {
            Self::H1(s) => s.is_ready(),
            Self::H2(s) => !s.is_closed(),
        }
    }
}

/// A byte stream a connection runs on: TCP, or TLS over TCP.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// An HTTP/1.1 connection's stream handed back by hyper once its request half was dropped
/// between two requests, with the bytes hyper had read past the last response.
pub(crate) struct RawIo {
    pub io: Box<dyn Io>,
    pub read_buf: bytes::Bytes,
}

/// A connection ready for requests.
pub(crate) struct Connection {
    pub origin: Origin,
    pub sender: Sender,
    /// HTTP/1.1: the stream, once `sender` is dropped and the last response has been read
    /// (for the pipelined lanes, which hyper cannot drive).
    pub raw: Option<tokio::sync::oneshot::Receiver<RawIo>>,
    /// The socket's statistics, to be filed under a connection index by the caller (which
    /// only knows the index once it knows the protocol ALPN picked).
    pub record: Arc<Mutex<SocketRecord>>,
    pub setup: Setup,
}

/// What setting a connection up cost, in round trips, and when it was ready.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub handshakes: RoundTrips,
    pub ready: std::time::Instant,
    /// The connection began with TLS early data: how its handshake ended, once it has.
    pub early: Option<Outcome>,
    /// The socket asked for TCP Fast Open: whether its SYN carried data the server took is
    /// known from `TCP_INFO` once the SYN-ACK is in.
    pub fast_open: Option<Arc<Mutex<SocketRecord>>>,
}

impl Setup {
    /// The round trips of a request on this connection, for a lane created at `since`: the
    /// connection's set-up counts when the lane had to wait for it.
    pub fn request(&self, since: std::time::Instant, requests: u8) -> RoundTrips {
        let mut rt = if self.ready >= since {
            self.handshakes()
        } else {
            RoundTrips::default()
        };
        rt.requests = requests;
        rt
    }

    /// The set-up's round trips as far as they are known: a handshake with early data costs
    /// none when the server took the data, and a whole one when it refused it.
    fn handshakes(&self) -> RoundTrips {
        let mut rt = self.handshakes;
        if let Some(record) = &self.fast_open {
            // The SYN carried the ClientHello and the server took it: TCP's round trip was
            // TLS's.
            if record.lock().is_ok_and(|r| r.syn_data_acked()) {
                rt.tcp = 0;
            }
        }
        if let Some(ended) = self.early.as_ref().and_then(Outcome::get) {
            (rt.handshake, rt.tls) = match ended {
                e if e.accepted => (0, TlsStart::EarlyData),
                e if e.retried_hello => (2, TlsStart::EarlyDataRefused),
                _ => (1, TlsStart::EarlyDataRefused),
            };
        }
        rt
    }

    /// Wait until the connection's handshake is complete, for a request that must not ride
    /// in early data (on HTTP/2 it shares the connection with reads that may).
    pub async fn confirmed(&self) {
        if let Some(early) = &self.early {
            early.ended().await;
        }
    }
}

/// What a connection needs to know, borrowed from the transport.
pub(crate) struct ConnectParams<'a> {
    pub version: HttpVersion,
    pub tcp: &'a TcpConfig,
    pub http2: &'a Http2Config,
    /// Lanes each HTTP/2 connection carries.
    pub streams_per_connection: usize,
    pub tls: &'a Arc<rustls::ClientConfig>,
    pub connect_timeout: Duration,
    /// Send the first request as TLS early data when a ticket allows it: only when the
    /// request that makes the connection is a read and the protocol is fixed in advance (the
    /// bytes are written before ALPN has answered).
    pub early_data: bool,
    /// Addresses connections may go to (`HttpClientConfig::address_policy`).
    pub address_policy: Option<&'a dyn AddressPolicy>,
}

/// hyper reads HTTP/1.1 bodies into a buffer that grows up to this size; larger reads mean fewer
/// wake-ups per byte at high rates (hyper's default is about 400 KiB).
const H1_MAX_READ_BUF: usize = 1 << 20;

/// Connect to `origin` and complete the HTTP handshake.
pub(crate) async fn connect(
    p: &ConnectParams<'_>,
    origin: &Origin,
) -> Result<Connection, TransferError> {
    let peer = origin.peer();
    let deadline = Instant::now() + p.connect_timeout;
    let timeout = |what: &str| TransferError::Timeout {
        peer: peer.clone(),
        what: what.to_string(),
        after: p.connect_timeout,
    };
    let addrs: Vec<SocketAddr> = tokio::time::timeout_at(
        deadline,
        tokio::net::lookup_host((origin.host.as_str(), origin.port)),
    )
    .await
    .map_err(|_| timeout("name resolution"))?
    .map_err(|source| TransferError::Connect {
        peer: peer.clone(),
        source,
    })?
    .collect();
    let addrs = allowed_addresses(p.address_policy, origin, &peer, addrs)?;
    let mut last_err = None;
    let mut connected = None;
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        // Fast Open only under TLS: a ClientHello delivered twice does no harm.
        let fast_open = origin.security == Security::Tls;
        match tcp::connect_fast_open(addr, p.tcp, left, fast_open).await {
            Ok((stream, applied)) => {
                connected = Some((stream, applied, addr));
                break;
            }
            Err(e) => {
                tracing::debug!(%peer, %addr, error = %chain(&e), "connect attempt failed");
                let e = from_tcp(&peer, e);
                if matches!(e, TransferError::Config(_)) {
                    return Err(e);
                }
                last_err = Some(e);
            }
        }
    }
    let Some((stream, applied, addr)) = connected else {
        return Err(last_err.unwrap_or_else(|| timeout("connect")));
    };
    let watch = p.address_policy.and_then(|policy| policy.connected(addr));
    let metered = MeteredTcp::new(stream, peer.clone(), applied).watched(watch);
    let record = metered.record();
    let fast_open = (origin.security == Security::Tls && p.tcp.fast_open).then(|| record.clone());

    let mut handshakes = RoundTrips {
        tcp: 1,
        ..RoundTrips::default()
    };
    let mut early = None;
    let (sender, raw) = match origin.security {
        Security::Plain => {
            let h2 = p.version == HttpVersion::Http2;
            tokio::time::timeout_at(deadline, handshake(p, &peer, metered, h2))
                .await
                .map_err(|_| timeout("http handshake"))??
        }
        Security::Tls => 'tls: {
            let name = ServerName::try_from(origin.host.clone()).map_err(|e| {
                TransferError::Config(format!("invalid tls server name {:?}: {e}", origin.host))
            })?;
            let tls = tokio_rustls::TlsConnector::from(p.tls.clone()).early_data(p.early_data);
            let stream = tokio::time::timeout_at(deadline, tls.connect(name, metered))
                .await
                .map_err(|_| timeout("tls handshake"))?
                .map_err(|e| from_tls_handshake(&peer, e))?;
            if stream.get_ref().1.is_handshaking() {
                // A ticket allowed early data: the connection is handed over at once and its
                // first request goes with the ClientHello.
                let h2 = p.version == HttpVersion::Http2;
                let (io, outcome) = EarlyTls::new(stream, h2);
                (handshakes.handshake, handshakes.tls) = (1, TlsStart::Resumed);
                early = Some(outcome);
                break 'tls tokio::time::timeout_at(deadline, handshake(p, &peer, io, h2))
                    .await
                    .map_err(|_| timeout("http handshake"))??;
            }
            (handshakes.handshake, handshakes.tls) = match stream.get_ref().1.handshake_kind() {
                Some(HandshakeKind::Resumed) => (1, TlsStart::Resumed),
                Some(HandshakeKind::FullWithHelloRetryRequest) => (2, TlsStart::Full),
                _ => (1, TlsStart::Full),
            };
            let h2 = match stream.get_ref().1.alpn_protocol() {
                Some(b"h2") => true,
                _ if p.version == HttpVersion::Http2 => {
                    return Err(TransferError::Protocol {
                        peer,
                        message: "server did not agree to h2 by alpn".to_string(),
                    })
                }
                _ => false,
            };
            tokio::time::timeout_at(deadline, handshake(p, &peer, stream, h2))
                .await
                .map_err(|_| timeout("http handshake"))??
        }
    };
    tracing::debug!(%peer, h2 = matches!(sender, Sender::H2(_)), "connected");
    Ok(Connection {
        origin: origin.clone(),
        sender,
        raw,
        record,
        setup: Setup {
            handshakes,
            ready: std::time::Instant::now(),
            early,
            fast_open,
        },
    })
}

/// The resolved addresses the policy allows, in resolution order; a name none of whose
/// addresses pass is refused (not retried: resolving again would not help).
fn allowed_addresses(
    policy: Option<&dyn AddressPolicy>,
    origin: &Origin,
    peer: &str,
    addrs: Vec<SocketAddr>,
) -> Result<Vec<SocketAddr>, TransferError> {
    let Some(policy) = policy else {
        return Ok(addrs);
    };
    let mut refused = None;
    let allowed: Vec<SocketAddr> = addrs
        .into_iter()
        .filter(|addr| match policy.check(&origin.host, *addr) {
            Ok(()) => true,
            Err(why) => {
                tracing::info!(%peer, %addr, %why, "address refused by the connection policy");
                refused.get_or_insert(why);
                false
            }
        })
        .collect();
    match refused {
        Some(why) if allowed.is_empty() => Err(TransferError::Config(format!(
            "connecting to {peer}: {why}"
        ))),
        _ => Ok(allowed),
    }
}

type Handshaken = (Sender, Option<tokio::sync::oneshot::Receiver<RawIo>>);

/// A hyper HTTP/1.1 connection again over a stream a pipelined lane let go of between two
/// requests, so the next lane (the next file of a tree) can take it from the idle pool.
pub(crate) async fn rehandshake_http1(
    p: &ConnectParams<'_>,
    peer: &str,
    io: Box<dyn Io>,
) -> Result<Handshaken, TransferError> {
    handshake(p, peer, io, false).await
}

async fn handshake<I>(
    p: &ConnectParams<'_>,
    peer: &str,
    io: I,
    h2: bool,
) -> Result<Handshaken, TransferError>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    if h2 {
        let (sender, conn) = h2_builder(p.http2, p.streams_per_connection)
            .handshake(io)
            .await
            .map_err(|e| from_hyper(peer, "h2 handshake", &e))?;
        let peer = peer.to_string();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %chain(&e), "h2 connection ended");
            }
        });
        Ok((Sender::H2(sender), None))
    } else {
        let (sender, conn) = http1::Builder::new()
            .max_buf_size(H1_MAX_READ_BUF)
            // Field names are case-insensitive, but XRootD's HTTP server (5.5) only
            // recognises `Want-Digest` spelled so: title case is what every server reads.
            .title_case_headers(true)
            .handshake(io)
            .await
            .map_err(|e| from_hyper(peer, "http/1.1 handshake", &e))?;
        let peer = peer.to_string();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            // Without shutdown, the stream outlives hyper's dispatcher: a pipelined lane may
            // take it over; when none wants it, it is shut down here as hyper would have.
            match conn.without_shutdown().await {
                Ok(parts) => {
                    let raw = RawIo {
                        io: Box::new(parts.io.into_inner()),
                        read_buf: parts.read_buf,
                    };
                    if let Err(mut unwanted) = tx.send(raw) {
                        use tokio::io::AsyncWriteExt as _;
                        let _ = unwanted.io.shutdown().await;
                    }
                }
                Err(e) => tracing::debug!(%peer, error = %chain(&e), "http/1.1 connection ended"),
            }
        });
        Ok((Sender::H1(sender), Some(rx)))
    }
}

/// The hyper HTTP/2 client builder with every [`Http2Config`] knob applied, as the transport
/// uses it for connections carrying `streams` lanes each (public for tests and tools that
/// drive hyper directly).
pub fn h2_builder(cfg: &Http2Config, streams: usize) -> http2::Builder<TokioExecutor> {
    let mut b = http2::Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .max_frame_size(cfg.frame_size_u32())
        .max_concurrent_streams(cfg.max_concurrent_streams)
        .max_send_buf_size(cfg.send_buffer_usize())
        // Streams we open before the server's SETTINGS arrive; our lanes never exceed K.
        .initial_max_send_streams(streams)
        // Lanes that give up on a chunk reset their stream; allow a burst of those per lane.
        .max_concurrent_reset_streams(streams.saturating_mul(4).max(16));
    if cfg.adaptive_window {
        b.adaptive_window(true);
    } else {
        b.initial_stream_window_size(cfg.stream_window_u32())
            .initial_connection_window_size(cfg.connection_window_u32());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refuses loopback, as a server's copy policy does.
    #[derive(Debug)]
    struct NoLoopback;

    impl AddressPolicy for NoLoopback {
        fn check(&self, _host: &str, addr: SocketAddr) -> Result<(), String> {
            if addr.ip().is_loopback() {
                Err(format!("{addr} is loopback"))
            } else {
                Ok(())
            }
        }
    }

    fn origin() -> Origin {
        Origin {
            security: Security::Tls,
            host: "storage.example".to_string(),
            port: 443,
        }
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn only_the_addresses_that_pass_are_connected_to() {
        let resolved = vec![
            addr("127.0.0.1:443"),
            addr("192.0.2.7:443"),
            addr("[::1]:443"),
        ];
        let kept = allowed_addresses(Some(&NoLoopback), &origin(), "p", resolved.clone());
        assert_eq!(kept.ok(), Some(vec![addr("192.0.2.7:443")]));
        // Without a policy, every address.
        assert_eq!(
            allowed_addresses(None, &origin(), "p", resolved).ok(),
            Some(vec![
                addr("127.0.0.1:443"),
                addr("192.0.2.7:443"),
                addr("[::1]:443")
            ])
        );
    }

    #[test]
    fn a_name_with_no_allowed_address_is_refused_and_not_retried() {
        let resolved = vec![addr("127.0.0.1:443"), addr("[::1]:443")];
        match allowed_addresses(Some(&NoLoopback), &origin(), "p", resolved) {
            Err(e @ TransferError::Config(_)) => {
                assert!(!e.is_retryable());
                assert!(e.to_string().contains("127.0.0.1:443 is loopback"), "{e}");
            }
            other => panic!("not refused: {other:?}"),
        }
    }
}
