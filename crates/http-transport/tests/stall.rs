//! An HTTP/1.1 client that asks for a large resource and stops reading: once the response has
//! sent nothing for `stall_timeout`, the server closes the connection (its blocks go back to
//! the memory budget), long before the response or the idle timeout would end it.
//! (HTTP/2 stream resets are tested end to end in `tests/e2e/memory.rs`.)

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use xfer_common::MemoryBudget;
use xfer_http::server::ServerConfig;
use xfer_test_support::wait_until_async;

use crate::loopback::Loopback;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_response_that_stalls_closes_its_connection_and_frees_its_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = ServerConfig::new(dir.path());
    cfg.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.tcp.send_buffer = Some(64 << 10);
    cfg.stall_timeout = Duration::from_secs(1);
    // Far longer than the test: only the stall timeout can end the connection.
    cfg.idle_timeout = Duration::from_secs(600);
    let budget = MemoryBudget::new(16 << 20);
    cfg.memory_budget = budget.clone();
    let server = Loopback::start(cfg).await.expect("bind");
    let addr = server.addr;

    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(64 << 10).expect("rcvbuf");
    let mut s = socket.connect(addr).await.expect("connect");
    s.write_all(b"GET /.xfer/synthetic?size=1G HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    // The server fills the socket buffers and its queue, then has nowhere to send.
    wait_until_async(Duration::from_secs(10), "the response to start", || {
        budget.in_use() != 0
    })
    .await;
    // Released one stall timeout (1 s) after the queue stopped moving; ten are allowed.
    wait_until_async(
        Duration::from_secs(10),
        "the stalled response to release its budget",
        || budget.in_use() == 0,
    )
    .await;

    // Reading now drains what was buffered, then finds the connection closed early.
    let mut received = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received += n as u64,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the connection stayed open");
    assert!(
        received < 64 << 20,
        "{received} bytes: the response was not cut short"
    );
    server.stop().await;
}

/// One HTTP/2 connection from `from` that opens `streams` streams on a large resource with a
/// one-byte stream window and never reads: each stream's response gets a block into the send
/// queue and one read ahead, and then nothing moves until the stall timeout.
async fn zero_window_abuser(from: u8, to: SocketAddr, streams: u32) -> tokio::net::TcpStream {
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(
            std::net::IpAddr::from([127, 0, 0, from]),
            0,
        ))
        .expect("bind a loopback address");
    let mut s = socket.connect(to).await.expect("connect");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE (0x4) = 1.
    out.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 1]));
    for i in 0..streams {
        // HPACK: :method GET, :scheme http, :path and :authority as literals of indexed names.
        let mut h = vec![0x82, 0x86];
        for (index, value) in [(4u8, "/.xfer/synthetic?size=1G"), (1u8, "x")] {
            h.push(index);
            h.push(value.len() as u8);
            h.extend_from_slice(value.as_bytes());
        }
        out.extend(frame(0x1, 0x1 | 0x4, 1 + 2 * i, &h));
    }
    s.write_all(&out).await.expect("abusive requests");
    s
}

/// Download `path` over HTTP/1.1 from 127.0.0.1, reading everything; returns the bytes read
/// (head and body).
async fn download_http1(to: SocketAddr, path: &str) -> u64 {
    let mut s = tokio::net::TcpStream::connect(to).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("request");
    let mut got = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match s.read(&mut buf).await.expect("read") {
            0 => return got,
            n => got += n as u64,
        }
    }
}

/// Zero-window abuse: two HTTP/2 connections × 128 never-read streams from 127.0.0.2 would
/// hold about 192 MiB (three 256 KiB blocks a stream) of a 16 MiB budget. The abuser's
/// address stops at its ceiling (a quarter of the budget), so a download from 127.0.0.1 never
/// waits for the shared budget: it is served at once, not after the 60 s stall timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_read_http2_streams_of_one_address_do_not_make_another_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = ServerConfig::new(dir.path());
    cfg.listen = "127.0.0.1:0".parse().expect("addr");
    // Far longer than the test: only the shares can keep the victim from waiting.
    cfg.stall_timeout = Duration::from_secs(600);
    let budget = MemoryBudget::new(16 << 20);
    cfg.memory_budget = budget.clone();
    let server = Loopback::start(cfg).await.expect("bind");
    let addr = server.addr;

    const SIZE: u64 = 16 << 20;
    let path = format!("/.xfer/synthetic?size={SIZE}");
    let started = Instant::now();
    let whole = |n: u64| (SIZE..SIZE + 4096).contains(&n);
    assert!(whole(download_http1(addr, &path).await));
    let unloaded = started.elapsed();

    let mut abusers = Vec::new();
    for _ in 0..2 {
        abusers.push(zero_window_abuser(2, addr, 128).await);
    }
    // The abuser is at its address's ceiling: its streams now wait in their own line.
    wait_until_async(
        Duration::from_secs(30),
        "the abuser to reach its address's ceiling",
        || budget.stats().ceiling_waits != 0,
    )
    .await;
    let held = budget.in_use();
    assert!(
        held <= budget.limit() / 4 + (256 << 10),
        "the abusive address holds {held} bytes of {}",
        budget.limit()
    );

    let started = Instant::now();
    assert!(whole(download_http1(addr, &path).await));
    let loaded = started.elapsed();
    eprintln!("16 MiB over HTTP/1.1: unloaded {unloaded:?}, beside the abuser {loaded:?}");
    let stats = budget.stats();
    assert_eq!(
        stats.shared_waits, 0,
        "a request waited for bytes another address held: {stats:?}"
    );
    drop(abusers);
    server.stop().await;
}
