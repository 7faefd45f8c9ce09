//! Errors a transport reports for one request, classified for the scheduler.

use std::fmt;
use std::io;
use std::time::Duration;

/// What went wrong while talking to a peer. Every variant names the peer (or URL) so a message
/// printed at the top of the program says where it happened.
///
/// The scheduler only asks [`TransferError::is_retryable`]: transient failures are retried per
/// chunk with backoff, the others end the transfer at once.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// TCP/UDP connect or name resolution failed.
    #[error("cannot connect to {peer}")]
    Connect {
        peer: String,
        #[source]
        source: io::Error,
    },
    /// The TLS handshake failed: bad certificate, unknown CA, wrong name. Not retried.
    #[error("TLS handshake with {peer} failed: {message}")]
    Tls { peer: String, message: String },
    /// The peer answered with a status that is not a success for this request.
    #[error("{peer} answered {status} for {what}{}", status_hint(*status))]
    Status {
        peer: String,
        status: u16,
        what: String,
    },
    /// The body ended before the announced length.
    #[error("body from {peer} ended after {got} of {expected} bytes")]
    Truncated {
        peer: String,
        expected: u64,
        got: u64,
    },
    /// Reset, broken pipe and other transport-level I/O errors mid-request.
    #[error("i/o error talking to {peer}")]
    Io {
        peer: String,
        #[source]
        source: io::Error,
    },
    /// No progress for too long.
    #[error("{peer} timed out after {after:?} ({what})")]
    Timeout {
        peer: String,
        what: String,
        after: Duration,
    },
    /// The peer broke the protocol (bad header, GOAWAY, stream reset, malformed frame).
    #[error("protocol error from {peer}: {message}")]
    Protocol { peer: String, message: String },
    /// The peer sent a response for a different range, size or representation than asked.
    #[error("{peer} sent an unexpected response: {message}")]
    Unexpected { peer: String, message: String },
    /// The server answered a range request with the whole resource (a server that advertises
    /// `Accept-Ranges: bytes` and ignores `Range`). Not retried: the engine starts over with
    /// one sequential stream of the whole.
    #[error("{peer} answered a range request with the whole resource (200): it ignores ranges")]
    RangesIgnored { peer: String },
    /// The remote resource is not the one the transfer started with (size or validator changed).
    #[error("{url} changed during the transfer: {what}")]
    RemoteChanged { url: String, what: String },
    /// The server declares a whole-file SHA-256 other than the one the caller expects: it
    /// does not hold the file asked for. A verification failure, found before any byte is
    /// written. Not retried.
    #[error("{url} declares SHA-256 {declared}, not the expected {expected}")]
    NotExpectedDigest {
        url: String,
        declared: crate::digest::Sha256Digest,
        expected: crate::digest::Sha256Digest,
    },
    /// Bad configuration or a request the transport cannot express. Not retried.
    #[error("{0}")]
    Config(String),
}

impl TransferError {
    /// Whether trying the same request again, later or on another lane, may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Connect { .. }
            | Self::Truncated { .. }
            | Self::Io { .. }
            | Self::Timeout { .. }
            | Self::Protocol { .. }
            | Self::Unexpected { .. } => true,
            Self::Status { status, .. } => is_transient_status(*status),
            Self::Tls { .. }
            | Self::RangesIgnored { .. }
            | Self::RemoteChanged { .. }
            | Self::NotExpectedDigest { .. }
            | Self::Config(_) => false,
        }
    }
}

impl TransferError {
    /// Whether the peer's host said nothing listens there (TCP RST to the SYN, ICMP port
    /// unreachable for QUIC). Retried during a transfer, where it means a server restarting,
    /// but not when first reaching the server: then it means a wrong address or port.
    pub fn is_refused(&self) -> bool {
        matches!(self, Self::Connect { source, .. } if source.kind() == io::ErrorKind::ConnectionRefused)
    }
}

/// The error and its causes, joined with `: `, each cause once (a cause whose text the message
/// already holds is skipped), for messages that must stand alone.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let msg = c.to_string();
        if !s.contains(&msg) {
            s.push_str(": ");
            s.push_str(&msg);
        }
        cur = c.source();
    }
    s
}

/// HTTP statuses worth retrying: server errors, 408 Request Timeout, 429 Too Many Requests.
/// The QUIC protocol reuses HTTP's status numbers, so this serves both.
pub fn is_transient_status(status: u16) -> bool {
    // 507: the server's disk is full; that does not pass in a few seconds of backoff, and
    // the user should hear of it at once.
    (status >= 500 && status != 507) || status == 408 || status == 429
}

/// A knob set to a value outside what it accepts; every crate's configuration reports this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field} = {value}: allowed {allowed}")]
pub struct ConfigError {
    pub field: &'static str,
    pub value: String,
    pub allowed: &'static str,
}

impl ConfigError {
    pub fn new(field: &'static str, value: impl fmt::Display, allowed: &'static str) -> Self {
        Self {
            field,
            value: value.to_string(),
            allowed,
        }
    }
}

/// What a user can do about a status, where there is something.
fn status_hint(status: u16) -> &'static str {
    match status {
        401 => " (the server wants credentials: pass --token-file FILE, or set BEARER_TOKEN)",
        403 => " (your credentials do not cover this path, or the server may not read it)",
        507 => " (the server's disk is full; run the same command again once it has space)",
        _ => "",
    }
}
