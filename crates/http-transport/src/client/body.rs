//! The body of one range response, pulled frame by frame from hyper with exact byte accounting,
//! an idle deadline per read, and the `Content-Digest` trailer picked up at the end.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use xfer_core::transport::{BoxFuture, RangeBody};
use xfer_core::{Sha256Digest, TransferError};

use crate::client::errors::chain;
use crate::client::response::trailer_content_digest;
use crate::client::transport::{Inner, ShareTicket};

/// A response body that must deliver exactly `expected` bytes.
pub(crate) struct HttpRangeBody {
    body: Incoming,
    peer: String,
    what: String,
    expected: u64,
    got: u64,
    idle: Duration,
    digest: Option<Sha256Digest>,
    done: bool,
    /// The shared HTTP/2 connection carrying this body, retired if the body stalls.
    stall: Option<(Arc<Inner>, ShareTicket)>,
}

impl HttpRangeBody {
    pub fn new(
        body: Incoming,
        peer: String,
        what: String,
        expected: u64,
        idle: Duration,
        stall: Option<(Arc<Inner>, ShareTicket)>,
    ) -> Self {
        Self {
            body,
            peer,
            what,
            expected,
            got: 0,
            idle,
            digest: None,
            done: false,
            stall,
        }
    }

    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.done {
            return Ok(None);
        }
        loop {
            let frame = match tokio::time::timeout(self.idle, self.body.frame()).await {
                Err(_) => {
                    if let Some((inner, ticket)) = &self.stall {
                        inner.retire_shared(*ticket).await;
                    }
                    return Err(TransferError::Timeout {
                        peer: self.peer.clone(),
                        what: format!("{} after {} bytes", self.what, self.got),
                        after: self.idle,
                    });
                }
                Ok(None) => return self.finish(),
                Ok(Some(Err(e))) => return Err(self.body_error(&e)),
                Ok(Some(Ok(frame))) => frame,
            };
            let frame = match frame.into_data() {
                Ok(data) => {
                    if data.is_empty() {
                        continue;
                    }
                    let len = data.len() as u64;
                    if self.got + len > self.expected {
                        return Err(TransferError::Unexpected {
                            peer: self.peer.clone(),
                            message: format!(
                                "{}: body longer than the {} bytes asked for",
                                self.what, self.expected
                            ),
                        });
                    }
                    self.got += len;
                    return Ok(Some(data));
                }
                Err(frame) => frame,
            };
            if let Ok(trailers) = frame.into_trailers() {
                match trailer_content_digest(&trailers) {
                    Ok(None) => {}
                    Ok(d) => self.digest = d,
                    Err(e) => {
                        return Err(TransferError::Protocol {
                            peer: self.peer.clone(),
                            message: format!("{}: {e}", self.what),
                        })
                    }
                }
            }
        }
    }

    fn finish(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.got < self.expected {
            return Err(TransferError::Truncated {
                peer: self.peer.clone(),
                expected: self.expected,
                got: self.got,
            });
        }
        self.done = true;
        Ok(None)
    }

    fn body_error(&self, e: &hyper::Error) -> TransferError {
        tracing::debug!(peer = %self.peer, what = %self.what, got = self.got, error = %chain(e),
            "body ended with an error");
        // A body cut short by a closed connection, an HTTP/2 reset or a length mismatch is a
        // truncation; the cause went to the debug log above. Socket errors (reset, broken pipe)
        // stay `Io`.
        let is_io = {
            let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
            let mut found = false;
            while let Some(c) = cur {
                found |= c
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() != std::io::ErrorKind::UnexpectedEof);
                cur = c.source();
            }
            found
        };
        if self.got < self.expected && !is_io {
            return TransferError::Truncated {
                peer: self.peer.clone(),
                expected: self.expected,
                got: self.got,
            };
        }
        let mut err = crate::client::errors::from_hyper(&self.peer, &self.what, e);
        if let TransferError::Protocol { message, .. } | TransferError::Unexpected { message, .. } =
            &mut err
        {
            message.push_str(&format!(" (after {} of {} bytes)", self.got, self.expected));
        }
        err
    }
}

impl RangeBody for HttpRangeBody {
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
