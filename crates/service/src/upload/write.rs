//! What every upload path writes with: the settings and the body, where a file may be
//! written, the staging names, running file work off the request's task, and the answer for
//! a stored file. A leaf below the whole-file, parallel and resumable uploads.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use xfer_common::paths::{sanitize, PathError, STAGING_PREFIX};
use xfer_common::resource::ContentKey;
use xfer_common::Resource;
use xfer_core::digest::{Sha256Digest, Sha256Hasher};

use super::refusal::Refusal;
use crate::plan::ResponsePlan;
use crate::status;

/// Bytes written to disk at a time.
pub(crate) const WRITE_BLOCK: usize = 1 << 20;

/// Upload settings of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadConfig {
    /// A parallel upload with no request for this long is abandoned: its staging file and
    /// sidecar are removed. Default 24 h.
    pub expiry: Duration,
    /// Largest file accepted, bytes. Default 16 TiB.
    pub max_size: u64,
}

impl Default for UploadConfig {
    fn default() -> Self {
        Self {
            expiry: Duration::from_secs(24 * 3600),
            max_size: 16 << 40,
        }
    }
}

/// A request body, pulled piece by piece.
pub trait UploadBody: Send {
    /// The next piece; `None` at the end of the body.
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<io::Result<Bytes>>> + Send + '_>>;
}

/// The body of a request that has none.
pub struct NoBody;

impl UploadBody for NoBody {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<io::Result<Bytes>>> + Send + '_>> {
        Box::pin(async { None })
    }
}

/// Where an upload goes: its final path, and the directory it lies in (created as needed).
pub(crate) struct WriteTarget {
    pub(crate) path: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) name: String,
    pub(crate) existed: bool,
}

/// Resolve `request_path` for writing under `root`: missing parent directories are created,
/// none may be a symlink or a file, and the target may not be a directory or a symlink.
pub(crate) fn resolve_for_write(root: &Path, request_path: &str) -> Result<WriteTarget, Refusal> {
    let rel = sanitize(request_path).map_err(|e| match e {
        PathError::Traversal { .. } => {
            Refusal::new(status::FORBIDDEN, "forbidden\n", e.to_string())
        }
        // A staging name: no such thing as far as requests go.
        PathError::NotFound { .. } => Refusal::new(status::NOT_FOUND, "not found\n", e.to_string()),
        _ => Refusal::new(status::BAD_REQUEST, "bad request\n", e.to_string()),
    })?;
    let name = rel
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
        .ok_or_else(|| Refusal::new(status::BAD_REQUEST, "bad request\n", "no file name"))?;
    if name.starts_with(STAGING_PREFIX) {
        return Err(Refusal::new(
            status::FORBIDDEN,
            "forbidden\n",
            format!("{name}: names starting with {STAGING_PREFIX} are reserved"),
        ));
    }
    let mut dir = root.to_path_buf();
    for comp in rel.parent().map(Path::components).into_iter().flatten() {
        let Component::Normal(seg) = comp else {
            continue;
        };
        dir.push(seg);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(Refusal::new(
                    status::FORBIDDEN,
                    "forbidden\n",
                    format!("{} is a symbolic link", dir.display()),
                ))
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Refusal::new(
                    status::CONFLICT,
                    "a parent of this path is a file\n",
                    format!("{} is not a directory", dir.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    // Created meanwhile by another upload; check what it is.
                    let m = std::fs::symlink_metadata(&dir)
                        .map_err(|e| Refusal::io("checking", &dir, &e))?;
                    if !m.is_dir() {
                        return Err(Refusal::new(
                            status::CONFLICT,
                            "a parent of this path is a file\n",
                            format!("{} is not a directory", dir.display()),
                        ));
                    }
                }
                Err(e) => return Err(Refusal::io("creating directory", &dir, &e)),
            },
            Err(e) => return Err(Refusal::io("checking", &dir, &e)),
        }
    }
    let path = dir.join(&name);
    let existed = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(Refusal::new(
                status::FORBIDDEN,
                "forbidden\n",
                format!("{} is a symbolic link", path.display()),
            ))
        }
        Ok(m) if m.is_file() => true,
        Ok(_) => {
            return Err(Refusal::new(
                status::CONFLICT,
                "a directory (or other non-file) has this name\n",
                format!("{} is not a regular file", path.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(Refusal::io("checking", &path, &e)),
    };
    Ok(WriteTarget {
        path,
        dir,
        name,
        existed,
    })
}

pub(crate) fn digest_field(
    field: &Option<String>,
    which: &str,
) -> Result<Option<Sha256Digest>, Refusal> {
    match field {
        None => Ok(None),
        Some(v) => Sha256Digest::from_header_value(v).map_err(|e| {
            Refusal::new(
                status::BAD_REQUEST,
                "malformed digest field\n",
                format!("{which}: {e}"),
            )
        }),
    }
}

pub(crate) fn staging_name(id: &str, name: &str) -> String {
    format!("{STAGING_PREFIX}{id}.{name}")
}

pub(crate) async fn blocking<T: Send + 'static>(
    root: &Path,
    request_path: &str,
    f: fn(&Path, &str) -> Result<T, Refusal>,
) -> Result<T, Refusal> {
    let (root, path) = (root.to_path_buf(), request_path.to_string());
    off_runtime(move || f(&root, &path)).await
}

/// Run `work` as a task of its own and wait for it. A request's future is dropped when its
/// client goes away; work that changes an upload's state on disk and in memory must then
/// still run to its end. A panic there answers 500.
pub(crate) async fn to_completion<T: Send + 'static>(
    work: impl Future<Output = Result<T, Refusal>> + Send + 'static,
) -> Result<T, Refusal> {
    tokio::spawn(work).await.unwrap_or_else(|e| {
        Err(Refusal::new(
            status::INTERNAL_ERROR,
            "server error\n",
            format!("upload task failed: {e}"),
        ))
    })
}

