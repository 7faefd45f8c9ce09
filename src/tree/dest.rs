//! The destination directory of a tree: every local path a listing names is reached from its
//! root one component at a time, without following symbolic links.
//!
//! Names are already checked ([`RelPath`]: no `..`, no absolute path, no `\`, no NUL). What
//! is left is the local side: a symlink placed in the destination beforehand (`data ->
//! /etc`) would let `data/passwd` land outside it. Each directory on the way is opened with
//! `openat(O_DIRECTORY | O_NOFOLLOW)` from the one before, created with `mkdirat` when
//! missing; a link, or anything that is not a directory, is refused. A file's own name, its
//! `.part` and its `.xfer-journal` must not be links either. xfer itself creates only
//! directories and regular files, so after this check only another local process could put
//! a link in the way.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use xfer_common::listing::RelPath;

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
}

impl DestRoot {
    /// Open (creating it and its parents if needed) the destination directory. The root itself
    /// may be a link: the user named it.
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
        Ok(Self {
            path: path.to_path_buf(),
            fd,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Create the directory `rel` and every missing parent, without following links.
    pub fn create_dir(&self, rel: &RelPath) -> Result<PathBuf, DestError> {
        self.walk(rel.segments())?;
        Ok(rel.under(&self.path))
    }

    /// Give the directory `rel` the modification time `t`, reaching it without following
    /// links (its access time is left alone).
    pub fn set_dir_mtime(&self, rel: &RelPath, t: std::time::SystemTime) -> Result<(), DestError> {
        let dir = self.walk(rel.segments())?;
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

    /// Create the parents of the file `rel` and check that neither it nor its part file and
    /// journal are links; returns its path.
    pub fn prepare_file(&self, rel: &RelPath) -> Result<PathBuf, DestError> {
        let segments: Vec<&str> = rel.segments().collect();
        let (name, parents) = segments.split_last().unwrap_or((&"", &[]));
        let dir = self.walk(parents.iter().copied())?;
        let path = rel.under(&self.path);
        for suffix in ["", ".part", ".xfer-journal"] {
            let leaf = format!("{name}{suffix}");
            match rfs::statat(dir.as_fd(), leaf.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                    let mut p = path.clone().into_os_string();
                    p.push(suffix);
                    return Err(DestError::Symlink { path: p.into() });
                }
                _ => {}
            }
        }
        Ok(path)
    }

    /// Open each of `segments` in turn from the root, creating what is missing.
    fn walk<'a>(&self, segments: impl Iterator<Item = &'a str>) -> Result<OwnedFd, DestError> {
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
            dir = open_or_create(&dir, segment, &here)?;
        }
        Ok(dir)
    }

    /// Whether names differing only by case would be one file here: create a probe with an
    /// upper-case name and look it up in lower case.
    pub fn is_case_insensitive(&self) -> Result<bool, DestError> {
        let probe = format!(".XFER-CASE-PROBE-{}", std::process::id());
        let upper = self.path.join(&probe);
        File::create(&upper).map_err(|source| DestError::Io {
            what: "creating a probe file in",
            path: self.path.clone(),
            source,
        })?;
        let folded = rfs::statat(
            self.fd.as_fd(),
            probe.to_lowercase().as_str(),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok();
        let _ = std::fs::remove_file(&upper);
        Ok(folded)
    }
}

fn open_or_create(parent: &OwnedFd, name: &str, path: &Path) -> Result<OwnedFd, DestError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for _ in 0..2 {
        match rfs::openat(parent.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => return Ok(fd),
            Err(rustix::io::Errno::NOENT) => {
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

fn io_err(what: &'static str, path: &Path, e: rustix::io::Errno) -> DestError {
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
            ("other.bin", "other.bin.part"),
        ] {
            match root.prepare_file(&rel(name)) {
                Err(DestError::Symlink { path }) => assert!(path.ends_with(want), "{path:?}"),
                other => panic!("{name}: {other:?}"),
            }
        }
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
    fn this_filesystem_is_probed() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let root = DestRoot::open(tmp.path())?;
        // Linux test machines use case-sensitive filesystems.
        assert!(!root.is_case_insensitive()?);
        assert_eq!(std::fs::read_dir(tmp.path())?.count(), 0, "probe removed");
        Ok(())
    }
}
