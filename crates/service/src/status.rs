//! Status codes the core answers with, numbered as in HTTP (`xfer/1` carries the same
//! numbers, so `xfer_core::error::is_transient_status` classifies both), and the answers
//! every part of the core shares. A leaf: it imports nothing of the crate.

use xfer_common::ErrorClass;

/// Whole resource follows.
pub const OK: u16 = 200;
/// A third-party copy started; its outcome follows in the body.
pub const ACCEPTED: u16 = 202;
/// An upload created a new file.
pub const CREATED: u16 = 201;
/// An upload replaced a file, or a chunk of a parallel upload was stored.
pub const NO_CONTENT: u16 = 204;
/// The requested range follows.
pub const PARTIAL_CONTENT: u16 = 206;
/// A WebDAV `PROPFIND` answer (RFC 4918 §13).
pub const MULTI_STATUS: u16 = 207;
/// A directory asked for without its trailing `/`; the plan carries the location.
pub const MOVED_PERMANENTLY: u16 = 301;
/// The request names something unusable (malformed path, bad synthetic spec).
pub const BAD_REQUEST: u16 = 400;
/// Credentials are needed and none were given, or they match nothing; the plan carries
/// `WWW-Authenticate`.
pub const UNAUTHORIZED: u16 = 401;
/// The path leaves the served root (traversal, symlink out) or may not be read; the
/// request is outside the caller's scope; or `PROPFIND` with `Depth: infinity`.
pub const FORBIDDEN: u16 = 403;
/// No such resource, or not a regular file.
pub const NOT_FOUND: u16 = 404;
/// A method the core does not serve; the plan carries `Allow`.
pub const METHOD_NOT_ALLOWED: u16 = 405;
/// An upload conflicts with the tree (a directory has its name) or with another upload
/// (an id reused for another file, a completion with bytes missing).
pub const CONFLICT: u16 = 409;
/// The validator does not match the resource's current ETag.
pub const PRECONDITION_FAILED: u16 = 412;
/// An upload larger than the server accepts.
pub const PAYLOAD_TOO_LARGE: u16 = 413;
/// An append to a resumable upload without `Content-Type: application/partial-upload`.
pub const UNSUPPORTED_MEDIA_TYPE: u16 = 415;
/// A path segment is longer than the filesystem allows. Permanent, unlike 500.
pub const URI_TOO_LONG: u16 = 414;
/// The range starts at or beyond the end of the resource.
pub const RANGE_NOT_SATISFIABLE: u16 = 416;
/// As many third-party copies as allowed are running; retry later.
pub const TOO_MANY_REQUESTS: u16 = 429;
/// The server failed before sending the body.
pub const INTERNAL_ERROR: u16 = 500;
/// A third-party copy to a URL scheme the server cannot reach.
pub const NOT_IMPLEMENTED: u16 = 501;
/// A `MOVE` to another server (RFC 4918 §9.9.4).
pub const BAD_GATEWAY: u16 = 502;
/// The server is shutting down or over a limit; retry later.
pub const SERVICE_UNAVAILABLE: u16 = 503;
/// The server's disk is full (or a quota reached); nothing was stored under the final
/// name. Retry once space is freed.
pub const INSUFFICIENT_STORAGE: u16 = 507;

/// Methods the core serves, for `Allow`: `PUT`, `POST` (resumable uploads) and the tree
/// changes `DELETE`, `MKCOL`, `MOVE` when uploads are on, `COPY` when third-party copy is.
pub(crate) fn allowed(uploads: bool, tpc: bool) -> &'static str {
    match (uploads, tpc) {
        (false, false) => "GET, HEAD, OPTIONS, PROPFIND",
        (true, false) => "GET, HEAD, OPTIONS, PROPFIND, PUT, POST, DELETE, MKCOL, MOVE",
        (false, true) => "COPY, GET, HEAD, OPTIONS, PROPFIND",
        (true, true) => "COPY, GET, HEAD, OPTIONS, PROPFIND, PUT, POST, DELETE, MKCOL, MOVE",
    }
}

/// The status and short body for a failure of the given class.
pub(crate) fn refusal_for(class: ErrorClass) -> (u16, &'static str) {
    match class {
        ErrorClass::BadRequest => (BAD_REQUEST, "bad request\n"),
        ErrorClass::Forbidden => (FORBIDDEN, "forbidden\n"),
        ErrorClass::NotFound => (NOT_FOUND, "not found\n"),
        ErrorClass::UriTooLong => (URI_TOO_LONG, "path segment too long\n"),
        ErrorClass::Internal => (INTERNAL_ERROR, "server error\n"),
    }
}
