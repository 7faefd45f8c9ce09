//! An HTTP/1.1 client that asks for a large resource and stops reading: once the response has
//! sent nothing for `stall_timeout`, the server closes the connection (its blocks go back to
//! the memory budget), long before the response or the idle timeout would end it.
//! (HTTP/2 stream resets are tested end to end in `tests/e2e/memory.rs`.)

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use xfer_common::MemoryBudget;
use xfer_http::server::{HttpServer, ServerConfig};

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
    let server = HttpServer::bind(cfg).await.expect("bind");
    let addr: SocketAddr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));

    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(64 << 10).expect("rcvbuf");
    let mut s = socket.connect(addr).await.expect("connect");
    s.write_all(b"GET /.xfer/synthetic?size=1G HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    // The server fills the socket buffers and its queue, then has nowhere to send.
    let deadline = Instant::now() + Duration::from_secs(10);
    while budget.in_use() == 0 {
        assert!(Instant::now() < deadline, "the response never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        budget.in_use(),
        0,
        "the stalled response still holds budget after 4 stall timeouts"
    );

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
    let _ = stop.send(());
    task.await.expect("server");
}
