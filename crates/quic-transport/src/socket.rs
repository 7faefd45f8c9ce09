//! The UDP socket under a quinn endpoint, created here so its buffers can be sized.
//!
//! quinn binds with the kernel's default buffers (about 208 KiB), which overflow under a
//! 1 Gbit/s flow; dropped datagrams then read as congestion. This module binds with socket2,
//! asks for [`QuicTuning::udp_send_buffer`]/[`QuicTuning::udp_recv_buffer`] (forcing past
//! `net.core.[wr]mem_max` when privileged), reads back what the kernel granted and warns once
//! per process when it clamped. It does not build the quinn endpoint.
//!
//! It also answers two questions the endpoint's configuration depends on: how many datagrams
//! one system call may carry ([`Offload`]: GSO and GRO, as quinn-udp set them up on the
//! socket), and how large a datagram the route to a peer takes ([`route_max_udp_payload`]).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};
use xfer_common::sockbuf::{self, Direction};

use crate::send_batch::SplitBatches;
use crate::tuning::QuicTuning;

/// What the kernel granted for a socket, bytes (Linux reports twice the requested value, half of
/// it for bookkeeping; these are the reported values, as `ss -m` shows them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketBuffers {
    pub send: usize,
    pub recv: usize,
}

/// Datagrams per system call the socket allows, as quinn-udp found them when it set the socket
/// up: 1 means no offload (one datagram per send, or per receive slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offload {
    /// Segments one GSO send may carry (`UDP_SEGMENT`); quinn sends at most 10 at once.
    pub gso_segments: usize,
    /// Segments one GRO receive may return (`UDP_GRO`).
    pub gro_segments: usize,
}

/// Hand `socket` to quinn's runtime, with batches too large for one send split
/// ([`SplitBatches`]), and report what offload the kernel granted it. Log once
/// per socket at debug level, so a capture of a slow run shows whether GSO/GRO were on.
pub fn wrap_for_quinn(
    socket: UdpSocket,
    runtime: &dyn quinn::Runtime,
) -> io::Result<(Arc<dyn quinn::AsyncUdpSocket>, Offload)> {
    let socket: Arc<dyn quinn::AsyncUdpSocket> =
        Arc::new(SplitBatches::new(runtime.wrap_udp_socket(socket)?));
    let offload = Offload {
        gso_segments: socket.max_transmit_segments(),
        gro_segments: socket.max_receive_segments(),
    };
    tracing::debug!(
        local = ?socket.local_addr().ok(),
        gso_segments = offload.gso_segments,
        gro_segments = offload.gro_segments,
        "udp offload"
    );
    Ok((socket, offload))
}

/// IPv4 (20) or IPv6 (40) header plus the UDP header (8).
fn ip_udp_overhead(peer: &SocketAddr) -> u16 {
    if peer.is_ipv4() {
        28
    } else {
        48
    }
}

/// Largest UDP payload the route to `peer` takes without fragmentation, bytes: the MTU the
/// kernel holds for that route (the first hop's, or a smaller one it learnt), less IP and UDP
/// headers. `None` where the kernel does not say. Connecting a UDP socket sends nothing; it only
/// looks the route up.
pub fn route_max_udp_payload(peer: SocketAddr) -> Option<u16> {
    let local: SocketAddr = if peer.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).ok()?;
    socket.connect(peer).ok()?;
    let mtu = xfer_common::path_mtu::route_mtu(&socket, peer.is_ipv6())?;
    let payload = mtu.saturating_sub(u32::from(ip_udp_overhead(&peer)));
    Some(u16::try_from(payload).unwrap_or(u16::MAX))
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

    #[test]
    fn loopback_route_takes_large_datagrams() {
        // Linux's loopback MTU is 65536: far above an Ethernet payload. Elsewhere the kernel
        // may not say.
        let payload = route_max_udp_payload("127.0.0.1:9".parse().expect("literal address"));
        if cfg!(target_os = "linux") {
            assert!(
                payload.is_some_and(|p| p > 1472),
                "loopback payload {payload:?}"
            );
        }
    }

    #[tokio::test]
    async fn quinn_reports_offload() {
        let (sock, _) = bind_udp(
            "127.0.0.1:0".parse().expect("literal address"),
            &QuicTuning::default(),
        )
        .expect("bind");
        let runtime = quinn::default_runtime().expect("inside a tokio runtime");
        let (_, offload) = wrap_for_quinn(sock, runtime.as_ref()).expect("wrap");
        assert!(offload.gso_segments >= 1 && offload.gro_segments >= 1);
    }
}
