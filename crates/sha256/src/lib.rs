//! # xfer-sha256: SHA-256 for many lanes on few cores
//!
//! [`compress`] holds the block function for one stream and for two streams interleaved on one
//! core; [`PairingSha256`] is a streaming hasher that, when another hasher on the same thread
//! has bytes waiting, hashes both at once.
//!
//! The crate denies `unsafe` except in `compress/shani.rs`, the block function on the x86 SHA
//! extensions, whose safe wrappers check the CPU's features first.

#![deny(unsafe_code)]

pub mod compress;
pub mod pairing;

pub use compress::pairs_help;
pub use pairing::{pairing_stats, thread_pairing_stats, PairingSha256, PairingStats};
