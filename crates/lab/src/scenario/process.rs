//! Child processes of a run: spawned so they die with us, waited for with a deadline, their
//! CPU time taken from `wait4`'s resource usage (clients) or `/proc/<pid>/stat` (servers that
//! keep running across runs).

use std::process::Command;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::sys::process;

/// How a child ended.
#[derive(Debug, Clone, Copy)]
pub struct Finished {
    /// Exit code, or `None` when killed by a signal.
    pub code: Option<i32>,
    /// Killed by us at the deadline.
    pub timed_out: bool,
    /// Wall time from spawn to exit.
    pub wall: Duration,
    /// User + system CPU time of the child (and of any children it waited for).
    pub cpu: Duration,
}

/// Makes the child get SIGKILL when the thread that spawned it dies, so an interrupted run
/// leaves no server or client behind inside a namespace that is gone. `ip netns exec` execs
/// the program in place, which keeps this setting.
pub fn die_with_parent(cmd: &mut Command) {
    crate::sys::process::die_with_parent(cmd);
}

/// Waits for `pid` (a child of this process) until it exits or `deadline` passes; then sends
/// SIGTERM, and SIGKILL after a grace second. Reaps it and reports its CPU time.
pub fn wait_with_deadline(
    pid: u32,
    started: Instant,
    limit: Duration,
) -> std::io::Result<Finished> {
    let pid = pid as i32;
    let mut timed_out = false;
    let mut term_sent_at: Option<Instant> = None;
    loop {
        match process::try_reap(pid) {
            Ok(Some(process::Reaped { code, cpu })) => {
                return Ok(Finished {
                    code,
                    timed_out,
                    wall: started.elapsed(),
                    cpu,
                });
            }
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        let now = Instant::now();
        match term_sent_at {
            None if now.duration_since(started) >= limit => {
                timed_out = true;
                term_sent_at = Some(now);
                // Our own unreaped child, which cannot be a recycled pid.
                let _ = process::kill(pid, Signal::TERM);
            }
            Some(at) if now.duration_since(at) >= Duration::from_secs(1) => {
                let _ = process::kill(pid, Signal::KILL);
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops a long-running child (a server): SIGTERM, then SIGKILL after `grace`, and reaps it.
pub fn stop(child: &mut std::process::Child, grace: Duration) {
    // Our own child, not yet reaped (we own the Child).
    let _ = process::kill(child.id() as i32, Signal::TERM);
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// User + system CPU time of a running process and all its threads, from `/proc/<pid>/stat`.
pub fn proc_cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')', field 0 is the state (field 3 of the man page); utime and stime are 14, 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ticks = process::clock_ticks_per_second();
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    Some(Duration::from_secs_f64((utime + stime) as f64 / ticks))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The children are reaped by `wait_with_deadline` (wait4), which clippy cannot see.
    #[test]
    #[allow(clippy::zombie_processes)]
    fn cpu_time_of_a_busy_child_is_counted() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"]);
        die_with_parent(&mut cmd);
        let started = Instant::now();
        let child = cmd.spawn().unwrap_or_else(|e| panic!("sh: {e}"));
        let f = wait_with_deadline(child.id(), started, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("wait: {e}"));
        assert_eq!(f.code, Some(0));
        assert!(!f.timed_out);
        assert!(f.cpu > Duration::ZERO, "{f:?}");
    }

    #[test]
    #[allow(clippy::zombie_processes)]
    fn deadline_kills_the_child() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let started = Instant::now();
        let child = cmd.spawn().unwrap_or_else(|e| panic!("sleep: {e}"));
        let f = wait_with_deadline(child.id(), started, Duration::from_millis(200))
            .unwrap_or_else(|e| panic!("wait: {e}"));
        assert!(f.timed_out);
        assert_eq!(f.code, None);
    }

    #[test]
    fn own_cpu_time_is_readable() {
        assert!(proc_cpu_time(std::process::id()).is_some());
    }
}
