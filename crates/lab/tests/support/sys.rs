//! The lab suite's system calls: UDP options that neither std, socket2 nor rustix set.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Set the integer `SOL_UDP` option `option` (`UDP_GRO`, `UDP_SEGMENT`) on `fd`.
pub fn set_udp_option(
    fd: BorrowedFd<'_>,
    option: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads one int through the pointer, whose size is passed alongside;
    // the fd stays open because it is borrowed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_UDP,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
