//! Uploading a directory tree: `xfer put ./run-42/ https://host/incoming/run-42/`.
//!
//! Every regular file under the directory is uploaded as a single-file [`Upload`] to the URL
//! of its relative path, several at once over one transport whose connections they share
//! ([`Transport::sibling`]): HTTP/2 streams on the transport's connections, or kept-alive
//! HTTP/1.1 connections that one file's requests hand to the next. The files share one lane
//! budget (`PutConfig::lanes`, else the transport's default): a file takes one lane for its
//! existence check and one-request upload, a file of several chunks as many more as are free
//! (files of many chunks start first, while the lanes are free), so the connections open at
//! once never exceed the budget, whatever the number of files.
//!
//! A file the server already holds with the same size and SHA-256 (its `Repr-Digest`, which
//! an xfer server keeps with the file) is skipped, so a re-run after an interruption sends
//! only what is missing; a file interrupted half-way resumes its own chunks. Only a definite
//! answer means "send it": 404, another size or another digest. Any other failure of the
//! check (a 503, a 5xx, a broken connection) is retried with the upload's backoff and then
//! reported as the file's failure, never taken for "absent". Symbolic links are not followed
//! (a link could take the upload out of the directory) and are reported as skipped; empty
//! directories are not created on the server (there is no request for that).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use xfer_core::checksum::ChecksumAlgorithm;
use xfer_core::digest::Sha256Digest;
use xfer_core::put::{PutConfig, PutError, Upload};
use xfer_core::transport::{RemoteInfo, Transport};
use xfer_core::TransferError;

/// How a tree upload runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PutTreeConfig {
    /// Settings of every file's upload.
    pub put: PutConfig,
    /// Files uploaded at once. Default 8. Their lanes come out of one budget:
    /// `put.lanes`, else the transport's [`Transport::default_lanes`].
    pub max_files: usize,
}

impl Default for PutTreeConfig {
    fn default() -> Self {
        Self {
            put: PutConfig::default(),
            max_files: 8,
        }
    }
}

/// A file that could not be uploaded, and why.
#[derive(Debug, Clone, Serialize)]
pub struct FailedUpload {
    pub path: String,
    pub error: String,
    /// The exit code this failure alone would give (3 remote, 4 verification, 5 local).
    pub exit_code: u8,
}

/// What a tree upload did.
#[derive(Debug, Clone, Serialize)]
pub struct PutTreeReport {
    pub source: String,
    pub url: String,
    pub files: u64,
    pub uploaded: u64,
    /// Files the server already held, identical.
    pub skipped: u64,
    /// Symbolic links and other non-files left out.
    pub not_files: Vec<String>,
    pub bytes: u64,
    pub sent_bytes: u64,
    pub seconds: f64,
    pub goodput_bps: f64,
    pub failed: Vec<FailedUpload>,
}

