//! I/O wrappers under hyper: replaying bytes read while sniffing the protocol, counting
//! progress for the idle timeout, and closing without losing what is still on its way out.
//!
//! A TCP socket closed while bytes it received sit unread, or that receives bytes after it was
//! closed, is reset, and a reset throws away what its send buffer still holds: the end of the
//! last response. An HTTP/2 client sends WINDOW_UPDATEs for as long as it reads, so a server
//! that closes as soon as it has handed its last DATA frame to the kernel (a graceful shutdown,
//! a GOAWAY) cut off the last megabyte of a download now and then. So the shutdown of the
//! write side is followed by a *lingering close*: what the peer still sends is read and
//! dropped until it has acknowledged every byte sent (`SIOCOUTQ` empty) or closed its side
//! too, or [`LINGER`] runs out. A connection closed idle, with nothing unacknowledged,
//! closes at once.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long a closing connection reads on for its peer's end (see the module header): time for
/// a client to read out a send buffer of some megabytes and answer with its FIN.
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_secs(10);
/// Bytes a lingering close reads at most before it closes anyway: a peer that streams on is
/// not waited for.
const LINGER_BYTES: u64 = 4 << 20;
/// How often a lingering close looks whether the peer has acknowledged everything (the kernel
/// signals no event for that).
const LINGER_CHECK: std::time::Duration = std::time::Duration::from_millis(10);

/// An I/O object that first yields `prefix` (bytes already read from `inner`), then reads from
/// `inner`. Writes go straight through. It also bumps `progress` on every read or write that
/// moved bytes, which the connection's idle watchdog samples.
pub(crate) struct ServerIo<T> {
    prefix: Bytes,
    #[cfg(target_os = "linux")]
    sampler: Option<SendSampler>,
    inner: T,
    progress: Arc<AtomicU64>,
    /// Set once the write side is shut: until when to read on, what was read meanwhile, and
    /// the next look at what the peer has acknowledged.
    lingering: Option<Lingering>,
}

impl<T> ServerIo<T> {
    pub(crate) fn new(prefix: Bytes, inner: T, progress: Arc<AtomicU64>) -> Self {
        Self {
            prefix,
            #[cfg(target_os = "linux")]
            sampler: None,
            inner,
            progress,
            lingering: None,
        }
    }

    /// Read the socket as this connection sends, for TCP resume.
    #[cfg(target_os = "linux")]
    pub(crate) fn with_sampler(mut self, sampler: Option<SendSampler>) -> Self {
        self.sampler = sampler;
        self
    }

    /// The socket under this wrapper.
    pub(crate) fn socket(&self) -> std::os::fd::BorrowedFd<'_>
    where
        T: std::os::fd::AsFd,
    {
        self.inner.as_fd()
    }

    fn bump(&self) {
        self.progress.fetch_add(1, Ordering::Relaxed);
    }
}

impl<T: std::os::fd::AsFd> ServerIo<T> {
    fn wrote(&mut self) {
        self.bump();
        #[cfg(target_os = "linux")]
        if let Some(s) = &mut self.sampler {
            s.wrote(self.inner.as_fd());
        }
    }
}

/// A mechanism fed by a sending connection's [`SendSampler`] (today TCP resume's
/// measurement). Each sees the same reading; none reads the socket on its own.
#[cfg(target_os = "linux")]
pub(crate) trait SendPolicy: std::fmt::Debug + Send {
    /// One reading of the path, taken now.
    fn sample(&mut self, path: crate::tcp::PathSample);
}

/// The server's one sampler per connection: reads its `TCP_INFO` at most every
/// [`super::tcp_resume::SAMPLE_INTERVAL`] as it sends, once for every policy that watches it.
/// It holds no descriptor: the connection lends its socket at each write.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub(crate) struct SendSampler {
    next: std::time::Instant,
    policies: Vec<Box<dyn SendPolicy>>,
}

#[cfg(target_os = "linux")]
impl SendSampler {
    /// `None` when no policy watches.
    pub fn new(policies: Vec<Box<dyn SendPolicy>>) -> Option<Self> {
        (!policies.is_empty()).then(|| Self {
            next: std::time::Instant::now(),
            policies,
        })
    }

