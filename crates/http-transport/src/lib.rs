//! # xfer-http: xfer over HTTP/1.1 and HTTP/2
pub mod config;
pub mod server;
pub mod tcp;

pub use config::{ConfigError, Http2Config, HttpVersion, TcpConfig};
