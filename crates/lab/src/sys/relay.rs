//! The relay thread's calls: its stop eventfd, reads and writes on the tun devices, the
//! `ppoll` it sleeps in, its scheduling and the CPU clocks it reports. libc where the call is
//! on the relay's per-packet path or rustix lacks it, as before the move: the timing the lab
//! models depends on these staying exactly what they were.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::thread::JoinHandleExt as _;
use std::thread::JoinHandle;

/// A non-blocking, close-on-exec eventfd that starts at zero.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is checked.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: efd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(efd) })
}

/// Add one to eventfd `fd`, waking whoever polls it.
pub(crate) fn signal_eventfd(fd: BorrowedFd<'_>) {
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a live u64 to an eventfd the caller keeps open.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Write `bytes` to `fd` once; the caller retries on `Interrupted`.
pub(crate) fn write(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: bytes is a live slice; the fd stays open because it is borrowed.
    let r = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    if r >= 0 {
        Ok(r as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Read once from `fd` into `buf`; the caller retries on `Interrupted`.
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is a live, writable slice; the fd stays open because it is borrowed.
    let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if r >= 0 {
        Ok(r as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sleep until one of `fds` is readable or `timeout_ns` passes (`u64::MAX`: no limit).
/// Only the first `watched` of `fds` are watched. Returns how many are ready and whether the
/// first one is. On the stack: this runs at every wake-up of the relay.
pub(crate) fn poll_readable(
    fds: [BorrowedFd<'_>; 3],
    watched: usize,
    timeout_ns: u64,
) -> io::Result<(usize, bool)> {
    let mut polls = fds.map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    let nfds = watched.min(polls.len());
    let ts = (timeout_ns != u64::MAX).then_some(libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: polls and ts outlive the call, and the borrowed fds stay open; a null sigmask
    // keeps the current one.
    let n = unsafe {
        libc::ppoll(
            polls.as_mut_ptr(),
            nfds as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, polls[0].revents != 0))
}

/// Timer slack of the calling thread, nanoseconds.
pub(crate) fn set_timer_slack_ns(ns: u64) {
    // SAFETY: prctl with an integer argument; affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong) };
}

/// Real-time FIFO scheduling at `priority` for the calling thread.
pub(crate) fn set_fifo_priority(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; param outlives the call.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// CPU time of a thread not joined yet, nanoseconds.
pub(crate) fn thread_cpu_ns<T>(handle: &JoinHandle<T>) -> Option<u64> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the thread is not joined yet (the handle is borrowed), so its pthread_t is valid.
    if unsafe { libc::pthread_getcpuclockid(handle.as_pthread_t(), &mut clock) } != 0 {
        return None;
    }
    clock_ns(clock)
}

/// The calling thread's CPU time, nanoseconds.
pub(crate) fn own_cpu_ns() -> Option<u64> {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `CLOCK_MONOTONIC`, nanoseconds.
pub(crate) fn monotonic_ns() -> Option<u64> {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}
