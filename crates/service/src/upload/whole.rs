//! A plain `PUT`: the whole file in one body, written to a staging file, hashed as it
//! arrives, verified and renamed into place.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use xfer_common::{stored_digest, DigestCache};
use xfer_core::digest::{Sha256Digest, Sha256Hasher};

use super::place::{commit, Replace};
use super::refusal::Refusal;
use super::staging_files::{self, check_room};
use super::write::{
    blocking, digest_field, off_runtime, resolve_for_write, staging_name, stored, stored_resource,
    UploadBody, UploadConfig, WRITE_BLOCK,
};
use crate::plan::ResponsePlan;
use crate::request::UploadHead;
use crate::status;

/// Write the body at `offset`, hashing it: exactly `exact` bytes when given, never more than
/// `max`. Returns the digest and the byte count.
pub(crate) async fn receive(
    file: Option<File>,
    path: &Path,
    offset: u64,
    exact: Option<u64>,
    max: u64,
    body: &mut dyn UploadBody,
) -> Result<(Sha256Digest, u64), Refusal> {
    let file = file.map(Arc::new);
    let mut hasher = Sha256Hasher::new();
    let mut written = 0u64;
    let mut pending: Vec<Bytes> = Vec::new();
    let mut pending_len = 0usize;
    loop {
        let next = body.next_chunk().await;
        let done = match next {
            Some(Ok(b)) => {
                written += b.len() as u64;
                if exact.is_some_and(|l| written > l) {
                    return Err(Refusal::new(
                        status::BAD_REQUEST,
                        "more bytes than announced\n",
                        format!("{} after {written} bytes", path.display()),
                    ));
                }
                if written > max {
                    return Err(Refusal::new(
                        status::PAYLOAD_TOO_LARGE,
                        "file too large for this server\n",
                        format!("{} over {max} bytes", path.display()),
                    ));
                }
                pending_len += b.len();
                pending.push(b);
                false
            }
            Some(Err(e)) => {
                return Err(Refusal::new(
                    status::BAD_REQUEST,
                    "the request body failed\n",
                    format!("{}: {e}", path.display()),
                ))
            }
            None => true,
        };
        if pending_len >= WRITE_BLOCK || (done && pending_len > 0) {
            let at = offset + written - pending_len as u64;
            let batch = std::mem::take(&mut pending);
            pending_len = 0;
            let f = file.clone();
            let (h, res) = tokio::task::spawn_blocking(move || {
                let mut h = hasher;
                let mut pos = at;
                for b in &batch {
                    h.update(b);
                    if let Some(f) = &f {
                        if let Err(e) = f.write_all_at(b, pos) {
                            return (h, Err(e));
                        }
                    }
                    pos += b.len() as u64;
                }
                (h, Ok(()))
            })
            .await
            .map_err(|e| Refusal::new(status::INTERNAL_ERROR, "server error\n", e.to_string()))?;
            hasher = h;
            res.map_err(|e| Refusal::io("writing", path, &e))?;
        }
        if done {
            break;
        }
    }
    if let Some(l) = exact {
        if written != l {
            return Err(Refusal::new(
                status::BAD_REQUEST,
                "fewer bytes than announced\n",
                format!("{}: {written} of {l} bytes", path.display()),
            ));
        }
    }
    Ok((hasher.finish(), written))
}

/// A plain `PUT`: the whole file in one body, verified against `Content-Digest` or
/// `Repr-Digest` when the client sent one, renamed into place when complete.
pub(crate) async fn whole(
    root: &Path,
    digests: &DigestCache,
    cfg: &UploadConfig,
    request_path: &str,
    head: &UploadHead,
    replace: Replace,
    body: &mut dyn UploadBody,
) -> Result<ResponsePlan, Refusal> {
    if head.content_length.is_some_and(|n| n > cfg.max_size) {
        return Err(Refusal::new(
            status::PAYLOAD_TOO_LARGE,
            "file too large for this server\n",
            format!("Content-Length over the limit of {} bytes", cfg.max_size),
        ));
    }
    // For a whole body, Content-Digest and Repr-Digest describe the same bytes.
    let expected = match digest_field(&head.content_digest, "Content-Digest")? {
        Some(d) => Some(d),
        None => digest_field(&head.repr_digest, "Repr-Digest")?,
    };
    let target = blocking(root, request_path, resolve_for_write).await?;
    if let Some(n) = head.content_length {
        check_room(&target.dir, n)?;
    }
    let staging = target.dir.join(staging_name(&unique_id(), &target.name));
    let file = {
        let s = staging.clone();
        off_runtime(move || {
            staging_files::create_new(&s).map_err(|e| Refusal::io("creating", &s, &e))
        })
        .await?
    };
    // Removed on every way out but a stored file, the client going away included (the
    // request's future is then dropped mid-body).
    let mut guard = StagingGuard(Some(staging.clone()));
    let keep = file
        .try_clone()
        .map_err(|e| Refusal::io("opening", &staging, &e))?;
    let outcome = async {
        let (actual, n) = receive(
            Some(file),
            &staging,
            0,
            head.content_length,
            cfg.max_size,
            body,
        )
        .await?;
        if let Some(expected) = expected {
            if expected != actual {
                return Err(Refusal::new(
                    status::BAD_REQUEST,
                    "the body's SHA-256 differs from the declared digest; nothing was stored\n",
                    format!(
                        "{}: got {actual}, declared {expected}",
                        target.path.display()
                    ),
                ));
            }
        }
        let (s, t) = (staging.clone(), target.path.clone());
        let (r, path) = (root.to_path_buf(), request_path.to_string());
        let stored_file = off_runtime(move || {
            stored_digest::keep(&keep, actual, &s);
            commit(&keep, &s, &t, replace)?;
            Ok(stored_resource(&r, &path, &keep))
        })
        .await?;
        if let Some(resource) = stored_file {
            digests.insert(&resource, actual);
        }
        Ok((actual, n))
    }
    .await;
    let (digest, n) = outcome?;
    guard.0 = None;
    tracing::info!(path = %target.path.display(), size = n, sha256 = %digest, "upload complete");
    Ok(stored(target.existed, digest))
}

/// A plain PUT's staging file, removed when dropped unless it was renamed into place.
pub(crate) struct StagingGuard(Option<PathBuf>);

impl Drop for StagingGuard {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "removing a failed upload's staging file");
            }
        }
    }
}

/// A name for a plain PUT's staging file, unique within this process and across restarts.
pub(crate) fn unique_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "put-{nanos:x}-{:x}-{:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
