//! Opening staging files (part files, journals, `.sha256`) without following a link.
//!
//! A link planted at `<dest>.part` would otherwise have the download written through it into
//! whatever it points at, and then be renamed to the final name. Every open here passes
//! `O_NOFOLLOW`, and a file created anew is first unlinked (the link itself, never its target)
//! and then created with `O_CREAT | O_EXCL`, which fails on any name that exists, dangling
//! links included. A link at a staging name is refused with an error [`is_link`] recognises
//! (`ELOOP`, what the kernel gives for `O_NOFOLLOW` on a link), so the caller can say so.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

/// Whether `e` is the refusal of a link at the name opened.
pub fn is_link(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}

fn link_refused() -> io::Error {
    io::Error::from_raw_os_error(libc::ELOOP)
}

/// Open an existing file for reading; a link is refused.
pub fn open_read(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Open an existing file for writing in place (no truncation); a link is refused.
pub fn open_write(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Open a file for appending, creating it when missing; a link is refused.
pub fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
}

/// Replace whatever regular file is at `path` with a new empty one, opened for writing. A
/// link is refused and left in place (its target untouched); so is anything else that is not
/// a regular file (a directory, a FIFO, a device).
pub fn create_fresh(path: &Path) -> io::Result<File> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => return Err(link_refused()),
        Ok(m) if m.file_type().is_file() => std::fs::remove_file(path)?,
        Ok(m) => {
            let ft = m.file_type();
            let what = if ft.is_dir() {
                "a directory"
            } else if ft.is_fifo() || ft.is_socket() {
                "a pipe or socket"
            } else {
                "not a regular file"
            };
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{what} is in the way"),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // Another process could create something between the unlink and here: O_EXCL then fails
    // rather than open it.
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
}

/// Remove the file at `path` if there is one; a link is removed itself, never followed.
pub fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_refused_and_their_targets_untouched() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("target");
        std::fs::write(&target, b"precious")?;
        let link = dir.path().join("f.part");
        std::os::unix::fs::symlink(&target, &link)?;
        for r in [
            create_fresh(&link),
            open_write(&link),
            open_read(&link),
            open_append(&link),
        ] {
            assert!(r.as_ref().is_err_and(is_link), "{r:?}");
        }
        let dangling = dir.path().join("g.part");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling)?;
        assert!(create_fresh(&dangling).is_err_and(|e| is_link(&e)));
        assert!(!dir.path().join("nowhere").exists());
        assert_eq!(std::fs::read(&target)?, b"precious");
        assert!(std::fs::symlink_metadata(&link)?.file_type().is_symlink());
        Ok(())
    }

    #[test]
    fn a_stale_file_is_replaced() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("f.part");
        std::fs::write(&p, b"old bytes")?;
        drop(create_fresh(&p)?);
        assert_eq!(std::fs::read(&p)?, b"");
        std::fs::create_dir(dir.path().join("d"))?;
        assert!(create_fresh(&dir.path().join("d")).is_err());
        Ok(())
    }
}
