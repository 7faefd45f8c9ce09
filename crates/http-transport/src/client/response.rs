//! Judging response heads: does this answer fit the range we asked for, and what does a `HEAD`
//! (or a one-byte probe) say about the resource.

use http::{header, HeaderMap, StatusCode};
use xfer_common::ranges::{
    parse_content_range, parse_content_range_clamped, parse_unsatisfied_content_range,
};
use xfer_core::digest::REPR_DIGEST;
use xfer_core::transport::{RangeRequest, RemoteInfo};
use xfer_core::{Sha256Digest, TransferError};

/// Statuses after which the client follows `Location`.
pub(crate) fn is_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// A header as text, `None` when absent or not visible ASCII.
pub(crate) fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    header_str(headers, header::CONTENT_LENGTH).and_then(|v| v.parse().ok())
}

/// The `sha-256` of a `Content-Digest` trailer section, if any; a malformed one is an error
/// message for the caller's context.
pub(crate) fn trailer_content_digest(trailers: &HeaderMap) -> Result<Option<Sha256Digest>, String> {
    match trailers.get(xfer_core::digest::CONTENT_DIGEST) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map_err(|e| e.to_string())
            .and_then(|s| Sha256Digest::from_header_value(s).map_err(|e| e.to_string()))
            .map_err(|e| format!("bad content-digest trailer: {e}")),
    }
}

/// The `sha-256` of `Repr-Digest`, if any; a malformed one is a protocol error.
pub(crate) fn repr_digest(
    headers: &HeaderMap,
    peer: &str,
) -> Result<Option<Sha256Digest>, TransferError> {
    match headers.get(REPR_DIGEST) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map_err(|e| e.to_string())
            .and_then(|s| Sha256Digest::from_header_value(s).map_err(|e| e.to_string()))
            .map_err(|e| TransferError::Protocol {
                peer: peer.to_string(),
                message: format!("bad repr-digest: {e}"),
            }),
    }
}

/// What a response head to a `GET` of `url` says about the resource, size left 0 for the
/// caller (it depends on the status) and ranges assumed to work.
pub(crate) fn described(
    url: &str,
    h: &HeaderMap,
    peer: &str,
) -> Result<xfer_core::transport::RemoteInfo, TransferError> {
    Ok(xfer_core::transport::RemoteInfo {
        url: url.to_string(),
        size: 0,
        etag: header_str(h, header::ETAG).map(str::to_string),
        last_modified: header_str(h, header::LAST_MODIFIED).map(str::to_string),
        accepts_ranges: true,
        sha256: repr_digest(h, peer)?,
    })
}

/// Context for the errors a response check produces.
pub(crate) struct Ctx<'a> {
    pub peer: &'a str,
    pub url: &'a str,
    pub what: &'a str,
}

impl Ctx<'_> {
    fn unexpected(&self, message: String) -> TransferError {
        TransferError::Unexpected {
            peer: self.peer.to_string(),
            message: format!("{}: {message}", self.what),
        }
    }

    fn changed(&self, what: String) -> TransferError {
        TransferError::RemoteChanged {
            url: self.url.to_string(),
            what,
        }
    }

    fn status(&self, status: StatusCode) -> TransferError {
        TransferError::Status {
            peer: self.peer.to_string(),
            status: status.as_u16(),
            what: self.what.to_string(),
        }
    }
}