/// Run file work on the blocking pool; a panic there answers 500.
pub(crate) async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Refusal> + Send + 'static,
) -> Result<T, Refusal> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(Refusal::new(
            status::INTERNAL_ERROR,
            "server error\n",
            format!("upload task failed: {e}"),
        ))
    })
}

/// The answer to a stored upload: 201 for a new file, 204 for a replaced one.
pub(crate) fn stored(existed: bool, digest: Sha256Digest) -> ResponsePlan {
    let mut plan = ResponsePlan::empty(if existed {
        status::NO_CONTENT
    } else {
        status::CREATED
    });
    plan.repr_digest = Some(digest);
    plan
}

/// The stored file as requests will find it, when the path still holds the very inode this
/// upload wrote: its verified digest can then be served as `Repr-Digest` at once, so a
/// client re-running the upload sees the file is there. Another upload that replaced it in
/// the meantime has another inode and is left to its own completion.
pub(crate) fn stored_resource(root: &Path, request_path: &str, file: &File) -> Option<Resource> {
    let ours = file.metadata().ok()?.ino();
    let resource = Resource::open(root, request_path, None).ok()?;
    matches!(resource.content_key(), ContentKey::File { ino, .. } if ino == ours)
        .then_some(resource)
}

pub(crate) fn hash_file(file: &File, size: u64) -> io::Result<Sha256Digest> {
    let mut h = Sha256Hasher::new();
    let mut buf = vec![0u8; WRITE_BLOCK];
    let mut off = 0u64;
    while off < size {
        let want = usize::try_from((size - off).min(WRITE_BLOCK as u64)).unwrap_or(WRITE_BLOCK);
        file.read_exact_at(&mut buf[..want], off)?;
        h.update(&buf[..want]);
        off += want as u64;
    }
    Ok(h.finish())
}
