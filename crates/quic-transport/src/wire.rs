//! The `xfer/1` wire format: request, response head and trailer encoding, status numbers and
//! application error codes. Pure byte manipulation, no I/O; docs/quic-protocol.md is the
//! normative description and this module follows it field by field.
//!
//! Decoders never panic on any input: every length is checked against the remaining bytes and
//! against the protocol limits before it is used.

use std::fmt;
use std::ops::Range;

use xfer_core::checksum::{Checksum, ChecksumAlgorithm};
use xfer_core::Sha256Digest;

/// The ALPN protocol id both ends must agree on.
pub const ALPN: &[u8] = b"xfer/1";
/// The only protocol version this crate speaks; the first byte of every request and head.
pub const VERSION: u8 = 1;
/// Default UDP port of `quic://` URLs.
pub const DEFAULT_PORT: u16 = 8443;

/// Largest encoded request, in bytes. The server stops reading (and stops the stream with
/// [`ErrorCode::RequestTooLarge`]) beyond it, so a client cannot make it buffer more. Room
/// for a token, a path and a validator at their limits with the upload and checksum
/// sections: 24 KiB.
pub const MAX_REQUEST_LEN: usize = 24 * 1024;
/// Largest encoded response head (after its 2-byte length prefix), in bytes.
pub const MAX_HEAD_LEN: usize = 8 * 1024;
/// Longest path (including the query), in bytes.
pub const MAX_PATH_LEN: usize = 4096;
/// Longest bearer token, in bytes: what HTTP's `Authorization: Bearer` accepts (16 KiB), so a
/// WLCG token that works over HTTP works over QUIC too. IAM tokens with many groups pass
/// 2 KiB; the profile sets no limit.
pub const MAX_TOKEN_LEN: usize = xfer_service::access::MAX_TOKEN_LEN;

// A request with every variable field at its limit must still fit, with 1 KiB for the
// varints, flags and the upload and checksum sections.
const _: () = assert!(MAX_TOKEN_LEN + MAX_PATH_LEN + MAX_VALIDATOR_LEN + 1024 <= MAX_REQUEST_LEN);
/// Longest validator (entity tag with its quotes), in bytes.
pub const MAX_VALIDATOR_LEN: usize = 1024;
/// Longest ETag or last-modified text in a head, in bytes.
pub const MAX_FIELD_LEN: usize = 1024;
/// Longest human-readable message in an error head, in bytes.
pub const MAX_MESSAGE_LEN: usize = 1024;
/// Encoded trailer length: one kind byte and a SHA-256.
pub const TRAILER_LEN: usize = 33;
/// Trailer kind byte for a SHA-256 of the body bytes.
pub const TRAILER_SHA256: u8 = 0x01;
/// Largest value a QUIC variable-length integer holds (2^62 - 1).
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Metadata and body bytes.
    Get,
    /// Metadata only: size, validators, known whole-resource digest.
    Stat,
    /// The recursive manifest of a directory (docs/listing.md), streamed to FIN.
    List,
    /// An upload (docs/upload-protocol.md): the request's UPLOAD section says which kind; the
    /// body bytes follow the request on the same stream, up to FIN.
    Put,
}

impl Method {
    fn code(self) -> u8 {
        match self {
            Self::Get => 0x01,
            Self::Stat => 0x02,
            Self::List => 0x03,
            Self::Put => 0x04,
        }
    }
}

/// One request, sent alone on the client's half of a bidirectional stream, followed by FIN.
#[derive(Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// Absolute path with optional query, e.g. `/data/a.bin` or `/.xfer/synthetic?size=1G`.
    pub path: String,
    /// Half-open byte range; `None` asks for the whole resource. Never empty when present.
    pub range: Option<Range<u64>>,
    /// Ask for a trailer carrying the SHA-256 of the body bytes sent.
    pub want_digest: bool,
    /// Strong ETag the resource must still have (the If-Range equivalent, but failing with 412
    /// instead of silently sending the whole new representation).
    pub validator: Option<String>,
    /// A bearer token (the HTTP `Authorization: Bearer` equivalent). Never logged.
    pub token: Option<String>,
    /// What an upload says about itself: on PUT (always), and on STAT to ask what the server
    /// holds of an upload.
    pub upload: Option<UploadFields>,
    /// Whole-resource checksums asked for (HTTP's `Want-Digest`), on GET and STAT; empty
    /// asks for none. Answered in the head's CHECKSUMS section.
    pub checksums: Vec<ChecksumAlgorithm>,
}

/// The bit of a checksum algorithm in a request's CHECKSUMS set, and its code in a head's
/// CHECKSUMS section.
fn checksum_code(algorithm: ChecksumAlgorithm) -> u8 {
    match algorithm {
        ChecksumAlgorithm::Adler32 => 0x01,
        ChecksumAlgorithm::Md5 => 0x02,
        ChecksumAlgorithm::Sha256 => 0x04,
    }
}

fn checksum_from_code(code: u8) -> Option<ChecksumAlgorithm> {
    ChecksumAlgorithm::ALL
        .into_iter()
        .find(|a| checksum_code(*a) == code)
}

const CHECKSUM_CODES: u8 = 0x01 | 0x02 | 0x04;
const CHECKSUMS_GET_OR_STAT: &str = "only GET and STAT ask for checksums";

/// The UPLOAD section of a request: HTTP's `Xfer-Upload`, the total of `Content-Range`,
/// `Content-Digest`, `Repr-Digest` and `Xfer-Upload-Complete`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UploadFields {
    pub id: Option<String>,
    /// Size of the whole file, for a chunk (whose range is the request's RANGE).
    pub total: Option<u64>,
    pub content_sha256: Option<Sha256Digest>,
    pub repr_sha256: Option<Sha256Digest>,
    pub complete: bool,
}

