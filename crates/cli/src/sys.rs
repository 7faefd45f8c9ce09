//! Every system call of the binary, behind safe functions: the rest of the crate holds no
//! `unsafe` (a test below keeps it so). `rustix` where it has the call; `libc` only for
//! `getrusage` and glibc's `mallopt`, which rustix does not offer.

use std::time::Duration;

/// `getrusage(who)`; `None` if the kernel refuses (it does not for SELF, nor THREAD on Linux).
fn rusage(who: libc::c_int) -> Option<libc::rusage> {
    // SAFETY: `usage` is a plain C struct that getrusage fills; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` with a valid, writable pointer is the documented use.
    let rc = unsafe { libc::getrusage(who, &mut usage) };
    (rc == 0).then_some(usage)
}

/// User and system CPU time of the whole process (`getrusage(RUSAGE_SELF)`).
pub fn process_cpu_times() -> Option<(Duration, Duration)> {
    let usage = rusage(libc::RUSAGE_SELF)?;
    let tv = |t: libc::timeval| {
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_usec).unwrap_or(0).saturating_mul(1000),
        )
    };
    Some((tv(usage.ru_utime), tv(usage.ru_stime)))
}

/// Let glibc keep freed heap memory for the next allocation instead of handing it back to the
/// kernel: allocations up to 32 MiB come from the heap (not one `mmap` each) and up to 64 MiB
/// of free memory stay at the top of each heap. A client receives into buffers of 64 KiB to
/// 1 MiB that are freed on other threads; glibc's defaults gave their pages back
/// (`madvise`) as soon as a heap's top held 2 MiB free, and the next buffer faulted every page
/// in again, 8 % of a QUIC client's CPU (docs/results.md, "The client keeps its freed heap").
/// Left alone when `GLIBC_TUNABLES` sets malloc's tunables: the user's choice wins.
/// Returns whether the settings were applied.
pub fn keep_freed_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("malloc.")) {
            return false;
        }
        // SAFETY: mallopt only changes glibc's own allocator parameters; both values are
        // within the ranges glibc documents (the mmap threshold's maximum is 32 MiB on 64-bit).
        let rc = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20)
                & libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20)
        };
        rc == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Minor page faults of the calling thread so far (`getrusage(RUSAGE_THREAD)`).
#[cfg(all(test, target_os = "linux"))]
fn thread_minor_faults() -> u64 {
    let usage = rusage(libc::RUSAGE_THREAD).expect("getrusage(RUSAGE_THREAD)");
    u64::try_from(usage.ru_minflt).unwrap_or(0)
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

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_buffers_come_back_without_faulting_their_pages_in() {
        // Fill and free 16 MiB in 1 MiB buffers three times on one thread: with the heap kept,
        // the second and third rounds reuse pages already mapped; with glibc's defaults each
        // round faults its 4,096 pages in again.
        std::thread::spawn(|| {
            assert!(super::keep_freed_heap(), "mallopt refused");
            let mut faults = Vec::new();
            for _ in 0..3 {
                let before = super::thread_minor_faults();
                let bufs: Vec<Vec<u8>> = (0..16).map(|_| vec![1u8; 1 << 20]).collect();
                std::hint::black_box(&bufs);
                drop(bufs);
                faults.push(super::thread_minor_faults() - before);
            }
            assert!(
                faults[1] < 512 && faults[2] < 512,
                "minor faults per round: {faults:?}"
            );
        })
        .join()
        .expect("test thread");
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
