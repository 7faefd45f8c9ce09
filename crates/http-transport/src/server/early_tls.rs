//! Accepting TLS with early data (0-RTT, RFC 8446 §2.3).
//!
//! tokio-rustls' acceptor returns a stream only once the handshake is complete, which is a
//! round trip after the client's early data arrived: answering then saves the client nothing.
//! So the handshake is driven here. A connection that does not send early data (or whose
//! early data rustls refused) is handed to tokio-rustls once complete, as before. One whose
//! early data was accepted becomes an [`EarlyServerTls`] as soon as the server's flight is
//! out: hyper reads the early bytes at once and its answer goes out before the client's
//! `Finished` (0.5-RTT data).
//!
//! Replay: rustls accepts early data only with a single-use ticket from the server's own
//! session cache, so a captured ClientHello cannot be replayed to this server; still, a
//! request read while the handshake is unconfirmed is flagged ([`EarlyState::unconfirmed`])
//! and the handler answers one that is not replay-safe with `425 Too Early` (RFC 8470).

use std::io::{self, Read as _, Write as _};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::ServerConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsAcceptor;

/// What the handler needs to know about a connection that began with early data.
#[derive(Debug, Default)]
pub(crate) struct EarlyState {
    /// Early bytes were handed to HTTP.
    delivered: AtomicBool,
    /// The client's `Finished` arrived: it holds the session's keys and is live, so what
    /// comes now cannot be a replay.
    confirmed: AtomicBool,
}

impl EarlyState {
    /// A request parsed now may have come (partly) in early data that was not yet
    /// confirmed by the end of the handshake.
    pub fn unconfirmed(&self) -> bool {
        self.delivered.load(Ordering::Acquire) && !self.confirmed.load(Ordering::Acquire)
    }
}

/// A TLS connection, accepted.
pub(crate) enum Accepted<IO> {
    /// The handshake is complete.
    Complete(tokio_rustls::server::TlsStream<IO>),
    /// The client's early data was accepted; the handshake completes while HTTP runs.
    Early(EarlyServerTls<IO>),
}

impl<IO> Accepted<IO> {
    pub fn session(&self) -> &ServerConnection {
        match self {
            Self::Complete(s) => s.get_ref().1,
            Self::Early(s) => &s.conn,
        }
    }
}

/// Drive the server side of a handshake until it is complete, or until early data was
/// accepted and the server's flight is out.
pub(crate) async fn accept<IO>(acceptor: &TlsAcceptor, io: IO) -> io::Result<Accepted<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let conn = ServerConnection::new(acceptor.config().clone()).map_err(io::Error::other)?;
    let mut tls = EarlyServerTls {
        io,
        conn,
        eof: false,
        closing: false,
        state: Arc::new(EarlyState::default()),
    };
    std::future::poll_fn(|cx| tls.poll_handshake(cx)).await?;
    if !tls.conn.is_handshaking() {
        let EarlyServerTls { io, mut conn, .. } = tls;
        // Hand the finished session to tokio-rustls: the rest of the connection runs on its
        // stream, exactly as one it accepted itself.
        let stream = acceptor
            .accept_with(io, |fresh| std::mem::swap(fresh, &mut conn))
            .await?;
        return Ok(Accepted::Complete(stream));
    }
    Ok(Accepted::Early(tls))
}

/// A server TLS stream whose handshake may still be under way, with early data accepted.
pub(crate) struct EarlyServerTls<IO> {
    io: IO,
    conn: ServerConnection,
    /// The peer closed its side of TCP.
    eof: bool,
    /// `close_notify` is queued.
    closing: bool,
    state: Arc<EarlyState>,
}

impl<IO> EarlyServerTls<IO> {
    pub fn state(&self) -> Arc<EarlyState> {
        self.state.clone()
    }
}

/// `std::io` over a tokio socket for rustls: `Pending` becomes `WouldBlock`.
struct SyncIo<'a, 'b, IO> {
    io: &'a mut IO,
    cx: &'a mut Context<'b>,
}

impl<IO: AsyncRead + Unpin> io::Read for SyncIo<'_, '_, IO> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut buf = ReadBuf::new(buf);
        match Pin::new(&mut *self.io).poll_read(self.cx, &mut buf) {
            Poll::Ready(Ok(())) => Ok(buf.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<IO: AsyncWrite + Unpin> io::Write for SyncIo<'_, '_, IO> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match Pin::new(&mut *self.io).poll_flush(self.cx) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

fn pending_on_would_block<T>(r: io::Result<T>) -> Poll<io::Result<T>> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        r => Poll::Ready(r),
    }
}

impl<IO> EarlyServerTls<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    /// Send what rustls has queued (handshake flight, tickets, records, alerts).
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.wants_write() {
            let mut io = SyncIo {
                io: &mut self.io,
                cx,
            };
            if ready!(pending_on_would_block(self.conn.write_tls(&mut io)))? == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Read one batch of TLS records and process them. `Ok(false)` at the peer's end of TCP.
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        if self.eof {
            return Poll::Ready(Ok(false));
        }
        let mut io = SyncIo {
            io: &mut self.io,
            cx,
        };
        if ready!(pending_on_would_block(self.conn.read_tls(&mut io)))? == 0 {
            self.eof = true;
            return Poll::Ready(Ok(false));
        }
        if let Err(e) = self.conn.process_new_packets() {
            // The alert rustls queued is worth a try; the error is what matters.
            let _ = self.poll_send(cx);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
        }
        if !self.conn.is_handshaking() {
            self.state.confirmed.store(true, Ordering::Release);
        }
        Poll::Ready(Ok(true))
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            ready!(self.poll_send(cx))?;
            if !self.conn.is_handshaking() || self.conn.early_data().is_some() {
                return Poll::Ready(Ok(()));
            }
            if !ready!(self.poll_receive(cx))? {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }
}

impl<IO> AsyncRead for EarlyServerTls<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            // Early data precedes everything sent after the handshake.
            if let Some(mut early) = this.conn.early_data() {
                let n = early.read(buf.initialize_unfilled())?;
                if n > 0 {
                    buf.advance(n);
                    this.state.delivered.store(true, Ordering::Release);
                    return Poll::Ready(Ok(()));
                }
            }
            match this.conn.reader().read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            // Tickets and anything else rustls queued go out while we wait for data.
            if let Poll::Ready(Err(e)) = this.poll_send(cx) {
                return Poll::Ready(Err(e));
            }
            if !ready!(this.poll_receive(cx))? {
                // The peer ended TCP; rustls says whether that was clean on the next read.
                match this.conn.reader().read(buf.initialize_unfilled()) {
                    Ok(n) => {
                        buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()))
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        }
    }
}

impl<IO> AsyncWrite for EarlyServerTls<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            // rustls buffers up to its limit; what it took is written, so report it.
            let n = this.conn.writer().write(buf)?;
            if let Poll::Ready(Err(e)) = this.poll_send(cx) {
                return Poll::Ready(Err(e));
            }
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            if this.conn.wants_write() {
                // Its buffer is full: wait until the socket takes some.
                ready!(this.poll_send(cx))?;
                continue;
            }
            // Nothing to send, yet no room: rustls holds application data until the handshake
            // completes (no 0.5-RTT data, e.g. with client authentication), so read on.
            if !ready!(this.poll_receive(cx))? {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.conn.writer().flush()?;
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.closing {
            this.conn.send_close_notify();
            this.closing = true;
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
