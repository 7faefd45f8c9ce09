//! # xfer-core: the transfer engine
//!
//! Splits a remote resource into chunks, fetches them in parallel over *lanes* supplied by a
//! transport, writes each at its offset, checks every chunk's SHA-256 against the server's
//! digest as it arrives, journals verified chunks so an interrupted transfer resumes, and
//! reports progress and per-lane throughput.
//!
//! It opens no sockets. Transports (`xfer-http`, `xfer-quic`) implement [`transport::Transport`];
//! the scheduling logic ([`schedule::Scheduler`]) is a state machine fed events with explicit
//! time, so it is tested with simulated lanes and a virtual clock.
//!
//! ```text
//!             ┌────────────┐ assignments ┌──────────┐  bytes  ┌──────────┐
//!  Transport ─► lane tasks ◄─────────────┤Scheduler │         │  writer  ├─► <dest>.part
//!             │ (hash each │──events────►│(sans-IO) │         │  thread  ├─► journal
//!             │   chunk)   │──────────────────────────────────►          │
//!             └────────────┘                                  └────┬─────┘
//!                                          whole-file hasher ◄─────┘ (reads back sealed
//!                                                                     chunks, in order)
//! ```

#![forbid(unsafe_code)]
pub mod adapt;
pub mod checksum;
pub mod chunk_adler;
pub mod digest;
pub mod duration;
pub mod error;
pub mod get;
pub mod journal;
pub mod kept;
pub mod lane_sampler;
pub mod layout;
pub mod mem_transport;
pub mod multi;
pub mod nofollow;
pub mod path_resume;
pub mod plan;
pub mod progress;
pub mod put;
pub mod rate;
pub mod schedule;
pub mod sink;
pub mod size;
pub mod transport;
pub mod verification;
pub mod whole_hash;

pub use digest::Sha256Digest;
pub use error::TransferError;
pub use get::{Download, GetConfig, GetError};
pub use progress::{Progress, ProgressSnapshot, Report};
