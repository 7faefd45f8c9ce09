//! The xfer HTTP server: the HTTP/1.1 and HTTP/2 codec over the shared request core
//! ([`xfer_service::Service`]), with TLS (ALPN `h2`, `http/1.1`) or plain TCP (HTTP/1.1 or h2c
//! with prior knowledge, detected per connection).
//!
//! What a request means is decided by the request core, once for every codec: `GET`/`HEAD`
//! with single byte ranges (RFC 9110 §14), `If-Range`, strong `ETag` and `Last-Modified`, RFC
//! 9530 digests (`Content-Digest` as a trailer computed while sending when the client asks
//! with `Want-Content-Digest: sha-256`; `Repr-Digest` once the digest cache knows the
//! whole-resource value), directory listings (`PROPFIND`, JSON), and, where the access rules
//! grant write scope and uploads are switched on, uploads (`PUT`, parallel chunks, resumable
//! uploads) and third-party copies (`COPY`). This module owns what is HTTP's: connections,
//! admission, framing, bodies and trailers. Not done: `multipart/byteranges`, compression,
//! conditional `If-None-Match`/`If-Match`.
//!
//! ```text
//!  accept ─► connection cap ─► [TLS + ALPN | sniff h2c preface] ─► hyper http1 / http2
//!                                                                     │ per request
//!                handler: decode ─► xfer_service::Service::respond ─► encode plan
//!                                                                     │
//!        ServeBody: pump over xfer_service::BodyStream ─► data frames ─► trailer
//! ```
//!
//! Hostile peers: paths are resolved by [`xfer_common::paths`] (no traversal, no symlinks
//! out); request heads are capped (64 KiB, 100 fields) and must arrive within
//! `header_read_timeout`; silent connections close after `idle_timeout`; which connections are
//! served is decided by the admission shared with QUIC (`xfer_service::admission`: total and
//! per-address caps, idle connections closed to make room, 503 for the rest); HTTP/2 streams are capped by
//! `max_concurrent_streams` and reset floods end in GOAWAY (h2's pending-reset and
//! local-error-reset limits, set explicitly here).

mod body;
mod config;
mod early_tls;
mod handler;
pub(crate) mod io;
mod stall;
pub mod tcp_resume;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use xfer_common::BudgetAccount;
use xfer_service::admission::{self, Admission, Admit, Ticket};
use xfer_service::{Service, ServiceSource};

pub use config::{ServerConfig, DEFAULT_MAX_EARLY_DATA};

use crate::config::ConfigError;
use crate::tcp::TcpError;
use body::ServeBody;
use early_tls::{Accepted, EarlyState};
use handler::ConnCtx;
use io::ServerIo;
use stall::{StallClock, StallExecutor, StreamWatch};

/// The HTTP/2 connection preface a client with prior knowledge sends first (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Largest request head accepted, bytes (HTTP/1.1 head; HTTP/2 header list).
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Most header fields in an HTTP/1.1 request.
const MAX_HEADERS: usize = 100;
/// HTTP/2 streams the client may reset before the server has accepted them, before GOAWAY.
/// h2's default (20) is kept explicit here because it is the CVE-2023-44487 ("rapid reset")
/// defence.
const H2_MAX_PENDING_ACCEPT_RESETS: usize = 20;
/// TLS 1.3 tickets sent per connection when early data is on (rustls' default is 2).
const TICKETS_PER_CONNECTION: usize = 8;
/// Sessions the server remembers for resumption when early data is on (rustls' default is
/// 256; each ticket is one): 512 connections' worth of tickets, a few hundred KiB.
const SESSION_CACHE: usize = 4096;
/// HTTP/2 streams the server may reset because of peer errors before it sends GOAWAY.
const H2_MAX_LOCAL_ERROR_RESETS: usize = 1024;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("served root {root} is not a usable directory")]
    Root {
        root: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot tune the listening socket on {addr}")]
    Tcp {
        addr: SocketAddr,
        #[source]
        source: TcpError,
    },
}