/// Decide whether a (non-redirect) response head answers `req`; `Ok` carries the number of body
/// bytes to expect.
pub(crate) fn check_range_head(
    status: StatusCode,
    headers: &HeaderMap,
    req: &RangeRequest,
    ctx: &Ctx<'_>,
) -> Result<u64, TransferError> {
    let want_len = req.range.end - req.range.start;
    let etag = header_str(headers, header::ETAG);
    // A server that ignored If-Range (or never got it) can still betray a change by its ETag.
    if let (Some(v), Some(e)) = (req.validator.as_deref(), etag) {
        if v != e && status.is_success() {
            return Err(ctx.changed(format!("etag is now {e}, was {v}")));
        }
    }
    match status {
        StatusCode::PARTIAL_CONTENT if !req.whole => {
            let cr = header_str(headers, header::CONTENT_RANGE)
                .ok_or_else(|| ctx.unexpected("206 without content-range".to_string()))?;
            let (range, total) = parse_content_range(cr)
                .ok_or_else(|| ctx.unexpected(format!("unreadable content-range {cr:?}")))?;
            if let Some(total) = total {
                if total != req.expected_size {
                    return Err(ctx.changed(format!(
                        "size is now {total} bytes, was {}",
                        req.expected_size
                    )));
                }
            }
            if range != req.range {
                return Err(ctx.unexpected(format!(
                    "content-range {cr:?} does not match the requested bytes {}-{}",
                    req.range.start,
                    req.range.end - 1
                )));
            }
            check_length(headers, want_len, ctx)?;
            Ok(want_len)
        }
        StatusCode::PARTIAL_CONTENT => Err(ctx.unexpected("206 to a request without range".into())),
        StatusCode::OK if req.whole => {
            if let Some(len) = content_length(headers) {
                if len != req.expected_size {
                    return Err(ctx.changed(format!(
                        "size is now {len} bytes, was {}",
                        req.expected_size
                    )));
                }
            }
            Ok(req.expected_size)
        }
        StatusCode::OK => {
            // The whole representation came back for a range. With If-Range sent and no matching
            // ETag, the server says the validator failed: the remote changed.
            let validator_matched = match (req.validator.as_deref(), etag) {
                (Some(v), Some(e)) => v == e,
                (Some(_), None) => false,
                (None, _) => true,
            };
            if !validator_matched {
                return Err(ctx.changed(
                    "if-range validator no longer matches (server sent the whole resource)".into(),
                ));
            }
            let len = content_length(headers);
            if req.range == (0..req.expected_size) && len == Some(req.expected_size) {
                // We asked for everything; a 200 of the right length is that.
                return Ok(want_len);
            }
            // The validator matched (or there was none): the same resource, range ignored.
            Err(TransferError::RangesIgnored {
                peer: ctx.peer.to_string(),
            })
        }
        StatusCode::RANGE_NOT_SATISFIABLE => {
            match header_str(headers, header::CONTENT_RANGE)
                .and_then(parse_unsatisfied_content_range)
            {
                Some(size) if size != req.expected_size => Err(ctx.changed(format!(
                    "size is now {size} bytes, was {}",
                    req.expected_size
                ))),
                _ => Err(ctx.status(status)),
            }
        }
        s if s.is_success() => Err(ctx.unexpected(format!("status {s} to a range request"))),
        s => Err(ctx.status(s)),
    }
}

fn check_length(headers: &HeaderMap, want: u64, ctx: &Ctx<'_>) -> Result<(), TransferError> {
    match content_length(headers) {
        Some(len) if len != want => {
            Err(ctx.unexpected(format!("content-length {len} for a {want}-byte range")))
        }
        _ => Ok(()),
    }
}

