//! Walking a directory under the served root, for listings: each entry described as a GET of
//! it would answer (size, modification time, the same strong ETag, the digest cache's key).
//!
//! The walk is blocking and streams: entries go to a callback in the order the filesystem
//! returns them, nothing is collected or sorted, so a directory of a million entries costs the
//! same memory as one of ten. A recursive walk holds one open directory per level, and levels
//! are bounded by [`MAX_DEPTH`](crate::listing::name::MAX_DEPTH).
//!
//! What is left out, so that a listing never names what a GET would refuse:
//! - a name that is not UTF-8 or that [`RelPath`] refuses (control characters, `\`, over-long
//!   segments, too deep) — with a warning, since the file exists but cannot be named;
//! - a symlink that leads out of the root, or nowhere;
//! - sockets, FIFOs and devices.
//!
//! A symlink to a file inside the root is listed as that file (a GET serves it). A symlink to
//! a directory inside the root is listed by one-level walks but never descended into by a
//! recursive one: it could point at one of its own ancestors.

use std::fs::{DirEntry, ReadDir};
use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::listing::{EntryKind, ListingEntry, RelPath};
use crate::resource::{ContentKey, FileStamp};

/// One entry of a served directory.
#[derive(Debug, Clone)]
pub struct ServedEntry {
    /// Path relative to the walked directory; `sha256` is left for the caller to fill.
    pub entry: ListingEntry,
    /// Cache key of a file's content, to look its digest up without opening it.
    pub content_key: Option<ContentKey>,
}

/// How far a walk goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkDepth {
    /// The directory's own members.
    Children,
    /// Everything below, directories before their contents, at most
    /// [`MAX_DEPTH`](crate::listing::name::MAX_DEPTH) levels.
    Recursive,
}

struct Level {
    entries: ReadDir,
    /// Path of this level relative to the walked directory (`None` for the walked directory).
    prefix: Option<RelPath>,
    path: PathBuf,
}

/// Walk `dir` (canonical, inside the canonical `root`), calling `on_entry` for each entry until
/// it answers `Break`. Fails when the walked directory cannot be read, or when reading any
/// directory fails part-way (a listing must not look complete when it is not); a subdirectory
/// that cannot be opened at all is left out with a warning, as a GET inside it would be
/// refused too.
pub fn walk_dir(
    root: &Path,
    dir: &Path,
    depth: WalkDepth,
    mut on_entry: impl FnMut(ServedEntry) -> io::Result<ControlFlow<()>>,
) -> io::Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| with_path(e, dir))?;
    let mut levels = vec![Level {
        entries,
        prefix: None,
        path: dir.to_path_buf(),
    }];
    while let Some(level) = levels.last_mut() {
        let Some(next) = level.entries.next() else {
            levels.pop();
            continue;
        };
        let dirent = next.map_err(|e| with_path(e, &level.path))?;
        let Some(found) = describe(&dirent, level.prefix.as_ref(), root, depth)? else {
            continue;
        };
        let descend = (depth == WalkDepth::Recursive && found.descend)
            .then(|| (found.served.entry.path.clone(), dirent.path()));
        if on_entry(found.served)?.is_break() {
            return Ok(());
        }
        if let Some((prefix, path)) = descend {
            match std::fs::read_dir(&path) {
                Ok(entries) => levels.push(Level {
                    entries,
                    prefix: Some(prefix),
                    path,
                }),
                Err(e) => {
                    tracing::warn!(dir = %path.display(), error = %e, "listing leaves out a directory it cannot read");
                }
            }
        }
    }
    Ok(())
}

struct Found {
    served: ServedEntry,
    /// A real directory (not a symlink to one): a recursive walk goes into it.
    descend: bool,
}

