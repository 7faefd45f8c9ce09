//! The client side of uploads over `xfer/1` (`docs/upload-protocol.md`): the same four
//! requests as over HTTP, as PUT and STAT with an UPLOAD section.

use std::ops::Range;

use bytes::Bytes;
use xfer_core::digest::Sha256Digest;
use xfer_core::transport::{ChunkUpload, UploadStatus};
use xfer_core::TransferError;

use super::Inner;
use crate::wire::{status, Method, Request, UploadFields};

impl Inner {
    fn upload_request(
        &self,
        method: Method,
        range: Option<Range<u64>>,
        upload: UploadFields,
    ) -> Request {
        Request {
            method,
            path: self.target.path_and_query.clone(),
            range,
            want_digest: false,
            checksums: Vec::new(),
            validator: None,
            token: self.config.token.as_ref().map(|t| t.expose().to_string()),
            upload: Some(upload),
        }
    }

    /// Send `req` (and `body`), and turn anything but a 2xx into the error it is.
    async fn upload_exchange(
        &self,
        conn: usize,
        req: &Request,
        body: Option<Bytes>,
        what: &str,
    ) -> Result<(), TransferError> {
        let (head, _recv, _) = self.exchange_with(conn, req, body).await?;
        if (200..300).contains(&head.status) {
            Ok(())
        } else {
            Err(self.status_error(&head, format!("{what} {}", req.path)))
        }
    }

    pub(crate) async fn put_whole(
        &self,
        conn: usize,
        data: Bytes,
        sha256: Sha256Digest,
    ) -> Result<(), TransferError> {
        let req = self.upload_request(
            Method::Put,
            None,
            UploadFields {
                content_sha256: Some(sha256),
                ..UploadFields::default()
            },
        );
        self.upload_exchange(conn, &req, Some(data), "PUT").await
    }

    pub(crate) async fn put_chunk(
        &self,
        conn: usize,
        c: &ChunkUpload,
    ) -> Result<(), TransferError> {
        let req = self.upload_request(
            Method::Put,
            Some(c.range.clone()),
            UploadFields {
                id: Some(c.id.clone()),
                total: Some(c.total),
                content_sha256: Some(c.sha256),
                ..UploadFields::default()
            },
        );
        let what = format!(
            "PUT bytes {}-{}",
            c.range.start,
            c.range.end.saturating_sub(1)
        );
        let (head, _recv, _) = self.exchange_with(conn, &req, Some(c.data.clone())).await?;
        if (200..300).contains(&head.status) {
            return Ok(());
        }
        // A 400 that carries the upload's size and received ranges: the chunk arrived
        // damaged (its digest did not match), so it is worth sending again.
        if head.status == status::BAD_REQUEST && head.size == c.total && c.total > 0 {
            return Err(TransferError::Unexpected {
                peer: self.peer.clone(),
                message: format!(
                    "{what} {}: the chunk arrived different from its digest; sending it again",
                    req.path
                ),
            });
        }
        Err(self.status_error(&head, format!("{what} {}", req.path)))
    }

    pub(crate) async fn upload_status(
        &self,
        conn: usize,
        id: &str,
    ) -> Result<Option<UploadStatus>, TransferError> {
        let req = self.upload_request(
            Method::Stat,
            None,
            UploadFields {
                id: Some(id.to_string()),
                ..UploadFields::default()
            },
        );
        let (head, _recv, _) = self.exchange_with(conn, &req, None).await?;
        match head.status {
            status::OK => Ok(Some(UploadStatus {
                size: head.size,
                received: head
                    .message
                    .as_deref()
                    .map(UploadStatus::parse_ranges)
                    .unwrap_or_default(),
            })),
            status::NOT_FOUND => Ok(None),
            _ => Err(self.status_error(&head, format!("STAT (upload status) {}", req.path))),
        }
    }

    pub(crate) async fn complete_upload(
        &self,
        conn: usize,
        id: &str,
        sha256: Sha256Digest,
    ) -> Result<(), TransferError> {
        let req = self.upload_request(
            Method::Put,
            None,
            UploadFields {
                id: Some(id.to_string()),
                repr_sha256: Some(sha256),
                complete: true,
                ..UploadFields::default()
            },
        );
        self.upload_exchange(conn, &req, None, "PUT (complete upload)")
            .await
    }
}
