//! A small scripted HTTP server on loopback for client tests: serves one in-memory resource at
//! `/file` with switchable misbehaviour (no ranges, no HEAD, truncated bodies, changed ETag,
//! fixed statuses, redirects), over HTTP/1.1, h2c, or TLS with ALPN. It logs each request.

#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Empty, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use xfer_common::ranges::{content_range, parse_range, RangeOutcome};
use xfer_core::Sha256Digest;

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Bytes that differ along the whole length, so a misplaced range cannot compare equal.
pub fn pattern(len: usize) -> Bytes {
    xfer_test_support::random_bytes(len, 7).into()
}

/// How the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Http1,
    H2c,
    /// TLS; ALPN offers h2 and http/1.1 unless `tls_h1_only`.
    Tls,
}

#[derive(Debug, Clone)]
pub struct Logged {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    pub version: http::Version,
}

/// The server's behaviour; fields may be changed while it runs.
pub struct Script {
    pub data: Mutex<Bytes>,
    pub etag: Mutex<String>,
    pub honour_ranges: bool,
    pub allow_head: bool,
    pub send_accept_ranges: bool,
    /// Answer `Want-Content-Digest` with a trailer and `Want-Repr-Digest` with a header.
    pub digests: bool,
    /// Send a wrong `Content-Digest` trailer.
    pub bad_digest: bool,
    /// Send only this many body bytes while promising the full length.
    pub truncate_to: Option<usize>,
    /// Path → status to answer with (body "nope").
    pub statuses: HashMap<String, u16>,
    /// Path → Location for a 302.
    pub redirects: HashMap<String, String>,
    pub tls_h1_only: bool,
    /// On this connection (1-based, in accept order) GET bodies send nothing after the head.
    pub stall_bodies_on_connection: Option<usize>,
    pub log: Mutex<Vec<Logged>>,
    pub connections: AtomicUsize,
    /// TLS connections whose handshake resumed an earlier session.
    pub resumed: AtomicUsize,
    /// Wait this long before answering each request (a long path's round trip).
    pub head_delay: Option<std::time::Duration>,
    /// Answer this many requests `425 Too Early` first, as a proxy that will not forward early
    /// data does.
    pub too_early: AtomicUsize,
}

impl Script {
    pub fn new(data: Bytes) -> Self {
        Self {
            data: Mutex::new(data),
            etag: Mutex::new("\"v1\"".to_string()),
            honour_ranges: true,
            allow_head: true,
            send_accept_ranges: true,
            digests: true,
            bad_digest: false,
            truncate_to: None,
            statuses: HashMap::new(),
            redirects: HashMap::new(),
            tls_h1_only: false,
            stall_bodies_on_connection: None,
            log: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
            resumed: AtomicUsize::new(0),
            head_delay: None,
            too_early: AtomicUsize::new(0),
        }
    }

    pub fn requests(&self) -> Vec<Logged> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn set_etag(&self, etag: &str) {
        if let Ok(mut e) = self.etag.lock() {
            *e = etag.to_string();
        }
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub script: Arc<Script>,
    /// PEM of the server's self-signed certificate (TLS only).
    pub cert: Option<PathBuf>,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.cert.is_some() { "https" } else { "http" };
        // "localhost" so certificate name checks have a name to check.
        let host = if self.cert.is_some() {
            "localhost".to_string()
        } else {
            self.addr.ip().to_string()
        };
        format!("{scheme}://{host}:{}{path}", self.addr.port())
    }

    pub async fn start(
        wire: Wire,
        script: Script,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let dir = tempfile::tempdir()?;
        let script = Arc::new(script);
        let (acceptor, cert) = if wire == Wire::Tls {
            let ss = xfer_common::tls::self_signed(
                &["localhost".to_string(), "127.0.0.1".to_string()],
                dir.path(),
            )?;
            let alpn: &[&[u8]] = if script.tls_h1_only {
                &[b"http/1.1"]
            } else {
                &[b"h2", b"http/1.1"]
            };
            let cfg = xfer_common::tls::server_config(&ss.cert_path, &ss.key_path, alpn)?;
            (
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(cfg))),
                Some(ss.cert_path),
            )
        } else {
            (None, None)
        };
        let s = script.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let conn_no = s.connections.fetch_add(1, Ordering::SeqCst) + 1;
                let s = s.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match acceptor {
                        None => serve(TokioIo::new(stream), wire == Wire::H2c, s, conn_no).await,
                        Some(acc) => {
                            let Ok(tls) = acc.accept(stream).await else {
                                return;
                            };
                            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                            if tls.get_ref().1.handshake_kind()
                                == Some(rustls::HandshakeKind::Resumed)
                            {
                                s.resumed.fetch_add(1, Ordering::SeqCst);
                            }
                            serve(TokioIo::new(tls), h2, s, conn_no).await;
                        }
                    }
                });
            }
        });
        Ok(Self {
            addr,
            script,
            cert,
            _dir: dir,
            task,
        })
    }
}

