//! # xfer-http: xfer over HTTP/1.1 and HTTP/2
#![deny(unsafe_code)]
pub mod client;
pub mod config;
pub mod server;
#[allow(unsafe_code)]
mod sys;
pub mod tcp;

pub use client::{AddressPolicy, ConnectionWatch, HttpClientConfig, HttpTransport};

/// Decoders of foreign bytes, for the fuzz targets only.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::client::pipeline::fuzzing::pipelined_responses;
}
pub use config::{ConfigError, Http2Config, HttpVersion, TcpConfig};