/// What every connection and request shares.
pub(crate) struct Shared {
    /// The request core; this server is its HTTP codec.
    pub service: Arc<Service>,
    cfg: ServerConfig,
    tls: Option<TlsAcceptor>,
    #[cfg(target_os = "linux")]
    tcp_resume: Option<Arc<tcp_resume::TcpResume>>,
}

/// A bound, not yet serving, HTTP server.
pub struct HttpServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    tcp_resume: tcp_resume::TcpResumeStatus,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer")
            .field("local_addr", &self.local_addr)
            .field("root", &self.shared.service.config().root)
            .field("tls", &self.shared.tls.is_some())
            .finish()
    }
}

impl HttpServer {
    /// Serve a request core of its own, built from `cfg` ([`ServerConfig::service_config`]):
    /// see [`HttpServer::bind_with`].
    pub async fn bind(cfg: ServerConfig) -> Result<Self, ServerError> {
        let service = ServiceSource::from(cfg.service_config()?).into_service();
        Self::bind_with(cfg, service).await
    }

    /// Validate `cfg` and bind the listening socket (tuned with `cfg.tcp` before `listen`, so
    /// accepted sockets inherit buffers and congestion control), to serve `service`, the
    /// request core the process's other codecs may share. What `cfg` says of the core (root,
    /// digests, access, uploads, copies, mirrors, streaming and memory budget) is the core's
    /// business, not read here: `service` has its own.
    pub async fn bind_with(cfg: ServerConfig, service: Arc<Service>) -> Result<Self, ServerError> {
        cfg.validate()?;
        let root = service.config().root.clone();
        let addr = cfg.listen;
        let listener = listen(addr, &cfg)?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ServerError::Bind { addr, source })?;
        let tls = cfg.tls.as_ref().map(|tls| {
            let mut tls = (**tls).clone();
            tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            if cfg.max_early_data_size > 0 {
                tls.max_early_data_size = cfg.max_early_data_size;
                // Answer early reads in the server's first flight.
                tls.send_half_rtt_data = true;
                // Early data needs single-use tickets from a session cache (rustls refuses it
                // with stateless tickets): one per connection a client may open after its
                // first, so each of 8 lanes can resume.
                tls.send_tls13_tickets = TICKETS_PER_CONNECTION;
                tls.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE);
            }
            TlsAcceptor::from(Arc::new(tls))
        });
        #[cfg(target_os = "linux")]
        let (tcp_resume, tcp_resume_status) =
            start_tcp_resume(local_addr.port(), &cfg.tcp_resume, &cfg.path_share);
        #[cfg(not(target_os = "linux"))]
        let tcp_resume_status = if cfg.tcp_resume.enabled {
            tcp_resume::TcpResumeStatus::Unavailable("needs Linux".into())
        } else {
            tcp_resume::TcpResumeStatus::Off
        };
        tracing::info!(%local_addr, root = %root.display(), tls = tls.is_some(), "http server listening");
        Ok(Self {
            listener,
            local_addr,
            tcp_resume: tcp_resume_status,
            shared: Arc::new(Shared {
                service,
                cfg,
                tls,
                #[cfg(target_os = "linux")]
                tcp_resume,
            }),
        })
    }

    /// The address actually bound (the port when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Whether TCP resume runs, or why not.
    pub fn tcp_resume(&self) -> &tcp_resume::TcpResumeStatus {
        &self.tcp_resume
    }

    /// The request core this server is a codec of.
    pub fn service(&self) -> &Arc<Service> {
        &self.shared.service
    }

    /// Serve until `shutdown` completes, then stop accepting, ask every connection to finish
    /// its in-flight requests (HTTP/2 GOAWAY, HTTP/1.1 `Connection: close`), and wait up to
    /// `shutdown_grace` for them before dropping the rest.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let Self {
            listener, shared, ..
        } = self;
        let (stop_tx, stop_rx) = watch::channel(false);
        let admission = Admission::new(
            shared.cfg.max_connections,
            shared.cfg.max_connections_per_address,
        );
        let refusals = Arc::new(Semaphore::new(admission::REFUSAL_SLOTS));
        let mut sampler = tokio::time::interval(admission::IDLE_FOR_EVICTION / 4);
        sampler.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut tasks = JoinSet::new();
        let mut refused = 0u64;
        let mut last_warning = None;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let progress = Arc::new(AtomicU64::new(0));
                        let admitted = match admission.admit(peer.ip(), Arc::clone(&progress)) {
                            Admit::Serve(ticket) => Admitted::Slot(ticket),
                            Admit::Refuse(why) => {
                                refused += 1;
                                // At most one warning per second: a flood must not become a log flood.
                                if last_warning.is_none_or(|t: Instant| t.elapsed() >= Duration::from_secs(1)) {
                                    tracing::warn!(%peer, max = shared.cfg.max_connections, per_address = shared.cfg.max_connections_per_address, refused, why, "refusing new connections with 503");
                                    last_warning = Some(Instant::now());
                                }
                                match refusals.clone().try_acquire_owned() {
                                    Ok(permit) => Admitted::Refusing { _slot: permit },
                                    // Too many to even answer: closed at once.
                                    Err(_) => continue,
                                }
                            }
                        };
                        tasks.spawn(serve_connection(stream, peer, shared.clone(), stop_rx.clone(), admitted, progress));
                    }
                    Err(e) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                _ = sampler.tick() => admission.sample(),
            }
        }
        drop(listener);
        let _ = stop_tx.send(true);
        let open = tasks.len();
        if open > 0 {
            tracing::info!(
                connections = open,
                "shutting down; letting in-flight requests finish"
            );
        }
        let drained = tokio::time::timeout(shared.cfg.shutdown_grace, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                connections = tasks.len(),
                "shutdown grace period over; closing remaining connections"
            );
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
    }
}