const UP_ID: u8 = 0x01;
const UP_TOTAL: u8 = 0x02;
const UP_CONTENT_SHA256: u8 = 0x04;
const UP_REPR_SHA256: u8 = 0x08;
const UP_COMPLETE: u8 = 0x10;
const UP_KNOWN: u8 = UP_ID | UP_TOTAL | UP_CONTENT_SHA256 | UP_REPR_SHA256 | UP_COMPLETE;
/// Longest upload id, in bytes.
const MAX_UPLOAD_ID_LEN: usize = 64;

impl UploadFields {
    fn encode(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        let mut flags = 0;
        if let Some(id) = &self.id {
            check_text(id, MAX_UPLOAD_ID_LEN, "upload id")?;
            flags |= UP_ID;
        }
        if let Some(t) = self.total {
            if t > VARINT_MAX {
                return Err(WireError::OutOfRange("upload total"));
            }
            flags |= UP_TOTAL;
        }
        if self.content_sha256.is_some() {
            flags |= UP_CONTENT_SHA256;
        }
        if self.repr_sha256.is_some() {
            flags |= UP_REPR_SHA256;
        }
        if self.complete {
            flags |= UP_COMPLETE;
        }
        out.push(flags);
        if let Some(id) = &self.id {
            put_bytes(out, id.as_bytes());
        }
        if let Some(t) = self.total {
            put_varint(out, t);
        }
        for d in [&self.content_sha256, &self.repr_sha256]
            .into_iter()
            .flatten()
        {
            out.extend_from_slice(&d.0);
        }
        Ok(())
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let flags = r.u8("upload flags")?;
        if flags & !UP_KNOWN != 0 {
            return Err(WireError::Invalid("unknown upload flag"));
        }
        let id = if flags & UP_ID != 0 {
            let id = r.text(MAX_UPLOAD_ID_LEN, "upload id")?;
            check_text(&id, MAX_UPLOAD_ID_LEN, "upload id")?;
            Some(id)
        } else {
            None
        };
        let total = if flags & UP_TOTAL != 0 {
            Some(r.varint("upload total")?)
        } else {
            None
        };
        let mut digest = |bit: u8, what| -> Result<Option<Sha256Digest>, WireError> {
            if flags & bit != 0 {
                Ok(Some(Sha256Digest(r.array::<32>(what)?)))
            } else {
                Ok(None)
            }
        };
        let content_sha256 = digest(UP_CONTENT_SHA256, "content sha-256")?;
        let repr_sha256 = digest(UP_REPR_SHA256, "repr sha-256")?;
        Ok(Self {
            id,
            total,
            content_sha256,
            repr_sha256,
            complete: flags & UP_COMPLETE != 0,
        })
    }
}

const REQ_WANT_DIGEST: u8 = 0x01;
const REQ_RANGE: u8 = 0x02;
const REQ_VALIDATOR: u8 = 0x04;
const REQ_TOKEN: u8 = 0x08;
const REQ_UPLOAD: u8 = 0x10;
const REQ_CHECKSUMS: u8 = 0x20;
const REQ_KNOWN_FLAGS: u8 =
    REQ_WANT_DIGEST | REQ_RANGE | REQ_VALIDATOR | REQ_TOKEN | REQ_UPLOAD | REQ_CHECKSUMS;
const LIST_HAS_NO_FLAGS: &str = "a LIST request carries no range, validator or digest wish";

