//! # xfer-common: what xfer's servers and clients share across transports
//!
//! The HTTP (`xfer-http`) and QUIC (`xfer-quic`) crates both depend on this one and never on
//! each other. It holds the transport-independent parts of serving and fetching a resource:
//!
//! - [`paths`]: mapping a request path onto a file under the served root, refusing traversal.
//! - [`ranges`]: HTTP `Range` / `Content-Range` (RFC 9110 §14), single ranges only.
//! - [`synthetic`]: deterministic generated data at [`synthetic::SYNTHETIC_PATH`] for
//!   memory-to-memory runs.
//! - [`resource`]: an opened file or synthetic spec with validators, positional reads and a
//!   read-ahead block stream.
//! - [`digest_cache`]: whole-resource SHA-256 computed in the background (`Repr-Digest`), and
//!   the digests of ranges already sent ([`range_digests`]); [`stored_digest`]: the SHA-256
//!   an upload left with the file (`user.xfer.sha256`), which no cache evicts.
//! - [`dir_walk`]: a served directory's entries, streamed, with the validators a GET gives.
//! - [`tls`]: rustls server/client configurations (ring provider) and self-signed certificates.
//! - [`listing`]: directory listings (WebDAV PROPFIND, nginx JSON, xfer's manifest) read as
//!   untrusted input, and the names in them checked before they touch a local path.
//! - [`memory`]: one budget for the outgoing blocks of every stream of a server process.
//! - [`fault`]: a test-only hook that corrupts one byte after the digest was computed.
//! - [`path_mtu`]: the kernel's MTU for a connected socket's route.
//! - [`path_share`]: what one protocol's sender measured of a client's path, for the others.
//! - [`mechanisms`]: every speed mechanism, its default, needs and justification, and the one
//!   switch (`NAME=on|off`) for all of them.
//!
//! It opens no sockets and speaks no protocol.
//!
//! ```text
//!  request path ─► paths::resolve_under ─► Resource::open ─► ranges::parse_range
//!                                              │                    │
//!                          DigestCache::ensure ┘     Resource::stream(range) ─► Bytes blocks
//! ```
#![deny(unsafe_code)]

pub mod digest_cache;
pub mod dir_walk;
pub mod fault;
pub mod listing;
pub mod mechanisms;
pub mod memory;
pub mod metrics;
pub mod path_mtu;
pub mod path_share;
pub mod paths;
pub mod range_digests;
pub mod ranges;
pub mod resource;
pub mod secret;
pub mod sockbuf;
pub mod sockopt;
pub mod stored_digest;
pub mod synthetic;
#[allow(unsafe_code)]
mod sys;
pub mod tls;

pub use digest_cache::{DigestCache, DigestCacheConfig};
pub use fault::FaultInjection;
pub use memory::{
    BudgetAccount, BudgetBuf, BudgetError, BudgetStats, MemoryBudget, DEFAULT_MEMORY_BUDGET,
};
pub use paths::{resolve_target_under, resolve_under, PathError, Target, TargetKind};
pub use ranges::{content_range, parse_content_range, parse_range, RangeOutcome};
pub use resource::{
    BlockStream, ContentKey, ErrorClass, FileStamp, Resource, ResourceError, StreamOptions,
};
pub use synthetic::{SyntheticSpec, SYNTHETIC_PATH};
pub use tls::{ClientTlsOptions, SelfSigned, TlsError};