/// Every checksum a response declares of the resource, in RFC 3230 `Digest` and RFC 9530
/// `Repr-Digest` fields; unknown algorithms are skipped.
pub(crate) fn declared_checksums(h: &http::HeaderMap) -> Vec<xfer_core::checksum::Checksum> {
    use xfer_core::checksum::{parse_digest_field, parse_rfc9530_field};
    h.get_all(http::HeaderName::from_static("digest"))
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(parse_digest_field)
        .chain(
            h.get_all(http::HeaderName::from_static(
                xfer_core::digest::REPR_DIGEST,
            ))
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(parse_rfc9530_field),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::*;

    fn req(range: Range<u64>, validator: Option<&str>) -> RangeRequest {
        RangeRequest {
            range,
            expected_size: 1000,
            want_digest: false,
            validator: validator.map(str::to_string),
            whole: false,
        }
    }

    fn head(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            if let Ok(v) = v.parse() {
                h.insert(*k, v);
            }
        }
        h
    }

    const CTX: Ctx<'static> = Ctx {
        peer: "p:1",
        url: "http://p:1/f",
        what: "GET http://p:1/f bytes=0-99",
    };

    #[test]
    fn classifies_range_answers() {
        let r = req(0..100, Some("\"a\""));
        let ok = head(&[("content-range", "bytes 0-99/1000"), ("etag", "\"a\"")]);
        assert_eq!(
            check_range_head(StatusCode::PARTIAL_CONTENT, &ok, &r, &CTX).ok(),
            Some(100)
        );

        let grown = head(&[("content-range", "bytes 0-99/2000")]);
        assert!(matches!(
            check_range_head(StatusCode::PARTIAL_CONTENT, &grown, &r, &CTX),
            Err(TransferError::RemoteChanged { .. })
        ));
        let other = head(&[("content-range", "bytes 0-49/1000")]);
        assert!(matches!(
            check_range_head(StatusCode::PARTIAL_CONTENT, &other, &r, &CTX),
            Err(TransferError::Unexpected { .. })
        ));
        let whole_new = head(&[("content-length", "1000"), ("etag", "\"b\"")]);
        assert!(matches!(
            check_range_head(StatusCode::OK, &whole_new, &r, &CTX),
            Err(TransferError::RemoteChanged { .. })
        ));
        let ignored = head(&[("content-length", "1000")]);
        assert!(matches!(
            check_range_head(StatusCode::OK, &ignored, &req(0..100, None), &CTX),
            Err(TransferError::RangesIgnored { .. })
        ));
        assert!(matches!(
            check_range_head(StatusCode::NOT_FOUND, &HeaderMap::new(), &r, &CTX),
            Err(TransferError::Status { status: 404, .. })
        ));
        let shrunk = head(&[("content-range", "bytes */10")]);
        assert!(matches!(
            check_range_head(StatusCode::RANGE_NOT_SATISFIABLE, &shrunk, &r, &CTX),
            Err(TransferError::RemoteChanged { .. })
        ));
    }
}

/// Why a speculative range answer brings no usable chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpeculativeMiss {
    /// Not a `206` that tells the size (a `416`, a `200` with the whole resource, an error).
    NoChunk,
    /// A `206` that tells the size, but not for the bytes asked for.
    OtherBytes,
}

/// Judge the answer to `guess`, a range asked before the size was known, the same way for
/// both codecs: the resource as the answer describes it, the request its body answers
/// (clamped to the size) and the body's length. Only a `206` for exactly those bytes, or their
/// part up to the end, counts.
pub(crate) fn judge_speculative(
    status: StatusCode,
    h: &HeaderMap,
    guess: &RangeRequest,
    ctx: &Ctx<'_>,
) -> Result<(RemoteInfo, RangeRequest, u64), SpeculativeMiss> {
    let total = (status == StatusCode::PARTIAL_CONTENT)
        .then(|| header_str(h, header::CONTENT_RANGE))
        .flatten()
        .and_then(parse_content_range_clamped)
        .and_then(|(_, total)| total);
    let (Some(total), Ok(mut info)) = (total, described(ctx.url, h, ctx.peer)) else {
        tracing::debug!(url = ctx.url, %status, "the speculative range brought no chunk");
        return Err(SpeculativeMiss::NoChunk);
    };
    info.size = total;
    let req = RangeRequest {
        range: guess.range.start..guess.range.end.min(total),
        expected_size: total,
        ..guess.clone()
    };
    let checked = (!req.range.is_empty()).then(|| check_range_head(status, h, &req, ctx));
    let Some(Ok(len)) = checked else {
        tracing::debug!(
            url = ctx.url,
            ?checked,
            "the speculative answer is not the bytes asked for"
        );
        return Err(SpeculativeMiss::OtherBytes);
    };
    Ok((info, req, len))
}
