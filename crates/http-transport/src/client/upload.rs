//! The client side of uploads over HTTP (`docs/upload-protocol.md`): a whole file in one `PUT`,
//! the chunks of a parallel upload, the `HEAD` that asks what the server holds, and the
//! completing `PUT`.

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, StatusCode};
use xfer_core::checksum::Checksum;
use xfer_core::digest::{Sha256Digest, CONTENT_DIGEST, REPR_DIGEST};
use xfer_core::transport::{ChunkUpload, FileBody, UploadStatus};
use xfer_core::TransferError;

use crate::client::lane::{read_small, Answer, HttpLane};
use crate::client::req_body::BodySource;
use crate::client::response::{declared_checksums, header_str};

const UPLOAD_ID: &str = "xfer-upload";
const UPLOAD_COMPLETE: &str = "xfer-upload-complete";
const UPLOAD_RECEIVED: &str = "xfer-upload-received";
const UPLOAD_SIZE: &str = "xfer-upload-size";
/// In an `OPTIONS` answer: the server understands the parallel upload protocol.
const UPLOAD_PROTOCOL: &str = "xfer-upload-protocol";

/// Longest refusal text quoted in an error.
const DETAIL_LIMIT: usize = 300;

impl HttpLane {
    pub(crate) async fn put_whole_file(
        &mut self,
        data: Bytes,
        sha256: Sha256Digest,
    ) -> Result<(), TransferError> {
        let headers = [digest_header(CONTENT_DIGEST, &sha256)?, octet_stream()];
        let answer = self
            .request_with_body(Method::PUT, self.target(), &headers, data, "")
            .await?;
        self.expect_success(answer, "PUT").await
    }

    /// One plain `PUT` whose body is the whole file, read from disk as it is sent; any
    /// WebDAV server takes it. Returns what the server declared of what it stored.
    pub(crate) async fn put_whole_from_file(
        &mut self,
        body: FileBody,
    ) -> Result<Vec<Checksum>, TransferError> {
        let headers = [
            (header::CONTENT_LENGTH, HeaderValue::from(body.size)),
            octet_stream(),
        ];
        let answer = self
            .request_with_body(
                Method::PUT,
                self.target(),
                &headers,
                BodySource::File(body),
                "",
            )
            .await?;
        let declared = declared_checksums(answer.response.headers());
        self.expect_success(answer, "PUT").await?;
        Ok(declared)
    }

    /// `OPTIONS` on the target: does the server announce the parallel upload protocol? A
    /// refusal (many servers answer 405 or 501) means no; only a failure to ask is an error.
    pub(crate) async fn announces_upload_protocol(&mut self) -> Result<bool, TransferError> {
        let answer = self
            .request(Method::OPTIONS, self.target(), &[], " (upload protocol)")
            .await?;
        let speaks = answer.response.status().is_success()
            && header_str(
                answer.response.headers(),
                HeaderName::from_static(UPLOAD_PROTOCOL),
            )
            .is_some_and(|v| v.trim() == "1");
        // The answer's text, if any, is not needed; reading it frees the connection.
        let _ = self.expect_success(answer, "OPTIONS").await;
        Ok(speaks)
    }

    pub(crate) async fn put_one_chunk(&mut self, c: &ChunkUpload) -> Result<(), TransferError> {
        let range = format!(
            "bytes {}-{}/{}",
            c.range.start,
            c.range.end.saturating_sub(1),
            c.total
        );
        let headers = [
            id_header(&c.id)?,
            (header::CONTENT_RANGE, value(&range)?),
            digest_header(CONTENT_DIGEST, &c.sha256)?,
            octet_stream(),
        ];
        let suffix = format!(" {range}");
        let answer = self
            .request_with_body(
                Method::PUT,
                self.target(),
                &headers,
                c.data.clone(),
                &suffix,
            )
            .await?;
        // A 400 that lists the received ranges: the chunk arrived damaged (its digest did
        // not match), so it is worth sending again, unlike other refusals.
        if answer.response.status() == StatusCode::BAD_REQUEST
            && answer
                .response
                .headers()
                .contains_key(xfer_service::upload::UPLOAD_RECEIVED)
        {
            let peer = answer.peer.clone();
            // Drained, so that the connection serves the next request.
            let _ = read_small(answer.response.into_body(), self.inner(), &peer, "PUT").await;
            return Err(TransferError::Unexpected {
                peer,
                message: format!(
                    "PUT{suffix}: the chunk arrived different from its Content-Digest; sending it again"
                ),
            });
        }
        self.expect_success(answer, &format!("PUT{suffix}")).await
    }

    pub(crate) async fn query_upload(
        &mut self,
        id: &str,
    ) -> Result<Option<UploadStatus>, TransferError> {
        let answer = self
            .request(
                Method::HEAD,
                self.target(),
                &[id_header(id)?],
                " (upload status)",
            )
            .await?;
        if answer.response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let headers = answer.response.headers().clone();
        self.expect_success(answer, "HEAD (upload status)").await?;
        let size = header_str(&headers, HeaderName::from_static(UPLOAD_SIZE))
            .and_then(|v| v.trim().parse::<u64>().ok());
        let received = header_str(&headers, HeaderName::from_static(UPLOAD_RECEIVED))
            .map(UploadStatus::parse_ranges)
            .unwrap_or_default();
        Ok(size.map(|size| UploadStatus { size, received }))
    }

    pub(crate) async fn complete(
        &mut self,
        id: &str,
        sha256: Sha256Digest,
    ) -> Result<(), TransferError> {
        let headers = [
            id_header(id)?,
            (
                HeaderName::from_static(UPLOAD_COMPLETE),
                HeaderValue::from_static("?1"),
            ),
            digest_header(REPR_DIGEST, &sha256)?,
        ];
        let answer = self
            .request_with_body(
                Method::PUT,
                self.target(),
                &headers,
                Bytes::new(),
                " (complete upload)",
            )
            .await?;
        self.expect_success(answer, "PUT (complete upload)").await
    }

    /// A 2xx answer, or the error it is, with the server's short explanation quoted.
    async fn expect_success(&mut self, answer: Answer, what: &str) -> Result<(), TransferError> {
        let status = answer.response.status();
        let url = answer.target.to_string();
        let peer = answer.peer.clone();
        let text = read_small(answer.response.into_body(), self.inner(), &peer, what)
            .await
            .unwrap_or_default();
        if status.is_success() {
            return Ok(());
        }
        let detail = String::from_utf8_lossy(&text[..text.len().min(DETAIL_LIMIT)])
            .trim()
            .to_string();
        Err(TransferError::Status {
            peer,
            status: status.as_u16(),
            what: if detail.is_empty() {
                format!("{what} {url}")
            } else {
                format!("{what} {url}: {detail}")
            },
        })
    }
}

fn value(s: &str) -> Result<HeaderValue, TransferError> {
    HeaderValue::from_str(s)
        .map_err(|_| TransferError::Config(format!("value {s:?} cannot be sent in a header")))
}

fn id_header(id: &str) -> Result<(HeaderName, HeaderValue), TransferError> {
    Ok((HeaderName::from_static(UPLOAD_ID), value(id)?))
}

fn digest_header(
    name: &'static str,
    d: &Sha256Digest,
) -> Result<(HeaderName, HeaderValue), TransferError> {
    Ok((HeaderName::from_static(name), value(&d.to_header_value())?))
}

fn octet_stream() -> (HeaderName, HeaderValue) {
    (
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    )
}
