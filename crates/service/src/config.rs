//! What the core serves and how: the one configuration every codec hands to [`crate::Service`].

use std::path::PathBuf;
use std::sync::Arc;

use xfer_common::{DigestCache, FaultInjection, StreamOptions};
use xfer_core::checksum::ChecksumAlgorithm;
use xfer_core::error::ConfigError;

use crate::access::AccessControl;
use crate::checksums::ChecksumCache;
use crate::tpc::Tpc;
use crate::upload::{UploadConfig, Uploads};

/// What the core serves and how.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Canonical directory whose regular files are served.
    pub root: PathBuf,
    /// Whole-resource digests, shared by every server of the process.
    pub digests: DigestCache,
    /// Send `Repr-Digest` (and compute it in the background). Default on.
    pub repr_digest: bool,
    /// Block size and read-ahead of streamed bodies: one policy for every codec.
    pub stream: StreamOptions,
    /// Test hook: corrupt a byte after the digest is computed. Never set in production.
    pub dangerous_fault: Option<Arc<FaultInjection>>,
    /// Who may read and write what. Default: anonymous reads, no writes.
    pub access: Arc<AccessControl>,
    /// Accept uploads (`PUT`) from callers with write access. Default off: `None`.
    pub uploads: Option<UploadConfig>,
    /// Parallel uploads in progress, shared by every codec.
    pub upload_state: Uploads,
    /// adler32 and MD5 computed for `Want-Digest`, shared by every codec.
    pub checksums: ChecksumCache,
    /// Checksums computed while a whole file is sent, unless already known, so that the
    /// `Want-Digest` FTS sends after a copy is answered without reading the file again.
    /// Default adler32 (about 4 times SHA-256's speed, docs/wlcg.md); empty turns it off. SHA-256 here is kept in
    /// [`ServiceConfig::digests`]. Synthetic resources are never hashed this way.
    pub checksums_on_send: Vec<ChecksumAlgorithm>,
    /// HTTP third-party copy (`COPY`). Default off: `None`.
    pub tpc: Option<Tpc>,
    /// Base URLs of mirrors that hold the same tree: each file's answer names its copy there
    /// (`Link: <base/path>; rel=duplicate`, RFC 6249), which clients may fetch from as well.
    /// Default none.
    pub mirrors: Vec<String>,
}

impl ServiceConfig {
    /// Serve `root` with a private digest cache and default streaming.
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            digests: DigestCache::default(),
            repr_digest: true,
            stream: StreamOptions::default(),
            dangerous_fault: None,
            access: Arc::new(AccessControl::anonymous(true)),
            uploads: None,
            upload_state: Uploads::default(),
            checksums: ChecksumCache::default(),
            checksums_on_send: vec![ChecksumAlgorithm::Adler32],
            tpc: None,
            mirrors: Vec::new(),
        }
    }
}

/// Reject streaming settings no server supports: blocks of 4 KiB to 64 MiB, at most 64 ahead.
pub fn check_stream_options(opts: &StreamOptions) -> Result<(), ConfigError> {
    if !(4096..=(64 << 20)).contains(&opts.block_size) {
        return Err(ConfigError::new(
            "stream.block_size",
            opts.block_size,
            "4 KiB to 64 MiB",
        ));
    }
    if opts.read_ahead > 64 {
        return Err(ConfigError::new(
            "stream.read_ahead",
            opts.read_ahead,
            "0 to 64",
        ));
    }
    Ok(())
}
