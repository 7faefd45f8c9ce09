//! A whole file sent as the body of one plain `PUT`, for a server that does not announce
//! xfer's parallel upload protocol (nginx's WebDAV module, XRootD, any object store): such a
//! server may ignore `Content-Range` and store a chunk as the whole file, so it never gets
//! one. The body streams from disk (bounded memory, any size, `Content-Length` declared);
//! the whole file's checksums are computed beside it, and compared with whatever the server
//! declares of what it stored: in the `PUT`'s answer, else in answer to a `HEAD` with
//! `Want-Digest`. A server that declares nothing is trusted for the bytes the TCP/TLS
//! stream delivered, unless the copy requires checksum verification: then it fails.

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xfer_core::checksum::{Checksum, ChecksumAlgorithm, Checksummer};
use xfer_core::progress::Progress;
use xfer_core::put::PutConfig;
use xfer_core::transport::{FileBody, Lane, Transport};
use xfer_core::Sha256Digest;
use xfer_service::tpc::{CopyFailed, CopyFailure};

/// How often the bytes sent so far are copied into the progress counters.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);
/// Bytes per read while hashing.
const HASH_PIECE: usize = 1 << 20;

/// What the plain `PUT` stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    pub bytes: u64,
    pub sha256: Sha256Digest,
    /// The algorithms the server declared and that matched.
    pub checked: Vec<ChecksumAlgorithm>,
}

/// Send `path` whole to the lane's target with one `PUT`; retried from the start (up to
/// `cfg.max_attempts`) after transient failures. `progress.verified` counts bytes sent and
/// never goes down; the remote acknowledges only the whole. With `require_checksum`, a
/// remote that declares no checksum of what it stored fails the copy.
pub(crate) async fn put_whole_file(
    transport: &dyn Transport,
    mut lane: Box<dyn Lane>,
    path: &Path,
    cfg: &PutConfig,
    progress: &Progress,
    require_checksum: bool,
    stop: impl Future<Output = ()>,
) -> Result<Stored, CopyFailure> {
    let local = |detail: String| CopyFailure::new(CopyFailed::Local, detail);
    let stopped = || CopyFailure::new(CopyFailed::Stopped, "stopped during a plain PUT");
    let file =
        std::fs::File::open(path).map_err(|e| local(format!("opening {}: {e}", path.display())))?;
    let meta = file
        .metadata()
        .map_err(|e| local(format!("reading the size of {}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(local(format!("{} is not a regular file", path.display())));
    }
    let (size, mtime) = (meta.len(), (meta.mtime(), meta.mtime_nsec()));
    let file = Arc::new(file);
    progress.advance_to(size, 0);
    let hashes = {
        let (file, path) = (Arc::clone(&file), path.to_path_buf());
        tokio::task::spawn_blocking(move || hash_file(&file, size, &path))
    };
    let body = FileBody {
        file,
        path: path.to_path_buf(),
        size,
        sent: Arc::new(AtomicU64::new(0)),
    };
    let report = |sent: u64| progress.advance_to(size, sent);
    tokio::pin!(stop);
    let mut attempt = 0;
    let declared = loop {
        attempt += 1;
        if let Some(limit) = cfg.rate_limit.as_ref() {
            // One request carries the whole file: the cap holds across files, not within one.
            tokio::select! {
                _ = limit.pace(size) => {}
                _ = &mut stop => return Err(stopped()),
            }
        }
        let put = lane.put_file(body.clone());
        tokio::pin!(put);
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        let result = loop {
            tokio::select! {
                r = &mut put => break r,
                _ = tick.tick() => report(body.sent.load(Ordering::Relaxed)),
                _ = &mut stop => return Err(stopped()),
            }
        };
        match result {
            Ok(declared) => break declared,
            Err(e) if e.is_retryable() && attempt < cfg.max_attempts => {
                let wait = cfg
                    .backoff_initial
                    .saturating_mul(1 << attempt.saturating_sub(1).min(10))
                    .min(cfg.backoff_max);
                tracing::warn!(error = %e, ?wait, attempt, "plain PUT failed; sending the file again");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = &mut stop => return Err(stopped()),
                }
            }
            Err(e) => return Err(crate::tpc::failure_of_transfer(&e)),
        }
    };
    report(size);
    let ours = hashes
        .await
        .map_err(|e| local(format!("hashing {}: {e}", path.display())))?
        .map_err(local)?;
    let now = std::fs::metadata(path).map_err(|e| local(format!("{}: {e}", path.display())))?;
    if now.len() != size || (now.mtime(), now.mtime_nsec()) != mtime {
        return Err(CopyFailure::new(
            CopyFailed::LocalChanged,
            format!(
                "{} changed while it was being sent; the remote copy is not it",
                path.display()
            ),
        ));
    }
    let declared = if declared.is_empty() {
        ask_checksums(transport).await
    } else {
        declared
    };
    let mut checked = Vec::new();
    for theirs in &declared {
        let Some(mine) = ours.iter().find(|c| c.algorithm == theirs.algorithm) else {
            continue;
        };
        if mine != theirs {
            return Err(CopyFailure::new(
                CopyFailed::ChecksumMismatch,
                format!(
                    "the remote stored a different file: its {} is {}, {} has {}",
                    theirs.algorithm.rfc3230_name(),
                    theirs.to_hex(),
                    path.display(),
                    mine.to_hex()
                ),
            ));
        }
        checked.push(theirs.algorithm);
    }
    if checked.is_empty() {
        tracing::info!(file = %path.display(), "the remote declared no checksum of the stored file");
        if require_checksum {
            return Err(CopyFailure::new(
                CopyFailed::NoChecksum,
                format!(
                    "the remote declared no checksum of {} as stored, and verification was required",
                    path.display()
                ),
            ));
        }
    }
    let sha256 = ours
        .iter()
        .find_map(Checksum::as_sha256)
        .ok_or_else(|| CopyFailure::new(CopyFailed::Other, "no SHA-256 computed"))?;
    Ok(Stored {
        bytes: size,
        sha256,
        checked,
    })
}

/// The remote's checksums of the stored file, asked with `Want-Digest` (XRootD answers
/// adler32, an xfer server any of them); none when it answers none or cannot be asked.
async fn ask_checksums(transport: &dyn Transport) -> Vec<Checksum> {
    let mut found = Vec::new();
    for alg in [ChecksumAlgorithm::Adler32, ChecksumAlgorithm::Sha256] {
        match transport.checksum(alg).await {
            Ok(Some(c)) => found.push(c),
            Ok(None) => {}
            Err(e) => {
                tracing::info!(error = %e, "cannot ask the remote for a checksum of what it stored");
                break;
            }
        }
    }
    found
}

/// SHA-256 and adler32 of the file's first `size` bytes: the two the field compares.
fn hash_file(file: &std::fs::File, size: u64, path: &Path) -> Result<Vec<Checksum>, String> {
    use std::os::unix::fs::FileExt;
    let mut sums = [
        Checksummer::new(ChecksumAlgorithm::Sha256),
        Checksummer::new(ChecksumAlgorithm::Adler32),
    ];
    let mut buf = vec![0u8; HASH_PIECE];
    let mut offset = 0u64;
    while offset < size {
        let want = (size - offset).min(HASH_PIECE as u64) as usize;
        let n = match file.read_at(&mut buf[..want], offset) {
            Ok(0) => return Err(format!("{} ended at byte {offset}", path.display())),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        for s in &mut sums {
            s.update(&buf[..n]);
        }
        offset += n as u64;
    }
    Ok(sums.into_iter().map(Checksummer::finish).collect())
}
