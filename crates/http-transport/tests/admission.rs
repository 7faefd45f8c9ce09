//! Connection admission over real sockets: a per-address cap, an answer (503 with
//! `Retry-After`) instead of a silent close when full, and idle connections closed to make
//! room for a client that wants to be served.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use xfer_http::server::{HttpServer, ServerConfig};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_servers_answer_503_and_make_room_from_idle_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f.bin"), b"payload").expect("write");
    let mut cfg = ServerConfig::new(dir.path());
    cfg.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.max_connections = 4;
    cfg.max_connections_per_address = 3;
    let server = HttpServer::bind(cfg).await.expect("bind");
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));

    // One host opens three silent connections: its cap.
    let quiet_from = std::time::Instant::now();
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(connect_from(1, addr).await);
    }
    // The server counts a connection once it has accepted it; until it has taken all three,
    // a fourth from the host may still be served (and then closes), so ask until refused.
    let answer = poll_get(1, addr, |a| a.starts_with("HTTP/1.1 503")).await;
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "over the per-address cap: {answer}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );

    // Another host is served: one slot of four is still free.
    let answer = get_on(connect_from(2, addr).await).await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "another address: {answer}"
    );

    // Four slots, four connections (one more silent one from a third host). Once they have
    // been quiet a while, a newcomer is served by closing one of them, not refused.
    silent.push(connect_from(3, addr).await);
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
    let _ = stop.send(());
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("server stops")
        .expect("server task");
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
    let server = HttpServer::bind(cfg).await.expect("bind");
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));

    // The address's one slot, held by a silent connection.
    let holder = connect_from(5, addr).await;
    // Grace for the server to admit the holder: the server exposes no admission count, and a
    // silent connection gives the client nothing to observe.
    tokio::time::sleep(Duration::from_millis(200)).await;
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
    let _ = stop.send(());
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("server stops")
        .expect("server task");
}
