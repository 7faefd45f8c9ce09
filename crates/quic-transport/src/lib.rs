//! # xfer-quic: xfer over QUIC
//!
//! (crate documentation is being written)
pub mod client;
pub mod server;
pub mod socket;
pub mod tuning;
pub mod url;
pub mod wire;

pub use client::{QuicClientConfig, QuicTransport};
pub use server::{QuicServer, QuicServerConfig, ServerError};
pub use tuning::{ConfigError, CongestionControl, QuicTuning};
