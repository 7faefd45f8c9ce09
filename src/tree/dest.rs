//! The destination directory of a tree: every local path a listing names is reached from its
//! root one component at a time, without following symbolic links.
//!
//! Names are already checked ([`RelPath`]: no `..`, no absolute path, no `\`, no NUL). What
//! is left is the local side: a symlink placed in the destination beforehand (`data ->
//! /etc`) would let `data/passwd` land outside it. Each directory on the way is opened with
//! `openat(O_DIRECTORY | O_NOFOLLOW)` from the one before, created with `mkdirat` when
//! missing; a link, or anything that is not a directory, is refused. A file's own name must
//! not be a link either, and the check whether a file is already complete looks at it the same
//! way, never through a link. Part files and journals are not beside the files but in the
//! staging directory (`staging`). xfer itself creates only directories and regular files, so
//! after this check only another local process could put a link in the way.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use xfer_common::listing::RelPath;

use super::staging::{StagingDir, STAGING_DIR};

/// Why a path in the destination cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DestError {
    #[error("{path} is a symbolic link; xfer does not write through links in the destination")]
    Symlink { path: PathBuf },
    #[error("{path} exists and is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The root a tree is written under.
#[derive(Debug)]
pub struct DestRoot {
    path: PathBuf,
    fd: OwnedFd,
    staging: StagingDir,
}

/// A regular file found in the destination (never through a link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalFile {
    pub len: u64,
    /// Modification time, nanoseconds since the epoch (`None` before 1970).
    pub mtime_ns: Option<u64>,
}

impl Drop for DestRoot {
    /// A run that staged nothing (a refused listing, an empty tree) leaves no staging directory
    /// behind; one holding a journal or a part file stays for the next run.
    fn drop(&mut self) {
        let _ = rfs::unlinkat(self.fd.as_fd(), STAGING_DIR, AtFlags::REMOVEDIR);
    }
}