async fn serve<I>(io: I, h2: bool, script: Arc<Script>, conn_no: usize)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| {
        let script = script.clone();
        async move {
            if let Some(delay) = script.head_delay {
                tokio::time::sleep(delay).await;
            }
            Ok::<_, Infallible>(handle(&script, req, conn_no))
        }
    });
    if h2 {
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(io, svc)
            .await;
    } else {
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, svc)
            .await;
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn text(status: u16, msg: &'static str) -> Response<Body> {
    let mut r =
        Response::new(http_body_util::Full::new(Bytes::from_static(msg.as_bytes())).boxed());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

fn handle(script: &Script, req: Request<Incoming>, conn_no: usize) -> Response<Body> {
    let path = req.uri().path().to_string();
    if let Ok(mut log) = script.log.lock() {
        log.push(Logged {
            method: req.method().clone(),
            path: req
                .uri()
                .path_and_query()
                .map_or(path.clone(), |p| p.to_string()),
            headers: req.headers().clone(),
            version: req.version(),
        });
    }
    if let Some(status) = script.statuses.get(&path) {
        return text(*status, "nope");
    }
    let left = script.too_early.load(Ordering::SeqCst);
    if left > 0 {
        script.too_early.store(left - 1, Ordering::SeqCst);
        return text(425, "too early");
    }
    if let Some(loc) = script.redirects.get(&path) {
        let mut r = text(302, "moved");
        if let Ok(v) = HeaderValue::from_str(loc) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return r;
    }
    if path != "/file" {
        return text(404, "not found");
    }
    let head = req.method() == Method::HEAD;
    if head && !script.allow_head {
        return text(405, "no head");
    }
    let data = script.data.lock().map(|d| d.clone()).unwrap_or_default();
    let etag = script.etag.lock().map(|e| e.clone()).unwrap_or_default();
    let size = data.len() as u64;
    let h = req.headers();
    let get = |name: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let mut outcome = match (script.honour_ranges, get("range")) {
        (true, Some(r)) => parse_range(&r, size),
        _ => RangeOutcome::Full,
    };
    if let (Some(ir), RangeOutcome::Partial(_)) = (get("if-range"), &outcome) {
        if ir != etag {
            outcome = RangeOutcome::Full;
        }
    }
    let (status, range) = match outcome {
        RangeOutcome::Full => (StatusCode::OK, 0..size),
        RangeOutcome::Partial(r) => (StatusCode::PARTIAL_CONTENT, r),
        RangeOutcome::Unsatisfiable => {
            let mut r = text(416, "");
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return r;
        }
    };
    let start = usize::try_from(range.start).unwrap_or(0);
    let end = usize::try_from(range.end).unwrap_or(0);
    let slice = data.slice(start..end);
    let want_trailer = script.digests
        && !head
        && get("want-content-digest").is_some_and(|v| v.contains("sha-256"))
        && get("te").is_some_and(|v| v.contains("trailers"));
    let digest = if script.bad_digest {
        Sha256Digest::of(b"something else")
    } else {
        Sha256Digest::of(&slice)
    };
    let sent = match script.truncate_to {
        Some(n) if n < slice.len() => slice.slice(..n),
        _ => slice.clone(),
    };
    let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = Vec::new();
    if !head {
        // Several frames so the client sees more than one piece.
        for c in sent.chunks(64 * 1024) {
            frames.push(Ok(Frame::data(sent.slice_ref(c))));
        }
        if want_trailer {
            let mut t = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(&digest.to_header_value()) {
                t.insert("content-digest", v);
            }
            frames.push(Ok(Frame::trailers(t)));
        }
    }
    let body: Body = if head {
        Empty::new().boxed()
    } else if script.stall_bodies_on_connection == Some(conn_no) {
        StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, Infallible>,
        >())
        .boxed()
    } else {
        // Pause before the end so hyper flushes what it has: a truncated body then reaches the
        // client as a head and some bytes before the connection dies, as from a crashing server.
        let pause = script.truncate_to.is_some();
        let frames = futures_util::stream::iter(frames);
        let tail = futures_util::stream::unfold(pause, |pause| async move {
            if pause {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            None::<(Result<Frame<Bytes>, Infallible>, bool)>
        });
        StreamBody::new(futures_util::stream::StreamExt::chain(frames, tail)).boxed()
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let hm = r.headers_mut();
    let mut put = |k: &'static str, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            hm.insert(k, v);
        }
    };
    // Without trailers the length is announced, so truncation is a short body; with trailers
    // HTTP/1.1 must use chunked encoding, and the short body ends the chunked stream early.
    if !want_trailer || head {
        put("content-length", slice.len().to_string());
    }
    put("etag", etag);
    put("last-modified", "Sat, 21 Nov 2026 10:00:00 GMT".into());
    if script.send_accept_ranges && script.honour_ranges {
        put("accept-ranges", "bytes".into());
    }
    if status == StatusCode::PARTIAL_CONTENT {
        put("content-range", content_range(&range, size));
    }
    if script.digests && get("want-repr-digest").is_some() {
        put("repr-digest", Sha256Digest::of(&data).to_header_value());
    }
    if want_trailer {
        put("trailer", "content-digest".into());
    }
    r
}
