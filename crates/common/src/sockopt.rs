//! Integer socket options that `rustix` does not wrap (`SO_*BUFFORCE`, `SO_BUF_LOCK`,
//! `TCP_WINDOW_CLAMP`, `TCP_FASTOPEN`), for this crate and the transports: one pair of
//! system calls, in this crate's `sys` module, for every crate that needs them.

use std::io;
use std::os::fd::BorrowedFd;

/// Read an integer option at `level` (`libc::SOL_SOCKET`, `libc::IPPROTO_TCP`, ...).
pub fn get_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    option: libc::c_int,
) -> io::Result<libc::c_int> {
    crate::sys::get_int(fd, level, option)
}

/// Set an integer option at `level`.
pub fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    option: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    crate::sys::set_int(fd, level, option, value)
}