impl Request {
    /// Encode, refusing values the protocol cannot carry (so a client never sends what a
    /// server would reject as malformed).
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        check_path(&self.path)?;
        if self.method == Method::List
            && (self.range.is_some() || self.validator.is_some() || self.want_digest)
        {
            return Err(WireError::Invalid(LIST_HAS_NO_FLAGS));
        }
        if let Some(r) = &self.range {
            check_range(r)?;
            if self.method == Method::Stat {
                return Err(WireError::Invalid("a STAT request carries no range"));
            }
        }
        if let Some(v) = &self.validator {
            check_text(v, MAX_VALIDATOR_LEN, "validator")?;
        }
        if let Some(t) = &self.token {
            check_token(t)?;
        }
        check_upload_section(self.method, self.upload.as_ref())?;
        let checksum_set = self
            .checksums
            .iter()
            .fold(0u8, |set, a| set | checksum_code(*a));
        if checksum_set != 0 && !matches!(self.method, Method::Get | Method::Stat) {
            return Err(WireError::Invalid(CHECKSUMS_GET_OR_STAT));
        }
        let mut flags = 0;
        if self.want_digest {
            flags |= REQ_WANT_DIGEST;
        }
        if self.range.is_some() {
            flags |= REQ_RANGE;
        }
        if self.validator.is_some() {
            flags |= REQ_VALIDATOR;
        }
        if self.token.is_some() {
            flags |= REQ_TOKEN;
        }
        if self.upload.is_some() {
            flags |= REQ_UPLOAD;
        }
        if checksum_set != 0 {
            flags |= REQ_CHECKSUMS;
        }
        let mut out = Vec::with_capacity(16 + self.path.len());
        out.push(VERSION);
        out.push(self.method.code());
        out.push(flags);
        put_bytes(&mut out, self.path.as_bytes());
        if let Some(r) = &self.range {
            put_varint(&mut out, r.start);
            put_varint(&mut out, r.end);
        }
        if let Some(v) = &self.validator {
            put_bytes(&mut out, v.as_bytes());
        }
        if let Some(t) = &self.token {
            put_bytes(&mut out, t.as_bytes());
        }
        if let Some(u) = &self.upload {
            u.encode(&mut out)?;
        }
        if checksum_set != 0 {
            out.push(checksum_set);
        }
        if out.len() > MAX_REQUEST_LEN {
            return Err(WireError::TooLarge {
                what: "request",
                len: out.len(),
                max: MAX_REQUEST_LEN,
            });
        }
        Ok(out)
    }

    /// Decode a complete request (everything the client sent before FIN).
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        if buf.len() > MAX_REQUEST_LEN {
            return Err(WireError::TooLarge {
                what: "request",
                len: buf.len(),
                max: MAX_REQUEST_LEN,
            });
        }
        let mut r = Reader::new(buf);
        let req = Self::decode_from(&mut r)?;
        r.finish()?;
        Ok(req)
    }

    /// Decode the request at the start of `buf`, which may go on with a PUT's body: the
    /// request and the bytes it took, or `None` when `buf` ends inside it.
    pub fn decode_prefix(buf: &[u8]) -> Result<Option<(Self, usize)>, WireError> {
        let window = &buf[..buf.len().min(MAX_REQUEST_LEN)];
        let mut r = Reader::new(window);
        match Self::decode_from(&mut r) {
            Ok(req) => Ok(Some((req, window.len() - r.buf.len()))),
            Err(WireError::Truncated(_)) if buf.len() < MAX_REQUEST_LEN => Ok(None),
            Err(WireError::Truncated(_)) => Err(WireError::TooLarge {
                what: "request",
                len: buf.len(),
                max: MAX_REQUEST_LEN,
            }),
            Err(e) => Err(e),
        }
    }

    fn decode_from(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let version = r.u8("version")?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let method = match r.u8("method")? {
            0x01 => Method::Get,
            0x02 => Method::Stat,
            0x03 => Method::List,
            0x04 => Method::Put,
            _ => return Err(WireError::Invalid("unknown method")),
        };
        let flags = r.u8("flags")?;
        if flags & !REQ_KNOWN_FLAGS != 0 {
            return Err(WireError::Invalid("unknown request flag"));
        }
        if method == Method::List && flags & !REQ_TOKEN != 0 {
            return Err(WireError::Invalid(LIST_HAS_NO_FLAGS));
        }
        let path = r.text(MAX_PATH_LEN, "path")?;
        check_path(&path)?;
        let range = if flags & REQ_RANGE != 0 {
            if method == Method::Stat {
                return Err(WireError::Invalid("a STAT request carries no range"));
            }
            let start = r.varint("range start")?;
            let end = r.varint("range end")?;
            let range = start..end;
            check_range(&range)?;
            Some(range)
        } else {
            None
        };
        let validator = if flags & REQ_VALIDATOR != 0 {
            let v = r.text(MAX_VALIDATOR_LEN, "validator")?;
            check_text(&v, MAX_VALIDATOR_LEN, "validator")?;
            Some(v)
        } else {
            None
        };
        let token = if flags & REQ_TOKEN != 0 {
            let t = r.text(MAX_TOKEN_LEN, "token")?;
            check_token(&t)?;
            Some(t)
        } else {
            None
        };
        let upload = if flags & REQ_UPLOAD != 0 {
            Some(UploadFields::decode(r)?)
        } else {
            None
        };
        check_upload_section(method, upload.as_ref())?;
        let checksums = if flags & REQ_CHECKSUMS != 0 {
            if !matches!(method, Method::Get | Method::Stat) {
                return Err(WireError::Invalid(CHECKSUMS_GET_OR_STAT));
            }
            let set = r.u8("checksums")?;
            if set == 0 || set & !CHECKSUM_CODES != 0 {
                return Err(WireError::Invalid("empty or unknown checksum set"));
            }
            ChecksumAlgorithm::ALL
                .into_iter()
                .filter(|a| set & checksum_code(*a) != 0)
                .collect()
        } else {
            Vec::new()
        };
        Ok(Self {
            method,
            path,
            range,
            want_digest: flags & REQ_WANT_DIGEST != 0,
            validator,
            token,
            upload,
            checksums,
        })
    }
}

/// A head's CHECKSUMS section: a count (1 to 3), then per checksum its algorithm code and
/// its bytes (4 for adler32, 16 for MD5, 32 for SHA-256), each algorithm at most once.
fn decode_checksums(r: &mut Reader<'_>) -> Result<Vec<Checksum>, WireError> {
    let count = r.u8("checksum count")?;
    if !(1..=3).contains(&count) {
        return Err(WireError::Invalid("checksum count outside 1..=3"));
    }
    let mut out: Vec<Checksum> = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let algorithm = checksum_from_code(r.u8("checksum algorithm")?)
            .ok_or(WireError::Invalid("unknown checksum algorithm"))?;
        if out.iter().any(|c| c.algorithm == algorithm) {
            return Err(WireError::Invalid("a checksum algorithm twice"));
        }
        let bytes = r.take(algorithm.byte_len(), "checksum")?;
        out.extend(Checksum::from_bytes(algorithm, bytes));
    }
    Ok(out)
}

/// Statuses, numbered as in HTTP so `xfer_core::error::is_transient_status` classifies them.
/// The request core decides them for every codec; `xfer/1` carries the number as is.
pub mod status {
    pub use xfer_service::status::*;
}

/// The head of a response: everything before the body bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResponseHead {
    pub status: u16,
    /// Size of the whole resource in bytes (0 when the status is an error).
    pub size: u64,
    /// Strong ETag, verbatim with quotes.
    pub etag: Option<String>,
    /// Last modification time as an HTTP date (IMF-fixdate), as the HTTP server spells it.
    pub last_modified: Option<String>,
    /// SHA-256 of the whole resource, when the server knows it without reading the resource.
    pub repr_sha256: Option<Sha256Digest>,
    /// The byte range of the body that follows; `None` means no body.
    pub range: Option<Range<u64>>,
    /// Whether a SHA-256 trailer follows the body.
    pub trailer: bool,
    /// A body of unannounced length follows and runs to FIN (a listing: the answer to LIST,
    /// or a directory index). Never together with RANGE or TRAILER.
    pub streamed: bool,
    /// Human-readable reason for an error status; the location of a 301.
    pub message: Option<String>,
    /// Whole-resource checksums answering the request's CHECKSUMS (at most one per
    /// algorithm).
    pub checksums: Vec<Checksum>,
}

