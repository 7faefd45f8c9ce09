//! Every system call of the binary, behind safe functions: the rest of the crate holds no
//! `unsafe` (a test below keeps it so). `rustix` where it has the call; `libc` only for
//! `getrusage`, which rustix does not offer.

use std::time::Duration;

/// User and system CPU time of the whole process (`getrusage(RUSAGE_SELF)`); `None` if the
/// kernel refuses (it does not for SELF).
pub fn process_cpu_times() -> Option<(Duration, Duration)> {
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

/// The calling thread's CPU time, user and system (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Whether the process runs with effective user id 0.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    #[test]
    fn unsafe_stays_in_the_sys_module() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        xfer_test_support::fence::assert_unsafe_only_in_sys(root);
    }

    #[test]
    fn thread_cpu_time_moves_with_work() {
        let before = super::thread_cpu_time();
        let mut x = 0u64;
        while super::thread_cpu_time() == before {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(super::thread_cpu_time() > before, "{x}");
    }
}
