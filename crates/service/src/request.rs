//! What a codec decodes a request into: the method, the target, and the heads of uploads
//! (`UploadHead`, `DraftHead`) and copies (`CopyHead`), kept as sent; the modules that act on
//! them parse them. A leaf but for the credentials it carries.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;

use xfer_core::checksum::{want_repr_digest_preferences, ChecksumAlgorithm};
use xfer_core::digest::wants_sha256;

use crate::access::Credentials;

/// The request method. Unknown methods are kept so that the core, not the codec, answers 405.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    /// HTTP `HEAD`; `xfer/1`'s `STAT`.
    Head,
    /// HTTP `OPTIONS`: which methods and which WebDAV class the server speaks.
    Options,
    /// WebDAV `PROPFIND` (RFC 4918 §9.1), `Depth: 0` or `1`.
    Propfind,
    /// `xfer/1`'s `LIST`: the manifest of a directory (HTTP asks with `GET <dir>/?manifest`).
    List,
    /// HTTP `PUT`: a whole file, or a chunk or the completion of a parallel upload; with
    /// `Upload-Complete`, the creation of a resumable upload.
    Put,
    /// HTTP `POST`: only the creation of a resumable upload.
    Post,
    /// HTTP `PATCH`: an append to a resumable upload.
    Patch,
    /// HTTP `DELETE`: the cancellation of a resumable upload, or the removal of a file or an
    /// empty directory (uploads on).
    Delete,
    /// WebDAV `MKCOL` (RFC 4918 §9.3): one new directory (uploads on).
    Mkcol,
    /// WebDAV `MOVE` (RFC 4918 §9.9): a rename within the served root (uploads on).
    Move,
    /// WebDAV `COPY` as HTTP third-party copy uses it (`Source` or `Destination`).
    Copy,
    Other(String),
}

impl Method {
    /// From the HTTP method name (case-sensitive, as RFC 9110 §9.1 says). The core, not the
    /// codec, knows which names it serves, so new methods need no codec change.
    pub fn from_name(name: &str) -> Self {
        match name {
            "GET" => Self::Get,
            "HEAD" => Self::Head,
            "OPTIONS" => Self::Options,
            "PROPFIND" => Self::Propfind,
            "PUT" => Self::Put,
            "POST" => Self::Post,
            "PATCH" => Self::Patch,
            "DELETE" => Self::Delete,
            "COPY" => Self::Copy,
            "MKCOL" => Self::Mkcol,
            "MOVE" => Self::Move,
            other => Self::Other(other.to_string()),
        }
    }

    /// Whether the request may be acted on when it arrived as TLS or QUIC early data, which
    /// an attacker can replay (RFC 8470): repeating it must change nothing. Reads are; uploads,
    /// copies and deletions are not, and get `425 Too Early` instead.
    pub fn replay_safe(&self) -> bool {
        matches!(
            self,
            Self::Get | Self::Head | Self::Options | Self::Propfind | Self::List
        )
    }

    /// The method as HTTP spells it, for logs.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Options => "OPTIONS",
            Self::Propfind => "PROPFIND",
            Self::List => "LIST",
            Self::Put => "PUT",
            Self::Post => "POST",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
            Self::Copy => "COPY",
            Self::Mkcol => "MKCOL",
            Self::Move => "MOVE",
            Self::Other(m) => m,
        }
    }
}

/// A request, independent of the wire it came over.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    /// Path as received, still percent-encoded.
    pub path: String,
    pub query: Option<String>,
    /// Every HTTP `Range` field value, in order; only a single one is honoured.
    pub range_headers: Vec<String>,
    /// `xfer/1`'s structured range (start inclusive, end exclusive, end clamped to the size).
    pub exact_range: Option<Range<u64>>,
    /// HTTP `If-Range`: a mismatch serves the whole representation.
    pub if_range: Option<String>,
    /// A strong ETag that must match or the answer is 412 (`xfer/1`'s validator).
    pub if_match: Option<String>,
    /// WebDAV `Depth` field value, verbatim (`PROPFIND` only; absent means infinity).
    pub depth: Option<String>,
    /// Every `Accept` field value, in order (asks for the manifest by media type).
    pub accept: Vec<String>,
    /// `Want-Content-Digest` asks for SHA-256.
    pub want_content_digest: bool,
    /// `Want-Repr-Digest` (RFC 9530): the algorithms asked for, best first. A known SHA-256 is
    /// sent whatever this says; adler32 or MD5 ranked here are computed if need be.
    pub want_repr_digest: Vec<ChecksumAlgorithm>,
    /// The codec can deliver a trailer after the body (HTTP/2, HTTP/1.1 with `TE: trailers`,
    /// `xfer/1`).
    pub trailers_ok: bool,
    pub peer: SocketAddr,
    /// `http/1.1`, `h2`, `h2c` or `quic`, for logs.
    pub protocol: &'static str,
    /// What the caller presented; the core turns it into an identity or a refusal.
    pub credentials: Credentials,
    /// What an upload (`PUT`, or the `HEAD` of an upload's status) said about itself.
    pub upload: UploadHead,
    /// RFC 3230 `Want-Digest` field values (`adler32`, `md5`, `sha-256` with q-values).
    pub want_digest: Vec<String>,
    /// What a `COPY` (third-party copy) said about the remote; a `MOVE`'s `Destination` and
    /// `Overwrite` too.
    pub copy: CopyHead,
    /// The authority the request was sent to (HTTP `Host` or `:authority`), to tell a `MOVE`
    /// to this server from one to another.
    pub authority: Option<String>,
}

