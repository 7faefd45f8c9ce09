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
    let opt = match dir {
        Direction::Send => libc::SO_SNDBUFFORCE,
        Direction::Recv => libc::SO_RCVBUFFORCE,
    };
    let value = libc::c_int::try_from(size)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "buffer size exceeds c_int"))?;
    set_sol_socket(socket, opt, value)
}

#[cfg(not(target_os = "linux"))]
pub fn set_forced(_socket: &Socket, _dir: Direction, _size: usize) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "forced socket buffers are linux-only",
    ))
}

/// Start the buffer at `size` bytes and leave the kernel's autotuning free to grow it from
/// there: request it (forced when `force` and allowed), then clear the lock that setting a
/// size puts on it (`SO_BUF_LOCK`, Linux 5.14+). Returns the usable size the socket starts
/// with, or `None`, with the socket untouched, on a kernel without `SO_BUF_LOCK`: a size the
/// kernel could not unlock again would cap the connection for its whole life. A socket whose
/// default (`tcp_rmem[1]`/`tcp_wmem[1]`) is already as large, or larger than what the plain
/// option may grant (`net.core.[rw]mem_max` without `CAP_NET_ADMIN`), is left as it is.
#[cfg(target_os = "linux")]
pub fn start_at(
    socket: &Socket,
    dir: Direction,
    size: usize,
    force: bool,
) -> io::Result<Option<usize>> {
    let Ok(locks) = get_sol_socket(socket, libc::SO_BUF_LOCK) else {
        return Ok(None);
    };
    // The kernel reports (and accounts) twice the usable size.
    let current = || match dir {
        Direction::Send => socket.send_buffer_size(),
        Direction::Recv => socket.recv_buffer_size(),
    };
    let before = current()?;
    if before / 2 >= size {
        return Ok(Some(before / 2));
    }
    if !(force && set_forced(socket, dir, size).is_ok()) {
        if mem_max(dir).is_some_and(|max| max.min(size).saturating_mul(2) <= before) {
            return Ok(Some(before / 2));
        }
        request(socket, dir, size, false)?;
    }
    let bit = match dir {
        Direction::Send => SNDBUF_LOCK,
        Direction::Recv => RCVBUF_LOCK,
    };
    // Keep the other direction's lock as it was (a fixed size the caller set on purpose).
    set_sol_socket(socket, libc::SO_BUF_LOCK, locks & !bit)?;
    Ok(Some(current()? / 2))
}

/// `net.core.wmem_max` / `rmem_max`, read once: the most the plain options grant.
#[cfg(target_os = "linux")]
fn mem_max(dir: Direction) -> Option<usize> {
    use std::sync::OnceLock;

    fn read(key: &str) -> Option<usize> {
        std::fs::read_to_string(format!("/proc/sys/net/core/{key}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
    static SEND: OnceLock<Option<usize>> = OnceLock::new();
    static RECV: OnceLock<Option<usize>> = OnceLock::new();
    match dir {
        Direction::Send => *SEND.get_or_init(|| read("wmem_max")),
        Direction::Recv => *RECV.get_or_init(|| read("rmem_max")),
    }
}

#[cfg(not(target_os = "linux"))]
pub fn start_at(
    _socket: &Socket,
    _dir: Direction,
    _size: usize,
    _force: bool,
) -> io::Result<Option<usize>> {
    Ok(None)
}

/// `SOCK_SNDBUF_LOCK` and `SOCK_RCVBUF_LOCK`, the bits of `SO_BUF_LOCK` (include/net/sock.h).
#[cfg(target_os = "linux")]
const SNDBUF_LOCK: libc::c_int = 1;
#[cfg(target_os = "linux")]
const RCVBUF_LOCK: libc::c_int = 2;

#[cfg(target_os = "linux")]
fn get_sol_socket(socket: &Socket, opt: libc::c_int) -> io::Result<libc::c_int> {
    use std::os::fd::AsFd;
    crate::sockopt::get_int(socket.as_fd(), libc::SOL_SOCKET, opt)
}

#[cfg(target_os = "linux")]
fn set_sol_socket(socket: &Socket, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsFd;
    crate::sockopt::set_int(socket.as_fd(), libc::SOL_SOCKET, opt, value)
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

    #[cfg(target_os = "linux")]
    #[test]
    fn a_started_buffer_is_left_unlocked_and_the_other_lock_kept() {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.set_send_buffer_size(256 << 10).unwrap();
        let Some(granted) = start_at(&s, Direction::Recv, 128 << 10, false).unwrap() else {
            xfer_test_support::gate::absent(
                "a_started_buffer_is_left_unlocked_and_the_other_lock_kept",
                "this kernel has no SO_BUF_LOCK (Linux 5.14+)",
            );
            return;
        };
        assert!(granted >= 64 << 10, "granted {granted}");
        let locks = get_sol_socket(&s, libc::SO_BUF_LOCK).unwrap();
        assert_eq!(locks & RCVBUF_LOCK, 0, "receive buffer still locked");
        assert_eq!(locks & SNDBUF_LOCK, SNDBUF_LOCK, "send buffer lock lost");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_head_start_below_the_default_changes_nothing() {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let before = s.recv_buffer_size().unwrap();
        let got = start_at(&s, Direction::Recv, 4096, true).unwrap();
        if got.is_none() {
            xfer_test_support::gate::absent(
                "a_head_start_below_the_default_changes_nothing",
                "this kernel has no SO_BUF_LOCK (Linux 5.14+)",
            );
            return;
        }
        assert_eq!(got, Some(before / 2));
        assert_eq!(
            s.recv_buffer_size().unwrap(),
            before,
            "default buffer replaced"
        );
        assert_eq!(get_sol_socket(&s, libc::SO_BUF_LOCK).unwrap(), 0);
    }
}
