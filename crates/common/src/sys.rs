//! Every system call of this crate that the standard library does not wrap, in one place:
//! the only module allowed `unsafe`. Callers pass borrowed descriptors (`AsFd`), so no raw
//! descriptor outlives the file or socket it belongs to; `rustix` is used wherever it offers
//! the call, `libc` only where it does not (integer socket options by number, `malloc_trim`).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// An integer socket option (`level`, `name`) of `socket`.
pub fn get_int_option(socket: &impl AsFd, level: i32, name: i32) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` live across the call and `len` holds `value`'s size; the
    // descriptor is borrowed, so it stays open for the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            level,
            name,
            std::ptr::addr_of_mut!(value).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Set an integer socket option (`level`, `name`) of `socket`.
pub fn set_int_option(socket: &impl AsFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: the value points to a live c_int whose size is passed alongside it; the
    // descriptor is borrowed, so it stays open for the call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_fd().as_raw_fd(),
            level,
            name,
            std::ptr::addr_of!(value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Give the calling thread the nice value `nice` (on Linux the value is per thread).
#[cfg(target_os = "linux")]
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice)
        .map_err(io::Error::from)
}

/// Hand glibc's free heap pages back to the kernel.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_heap() {
    // SAFETY: malloc_trim only walks glibc's own arenas; it takes no pointers from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_heap() {}

/// This host's name (`uname`'s node name), as the kernel gives it.
pub fn host_name() -> Option<String> {
    let uname = rustix::system::uname();
    uname.nodename().to_str().ok().map(str::to_string)
}

/// Make a FIFO at `path` (tests use one as a file that is not a regular file).
pub fn make_fifo(path: &std::path::Path, mode: u32) -> io::Result<()> {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(mode),
        0,
    )
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_options_round_trip() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        set_int_option(&s, libc::SOL_SOCKET, libc::SO_RCVBUF, 65536).expect("set");
        // The kernel doubles what it is given, for its own bookkeeping.
        assert!(get_int_option(&s, libc::SOL_SOCKET, libc::SO_RCVBUF).expect("get") >= 65536);
        assert!(
            get_int_option(&s, libc::SOL_SOCKET, -1).is_err(),
            "an unknown option"
        );
    }

    #[test]
    fn host_name_is_the_kernels() {
        let name = host_name().expect("a host name");
        let proc = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
        assert_eq!(name, proc.trim());
    }
}