#[cfg(target_os = "linux")]
fn start_tcp_resume(
    port: u16,
    cfg: &tcp_resume::TcpResumeConfig,
    share: &xfer_common::path_share::PathShare,
) -> (
    Option<Arc<tcp_resume::TcpResume>>,
    tcp_resume::TcpResumeStatus,
) {
    if !cfg.enabled {
        return (None, tcp_resume::TcpResumeStatus::Off);
    }
    match tcp_resume::TcpResume::start(port, cfg, share.clone()) {
        Ok(r) => {
            tracing::info!(port, "tcp resume on: returning peers skip slow start");
            (Some(r), tcp_resume::TcpResumeStatus::On)
        }
        Err(e) => {
            tracing::info!(error = %e, "tcp resume unavailable; connections start from the kernel's initial window");
            (
                None,
                tcp_resume::TcpResumeStatus::Unavailable(e.to_string()),
            )
        }
    }
}

fn listen(addr: SocketAddr, cfg: &ServerConfig) -> Result<TcpListener, ServerError> {
    let bind_err = |source| ServerError::Bind { addr, source };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(bind_err)?;
    socket.set_reuse_address(true).map_err(bind_err)?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // Best effort: serve IPv4 too where the system allows dual-stack sockets.
        let _ = socket.set_only_v6(false);
    }
    crate::tcp::apply_listener(&socket, &cfg.tcp)
        .map_err(|source| ServerError::Tcp { addr, source })?;
    // Under TLS only: what rides in a SYN is then a ClientHello, harmless if delivered twice.
    if cfg.tls.is_some() && cfg.tcp.fast_open && cfg.tcp.fast_open_queue > 0 {
        match crate::tcp::enable_fast_open_listener(&socket, cfg.tcp.fast_open_queue) {
            Ok(()) if !crate::tcp::fast_open_server_enabled() => tracing::info!(
                "TCP Fast Open is asked for but net.ipv4.tcp_fastopen lacks 0x2 (server): \
                 clients pay TCP's round trip (sysctl -w net.ipv4.tcp_fastopen=3)"
            ),
            Ok(()) => {}
            Err(e) => tracing::warn!(error = %e, "TCP Fast Open not available on the listener"),
        }
    }
    socket.bind(&addr.into()).map_err(bind_err)?;
    socket.listen(1024).map_err(bind_err)?;
    socket.set_nonblocking(true).map_err(bind_err)?;
    TcpListener::from_std(socket.into()).map_err(bind_err)
}

