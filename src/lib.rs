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
//! Whole directory trees: [`tree::TreeDownload`] lists a directory URL (xfer's manifest,
//! WebDAV `PROPFIND` or nginx's JSON index) and fetches every file with the same checks, over
//! one transport's connections.
//!
//! What this crate does not do: upload (xfer pulls), or HTTP/3.

mod plain_put;
pub mod put_tree;
pub mod serve;
pub mod tpc;
pub mod tree;

use std::path::Path;
use std::sync::Arc;

pub use xfer_common::tls::{ClientTlsOptions, SelfSigned};
pub use xfer_core::checksum::{Checksum, ChecksumAlgorithm};
pub use xfer_core::duration::parse_duration;
pub use xfer_core::get::{Download, GetConfig, GetError};
pub use xfer_core::layout::{LaneLayout, Lanes};
pub use xfer_core::progress::{format_bps, Progress, ProgressSnapshot, RateMeter, Report};
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
    Ok(Download::new(transport, url, dest.as_ref(), get)
        .run()
        .await?)
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
