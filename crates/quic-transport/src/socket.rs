//! The UDP socket under a quinn endpoint, created here so its buffers can be sized.
//!
//! quinn binds with the kernel's default buffers (about 208 KiB), which overflow under a
//! 1 Gbit/s flow; dropped datagrams then read as congestion. This module binds with socket2,
//! asks for [`QuicTuning::udp_send_buffer`]/[`QuicTuning::udp_recv_buffer`] (forcing past
//! `net.core.[wr]mem_max` when privileged), reads back what the kernel granted and warns once
//! per process when it clamped. It does not build the quinn endpoint.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};

use socket2::{Domain, Protocol, Socket, Type};
use xfer_common::sockbuf::{self, Direction};

use crate::tuning::QuicTuning;

/// What the kernel granted for a socket, bytes (Linux reports twice the requested value, half of
/// it for bookkeeping; these are the reported values, as `ss -m` shows them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketBuffers {
    pub send: usize,
    pub recv: usize,
}

static CLAMP_WARNED: AtomicBool = AtomicBool::new(false);

/// Bind a UDP socket at `addr` with the tuned buffers, non-blocking, ready for
/// `quinn::Endpoint::new`.
pub fn bind_udp(addr: SocketAddr, tuning: &QuicTuning) -> io::Result<(UdpSocket, SocketBuffers)> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        // Dual-stack when bound to [::], as quinn does for its own sockets.
        let _ = socket.set_only_v6(false);
    }
    let send = tuning.udp_send_buffer.and_then(|v| usize::try_from(v).ok());
    let recv = tuning.udp_recv_buffer.and_then(|v| usize::try_from(v).ok());
    if let Some(size) = send {
        set_buffer(&socket, Direction::Send, size, tuning.force_buffers);
    }
    if let Some(size) = recv {
        set_buffer(&socket, Direction::Recv, size, tuning.force_buffers);
    }
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    let granted = SocketBuffers {
        send: socket.send_buffer_size().unwrap_or(0),
        recv: socket.recv_buffer_size().unwrap_or(0),
    };
    // The kernel reports double what was granted; less than the request means it clamped.
    let clamped = |asked: Option<usize>, got: usize| asked.is_some_and(|a| got < a);
    if (clamped(send, granted.send) || clamped(recv, granted.recv))
        && !CLAMP_WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(
            requested_send = ?send,
            requested_recv = ?recv,
            granted_send = granted.send,
            granted_recv = granted.recv,
            "kernel clamped the udp socket buffers; raise net.core.wmem_max/rmem_max or run \
             with CAP_NET_ADMIN, or expect drops above a few hundred Mbit/s"
        );
    }
    Ok((socket.into(), granted))
}

fn set_buffer(socket: &Socket, dir: Direction, size: usize, force: bool) {
    if let Err(e) = sockbuf::request(socket, dir, size, force) {
        tracing::debug!(size, error = %e, "setting udp socket buffer failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_loopback_and_reports_buffers() {
        let tuning = QuicTuning {
            udp_send_buffer: Some(1 << 20),
            udp_recv_buffer: Some(1 << 20),
            ..QuicTuning::default()
        };
        let (sock, granted) =
            bind_udp("127.0.0.1:0".parse().expect("literal address"), &tuning).expect("bind");
        assert!(sock.local_addr().expect("bound").port() != 0);
        assert!(granted.send > 0 && granted.recv > 0);
    }
}
