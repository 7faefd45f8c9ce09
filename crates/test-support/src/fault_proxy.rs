//! A proxy on loopback that damages what the server sends, one planned fault per connection.
//!
//! Connection (TCP) or client address (UDP) number `i`, counted from 0 in accept order, gets
//! `faults[i]`; later ones pass untouched, so a client that retries on a new connection
//! recovers and the test sees whether it did. Faults act on the server-to-client bytes (the
//! download direction), counted from the first byte of that connection, TLS and QUIC framing
//! included: flipping a byte inside TLS or QUIC shows up as a failed record or a lost packet,
//! which is what an on-path fault looks like to those protocols.
//!
//! | fault | TCP | UDP (QUIC) |
//! |---|---|---|
//! | `Truncate { after }` | FIN after `after` bytes | drop every datagram after `after` bytes |
//! | `Reset { after }` | RST after `after` bytes | as `Truncate` |
//! | `Stall { after }` | forward nothing more, keep the connection open | as `Truncate` |
//! | `FlipByte { at }` | XOR byte `at` with 0x01 | XOR that byte of its datagram |
//! | `Throttle { bytes_per_sec }` | pace the stream | pace the datagrams |

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinSet;

/// What happens to one connection's server-to-client bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Pass,
    Truncate { after: u64 },
    Reset { after: u64 },
    Stall { after: u64 },
    FlipByte { at: u64 },
    Throttle { bytes_per_sec: u64 },
}

impl Fault {
    /// Where forwarding stops, for the faults that stop it.
    fn cut_at(self) -> Option<u64> {
        match self {
            Fault::Truncate { after } | Fault::Reset { after } | Fault::Stall { after } => {
                Some(after)
            }
            _ => None,
        }
    }
}

/// What the proxy saw, for assertions.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections (TCP) or client addresses (UDP) seen.
    pub connections: AtomicU64,
    /// Server-to-client bytes forwarded.
    pub bytes_to_client: AtomicU64,
    /// Faults that took effect (a cut reached, a byte flipped).
    pub faults_fired: AtomicU64,
}

impl ProxyStats {
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    pub fn faults_fired(&self) -> u64 {
        self.faults_fired.load(Ordering::Relaxed)
    }
}

/// A running proxy; stops (and drops every connection) when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    stats: Arc<ProxyStats>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Proxy TCP connections to `upstream`.
    pub async fn tcp(upstream: SocketAddr, faults: Vec<Fault>) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(ProxyStats::default());
        let task = tokio::spawn(accept_tcp(listener, upstream, faults, stats.clone()));
        Ok(Self { addr, stats, task })
    }

    /// Proxy UDP datagrams to `upstream`, one upstream socket per client address.
    pub async fn udp(upstream: SocketAddr, faults: Vec<Fault>) -> io::Result<Self> {
        let front = Arc::new(UdpSocket::bind(("127.0.0.1", 0)).await?);
        let addr = front.local_addr()?;
        let stats = Arc::new(ProxyStats::default());
        let task = tokio::spawn(relay_udp(front, upstream, faults, stats.clone()));
        Ok(Self { addr, stats, task })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stats(&self) -> &ProxyStats {
        &self.stats
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_tcp(
    listener: TcpListener,
    upstream: SocketAddr,
    faults: Vec<Fault>,
    stats: Arc<ProxyStats>,
) {
    // Owned here so that aborting this task aborts every connection with it.
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            Some(_) = conns.join_next() => continue,
        };
        let Ok((client, _)) = accepted else { continue };
        let index = stats.connections.fetch_add(1, Ordering::Relaxed) as usize;
        let fault = faults.get(index).copied().unwrap_or(Fault::Pass);
        let stats = stats.clone();
        conns.spawn(async move {
            if let Err(e) = proxy_tcp(client, upstream, fault, &stats).await {
                tracing::debug!(index, error = %e, "proxied connection ended");
            }
        });
    }
}

