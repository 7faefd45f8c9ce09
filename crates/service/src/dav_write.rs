//! The WebDAV requests that change the tree besides uploads, as grid orchestrators use them:
//! `DELETE` (Rucio's reaper, `gfal-rm`), `MKCOL` (`gfal-mkdir`, one level per request) and
//! `MOVE` (`gfal-rename`). Served only when uploads are on, like every other write.
//!
//! Paths are checked as uploads check them ([`sanitize`]: no `..`, no staging names), then
//! walked from the root one directory at a time with `O_NOFOLLOW` descriptors, and the last
//! name is acted on relative to its directory's descriptor (`unlinkat`, `mkdirat`,
//! `renameat`). A symlink anywhere on the way, or as the name itself, is refused: nothing here
//! follows a link, so nothing can reach outside the root, and a link swapped in after the walk
//! is not followed either. The root itself is never deleted, created or moved.
//!
//! Directories are removed only when empty (a recursive `DELETE` would make one request
//! remove a whole tree that a client may not be able to list; `gfal-rm -r` deletes member by
//! member). Names of uploads in progress (`.xfer-upload.*`) are reserved: never a source, a
//! destination or a deletion.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, CWD};
use rustix::io::Errno;
use xfer_common::paths::{sanitize, PathError, STAGING_PREFIX};

use crate::access::Operation;
use crate::config::ServiceConfig;
use crate::plan::ResponsePlan;
use crate::request::Request;
use crate::status;
use crate::upload::{off_runtime, Refusal, UploadBody};

/// What a tree change needs from the caller's scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Makes something new and touches nothing that exists: `MKCOL`.
    Create,
    /// Removes or replaces what exists: `DELETE`, and `MOVE` (on its source and on its
    /// destination).
    Modify,
}

/// The access-control operation a change is checked against.
pub(crate) fn operation(change: Change) -> Operation {
    match change {
        Change::Create => Operation::Create,
        Change::Modify => Operation::Modify,
    }
}

/// `DELETE` of a file (204) or an empty directory (204).
pub(crate) async fn delete(cfg: &ServiceConfig, req: &Request) -> ResponsePlan {
    let (root, path) = (cfg.root.clone(), req.path.clone());
    let result = off_runtime(move || {
        let rel = relative(&path)?;
        let parent = open_parent(&root, &rel, status::NOT_FOUND)?;
        match kind(&parent)? {
            None => Err(not_found(&parent)),
            Some(FileType::Directory) => {
                rustix::fs::unlinkat(&parent.fd, &parent.name, AtFlags::REMOVEDIR)
                    .map_err(|e| changed_meanwhile("removing directory", &parent, e))?;
                Ok(None)
            }
            Some(FileType::RegularFile) => {
                rustix::fs::unlinkat(&parent.fd, &parent.name, AtFlags::empty())
                    .map_err(|e| changed_meanwhile("removing", &parent, e))?;
                Ok(Some(parent.path()))
            }
            Some(other) => Err(not_a_file_or_directory(&parent, other)),
        }
    })
    .await;
    match result {
        Ok(removed) => {
            if let Some(path) = removed {
                forget(cfg, &path);
            }
            ResponsePlan::empty(status::NO_CONTENT)
        }
        Err(r) => r.plan(),
    }
}

/// `MKCOL` (RFC 4918 §9.3): one directory, whose parent must exist (409 otherwise); 405 when
/// the name is taken; 415 when the request has a body, which would describe members this
/// server does not create.
pub(crate) async fn mkcol(
    cfg: &ServiceConfig,
    req: &Request,
    body: &mut dyn UploadBody,
    allow: &'static str,
) -> ResponsePlan {
    if let Err(r) = no_body(req, body).await {
        return r.plan();
    }
    let (root, path) = (cfg.root.clone(), req.path.clone());
    let result = off_runtime(move || {
        let rel = relative(&path)?;
        let parent = open_parent(&root, &rel, status::CONFLICT)?;
        // The process umask narrows this, as for directories uploads create.
        match rustix::fs::mkdirat(&parent.fd, &parent.name, Mode::from_raw_mode(0o777)) {
            Ok(()) => Ok(()),
            Err(Errno::EXIST) => Err(Refusal::new(
                status::METHOD_NOT_ALLOWED,
                "something already has this name\n",
                format!("{} exists", parent.path().display()),
            )),
            Err(e) => Err(Refusal::io("creating directory", &parent.path(), &e.into())),
        }
    })
    .await;
    match result {
        Ok(()) => ResponsePlan::empty(status::CREATED),
        Err(r) => {
            let mut plan = r.plan();
            if plan.status == status::METHOD_NOT_ALLOWED {
                plan.allow = Some(allow);
            }
            plan
        }
    }
}

