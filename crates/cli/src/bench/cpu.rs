//! CPU time this process has used, from `getrusage(RUSAGE_SELF)`: user and system seconds,
//! all threads together. Says nothing about other processes (the servers, when separate).

use std::time::Duration;

/// User and system CPU time at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTimes {
    /// The process's CPU time so far; zero if the kernel refuses (it does not for SELF).
    pub fn now() -> Self {
        // SAFETY: `usage` is a plain C struct that getrusage fills; zeroed is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: RUSAGE_SELF with a valid, writable pointer is the documented use.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
        if rc != 0 {
            return Self::default();
        }
        let tv = |t: libc::timeval| {
            Duration::new(
                u64::try_from(t.tv_sec).unwrap_or(0),
                u32::try_from(t.tv_usec).unwrap_or(0).saturating_mul(1000),
            )
        };
        Self {
            user: tv(usage.ru_utime),
            system: tv(usage.ru_stime),
        }
    }

    /// Time used between `earlier` and `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_moves_forward_when_working() {
        let a = CpuTimes::now();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let d = CpuTimes::now().since(&a);
        assert!(d.user + d.system > Duration::ZERO, "{x}");
    }
}
