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
        use std::os::unix::ffi::OsStrExt;
        let c_path = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
        // SAFETY: `c_path` is a valid NUL-terminated string and `stat` points to writable
        // memory of the right type; statvfs fills it on success.
        let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: statvfs returned 0, so it initialised `stat`.
        let stat = unsafe { stat.assume_init() };
        // The field types differ between platforms (u32 on some, u64 on Linux).
        #[allow(clippy::unnecessary_cast)]
        let (blocks, block_size) = (stat.f_bavail as u64, stat.f_frsize as u64);
        Ok(Some(blocks.saturating_mul(block_size)))
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