/// `MOVE` (RFC 4918 §9.9) within the root: one `renameat`, so readers see the old name or the
/// new one. 201 when the destination was free, 204 when it was replaced (`Overwrite: T`, the
/// default), 412 when it exists and `Overwrite: F`. `may_modify` checks the caller's scope on
/// the destination path (the source was checked like any request path).
pub(crate) async fn mv<F>(
    cfg: &ServiceConfig,
    req: &Request,
    may_modify: impl FnOnce(String) -> F,
) -> ResponsePlan
where
    F: std::future::Future<Output = Result<(), ResponsePlan>>,
{
    let target = match destination(req) {
        Ok(t) => t,
        Err(r) => return r.plan(),
    };
    if let Err(plan) = may_modify(target.path.clone()).await {
        return plan;
    }
    let (root, src_path) = (cfg.root.clone(), req.path.clone());
    let result = off_runtime(move || {
        let src_rel = relative(&src_path)?;
        let dst_rel = relative(&target.path)?;
        if src_rel == dst_rel {
            return Err(Refusal::new(
                status::FORBIDDEN,
                "source and destination are the same\n",
                format!("MOVE of /{} onto itself", src_rel.display()),
            ));
        }
        let src = open_parent(&root, &src_rel, status::NOT_FOUND)?;
        match kind(&src)? {
            None => return Err(not_found(&src)),
            Some(FileType::RegularFile | FileType::Directory) => {}
            Some(other) => return Err(not_a_file_or_directory(&src, other)),
        }
        let dst = open_parent(&root, &dst_rel, status::CONFLICT)?;
        let existed = match kind(&dst)? {
            None => false,
            Some(_) if !target.overwrite => {
                return Err(Refusal::new(
                    status::PRECONDITION_FAILED,
                    "the destination exists and Overwrite is F\n",
                    format!("{} exists", dst.path().display()),
                ))
            }
            Some(FileType::RegularFile | FileType::Directory) => true,
            Some(other) => return Err(not_a_file_or_directory(&dst, other)),
        };
        // Without overwrite, the kernel refuses a destination created since the check.
        let flags = if target.overwrite {
            RenameFlags::empty()
        } else {
            RenameFlags::NOREPLACE
        };
        rustix::fs::renameat_with(&src.fd, &src.name, &dst.fd, &dst.name, flags).map_err(|e| {
            match e {
                Errno::EXIST if !target.overwrite => Refusal::new(
                    status::PRECONDITION_FAILED,
                    "the destination exists and Overwrite is F\n",
                    format!("{} exists", dst.path().display()),
                ),
                // A directory onto a file or a non-empty directory, a file onto a directory,
                // a directory into itself: the tree does not allow it as it is.
                Errno::NOTEMPTY | Errno::EXIST | Errno::ISDIR | Errno::NOTDIR | Errno::INVAL => {
                    Refusal::new(
                        status::CONFLICT,
                        "the destination cannot take the source as it is\n",
                        format!(
                            "renaming {} to {}: {}",
                            src.path().display(),
                            dst.path().display(),
                            std::io::Error::from(e)
                        ),
                    )
                }
                e => Refusal::io("renaming", &src.path(), &e.into()),
            }
        })?;
        Ok((src.path(), dst.path(), existed))
    })
    .await;
    match result {
        Ok((from, to, existed)) => {
            forget(cfg, &from);
            if existed {
                forget(cfg, &to);
            }
            ResponsePlan::empty(if existed {
                status::NO_CONTENT
            } else {
                status::CREATED
            })
        }
        Err(r) => r.plan(),
    }
}

/// Digests and checksums remembered for a name that no longer holds that content.
fn forget(cfg: &ServiceConfig, path: &Path) {
    let canonical = cfg
        .root
        .canonicalize()
        .map(|root| root.join(path.strip_prefix(&cfg.root).unwrap_or(path)))
        .unwrap_or_else(|_| path.to_path_buf());
    cfg.digests.forget_path(&canonical);
    cfg.checksums.forget_path(&canonical);
}

/// A `MOVE`'s destination: a path on this server, still percent-encoded, and whether it may
/// be replaced.
struct Target {
    path: String,
    overwrite: bool,
}

fn destination(req: &Request) -> Result<Target, Refusal> {
    let overwrite = match req.copy.overwrite.as_deref() {
        None => true,
        Some(v) if v.eq_ignore_ascii_case("T") => true,
        Some(v) if v.eq_ignore_ascii_case("F") => false,
        Some(v) => {
            return Err(Refusal::new(
                status::BAD_REQUEST,
                "Overwrite must be T or F\n",
                format!("Overwrite: {v:?}"),
            ))
        }
    };
    let Some(value) = req.copy.destination.as_deref() else {
        return Err(Refusal::new(
            status::BAD_REQUEST,
            "MOVE needs a Destination header\n",
            "MOVE without Destination",
        ));
    };
    let path = destination_path(value, req.authority.as_deref())?;
    Ok(Target { path, overwrite })
}

