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
    set_buffer(
        &socket,
        Direction::Send,
        tuning.udp_send_buffer,
        tuning.force_buffers,
    );
    set_buffer(
        &socket,
        Direction::Recv,
        tuning.udp_recv_buffer,
        tuning.force_buffers,
    );
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    let granted = SocketBuffers {
        send: socket.send_buffer_size().unwrap_or(0),
        recv: socket.recv_buffer_size().unwrap_or(0),
    };
    // The kernel reports double what was granted; less than the request means it clamped.
    if (granted.send < tuning.udp_send_buffer || granted.recv < tuning.udp_recv_buffer)
        && !CLAMP_WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(
            requested_send = tuning.udp_send_buffer,
            requested_recv = tuning.udp_recv_buffer,
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
            udp_send_buffer: 1 << 20,
            udp_recv_buffer: 1 << 20,
            ..QuicTuning::default()
        };
        let (sock, granted) =
            bind_udp("127.0.0.1:0".parse().expect("literal address"), &tuning).expect("bind");
        assert!(sock.local_addr().expect("bound").port() != 0);
        assert!(granted.send > 0 && granted.recv > 0);
    }
}
