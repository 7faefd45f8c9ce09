//! The MTU the kernel holds for a connected socket's route (`IP_MTU` / `IPV6_MTU`): the first
//! hop's, or a smaller one it learnt from ICMP. Read on TCP sockets (`xfer doctor`) and on UDP
//! sockets (the largest QUIC datagram) alike.

/// The route MTU of connected `socket`, bytes; `v6` says which option to read. `None` where the
/// socket is not connected or the platform does not say.
#[cfg(target_os = "linux")]
pub fn route_mtu<S: std::os::fd::AsFd>(socket: &S, v6: bool) -> Option<u32> {
    crate::sys::route_mtu(socket.as_fd(), v6)
}

#[cfg(not(target_os = "linux"))]
pub fn route_mtu<S>(_socket: &S, _v6: bool) -> Option<u32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_a_large_mtu_and_unconnected_has_none() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
        if cfg!(target_os = "linux") {
            assert_eq!(route_mtu(&socket, false), None, "not connected yet");
            socket
                .connect("127.0.0.1:9")
                .expect("connect sends nothing");
            // Linux's loopback MTU is 65536.
            assert!(route_mtu(&socket, false).is_some_and(|m| m > 1500));
        }
    }
}