const HEAD_ETAG: u8 = 0x01;
const HEAD_LAST_MODIFIED: u8 = 0x02;
const HEAD_REPR_SHA256: u8 = 0x04;
const HEAD_RANGE: u8 = 0x08;
const HEAD_TRAILER: u8 = 0x10;
const HEAD_MESSAGE: u8 = 0x20;
const HEAD_STREAMED: u8 = 0x40;
const HEAD_CHECKSUMS: u8 = 0x80;
const HEAD_KNOWN_FLAGS: u8 = HEAD_ETAG
    | HEAD_LAST_MODIFIED
    | HEAD_REPR_SHA256
    | HEAD_RANGE
    | HEAD_TRAILER
    | HEAD_MESSAGE
    | HEAD_STREAMED
    | HEAD_CHECKSUMS;
const STREAMED_ALONE: &str = "a streamed body has no range and no trailer";

impl ResponseHead {
    /// An error head with a message (truncated to the protocol limit at a char boundary).
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: Some(fit_message(message.into())),
            ..Self::default()
        }
    }

    /// Number of body bytes that follow the head.
    pub fn body_len(&self) -> u64 {
        self.range.as_ref().map_or(0, |r| r.end - r.start)
    }

    /// Encode with its 2-byte big-endian length prefix.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let mut flags = 0;
        let mut body = Vec::with_capacity(64);
        body.push(VERSION);
        body.extend_from_slice(&self.status.to_be_bytes());
        let flags_at = body.len();
        body.push(0);
        put_checked_varint(&mut body, self.size, "size")?;
        if let Some(e) = &self.etag {
            check_text(e, MAX_FIELD_LEN, "etag")?;
            flags |= HEAD_ETAG;
            put_bytes(&mut body, e.as_bytes());
        }
        if let Some(lm) = &self.last_modified {
            check_text(lm, MAX_FIELD_LEN, "last-modified")?;
            flags |= HEAD_LAST_MODIFIED;
            put_bytes(&mut body, lm.as_bytes());
        }
        if let Some(d) = &self.repr_sha256 {
            flags |= HEAD_REPR_SHA256;
            body.extend_from_slice(&d.0);
        }
        if let Some(r) = &self.range {
            if r.start > r.end {
                return Err(WireError::Invalid("range start after its end"));
            }
            flags |= HEAD_RANGE;
            put_checked_varint(&mut body, r.start, "range start")?;
            put_checked_varint(&mut body, r.end, "range end")?;
        }
        if self.trailer {
            flags |= HEAD_TRAILER;
        }
        if self.streamed {
            if self.range.is_some() || self.trailer {
                return Err(WireError::Invalid(STREAMED_ALONE));
            }
            flags |= HEAD_STREAMED;
        }
        if let Some(m) = &self.message {
            if m.len() > MAX_MESSAGE_LEN {
                return Err(WireError::TooLarge {
                    what: "message",
                    len: m.len(),
                    max: MAX_MESSAGE_LEN,
                });
            }
            flags |= HEAD_MESSAGE;
            put_bytes(&mut body, m.as_bytes());
        }
        if !self.checksums.is_empty() {
            let mut seen = 0u8;
            for c in &self.checksums {
                let code = checksum_code(c.algorithm);
                if seen & code != 0 {
                    return Err(WireError::Invalid("a checksum algorithm twice"));
                }
                seen |= code;
            }
            flags |= HEAD_CHECKSUMS;
            // At most three, one per algorithm (checked above).
            body.push(self.checksums.len() as u8);
            for c in &self.checksums {
                body.push(checksum_code(c.algorithm));
                body.extend_from_slice(c.as_bytes());
            }
        }
        body[flags_at] = flags;
        if body.len() > MAX_HEAD_LEN {
            return Err(WireError::TooLarge {
                what: "response head",
                len: body.len(),
                max: MAX_HEAD_LEN,
            });
        }
        let len = u16::try_from(body.len()).map_err(|_| WireError::TooLarge {
            what: "response head",
            len: body.len(),
            max: MAX_HEAD_LEN,
        })?;
        let mut out = Vec::with_capacity(2 + body.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Read the length prefix of a head; the caller then reads that many bytes.
    pub fn decode_len(prefix: [u8; 2]) -> Result<usize, WireError> {
        let len = usize::from(u16::from_be_bytes(prefix));
        if len > MAX_HEAD_LEN {
            return Err(WireError::TooLarge {
                what: "response head",
                len,
                max: MAX_HEAD_LEN,
            });
        }
        Ok(len)
    }

    /// Decode the bytes of a head after its length prefix.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        if buf.len() > MAX_HEAD_LEN {
            return Err(WireError::TooLarge {
                what: "response head",
                len: buf.len(),
                max: MAX_HEAD_LEN,
            });
        }
        let mut r = Reader::new(buf);
        let version = r.u8("version")?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let status = u16::from_be_bytes([r.u8("status")?, r.u8("status")?]);
        if !(100..=599).contains(&status) {
            return Err(WireError::Invalid("status outside 100..=599"));
        }
        let flags = r.u8("flags")?;
        // Every bit of the head's flags is defined since CHECKSUMS (0x80): nothing is unknown,
        // and a further head field needs a new version.
        const _: () = assert!(HEAD_KNOWN_FLAGS == u8::MAX);
        let size = r.varint("size")?;
        let etag = if flags & HEAD_ETAG != 0 {
            let e = r.text(MAX_FIELD_LEN, "etag")?;
            check_text(&e, MAX_FIELD_LEN, "etag")?;
            Some(e)
        } else {
            None
        };
        let last_modified = if flags & HEAD_LAST_MODIFIED != 0 {
            let lm = r.text(MAX_FIELD_LEN, "last-modified")?;
            check_text(&lm, MAX_FIELD_LEN, "last-modified")?;
            Some(lm)
        } else {
            None
        };
        let repr_sha256 = if flags & HEAD_REPR_SHA256 != 0 {
            Some(Sha256Digest(r.array("representation sha-256")?))
        } else {
            None
        };
        let range = if flags & HEAD_RANGE != 0 {
            let start = r.varint("range start")?;
            let end = r.varint("range end")?;
            if start > end {
                return Err(WireError::Invalid("range start after its end"));
            }
            Some(start..end)
        } else {
            None
        };
        let message = if flags & HEAD_MESSAGE != 0 {
            Some(r.text(MAX_MESSAGE_LEN, "message")?)
        } else {
            None
        };
        let streamed = flags & HEAD_STREAMED != 0;
        if streamed && flags & (HEAD_RANGE | HEAD_TRAILER) != 0 {
            return Err(WireError::Invalid(STREAMED_ALONE));
        }
        let checksums = if flags & HEAD_CHECKSUMS != 0 {
            decode_checksums(&mut r)?
        } else {
            Vec::new()
        };
        r.finish()?;
        Ok(Self {
            status,
            size,
            etag,
            last_modified,
            repr_sha256,
            range,
            trailer: flags & HEAD_TRAILER != 0,
            streamed,
            message,
            checksums,
        })
    }
}

