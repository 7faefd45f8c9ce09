//! # xfer-quic: xfer over QUIC
//!
//! A client transport and a server for `xfer/1`, a small binary request/response protocol
//! over QUIC bidirectional streams (quinn 0.11, rustls with ring, ALPN `xfer/1`). One request
//! per stream: GET (metadata, a byte range, an optional SHA-256 trailer of the bytes sent),
//! STAT (metadata only) and PUT (a whole file, a chunk of a parallel upload, its completion).
//! docs/quic-protocol.md specifies the wire format, statuses and error codes; [`wire`]
//! implements it. What a request means (access, status, digests) is the shared request
//! core's decision (`xfer_service`), as for HTTP.
//!
//! It mirrors the HTTP transport: [`QuicTransport`] implements
//! `xfer_core::transport::Transport` for `quic://host:port/path` URLs, [`QuicServer`] serves
//! the same resources as the HTTP server (`xfer_common::resource`).
//!
//! ```text
//!  engine ─► QuicTransport ─ lane i ─► connection i % M ─► one bidi stream per request
//!                                         (own UDP socket + quinn endpoint each)
//!                                             │  request ─► ◄─ head, body, trailer
//!  QuicServer ◄───────────────────────────────┘
//!    └─ per stream: Resource::open (blocking pool) ─► BlockStream (read-ahead) ─► write_chunk
//! ```
//!
//! Key types: [`QuicTransport`]/[`QuicClientConfig`], [`QuicServer`]/[`QuicServerConfig`],
//! [`QuicTuning`] (windows, congestion control, MTU, GSO, UDP buffers; defaults sized for
//! 1 Gbit/s × 100 ms).
//!
//! [`CarefulResume`] lets a sender's second connection to a peer start from the path's
//! saved bandwidth-delay product instead of slow start (RFC 9959).
//!
//! 0-RTT: a returning client sends its first requests (reads only, never a PUT) with the
//! handshake when the server allows early data. What it does not do: HTTP/3, connection
//! migration on purpose, retries (the engine retries, guided by
//! `TransferError::is_retryable`).

#![forbid(unsafe_code)]
pub mod bbr;
pub mod client;
pub mod loss_bound;
pub mod resume;
pub mod send_batch;
pub mod server;
pub mod socket;
pub mod tuning;
pub mod url;
pub mod wire;

pub use client::{QuicClientConfig, QuicTransport};
pub use resume::{CarefulResume, PathCache, ResumeStats};
pub use server::{QuicServer, QuicServerConfig, ServerError};
pub use tuning::{ConfigError, CongestionControl, QuicTuning};
pub use url::QuicUrl;
pub use wire::{ErrorCode, ALPN, DEFAULT_PORT};
