//! The request core every xfer server shares: a decoded [`Request`] in, a [`ResponsePlan`]
//! out, and the [`BodyStream`] that produces the body.
//!
//! The codecs (HTTP/1.1 and HTTP/2 in `xfer-http`, `xfer/1` over QUIC in `xfer-quic`) only
//! translate: they decode their wire form into a [`Request`], call [`Service::respond`], and
//! encode the plan back. Every decision — which resource, which status, which range, which
//! validators and digests, whether the body is hashed, whether a fault is injected, whether
//! the digest is remembered — is made here once, so the servers cannot drift apart.
//!
//! ```text
//!  wire ──codec──▶ Request ──Service::respond──▶ ResponsePlan ──codec──▶ wire head
//!                                                   │
//!                                                   └ body: BodyStream ──pump──▶ wire body
//!                                                        │  reads blocks ahead on the blocking pool
//!                                                        │  hashes (large blocks on the blocking pool)
//!                                                        │  flips the test fault byte
//!                                                        └▶ Trailer(digest) ─▶ DigestCache
//!                                                           (whole resource, still the same)
//!
//!  directory ──▶ dav / directory ──▶ ResponsePlan ── body: ListingStream ◀── walk on the blocking
//!                (PROPFIND, HTML index, manifest)                            pool, bounded channel
//! ```
//!
//! A process builds one [`Service`] and hands the same `Arc<Service>` to every codec
//! (`xfer serve` does; [`ServiceSource`] lets a server used alone build its own), so the
//! digests, checksums, uploads in progress, access rules and memory budget are shared because
//! the core is, not copied into each server.
//!
//! Inside, the modules form no import circle (a test in `tests/imports.rs` keeps it so): the
//! request and its heads (`request`), the status codes ([`status`]), the configuration
//! ([`ServiceConfig`]) and the record of a request (`record`) are leaves that the deciding
//! modules (`respond`, `upload`, `tpc`, `dav`, ...) import, never the other way round.
//!
//! Listings (WebDAV `PROPFIND`, the HTML index, xfer's manifest) are decided here too, and
//! stream: their bodies are produced while they are sent, in bounded memory.
//!
//! What it does not do: sockets, framing, TLS, connection limits or timeouts (the codecs'
//! business). Authentication is the codec's only in part: it hands over what the caller
//! presented ([`Credentials`]), and the core decides who that is and what it may do
//! ([`access`]).

#![forbid(unsafe_code)]

pub mod access;
pub mod access_log;
pub mod admission;
mod body;
mod checksums;
mod config;
mod dav;
mod dav_write;
mod directory;
mod exchange;
mod listing_body;
mod macaroon;
mod plan;
mod record;
mod request;
mod respond;
mod stale_staging;
pub mod status;
pub mod status_page;
pub mod tpc;
pub mod upload;

pub use access::{
    AccessControl, AccessFileError, Credentials, Denied, HttpsGet, Identity, KeyTimes, Operation,
    Policy, Secret, TokenError,
};
pub use access_log::AccessLogTarget;
pub use body::{BodyEvent, BodyStream};
pub use checksums::ChecksumCache;
pub use config::{check_stream_options, ServiceConfig};
pub use dav::{UPLOAD_PROTOCOL, UPLOAD_PROTOCOL_VERSION};
pub use directory::MAX_HTML_ENTRIES;
pub use listing_body::ListingStream;
pub use plan::{
    Body, ContentRange, ResponsePlan, CONTENT_TYPE_BYTES, CONTENT_TYPE_HTML, CONTENT_TYPE_TEXT,
    CONTENT_TYPE_XML,
};
pub use request::{CopyHead, DraftHead, Method, Request, UploadHead};
pub use respond::{Service, ServiceSource};
pub use stale_staging::{remove_stale_staging, spawn_stale_staging_sweeper};
pub use tpc::{CopyRunner, RemotePolicy, Tpc, TpcConfig};
pub use upload::{UploadBody, UploadConfig, Uploads};
