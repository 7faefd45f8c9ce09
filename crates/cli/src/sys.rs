//! The binary's system calls that the standard library does not wrap, in one place: the only
//! module allowed `unsafe`. `rustix` where it offers the call; `getrusage` it does not.
#![allow(unsafe_code)]

use std::time::Duration;

/// Whether the process runs with effective user id 0.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The calling thread's CPU time (user and system).
pub fn thread_cpu() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// The process's user and system CPU time so far; `None` if the kernel refuses (it does not
/// for the calling process).
pub fn process_cpu() -> Option<(Duration, Duration)> {
    // SAFETY: `usage` is a plain C struct that getrusage fills; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid, writable pointer is the documented use.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return None;
    }
    let tv = |t: libc::timeval| {
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_usec).unwrap_or(0).saturating_mul(1000),
        )
    };
    Some((tv(usage.ru_utime), tv(usage.ru_stime)))
}