async fn proxy_tcp(
    mut client: TcpStream,
    upstream: SocketAddr,
    fault: Fault,
    stats: &ProxyStats,
) -> io::Result<()> {
    let mut server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let reset = {
        let (mut cr, mut cw) = client.split();
        let (mut sr, mut sw) = server.split();
        let up = async {
            let _ = tokio::io::copy(&mut cr, &mut sw).await;
            let _ = sw.shutdown().await;
        };
        let down = pump_down(&mut sr, &mut cw, fault, stats);
        tokio::pin!(up, down);
        // The connection lives as long as the download direction: once it ends (or is cut),
        // the client side is dropped too, whatever the client is still sending.
        let mut up_done = false;
        loop {
            tokio::select! {
                r = &mut down => break r?,
                () = &mut up, if !up_done => up_done = true,
            }
        }
    };
    if reset {
        // SO_LINGER 0: closing sends RST instead of FIN.
        socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO))?;
    }
    Ok(())
}

/// Copy server → client applying `fault`; `Ok(true)` when the connection must end with RST.
async fn pump_down(
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
    fault: Fault,
    stats: &ProxyStats,
) -> io::Result<bool> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut sent = 0u64;
    let started = Instant::now();
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(false);
        }
        let chunk = &mut buf[..n];
        if let Some(cut) = fault.cut_at() {
            if sent + n as u64 >= cut {
                let keep = (cut - sent) as usize;
                to.write_all(&chunk[..keep]).await?;
                stats
                    .bytes_to_client
                    .fetch_add(keep as u64, Ordering::Relaxed);
                stats.faults_fired.fetch_add(1, Ordering::Relaxed);
                match fault {
                    Fault::Truncate { .. } => {
                        to.shutdown().await?;
                        return Ok(false);
                    }
                    Fault::Reset { .. } => return Ok(true),
                    _ => std::future::pending::<()>().await,
                }
            }
        }
        apply_in_stream(fault, sent, chunk, started, stats).await;
        to.write_all(chunk).await?;
        sent += n as u64;
        stats.bytes_to_client.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// The faults that alter or pace bytes without stopping the flow.
async fn apply_in_stream(
    fault: Fault,
    sent: u64,
    chunk: &mut [u8],
    started: Instant,
    stats: &ProxyStats,
) {
    match fault {
        Fault::FlipByte { at } if (sent..sent + chunk.len() as u64).contains(&at) => {
            chunk[(at - sent) as usize] ^= 0x01;
            stats.faults_fired.fetch_add(1, Ordering::Relaxed);
        }
        Fault::Throttle { bytes_per_sec } if bytes_per_sec > 0 => {
            let due =
                Duration::from_secs_f64((sent + chunk.len() as u64) as f64 / bytes_per_sec as f64);
            tokio::time::sleep_until((started + due).into()).await;
        }
        _ => {}
    }
}

async fn relay_udp(
    front: Arc<UdpSocket>,
    upstream: SocketAddr,
    faults: Vec<Fault>,
    stats: Arc<ProxyStats>,
) {
    let mut sessions: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
    let mut downs = JoinSet::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let received = tokio::select! {
            r = front.recv_from(&mut buf) => r,
            Some(_) = downs.join_next() => continue,
        };
        let Ok((n, client)) = received else { continue };
        let back = match sessions.get(&client) {
            Some(s) => s.clone(),
            None => {
                let Ok(back) = open_upstream(upstream).await else {
                    continue;
                };
                let back = Arc::new(back);
                let index = stats.connections.fetch_add(1, Ordering::Relaxed) as usize;
                let fault = faults.get(index).copied().unwrap_or(Fault::Pass);
                downs.spawn(udp_down(
                    back.clone(),
                    front.clone(),
                    client,
                    fault,
                    stats.clone(),
                ));
                sessions.insert(client, back.clone());
                back
            }
        };
        let _ = back.send(&buf[..n]).await;
    }
}

async fn open_upstream(upstream: SocketAddr) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(("127.0.0.1", 0)).await?;
    s.connect(upstream).await?;
    Ok(s)
}

