//! Signals to a child process a test spawned (Ctrl-C, reload, shutdown), without `unsafe`.

use std::io;

pub use rustix::process::Signal;

/// Send `signal` to process `pid` (as [`std::process::Child::id`] gives it).
pub fn send(pid: u32, signal: Signal) -> io::Result<()> {
    let target = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("pid {pid}")))?;
    rustix::process::kill_process(target, signal)
        .map_err(|e| io::Error::new(e.kind(), format!("kill({pid}, {signal:?}): {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminates_a_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("spawn sleep");
        send(child.id(), Signal::TERM).expect("signal the child");
        let status = child.wait().expect("reap the child");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(Signal::TERM.as_raw()));
    }
}