    /// Called after each write to `fd` that moved bytes.
    pub fn wrote(&mut self, fd: std::os::fd::BorrowedFd<'_>) {
        let now = std::time::Instant::now();
        if now < self.next {
            return;
        }
        self.next = now + super::tcp_resume::SAMPLE_INTERVAL;
        let Some(path) = crate::tcp::path_sample(&fd) else {
            return;
        };
        for p in &mut self.policies {
            p.sample(path);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ServerIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.bump();
        }
        res
    }
}

impl<T: AsyncRead + AsyncWrite + std::os::fd::AsFd + Unpin> AsyncWrite for ServerIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            self.wrote();
        }
        res
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            self.wrote();
        }
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.lingering.is_none() {
            std::task::ready!(Pin::new(&mut self.inner).poll_shutdown(cx))?;
            self.lingering = Some(Lingering {
                until: Box::pin(tokio::time::sleep(LINGER)),
                read: 0,
                next_check: Box::pin(tokio::time::sleep(std::time::Duration::ZERO)),
            });
        }
        let this = &mut *self;
        let Some(l) = this.lingering.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let mut scratch = [0u8; 16 << 10];
        loop {
            if l.read >= LINGER_BYTES {
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                // The peer's end, or an error: nothing left to lose.
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => l.read += buf.filled().len() as u64,
                Poll::Pending => break,
            }
        }
        if l.until.as_mut().poll(cx).is_ready() || all_acked(&this.inner) {
            return Poll::Ready(Ok(()));
        }
        while l.next_check.as_mut().poll(cx).is_ready() {
            l.next_check
                .as_mut()
                .reset(tokio::time::Instant::now() + LINGER_CHECK);
        }
        Poll::Pending
    }
}

/// A lingering close in progress (see the module header).
struct Lingering {
    until: Pin<Box<tokio::time::Sleep>>,
    read: u64,
    next_check: Pin<Box<tokio::time::Sleep>>,
}

/// Whether the peer has acknowledged every byte sent on `io` (true where that cannot be
/// read: then nothing is waited for).
fn all_acked(io: &impl std::os::fd::AsFd) -> bool {
    #[cfg(target_os = "linux")]
    {
        crate::sys::unacked_bytes(io.as_fd()).is_none_or(|n| n == 0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = io;
        true
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The server's close waits while its peer has not acknowledged what was sent (here: a
    /// client whose window is full because it has not read), reading what the client sends
    /// meanwhile, and completes once the client has read it all; the client then has every
    /// byte and a clean end.
    #[tokio::test]
    async fn a_close_lingers_until_the_peer_has_everything() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listen");
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(64 << 10).expect("rcvbuf");
        let mut client = socket
            .connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (stream, _) = listener.accept().await.expect("accept");
        let mut server = ServerIo::new(Bytes::new(), stream, Arc::new(AtomicU64::new(0)));

        // More than the client's window and both buffers hold: the last write waits until the
        // client reads, so write what fits, then close.
        let sent = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&sent);
        let closing = tokio::spawn(async move {
            let block = vec![7u8; 64 << 10];
            let fill = async {
                loop {
                    server.write_all(&block).await.expect("write");
                    counted.fetch_add(block.len() as u64, Ordering::Relaxed);
                }
            };
            // Whatever the buffers took in 300 ms is what the response was.
            let _ = tokio::time::timeout(std::time::Duration::from_millis(300), fill).await;
            server.shutdown().await.expect("shutdown");
        });
        // Bytes the server does not read, as an HTTP/2 client's WINDOW_UPDATEs.
        client.write_all(&[1u8; 512]).await.expect("client bytes");
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        assert!(
            !closing.is_finished(),
            "the close did not wait for a peer that had not acknowledged everything"
        );
        let mut got = Vec::new();
        client
            .read_to_end(&mut got)
            .await
            .expect("no reset: every byte and a clean end");
        closing.await.expect("the close completes");
        // Whole blocks counted, and at most one more cut short by the timeout.
        let whole = sent.load(Ordering::Relaxed);
        assert!(
            (whole..whole + (64 << 10)).contains(&(got.len() as u64)),
            "{} bytes received of {whole} sent",
            got.len()
        );
        assert!(got.iter().all(|&b| b == 7), "bytes other than those sent");
    }
}