/// The I/O under hyper for an accepted connection, measured for TCP resume when it is on.
fn server_io(
    shared: &Shared,
    prefix: Bytes,
    stream: TcpStream,
    peer: SocketAddr,
    progress: &Arc<AtomicU64>,
) -> ServerIo<TcpStream> {
    let io = ServerIo::new(prefix, stream, progress.clone());
    #[cfg(target_os = "linux")]
    let io = {
        let mut policies: Vec<Box<dyn io::SendPolicy>> = Vec::new();
        if let Some(r) = &shared.tcp_resume {
            policies.push(Box::new(r.probe(peer.ip(), io.socket())));
        }
        io.with_sampler(io::SendSampler::new(policies))
    };
    #[cfg(not(target_os = "linux"))]
    let _ = (shared, peer);
    io
}

async fn serve_connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    admitted: Admitted,
    progress: Arc<AtomicU64>,
) {
    let _ = stream.set_nodelay(shared.cfg.tcp.nodelay);
    let handshake_timeout = shared.cfg.header_read_timeout;
    // A slot asked back before the first request (the server is full and this client has
    // not spoken yet) ends the connection here.
    let evict = match &admitted {
        Admitted::Slot(t) => Some(t.evict.clone()),
        Admitted::Refusing { .. } => None,
    };
    let evicted = async move {
        match evict {
            Some(t) => t.cancelled_owned().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(evicted);
    match shared.tls.clone() {
        Some(acceptor) => {
            let io = server_io(&shared, Bytes::new(), stream, peer, &progress);
            let accepted = tokio::select! {
                r = tokio::time::timeout(handshake_timeout, early_tls::accept(&acceptor, io)) => r,
                _ = &mut evicted => {
                    tracing::debug!(%peer, "closing a silent connection to make room");
                    return;
                }
            };
            let tls = match accepted {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "tls handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "tls handshake timed out");
                    return;
                }
            };
            let session = tls.session();
            let h2 = session.alpn_protocol() == Some(b"h2".as_slice());
            let protocol = if h2 { "h2" } else { "http/1.1" };
            let client_certificate = session
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|c| Arc::new(c.as_ref().to_vec()));
            let mut conn = Conn {
                protocol,
                peer,
                client_certificate,
                admitted,
                early: None,
            };
            match tls {
                Accepted::Complete(tls) => drive(tls, h2, conn, shared, stop, progress).await,
                Accepted::Early(tls) => {
                    conn.early = Some(tls.state());
                    drive(tls, h2, conn, shared, stop, progress).await
                }
            }
        }
        None => {
            let sniffed = tokio::select! {
                r = tokio::time::timeout(handshake_timeout, sniff(&mut stream)) => r,
                _ = &mut evicted => {
                    tracing::debug!(%peer, "closing a silent connection to make room");
                    return;
                }
            };
            let (prefix, h2) = match sniffed {
                Ok(Ok(Some(found))) => found,
                Ok(Ok(None)) => return,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "connection failed before the first request");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "no request within the header read timeout");
                    return;
                }
            };
            let protocol = if h2 { "h2c" } else { "http/1.1" };
            let io = server_io(&shared, prefix, stream, peer, &progress);
            let conn = Conn {
                protocol,
                peer,
                client_certificate: None,
                admitted,
                early: None,
            };
            drive(io, h2, conn, shared, stop, progress).await;
        }
    }
}

