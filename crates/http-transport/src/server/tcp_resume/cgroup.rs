//! The cgroup (v2) this process runs in, opened as a directory: where the `sock_ops` program
//! is linked, so it sees the sockets this server's listener creates.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Open this process's cgroup v2 directory. Where no cgroup2 file system is mounted in this
/// mount namespace (`ip netns exec` remounts `/sys`, containers often hide it), mount one on a
/// private temporary directory, open the directory, and detach the mount again at once: the
/// open descriptor is all the link needs.
pub(crate) fn open_own() -> io::Result<OwnedFd> {
    let own = own_path(&std::fs::read_to_string("/proc/self/cgroup")?).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "this process is in no cgroup v2 hierarchy (/proc/self/cgroup has no 0:: line)",
        )
    })?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    if let Some(root) = cgroup2_mount(&mounts) {
        return open_dir(&root.join(own.trim_start_matches('/')));
    }
    let dir = std::env::temp_dir().join(format!("xfer-cgroup2-{}", std::process::id()));
    std::fs::create_dir(&dir)?;
    let mounted = mount_and_open(&dir, &own);
    let _ = std::fs::remove_dir(&dir);
    mounted
}

fn mount_and_open(dir: &Path, own: &str) -> io::Result<OwnedFd> {
    let target = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
    let fstype = CString::new("cgroup2").map_err(io::Error::other)?;
    // SAFETY: all three strings are NUL-terminated and live across the call.
    let r = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("no cgroup2 file system is mounted here and mounting one failed: {e}"),
        ));
    }
    let opened = open_dir(&dir.join(own.trim_start_matches('/')));
    // SAFETY: target is the NUL-terminated path mounted above.
    unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    opened
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

/// Where a cgroup2 file system is mounted, from `/proc/self/mountinfo`: the mount point
/// (field 5) of a line whose file system type (after ` - `) is `cgroup2`. Octal escapes in
/// the mount point (`\040` for a space) are decoded.
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let point = left.split_whitespace().nth(4)?;
        Some(PathBuf::from(unescape(point)))
    })
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
        let mi = "22 1 0:21 / /sys rw - sysfs sysfs rw\n\
                  30 22 0:26 / /sys/fs/cgroup/uni\\040fied rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(mi),
            Some(PathBuf::from("/sys/fs/cgroup/uni fied"))
        );
        assert_eq!(
            cgroup2_mount("22 1 0:21 / /sys rw - sysfs sysfs rw\n"),
            None
        );
    }
}