impl Request {
    /// A request with no conditions, ranges or digest wishes.
    pub fn new(
        method: Method,
        path: impl Into<String>,
        peer: SocketAddr,
        protocol: &'static str,
    ) -> Self {
        Self {
            method,
            path: path.into(),
            query: None,
            range_headers: Vec::new(),
            exact_range: None,
            if_range: None,
            if_match: None,
            depth: None,
            accept: Vec::new(),
            want_content_digest: false,
            want_repr_digest: Vec::new(),
            trailers_ok: false,
            peer,
            protocol,
            credentials: Credentials::default(),
            upload: UploadHead::default(),
            want_digest: Vec::new(),
            copy: CopyHead::default(),
            authority: None,
        }
    }

    /// Split `path?query` as `xfer/1` carries it.
    pub fn with_target(mut self, target: &str) -> Self {
        match target.split_once('?') {
            Some((p, q)) => {
                self.path = p.to_string();
                self.query = Some(q.to_string());
            }
            None => {
                self.path = target.to_string();
                self.query = None;
            }
        }
        self
    }

    /// Record `Want-Content-Digest` field values.
    pub fn with_want_content_digest<'a>(
        mut self,
        values: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        self.want_content_digest = values.into_iter().any(wants_sha256);
        self
    }

    /// Record `Want-Repr-Digest` field values; several lines make one dictionary (RFC 8941
    /// §4.2).
    pub fn with_want_repr_digest<'a>(mut self, values: impl IntoIterator<Item = &'a str>) -> Self {
        let joined = values.into_iter().collect::<Vec<_>>().join(", ");
        self.want_repr_digest = want_repr_digest_preferences(&joined);
        self
    }
}

/// What a codec decoded about an upload request.
#[derive(Debug, Clone, Default)]
pub struct UploadHead {
    /// `Content-Length`, when the body announced it.
    pub content_length: Option<u64>,
    /// `Content-Range` as sent: `bytes START-END/TOTAL`.
    pub content_range: Option<String>,
    /// `Content-Digest` as sent.
    pub content_digest: Option<String>,
    /// `Repr-Digest` as sent: the whole file's digest.
    pub repr_digest: Option<String>,
    /// `Xfer-Upload`: the client's id for a parallel upload.
    pub id: Option<String>,
    /// `Xfer-Upload-Complete: ?1`.
    pub complete: bool,
    /// The resumable-upload draft's fields (`upload::resumable`).
    pub draft: DraftHead,
}

/// What a codec passes on of the resumable-upload draft's fields, verbatim; the core parses them (RFC 9651
/// items), so every codec reads them alike.
#[derive(Debug, Clone, Default)]
pub struct DraftHead {
    /// `Upload-Complete` (Boolean).
    pub upload_complete: Option<String>,
    /// `Upload-Offset` (Integer).
    pub upload_offset: Option<String>,
    /// `Upload-Length` (Integer).
    pub upload_length: Option<String>,
    /// `Upload-Draft-Interop-Version` (Integer).
    pub interop_version: Option<String>,
    /// `Content-Type` of the request.
    pub content_type: Option<String>,
}

/// What a codec decoded about a `COPY`. Its `Debug` shows the names of the
/// `TransferHeader` fields, never their values (tokens for the remote).
#[derive(Clone, Default)]
pub struct CopyHead {
    /// `Source`: pull from this URL.
    pub source: Option<String>,
    /// `Destination`: push to this URL.
    pub destination: Option<String>,
    /// `Overwrite` (RFC 4918 §10.6): `F` refuses to replace an existing file.
    pub overwrite: Option<String>,
    /// `X-Number-Of-Streams`, verbatim.
    pub streams: Option<String>,
    /// `RequireChecksumVerification: true` (any case): the copy must be checked against a
    /// checksum the remote gives, or fail.
    pub require_checksum: bool,
    /// `TransferHeader<Name>: value` fields, as (`Name`, value), in order.
    pub transfer_headers: Vec<(String, String)>,
    /// `Credential`, verbatim: `none`, or a delegation kind this server refuses.
    pub credential: Option<String>,
    /// `X-No-Delegate`, verbatim.
    pub no_delegate: Option<String>,
    /// `ClientInfo` (FTS: job, file and retry), verbatim; only logged.
    pub client_info: Option<String>,
    /// `SciTag`, verbatim: the SciTags flow label; only logged.
    pub scitag: Option<String>,
}

impl fmt::Debug for CopyHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CopyHead")
            .field("source", &self.source)
            .field("destination", &self.destination)
            .field("overwrite", &self.overwrite)
            .field("streams", &self.streams)
            .field("require_checksum", &self.require_checksum)
            .field(
                "transfer_headers",
                &self
                    .transfer_headers
                    .iter()
                    .map(|(n, _)| n)
                    .collect::<Vec<_>>(),
            )
            .field("credential", &self.credential)
            .field("no_delegate", &self.no_delegate)
            .field("client_info", &self.client_info)
            .field("scitag", &self.scitag)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::Method;

    #[test]
    fn only_reads_are_replay_safe() {
        for name in ["GET", "HEAD", "OPTIONS", "PROPFIND"] {
            assert!(Method::from_name(name).replay_safe(), "{name}");
        }
        assert!(Method::List.replay_safe());
        for name in [
            "PUT", "POST", "PATCH", "DELETE", "COPY", "MOVE", "MKCOL", "get",
        ] {
            assert!(!Method::from_name(name).replay_safe(), "{name}");
        }
    }
}
