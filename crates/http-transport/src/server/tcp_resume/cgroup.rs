//! The cgroup (v2) this process runs in, opened as a directory: where the `sock_ops` program
//! is linked, so it sees the sockets this server's listener creates.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use xfer_common::mechanisms::cgroup2_mount;

/// Open this process's cgroup v2 directory, under a cgroup2 file system already mounted in
/// this mount namespace. Where none is (`ip netns exec` remounts `/sys`, containers often hide
/// it) this fails and says so: a file server mounting file systems unasked would surprise its
/// operator.
pub(crate) fn open_own() -> io::Result<OwnedFd> {
    let own = own_path(&std::fs::read_to_string("/proc/self/cgroup")?).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "this process is in no cgroup v2 hierarchy (/proc/self/cgroup has no 0:: line)",
        )
    })?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    let root = cgroup2_mount(&mounts).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "no cgroup2 file system is mounted in this mount namespace (xfer never mounts one; \
             mount it, e.g. on /sys/fs/cgroup, to use TCP resume)",
        )
    })?;
    open_dir(&root.join(own.trim_start_matches('/')))
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    File::open(path)
        .map(OwnedFd::from)
        .map_err(|e| io::Error::new(e.kind(), format!("opening cgroup {}: {e}", path.display())))
}

/// The path of the `0::` (unified hierarchy) line of `/proc/self/cgroup`.
fn own_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_owned())
        .filter(|p| p.starts_with('/') && !p.split('/').any(|c| c == ".."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_unified_line_and_the_mount() {
        let cg = "9:name=systemd:/\n4:memory:/a/b\n0::/user.slice/x.scope\n";
        assert_eq!(own_path(cg).as_deref(), Some("/user.slice/x.scope"));
        assert_eq!(own_path("4:memory:/a\n"), None);
        assert_eq!(own_path("0::/a/../b\n"), None);
    }
}