/// The path a `Destination` names (RFC 4918 §10.3): an absolute URL on this server, or an
/// absolute path. The path is taken as sent, not as the URL parser normalises it, so a `..`
/// in any spelling is refused like in a request path rather than silently resolved.
pub(crate) fn destination_path(value: &str, authority: Option<&str>) -> Result<String, Refusal> {
    let raw = if value.starts_with('/') {
        value
    } else {
        let url = url::Url::parse(value).map_err(|e| {
            Refusal::new(
                status::BAD_REQUEST,
                "Destination is not a URL or a path\n",
                format!("Destination {value:?}: {e}"),
            )
        })?;
        if !same_server(&url, authority) {
            // RFC 4918 §9.9.4: a destination on another server this one will not write to.
            return Err(Refusal::new(
                status::BAD_GATEWAY,
                "Destination is on another server\n",
                format!(
                    "Destination {} is not {}",
                    url.origin().ascii_serialization(),
                    authority.unwrap_or("(no Host)")
                ),
            ));
        }
        // After `scheme://authority`, the path as sent (the parser accepted the authority).
        let after = value.split_once("://").map_or("", |(_, rest)| rest);
        after.find('/').map_or("/", |i| &after[i..])
    };
    let end = raw.find(['?', '#']).unwrap_or(raw.len());
    Ok(raw[..end].to_string())
}

/// Whether `url` names the scheme-default or explicit port and the host the request came to.
fn same_server(url: &url::Url, authority: Option<&str>) -> bool {
    let default_port = match url.scheme() {
        "https" | "davs" => 443,
        "http" | "dav" => 80,
        _ => return false,
    };
    let Some(authority) = authority else {
        return false;
    };
    let Ok(ours) = url::Url::parse(&format!("{}://{authority}/", url.scheme())) else {
        return false;
    };
    let host = |u: &url::Url| u.host_str().map(str::to_ascii_lowercase);
    host(url).is_some()
        && host(url) == host(&ours)
        && url.port().unwrap_or(default_port) == ours.port().unwrap_or(default_port)
}

/// 415 for a body (RFC 4918 §9.3.1). A declared length is refused before anything is read;
/// a body of unknown length is looked at for its first bytes.
async fn no_body(req: &Request, body: &mut dyn UploadBody) -> Result<(), Refusal> {
    let refuse = || {
        Refusal::new(
            status::UNSUPPORTED_MEDIA_TYPE,
            "MKCOL takes no body here\n",
            "MKCOL with a body",
        )
    };
    match req.upload.content_length {
        Some(0) => return Ok(()),
        Some(_) => return Err(refuse()),
        None => {}
    }
    while let Some(piece) = body.next_chunk().await {
        match piece {
            Ok(bytes) if bytes.is_empty() => continue,
            Ok(_) => return Err(refuse()),
            Err(e) => {
                return Err(Refusal::new(
                    status::BAD_REQUEST,
                    "the request body could not be read\n",
                    format!("MKCOL body: {e}"),
                ))
            }
        }
    }
    Ok(())
}

/// The request path relative to the root; the root itself and reserved names are refused.
fn relative(request_path: &str) -> Result<PathBuf, Refusal> {
    let forbidden = |detail: String| Refusal::new(status::FORBIDDEN, "forbidden\n", detail);
    sanitize(request_path).map_err(|e| match e {
        PathError::Traversal { .. } => forbidden(e.to_string()),
        // `sanitize` says "not found" for a staging name: for a change it is reserved.
        PathError::NotFound { .. } => forbidden(format!(
            "{request_path:?}: names starting with {STAGING_PREFIX} are reserved"
        )),
        PathError::NotAFile { .. } => forbidden("the served root itself".into()),
        _ => Refusal::new(status::BAD_REQUEST, "bad request\n", e.to_string()),
    })
}

/// The directory holding a name, open without following links, and the name.
struct Parent {
    fd: OwnedFd,
    dir: PathBuf,
    name: String,
}

impl Parent {
    fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }
}

