//! End-to-end tests of the HTTP server over real loopback sockets: HTTP/1.1 spoken raw over a
//! `TcpStream` (so nothing in a client library hides what went over the wire), HTTP/2 through
//! hyper's client (h2c prior knowledge and TLS with ALPN), and hand-built HTTP/2 frames where
//! the limits under test are ones a well-behaved client never hits.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use xfer_common::synthetic::fill;
use xfer_common::tls::{client_config, self_signed, server_config, ClientTlsOptions};
use xfer_common::FaultInjection;
use xfer_core::Sha256Digest;
use xfer_http::server::{HttpServer, ServerConfig};

const SIZE: usize = 100_000;
const SECRET: &[u8] = b"TOPSECRET-outside-the-root";
/// Upper bound for anything a test waits on; generous on a busy shared machine.
const PATIENCE: Duration = Duration::from_secs(30);

fn data() -> Vec<u8> {
    let mut v = vec![0u8; SIZE];
    fill(99, 0, &mut v);
    v
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir root");
    std::fs::create_dir_all(&outside).expect("mkdir outside");
    std::fs::write(root.join("data.bin"), data()).expect("write data");
    std::fs::write(root.join("empty.bin"), b"").expect("write empty");
    std::fs::write(outside.join("secret.txt"), SECRET).expect("write secret");
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("link")).expect("symlink");
    std::os::unix::fs::symlink(&outside, root.join("sub/out")).expect("symlink dir");
    Fixture {
        _dir: dir,
        root,
        outside,
    }
}

fn config(root: &Path) -> ServerConfig {
    let mut cfg = ServerConfig::new(root);
    cfg.listen = "127.0.0.1:0".parse().expect("addr");
    cfg
}

struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(PATIENCE, &mut self.task)
            .await
            .expect("server stops")
            .expect("server task");
    }
}

async fn start(cfg: ServerConfig) -> Running {
    let server = HttpServer::bind(cfg).await.expect("bind");
    let addr = server.local_addr();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async {
        let _ = rx.await;
    }));
    Running {
        addr,
        stop: Some(tx),
        task,
    }
}

#[derive(Debug)]
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    trailers: Vec<(String, String)>,
    chunked: bool,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Send raw bytes, read until the server closes, parse one HTTP/1.1 response.
async fn raw(addr: SocketAddr, request: &[u8]) -> Raw {
    let bytes = raw_bytes(addr, request).await;
    parse_response(&bytes).unwrap_or_else(|| {
        panic!(
            "unparsable response: {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(400)])
        )
    })
}

async fn raw_bytes(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(request).await.expect("send");
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("server answers and closes")
        .expect("read");
    out
}

/// As [`raw_bytes`], but a connection the server resets (it closes a socket whose request it did
/// not read, which the kernel turns into RST) counts as closed with whatever arrived first.
async fn raw_bytes_or_reset(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut out = Vec::new();
    if s.write_all(request).await.is_err() {
        return out;
    }
    let read = tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("server answers and closes");
    match read {
        Ok(_) => out,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ) =>
        {
            out
        }
        Err(e) => panic!("read: {e}"),
    }
}

fn get(path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{extra}\r\n").into_bytes()
}

