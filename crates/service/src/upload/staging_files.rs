//! Opening the server's staging files and upload records without following a link.
//!
//! Staging names (`.xfer-upload.<id>.<name>`, their `.ranges` sidecars and the records of
//! resumable uploads) are refused in every request path and hidden from every listing, so no
//! client can create, read or list them. Someone with access to the served directory still
//! could plant a symbolic link at one; every open here uses `O_NOFOLLOW`, and every file made
//! here is made with `O_EXCL`, so such a link is an error, never a way to write elsewhere.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use super::refusal::Refusal;
use crate::status;

fn no_follow() -> i32 {
    // The flag's bits fit an i32 on every Unix.
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// A new staging file, read-write; fails if anything (a link included) has the name.
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(no_follow())
        .open(path)
}

/// An existing staging file, read-write; fails on a link.
pub(crate) fn open_existing(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(no_follow())
        .open(path)
}

/// An existing record, for appending; fails on a link or when it is gone.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .custom_flags(no_follow())
        .open(path)
}

/// A record's text; fails on a link.
pub(crate) fn read_text(path: &Path) -> io::Result<String> {
    let mut text = String::new();
    OpenOptions::new()
        .read(true)
        .custom_flags(no_follow())
        .open(path)?
        .read_to_string(&mut text)?;
    Ok(text)
}

/// A new record holding `text`; fails if anything has the name.
pub(crate) fn write_new(path: &Path, text: &str) -> io::Result<()> {
    create_new(path)?.write_all(text.as_bytes())
}

/// Replace a record by a complete new one: written beside it under `tmp` (a leftover of an
/// earlier crash, or a link planted there, is removed first, never written through), then
/// renamed over it.
pub(crate) fn replace_text(path: &Path, tmp: &Path, text: &str) -> io::Result<()> {
    match std::fs::remove_file(tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    write_new(tmp, text)?;
    std::fs::rename(tmp, path)
}

/// 507 before a byte of a body is read, when the filesystem holding `dir` has less than
/// `bytes` free for this process: a client sending a large body learns it at once, instead of
/// after filling the disk. A filesystem that cannot tell lets the upload try.
pub(crate) fn check_room(dir: &Path, bytes: u64) -> Result<(), Refusal> {
    if bytes == 0 {
        return Ok(());
    }
    let st = match rustix::fs::statvfs(dir) {
        Ok(st) => st,
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "statvfs failed; not checking for room");
            return Ok(());
        }
    };
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    if free >= bytes {
        return Ok(());
    }
    Err(Refusal::new(
        status::INSUFFICIENT_STORAGE,
        "insufficient storage on the server\n",
        format!("{}: {bytes} bytes declared, {free} free", dir.display()),
    ))
}