/// Walk `rel`'s parent directories from `root`, never through a link. A missing one is
/// answered `missing` (404 for what must exist, 409 for where something is to be made).
fn open_parent(root: &Path, rel: &Path, missing: u16) -> Result<Parent, Refusal> {
    let name = rel
        .file_name()
        .and_then(OsStr::to_str)
        .map(str::to_string)
        .ok_or_else(|| Refusal::new(status::BAD_REQUEST, "bad request\n", "no name"))?;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::openat(CWD, root, flags, Mode::empty())
        .map_err(|e| Refusal::io("opening the served root", root, &e.into()))?;
    let mut dir = root.to_path_buf();
    for comp in rel.parent().map(Path::components).into_iter().flatten() {
        let Component::Normal(seg) = comp else {
            continue;
        };
        let next = dir.join(seg);
        fd = match rustix::fs::openat(&fd, seg, flags, Mode::empty()) {
            Ok(child) => child,
            Err(Errno::NOENT) => {
                return Err(Refusal::new(
                    missing,
                    if missing == status::CONFLICT {
                        "the parent directory does not exist\n"
                    } else {
                        "not found\n"
                    },
                    format!("{} does not exist", next.display()),
                ))
            }
            // O_NOFOLLOW with O_DIRECTORY says ENOTDIR for a link; tell the two apart.
            Err(Errno::NOTDIR | Errno::LOOP) => {
                let link = rustix::fs::statat(&fd, seg, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
                return Err(if link {
                    symlink(&next)
                } else {
                    Refusal::new(
                        status::CONFLICT,
                        "a parent of this path is a file\n",
                        format!("{} is not a directory", next.display()),
                    )
                });
            }
            Err(e) => return Err(Refusal::io("opening directory", &next, &e.into())),
        };
        dir = next;
    }
    Ok(Parent { fd, dir, name })
}

/// What the name is, without following it; `None` when nothing has it. A symlink is refused.
fn kind(parent: &Parent) -> Result<Option<FileType>, Refusal> {
    match rustix::fs::statat(&parent.fd, &parent.name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => Err(symlink(&parent.path())),
            other => Ok(Some(other)),
        },
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(Refusal::io("checking", &parent.path(), &e.into())),
    }
}

fn symlink(path: &Path) -> Refusal {
    Refusal::new(
        status::FORBIDDEN,
        "forbidden\n",
        format!("{} is a symbolic link", path.display()),
    )
}

fn not_found(parent: &Parent) -> Refusal {
    Refusal::new(
        status::NOT_FOUND,
        "not found\n",
        format!("{} does not exist", parent.path().display()),
    )
}

fn not_a_file_or_directory(parent: &Parent, kind: FileType) -> Refusal {
    Refusal::new(
        status::NOT_FOUND,
        "not found\n",
        format!(
            "{} is a {kind:?}, not a file or directory",
            parent.path().display()
        ),
    )
}

/// The name changed kind between the check and the change, or a directory has members.
fn changed_meanwhile(what: &str, parent: &Parent, e: Errno) -> Refusal {
    match e {
        Errno::NOTEMPTY | Errno::EXIST => Refusal::new(
            status::CONFLICT,
            "the directory is not empty\n",
            format!("{what} {}: not empty", parent.path().display()),
        ),
        Errno::ISDIR | Errno::NOTDIR => Refusal::new(
            status::CONFLICT,
            "changed while being removed\n",
            format!(
                "{what} {}: {}",
                parent.path().display(),
                std::io::Error::from(e)
            ),
        ),
        Errno::NOENT => not_found(parent),
        e => Refusal::io(what, &parent.path(), &e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::destination_path;

    #[test]
    fn destination_on_this_server_gives_its_raw_path() {
        let at = Some("example.org:8443");
        let ok = |v: &str| {
            destination_path(v, at)
                .map_err(|r| r.status)
                .expect("accepted")
        };
        assert_eq!(ok("https://example.org:8443/a/b%20c?x#y"), "/a/b%20c");
        assert_eq!(ok("davs://EXAMPLE.org:8443/a"), "/a");
        assert_eq!(ok("/a/b"), "/a/b");
        assert_eq!(ok("https://example.org:8443"), "/");
        // The `..` stays for the path checks to refuse.
        assert_eq!(ok("https://example.org:8443/a/../../etc"), "/a/../../etc");
        assert_eq!(
            destination_path("https://example.org/a", Some("example.org"))
                .map_err(|r| r.status)
                .ok(),
            Some("/a".to_string())
        );
    }

    #[test]
    fn destination_elsewhere_is_refused() {
        let at = Some("example.org:8443");
        for v in [
            "https://other.org:8443/a",
            "https://example.org:9443/a",
            "https://example.org/a",
            "ftp://example.org:8443/a",
            "https://example.org:8443@evil.org:8443/a",
        ] {
            assert_eq!(
                destination_path(v, at).map(|_| ()).map_err(|r| r.status),
                Err(502),
                "{v}"
            );
        }
        assert_eq!(
            destination_path("https://example.org/a", None)
                .map(|_| ())
                .map_err(|r| r.status),
            Err(502)
        );
        assert_eq!(
            destination_path("not a url", at)
                .map(|_| ())
                .map_err(|r| r.status),
            Err(400)
        );
    }
}
