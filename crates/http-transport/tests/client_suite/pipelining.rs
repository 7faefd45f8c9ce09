//! HTTP/1.1 pipelining on the wire, against a raw scripted server: the request a lane sends
//! ahead reaches the server on the same connection before the body in front of it has ended,
//! answers are read in order whatever their framing, and a server that closes, redirects or
//! loses a pipelined request costs a fresh connection, never data.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use xfer_core::transport::{RemoteInfo, Transport};
use xfer_core::Sha256Digest;
use xfer_http::{HttpTransport, HttpVersion};

use crate::client_suite::support::{pattern, TestResult};
use crate::client_suite::{client_cfg, fetch, range_req};

#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    /// `Content-Length` bodies.
    Length,
    /// Chunked bodies with a `Content-Digest` trailer.
    Chunked,
    /// The first answer on each connection is its last; `announce` says so in the head.
    CloseAfterFirst { announce: bool },
    /// Every request for `/file` after the first is redirected (to the same bytes elsewhere).
    RedirectSecond,
    /// Whatever follows a request in the buffer is discarded once it is answered (a server
    /// that mishandles pipelining): the pipelined request is never answered.
    DropPipelined,
}

struct RawServer {
    addr: std::net::SocketAddr,
    /// Whether, on the first connection, the second request arrived before the first body was
    /// complete (the server waits for it half-way through that body; no other waits).
    pipelined: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    /// (connection, request line) of every request.
    requests: Arc<Mutex<Vec<(usize, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawServer {
    async fn start(data: Bytes, behaviour: Behaviour) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let pipelined = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (p, c, r) = (pipelined.clone(), connections.clone(), requests.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let conn = c.fetch_add(1, Ordering::SeqCst) + 1;
                let (data, p, r) = (data.clone(), p.clone(), r.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, conn, data, behaviour, p, r).await;
                });
            }
        });
        Ok(Self {
            addr,
            pipelined,
            connections,
            requests,
            task,
        })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/file", self.addr.port())
    }

    fn request_lines(&self) -> Vec<(usize, String)> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

fn find(buf: &[u8], what: &[u8]) -> Option<usize> {
    buf.windows(what.len()).position(|w| w == what)
}

/// Read until `buf` holds a whole request head; take it off and return it.
async fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..p]).to_string();
            buf.drain(..p + 4);
            return Some(head);
        }
        let mut tmp = [0u8; 4096];
        let n = s.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