/// `message` cut to [`MAX_MESSAGE_LEN`] bytes at a character boundary.
pub fn fit_message(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_LEN {
        let mut cut = MAX_MESSAGE_LEN;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    message
}

/// Encode the trailer that follows the body when the head announced one.
pub fn encode_trailer(digest: &Sha256Digest) -> [u8; TRAILER_LEN] {
    let mut out = [0u8; TRAILER_LEN];
    out[0] = TRAILER_SHA256;
    out[1..].copy_from_slice(&digest.0);
    out
}

/// Decode a trailer.
pub fn decode_trailer(buf: &[u8]) -> Result<Sha256Digest, WireError> {
    let mut r = Reader::new(buf);
    if r.u8("trailer kind")? != TRAILER_SHA256 {
        return Err(WireError::Invalid("unknown trailer kind"));
    }
    let d = Sha256Digest(r.array("trailer sha-256")?);
    r.finish()?;
    Ok(d)
}

/// Application error codes carried by RESET_STREAM, STOP_SENDING and CONNECTION_CLOSE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Normal close of a connection.
    NoError,
    /// The request could not be decoded (bad field, unknown flag or method, trailing bytes).
    MalformedRequest,
    /// The request exceeded [`MAX_REQUEST_LEN`].
    RequestTooLarge,
    /// The request's version byte is not one the server speaks.
    UnsupportedVersion,
    /// The client did not finish its request within the server's time limit.
    RequestTimeout,
    /// The server failed after the head was sent (read error); the body is incomplete.
    InternalError,
    /// The client no longer wants the body.
    Cancelled,
    /// The server refused the connection (over its connection limit) or is shutting down.
    ServerBusy,
    /// The client read none of the body for the server's stall timeout; the server reset the
    /// stream and freed what it held for it.
    Stalled,
}

impl ErrorCode {
    pub const fn code(self) -> u32 {
        match self {
            Self::NoError => 0x00,
            Self::MalformedRequest => 0x01,
            Self::RequestTooLarge => 0x02,
            Self::UnsupportedVersion => 0x03,
            Self::RequestTimeout => 0x04,
            Self::InternalError => 0x05,
            Self::Cancelled => 0x06,
            Self::ServerBusy => 0x07,
            Self::Stalled => 0x08,
        }
    }

    pub fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            0x00 => Self::NoError,
            0x01 => Self::MalformedRequest,
            0x02 => Self::RequestTooLarge,
            0x03 => Self::UnsupportedVersion,
            0x04 => Self::RequestTimeout,
            0x05 => Self::InternalError,
            0x06 => Self::Cancelled,
            0x07 => Self::ServerBusy,
            0x08 => Self::Stalled,
            _ => return None,
        })
    }

    /// As quinn takes it.
    pub fn varint(self) -> quinn::VarInt {
        quinn::VarInt::from_u32(self.code())
    }

    /// The code a decoding failure is answered with.
    pub fn for_wire_error(e: &WireError) -> Self {
        match e {
            WireError::Version(_) => Self::UnsupportedVersion,
            WireError::TooLarge { .. } => Self::RequestTooLarge,
            _ => Self::MalformedRequest,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::NoError => "no error",
            Self::MalformedRequest => "malformed request",
            Self::RequestTooLarge => "request too large",
            Self::UnsupportedVersion => "unsupported version",
            Self::RequestTimeout => "request timeout",
            Self::InternalError => "internal error",
            Self::Cancelled => "cancelled",
            Self::ServerBusy => "server busy",
            Self::Stalled => "stalled",
        };
        write!(f, "{name} (0x{:02x})", self.code())
    }
}

