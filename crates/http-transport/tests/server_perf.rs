//! Loopback throughput probe for the HTTP server, not run by default (no speed assertions:
//! numbers are printed for a human to read).
//!
//! ```text
//! cargo test --release -p xfer-http --test suite server_perf:: -- --ignored --nocapture
//! ```
//! Client and server share the machine's cores, so the figures are a floor for the server.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xfer_http::server::ServerConfig;

use crate::loopback::Loopback;

const GIB: u64 = 1 << 30;

/// Read an HTTP/1.1 response to the end without keeping it; returns body bytes (approximate:
/// total minus the head).
async fn h1_fetch(addr: SocketAddr, path: &str, extra: &str) -> u64 {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{extra}\r\n").as_bytes(),
    )
    .await
    .expect("send");
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = s.read(&mut buf).await.expect("read");
        if n == 0 {
            return total;
        }
        total += n as u64;
    }
}

async fn h2_fetch(addr: SocketAddr, path: &str, streams: u64, size: u64) -> u64 {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(16 << 20)
        .initial_connection_window_size(64 << 20)
        .max_frame_size(1 << 20)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let per = size / streams;
    let mut tasks = Vec::new();
    for i in 0..streams {
        let mut send = send.clone();
        let uri = format!("http://{addr}{path}");
        tasks.push(tokio::spawn(async move {
            let req = http::Request::get(uri)
                .header("range", format!("bytes={}-{}", i * per, (i + 1) * per - 1))
                .body(Empty::new())
                .expect("request");
            let mut body = send.send_request(req).await.expect("response").into_body();
            let mut got = 0u64;
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.expect("frame").into_data() {
                    got += data.len() as u64;
                }
            }
            got
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    total
}

fn report(what: &str, bytes: u64, took: Duration) {
    let gbit = bytes as f64 * 8.0 / took.as_secs_f64() / 1e9;
    eprintln!(
        "{what:<48} {:>6.2} GiB in {:>6.2} s = {gbit:>6.2} Gbit/s",
        bytes as f64 / GIB as f64,
        took.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "throughput probe; run with --release -- --ignored --nocapture"]
async fn loopback_throughput() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file_size = 512u64 << 20;
    {
        let mut v = vec![0u8; file_size as usize];
        xfer_common::synthetic::fill(7, 0, &mut v);
        std::fs::write(dir.path().join("big.bin"), v).expect("write");
    }
    let mut cfg = ServerConfig::new(dir.path());
    cfg.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.repr_digest = false;
    let server = Loopback::start(cfg).await.expect("bind");
    let addr = server.addr;

    let syn = format!("/.xfer/synthetic?size={}", 2 * GIB);
    let t = Instant::now();
    let n = h1_fetch(addr, &syn, "").await;
    report("http/1.1 synthetic 2 GiB", n, t.elapsed());

    let t = Instant::now();
    let n = h1_fetch(
        addr,
        &syn,
        "Want-Content-Digest: sha-256\r\nTE: trailers\r\n",
    )
    .await;
    report("http/1.1 synthetic 2 GiB + sha-256 trailer", n, t.elapsed());

    let _ = h1_fetch(addr, "/big.bin", "").await; // warm the page cache
    let t = Instant::now();
    let mut n = 0;
    for _ in 0..4 {
        n += h1_fetch(addr, "/big.bin", "").await;
    }
    report("http/1.1 file 4 x 512 MiB (page cache)", n, t.elapsed());

    for streams in [1, 8] {
        let t = Instant::now();
        let n = h2_fetch(addr, &syn, streams, 2 * GIB).await;
        report(
            &format!("h2c synthetic 2 GiB over {streams} stream(s)"),
            n,
            t.elapsed(),
        );
    }

    server.stop().await;
}
