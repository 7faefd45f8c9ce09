//! Every system call of this crate, behind safe functions that borrow their fds: the rest of
//! the crate holds no `unsafe` (a test below keeps it so). `rustix` where it has the call;
//! `libc` for what it lacks (`TCP_INFO`, `bpf(2)`), each block with the reason it is sound;
//! integer socket options through `xfer_common::sockopt`.

#[cfg(target_os = "linux")]
pub(crate) mod bpf;

use std::os::fd::{AsRawFd, BorrowedFd};

/// The kernel's `struct tcp_info`, as libc declares it, and how many of its bytes the kernel
/// filled (older kernels fill a prefix).
#[cfg(target_os = "linux")]
pub(crate) fn tcp_info(fd: BorrowedFd<'_>) -> Option<(libc::tcp_info, usize)> {
    // SAFETY: tcp_info is plain old data, valid when zeroed.
    let mut raw: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `raw` is a plain-old-data struct of `len` bytes that the kernel fills (a prefix of
    // it on older kernels, reported through `len`); the fd is borrowed for the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            std::ptr::addr_of_mut!(raw).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some((raw, len as usize))
}

/// Bytes the kernel holds for the application that it has not read yet (`FIONREAD`, which is
/// `SIOCINQ` for TCP).
pub(crate) fn unread_bytes(fd: BorrowedFd<'_>) -> Option<u64> {
    rustix::io::ioctl_fionread(fd).ok()
}

/// Bytes sent on a TCP socket that its peer has not acknowledged yet, queued or in flight
/// (`SIOCOUTQ`).
#[cfg(target_os = "linux")]
pub(crate) fn unacked_bytes(fd: BorrowedFd<'_>) -> Option<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int through the pointer, which is live for the
    // call; the fd is borrowed for it.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    (rc == 0).then(|| u64::try_from(n).unwrap_or(0))
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of BPF's `bpf_ktime_get_ns`.
pub(crate) fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    #[test]
    fn unsafe_stays_in_the_sys_module() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        xfer_test_support::fence::assert_unsafe_only_in_sys(root);
    }

    #[test]
    fn an_unconnected_socket_has_nothing_unread() {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        assert_eq!(super::unread_bytes(s.as_fd()), Some(0));
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = super::monotonic_ns();
        let b = super::monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
