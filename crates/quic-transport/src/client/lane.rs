//! A lane: its requests on one connection of the pool.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use xfer_core::transport::{BoxFuture, Lane, RangeBody, RangeRequest, RoundTrips};
use xfer_core::TransferError;

use crate::wire::{status, Method, Request};

use super::*;

/// One stream slot on one connection.
pub(super) struct QuicLane {
    pub(super) inner: Arc<Inner>,
    pub(super) conn: usize,
    pub(super) slot: usize,
    /// When the lane was asked for: a connection made after this was waited for.
    pub(super) created: Instant,
    pub(super) first: Option<RoundTrips>,
}

impl Lane for QuicLane {
    fn put_whole<'a>(
        &'a mut self,
        data: Bytes,
        sha256: xfer_core::Sha256Digest,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        Box::pin(self.inner.put_whole(self.conn, data, sha256))
    }

    fn put_chunk<'a>(
        &'a mut self,
        chunk: &'a xfer_core::transport::ChunkUpload,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        Box::pin(self.inner.put_chunk(self.conn, chunk))
    }

    fn upload_status<'a>(
        &'a mut self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<xfer_core::transport::UploadStatus>, TransferError>> {
        Box::pin(self.inner.upload_status(self.conn, id))
    }

    fn complete_upload<'a>(
        &'a mut self,
        id: &'a str,
        sha256: xfer_core::Sha256Digest,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        Box::pin(self.inner.complete_upload(self.conn, id, sha256))
    }

    fn fetch<'a>(
        &'a mut self,
        req: &'a RangeRequest,
    ) -> BoxFuture<'a, Result<Box<dyn RangeBody + 'a>, TransferError>> {
        Box::pin(async move {
            let inner = &self.inner;
            let wire_req = Request {
                upload: None,
                token: self
                    .inner
                    .config
                    .token
                    .as_ref()
                    .map(|t| t.expose().to_string()),
                method: Method::Get,
                path: inner.target.path_and_query.clone(),
                range: (!req.whole).then(|| req.range.clone()),
                want_digest: req.want_digest,
                checksums: Vec::new(),
                validator: req.validator.clone(),
            };
            let (head, recv, rt) = inner
                .exchange_since(self.conn, &wire_req, None, Some(self.created))
                .await?;
            self.first.get_or_insert(rt);
            let what = || format!("GET {} bytes {:?}", wire_req.path, req.range);
            if head.status != status::OK && head.status != status::PARTIAL_CONTENT {
                return Err(inner.status_error(&head, what()));
            }
            if head.size != req.expected_size {
                return Err(TransferError::RemoteChanged {
                    url: inner.url.clone(),
                    what: format!("size was {} and is now {}", req.expected_size, head.size),
                });
            }
            if let Some(v) = &req.validator {
                if head.etag.as_deref() != Some(v.as_str()) {
                    return Err(TransferError::RemoteChanged {
                        url: inner.url.clone(),
                        what: format!(
                            "etag was {v} and is now {}",
                            head.etag.as_deref().unwrap_or("absent")
                        ),
                    });
                }
            }
            let expected = if req.whole {
                0..req.expected_size
            } else {
                req.range.clone()
            };
            if head.range.as_ref() != Some(&expected) {
                return Err(TransferError::Unexpected {
                    peer: inner.peer.clone(),
                    message: format!("asked for bytes {expected:?}, got {:?}", head.range),
                });
            }
            Ok(
                Box::new(QuicBody::new(inner, recv, &expected, head.trailer))
                    as Box<dyn RangeBody + 'a>,
            )
        })
    }

    fn label(&self) -> String {
        format!("conn {} / stream slot {}", self.conn, self.slot)
    }

    fn first_round_trips(&self) -> Option<RoundTrips> {
        self.first
    }

    fn connection(&self) -> usize {
        self.conn
    }
}
