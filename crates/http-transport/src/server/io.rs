//! I/O wrappers under hyper: replaying bytes read while sniffing the protocol, and counting
//! progress for the idle timeout.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An I/O object that first yields `prefix` (bytes already read from `inner`), then reads from
/// `inner`. Writes go straight through. It also bumps `progress` on every read or write that
/// moved bytes, which the connection's idle watchdog samples.
pub(crate) struct ServerIo<T> {
    prefix: Bytes,
    #[cfg(target_os = "linux")]
    sampler: Option<SendSampler>,
    inner: T,
    progress: Arc<AtomicU64>,
}

impl<T> ServerIo<T> {
    pub(crate) fn new(prefix: Bytes, inner: T, progress: Arc<AtomicU64>) -> Self {
        Self {
            prefix,
            #[cfg(target_os = "linux")]
            sampler: None,
            inner,
            progress,
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

impl<T: AsyncWrite + std::os::fd::AsFd + Unpin> AsyncWrite for ServerIo<T> {
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
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
