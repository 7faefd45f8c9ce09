//! # xfer-quic: xfer over QUIC
//!
//! (crate documentation is being written)
pub mod socket;
pub mod tuning;
pub mod wire;
