//! # xfer-quic: xfer over QUIC
//!
//! (crate documentation is being written)
pub mod wire;
