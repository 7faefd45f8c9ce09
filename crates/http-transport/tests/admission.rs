//! Connection admission over real sockets: a per-address cap, an answer (503 with
//! `Retry-After`) instead of a silent close when full, and idle connections closed to make
//! room for a client that wants to be served.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use xfer_http::server::ServerConfig;

use crate::loopback::Loopback;
use xfer_service::admission::IDLE_FOR_EVICTION;

const PATIENCE: Duration = Duration::from_secs(20);

async fn connect_from(last: u8, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(IpAddr::from([127, 0, 0, last]), 0))
        .expect("bind a loopback address");
    socket.connect(to).await.expect("connect")
}

/// Send a GET and read the status line and headers of the answer (or what the server did).
async fn get_on(mut s: TcpStream) -> String {
    let req = b"GET /f.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if s.write_all(req).await.is_err() {
        return "write failed".into();
    }
    let mut out = Vec::new();
    match tokio::time::timeout(PATIENCE, s.read_to_end(&mut out)).await {
        Ok(Ok(_)) => String::from_utf8_lossy(&out).into_owned(),
        Ok(Err(e)) => format!("read failed: {e}"),
        Err(_) => "no answer".into(),
    }
}

/// GETs from host `last` every 20 ms until an answer passes `done` or [`PATIENCE`] runs out;
/// the last answer.
async fn poll_get(last: u8, to: SocketAddr, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let answer = get_on(connect_from(last, to).await).await;
        if done(&answer) || tokio::time::Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A GET of the 7-byte `/f.bin` on a connection kept open after its answer: the head, and the
/// connection, still admitted (and idle from then on).
async fn get_keeping(mut s: TcpStream) -> (String, TcpStream) {
    let req = b"GET /f.bin HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(req).await.expect("request");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(PATIENCE, async {
        loop {
            let n = s.read(&mut buf).await.expect("read the answer");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got);
            if let Some(end) = text.find("\r\n\r\n") {
                if got.len() >= end + 4 + b"payload".len() {
                    break;
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no whole answer within {PATIENCE:?}");
    (String::from_utf8_lossy(&got).into_owned(), s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_servers_answer_503_and_make_room_from_idle_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f.bin"), b"payload").expect("write");
    let mut cfg = ServerConfig::new(dir.path());
    cfg.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.max_connections = 4;
    cfg.max_connections_per_address = 3;
    let server = Loopback::start(cfg).await.expect("bind");
    let addr = server.addr;

    // One host opens three silent connections: its cap. The server admits connections at
    // accept, in order, so a request on a fourth one, made after the three, is refused.
    let quiet_from = std::time::Instant::now();
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(connect_from(1, addr).await);
    }
    let answer = get_on(connect_from(1, addr).await).await;
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "over the per-address cap: {answer}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );

    // Another host is served on the last free slot, and keeps its connection open (a
    // connection that closed would free its slot a moment later, on its own task's time).
    let (answer, kept) = get_keeping(connect_from(2, addr).await).await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "another address: {answer}"
    );
    silent.push(kept);

    // Four slots, four connections: a newcomer is refused while none has been quiet for
    // long...
    let answer = get_on(connect_from(4, addr).await).await;
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "a full server: {answer}"
    );
    // ...and once they have been quiet a while, served by closing one of them.
    let answer = poll_get(4, addr, |a| a.starts_with("HTTP/1.1 200")).await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "an idle slot was not freed: {answer}"
    );
    assert!(
        quiet_from.elapsed() >= IDLE_FOR_EVICTION,
        "a connection was closed for a newcomer before any had been quiet {IDLE_FOR_EVICTION:?}"
    );

    drop(silent);
    server.stop().await;
}

/// An HTTP/2 client over its address's cap is answered 503 and then sent GOAWAY, so its retry
/// opens a new connection (admitted once a slot of its address is free) instead of being
/// answered 503 on the refused one for as long as it keeps retrying on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_http2_connection_ends_with_goaway_after_its_503() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f.bin"), b"payload").expect("write");
    let mut cfg = ServerConfig::new(dir.path());
    cfg.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.max_connections_per_address = 1;
    let server = Loopback::start(cfg).await.expect("bind");
    let addr = server.addr;

    // The address's one slot, held by a silent connection.
    let holder = connect_from(5, addr).await;
    // Held once an HTTP/1.1 GET from the address is refused.
    let answer = poll_get(5, addr, |a| a.starts_with("HTTP/1.1 503")).await;
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "the slot was never held: {answer}"
    );
    let mut s = connect_from(5, addr).await;
    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    let mut h = vec![0x82, 0x86];
    for (index, value) in [(4u8, "/f.bin"), (1u8, "x")] {
        h.push(index);
        h.push(value.len() as u8);
        h.extend_from_slice(value.as_bytes());
    }
    out.extend(frame(0x1, 0x1 | 0x4, 1, &h));
    s.write_all(&out).await.expect("request");

    let (mut status_503, mut goaway) = (false, false);
    let mut head = [0u8; 9];
    let mut payload = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        while s.read_exact(&mut head).await.is_ok() {
            let len =
                (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
            payload.resize(len, 0);
            if s.read_exact(&mut payload).await.is_err() {
                break;
            }
            match head[3] {
                // The 503's body (its head is HPACK with Huffman-coded values).
                0x0 => status_503 |= payload.windows(11).any(|w| w == b"server busy"),
                0x4 if head[4] & 0x1 == 0 => {
                    let _ = s.write_all(&frame(0x4, 0x1, 0, &[])).await;
                }
                0x6 if head[4] & 0x1 == 0 => {
                    let ack = frame(0x6, 0x1, 0, &payload);
                    let _ = s.write_all(&ack).await;
                }
                0x7 => {
                    goaway = true;
                    if status_503 {
                        break;
                    }
                }
                _ => {}
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the refused connection neither ended nor said GOAWAY"
    );
    assert!(status_503, "no 503 body on the refused HTTP/2 connection");
    assert!(goaway, "the refused HTTP/2 connection ended without GOAWAY");

    drop((s, holder));
    server.stop().await;
}
