//! Moving a thread into a network namespace.

use std::io;
use std::os::fd::AsFd;

/// Move the calling thread (only it: `CLONE_NEWNET` on a thread) into the namespace `handle`
/// refers to (an open `/var/run/netns/<name>`).
pub(crate) fn enter_net_namespace(handle: impl AsFd) -> io::Result<()> {
    rustix::thread::move_into_link_name_space(
        handle.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )?;
    Ok(())
}
