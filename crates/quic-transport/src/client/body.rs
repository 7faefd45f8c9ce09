//! Response bodies: a range read as it arrives, or a whole small body.

use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use quinn::{ReadError, RecvStream};
use tokio::io::AsyncReadExt as _;
use xfer_core::transport::{BoxFuture, RangeBody};
use xfer_core::{Sha256Digest, TransferError};

use crate::wire::{decode_trailer, ErrorCode, TRAILER_LEN};

use super::*;

/// A streamed body (a listing): bytes to FIN, each read bounded by the idle timeout.
pub(super) struct StreamedBody {
    pub(super) peer: String,
    pub(super) what: String,
    pub(super) recv: RecvStream,
    pub(super) idle: Duration,
    pub(super) done: bool,
}

impl StreamedBody {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.done {
            return Ok(None);
        }
        match tokio::time::timeout(self.idle, self.recv.read_chunk(64 * 1024, true)).await {
            Err(_) => Err(TransferError::Timeout {
                peer: self.peer.clone(),
                what: self.what.clone(),
                after: self.idle,
            }),
            Ok(Ok(Some(chunk))) => Ok(Some(chunk.bytes)),
            Ok(Ok(None)) => {
                self.done = true;
                Ok(None)
            }
            Ok(Err(e)) => Err(read_error(&self.peer, e, &self.what, self.idle)),
        }
    }
}

impl RangeBody for StreamedBody {
    fn next_data(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, TransferError>> {
        Box::pin(self.next())
    }

    fn trailer_digest(&self) -> Option<Sha256Digest> {
        None
    }
}

impl Drop for StreamedBody {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.recv.stop(ErrorCode::Cancelled.varint());
        }
    }
}

/// The body of one GET: exactly `expected` bytes, then the trailer if announced, then FIN.
pub(super) struct QuicBody {
    pub(super) peer: String,
    /// Longest wait for any read (see [`QuicClientConfig::idle_timeout`]).
    pub(super) stall: Duration,
    pub(super) recv: RecvStream,
    pub(super) expected: u64,
    pub(super) got: u64,
    pub(super) trailer: bool,
    pub(super) digest: Option<Sha256Digest>,
    pub(super) done: bool,
    /// Where received STREAM frames are gathered into pieces; pieces are split off its front
    /// and it is replaced once too little of it is left.
    pub(super) buf: BytesMut,
    /// Whether frames are handed on as quinn holds them ([`PASS_THROUGH`]) or gathered:
    /// decided by the body's first frame, `None` before it.
    pub(super) pass_through: Option<bool>,
}

/// Largest piece [`QuicBody`] hands on. quinn yields one STREAM frame (one datagram, about
/// 1.2-1.4 KB) per `read_chunk`, and everything downstream (the lane's select, timers,
/// progress, the hasher, the write batch, the boxed future of `next_data`) costs per piece, so
/// a body read frame by frame paid that about 800,000 times per GiB. Copying whatever frames
/// are already there into one piece (one lock of the connection, one memcpy) costs less.
pub(super) const BODY_PIECE: usize = 256 << 10;
/// Capacity of a [`QuicBody`] gathering buffer: four full pieces per allocation.
pub(super) const BODY_BUFFER: usize = 4 * BODY_PIECE;
/// A body whose first STREAM frame is at least this large has its frames handed on as quinn
/// holds them (slices of the datagrams it decrypted), not copied into pieces: the frames of
/// loopback's 64 KiB datagrams. Per piece downstream that is 16,000 pieces per GiB, and the
/// copy it saves cost the client more than they do. On paths of smaller datagrams (an
/// Ethernet path's 1.4 KB frames, a jumbo frame's 9 KB) frames are gathered as before:
/// deciding frame by frame there (one read for the first frame of every piece) cost the
/// client up to 25 % more CPU per GiB on a 1500-byte path, 10 % on average.
pub(super) const PASS_THROUGH: usize = 32 << 10;

