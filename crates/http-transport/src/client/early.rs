//! TLS 1.3 early data on the client: a connection that resumes a session whose ticket allows
//! it sends its first request with the ClientHello (RFC 8446 §2.3), so the answer comes one
//! round trip sooner.
//!
//! tokio-rustls writes early data while the handshake is under way and, when the server
//! refuses it (it does not know the ticket, e.g. after a restart), writes the same bytes again
//! once the handshake completes. What this module adds: learning how the handshake ended
//! (a request's round trips depend on it), checking the protocol ALPN settled on is the one
//! the request was written in, and letting requests that must not be replayed wait for the
//! end of the handshake ([`Outcome::ended`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Method;
use rustls::HandshakeKind;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio_rustls::client::TlsStream;

/// Whether a request may go as early data. An attacker who captured the ClientHello can
/// replay early data (RFC 8446 §8, RFC 8470), so only requests whose repetition changes
/// nothing may: reads. Uploads, copies and deletions wait for the handshake.
pub(crate) fn may_ride_early(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// How a handshake that began with early data ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    /// The server took the early data: the request needed no handshake round trip.
    pub accepted: bool,
    /// The server asked for another ClientHello (one more round trip).
    pub retried_hello: bool,
}

/// How a connection's handshake ended, once it has; shared by every request on it.
#[derive(Debug, Clone)]
pub(crate) struct Outcome(watch::Receiver<Option<Ended>>);

impl Outcome {
    /// The end of the handshake, if it came.
    pub fn get(&self) -> Option<Ended> {
        *self.0.borrow()
    }

    /// Wait for the end of the handshake. `None` when the connection closed before it.
    pub async fn ended(&self) -> Option<Ended> {
        let mut rx = self.0.clone();
        let ended = rx.wait_for(Option::is_some).await.ok().and_then(|e| *e);
        ended
    }
}

/// A TLS stream whose handshake is still under way (early data being written), reporting
/// how it ended to its [`Outcome`].
pub(crate) struct EarlyTls<IO> {
    inner: TlsStream<IO>,
    /// Until the handshake ends.
    report: Option<watch::Sender<Option<Ended>>>,
    /// The request was written as HTTP/2: the server must agree to `h2`.
    h2: bool,
}

impl<IO> EarlyTls<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    pub fn new(inner: TlsStream<IO>, h2: bool) -> (Self, Outcome) {
        let (tx, rx) = watch::channel(None);
        let s = Self {
            inner,
            report: Some(tx),
            h2,
        };
        (s, Outcome(rx))
    }

    /// Once the handshake has ended: report it, and fail the connection if ALPN settled on
    /// another protocol than the one the early bytes were written in.
    fn check(&mut self) -> io::Result<()> {
        if self.report.is_none() {
            return Ok(());
        }
        let session = self.inner.get_ref().1;
        if session.is_handshaking() {
            return Ok(());
        }
        let ended = Ended {
            accepted: session.is_early_data_accepted(),
            retried_hello: session.handshake_kind()
                == Some(HandshakeKind::FullWithHelloRetryRequest),
        };
        let h2_agreed = session.alpn_protocol() == Some(b"h2".as_slice());
        if let Some(tx) = self.report.take() {
            tx.send_replace(Some(ended));
        }
        tracing::debug!(
            accepted = ended.accepted,
            "tls handshake with early data ended"
        );
        if self.h2 && !h2_agreed {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "server did not agree to h2 by alpn",
            ));
        }
        Ok(())
    }

    fn after<T>(&mut self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match (self.check(), polled) {
            (Err(e), _) => Poll::Ready(Err(e)),
            (Ok(()), polled) => polled,
        }
    }
}

impl<IO> AsyncRead for EarlyTls<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.after(polled)
    }
}

impl<IO> AsyncWrite for EarlyTls<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.after(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.after(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.after(polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.after(polled)
    }
}
