//! What the core decided; codecs encode it.

use std::ops::Range;

use bytes::Bytes;
use xfer_core::checksum::Checksum;
use xfer_core::digest::Sha256Digest;

use crate::body::BodyStream;
use crate::listing_body::ListingStream;

pub const CONTENT_TYPE_BYTES: &str = "application/octet-stream";
pub const CONTENT_TYPE_TEXT: &str = "text/plain; charset=utf-8";
pub const CONTENT_TYPE_HTML: &str = "text/html; charset=utf-8";
pub const CONTENT_TYPE_XML: &str = "application/xml; charset=utf-8";

/// `Content-Range` of a 206 or a 416.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentRange {
    /// `bytes start-end/size`
    Satisfied { range: Range<u64>, size: u64 },
    /// `bytes */size`
    Unsatisfied { size: u64 },
}

/// A response, decided.
#[derive(Debug)]
pub struct ResponsePlan {
    pub status: u16,
    /// Size of the whole resource, when one was opened.
    pub size: Option<u64>,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub content_type: &'static str,
    pub accept_ranges: bool,
    /// Range of the resource the body carries (`None` for HEAD and refusals).
    pub range: Option<Range<u64>>,
    pub content_range: Option<ContentRange>,
    /// Bytes of the body; `None` when not known up front (listings, which stream). Codecs
    /// that cannot frame a length together with a trailer (HTTP/1.1 chunked) drop it when
    /// [`ResponsePlan::trailer`] is set.
    pub content_length: Option<u64>,
    /// Whole-resource SHA-256 (`Repr-Digest`).
    pub repr_digest: Option<Sha256Digest>,
    /// Further `Repr-Digest` members (adler32, MD5) a `Want-Repr-Digest` asked for.
    pub repr_checksums: Vec<Checksum>,
    /// The whole resource's checksum a `Want-Digest` asked for (RFC 3230 `Digest`).
    pub digest: Option<Checksum>,
    /// SHA-256 of the body, known up front (`Content-Digest` in the head).
    pub content_digest: Option<Sha256Digest>,
    /// A `Content-Digest` trailer follows the body.
    pub trailer: bool,
    /// Methods allowed, for a 405 and `OPTIONS`.
    pub allow: Option<&'static str>,
    /// WebDAV compliance classes (`DAV`), for `OPTIONS`.
    pub dav: Option<&'static str>,
    /// Where a redirect points: a path, percent-encoded as received.
    pub location: Option<String>,
    /// The challenge of a 401 (`WWW-Authenticate`).
    pub www_authenticate: Option<&'static str>,
    /// Further header fields (lower-case names), e.g. an upload's received ranges.
    pub headers: Vec<(&'static str, String)>,
    /// Why a request was refused, in more detail than the status (never file contents).
    pub detail: Option<String>,
    pub body: Body,
    /// A third-party copy's outcome, filled in when it ends, for its record.
    pub(crate) copy_report: Option<std::sync::Arc<crate::record::CopyReport>>,
    /// The request's record, when the body does not carry it: ended with the plan.
    pub(crate) finish: Option<Box<crate::record::Finish>>,
}

/// Where the body bytes come from.
#[derive(Debug)]
pub enum Body {
    Empty,
    /// A short text explaining a refusal.
    Message(Bytes),
    /// Boxed: the stream state is large and refusals should stay small.
    Stream(Box<BodyStream>),
    /// A listing, produced on the blocking pool while it is sent; its length is not known.
    Listing(ListingStream),
}

impl ResponsePlan {
    /// A refusal with a short text body.
    pub(crate) fn refusal(status: u16, text: &'static str, detail: Option<String>) -> Self {
        Self {
            content_type: CONTENT_TYPE_TEXT,
            content_length: Some(text.len() as u64),
            detail,
            body: Body::Message(Bytes::from_static(text.as_bytes())),
            ..Self::empty(status)
        }
    }

    /// `status` with no body and no resource.
    pub(crate) fn empty(status: u16) -> Self {
        Self {
            status,
            size: None,
            etag: None,
            last_modified: None,
            content_type: CONTENT_TYPE_TEXT,
            accept_ranges: false,
            range: None,
            content_range: None,
            content_length: Some(0),
            repr_digest: None,
            repr_checksums: Vec::new(),
            digest: None,
            content_digest: None,
            trailer: false,
            allow: None,
            dav: None,
            location: None,
            www_authenticate: None,
            headers: Vec::new(),
            detail: None,
            body: Body::Empty,
            copy_report: None,
            finish: None,
        }
    }
}

impl ResponsePlan {
    /// The `Repr-Digest` field value: the SHA-256 when known, then any further members.
    pub fn repr_digest_field(&self) -> Option<String> {
        let members: Vec<String> = self
            .repr_digest
            .iter()
            .map(|d| d.to_header_value())
            .chain(self.repr_checksums.iter().map(|c| c.to_rfc9530_member()))
            .collect();
        (!members.is_empty()).then(|| members.join(", "))
    }
}