/// Why a tree upload could not start.
#[derive(Debug, thiserror::Error)]
pub enum PutTreeError {
    #[error("reading {path}")]
    Walk {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: a name that is not UTF-8 cannot be put in a URL")]
    Name { path: PathBuf },
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// An upload of the directory `source` under `root_url` (which ends in `/`).
pub struct TreeUpload {
    transport: Arc<dyn Transport>,
    source: PathBuf,
    root_url: String,
    config: PutTreeConfig,
}

impl TreeUpload {
    pub fn new(
        transport: Arc<dyn Transport>,
        source: impl Into<PathBuf>,
        root_url: impl Into<String>,
        config: PutTreeConfig,
    ) -> Self {
        Self {
            transport,
            source: source.into(),
            root_url: root_url.into(),
            config,
        }
    }

    pub async fn run(self) -> Result<PutTreeReport, PutTreeError> {
        let started = Instant::now();
        if !self.root_url.ends_with('/') {
            return Err(PutTreeError::Config(format!(
                "a tree URL ends in `/`: {}",
                self.root_url
            )));
        }
        if self.config.max_files == 0 {
            return Err(PutTreeError::Config("max_files must be at least 1".into()));
        }
        let source = self.source.clone();
        let (files, not_files) = tokio::task::spawn_blocking(move || walk(&source))
            .await
            .map_err(|e| PutTreeError::Config(format!("walk task failed: {e}")))??;
        let mut report = PutTreeReport {
            source: self.source.display().to_string(),
            url: self.root_url.clone(),
            files: files.len() as u64,
            uploaded: 0,
            skipped: 0,
            not_files,
            bytes: 0,
            sent_bytes: 0,
            seconds: 0.0,
            goodput_bps: 0.0,
            failed: Vec::new(),
        };
        let budget = self
            .config
            .put
            .lanes
            .unwrap_or_else(|| self.transport.default_lanes())
            .max(1);
        let lanes = Arc::new(Semaphore::new(budget));
        // Files of many chunks first, while every lane is free for them: one started last
        // would find the lanes held by small files and run on one lane, alone at the end.
        let chunk_size = self.config.put.chunk_size.max(1);
        let mut files = files;
        files.sort_by_key(|(_, _, size)| std::cmp::Reverse(size.div_ceil(chunk_size)));
        let mut queue: VecDeque<(String, PathBuf)> = files
            .into_iter()
            .map(|(rel, path, _)| (rel, path))
            .collect();
        let mut running = JoinSet::new();
        loop {
            while running.len() < self.config.max_files {
                let Some((rel, path)) = queue.pop_front() else {
                    break;
                };
                let url = format!("{}{}", self.root_url, encode_path(&rel));
                let transport = Arc::clone(&self.transport);
                let put = self.config.put.clone();
                let lanes = Arc::clone(&lanes);
                running.spawn(async move {
                    let outcome = upload_one(transport, &path, &url, put, lanes).await;
                    (rel, outcome)
                });
            }
            let Some(done) = running.join_next().await else {
                break;
            };
            let (rel, outcome) =
                done.map_err(|e| PutTreeError::Config(format!("upload task failed: {e}")))?;
            match outcome {
                Ok(One::Skipped { size }) => {
                    report.skipped += 1;
                    report.bytes += size;
                }
                Ok(One::Uploaded { size, sent }) => {
                    report.uploaded += 1;
                    report.bytes += size;
                    report.sent_bytes += sent;
                }
                Err(e) => {
                    tracing::warn!(path = %rel, error = %e, "upload failed");
                    report.failed.push(FailedUpload {
                        path: rel,
                        error: xfer_core::error::error_chain(&e),
                        exit_code: exit_code_of(&e),
                    });
                }
            }
        }
        report.seconds = started.elapsed().as_secs_f64();
        if report.seconds > 0.0 {
            report.goodput_bps = report.sent_bytes as f64 * 8.0 / report.seconds;
        }
        Ok(report)
    }
}

enum One {
    Skipped { size: u64 },
    Uploaded { size: u64, sent: u64 },
}

async fn upload_one(
    root: Arc<dyn Transport>,
    path: &Path,
    url: &str,
    mut put: PutConfig,
    lanes: Arc<Semaphore>,
) -> Result<One, PutError> {
    let remote = |source| PutError::Remote {
        path: path.to_path_buf(),
        url: url.to_string(),
        source,
    };
    let transport = root.sibling(url).map_err(remote)?;
    let size = std::fs::metadata(path)
        .map_err(|source| PutError::Local {
            what: "reading",
            path: path.to_path_buf(),
            source,
        })?
        .len();
    let first = take_lane(&lanes).await?;
    if already_there(&*transport, path, url, size, &put).await? {
        return Ok(One::Skipped { size });
    }
    // A file of several chunks takes as many more lanes as are free now, up to one per chunk.
    let chunks = size.div_ceil(put.chunk_size.max(1)).max(1);
    let mut held: Vec<OwnedSemaphorePermit> = vec![first];
    while (held.len() as u64) < chunks {
        match Arc::clone(&lanes).try_acquire_owned() {
            Ok(p) => held.push(p),
            Err(_) => break,
        }
    }
    put.lanes = Some(held.len());
    let report = Upload::new(transport, path, url, put).run().await?;
    drop(held);
    Ok(One::Uploaded {
        size,
        sent: report.sent_bytes,
    })
}

async fn take_lane(lanes: &Arc<Semaphore>) -> Result<OwnedSemaphorePermit, PutError> {
    Arc::clone(lanes)
        .acquire_owned()
        .await
        .map_err(|_| PutError::Config("the lane budget was closed".into()))
}

/// Whether the server holds `path` already, byte for byte: the same size and SHA-256. Only a
/// definite answer counts; a failure to ask is retried as a chunk would be, then returned.
async fn already_there(
    transport: &dyn Transport,
    path: &Path,
    url: &str,
    size: u64,
    put: &PutConfig,
) -> Result<bool, PutError> {
    let remote = |source| PutError::Remote {
        path: path.to_path_buf(),
        url: url.to_string(),
        source,
    };
    let Some(info) = with_retries(put, || transport.stat())
        .await
        .map_err(remote)?
    else {
        return Ok(false);
    };
    if info.size != size {
        return Ok(false);
    }
    let theirs = match remote_sha256(transport, &info, put).await.map_err(remote)? {
        Some(d) => d,
        // Neither announced nor computable there (a server that keeps no digests): there
        // is no telling, so the file is sent.
        None => return Ok(false),
    };
    let p = path.to_path_buf();
    let ours = tokio::task::spawn_blocking(move || {
        std::fs::File::open(&p).and_then(Sha256Digest::of_reader)
    })
    .await
    .map_err(|e| PutError::Config(format!("hash task failed: {e}")))?
    .map_err(|source| PutError::Local {
        what: "hashing",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(ours == theirs)
}

/// The server's SHA-256 of the file: its `Repr-Digest`, else asked for with `Want-Digest`
/// (an xfer server computes it then; one that cannot answers nothing).
async fn remote_sha256(
    transport: &dyn Transport,
    info: &RemoteInfo,
    put: &PutConfig,
) -> Result<Option<Sha256Digest>, TransferError> {
    if let Some(d) = info.sha256 {
        return Ok(Some(d));
    }
    let asked = with_retries(put, || transport.checksum(ChecksumAlgorithm::Sha256)).await;
    Ok(asked?.flatten().and_then(|c| c.as_sha256()))
}

/// Run `ask` until it answers, retrying transient failures with the upload's backoff; a 404
/// is the answer "absent" (`None`).
async fn with_retries<T, F, Fut>(put: &PutConfig, mut ask: F) -> Result<Option<T>, TransferError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, TransferError>>,
{
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match ask().await {
            Ok(v) => return Ok(Some(v)),
            Err(TransferError::Status { status: 404, .. }) => return Ok(None),
            Err(e) if e.is_retryable() && attempt < put.max_attempts.max(1) => {
                let wait = xfer_core::put::backoff(put, attempt);
                tracing::warn!(error = %e, ?wait, attempt, "asking whether the server holds the file failed; asking again");
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn exit_code_of(e: &PutError) -> u8 {
    match e {
        PutError::Local { .. } | PutError::Changed { .. } => 5,
        PutError::Remote {
            source: xfer_core::TransferError::Status { status: 400, .. },
            ..
        } => 4,
        PutError::Plan(_) | PutError::Config(_) => 2,
        PutError::Interrupted => 130,
        PutError::Remote { .. } | PutError::Chunk { .. } => 3,
    }
}

/// A regular file found by [`walk`]: its relative path (joined by `/`), its path, its size
/// as the walk saw it (0 when it could not be read; the upload reads it again).
type Found = (String, PathBuf, u64);

/// Regular files under `root` (sorted by relative path), and what was left out. Links are
/// not followed.
fn walk(root: &Path) -> Result<(Vec<Found>, Vec<String>), PutTreeError> {
    let mut files = Vec::new();
    let mut not_files = Vec::new();
    let mut dirs = vec![(String::new(), root.to_path_buf())];
    while let Some((prefix, dir)) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| PutTreeError::Walk {
            path: dir.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| PutTreeError::Walk {
                path: dir.clone(),
                source,
            })?;
            let path = entry.path();
            let name = entry
                .file_name()
                .to_str()
                .map(str::to_string)
                .ok_or_else(|| PutTreeError::Name { path: path.clone() })?;
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let kind = entry.file_type().map_err(|source| PutTreeError::Walk {
                path: path.clone(),
                source,
            })?;
            if kind.is_dir() {
                dirs.push((rel, path));
            } else if kind.is_file() {
                let size = entry.metadata().map_or(0, |m| m.len());
                files.push((rel, path, size));
            } else {
                not_files.push(rel);
            }
        }
    }
    files.sort();
    not_files.sort();
    Ok((files, not_files))
}

/// Each segment percent-encoded (RFC 3986 unreserved characters kept), `/` between them.
fn encode_path(rel: &str) -> String {
    rel.split('/')
        .map(|seg| {
            seg.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_encoded_per_segment() {
        assert_eq!(encode_path("a b/c%d/é.h5"), "a%20b/c%25d/%C3%A9.h5");
    }
}
