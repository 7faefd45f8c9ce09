//! A TCP relay on loopback that limits what all its connections together carry from the
//! server to the client to one rate: one "source" behind a link of that rate, for benchmarks
//! of several sources on one machine. The client-to-server direction passes untouched.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes read from the server per step; the pacing grain.
const STEP: usize = 64 << 10;
/// Credit a quiet relay may build up, so bursts after a pause stay near the rate.
const MAX_BURST: Duration = Duration::from_millis(5);

/// A running relay; it stops when dropped.
pub struct RateRelay {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl RateRelay {
    /// Relay connections made to the returned address to `upstream`, at most `bits_per_sec`
    /// from `upstream` in all.
    pub async fn start(upstream: SocketAddr, bits_per_sec: u64) -> io::Result<Self> {
        Self::start_on(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            upstream,
            bits_per_sec,
        )
        .await
    }

    /// [`RateRelay::start`], listening on `listen` (an emulated link's address, say).
    pub async fn start_on(
        listen: SocketAddr,
        upstream: SocketAddr,
        bits_per_sec: u64,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let pace = Arc::new(Pace {
            bytes_per_sec: (bits_per_sec / 8).max(1) as f64,
            next: Mutex::new(Instant::now()),
        });
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let pace = Arc::clone(&pace);
                tokio::spawn(async move {
                    if let Err(e) = relay(client, upstream, pace).await {
                        tracing::debug!(error = %e, "rate relay connection ended");
                    }
                });
            }
        });
        Ok(Self { addr, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for RateRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The time the link is free again, shared by every connection.
struct Pace {
    bytes_per_sec: f64,
    next: Mutex<Instant>,
}

impl Pace {
    /// When `n` more bytes may leave.
    fn reserve(&self, n: usize) -> Instant {
        let now = Instant::now();
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let start = (*next).max(now.checked_sub(MAX_BURST).unwrap_or(now));
        *next = start + Duration::from_secs_f64(n as f64 / self.bytes_per_sec);
        start
    }
}

async fn relay(client: TcpStream, upstream: SocketAddr, pace: Arc<Pace>) -> io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async move {
        let r = tokio::io::copy(&mut cr, &mut sw).await;
        let _ = sw.shutdown().await;
        r
    };
    let down = async move {
        let mut buf = vec![0u8; STEP];
        loop {
            let n = sr.read(&mut buf).await?;
            if n == 0 {
                let _ = cw.shutdown().await;
                return Ok::<u64, io::Error>(0);
            }
            tokio::time::sleep_until(pace.reserve(n).into()).await;
            cw.write_all(&buf[..n]).await?;
        }
    };
    let (a, b) = tokio::join!(up, down);
    a.and(b).map(|_| ())
}