impl QuicBody {
    pub(super) fn new(
        inner: &Inner,
        recv: RecvStream,
        range: &std::ops::Range<u64>,
        trailer: bool,
    ) -> Self {
        Self {
            peer: inner.peer.clone(),
            stall: inner.config.idle_timeout,
            recv,
            expected: range.end - range.start,
            got: 0,
            trailer,
            digest: None,
            done: false,
            buf: BytesMut::new(),
            pass_through: None,
        }
    }

    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.done {
            return Ok(None);
        }
        let remaining = self.expected - self.got;
        if remaining == 0 {
            self.finish().await?;
            return Ok(None);
        }
        // Never read past the body: the trailer follows in the same stream.
        let want = usize::try_from(remaining).map_or(BODY_PIECE, |r| r.min(BODY_PIECE));
        if self.pass_through != Some(false) {
            let read = tokio::time::timeout(self.stall, self.recv.read_chunk(want, true)).await;
            let chunk = match read.map_err(|_| self.stalled("body"))? {
                Ok(Some(chunk)) => chunk.bytes,
                Ok(None) => return Err(self.truncated()),
                Err(e) => return Err(self.body_error(e)),
            };
            // The body's first frame says what its path carries; a small one is handed on
            // alone, and the pieces after it are gathered.
            self.pass_through
                .get_or_insert(chunk.len() >= PASS_THROUGH.min(want));
            self.got += chunk.len() as u64;
            return Ok(Some(chunk));
        }
        if self.buf.capacity() - self.buf.len() < want {
            self.buf = BytesMut::with_capacity(BODY_BUFFER);
        }
        let mut room = (&mut self.buf).limit(want);
        let read = tokio::time::timeout(self.stall, self.recv.read_buf(&mut room)).await;
        match read.map_err(|_| self.stalled("body"))? {
            Ok(0) => Err(self.truncated()),
            Ok(n) => {
                self.got += n as u64;
                Ok(Some(self.buf.split().freeze()))
            }
            Err(e) => Err(
                // quinn's `AsyncRead` wraps its `ReadError` in the `io::Error`.
                match e.get_ref().and_then(|i| i.downcast_ref::<ReadError>()) {
                    Some(re) => self.body_error(re.clone()),
                    None => TransferError::Io {
                        peer: self.peer.clone(),
                        source: e,
                    },
                },
            ),
        }
    }

    fn truncated(&self) -> TransferError {
        TransferError::Truncated {
            peer: self.peer.clone(),
            expected: self.expected,
            got: self.got,
        }
    }

    fn body_error(&self, e: ReadError) -> TransferError {
        let what = format!("body (after {} of {} bytes)", self.got, self.expected);
        read_error(&self.peer, e, &what, self.stall)
    }

    /// Read the trailer (if any) and require the end of the stream.
    async fn finish(&mut self) -> Result<(), TransferError> {
        if self.trailer {
            let mut buf = [0u8; TRAILER_LEN];
            tokio::time::timeout(self.stall, self.recv.read_exact(&mut buf))
                .await
                .map_err(|_| self.stalled("trailer"))?
                .map_err(|e| read_exact_error(&self.peer, e, "trailer", self.stall))?;
            self.digest = Some(decode_trailer(&buf).map_err(|e| protocol(&self.peer, &e))?);
        }
        let end = tokio::time::timeout(self.stall, self.recv.read_chunk(1, true)).await;
        match end.map_err(|_| self.stalled("end of the response"))? {
            Ok(None) => {
                self.done = true;
                Ok(())
            }
            Ok(Some(_)) => Err(TransferError::Protocol {
                peer: self.peer.clone(),
                message: "bytes after the end of the response".into(),
            }),
            Err(e) => Err(read_error(&self.peer, e, "end of the response", self.stall)),
        }
    }
}

impl QuicBody {
    fn stalled(&self, what: &str) -> TransferError {
        TransferError::Timeout {
            peer: self.peer.clone(),
            what: format!(
                "stream stalled in the {what} after {} of {} bytes",
                self.got, self.expected
            ),
            after: self.stall,
        }
    }
}

impl RangeBody for QuicBody {
    fn next_data(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, TransferError>> {
        Box::pin(self.next())
    }

    fn trailer_digest(&self) -> Option<Sha256Digest> {
        self.digest
    }
}

impl Drop for QuicBody {
    fn drop(&mut self) {
        if !self.done {
            // Tell the server to stop sending what nobody will read.
            let _ = self.recv.stop(ErrorCode::Cancelled.varint());
        }
    }
}