/// Why bytes are not a valid `xfer/1` message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message ends inside {0}")]
    Truncated(&'static str),
    #[error("{what} is {len} bytes, more than the limit of {max}")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("unsupported protocol version {0}")]
    Version(u8),
    #[error("{0}")]
    Invalid(&'static str),
    #[error("{0} is beyond 2^62 - 1")]
    OutOfRange(&'static str),
    #[error("{0} extra bytes after the message")]
    Trailing(usize),
}

fn check_path(path: &str) -> Result<(), WireError> {
    if path.len() > MAX_PATH_LEN {
        return Err(WireError::TooLarge {
            what: "path",
            len: path.len(),
            max: MAX_PATH_LEN,
        });
    }
    if !path.starts_with('/') {
        return Err(WireError::Invalid("path must start with '/'"));
    }
    if path.bytes().any(|b| b.is_ascii_control()) {
        return Err(WireError::Invalid("path contains control characters"));
    }
    Ok(())
}

fn check_range(r: &Range<u64>) -> Result<(), WireError> {
    if r.start >= r.end {
        return Err(WireError::Invalid("range is empty or reversed"));
    }
    if r.end > VARINT_MAX {
        return Err(WireError::Invalid("range end beyond 2^62 - 1"));
    }
    Ok(())
}

/// Header-like text: visible ASCII and spaces only, like an HTTP field value.
/// PUT always has an UPLOAD section, STAT may have one naming an upload, GET and LIST none.
fn check_upload_section(method: Method, upload: Option<&UploadFields>) -> Result<(), WireError> {
    match (method, upload) {
        (Method::Put, None) => Err(WireError::Invalid("a PUT request needs an UPLOAD section")),
        (Method::Get | Method::List, Some(_)) => Err(WireError::Invalid(
            "only PUT and STAT carry an UPLOAD section",
        )),
        (Method::Stat, Some(u)) if u.id.is_none() || u.total.is_some() || u.complete => Err(
            WireError::Invalid("a STAT's UPLOAD section names an upload and nothing else"),
        ),
        _ => Ok(()),
    }
}

/// Tokens are visible ASCII without spaces (RFC 6750's `b64token` and more).
fn check_token(t: &str) -> Result<(), WireError> {
    check_text(t, MAX_TOKEN_LEN, "token")?;
    if t.contains(' ') {
        return Err(WireError::Invalid("token contains a space"));
    }
    Ok(())
}

/// Like the derived form, with the token left out: requests are logged.
impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("range", &self.range)
            .field("want_digest", &self.want_digest)
            .field("validator", &self.validator)
            .field("token", &self.token.as_ref().map(|_| "redacted"))
            .field("upload", &self.upload)
            .finish()
    }
}

fn check_text(s: &str, max: usize, what: &'static str) -> Result<(), WireError> {
    if s.len() > max {
        return Err(WireError::TooLarge {
            what,
            len: s.len(),
            max,
        });
    }
    if s.is_empty() || !s.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return Err(WireError::Invalid(
            "text field is empty or not visible ascii",
        ));
    }
    Ok(())
}

/// Append a QUIC variable-length integer (RFC 9000 §16). `v` must be at most [`VARINT_MAX`].
fn put_varint(out: &mut Vec<u8>, v: u64) {
    if v < 1 << 6 {
        out.push(v as u8);
    } else if v < 1 << 14 {
        out.extend_from_slice(&((v as u16) | 0x4000).to_be_bytes());
    } else if v < 1 << 30 {
        out.extend_from_slice(&((v as u32) | 0x8000_0000).to_be_bytes());
    } else {
        out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes());
    }
}

fn put_checked_varint(out: &mut Vec<u8>, v: u64, what: &'static str) -> Result<(), WireError> {
    if v > VARINT_MAX {
        return Err(WireError::OutOfRange(what));
    }
    put_varint(out, v);
    Ok(())
}

