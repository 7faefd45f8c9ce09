//! Every system call of this crate, behind safe functions that borrow their fds, and the one
//! loop compiled for a CPU feature found at run time: the rest of the crate holds no `unsafe`
//! (a test below keeps it so). `rustix` where it has the call;
//! `libc` only for what it lacks, each block with the reason it is sound.

use std::io;
use std::os::fd::BorrowedFd;

/// Set the calling thread's nice value. On Linux the nice value belongs to the thread, so the
/// process's other threads keep theirs.
#[cfg(target_os = "linux")]
pub(crate) fn set_thread_nice(nice: i32) -> io::Result<()> {
    rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice)?;
    Ok(())
}

/// The route MTU of connected socket `fd` (`IP_MTU` / `IPV6_MTU`); `None` where the socket is
/// not connected.
#[cfg(target_os = "linux")]
pub(crate) fn route_mtu(fd: BorrowedFd<'_>, v6: bool) -> Option<u32> {
    let mtu = if v6 {
        rustix::net::sockopt::ipv6_mtu(fd)
    } else {
        rustix::net::sockopt::ip_mtu(fd)
    };
    mtu.ok().filter(|&m| m > 0)
}

/// What a read of cached bytes only found.
#[cfg(target_os = "linux")]
pub(crate) enum CachedRead {
    /// Bytes read; fewer than asked where only part was cached, 0 at the end of the file.
    Read(usize),
    /// The read would wait for the disk.
    WouldBlock,
    /// The filesystem cannot read without waiting (tmpfs, some network filesystems).
    Unsupported,
}

/// Read into `buf` at `offset` only what the page cache already holds (`preadv2` with
/// `RWF_NOWAIT`, Linux 4.14).
#[cfg(target_os = "linux")]
pub(crate) fn pread_cached(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    offset: u64,
) -> io::Result<CachedRead> {
    use rustix::io::{Errno, ReadWriteFlags};
    let mut bufs = [io::IoSliceMut::new(buf)];
    match rustix::io::preadv2(fd, &mut bufs, offset, ReadWriteFlags::NOWAIT) {
        Ok(n) => Ok(CachedRead::Read(n)),
        Err(Errno::AGAIN | Errno::INTR) => Ok(CachedRead::WouldBlock),
        Err(Errno::OPNOTSUPP | Errno::NOSYS | Errno::INVAL) => Ok(CachedRead::Unsupported),
        Err(e) => Err(e.into()),
    }
}

/// [`crate::synthetic::fill`] on AVX-512 (its 64-bit multiplies), when this CPU has it:
/// `false` leaves `buf` untouched for the portable loop.
pub(crate) fn fill_wide(seed: u64, offset: u64, buf: &mut [u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if wide_fill_available() {
        // SAFETY: the CPU has the features `fill_avx512` is compiled for (checked just above).
        unsafe { fill_avx512(seed, offset, buf) };
        return true;
    }
    let _ = (seed, offset, buf);
    false
}

/// Whether [`fill_wide`] fills (std caches the CPU's feature bits: one atomic load).
pub(crate) fn wide_fill_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512dq");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn fill_avx512(seed: u64, offset: u64, buf: &mut [u8]) {
    crate::synthetic::fill_words(seed, offset, buf);
}

/// This host's name as the kernel holds it (`uname(2)`'s node name, which `gethostname(2)`
/// returns on Linux).
pub(crate) fn host_name() -> Option<String> {
    let uname = rustix::system::uname();
    uname.nodename().to_str().ok().map(str::to_owned)
}

/// Hand glibc's free heap pages back to the kernel. glibc's own call; rustix has no
/// allocator calls.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn release_free_heap() {
    // SAFETY: malloc_trim only walks glibc's own arenas; it takes no pointers from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn release_free_heap() {}

/// An integer socket option at `level`. Through libc: rustix has no `SO_SNDBUFFORCE`,
/// `SO_RCVBUFFORCE`, `SO_BUF_LOCK` nor `TCP_WINDOW_CLAMP`.
pub(crate) fn get_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
) -> io::Result<libc::c_int> {
    use std::os::fd::AsRawFd;

    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live for the call and `len` holds `value`'s size; the fd
    // stays open because it is borrowed.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            std::ptr::addr_of_mut!(value).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Set an integer socket option at `level`; libc for the reason [`get_int`] gives.
pub(crate) fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;

    // SAFETY: the option value points to a live c_int whose size is passed alongside it; the
    // fd stays open because it is borrowed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            std::ptr::addr_of!(value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn unsafe_stays_in_the_sys_module() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        xfer_test_support::fence::assert_unsafe_only_in_sys(root);
    }

    #[test]
    fn host_name_is_the_kernels() {
        let name = super::host_name().expect("a host name");
        assert!(!name.is_empty());
    }
}
