//! Exit codes, documented in `docs/cli.md`:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | any other failure |
//! | 2 | bad command line or configuration (clap uses 2 as well) |
//! | 3 | the remote failed: network, TLS, HTTP status, protocol (retries exhausted or permanent) |
//! | 4 | verification failed: the whole-file SHA-256 differs from what was expected |
//! | 5 | local file problem: destination exists, disk full, unreadable journal, a link at a part file or journal |
//! | 6 | `xfer doctor`: something on this host limits the path (see its findings) |
//! | 7 | a tree with `--keep-going`: some paths failed (listed at the end), the rest are in place; a listing that failed as a whole is 3 |
//! | 130 | interrupted (Ctrl-C); run the same command again to resume |

use xfer::crates::core::put::PutError;
use xfer::{Error, GetError};

pub const FAILURE: u8 = 1;
pub const USAGE: u8 = 2;
pub const REMOTE: u8 = 3;
pub const VERIFY: u8 = 4;
pub const LOCAL: u8 = 5;
pub const LIMITED: u8 = 6;
pub const PARTIAL: u8 = 7;
pub const INTERRUPTED: u8 = 130;

/// The exit code for an error that reached the top.
pub fn code_for(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if let Some(g) = cause.downcast_ref::<GetError>() {
            return get_code(g);
        }
        if let Some(Error::Get(g)) = cause.downcast_ref::<Error>() {
            return get_code(g);
        }
        if let Some(Error::Transport(t)) = cause.downcast_ref::<Error>() {
            return if matches!(t, xfer::TransferError::Config(_)) {
                USAGE
            } else {
                REMOTE
            };
        }
        if let Some(p) = cause.downcast_ref::<PutError>() {
            return put_code(p);
        }
        if cause.downcast_ref::<UsageError>().is_some() {
            return USAGE;
        }
    }
    FAILURE
}

fn put_code(p: &PutError) -> u8 {
    match p {
        PutError::Local { .. } | PutError::Changed { .. } => LOCAL,
        // The server refused the whole file's digest: the bytes it assembled are not the file.
        PutError::Remote {
            source: xfer::TransferError::Status { status: 400, .. },
            ..
        } => VERIFY,
        PutError::Remote { .. } | PutError::Chunk { .. } => REMOTE,
        PutError::Plan(_) | PutError::Config(_) => USAGE,
        PutError::Interrupted => INTERRUPTED,
    }
}

fn get_code(g: &GetError) -> u8 {
    match g {
        // The server declared a digest other than the expected one: not the file asked for.
        GetError::Stat {
            source: xfer::TransferError::NotExpectedDigest { .. },
            ..
        } => VERIFY,
        GetError::Stat { .. }
        | GetError::Chunk { .. }
        | GetError::Schedule { .. }
        | GetError::ServerChecksum { .. } => REMOTE,
        GetError::WholeDigestMismatch { .. }
        | GetError::ChecksumMismatch { .. }
        | GetError::NoServerChecksum { .. }
        | GetError::Unverified { .. } => VERIFY,
        GetError::DestinationExists { .. }
        | GetError::DestinationNotAFile { .. }
        | GetError::StagingLink { .. }
        | GetError::Journal(_)
        | GetError::Io { .. }
        | GetError::ImplausibleSize { .. }
        | GetError::NoRoom { .. }
        | GetError::Write(_) => LOCAL,
        GetError::Plan(_) | GetError::Config(_) => USAGE,
        GetError::Interrupted => INTERRUPTED,
    }
}

/// A configuration mistake, reported with exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The error and its causes on one line: `fetching X: chunk 3: connection reset`.
pub fn describe(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let s = cause.to_string();
        // Skip causes whose text the previous one already includes.
        if parts.last().is_some_and(|p| p.contains(&s)) {
            continue;
        }
        parts.push(s);
    }
    parts.join(": ")
}