fn parse_fields(block: &str) -> Vec<(String, String)> {
    block
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn parse_response(bytes: &[u8]) -> Option<Raw> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    let (status_line, fields) = head.split_once("\r\n").unwrap_or((head, ""));
    let status = status_line.split(' ').nth(1)?.parse().ok()?;
    let headers = parse_fields(fields);
    let rest = &bytes[end + 4..];
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let mut raw = Raw {
        status,
        headers,
        body: Vec::new(),
        trailers: Vec::new(),
        chunked,
    };
    if !chunked {
        raw.body = rest.to_vec();
        return Some(raw);
    }
    let mut pos = 0;
    loop {
        let line_end = pos + rest[pos..].windows(2).position(|w| w == b"\r\n")?;
        let size_str = std::str::from_utf8(&rest[pos..line_end]).ok()?;
        let size = usize::from_str_radix(size_str.split(';').next()?.trim(), 16).ok()?;
        pos = line_end + 2;
        if size == 0 {
            let tail = std::str::from_utf8(&rest[pos..]).ok()?;
            raw.trailers = parse_fields(tail);
            return Some(raw);
        }
        raw.body.extend_from_slice(rest.get(pos..pos + size)?);
        pos += size + 2;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_follow_rfc9110() {
    let fx = fixture();
    let srv = start(config(&fx.root)).await;
    let d = data();

    let whole = raw(srv.addr, &get("/data.bin", "")).await;
    assert_eq!(whole.status, 200);
    assert_eq!(whole.body, d);
    assert_eq!(whole.header("content-length"), Some("100000"));
    assert_eq!(whole.header("accept-ranges"), Some("bytes"));
    let etag = whole.header("etag").expect("etag").to_string();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    assert!(whole.header("last-modified").is_some());

    let r = raw(srv.addr, &get("/data.bin", "Range: bytes=10-19\r\n")).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, d[10..20]);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/100000"));
    assert_eq!(r.header("content-length"), Some("10"));

    let r = raw(srv.addr, &get("/data.bin", "Range: bytes=-500\r\n")).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, d[SIZE - 500..]);
    assert_eq!(r.header("content-range"), Some("bytes 99500-99999/100000"));

    let r = raw(srv.addr, &get("/data.bin", "Range: bytes=99990-\r\n")).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, d[99_990..]);

    let r = raw(
        srv.addr,
        &get("/data.bin", "Range: bytes=99990-5000000\r\n"),
    )
    .await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, d[99_990..]);

    let r = raw(srv.addr, &get("/data.bin", "Range: bytes=100000-\r\n")).await;
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */100000"));
    assert!(r.body.is_empty());

    for ignorable in [
        "Range: bytes=0-1,5-6\r\n",
        "Range: bytes=9-2\r\n",
        "Range: pages=1-2\r\n",
        "Range: bytes=abc\r\n",
        "Range: bytes=0-1\r\nRange: bytes=2-3\r\n",
    ] {
        let r = raw(srv.addr, &get("/data.bin", ignorable)).await;
        assert_eq!(r.status, 200, "{ignorable:?}");
        assert_eq!(r.body, d, "{ignorable:?}");
    }

    let r = raw(
        srv.addr,
        &get(
            "/data.bin",
            &format!("Range: bytes=5-9\r\nIf-Range: {etag}\r\n"),
        ),
    )
    .await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, d[5..10]);
    for stale in [
        "\"0-0-0\"".to_string(),
        format!("W/{etag}"),
        "Sun, 06 Nov 1994 08:49:37 GMT".to_string(),
    ] {
        let r = raw(
            srv.addr,
            &get(
                "/data.bin",
                &format!("Range: bytes=5-9\r\nIf-Range: {stale}\r\n"),
            ),
        )
        .await;
        assert_eq!(r.status, 200, "If-Range {stale}");
        assert_eq!(r.body, d);
    }

    let r = raw(srv.addr, &get("/empty.bin", "Range: bytes=0-\r\n")).await;
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */0"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_gives_headers_only_and_other_methods_get_405() {
    let fx = fixture();
    let srv = start(config(&fx.root)).await;
    let r = raw(
        srv.addr,
        b"HEAD /data.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=0-9\r\nConnection: close\r\n\r\n",
    )
    .await;
    // Range is defined for GET only: HEAD describes the whole representation.
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("100000"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert!(r.header("etag").is_some());
    assert!(r.body.is_empty());

    for method in ["POST", "PUT", "DELETE", "MKCOL"] {
        let req = format!(
            "{method} /data.bin HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let r = raw(srv.addr, req.as_bytes()).await;
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS, PROPFIND"));
    }
    // OPTIONS is how WebDAV clients probe: read-only class 1.
    let r = raw(
        srv.addr,
        b"OPTIONS /data.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("dav"), Some("1"));
    assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS, PROPFIND"));
    // The file is untouched by all of that.
    assert_eq!(
        std::fs::read(fx.root.join("data.bin")).expect("read"),
        data()
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_trailer_carries_the_digest_of_the_range() {
    let fx = fixture();
    let mut cfg = config(&fx.root);
    cfg.read_block_size = 4096;
    let srv = start(cfg).await;
    let d = data();
    let r = raw(
        srv.addr,
        &get(
            "/data.bin",
            "Range: bytes=1000-60999\r\nWant-Content-Digest: sha-256=5\r\nTE: trailers\r\n",
        ),
    )
    .await;
    assert_eq!(r.status, 206);
    assert!(r.chunked, "trailers need chunked encoding: {:?}", r.headers);
    assert_eq!(r.header("content-length"), None);
    assert_eq!(r.header("trailer"), Some("content-digest"));
    assert_eq!(r.body, d[1000..61_000]);
    let sent = r.trailer("content-digest").expect("content-digest trailer");
    assert_eq!(
        Sha256Digest::from_header_value(sent).expect("parse"),
        Some(Sha256Digest::of(&d[1000..61_000]))
    );

    // Without `TE: trailers` the client cannot take trailers: a plain length-delimited body.
    let r = raw(
        srv.addr,
        &get(
            "/data.bin",
            "Range: bytes=0-99\r\nWant-Content-Digest: sha-256\r\n",
        ),
    )
    .await;
    assert_eq!(r.status, 206);
    assert!(!r.chunked);
    assert_eq!(r.header("content-length"), Some("100"));
    assert_eq!(r.body, d[..100]);

    // sha-256=0 means "not acceptable": no trailer.
    let r = raw(
        srv.addr,
        &get(
            "/data.bin",
            "Range: bytes=0-99\r\nWant-Content-Digest: sha-256=0\r\nTE: trailers\r\n",
        ),
    )
    .await;
    assert!(!r.chunked);
    assert!(r.trailers.is_empty());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repr_digest_appears_once_computed() {
    let fx = fixture();
    let srv = start(config(&fx.root)).await;
    let want = Sha256Digest::of(&data());
    let mut seen = None;
    for _ in 0..300 {
        let r = raw(
            srv.addr,
            b"HEAD /data.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .await;
        if let Some(v) = r.header("repr-digest") {
            seen = Sha256Digest::from_header_value(v).expect("parse");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, Some(want));
    srv.stop().await;
}

async fn h2_over<T>(io: T) -> hyper::client::conn::http2::SendRequest<Empty<Bytes>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    send
}

async fn h2_get(
    send: &mut hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    uri: &str,
    headers: &[(&str, &str)],
) -> (http::response::Parts, Bytes, Option<http::HeaderMap>) {
    let mut req = http::Request::get(uri);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp = send
        .send_request(req.body(Empty::new()).expect("request"))
        .await
        .expect("response");
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await.expect("body");
    let trailers = collected.trailers().cloned();
    (parts, collected.to_bytes(), trailers)
}

fn trailer_digest(trailers: &Option<http::HeaderMap>) -> Option<Sha256Digest> {
    let v = trailers.as_ref()?.get("content-digest")?.to_str().ok()?;
    Sha256Digest::from_header_value(v).ok().flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_serves_ranges_with_trailers() {
    let fx = fixture();
    let srv = start(config(&fx.root)).await;
    let d = data();
    let tcp = TcpStream::connect(srv.addr).await.expect("connect");
    let mut send = h2_over(tcp).await;
    let base = format!("http://{}", srv.addr);
    let (parts, body, trailers) = h2_get(
        &mut send,
        &format!("{base}/data.bin"),
        &[
            ("range", "bytes=500-70499"),
            ("want-content-digest", "sha-256"),
        ],
    )
    .await;
    assert_eq!(parts.version, http::Version::HTTP_2);
    assert_eq!(parts.status, 206);
    assert_eq!(body, d[500..70_500]);
    assert_eq!(
        trailer_digest(&trailers),
        Some(Sha256Digest::of(&d[500..70_500]))
    );
    // Several streams on the one connection, at once.
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let mut s = send.clone();
        let uri = format!("{base}/data.bin");
        tasks.push(tokio::spawn(async move {
            let range = format!("bytes={}-{}", i * 1000, i * 1000 + 999);
            h2_get(&mut s, &uri, &[("range", range.as_str())]).await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let (parts, body, _) = t.await.expect("task");
        assert_eq!(parts.status, 206);
        assert_eq!(body, d[i * 1000..i * 1000 + 1000]);
    }
    // HTTP/1.1 still works on the same port.
    let r = raw(srv.addr, &get("/data.bin", "Range: bytes=0-3\r\n")).await;
    assert_eq!(r.body, d[..4]);
    srv.stop().await;
}

async fn tls_connect(
    addr: SocketAddr,
    ca: &Path,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let opts = ClientTlsOptions {
        client_identity: None,
        ca_certs: vec![ca.to_path_buf()],
        dangerous_insecure: false,
    };
    let cfg = client_config(&opts, alpn).expect("client config");
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    connector.connect(name, tcp).await.expect("tls handshake")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_negotiates_h2_or_http1_by_alpn() {
    let fx = fixture();
    let certs = fx.root.parent().expect("parent").join("certs");
    let ss = self_signed(&["localhost".to_string()], &certs).expect("cert");
    // The server sets its own ALPN list whatever the config holds.
    let tls = server_config(&ss.cert_path, &ss.key_path, &[]).expect("server tls");
    let mut cfg = config(&fx.root);
    cfg.tls = Some(Arc::new(tls));
    let srv = start(cfg).await;
    let d = data();

    let stream = tls_connect(srv.addr, &ss.cert_path, &[b"h2", b"http/1.1"]).await;
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    let mut send = h2_over(stream).await;
    let (parts, body, trailers) = h2_get(
        &mut send,
        "https://localhost/data.bin",
        &[("range", "bytes=-1000"), ("want-content-digest", "sha-256")],
    )
    .await;
    assert_eq!(parts.status, 206);
    assert_eq!(body, d[SIZE - 1000..]);
    assert_eq!(
        trailer_digest(&trailers),
        Some(Sha256Digest::of(&d[SIZE - 1000..]))
    );

    let mut stream = tls_connect(srv.addr, &ss.cert_path, &[b"http/1.1"]).await;
    assert_eq!(
        stream.get_ref().1.alpn_protocol(),
        Some(b"http/1.1".as_slice())
    );
    stream
        .write_all(&get("/data.bin", "Range: bytes=0-15\r\n"))
        .await
        .expect("send");
    let mut out = Vec::new();
    // rustls reports a missing close_notify as an error after the data; the bytes are there.
    let _ = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut out))
        .await
        .expect("answer");
    let r = parse_response(&out).expect("response");
    assert_eq!(r.status, 206);
    assert_eq!(r.body, d[..16]);

    // A client that does not trust the certificate cannot talk to it.
    let untrusting = client_config(&ClientTlsOptions::default(), &[b"h2"]).expect("cfg");
    let tcp = TcpStream::connect(srv.addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    assert!(tokio_rustls::TlsConnector::from(Arc::new(untrusting))
        .connect(name, tcp)
        .await
        .is_err());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traversal_never_leaks_outside_the_root() {
    let fx = fixture();
    let srv = start(config(&fx.root)).await;
    let outside_name = fx
        .outside
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name")
        .to_string();
    let attempts = [
        format!("/../{outside_name}/secret.txt"),
        format!("/sub/../../{outside_name}/secret.txt"),
        format!("/%2e%2e/{outside_name}/secret.txt"),
        format!("/%2E%2E%2f{outside_name}%2fsecret.txt"),
        format!("/sub%2f..%2f..%2f{outside_name}%2fsecret.txt"),
        format!("/..%5c{outside_name}%5csecret.txt"),
        format!("//{}/secret.txt", fx.outside.display()),
        format!("/%2f{}", fx.outside.join("secret.txt").display()),
        "/link".to_string(),
        "/sub/out/secret.txt".to_string(),
        "/%00".to_string(),
    ];
    for path in &attempts {
        let r = raw(srv.addr, &get(path, "")).await;
        assert!(
            (400..500).contains(&r.status),
            "{path}: status {}",
            r.status
        );
        assert!(
            !r.body.windows(SECRET.len()).any(|w| w == SECRET),
            "{path} leaked the secret"
        );
    }
    // Directories inside the root are listed; no listing names what lies outside.
    for path in ["/", "/sub/", "/sub/?manifest"] {
        let r = raw(srv.addr, &get(path, "")).await;
        assert_eq!(r.status, 200, "{path}");
        let body = String::from_utf8_lossy(&r.body);
        for leak in ["secret", outside_name.as_str(), "link", "./out", "\"out\""] {
            assert!(!body.contains(leak), "{path} names {leak:?}: {body}");
        }
    }
    // Absolute-form request target, as sent to proxies.
    let req = format!(
        "GET http://t/../{outside_name}/secret.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    );
    let bytes = raw_bytes(srv.addr, req.as_bytes()).await;
    assert!(!bytes.windows(SECRET.len()).any(|w| w == SECRET));
    // Over HTTP/2 as well.
    let tcp = TcpStream::connect(srv.addr).await.expect("connect");
    let mut send = h2_over(tcp).await;
    let (parts, body, _) = h2_get(
        &mut send,
        &format!("http://{}/%2e%2e/{outside_name}/secret.txt", srv.addr),
        &[],
    )
    .await;
    assert!(parts.status.is_client_error());
    assert!(!body.windows(SECRET.len()).any(|w| w == SECRET));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_4xx_and_the_server_lives_on() {
    let fx = fixture();
    let srv = start(config(&fx.root)).await;
    let cases: Vec<Vec<u8>> = vec![
        b"HELLO\r\n\r\n".to_vec(),
        b"GET\r\n\r\n".to_vec(),
        b"GET /data.bin HTTP/9.9\r\nHost: t\r\n\r\n".to_vec(),
        b"GET /data.bin HTTP/1.1\r\nBad Header\r\n\r\n".to_vec(),
        b"GET /da\x01ta HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(),
        format!(
            "GET /data.bin HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
            "a".repeat(200_000)
        )
        .into_bytes(),
        {
            let mut many = b"GET /data.bin HTTP/1.1\r\nHost: t\r\n".to_vec();
            for i in 0..500 {
                many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
            }
            many.extend_from_slice(b"\r\n");
            many
        },
        b"GET /.xfer/synthetic?size=zzz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".to_vec(),
        b"GET /.xfer/synthetic?size=2000TiB HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            .to_vec(),
        b"GET /data.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=\xff\xfe\r\nConnection: close\r\n\r\n"
            .to_vec(),
    ];
    for (i, req) in cases.iter().enumerate() {
        let r = raw(srv.addr, req).await;
        // A Range that is not text is ignored (200); everything else is refused: 400 for
        // syntax, 431 for oversized heads.
        if i == cases.len() - 1 {
            assert_eq!(r.status, 200, "case {i}");
        } else {
            assert!(matches!(r.status, 400 | 431), "case {i}: {}", r.status);
        }
    }
    let r = raw(srv.addr, &get("/data.bin", "Range: bytes=0-0\r\n")).await;
    assert_eq!(r.status, 206);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthetic_resource_serves_generated_bytes() {
    let fx = fixture();
    let srv = start(config(&fx.root)).await;
    let mut want = vec![0u8; 1 << 20];
    fill(3, 0, &mut want);
    let r = raw(
        srv.addr,
        &get(
            "/.xfer/synthetic?size=1MiB&seed=3",
            "Range: bytes=12345-99999\r\nWant-Content-Digest: sha-256\r\nTE: trailers\r\n",
        ),
    )
    .await;
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 12345-99999/1048576"));
    assert_eq!(r.body, want[12_345..100_000]);
    assert_eq!(
        Sha256Digest::from_header_value(r.trailer("content-digest").expect("trailer"))
            .expect("parse"),
        Some(Sha256Digest::of(&want[12_345..100_000]))
    );
    let whole = raw(srv.addr, &get("/.xfer/synthetic?size=1MiB&seed=3", "")).await;
    assert_eq!(whole.status, 200);
    assert_eq!(whole.body, want);
    let etag = whole.header("etag").expect("etag").to_string();
    let other = raw(srv.addr, &get("/.xfer/synthetic?size=1MiB&seed=4", "")).await;
    assert_ne!(other.header("etag"), Some(etag.as_str()));
    let r = raw(srv.addr, &get("/.xfer/synthetic", "")).await;
    assert_eq!(r.status, 400);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_hook_flips_one_byte_after_hashing() {
    let fx = fixture();
    let fault = Arc::new(FaultInjection::new(Some(5000), 1));
    let mut cfg = config(&fx.root);
    cfg.dangerous_fault = Some(fault.clone());
    cfg.read_block_size = 4096;
    let srv = start(cfg).await;
    let d = data();
    let req = get(
        "/data.bin",
        "Range: bytes=0-9999\r\nWant-Content-Digest: sha-256\r\nTE: trailers\r\n",
    );
    // A range that does not cover the byte is not touched and does not use the budget.
    let r = raw(srv.addr, &get("/data.bin", "Range: bytes=6000-6999\r\n")).await;
    assert_eq!(r.body, d[6000..7000]);
    assert_eq!(fault.times_used(), 0);

    let r = raw(srv.addr, &req).await;
    assert_eq!(r.status, 206);
    let diffs: Vec<usize> = (0..10_000).filter(|&i| r.body[i] != d[i]).collect();
    assert_eq!(diffs, vec![5000]);
    let digest = Sha256Digest::from_header_value(r.trailer("content-digest").expect("trailer"))
        .expect("parse");
    assert_eq!(digest, Some(Sha256Digest::of(&d[..10_000])));
    assert_ne!(digest, Some(Sha256Digest::of(&r.body)));

    // Budget spent: the retry is clean.
    let r = raw(srv.addr, &req).await;
    assert_eq!(r.body, d[..10_000]);
    assert_eq!(fault.times_used(), 1);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_surplus_clients_are_cut_off() {
    let fx = fixture();
    let mut cfg = config(&fx.root);
    cfg.header_read_timeout = Duration::from_millis(300);
    cfg.max_connections = 2;
    let srv = start(cfg).await;

    // A client that sends half a request head and stalls is disconnected.
    let mut slow = TcpStream::connect(srv.addr).await.expect("connect");
    slow.write_all(b"GET /data.bin HTTP/1.1\r\nHo")
        .await
        .expect("send");
    // A client that says nothing at all is disconnected too.
    let mut silent = TcpStream::connect(srv.addr).await.expect("connect");
    // While those two hold both slots, a third connection is closed at once. (Grace for the
    // server to admit both: it exposes no admission count to wait on.)
    tokio::time::sleep(Duration::from_millis(50)).await;
    let extra = raw_bytes_or_reset(srv.addr, &get("/data.bin", "")).await;
    assert!(
        extra.is_empty() || parse_response(&extra).is_some_and(|r| r.status >= 400),
        "third connection was served"
    );
    for s in [&mut slow, &mut silent] {
        let mut buf = Vec::new();
        let closed = tokio::time::timeout(PATIENCE, s.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "stalled client was not disconnected");
        if let Some(r) = parse_response(&buf) {
            assert!(r.status >= 400);
        }
    }
    // Slots free again: a normal request works (retry while the server notices the closes).
    let mut ok = false;
    for _ in 0..100 {
        let bytes = raw_bytes_or_reset(srv.addr, &get("/data.bin", "Range: bytes=0-0\r\n")).await;
        if parse_response(&bytes).is_some_and(|r| r.status == 206) {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "server did not recover its connection slots");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_are_closed() {
    let fx = fixture();
    let mut cfg = config(&fx.root);
    cfg.idle_timeout = Duration::from_millis(300);
    let srv = start(cfg).await;
    let tcp = TcpStream::connect(srv.addr).await.expect("connect");
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    let conn = tokio::spawn(conn);
    let (parts, _, _) = h2_get(&mut send, &format!("http://{}/data.bin", srv.addr), &[]).await;
    assert_eq!(parts.status, 200);
    // Then silence: the server hangs up and the client's connection task ends.
    let ended = tokio::time::timeout(PATIENCE, conn).await;
    assert!(ended.is_ok(), "idle connection was never closed");
    srv.stop().await;
}

// --- hand-built HTTP/2 frames -----------------------------------------------------------

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK block for `GET http://t<path>`: indexed `:method GET` (2) and `:scheme http` (6),
/// literal `:path` (name index 4) and `:authority` (name index 1), without Huffman coding.
fn get_headers(path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x04, path.len() as u8];
    b.extend_from_slice(path.as_bytes());
    b.extend_from_slice(&[0x01, 0x01, b't']);
    b
}

async fn read_frame(s: &mut TcpStream) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).await.ok()?;
    let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await.ok()?;
    Some((head[3], head[4], stream, payload))
}

const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const END_STREAM_AND_HEADERS: u8 = 0x5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_max_concurrent_streams_is_enforced() {
    let fx = fixture();
    let mut cfg = config(&fx.root);
    cfg.http2.max_concurrent_streams = 2;
    let srv = start(cfg).await;
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    let mut out = PREFACE.to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE = 0: the server cannot send DATA, so streams stay open.
    out.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]));
    // Wait for the server's SETTINGS (with its limit) before opening streams, as a client must.
    s.write_all(&out).await.expect("send");
    let mut acked = false;
    while !acked {
        let (kind, flags, _, _) = tokio::time::timeout(PATIENCE, read_frame(&mut s))
            .await
            .expect("frame in time")
            .expect("frame");
        if kind == SETTINGS && flags & 1 == 0 {
            s.write_all(&frame(SETTINGS, 1, 0, &[])).await.expect("ack");
            acked = true;
        }
    }
    let block = get_headers("/.xfer/synthetic?size=1MiB");
    let mut out = Vec::new();
    for id in [1u32, 3, 5] {
        out.extend(frame(HEADERS, END_STREAM_AND_HEADERS, id, &block));
    }
    s.write_all(&out).await.expect("send");
    let refused = tokio::time::timeout(PATIENCE, async {
        while let Some((kind, _, stream, payload)) = read_frame(&mut s).await {
            if kind == RST_STREAM && stream == 5 {
                return Some(u32::from_be_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ]));
            }
        }
        None
    })
    .await
    .expect("server answered");
    // REFUSED_STREAM (0x7) or PROTOCOL_ERROR (0x1) are both a refusal of the third stream.
    assert!(matches!(refused, Some(0x7) | Some(0x1)), "{refused:?}");
    // The two admitted streams can never finish (zero window); hang up so shutdown is quick.
    drop(s);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_rapid_reset_flood_does_not_take_the_server_down() {
    let fx = fixture();
    let srv = start(config(&fx.root)).await;
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    let block = get_headers("/.xfer/synthetic?size=1GiB");
    for i in 0..5000u32 {
        let id = 2 * i + 1;
        out.extend(frame(HEADERS, END_STREAM_AND_HEADERS, id, &block));
        out.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
    }
    // The server may close on us part-way through; that is the defence working.
    let _ = s.write_all(&out).await;
    let got_goaway = tokio::time::timeout(PATIENCE, async {
        while let Some((kind, _, _, _)) = read_frame(&mut s).await {
            if kind == GOAWAY {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    drop(s);
    // Whether or not it said GOAWAY, a fresh client is served.
    let r = raw(srv.addr, &get("/data.bin", "Range: bytes=0-9\r\n")).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, data()[..10]);
    let tcp = TcpStream::connect(srv.addr).await.expect("connect");
    let mut send = h2_over(tcp).await;
    let (parts, _, _) = h2_get(&mut send, &format!("http://{}/data.bin", srv.addr), &[]).await;
    assert_eq!(parts.status, 200);
    // h2 answers a flood of streams reset before they were accepted with GOAWAY.
    assert!(got_goaway, "no GOAWAY after a rapid-reset flood");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_inflight_responses_finish() {
    let fx = fixture();
    let srv = start(config(&fx.root)).await;
    let size = 8usize << 20;
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    s.write_all(&get(&format!("/.xfer/synthetic?size={size}&seed=1"), ""))
        .await
        .expect("send");
    // Some of the body has arrived: the response is in flight.
    let mut first = vec![0u8; 4096];
    s.read_exact(&mut first).await.expect("first bytes");
    let Running { addr, stop, task } = srv;
    let _ = stop.expect("stop handle").send(());
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest))
        .await
        .expect("response completes")
        .expect("read");
    first.extend_from_slice(&rest);
    let r = parse_response(&first).expect("response");
    assert_eq!(r.status, 200);
    let mut want = vec![0u8; size];
    fill(1, 0, &mut want);
    assert!(r.body == want, "body differs");
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("serve returns")
        .expect("task");
    // No longer accepting.
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_truncated_while_served_is_not_completed() {
    let fx = fixture();
    let big = 64usize << 20;
    {
        let mut v = vec![0u8; big];
        fill(5, 0, &mut v);
        std::fs::write(fx.root.join("big.bin"), v).expect("write");
    }
    let mut cfg = config(&fx.root);
    cfg.read_block_size = 64 * 1024;
    cfg.read_ahead = 0;
    cfg.tcp.send_buffer = Some(64 * 1024);
    cfg.repr_digest = false;
    let srv = start(cfg).await;
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    s.write_all(&get("/big.bin", "")).await.expect("send");
    let mut first = vec![0u8; 1024];
    s.read_exact(&mut first).await.expect("first bytes");
    std::fs::OpenOptions::new()
        .write(true)
        .open(fx.root.join("big.bin"))
        .and_then(|f| f.set_len(1 << 20))
        .expect("truncate");
    let mut rest = Vec::new();
    // A reset is as good as a close here: either way the body is cut short.
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest))
        .await
        .expect("server ends the response");
    first.extend_from_slice(&rest);
    let r = parse_response(&first).expect("head");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some(big.to_string().as_str()));
    assert!(
        r.body.len() < big,
        "server sent a complete body for a truncated file"
    );
    srv.stop().await;
}

/// `Want-Digest: adler32` (RFC 3230, what gfal-sum sends) answered in a `Digest` header over
/// a real socket, for HEAD and GET alike.
#[tokio::test]
async fn want_digest_adler32_is_answered() {
    let fx = fixture();
    std::fs::write(fx.root.join("wiki.txt"), b"Wikipedia").expect("write");
    let srv = start(config(&fx.root)).await;
    for method in ["HEAD", "GET"] {
        let req = format!(
            "{method} /wiki.txt HTTP/1.1\r\nHost: x\r\nWant-Digest: adler32\r\nConnection: close\r\n\r\n"
        );
        let r = raw(srv.addr, req.as_bytes()).await;
        assert_eq!(r.status, 200, "{method}");
        assert_eq!(r.header("digest"), Some("adler32=11e60398"), "{method}");
        let req = format!(
            "{method} /wiki.txt HTTP/1.1\r\nHost: x\r\nWant-Repr-Digest: adler=5\r\nWant-Repr-Digest: md5=2\r\nConnection: close\r\n\r\n"
        );
        let r = raw(srv.addr, req.as_bytes()).await;
        assert_eq!(r.status, 200, "{method}");
        let repr = r.header("repr-digest").unwrap_or_default();
        assert!(repr.contains("adler=:EeYDmA==:"), "{method}: {repr}");
        assert!(
            !repr.contains("md5"),
            "{method}: only the best is computed: {repr}"
        );
    }
    srv.stop().await;
}