async fn udp_down(
    back: Arc<UdpSocket>,
    front: Arc<UdpSocket>,
    client: SocketAddr,
    fault: Fault,
    stats: Arc<ProxyStats>,
) {
    let mut buf = vec![0u8; 65536];
    let mut sent = 0u64;
    let mut fired = false;
    let started = Instant::now();
    while let Ok(n) = back.recv(&mut buf).await {
        let datagram = &mut buf[..n];
        if let Some(cut) = fault.cut_at() {
            if sent + n as u64 > cut {
                if !fired {
                    fired = true;
                    stats.faults_fired.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
        }
        apply_in_stream(fault, sent, datagram, started, &stats).await;
        if front.send_to(datagram, client).await.is_err() {
            return;
        }
        sent += n as u64;
        stats.bytes_to_client.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that sends `payload` to every connection, then closes.
    async fn tcp_source(payload: Vec<u8>) -> io::Result<SocketAddr> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let p = payload.clone();
                tokio::spawn(async move {
                    let _ = s.write_all(&p).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        Ok(addr)
    }

    async fn fetch(addr: SocketAddr) -> io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(addr).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok(out)
    }

    #[tokio::test]
    async fn each_connection_gets_its_fault_then_traffic_passes() -> io::Result<()> {
        let payload = crate::random_bytes(300_000, 1);
        let source = tcp_source(payload.clone()).await?;
        let proxy = FaultProxy::tcp(
            source,
            vec![
                Fault::Truncate { after: 1000 },
                Fault::FlipByte { at: 70_000 },
                Fault::Reset { after: 5 },
            ],
        )
        .await?;
        assert_eq!(fetch(proxy.addr()).await?, payload[..1000]);
        let flipped = fetch(proxy.addr()).await?;
        assert_eq!(flipped.len(), payload.len());
        let diff: Vec<usize> = (0..payload.len())
            .filter(|&i| flipped[i] != payload[i])
            .collect();
        assert_eq!(diff, vec![70_000]);
        let reset = fetch(proxy.addr()).await;
        assert!(
            matches!(&reset, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
            "{reset:?}"
        );
        assert_eq!(
            fetch(proxy.addr()).await?,
            payload,
            "the fourth connection passes"
        );
        assert_eq!(proxy.stats().connections(), 4);
        assert_eq!(proxy.stats().faults_fired(), 3);
        Ok(())
    }

    #[tokio::test]
    async fn a_stall_keeps_the_connection_open_and_silent() -> io::Result<()> {
        let source = tcp_source(vec![7u8; 10_000]).await?;
        let proxy = FaultProxy::tcp(source, vec![Fault::Stall { after: 100 }]).await?;
        let mut s = TcpStream::connect(proxy.addr()).await?;
        let mut got = vec![0u8; 100];
        s.read_exact(&mut got).await?;
        let mut more = [0u8; 1];
        let waited = tokio::time::timeout(Duration::from_millis(300), s.read(&mut more)).await;
        assert!(waited.is_err(), "bytes or EOF after the stall: {waited:?}");
        Ok(())
    }

    #[tokio::test]
    async fn udp_datagrams_are_cut_and_flipped() -> io::Result<()> {
        // An echo server upstream.
        let echo = UdpSocket::bind(("127.0.0.1", 0)).await?;
        let echo_addr = echo.local_addr()?;
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = echo.recv_from(&mut buf).await {
                let _ = echo.send_to(&buf[..n], from).await;
            }
        });
        let proxy = FaultProxy::udp(echo_addr, vec![Fault::FlipByte { at: 12 }]).await?;
        let client = UdpSocket::bind(("127.0.0.1", 0)).await?;
        client.connect(proxy.addr()).await?;
        let mut buf = [0u8; 64];
        client.send(&[0u8; 10]).await?;
        let n = client.recv(&mut buf).await?;
        assert_eq!(&buf[..n], &[0u8; 10]);
        client.send(&[0u8; 10]).await?;
        let n = client.recv(&mut buf).await?;
        assert_eq!(buf[..n].iter().filter(|b| **b != 0).count(), 1);
        assert_eq!(
            buf[2], 1,
            "byte 12 of the stream is byte 2 of the second datagram"
        );

        let cut = FaultProxy::udp(echo_addr, vec![Fault::Truncate { after: 15 }]).await?;
        let client = UdpSocket::bind(("127.0.0.1", 0)).await?;
        client.connect(cut.addr()).await?;
        client.send(&[1u8; 10]).await?;
        assert_eq!(client.recv(&mut buf).await?, 10);
        client.send(&[1u8; 10]).await?;
        let after_cut =
            tokio::time::timeout(Duration::from_millis(300), client.recv(&mut buf)).await;
        assert!(after_cut.is_err(), "a datagram past the cut arrived");
        assert_eq!(cut.stats().faults_fired(), 1);
        Ok(())
    }
}
