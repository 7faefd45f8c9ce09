//! Mapping a request path onto a file under a served root, refusing anything that could escape it.
//!
//! The request path is the path part of a URL (no query), as a peer sent it. It is decoded once
//! (`%2e%2e` is `..`), split on `/` *and* `\` (so `..\..` is caught even though Linux would read
//! it as a file name), and every segment is checked before touching the disk. The result is then
//! canonicalized and must still lie inside the canonical root, which catches symlinks that lead
//! out. Only regular files are served; [`resolve_target_under`] also resolves directories, for
//! listings.
//!
//! What this does not do: it cannot stop a process with write access to the root from swapping
//! a path component for a symlink between this check and the `open`; [`crate::resource`]
//! re-checks the opened descriptor's real path on Linux for that.

use std::path::{Component, Path, PathBuf};

use percent_encoding::percent_decode_str;

/// Why a request path was refused.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// Not a usable path at all (NUL byte, not UTF-8 after decoding, not starting with `/`).
    #[error("malformed request path {path:?}: {reason}")]
    Malformed { path: String, reason: &'static str },
    /// A `..` segment, an absolute path after decoding, or a drive prefix: an attempt to name
    /// something outside the root.
    #[error("request path {path:?} tries to leave the served root: {reason}")]
    Traversal { path: String, reason: &'static str },
    /// The path resolves (through a symlink) to a place outside the root.
    #[error("request path {path:?} resolves outside the served root")]
    OutsideRoot { path: String },
    /// Nothing there.
    #[error("no file at {path:?}")]
    NotFound { path: String },
    /// A directory, socket, device or FIFO: only regular files are served.
    #[error("{path:?} is not a regular file")]
    NotAFile { path: String },
    /// The served root itself cannot be used.
    #[error("served root {root} is unusable")]
    Root {
        root: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Some other I/O failure while resolving (permission denied, loop of symlinks...).
    #[error("cannot resolve {path:?}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl PathError {
    /// The request itself is unusable (HTTP 400).
    pub fn is_bad_request(&self) -> bool {
        matches!(self, Self::Malformed { .. })
    }

    /// The request names something it may not have (HTTP 403).
    pub fn is_forbidden(&self) -> bool {
        match self {
            Self::Traversal { .. } | Self::OutsideRoot { .. } => true,
            Self::Io { source, .. } => source.kind() == std::io::ErrorKind::PermissionDenied,
            _ => false,
        }
    }

    /// Nothing servable there (HTTP 404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. } | Self::NotAFile { .. })
    }
}

/// Resolve `request_path` (e.g. `/data/a%20b.bin`) to a canonical path of a regular file inside
/// `root`. See the module docs for what is refused.
pub fn resolve_under(root: &Path, request_path: &str) -> Result<PathBuf, PathError> {
    let target = resolve_target_under(root, request_path)?;
    if target.kind != TargetKind::File {
        return Err(PathError::NotAFile {
            path: request_path.to_string(),
        });
    }
    Ok(target.canonical)
}

/// What a request path names: a regular file or a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    File,
    Directory,
}

/// A request path resolved under the root, with the same checks as [`resolve_under`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: TargetKind,
    /// Canonical path on disk, inside the canonical root.
    pub canonical: PathBuf,
    /// The canonical root it lies in.
    pub root: PathBuf,
    /// The decoded path relative to the root, segments joined by `/` (empty for the root).
    pub relative: String,
}

