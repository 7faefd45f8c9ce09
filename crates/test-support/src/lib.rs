//! # xfer-test-support: what xfer's test binaries share
//!
//! - [`fault_proxy`]: a TCP and UDP proxy on loopback that truncates, stalls, resets, flips a
//!   byte of, or throttles what the server sends, per connection, so one suite can test the
//!   client's behaviour under each fault over HTTP/1.1, HTTP/2 and QUIC alike.
//! - [`data`]: deterministic test bytes (one generator for every test binary) and hashing.
//! - [`access_file`]: the access file a test server reads, and the token entry most grant.
//! - [`fence`]: the check that keeps a crate's `unsafe` inside its `sys` module.
//! - [`signal`]: signals to a spawned child, without `unsafe`.
//! - [`gate`]: the prerequisite gate: skip when a capability is truly absent, never under
//!   `CI=true`.
//! - [`wait`]: bounded polls ([`wait_until`], [`wait_until_async`]) that panic naming what
//!   never happened, in place of fixed sleeps.
//!
//! ```text
//!   client ──► FaultProxy (127.0.0.1:port) ──► server
//!          ◄── fault applied to server→client bytes of connection i ◄──
//! ```
//!
//! Test-only (`publish = false`); nothing in the product depends on it.

#![forbid(unsafe_code)]

pub mod access_file;
pub mod data;
pub mod fault_proxy;
pub mod fence;
pub mod gate;
pub mod rate_relay;
pub mod signal;
pub mod wait;

pub use access_file::{token_entry, write_access_file};
pub use data::{random_bytes, sha256_hex, write_random_file};
pub use fault_proxy::{Fault, FaultProxy, ProxyStats};
pub use rate_relay::RateRelay;
pub use wait::{wait_until, wait_until_async};

/// The error type test helpers return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
