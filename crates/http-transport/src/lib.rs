//! # xfer-http: xfer over HTTP/1.1 and HTTP/2
pub mod client;
pub mod config;
pub mod server;
pub mod tcp;

pub use client::{AddressPolicy, ConnectionWatch, HttpClientConfig, HttpTransport};
pub use config::{ConfigError, Http2Config, HttpVersion, TcpConfig};
