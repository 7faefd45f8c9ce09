//! `--delete`: the local files and directories a complete listing no longer names.
//!
//! The walk starts at the destination's root descriptor and opens every directory with
//! `openat(O_DIRECTORY | O_NOFOLLOW)` from its parent, as `dest` does: a symbolic link in the
//! destination is removed as a name (when unlisted), never followed, so nothing outside the
//! destination is looked at or removed. The staging directory at the top is never entered.
//! Names that are not UTF-8 cannot have come from a listing and are left alone with a warning
//! rather than removed: xfer removes only what it can name.

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};

use super::staging::STAGING_DIR;

/// What the walk found to remove, and what it could not remove.
#[derive(Debug, Default)]
pub(super) struct Pruned {
    /// Paths removed, or with `dry_run` to be removed; a directory after what is inside it.
    pub removed: Vec<String>,
    /// Paths that could not be read or removed, with the reason.
    pub errors: Vec<(String, String)>,
}

/// Remove (unless `dry_run`) every path under `root` for which `keep(path, is_dir)` is false.
/// An unlisted directory is emptied first and removed only when nothing kept is left in it.
pub(super) fn prune(root: &OwnedFd, keep: &dyn Fn(&str, bool) -> bool, dry_run: bool) -> Pruned {
    let mut out = Pruned::default();
    walk(root, "", keep, dry_run, &mut out);
    out
}

/// Walk `dir` (at `prefix`, empty for the root); true when everything in it was removed.
fn walk(
    dir: &OwnedFd,
    prefix: &str,
    keep: &dyn Fn(&str, bool) -> bool,
    dry_run: bool,
    out: &mut Pruned,
) -> bool {
    let shown = if prefix.is_empty() { "." } else { prefix };
    let mut entries = match rfs::Dir::read_from(dir.as_fd()) {
        Ok(d) => d,
        Err(e) => {
            out.errors
                .push((shown.to_string(), format!("reading the directory: {e}")));
            return false;
        }
    };
    let mut emptied = true;
    while let Some(entry) = entries.read() {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                out.errors
                    .push((shown.to_string(), format!("reading the directory: {e}")));
                return false;
            }
        };
        let raw: &CStr = entry.file_name();
        let bytes = raw.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let Ok(name) = std::str::from_utf8(bytes) else {
            tracing::warn!(dir = %shown, name = %String::from_utf8_lossy(bytes), "a local name that is not UTF-8 is not deleted");
            emptied = false;
            continue;
        };
        if prefix.is_empty() && name == STAGING_DIR {
            emptied = false;
            continue;
        }
        let path = if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}/{name}")
        };
        let is_dir = match entry.file_type() {
            FileType::Unknown => rfs::statat(dir.as_fd(), raw, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
            t => t == FileType::Directory,
        };
        let kept = keep(&path, is_dir);
        if is_dir {
            let child = rfs::openat(
                dir.as_fd(),
                raw,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            );
            let child = match child {
                Ok(fd) => fd,
                Err(e) => {
                    out.errors
                        .push((path, format!("opening the directory: {e}")));
                    emptied = false;
                    continue;
                }
            };
            let inner_emptied = walk(&child, &path, keep, dry_run, out);
            drop(child);
            if kept || !inner_emptied {
                emptied = false;
                continue;
            }
            if remove(dir, raw, &path, true, dry_run, out) {
                continue;
            }
            emptied = false;
        } else if kept || !remove(dir, raw, &path, false, dry_run, out) {
            emptied = false;
        }
    }
    emptied
}

fn remove(
    dir: &OwnedFd,
    name: &CStr,
    path: &str,
    is_dir: bool,
    dry_run: bool,
    out: &mut Pruned,
) -> bool {
    if !dry_run {
        let flags = if is_dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        if let Err(e) = rfs::unlinkat(dir.as_fd(), name, flags) {
            out.errors
                .push((path.to_string(), format!("removing: {e}")));
            return false;
        }
        tracing::info!(path, "deleted: no longer listed");
    }
    out.removed.push(path.to_string());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(p: &std::path::Path) -> OwnedFd {
        rfs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).expect("open root")
    }

    #[test]
    fn removes_unlisted_paths_only_and_never_follows_links() -> std::io::Result<()> {
        let root = tempfile::tempdir()?;
        let outside = tempfile::tempdir()?;
        std::fs::write(outside.path().join("precious"), b"x")?;
        let r = root.path();
        std::fs::create_dir_all(r.join("keep/old"))?;
        std::fs::create_dir_all(r.join(STAGING_DIR))?;
        std::fs::write(r.join(STAGING_DIR).join("part"), b"p")?;
        std::fs::write(r.join("keep/a"), b"a")?;
        std::fs::write(r.join("keep/stale"), b"s")?;
        std::fs::write(r.join("keep/old/x"), b"x")?;
        std::fs::write(r.join("excluded.tmp"), b"t")?;
        std::os::unix::fs::symlink(outside.path(), r.join("link"))?;
        let listed = ["keep", "keep/a"];
        let keep = |p: &str, _dir: bool| listed.contains(&p) || p.ends_with(".tmp");

        let planned = prune(&open(r), &keep, true);
        assert!(planned.errors.is_empty(), "{:?}", planned.errors);
        let mut want = vec!["keep/old/x", "keep/old", "keep/stale", "link"];
        let mut got = planned.removed.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want);
        assert!(r.join("keep/stale").exists(), "a dry run removes nothing");

        let done = prune(&open(r), &keep, false);
        assert!(done.errors.is_empty(), "{:?}", done.errors);
        assert_eq!(done.removed.len(), 4);
        assert!(r.join("keep/a").exists() && r.join("excluded.tmp").exists());
        assert!(!r.join("keep/old").exists() && !r.join("link").exists());
        assert!(r.join(STAGING_DIR).join("part").exists());
        assert!(
            outside.path().join("precious").exists(),
            "the link's target is untouched"
        );
        Ok(())
    }
}