/// Length-prefixed bytes. Callers check lengths against the field limits first, so the length
/// always fits a varint.
fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A cursor over an input that fails, never panics, on short input.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated(what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, WireError> {
        let first = self.u8(what)?;
        let extra = (1usize << (first >> 6)) - 1;
        let mut v = u64::from(first & 0x3f);
        for &b in self.take(extra, what)? {
            v = (v << 8) | u64::from(b);
        }
        Ok(v)
    }

    fn text(&mut self, max: usize, what: &'static str) -> Result<String, WireError> {
        let len = self.varint(what)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= max)
            .ok_or(WireError::TooLarge {
                what,
                len: usize::try_from(len).unwrap_or(usize::MAX),
                max,
            })?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::Invalid("text is not utf-8"))
    }

    fn finish(self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing(self.buf.len()))
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn upload_sections_round_trip_and_are_checked() {
        let chunk = Request {
            method: Method::Put,
            path: "/in/a.bin".into(),
            range: Some(1024..2048),
            want_digest: false,
            checksums: Vec::new(),
            validator: None,
            token: Some("tok".into()),
            upload: Some(UploadFields {
                id: Some("0123456789abcdef".into()),
                total: Some(4096),
                content_sha256: Some(Sha256Digest::of(b"x")),
                repr_sha256: None,
                complete: false,
            }),
        };
        let mut bytes = chunk.encode().expect("encode");
        let len = bytes.len();
        bytes.extend_from_slice(b"body bytes");
        assert_eq!(
            Request::decode_prefix(&bytes).expect("decode"),
            Some((chunk.clone(), len))
        );
        assert_eq!(
            Request::decode_prefix(&bytes[..len - 1]).expect("short"),
            None
        );
        assert!(matches!(
            Request::decode(&bytes),
            Err(WireError::Trailing(10))
        ));
        let no_section = Request {
            upload: None,
            ..chunk.clone()
        };
        assert!(no_section.encode().is_err());
        let get_with_section = Request {
            method: Method::Get,
            ..chunk
        };
        assert!(get_with_section.encode().is_err());
    }
    use super::*;
    use xfer_core::checksum::Checksummer;

    fn sample_request() -> Request {
        Request {
            upload: None,
            token: None,
            method: Method::Get,
            path: "/.xfer/synthetic?size=1G&seed=1".to_string(),
            range: Some(1 << 20..(1 << 40) + 3),
            want_digest: true,
            checksums: Vec::new(),
            validator: Some("\"abc-123\"".to_string()),
        }
    }

    fn sample_head() -> ResponseHead {
        ResponseHead {
            status: status::PARTIAL_CONTENT,
            size: 1 << 40,
            etag: Some("\"abc-123\"".to_string()),
            last_modified: Some("Sun, 06 Nov 1994 08:49:37 GMT".to_string()),
            repr_sha256: Some(Sha256Digest::of(b"whole")),
            range: Some(0..16384),
            trailer: true,
            streamed: false,
            message: None,
            checksums: vec![
                Checksummer::of(ChecksumAlgorithm::Adler32, b"whole"),
                Checksummer::of(ChecksumAlgorithm::Md5, b"whole"),
            ],
        }
    }

    #[test]
    fn checksums_round_trip_and_hostile_sections_are_refused() {
        let head = sample_head();
        let enc = head.encode().expect("encode");
        assert_eq!(ResponseHead::decode(&enc[2..]).expect("decode"), head);
        let stat = Request {
            method: Method::Stat,
            path: "/a.bin".into(),
            range: None,
            want_digest: false,
            validator: None,
            token: None,
            upload: None,
            checksums: vec![ChecksumAlgorithm::Adler32, ChecksumAlgorithm::Sha256],
        };
        let enc = stat.encode().expect("encode");
        assert_eq!(enc[2], 0x20, "CHECKSUMS flag alone");
        assert_eq!(enc.last(), Some(&0x05), "adler32 | sha-256");
        assert_eq!(Request::decode(&enc).expect("decode"), stat);

        // A set with an unknown bit, or empty, is malformed; so is asking on a LIST.
        for set in [0x00, 0x08, 0x81] {
            let mut bad = enc.clone();
            *bad.last_mut().expect("set byte") = set;
            assert!(Request::decode(&bad).is_err(), "set {set:#x}");
        }
        let list = Request {
            method: Method::List,
            ..stat.clone()
        };
        assert!(list.encode().is_err());
        let mut forged = enc.clone();
        forged[1] = 0x03;
        assert!(Request::decode(&forged).is_err(), "LIST with checksums");

        // Heads: counts outside 1..=3, unknown codes, an algorithm twice, short bytes.
        let plain = ResponseHead {
            checksums: Vec::new(),
            ..sample_head()
        };
        let base = plain.encode().expect("encode")[2..].to_vec();
        let with = |section: &[u8]| {
            let mut b = base.clone();
            b[3] |= 0x80;
            b.extend_from_slice(section);
            b
        };
        let adler = [0x01, 1, 2, 3, 4];
        assert!(ResponseHead::decode(&with(&[&[1u8][..], &adler].concat())).is_ok());
        for section in [
            vec![0u8],
            [&[4u8][..], &adler, &adler, &adler, &adler].concat(),
            vec![1, 0x03, 1, 2, 3, 4],
            [&[2u8][..], &adler, &adler].concat(),
            vec![1, 0x01, 1, 2, 3],
            vec![1, 0x04, 0, 0],
        ] {
            assert!(
                ResponseHead::decode(&with(&section)).is_err(),
                "{section:?}"
            );
        }
        let twice = ResponseHead {
            checksums: vec![
                Checksummer::of(ChecksumAlgorithm::Md5, b"a"),
                Checksummer::of(ChecksumAlgorithm::Md5, b"b"),
            ],
            ..sample_head()
        };
        assert!(twice.encode().is_err());
    }

    #[test]
    fn varint_boundaries_round_trip() {
        for v in [0, 63, 64, 16383, 16384, (1 << 30) - 1, 1 << 30, VARINT_MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut r = Reader::new(&out);
            assert_eq!(r.varint("v"), Ok(v));
            assert!(r.finish().is_ok());
        }
    }

    #[test]
    fn wlcg_sized_tokens_fit_and_oversized_ones_are_refused() {
        // A JWT of an IAM user in many groups: 6 KiB of base64url with the dots.
        let jwt = format!(
            "eyJ{}.eyJ{}.{}",
            "a".repeat(300),
            "b".repeat(5_500),
            "c".repeat(342)
        );
        assert!(jwt.len() >= 6 * 1024);
        let req = Request {
            token: Some(jwt.clone()),
            path: "/".to_string() + &"p".repeat(MAX_PATH_LEN - 1),
            ..sample_request()
        };
        let bytes = req.encode().expect("a 6 KiB token encodes");
        let back = Request::decode(&bytes).expect("and decodes");
        assert_eq!(back.token.as_deref(), Some(jwt.as_str()));
        assert_eq!(
            Request::decode_prefix(&bytes)
                .expect("prefix")
                .map(|(_, n)| n),
            Some(bytes.len())
        );

        let at_limit = Request {
            token: Some("t".repeat(MAX_TOKEN_LEN)),
            ..sample_request()
        };
        let bytes = at_limit.encode().expect("a token at the limit encodes");
        assert!(Request::decode(&bytes).is_ok());

        let over = Request {
            token: Some("t".repeat(MAX_TOKEN_LEN + 1)),
            ..sample_request()
        };
        assert!(matches!(
            over.encode(),
            Err(WireError::TooLarge { what: "token", .. })
        ));
        // Hand-made, as a hostile client would send it: refused by the decoder too.
        let mut forged = at_limit.encode().expect("encodes");
        let token_at = forged
            .windows(64)
            .position(|w| w.iter().all(|&b| b == b't'))
            .expect("the token's bytes");
        // The four-byte varint before the token holds its length (16 KiB needs four); make
        // it one more and add the byte.
        let prefix: [u8; 4] = forged[token_at - 4..token_at].try_into().expect("4 bytes");
        let len = u32::from_be_bytes(prefix) & 0x3fff_ffff;
        assert_eq!(len as usize, MAX_TOKEN_LEN);
        let longer = (len + 1) | 0x8000_0000;
        forged[token_at - 4..token_at].copy_from_slice(&longer.to_be_bytes());
        forged.insert(token_at, b't');
        assert!(matches!(
            Request::decode(&forged),
            Err(WireError::TooLarge { what: "token", .. })
        ));
    }

    #[test]
    fn request_round_trip() {
        let reqs = [
            sample_request(),
            Request {
                upload: None,
                token: None,
                method: Method::Stat,
                path: "/".to_string(),
                range: None,
                want_digest: false,
                checksums: Vec::new(),
                validator: None,
            },
            Request {
                range: None,
                validator: None,
                ..sample_request()
            },
            Request {
                upload: None,
                token: None,
                method: Method::List,
                path: "/run-42/".to_string(),
                range: None,
                want_digest: false,
                checksums: Vec::new(),
                validator: None,
            },
        ];
        for req in reqs {
            let bytes = req.encode().expect("valid request encodes");
            assert_eq!(Request::decode(&bytes), Ok(req));
        }
    }

    #[test]
    fn head_and_trailer_round_trip() {
        let heads = [
            sample_head(),
            ResponseHead::error(status::NOT_FOUND, "no such file"),
            ResponseHead {
                status: status::OK,
                size: 0,
                range: Some(0..0),
                ..ResponseHead::default()
            },
            ResponseHead {
                status: status::OK,
                streamed: true,
                ..ResponseHead::default()
            },
        ];
        for head in heads {
            let bytes = head.encode().expect("valid head encodes");
            let len = ResponseHead::decode_len([bytes[0], bytes[1]]).expect("length");
            assert_eq!(len, bytes.len() - 2);
            assert_eq!(ResponseHead::decode(&bytes[2..]), Ok(head));
        }
        let d = Sha256Digest::of(b"body");
        assert_eq!(decode_trailer(&encode_trailer(&d)), Ok(d));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let req = sample_request().encode().expect("encodes");
        for cut in 0..req.len() {
            assert!(Request::decode(&req[..cut]).is_err(), "cut at {cut}");
        }
        let head = sample_head().encode().expect("encodes");
        for cut in 2..head.len() {
            assert!(ResponseHead::decode(&head[2..cut]).is_err(), "cut at {cut}");
        }
        let t = encode_trailer(&Sha256Digest::of(b""));
        for cut in 0..t.len() {
            assert!(decode_trailer(&t[..cut]).is_err());
        }
    }

    #[test]
    fn documented_example_encodes_as_shown() {
        // docs/quic-protocol.md, section "Example".
        let req = Request {
            upload: None,
            token: None,
            method: Method::Get,
            path: "/data/a.bin".to_string(),
            range: Some(1_048_576..2_097_152),
            want_digest: true,
            checksums: Vec::new(),
            validator: Some("\"1f-400000-17a\"".to_string()),
        };
        let mut want = vec![0x01, 0x01, 0x07, 0x0b];
        want.extend_from_slice(b"/data/a.bin");
        want.extend_from_slice(&[0x80, 0x10, 0x00, 0x00, 0x80, 0x20, 0x00, 0x00, 0x0f]);
        want.extend_from_slice(b"\"1f-400000-17a\"");
        assert_eq!(req.encode(), Ok(want));
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut req = sample_request().encode().expect("encodes");
        req.push(0);
        assert_eq!(Request::decode(&req), Err(WireError::Trailing(1)));
    }

    #[test]
    fn oversized_inputs_are_refused() {
        let long = Request {
            path: format!("/{}", "a".repeat(MAX_PATH_LEN)),
            ..sample_request()
        };
        assert!(matches!(long.encode(), Err(WireError::TooLarge { .. })));
        // A hand-built request whose path length claims more than the limit.
        let mut raw = vec![VERSION, 0x01, 0];
        put_varint(&mut raw, (MAX_PATH_LEN + 1) as u64);
        raw.extend(std::iter::repeat_n(b'a', MAX_PATH_LEN + 1));
        assert!(matches!(
            Request::decode(&raw),
            Err(WireError::TooLarge { what: "path", .. })
        ));
        assert!(matches!(
            Request::decode(&vec![0u8; MAX_REQUEST_LEN + 1]),
            Err(WireError::TooLarge { .. })
        ));
        assert!(ResponseHead::decode_len([0xff, 0xff]).is_err());
    }

    #[test]
    fn invalid_fields_are_refused() {
        let bad = [
            Request {
                range: Some(5..5),
                ..sample_request()
            },
            Request {
                path: "relative".to_string(),
                ..sample_request()
            },
            Request {
                validator: Some("bad\nvalue".to_string()),
                ..sample_request()
            },
            Request {
                method: Method::Stat,
                ..sample_request()
            },
            Request {
                method: Method::List,
                range: None,
                validator: None,
                ..sample_request()
            },
        ];
        for req in bad {
            assert!(req.encode().is_err(), "{req:?}");
        }
        assert_eq!(
            Request::decode(&[2, 1, 0, 1, b'/']),
            Err(WireError::Version(2))
        );
        assert!(Request::decode(&[VERSION, 9, 0, 1, b'/']).is_err());
        assert!(Request::decode(&[VERSION, 1, 0x80, 1, b'/']).is_err());
        assert!(Request::decode(&[VERSION, 3, REQ_WANT_DIGEST, 1, b'/']).is_err());
        let streamed_with_range = ResponseHead {
            streamed: true,
            range: Some(0..1),
            ..ResponseHead::default()
        };
        assert!(streamed_with_range.encode().is_err());
        let mut raw = ResponseHead {
            status: status::OK,
            range: Some(0..1),
            ..ResponseHead::default()
        }
        .encode()
        .expect("encodes");
        raw[5] |= HEAD_STREAMED;
        assert!(ResponseHead::decode(&raw[2..]).is_err());
        assert!(Request::decode(&[VERSION, 1, 0, 2, 0xff, 0xfe]).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // xorshift: deterministic, so a failure reproduces.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let valid_req = sample_request().encode().expect("encodes");
        let valid_head = sample_head().encode().expect("encodes");
        for i in 0..20_000 {
            let len = (next() % 96) as usize;
            let mut buf: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if i % 2 == 0 {
                // Mutate valid messages too, so decoding gets past the first bytes.
                let base = if i % 4 == 0 {
                    &valid_req
                } else {
                    &valid_head[2..]
                };
                buf = base.to_vec();
                for _ in 0..=(next() % 4) {
                    let at = (next() as usize) % buf.len();
                    buf[at] = next() as u8;
                }
            }
            let _ = Request::decode(&buf);
            let _ = ResponseHead::decode(&buf);
            let _ = decode_trailer(&buf);
        }
    }
}