/// Wait until `buf` holds a whole request head, without taking it.
async fn head_arrives(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    while find(buf, b"\r\n\r\n").is_none() {
        let mut tmp = [0u8; 4096];
        match s.read(&mut tmp).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    true
}

fn range_of(head: &str) -> Option<(usize, usize)> {
    let line = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("range:"))?;
    let spec = line.split_once('=')?.1.trim();
    let (a, b) = spec.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn chunked(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in bytes.chunks(1000) {
        out.extend_from_slice(format!("{:x};ext=1\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out
}

async fn serve(
    mut s: TcpStream,
    conn: usize,
    data: Bytes,
    behaviour: Behaviour,
    pipelined: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<(usize, String)>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut served = 0;
    while let Some(head) = read_head(&mut s, &mut buf).await {
        let line = head.lines().next().unwrap_or_default().to_string();
        if let Ok(mut r) = requests.lock() {
            r.push((conn, line.clone()));
        }
        let earlier = requests.lock().map(|r| r.len()).unwrap_or(0) > 1;
        if behaviour == Behaviour::RedirectSecond && earlier && line.contains(" /file ") {
            s.write_all(
                b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /moved\r\nContent-Length: 0\r\n\r\n",
            )
            .await?;
            served += 1;
            continue;
        }
        let Some((a, b)) = range_of(&head) else {
            s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await?;
            continue;
        };
        let body = &data[a..=b];
        let close = matches!(behaviour, Behaviour::CloseAfterFirst { .. });
        let mut out = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{b}/{}\r\n",
            data.len()
        );
        if behaviour == Behaviour::Chunked {
            out.push_str("Transfer-Encoding: chunked\r\nTrailer: Content-Digest\r\n");
        } else {
            out.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        if behaviour == (Behaviour::CloseAfterFirst { announce: true }) {
            out.push_str("Connection: close\r\n");
        }
        out.push_str("\r\n");
        let wire = if behaviour == Behaviour::Chunked {
            chunked(body)
        } else {
            body.to_vec()
        };
        let half = wire.len() / 2;
        s.write_all(out.as_bytes()).await?;
        s.write_all(&wire[..half]).await?;
        s.flush().await?;
        if conn == 1 && served == 0 && !close {
            // Pipelined: the next request comes while this body is still arriving. Not
            // pipelined, it never would; the generous limit only bounds the test.
            if let Ok(true) =
                tokio::time::timeout(Duration::from_secs(10), head_arrives(&mut s, &mut buf)).await
            {
                pipelined.fetch_add(1, Ordering::SeqCst);
            }
        }
        s.write_all(&wire[half..]).await?;
        if behaviour == Behaviour::Chunked {
            let digest = Sha256Digest::of(body).to_header_value();
            s.write_all(format!("0\r\nContent-Digest: {digest}\r\n\r\n").as_bytes())
                .await?;
        }
        s.flush().await?;
        served += 1;
        if behaviour == Behaviour::DropPipelined {
            buf.clear();
        }
        if close {
            return s.shutdown().await;
        }
    }
    Ok(())
}

/// A resource of `size` bytes at `url` that takes ranges, as `stat` would describe it.
fn described(url: &str, size: u64) -> RemoteInfo {
    RemoteInfo {
        url: url.to_string(),
        size,
        etag: None,
        last_modified: None,
        accepts_ranges: true,
        sha256: None,
    }
}

/// 600,000 bytes behind a server with `Content-Length` answers, an HTTP/1.1 transport for
/// them, and their description.
async fn plain_setup(
) -> Result<(Bytes, RawServer, HttpTransport, RemoteInfo), Box<dyn std::error::Error + Send + Sync>>
{
    let data = pattern(600_000);
    let srv = RawServer::start(data.clone(), Behaviour::Length).await?;
    let url = srv.url();
    let t = HttpTransport::new(&url, client_cfg(HttpVersion::Http1))?;
    let info = described(&url, data.len() as u64);
    Ok((data, srv, t, info))
}

/// Bytes and trailer digest of one body.
type Got = (Vec<u8>, Option<Sha256Digest>);

/// Fetch two halves of the resource the way the engine does: the second on the lane's twin,
/// sent while the first body is being read.
async fn two_halves(
    url: &str,
    size: u64,
) -> Result<(Got, Got), Box<dyn std::error::Error + Send + Sync>> {
    let mut cfg = client_cfg(HttpVersion::Http1);
    // Short, for the server that never answers a pipelined request.
    cfg.idle_timeout = Duration::from_secs(1);
    let t = HttpTransport::new(url, cfg)?;
    let info = described(url, size);
    let mut a = t.open_lane(0).await?;
    let mut b = a.twin().ok_or("an HTTP/1.1 lane has a twin")?;
    let first = range_req(&info, 0..size / 2);
    let second = range_req(&info, size / 2..size);
    let (x, y) = tokio::join!(fetch(a.as_mut(), &first), fetch(b.as_mut(), &second));
    Ok((x?, y?))
}

#[tokio::test]
async fn the_request_sent_ahead_arrives_before_the_body_in_front_of_it_ends() -> TestResult {
    for behaviour in [Behaviour::Length, Behaviour::Chunked] {
        let data = pattern(600_000);
        let srv = RawServer::start(data.clone(), behaviour).await?;
        let ((one, d1), (two, d2)) = two_halves(&srv.url(), data.len() as u64).await?;
        assert_eq!([one, two].concat(), data.to_vec());
        assert_eq!(srv.connections.load(Ordering::SeqCst), 1, "one connection");
        assert_eq!(srv.pipelined.load(Ordering::SeqCst), 1, "pipelined");
        let lines = srv.request_lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        if behaviour == Behaviour::Chunked {
            // Each answer's trailer belongs to its own body.
            assert_eq!(d1, Some(Sha256Digest::of(&data[..300_000])));
            assert_eq!(d2, Some(Sha256Digest::of(&data[300_000..])));
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_server_closing_after_an_answer_costs_a_fresh_connection_not_data() -> TestResult {
    for announce in [true, false] {
        let data = pattern(400_000);
        let srv = RawServer::start(data.clone(), Behaviour::CloseAfterFirst { announce }).await?;
        let ((one, _), (two, _)) = two_halves(&srv.url(), data.len() as u64).await?;
        assert_eq!([one, two].concat(), data.to_vec(), "announce {announce}");
        // The pipelined request went unanswered on the first connection and again on a
        // second.
        assert_eq!(
            srv.connections.load(Ordering::SeqCst),
            2,
            "announce {announce}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_pipelined_request_the_server_never_answers_is_sent_again() -> TestResult {
    let data = pattern(400_000);
    let srv = RawServer::start(data.clone(), Behaviour::DropPipelined).await?;
    let ((one, _), (two, _)) = two_halves(&srv.url(), data.len() as u64).await?;
    assert_eq!([one, two].concat(), data.to_vec());
    assert_eq!(srv.connections.load(Ordering::SeqCst), 2);
    Ok(())
}

#[tokio::test]
async fn a_redirected_pipelined_request_is_followed() -> TestResult {
    let data = pattern(400_000);
    let srv = RawServer::start(data.clone(), Behaviour::RedirectSecond).await?;
    let ((one, _), (two, _)) = two_halves(&srv.url(), data.len() as u64).await?;
    assert_eq!([one, two].concat(), data.to_vec());
    let lines = srv.request_lines();
    assert!(
        lines.iter().any(|(_, l)| l.starts_with("GET /moved ")),
        "{lines:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_body_dropped_part_way_does_not_misalign_the_next_answer() -> TestResult {
    let (data, srv, t, info) = plain_setup().await?;
    let mut a = t.open_lane(0).await?;
    let mut b = a.twin().ok_or("an HTTP/1.1 lane has a twin")?;
    let first = range_req(&info, 0..300_000);
    let second = range_req(&info, 300_000..600_000);
    {
        let mut body = a.fetch(&first).await?;
        let piece = body.next_data().await?.ok_or("no data")?;
        assert_eq!(&piece[..], &data[..piece.len()]);
        // Dropped here, part-way: the rest of this body must not be read as the next answer.
    }
    let (two, _) = fetch(b.as_mut(), &second).await?;
    assert_eq!(two, data[300_000..].to_vec());
    assert_eq!(srv.connections.load(Ordering::SeqCst), 2);
    Ok(())
}

#[tokio::test]
async fn a_lane_that_ends_leaves_its_pipelined_connection_to_the_next() -> TestResult {
    let (data, srv, t, info) = plain_setup().await?;
    {
        let mut a = t.open_lane(0).await?;
        let mut b = a.twin().ok_or("an HTTP/1.1 lane has a twin")?;
        let (first, second) = (
            range_req(&info, 0..300_000),
            range_req(&info, 300_000..600_000),
        );
        let (x, y) = tokio::join!(fetch(a.as_mut(), &first), fetch(b.as_mut(), &second));
        assert_eq!([x?.0, y?.0].concat(), data.to_vec());
    }
    // The lane's handles are gone: its connection becomes a hyper connection again (a task
    // with no I/O to wait for, which runs when this single-threaded runtime's test yields;
    // hyper's connection task then runs once more to declare itself ready) and waits in the
    // idle pool.
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    let mut next = t.open_lane(1).await?;
    let head = range_req(&info, 0..1000);
    let (again, _) = fetch(next.as_mut(), &head).await?;
    assert_eq!(again, data[..1000].to_vec());
    assert_eq!(
        srv.connections.load(Ordering::SeqCst),
        1,
        "the connection was reused"
    );
    Ok(())
}

#[tokio::test]
async fn the_request_after_a_speculative_one_is_pipelined_behind_it() -> TestResult {
    // A lane's first chunk asked before the size is known is read by the lane's own codec,
    // so the request it sends ahead goes out while that body is still arriving, not after it
    // (as behind a hyper body, which the lane can take over only once read to its end).
    let data = pattern(600_000);
    let srv = RawServer::start(data.clone(), Behaviour::Length).await?;
    let t = HttpTransport::new(&srv.url(), client_cfg(HttpVersion::Http1))?;
    let spec = t.open_speculative(1, 0..300_000, false).await?;
    let (info, mut first) = spec
        .answer
        .ok_or("the speculative range brought its chunk")?;
    assert_eq!(info.size, 600_000);
    assert_eq!(first.range, 0..300_000);
    let mut lane = spec.lane;
    let mut twin = lane.twin().ok_or("an HTTP/1.1 lane has a twin")?;
    let second = range_req(&info, 300_000..600_000);
    let (one, two) = tokio::join!(
        crate::client_suite::read_all(first.body.as_mut()),
        fetch(twin.as_mut(), &second)
    );
    assert_eq!([one?, two?.0].concat(), data.to_vec());
    assert_eq!(srv.connections.load(Ordering::SeqCst), 1, "one connection");
    assert_eq!(srv.pipelined.load(Ordering::SeqCst), 1, "pipelined");
    Ok(())
}
