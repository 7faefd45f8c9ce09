//! # xfer: parallel, verified, resumable bulk transfer
//!
//! xfer moves large files between distant sites: it cuts a file into chunks, fetches them in
//! parallel over many *lanes* (HTTP/1.1 connections, HTTP/2 streams or QUIC streams), writes
//! each at its offset, checks every chunk's SHA-256 against the server's RFC 9530 digest as it
//! arrives, journals verified chunks so an interrupted transfer resumes where it stopped, and
//! only then renames the file to its final name.
//!
//! This crate is the facade for embedding; the `xfer` command-line tool is built on it.
//!
//! ```text
//!  download(url) ─► transport_for(url) ─┬─ http(s)://  ─► xfer_http::HttpTransport (HTTP/1.1, HTTP/2)
//!                                       └─ quic://     ─► xfer_quic::QuicTransport  (xfer/1 over QUIC)
//!                └► xfer_core::Download: scheduler, writer, journal, whole-file hash ─► Report
//!  serve(root)    ─► xfer_http::HttpServer (TCP) + xfer_quic::QuicServer (UDP, same port)
//! ```
//!
//! Fetch a file with the defaults (8 HTTP/1.1 connections, or what ALPN picks; 16 MiB chunks;
//! digests checked):
//!
//! ```no_run
//! # async fn run() -> Result<(), xfer::Error> {
//! let report = xfer::download(
//!     "https://data.example.org/run-42/frames.h5",
//!     "frames.h5",
//!     &xfer::ClientConfig::default(),
//!     xfer::GetConfig::default(),
//! )
//! .await?;
//! println!("{}", report.summary());
//! # Ok(()) }
//! ```
//!
//! Tuning lives in plain structs: [`HttpClientConfig`] (connections, [`Http2Config`] windows and
//! frame size, [`TcpConfig`] buffers and congestion control), [`QuicClientConfig`]
//! ([`QuicTuning`]), and [`GetConfig`] (chunk size, lanes, retries). `docs/tuning.md` explains
//! each knob with measured figures.
//!
//! One file from several sources (mirrors, or the data-transfer nodes of a cluster), lanes
//! spread over them by what each delivers; every source must hold the same file (same size and
//! whole-file digest) before it gets work, and those the first answers name in
//! `Link: <...>; rel=duplicate` join in:
//!
//! ```no_run
//! # async fn run() -> Result<(), xfer::Error> {
//! let report = xfer::download_from(
//!     &["https://dtn1.example.org/run-42/frames.h5", "https://dtn2.example.org/run-42/frames.h5"],
//!     "frames.h5",
//!     &xfer::ClientConfig::default(),
//!     xfer::GetConfig::default(),
//! )
//! .await?;
//! for source in &report.sources {
//!     println!("{}: {} bytes, {} errors", source.url, source.bytes, source.errors);
//! }
//! # Ok(()) }
//! ```
//!
//! Whole directory trees: [`tree::TreeDownload`] lists a directory URL (xfer's manifest,
//! WebDAV `PROPFIND` or nginx's JSON index) and fetches every file with the same checks, over
//! one transport's connections.
//!
//! What this crate does not do: HTTP/3. Uploads (`Upload`, [`put_tree`]) and third-party
//! copies are here as well as downloads.

#![forbid(unsafe_code)]

pub mod issuer_keys;
mod metrics_endpoint;
mod plain_put;
pub mod put_tree;
pub mod serve;
pub mod tpc;
pub mod tree;

use std::path::Path;
use std::sync::Arc;

pub use xfer_common::tls::{ClientTlsOptions, SelfSigned};
pub use xfer_core::adapt::{AdaptConfig, AdaptReport};
pub use xfer_core::checksum::{Checksum, ChecksumAlgorithm};
pub use xfer_core::duration::parse_duration;
pub use xfer_core::error::error_chain;
pub use xfer_core::get::{Download, GetConfig, GetError};
pub use xfer_core::layout::{LaneLayout, Lanes};
pub use xfer_core::multi::{MultiSource, Source, MAX_SOURCES};
pub use xfer_core::plan::{ChunkPlan, DEFAULT_CHUNK_SIZE};
pub use xfer_core::progress::{
    format_bps, Progress, ProgressSnapshot, RateMeter, Report, SourceReport,
};
pub use xfer_core::schedule::ScheduleConfig;
pub use xfer_core::size::{parse_size, HumanBytes};
pub use xfer_core::transport::{ConnectionStats, Transport};
pub use xfer_core::{Sha256Digest, TransferError};
pub use xfer_http::{Http2Config, HttpClientConfig, HttpTransport, HttpVersion, TcpConfig};
pub use xfer_quic::{CongestionControl, QuicClientConfig, QuicTransport, QuicTuning};

/// The engine, the transports and the shared pieces, for what the facade does not cover.
pub mod crates {
    pub use xfer_common as common;
    pub use xfer_core as core;
    pub use xfer_http as http;
    pub use xfer_quic as quic;
    pub use xfer_service as service;
}

/// How to reach servers, per protocol.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    /// For `http://` and `https://` URLs.
    pub http: HttpClientConfig,
    /// For `quic://` URLs.
    pub quic: QuicClientConfig,
}

