//! The body of one pipelined response: exactly the bytes asked for, read off the connection's
//! buffer, the `Content-Digest` trailer picked up at the end, and the connection handed to the
//! next answer only once the body has ended.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::OwnedMutexGuard;
use xfer_core::transport::{BoxFuture, RangeBody};
use xfer_core::{Sha256Digest, TransferError};

use crate::client::pipeline::conn::{PipeConn, Reader};
use crate::client::pipeline::wire::{Decoder, Piece};
use crate::client::response::trailer_content_digest;

pub(crate) struct PipedBody {
    conn: Arc<PipeConn>,
    /// The connection's read side, held until the body ends.
    reader: Option<OwnedMutexGuard<Reader>>,
    decoder: Decoder,
    seq: u64,
    keep_alive: bool,
    what: String,
    expected: u64,
    got: u64,
    idle: Duration,
    digest: Option<Sha256Digest>,
    done: bool,
}

/// Where a body sits on its connection and how it ends.
pub(crate) struct Framed {
    pub reader: OwnedMutexGuard<Reader>,
    pub decoder: Decoder,
    pub seq: u64,
    pub keep_alive: bool,
}

impl PipedBody {
    pub fn new(
        conn: Arc<PipeConn>,
        framed: Framed,
        what: String,
        expected: u64,
        idle: Duration,
    ) -> Self {
        Self {
            conn,
            reader: Some(framed.reader),
            decoder: framed.decoder,
            seq: framed.seq,
            keep_alive: framed.keep_alive,
            what,
            expected,
            got: 0,
            idle,
            digest: None,
            done: false,
        }
    }

    fn peer(&self) -> String {
        self.conn.peer.clone()
    }

    /// Fail the body and give the connection up (what is left of this body would be read as
    /// the next answer).
    fn fail(&mut self, err: TransferError) -> TransferError {
        self.reader = None;
        self.conn.break_off("body failed");
        err
    }

    fn protocol(&mut self, message: String) -> TransferError {
        let err = TransferError::Protocol {
            peer: self.peer(),
            message: format!("{}: {message} (after {} bytes)", self.what, self.got),
        };
        self.fail(err)
    }

    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.done {
            return Ok(None);
        }
        loop {
            let Some(reader) = self.reader.as_mut() else {
                return Err(TransferError::Protocol {
                    peer: self.peer(),
                    message: format!("{}: read after a failure", self.what),
                });
            };
            let piece = match self.decoder.decode(&mut reader.buf) {
                Ok(p) => p,
                Err(m) => return Err(self.protocol(m)),
            };
            match piece {
                Piece::Data(data) => {
                    let len = data.len() as u64;
                    if self.got + len > self.expected {
                        let err = TransferError::Unexpected {
                            peer: self.peer(),
                            message: format!(
                                "{}: body longer than the {} bytes asked for",
                                self.what, self.expected
                            ),
                        };
                        return Err(self.fail(err));
                    }
                    self.got += len;
                    return Ok(Some(data));
                }
                Piece::End(trailers) => return self.finish(trailers),
                Piece::NeedMore => {}
            }
            match tokio::time::timeout(self.idle, reader.fill()).await {
                Ok(Ok(0)) => match self.decoder.at_eof() {
                    Ok(Piece::End(_)) => {
                        self.keep_alive = false;
                        return self.finish(None);
                    }
                    _ => {
                        let err = TransferError::Truncated {
                            peer: self.peer(),
                            expected: self.expected,
                            got: self.got,
                        };
                        return Err(self.fail(err));
                    }
                },
                Ok(Ok(_)) => {}
                Ok(Err(source)) => {
                    tracing::debug!(peer = %self.conn.peer, what = %self.what, got = self.got,
                        error = %source, "pipelined body ended with an error");
                    let err = TransferError::Io {
                        peer: self.peer(),
                        source,
                    };
                    return Err(self.fail(err));
                }
                Err(_) => {
                    let err = TransferError::Timeout {
                        peer: self.peer(),
                        what: format!("{} after {} bytes", self.what, self.got),
                        after: self.idle,
                    };
                    return Err(self.fail(err));
                }
            }
        }
    }

    fn finish(
        &mut self,
        trailers: Option<http::HeaderMap>,
    ) -> Result<Option<Bytes>, TransferError> {
        if self.got < self.expected {
            let err = TransferError::Truncated {
                peer: self.peer(),
                expected: self.expected,
                got: self.got,
            };
            return Err(self.fail(err));
        }
        let digest = trailers.as_ref().map(trailer_content_digest);
        // The body is complete and framed: the connection stays in step either way. The read
        // side goes first, so the next answer finds it free when its turn comes.
        self.reader = None;
        self.conn.finished(self.seq, self.keep_alive);
        self.done = true;
        match digest {
            Some(Ok(d)) => self.digest = d,
            Some(Err(e)) => {
                return Err(TransferError::Protocol {
                    peer: self.peer(),
                    message: format!("{}: {e}", self.what),
                })
            }
            None => {}
        }
        Ok(None)
    }
}

impl Drop for PipedBody {
    fn drop(&mut self) {
        if !self.done && self.reader.is_some() {
            self.reader = None;
            self.conn.break_off("body dropped before its end");
        }
    }
}

impl RangeBody for PipedBody {
    fn next_data(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, TransferError>> {
        Box::pin(self.next())
    }

    fn trailer_digest(&self) -> Option<Sha256Digest> {
        if self.done {
            self.digest
        } else {
            None
        }
    }
}
