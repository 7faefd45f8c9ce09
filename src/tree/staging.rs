//! Where a tree keeps what is not yet a listed file: `<dest>/.xfer-staging/`.
//!
//! A part file or journal beside its file (`f.part`, `f.xfer-journal`) shares the namespace
//! of the listing: a tree that holds both `f` and `f.part` would have `f`'s download written
//! into, and renamed from, the file `f.part` names. So a tree's files are staged in one
//! private directory at the top of the destination:
//!
//! ```text
//! dest/.xfer-staging/                 mode 0700, created and opened without following a link
//!   tree-journal                      files complete (`journal`)
//!   <32 hex>.part, <32 hex>.xfer-journal
//! ```
//!
//! - Its name is reserved: a listing that names it, in any case (a case-insensitive
//!   destination folds `.XFER-STAGING` onto it), has that entry refused and the run fails;
//!   `--exclude .xfer-staging` skips it instead.
//! - A file's staging names are the first 128 bits of the SHA-256 of its listed path, in hex:
//!   one flat directory, no listed name in it, and no two listed paths on one part file (the
//!   driver also folds a name listed twice into one entry).
//! - Every staging file is opened with `O_NOFOLLOW` (`xfer_core::nofollow`), so a link
//!   planted there is refused and its target untouched; the directory itself is refused when
//!   it is a link.
//! - It is inside the destination, so on its filesystem: the verified part file is renamed
//!   into place. A file whose directory is another filesystem mounted inside the destination
//!   fails (`EXDEV`) rather than being copied.
//! - Once a run ends with every file complete, the part files and journals left by files
//!   the listing no longer names are removed; the tree journal stays for the next run.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, Mode};
use xfer_common::listing::RelPath;
use xfer_core::get::Staging;
use xfer_core::Sha256Digest;

use super::dest::{io_err, open_or_create, DestError};

/// The staging directory's name at the top of the destination; listed names there are refused
/// (and xfer's server neither lists nor serves it).
pub const STAGING_DIR: &str = xfer_common::paths::TREE_STAGING_DIR;

const TREE_JOURNAL: &str = "tree-journal";

/// The open staging directory of one destination.
#[derive(Debug)]
pub struct StagingDir {
    path: PathBuf,
    fd: OwnedFd,
}

impl StagingDir {
    /// Create (mode 0700) or open `STAGING_DIR` in the destination `root`, refusing a link or
    /// anything else that is not a directory.
    pub(super) fn open(root: &OwnedFd, root_path: &Path) -> Result<Self, DestError> {
        let path = root_path.join(STAGING_DIR);
        match rfs::mkdirat(root.as_fd(), STAGING_DIR, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(io_err("creating", &path, e)),
        }
        let fd = open_or_create(root, STAGING_DIR, &path, false)?;
        Ok(Self { path, fd })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    pub fn tree_journal(&self) -> PathBuf {
        self.path.join(TREE_JOURNAL)
    }

    /// Where the file listed as `rel` is staged.
    pub fn for_file(&self, rel: &RelPath) -> Staging {
        let stem = staged_name(rel);
        Staging {
            part: self.path.join(format!("{stem}.part")),
            journal: self.path.join(format!("{stem}.xfer-journal")),
        }
    }

    /// Move a tree journal of the layout before the staging directory
    /// (`<dest>.xfer-tree-journal`, beside the destination) in, unless one is already here,
    /// so that a tree fetched before keeps being skipped.
    pub(super) fn adopt_legacy_journal(&self, legacy: &Path) -> Result<(), DestError> {
        let here = self.tree_journal();
        let legacy_is_file = std::fs::symlink_metadata(legacy).is_ok_and(|m| m.is_file());
        if !legacy_is_file || std::fs::symlink_metadata(&here).is_ok() {
            return Ok(());
        }
        std::fs::rename(legacy, &here).map_err(|source| DestError::Io {
            what: "moving the tree journal into the staging directory from",
            path: legacy.to_path_buf(),
            source,
        })?;
        tracing::info!(from = %legacy.display(), to = %here.display(), "moved the tree journal into the destination");
        Ok(())
    }

    /// Remove every part file and journal here: called once every listed file is complete,
    /// when what is left belongs to files the listing no longer names.
    pub(super) fn remove_leftovers(&self) -> io::Result<usize> {
        let mut removed = 0;
        for entry in std::fs::read_dir(&self.path)? {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".part") || name.ends_with(".xfer-journal") {
                match rfs::unlinkat(self.fd.as_fd(), name, AtFlags::empty()) {
                    Ok(()) => removed += 1,
                    Err(rustix::io::Errno::NOENT) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(removed)
    }
}

/// The stem of the staging names of the file listed as `rel`: 32 hex digits of the SHA-256 of
/// its path. Distinct paths get distinct stems (a collision would take 2^64 names), and a stem
/// never names anything a listing can reach.
pub fn staged_name(rel: &RelPath) -> String {
    let mut hex = Sha256Digest::of(rel.as_str().as_bytes()).to_hex();
    hex.truncate(32);
    hex
}

/// Whether `rel` lies in the staging directory (in any case: a case-insensitive destination
/// folds them together).
pub fn is_reserved(rel: &RelPath) -> bool {
    rel.segments()
        .next()
        .is_some_and(|first| first.eq_ignore_ascii_case(STAGING_DIR))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(s: &str) -> RelPath {
        RelPath::parse(s).expect("valid name")
    }

    #[test]
    fn names_that_a_listing_could_confuse_get_their_own_staging_files() {
        let names = ["x", "x.part", "x.xfer-journal", "a/x", "a/x.part", "X"];
        let stems: std::collections::HashSet<String> =
            names.iter().map(|n| staged_name(&rel(n))).collect();
        assert_eq!(stems.len(), names.len());
        assert!(stems.iter().all(|s| s.len() == 32));
        assert!(is_reserved(&rel(".xfer-staging/tree-journal")));
        assert!(is_reserved(&rel(".XFER-Staging")));
        assert!(!is_reserved(&rel("a/.xfer-staging")));
        assert!(!is_reserved(&rel(".xfer-staging-not")));
    }

    #[test]
    fn a_link_in_place_of_the_directory_is_refused() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside)?;
        let dest = tmp.path().join("dest");
        std::fs::create_dir(&dest)?;
        std::os::unix::fs::symlink(&outside, dest.join(STAGING_DIR))?;
        let fd = rfs::open(
            &dest,
            rfs::OFlags::RDONLY | rfs::OFlags::DIRECTORY,
            Mode::empty(),
        )?;
        assert!(matches!(
            StagingDir::open(&fd, &dest),
            Err(DestError::Symlink { .. })
        ));
        assert_eq!(std::fs::read_dir(&outside)?.count(), 0);
        Ok(())
    }
}