impl ClientConfig {
    /// Use `lanes` (M connections × K streams; `None` parts keep each protocol's default) for
    /// every protocol: the one place a lane layout is set.
    pub fn with_lanes(mut self, lanes: LaneLayout) -> Self {
        self.http.lanes = lanes;
        self.quic.lanes = lanes;
        self
    }

    /// Send `token` as a bearer token with every request, over every protocol (HTTP only to
    /// the origin of the URL given).
    pub fn with_token(mut self, token: xfer_common::secret::Secret) -> Self {
        self.http.token = Some(token.clone());
        self.quic.token = Some(token);
        self
    }

    /// Use `tls` (trusted CAs, or the insecure footgun) for every protocol.
    pub fn with_tls(mut self, tls: ClientTlsOptions) -> Self {
        self.http.tls = tls.clone();
        self.quic.tls = tls;
        self
    }
}

/// What can go wrong in [`download`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL or the client configuration cannot be used.
    #[error(transparent)]
    Transport(#[from] TransferError),
    /// The transfer itself failed; see [`GetError`].
    #[error(transparent)]
    Get(#[from] GetError),
}

/// The URL schemes xfer speaks, and which transport each selects.
pub const SCHEMES: &[(&str, &str)] = &[
    (
        "http",
        "HTTP/1.1, or h2c with prior knowledge when HTTP/2 is asked for",
    ),
    (
        "https",
        "HTTP/1.1 or HTTP/2 over TLS, as ALPN decides unless forced",
    ),
    (
        "quic",
        "xfer/1 over QUIC with TLS 1.3 (ALPN xfer/1); default port 8443",
    ),
];

/// A transport for `url`, chosen by its scheme.
pub fn transport_for(
    url: &str,
    config: &ClientConfig,
) -> Result<Arc<dyn Transport>, TransferError> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("http" | "https") => Ok(Arc::new(HttpTransport::new(url, config.http.clone())?)),
        Some("quic") => Ok(Arc::new(QuicTransport::new(url, config.quic.clone())?)),
        _ => Err(TransferError::Config(format!(
            "unsupported URL {url:?}: use one of {}",
            SCHEMES
                .iter()
                .map(|(s, _)| format!("{s}://"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Fetch `url` to `dest` and verify it. Resumes from `<dest>.xfer-journal` when an earlier
/// run of the same download was interrupted.
pub async fn download(
    url: &str,
    dest: impl AsRef<Path>,
    client: &ClientConfig,
    get: GetConfig,
) -> Result<Report, Error> {
    let transport = transport_for(url, client)?;
    let result = Download::new(transport.clone(), url, dest.as_ref(), get)
        .run()
        .await;
    transport.close().await;
    Ok(result?)
}

/// One transport over every URL in `urls` (at most [`MAX_SOURCES`]), each chosen by its
/// scheme, that checks they hold the same file when the download stats it. With
/// `discover_duplicates`, the `Link: <...>; rel=duplicate` targets the first answers name are
/// added (never a step down from TLS to plain text).
pub fn sources_transport(
    urls: &[&str],
    client: &ClientConfig,
    expect_sha256: Option<Sha256Digest>,
    discover_duplicates: bool,
) -> Result<MultiSource, TransferError> {
    if urls.is_empty() {
        return Err(TransferError::Config("no source URL given".into()));
    }
    let sources = urls
        .iter()
        .map(|url| {
            Ok(Source {
                url: url.to_string(),
                transport: transport_for(url, client)?,
            })
        })
        .collect::<Result<Vec<_>, TransferError>>()?;
    let multi = MultiSource::new(sources, expect_sha256);
    Ok(if discover_duplicates {
        let client = client.clone();
        multi.discover_duplicates(Arc::new(move |url: &str| transport_for(url, &client)))
    } else {
        multi
    })
}

/// Fetch one file from several sources to `dest` and verify it ([`sources_transport`], with
/// `Link: rel=duplicate` discovery). Resumes from `<dest>.xfer-journal` whatever sources the
/// interrupted run had, when the sources send the file's digest (`Repr-Digest`) or
/// `get.expect_sha256` is set.
pub async fn download_from(
    urls: &[&str],
    dest: impl AsRef<Path>,
    client: &ClientConfig,
    get: GetConfig,
) -> Result<Report, Error> {
    let multi = sources_transport(urls, client, get.expect_sha256, true)?;
    let first = urls.first().copied().unwrap_or_default();
    let multi = Arc::new(multi);
    let result = Download::new(multi.clone(), first, dest.as_ref(), get)
        .run()
        .await;
    multi.close().await;
    Ok(result?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_select_transports() {
        let c = ClientConfig::default();
        assert_eq!(
            transport_for("http://127.0.0.1:1/x", &c)
                .map(|t| t.default_lanes())
                .ok(),
            Some(8)
        );
        assert!(transport_for("quic://127.0.0.1:1/x", &c).is_ok());
        let err = transport_for("ftp://example.org/x", &c)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unsupported URL"), "{err}");
        assert!(transport_for("no scheme", &c).is_err());
    }
}