fn describe(
    dirent: &DirEntry,
    prefix: Option<&RelPath>,
    root: &Path,
    depth: WalkDepth,
) -> io::Result<Option<Found>> {
    let os_name = dirent.file_name();
    let skip = |reason: &str| {
        tracing::warn!(dir = %dirent.path().parent().unwrap_or(root).display(), name = ?os_name, reason, "listing skips an entry it cannot name");
        Ok(None)
    };
    let Some(name) = os_name.to_str() else {
        return skip("name is not UTF-8");
    };
    if name.starts_with(crate::paths::STAGING_PREFIX) || name == crate::paths::TREE_STAGING_DIR {
        // An upload in progress, or a tree download's staging: not files yet.
        return Ok(None);
    }
    let segment = match RelPath::parse_segment(name) {
        Ok(s) => s,
        Err(e) => return skip(e.reason),
    };
    let path = match prefix {
        None => segment,
        Some(p) => match p.join(&segment) {
            Ok(joined) => joined,
            Err(e) => return skip(e.reason),
        },
    };
    let file_type = match dirent.file_type() {
        Ok(t) => t,
        // Removed since the directory was read: it is simply not there any more.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(with_path(e, &dirent.path())),
    };
    let (canonical, via_link) = if file_type.is_symlink() {
        match dirent.path().canonicalize() {
            Ok(target) if target.starts_with(root) => (target, true),
            Ok(_) => {
                tracing::debug!(link = %dirent.path().display(), "listing leaves out a symlink that leads out of the root");
                return Ok(None);
            }
            Err(e) => {
                tracing::debug!(link = %dirent.path().display(), error = %e, "listing leaves out a dangling symlink");
                return Ok(None);
            }
        }
    } else {
        (dirent.path(), false)
    };
    let meta = match if via_link {
        std::fs::metadata(&canonical)
    } else {
        dirent.metadata()
    } {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(with_path(e, &canonical)),
    };
    let modified = meta.modified().ok();
    let found = if meta.is_file() {
        let stamp = FileStamp::of(&meta);
        Found {
            served: ServedEntry {
                entry: ListingEntry {
                    path,
                    kind: EntryKind::File,
                    size: Some(stamp.size),
                    modified,
                    etag: Some(stamp.etag()),
                    sha256: None,
                },
                content_key: Some(stamp.content_key(canonical)),
            },
            descend: false,
        }
    } else if meta.is_dir() {
        if via_link && depth == WalkDepth::Recursive {
            tracing::debug!(link = %dirent.path().display(), "recursive listing does not follow a directory symlink");
            return Ok(None);
        }
        Found {
            served: ServedEntry {
                entry: ListingEntry {
                    path,
                    kind: EntryKind::Directory,
                    size: None,
                    modified,
                    etag: None,
                    sha256: None,
                },
                content_key: None,
            },
            descend: !via_link,
        }
    } else {
        return Ok(None);
    };
    Ok(Some(found))
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("listing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(root: &Path, dir: &Path, depth: WalkDepth) -> Vec<ServedEntry> {
        let mut out = Vec::new();
        walk_dir(root, dir, depth, |e| {
            out.push(e);
            Ok(ControlFlow::Continue(()))
        })
        .expect("walk");
        out.sort_by(|a, b| a.entry.path.cmp(&b.entry.path));
        out
    }

    fn names(entries: &[ServedEntry]) -> Vec<&str> {
        entries.iter().map(|e| e.entry.path.as_str()).collect()
    }

    #[test]
    fn recursive_walk_lists_directories_before_contents_and_skips_what_it_cannot_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        std::fs::create_dir(root.join("empty")).expect("mkdir");
        std::fs::write(root.join("a/b/c.bin"), b"abc").expect("write");
        std::fs::write(root.join("a/bad\nname"), b"x").expect("write");
        std::fs::write(root.join("zero"), b"").expect("write");
        let mut order = Vec::new();
        walk_dir(&root, &root, WalkDepth::Recursive, |e| {
            order.push(e.entry.path.as_str().to_string());
            Ok(ControlFlow::Continue(()))
        })
        .expect("walk");
        let pos = |n: &str| order.iter().position(|o| o == n).expect(n);
        assert!(pos("a") < pos("a/b") && pos("a/b") < pos("a/b/c.bin"));
        let all = collect(&root, &root, WalkDepth::Recursive);
        assert_eq!(names(&all), ["a", "a/b", "a/b/c.bin", "empty", "zero"]);
        let file = &all[2].entry;
        assert_eq!(file.size, Some(3));
        let opened = crate::Resource::open(&root, "/a/b/c.bin", None).expect("open");
        assert_eq!(file.etag.as_deref(), Some(opened.etag()));
        assert_eq!(all[2].content_key, Some(opened.content_key()));
        let top = collect(&root, &root, WalkDepth::Children);
        assert_eq!(names(&top), ["a", "empty", "zero"]);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_stay_inside_the_root() {
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("secret"), b"s").expect("write");
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir(root.join("d")).expect("mkdir");
        std::fs::write(root.join("d/f"), b"f").expect("write");
        let link = |to: &Path, name: &str| {
            std::os::unix::fs::symlink(to, root.join(name)).expect("symlink");
        };
        link(&outside.path().join("secret"), "out-file");
        link(outside.path(), "out-dir");
        link(&root.join("d/f"), "in-file");
        link(&root, "loop");
        link(&root.join("nowhere"), "dangling");
        let all = collect(&root, &root, WalkDepth::Recursive);
        assert_eq!(names(&all), ["d", "d/f", "in-file"]);
        assert_eq!(all[2].entry.size, Some(1));
        let top = collect(&root, &root, WalkDepth::Children);
        assert_eq!(names(&top), ["d", "in-file", "loop"]);
    }

    #[test]
    fn break_stops_the_walk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        for i in 0..10 {
            std::fs::write(root.join(format!("f{i}")), b"").expect("write");
        }
        let mut seen = 0;
        walk_dir(&root, &root, WalkDepth::Children, |_| {
            seen += 1;
            Ok(if seen == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })
        .expect("walk");
        assert_eq!(seen, 3);
    }
}
