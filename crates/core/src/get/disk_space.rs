//! Whether the destination's filesystem can hold what the server declares, asked before a
//! single byte is written.
//!
//! The declared size comes from the server and drives the preallocation of the part file and
//! the chunk plan; a hostile or broken server can declare an exabyte. Refusing sizes the
//! filesystem cannot hold (and any above [`MAX_DECLARED_SIZE`]) bounds every allocation that
//! follows from the size by the local disk, and ends such a transfer with a clear message
//! instead of a sparse file that fails hours later.

use std::io;
use std::path::Path;

/// Sizes above this (2^62 bytes, 4 EiB) are refused whatever the disk: no filesystem holds
/// them, and arithmetic on offsets stays far from overflow.
pub const MAX_DECLARED_SIZE: u64 = 1 << 62;

/// Bytes available to an unprivileged writer on the filesystem holding `dir`
/// (`statvfs`: `f_bavail × f_frsize`), or `None` where that cannot be asked.
pub fn available_bytes(dir: &Path) -> io::Result<Option<u64>> {
    #[cfg(unix)]
    {
        let stat = rustix::fs::statvfs(dir).map_err(io::Error::from)?;
        Ok(Some(stat.f_bavail.saturating_mul(stat.f_frsize)))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_directory_has_some_room_and_a_missing_one_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let free = available_bytes(dir.path()).expect("statvfs");
        assert!(free.is_some_and(|b| b > 0), "{free:?}");
        assert!(available_bytes(&dir.path().join("missing")).is_err());
    }
}
