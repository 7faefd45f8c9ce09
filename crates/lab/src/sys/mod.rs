//! Every system call of the lab, behind safe functions that borrow their fds: the rest of the
//! crate holds no `unsafe` (a test below keeps it so). `rustix` where it has the call; `libc`
//! for what it lacks (the tun ioctls, `wait4` with its usage, per-thread CPU clocks,
//! `SCHED_FIFO`, the relay's `ppoll`, and the signal handler's async-signal-safe calls).

pub(crate) mod netns;
pub(crate) mod process;
pub(crate) mod relay;
pub(crate) mod signals;
pub(crate) mod tun;

#[cfg(test)]
mod tests {
    #[test]
    fn unsafe_stays_in_the_sys_module() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        xfer_test_support::fence::assert_unsafe_only_in_sys(root);
    }
}
