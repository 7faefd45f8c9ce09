//! The lab's own identity, and the children it starts, waits for and signals.

use std::io;
use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::time::Duration;

/// The effective user id.
pub(crate) fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Send `signal` to `pid`; a pid that has exited meanwhile is an error (`ESRCH`) callers may
/// ignore.
pub(crate) fn kill(pid: i32, signal: rustix::process::Signal) -> io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "pid 0"))?;
    rustix::process::kill_process(pid, signal)?;
    Ok(())
}

/// Make the child `cmd` starts receive SIGKILL when this process dies.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs between fork and exec; prctl is async-signal-safe and touches
    // only the child's own state, and it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            Ok(())
        });
    }
}

/// A child's end: its exit code (`None` when a signal ended it) and its CPU time.
pub(crate) struct Reaped {
    pub code: Option<i32>,
    pub cpu: Duration,
}

/// Reap child `pid` if it has exited (`wait4(WNOHANG)`, libc: rustix's waits give no usage).
/// `Ok(None)` while it runs.
pub(crate) fn try_reap(pid: i32) -> io::Result<Option<Reaped>> {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data written by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits only for our own child `pid`; pointers are valid for the call.
    let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
    if r == pid {
        let cpu = timeval(usage.ru_utime) + timeval(usage.ru_stime);
        let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        return Ok(Some(Reaped { code, cpu }));
    }
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(None)
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
}

/// Clock ticks per second, the unit of `/proc/<pid>/stat`'s CPU times.
pub(crate) fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}
