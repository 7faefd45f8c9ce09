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
        crate::sys::process_cpu_times()
            .map(|(user, system)| Self { user, system })
            .unwrap_or_default()
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