/// Read just enough of a plain connection to tell the h2c preface from an HTTP/1.1 request.
/// Returns the bytes read (to replay) and whether it is HTTP/2; `None` if the peer closed
/// without sending anything.
async fn sniff(stream: &mut TcpStream) -> std::io::Result<Option<(Bytes, bool)>> {
    let mut buf = [0u8; H2_PREFACE.len()];
    let mut len = 0;
    while len < buf.len() && buf[..len] == H2_PREFACE[..len] {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            if len == 0 {
                return Ok(None);
            }
            break;
        }
        len += n;
    }
    let h2 = len == H2_PREFACE.len() && buf == *H2_PREFACE;
    Ok(Some((Bytes::copy_from_slice(&buf[..len]), h2)))
}

/// hyper's two connection types, as far as shutting down goes.
trait Graceful: Future<Output = Result<(), hyper::Error>> {
    fn graceful(self: Pin<&mut Self>);
}

impl<I, S> Graceful for hyper::server::conn::http1::Connection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = ServeBody>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    fn graceful(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S> Graceful for hyper::server::conn::http2::Connection<I, S, StallExecutor>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = ServeBody>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: Send + 'static,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    fn graceful(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Why a connection is being served: a slot, or only to be told 503.
enum Admitted {
    Slot(Ticket),
    /// Held for the connection's life: it bounds how many refusals are answered at once.
    Refusing {
        _slot: OwnedSemaphorePermit,
    },
}

/// Who is on the other end of a connection.
struct Conn {
    protocol: &'static str,
    peer: SocketAddr,
    client_certificate: Option<Arc<Vec<u8>>>,
    admitted: Admitted,
    /// The connection began with TLS early data.
    early: Option<Arc<EarlyState>>,
}

async fn drive<I>(
    io: I,
    h2: bool,
    conn: Conn,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    progress: Arc<AtomicU64>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Conn {
        protocol,
        peer,
        client_certificate,
        admitted,
        early,
    } = conn;
    let (evict, refusing, idle_override) = match &admitted {
        Admitted::Slot(t) => (Some(t.evict.clone()), false, None),
        // A refused client gets its 503 and little time to read it.
        Admitted::Refusing { .. } => (None, true, Some(Duration::from_secs(5))),
    };
    tracing::debug!(%peer, protocol, client_certificate = client_certificate.is_some(), "connection");
    // Counted while served; one kept only to be told 503 is not.
    let _open = (!refusing).then(|| xfer_common::metrics::global().open_connection(protocol));
    let cfg = &shared.cfg;
    let idle = idle_override.unwrap_or(cfg.idle_timeout);
    // Every block this connection's responses read counts against its share of the budget
    // and its address's (xfer_common::memory, "Fair shares").
    let account = shared.service.config().stream.budget.account(peer.ip());
    // HTTP/1.1's 503 closes its connection; HTTP/2's winds down with GOAWAY once answered.
    let refused = (refusing && h2).then(CancellationToken::new);
    let evict = evict.or_else(|| refused.clone());
    let ctx = Arc::new(ConnCtx {
        peer,
        protocol,
        refusing,
        refused,
        client_certificate,
        early,
        shared: shared.clone(),
    });
    let service = service_fn(move |req| handler::handle(req, ctx.clone()));
    let io = TokioIo::new(io);
    if h2 {
        let h2c = &cfg.http2;
        let mut b = hyper::server::conn::http2::Builder::new(StallExecutor {
            stall: cfg.stall_timeout,
            peer,
            account: account.clone(),
        });
        b.timer(TokioTimer::new())
            .initial_stream_window_size(h2c.stream_window_u32())
            .initial_connection_window_size(h2c.connection_window_u32())
            // After the windows: setting a window turns the adaptive window off.
            .adaptive_window(h2c.adaptive_window)
            .max_frame_size(h2c.frame_size_u32())
            .max_concurrent_streams(h2c.max_concurrent_streams)
            .max_send_buf_size(h2c.send_buffer_usize())
            .max_header_list_size(MAX_HEADER_BYTES as u32)
            .max_pending_accept_reset_streams(H2_MAX_PENDING_ACCEPT_RESETS)
            .max_local_error_reset_streams(H2_MAX_LOCAL_ERROR_RESETS);
        run(
            b.serve_connection(io, service),
            peer,
            stop,
            progress,
            idle,
            evict,
            None,
            account,
        )
        .await;
    } else {
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(TokioTimer::new())
            .header_read_timeout(cfg.header_read_timeout)
            .max_headers(MAX_HEADERS)
            .max_header_size(MAX_HEADER_BYTES)
            // Queue body blocks instead of copying them into one growing write buffer, so
            // what waits for the socket is the blocks themselves, counted by the memory budget.
            .writev(true)
            .keep_alive(true);
        run(
            b.serve_connection(io, service),
            peer,
            stop,
            progress,
            idle,
            evict,
            Some(cfg.stall_timeout),
            account,
        )
        .await;
    }
}

/// Drive a connection to its end, asking it to wind down on shutdown and dropping it when
/// it moved no bytes for `idle`. With `stall` (HTTP/1.1, one response at a time), the
/// connection is also dropped when its response sent nothing for that long; HTTP/2 watches
/// each stream instead ([`StallExecutor`]). HTTP/1.1 responses, read while the connection is
/// polled, count against `account`.
#[allow(clippy::too_many_arguments)]
async fn run<C: Graceful>(
    conn: C,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
    progress: Arc<AtomicU64>,
    idle: Duration,
    evict: Option<CancellationToken>,
    stall: Option<Duration>,
    account: BudgetAccount,
) {
    let evicted = async {
        match &evict {
            Some(t) => t.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(evicted);
    tokio::pin!(conn);
    let mut stopping = *stop.borrow();
    if stopping {
        conn.as_mut().graceful();
    }
    // Sample progress four times per idle period: closes between 3/4 and 5/4 of `idle` after
    // the last byte moved, with no clock read on the data path.
    const SAMPLES: u32 = 4;
    let mut ticker = tokio::time::interval(idle / SAMPLES);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut last = progress.load(Ordering::Relaxed);
    let mut quiet = 0u32;
    let watch = Arc::new(StreamWatch::default());
    let mut clock = StallClock::new(Arc::clone(&watch));
    let mut stall_ticker = tokio::time::interval(StallClock::period(
        stall.unwrap_or(Duration::from_secs(3600)),
    ));
    stall_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Bodies created while the connection is polled report to `watch`.
            res = std::future::poll_fn(|cx| account.sync_scope(|| watch.scope(|| conn.as_mut().poll(cx)))) => {
                if let Err(e) = res {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful();
            }
            // The server is full and this connection was idle: it closes (after any request
            // that has just begun) so a waiting client can be served.
            _ = &mut evicted, if !stopping => {
                stopping = true;
                tracing::debug!(%peer, "closing an idle connection to make room");
                conn.as_mut().graceful();
            }
            _ = stall_ticker.tick(), if stall.is_some() => {
                if clock.sample() {
                    tracing::info!(%peer, after = ?stall, "HTTP/1.1 response sent nothing for the stall timeout; closing its connection");
                    xfer_common::metrics::global().count_stall_reset("http/1.1");
                    return;
                }
            }
            _ = ticker.tick() => {
                let now = progress.load(Ordering::Relaxed);
                if now == last {
                    quiet += 1;
                    if quiet >= SAMPLES {
                        tracing::info!(%peer, after = ?idle, "closing idle connection");
                        return;
                    }
                } else {
                    last = now;
                    quiet = 0;
                }
            }
        }
    }
}
