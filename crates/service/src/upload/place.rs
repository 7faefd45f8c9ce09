//! The last step of every write: the verified staging file takes the target's name.
//!
//! A caller that may modify the path gets a plain `rename`, which replaces whatever has the
//! name by then. A create-only caller (`storage.create`, a static `create` grant) was allowed
//! in because nothing had the name when its request was checked; another request may create
//! the file while the bytes arrive, and a plain rename would then replace it. For that
//! caller the name is taken only if it is still free, atomically: `renameat2` with
//! `RENAME_NOREPLACE`, or, on a filesystem that does not offer it, `link(2)` (which never
//! replaces either) followed by removing the staging name.

use std::fs::File;
use std::io;
use std::path::Path;

use rustix::fs::{RenameFlags, CWD};
use rustix::io::Errno;

use super::refusal::Refusal;
use crate::status;

/// Whether a write's final rename may take the name of a file that exists by then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// The caller may modify the path: what has the name is replaced.
    Allowed,
    /// A create-only caller: the write fails if anything has the name by then.
    Never,
}

/// The answer when a create-only write finds its name taken at the end; the same status as
/// `Overwrite: F` meeting an existing file, since the caller asked, in effect, for a
/// write that replaces nothing.
pub(crate) const TAKEN_TEXT: &str =
    "the target was created while this upload ran; a create-only grant never replaces a file\n";

/// Sync the staging file, give it the target's name, sync the directory. With
/// [`Replace::Never`] an existing target is left as it is, the staging file is removed and
/// the answer is 412.
pub(crate) fn commit(
    file: &File,
    staging: &Path,
    target: &Path,
    replace: Replace,
) -> Result<(), Refusal> {
    file.sync_all()
        .map_err(|e| Refusal::io("syncing", staging, &e))?;
    match replace {
        Replace::Allowed => {
            std::fs::rename(staging, target).map_err(|e| Refusal::io("renaming", staging, &e))?
        }
        Replace::Never => match rename_noreplace(staging, target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if let Err(e) = std::fs::remove_file(staging) {
                    tracing::warn!(path = %staging.display(), error = %e, "removing the staging file of a refused create");
                }
                return Err(Refusal::new(
                    status::PRECONDITION_FAILED,
                    TAKEN_TEXT,
                    format!(
                        "{} exists by the end of a create-only write",
                        target.display()
                    ),
                ));
            }
            Err(e) => return Err(Refusal::io("renaming", staging, &e)),
        },
    }
    if let Some(dir) = target.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Give `from` the name `to` only if `to` does not exist; `AlreadyExists` otherwise.
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    match rustix::fs::renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        // The filesystem (or the kernel) has no RENAME_NOREPLACE.
        Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => link_then_unlink(from, to),
        Err(e) => Err(e.into()),
    }
}

/// `link(2)` fails with `EEXIST` rather than replacing; once linked, the staging name goes.
pub(crate) fn link_then_unlink(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::hard_link(from, to)?;
    if let Err(e) = std::fs::remove_file(from) {
        // The file is in place under both names; the staging one is swept later as stale.
        tracing::warn!(path = %from.display(), error = %e, "removing a staging name after linking it into place");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(dir: &Path, name: &str, text: &str) -> (File, std::path::PathBuf) {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write staging");
        (File::open(&p).expect("open staging"), p)
    }

    #[test]
    fn never_keeps_a_file_that_appeared() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("t");
        std::fs::write(&target, "theirs").expect("plant");
        let (f, s) = staged(dir.path(), ".s1", "mine");
        let r = commit(&f, &s, &target, Replace::Never).err();
        assert_eq!(r.map(|r| r.status), Some(status::PRECONDITION_FAILED));
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "theirs");
        assert!(!s.exists(), "staging debris left");

        let (f, s) = staged(dir.path(), ".s2", "mine");
        assert!(commit(&f, &s, &target, Replace::Allowed).is_ok());
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "mine");
        assert!(!s.exists());
    }

    #[test]
    fn never_takes_a_free_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("t");
        let (f, s) = staged(dir.path(), ".s", "mine");
        assert!(commit(&f, &s, &target, Replace::Never).is_ok());
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "mine");
        assert!(!s.exists());
    }

    #[test]
    fn the_link_fallback_never_replaces() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("t");
        std::fs::write(&target, "theirs").expect("plant");
        let (_, s) = staged(dir.path(), ".s", "mine");
        let e = link_then_unlink(&s, &target).expect_err("must refuse");
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "theirs");
        std::fs::remove_file(&target).expect("rm");
        link_then_unlink(&s, &target).expect("free name");
        assert!(!s.exists());
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "mine");
    }
}