/// Resolve `request_path` to a regular file or a directory inside `root` (the root itself is
/// `/`). Everything [`resolve_under`] refuses is refused here too; sockets, devices and FIFOs
/// are [`PathError::NotAFile`].
pub fn resolve_target_under(root: &Path, request_path: &str) -> Result<Target, PathError> {
    let relative = sanitize_relative(request_path)?;
    let canonical_root = root.canonicalize().map_err(|source| PathError::Root {
        root: root.to_path_buf(),
        source,
    })?;
    let joined = canonical_root.join(&relative);
    let canonical = joined.canonicalize().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            PathError::NotFound {
                path: request_path.to_string(),
            }
        } else {
            PathError::Io {
                path: request_path.to_string(),
                source,
            }
        }
    })?;
    if !canonical.starts_with(&canonical_root) {
        return Err(PathError::OutsideRoot {
            path: request_path.to_string(),
        });
    }
    let meta = std::fs::metadata(&canonical).map_err(|source| PathError::Io {
        path: request_path.to_string(),
        source,
    })?;
    let kind = if meta.is_file() {
        TargetKind::File
    } else if meta.is_dir() {
        TargetKind::Directory
    } else {
        return Err(PathError::NotAFile {
            path: request_path.to_string(),
        });
    };
    // `sanitize_relative` only pushes segments of a UTF-8 string, so this is lossless.
    let relative = relative
        .iter()
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    Ok(Target {
        kind,
        canonical,
        root: canonical_root,
        relative,
    })
}

/// Decode and check the request path without touching the disk; returns the path relative to
/// the root (never empty, never absolute, no `.`/`..` components).
pub fn sanitize(request_path: &str) -> Result<PathBuf, PathError> {
    let out = sanitize_relative(request_path)?;
    if out.as_os_str().is_empty() {
        return Err(PathError::NotAFile {
            path: request_path.to_string(),
        });
    }
    Ok(out)
}

/// Names starting with this are uploads in progress (`xfer_service::upload`): never served,
/// listed or written to by a request.
pub const STAGING_PREFIX: &str = ".xfer-upload.";

/// A tree download's private staging directory (part files and journals of `xfer get` of a
/// tree, at the top of its destination). Never served or listed either, so that a former
/// destination served in its turn does not offer half-fetched files (which the client would
/// refuse as a reserved name).
pub const TREE_STAGING_DIR: &str = ".xfer-staging";

/// [`sanitize`], but the root itself (`/`) is allowed and comes back empty.
pub fn sanitize_relative(request_path: &str) -> Result<PathBuf, PathError> {
    let malformed = |reason| PathError::Malformed {
        path: request_path.to_string(),
        reason,
    };
    let traversal = |reason| PathError::Traversal {
        path: request_path.to_string(),
        reason,
    };
    let Some(rest) = request_path.strip_prefix('/') else {
        return Err(malformed("does not start with '/'"));
    };
    let decoded = percent_decode_str(rest)
        .decode_utf8()
        .map_err(|_| malformed("not UTF-8 after percent-decoding"))?;
    if decoded.contains('\0') {
        return Err(malformed("contains a NUL byte"));
    }
    // `//etc/passwd` and `/%2fetc/passwd` decode to an absolute path; joining that onto the root
    // would replace the root.
    if decoded.starts_with('/') || decoded.starts_with('\\') {
        return Err(traversal("absolute path"));
    }
    let mut out = PathBuf::new();
    for (i, segment) in decoded.split(['/', '\\']).enumerate() {
        match segment {
            "" | "." => continue,
            ".." => return Err(traversal("'..' segment")),
            // An upload in progress, or a tree download's staging, does not exist for requests.
            s if s.starts_with(STAGING_PREFIX) || s == TREE_STAGING_DIR => {
                return Err(PathError::NotFound {
                    path: request_path.to_string(),
                })
            }
            _ => {}
        }
        if i == 0 && is_drive_prefix(segment) {
            return Err(traversal("drive prefix"));
        }
        // Belt and braces: whatever the platform's parser makes of the segment must be a plain
        // name.
        let mut components = Path::new(segment).components();
        match (components.next(), components.next()) {
            (Some(Component::Normal(_)), None) => out.push(segment),
            _ => return Err(traversal("segment is not a plain name")),
        }
    }
    Ok(out)
}

