//! Socket buffer sizing, for TCP (HTTP) and UDP (QUIC) sockets alike: ask for a size, forcing
//! past `net.core.wmem_max`/`rmem_max` when the process may (`CAP_NET_ADMIN`), else the plain
//! option, which the kernel clamps to those maxima. Callers read back what was granted.

use std::io;

use socket2::Socket;

/// Which buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `SO_SNDBUF`
    Send,
    /// `SO_RCVBUF`
    Recv,
}

/// Ask for `size` bytes: `SO_*BUFFORCE` first when `force`, `SO_*BUF` otherwise or when that is
/// refused. Errors only when the plain option fails too.
pub fn request(socket: &Socket, dir: Direction, size: usize, force: bool) -> io::Result<()> {
    if force && set_forced(socket, dir, size).is_ok() {
        return Ok(());
    }
    match dir {
        Direction::Send => socket.set_send_buffer_size(size),
        Direction::Recv => socket.set_recv_buffer_size(size),
    }
}

/// `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE`: beyond the sysctl maxima, with `CAP_NET_ADMIN`.
#[cfg(target_os = "linux")]
pub fn set_forced(socket: &Socket, dir: Direction, size: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;

    let opt = match dir {
        Direction::Send => libc::SO_SNDBUFFORCE,
        Direction::Recv => libc::SO_RCVBUFFORCE,
    };
    let value = libc::c_int::try_from(size)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "buffer size exceeds c_int"))?;
    // SAFETY: the fd is open for the lifetime of `socket`, and the option value points to a
    // c_int whose size is passed alongside it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
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

#[cfg(not(target_os = "linux"))]
pub fn set_forced(_socket: &Socket, _dir: Direction, _size: usize) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "forced socket buffers are linux-only",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Type};

    #[test]
    fn plain_request_is_granted_within_limits() {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        request(&s, Direction::Recv, 64 << 10, false).unwrap();
        // Linux reports twice the accepted value.
        assert!(s.recv_buffer_size().unwrap() >= 64 << 10);
    }
}