impl DestRoot {
    /// Open (creating it and its parents if needed) the destination directory and its staging
    /// directory. The root itself may be a link: the user named it.
    pub fn open(path: &Path) -> Result<Self, DestError> {
        std::fs::create_dir_all(path).map_err(|source| DestError::Io {
            what: "creating",
            path: path.to_path_buf(),
            source,
        })?;
        let fd = rfs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| DestError::Io {
            what: "opening",
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        let staging = StagingDir::open(&fd, path)?;
        Ok(Self {
            path: path.to_path_buf(),
            fd,
            staging,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn staging(&self) -> &StagingDir {
        &self.staging
    }

    /// The root's descriptor, for walks that must stay below it (`prune`).
    pub(super) fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Create the directory `rel` and every missing parent, without following links.
    pub fn create_dir(&self, rel: &RelPath) -> Result<PathBuf, DestError> {
        self.walk(rel.segments(), true)?;
        Ok(rel.under(&self.path))
    }

    /// Give the directory `rel` the modification time `t`, reaching it without following
    /// links (its access time is left alone).
    pub fn set_dir_mtime(&self, rel: &RelPath, t: std::time::SystemTime) -> Result<(), DestError> {
        let dir = self.walk(rel.segments(), true)?;
        let path = rel.under(&self.path);
        let since = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| DestError::Io {
                what: "a modification time before 1970 for",
                path: path.clone(),
                source: io::ErrorKind::InvalidInput.into(),
            })?;
        let times = rfs::Timestamps {
            last_access: rfs::Timespec {
                tv_sec: 0,
                tv_nsec: rfs::UTIME_OMIT,
            },
            last_modification: rfs::Timespec {
                tv_sec: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: since.subsec_nanos().into(),
            },
        };
        rfs::futimens(&dir, &times)
            .map_err(|e| io_err("setting the modification time of", &path, e))
    }

    /// Create the parents of the file `rel` and check that it is not a link; returns its path.
    pub fn prepare_file(&self, rel: &RelPath) -> Result<PathBuf, DestError> {
        let segments: Vec<&str> = rel.segments().collect();
        let (name, parents) = segments.split_last().unwrap_or((&"", &[]));
        let dir = self.walk(parents.iter().copied(), true)?;
        let path = rel.under(&self.path);
        match rfs::statat(dir.as_fd(), *name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                Err(DestError::Symlink { path })
            }
            _ => Ok(path),
        }
    }

    /// The regular file at `rel`, if there is one, reached without following a link on the
    /// way or at its name and without creating anything. A link, a missing parent or anything
    /// but a regular file is `None`: the file is fetched, and a link then refused.
    pub fn stat_file(&self, rel: &RelPath) -> Result<Option<LocalFile>, DestError> {
        let segments: Vec<&str> = rel.segments().collect();
        let (name, parents) = segments.split_last().unwrap_or((&"", &[]));
        let dir = match self.walk(parents.iter().copied(), false) {
            Ok(d) => d,
            Err(DestError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(DestError::Symlink { .. } | DestError::NotADirectory { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let st = match rfs::statat(dir.as_fd(), *name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(io_err("looking at", &rel.under(&self.path), e)),
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Ok(None);
        }
        // The fields' integer types differ between architectures.
        #[allow(clippy::useless_conversion)]
        let mtime_ns = u64::try_from(st.st_mtime).ok().and_then(|s| {
            s.checked_mul(1_000_000_000)?
                .checked_add(u64::try_from(st.st_mtime_nsec).ok()?)
        });
        Ok(Some(LocalFile {
            len: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ns,
        }))
    }

    /// Open each of `segments` in turn from the root, creating what is missing when `create`.
    fn walk<'a>(
        &self,
        segments: impl Iterator<Item = &'a str>,
        create: bool,
    ) -> Result<OwnedFd, DestError> {
        let mut here = self.path.clone();
        let mut dir = rfs::openat(
            self.fd.as_fd(),
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("opening", &here, e))?;
        for segment in segments {
            here.push(segment);
            dir = open_or_create(&dir, segment, &here, create)?;
        }
        Ok(dir)
    }

    /// Whether names differing only by case would be one file here: create a probe with an
    /// upper-case name and look it up in lower case. In the staging directory, where no
    /// listed name lands, created with `O_EXCL` so that nothing there is opened.
    pub fn is_case_insensitive(&self) -> Result<bool, DestError> {
        let probe = format!("CASE-PROBE-{}", std::process::id());
        let dir = self.staging.fd();
        let created = rfs::openat(
            dir.as_fd(),
            probe.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io_err("creating a probe file in", self.staging.path(), e))?;
        drop(created);
        let folded = rfs::statat(
            dir.as_fd(),
            probe.to_lowercase().as_str(),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok();
        let _ = rfs::unlinkat(dir.as_fd(), probe.as_str(), AtFlags::empty());
        Ok(folded)
    }
}

/// Open the directory `name` in `parent` without following a link, creating it when missing
/// and `create`.
pub(super) fn open_or_create(
    parent: &OwnedFd,
    name: &str,
    path: &Path,
    create: bool,
) -> Result<OwnedFd, DestError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for _ in 0..2 {
        match rfs::openat(parent.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => return Ok(fd),
            Err(rustix::io::Errno::NOENT) if create => {
                match rfs::mkdirat(parent.as_fd(), name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => continue,
                    Err(e) => return Err(io_err("creating", path, e)),
                }
            }
            // O_NOFOLLOW on a link fails with ELOOP; O_DIRECTORY on anything else with ENOTDIR.
            Err(rustix::io::Errno::LOOP) => {
                return Err(DestError::Symlink {
                    path: path.to_path_buf(),
                })
            }
            Err(rustix::io::Errno::NOTDIR) => {
                return match rfs::statat(parent.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                        Err(DestError::Symlink {
                            path: path.to_path_buf(),
                        })
                    }
                    _ => Err(DestError::NotADirectory {
                        path: path.to_path_buf(),
                    }),
                }
            }
            Err(e) => return Err(io_err("opening", path, e)),
        }
    }
    Err(DestError::NotADirectory {
        path: path.to_path_buf(),
    })
}

pub(super) fn io_err(what: &'static str, path: &Path, e: rustix::io::Errno) -> DestError {
    DestError::Io {
        what,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(s: &str) -> RelPath {
        RelPath::parse(s).expect("valid name")
    }

    #[test]
    fn creates_nested_directories() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let root = DestRoot::open(&tmp.path().join("dest"))?;
        let p = root.prepare_file(&rel("a/b c/d.bin"))?;
        assert_eq!(p, tmp.path().join("dest/a/b c/d.bin"));
        assert!(tmp.path().join("dest/a/b c").is_dir());
        root.create_dir(&rel("empty/dir"))?;
        assert!(tmp.path().join("dest/empty/dir").is_dir());
        Ok(())
    }

    #[test]
    fn refuses_links_in_the_way() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside)?;
        let dest = tmp.path().join("dest");
        std::fs::create_dir(&dest)?;
        std::os::unix::fs::symlink(&outside, dest.join("link"))?;
        std::os::unix::fs::symlink(outside.join("f"), dest.join("file.bin"))?;
        std::os::unix::fs::symlink(outside.join("p"), dest.join("other.bin.part"))?;
        std::fs::write(dest.join("plain"), b"x")?;
        let root = DestRoot::open(&dest)?;
        for (name, want) in [
            ("link/x.bin", "link"),
            ("link/deeper/x.bin", "link"),
            ("file.bin", "file.bin"),
        ] {
            match root.prepare_file(&rel(name)) {
                Err(DestError::Symlink { path }) => assert!(path.ends_with(want), "{path:?}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        // A `.part` beside a file is only another listed name now.
        assert!(root.prepare_file(&rel("other.bin")).is_ok());
        assert!(matches!(
            root.prepare_file(&rel("plain/x")),
            Err(DestError::NotADirectory { .. })
        ));
        assert!(matches!(
            root.create_dir(&rel("link")),
            Err(DestError::Symlink { .. })
        ));
        assert_eq!(
            std::fs::read_dir(&outside)?.count(),
            0,
            "nothing written outside"
        );
        Ok(())
    }

    #[test]
    fn the_complete_check_does_not_look_through_links() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside)?;
        std::fs::write(outside.join("f"), b"elsewhere")?;
        let dest = tmp.path().join("dest");
        std::fs::create_dir(&dest)?;
        std::os::unix::fs::symlink(&outside, dest.join("sub"))?;
        std::os::unix::fs::symlink(outside.join("f"), dest.join("f"))?;
        std::fs::write(dest.join("plain"), b"here")?;
        let root = DestRoot::open(&dest)?;
        assert_eq!(root.stat_file(&rel("sub/f"))?, None);
        assert_eq!(root.stat_file(&rel("f"))?, None);
        assert_eq!(root.stat_file(&rel("missing/f"))?, None);
        assert_eq!(root.stat_file(&rel("plain/f"))?, None);
        assert!(!dest.join("missing").exists(), "the check creates nothing");
        let plain = root.stat_file(&rel("plain"))?.expect("a regular file");
        assert_eq!(plain.len, 4);
        let mtime = std::fs::metadata(dest.join("plain"))?
            .modified()?
            .duration_since(std::time::UNIX_EPOCH)?;
        assert_eq!(plain.mtime_ns, u64::try_from(mtime.as_nanos()).ok());
        Ok(())
    }

    #[test]
    fn this_filesystem_is_probed() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let root = DestRoot::open(tmp.path())?;
        // Linux test machines use case-sensitive filesystems.
        assert!(!root.is_case_insensitive()?);
        assert_eq!(
            std::fs::read_dir(root.staging().path())?.count(),
            0,
            "probe removed"
        );
        Ok(())
    }
}