fn is_drive_prefix(segment: &str) -> bool {
    let b = segment.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with_file() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/a.bin"), b"abc").expect("write");
        std::fs::write(dir.path().join("space name.txt"), b"x").expect("write");
        dir
    }

    #[test]
    fn plain_and_encoded_names_resolve() {
        let dir = root_with_file();
        let p = resolve_under(dir.path(), "/sub/a.bin").expect("resolves");
        assert!(p.ends_with("sub/a.bin"));
        let p = resolve_under(dir.path(), "/space%20name.txt").expect("resolves");
        assert!(p.ends_with("space name.txt"));
        // An encoded slash is just a separator once decoded; it stays inside the root.
        let p = resolve_under(dir.path(), "/sub%2fa.bin").expect("resolves");
        assert!(p.ends_with("sub/a.bin"));
        assert!(resolve_under(dir.path(), "/./sub//a.bin").is_ok());
    }

    #[test]
    fn dot_dot_in_every_spelling_is_refused() {
        let dir = root_with_file();
        for p in [
            "/../etc/passwd",
            "/sub/../../etc/passwd",
            "/sub/..",
            "/%2e%2e/etc/passwd",
            "/%2E%2E/etc/passwd",
            "/.%2e/x",
            "/sub%2f..%2f..%2fetc%2fpasswd",
            "/..\\..\\etc\\passwd",
            "/sub%5c..%5c..%5cetc",
        ] {
            let err = resolve_under(dir.path(), p).expect_err(p);
            assert!(err.is_forbidden(), "{p}: {err}");
        }
    }

    #[test]
    fn absolute_and_drive_prefixes_are_refused() {
        let dir = root_with_file();
        for p in [
            "//etc/passwd",
            "/%2fetc/passwd",
            "/%5cetc",
            "/C:/x",
            "/c:%5cx",
        ] {
            let err = resolve_under(dir.path(), p).expect_err(p);
            assert!(err.is_forbidden(), "{p}: {err}");
        }
    }

    #[test]
    fn malformed_paths_are_bad_requests() {
        let dir = root_with_file();
        for p in ["sub/a.bin", "/a%00b", "/%ff%fe", ""] {
            let err = resolve_under(dir.path(), p).expect_err(p);
            assert!(err.is_bad_request(), "{p}: {err}");
        }
    }

    #[test]
    fn directories_and_missing_files_are_not_found() {
        let dir = root_with_file();
        for p in ["/", "/sub", "/sub/", "/nope.bin"] {
            let err = resolve_under(dir.path(), p).expect_err(p);
            assert!(err.is_not_found(), "{p}: {err}");
        }
    }

    #[test]
    fn directories_resolve_as_targets() {
        let dir = root_with_file();
        let root = resolve_target_under(dir.path(), "/").expect("root");
        assert_eq!(root.kind, TargetKind::Directory);
        assert_eq!(root.relative, "");
        let sub = resolve_target_under(dir.path(), "/sub/").expect("sub");
        assert_eq!(sub.kind, TargetKind::Directory);
        assert_eq!(sub.relative, "sub");
        let file = resolve_target_under(dir.path(), "/space%20name.txt").expect("file");
        assert_eq!(file.kind, TargetKind::File);
        assert_eq!(file.relative, "space name.txt");
        let err = resolve_target_under(dir.path(), "/sub/../..").expect_err("traversal");
        assert!(err.is_forbidden(), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn symlink_out_of_the_root_is_refused() {
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("secret"), b"secret").expect("write");
        let dir = root_with_file();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link"))
            .expect("symlink");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("dirlink")).expect("symlink");
        // A symlink that stays inside is fine.
        std::os::unix::fs::symlink(dir.path().join("sub/a.bin"), dir.path().join("inner"))
            .expect("symlink");
        for p in ["/link", "/dirlink/secret"] {
            let err = resolve_under(dir.path(), p).expect_err(p);
            assert!(matches!(err, PathError::OutsideRoot { .. }), "{p}: {err}");
        }
        assert!(resolve_under(dir.path(), "/inner").is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn fifo_is_not_a_file() {
        let dir = root_with_file();
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .expect("mkfifo");
        let err = resolve_under(dir.path(), "/fifo").expect_err("fifo");
        assert!(matches!(err, PathError::NotAFile { .. }), "{err}");
    }
}
