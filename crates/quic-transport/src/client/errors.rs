//! quinn's connection and stream errors as the engine's `TransferError`s, with their peer.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use quinn::{ConnectionError, ReadError, ReadExactError};
use xfer_common::tls;
use xfer_core::TransferError;

use crate::wire::{self, ErrorCode};

pub(super) fn protocol(peer: &str, e: &wire::WireError) -> TransferError {
    TransferError::Protocol {
        peer: peer.to_string(),
        message: e.to_string(),
    }
}

pub(super) fn read_exact_error(
    peer: &str,
    e: ReadExactError,
    what: &str,
    idle: Duration,
) -> TransferError {
    match e {
        ReadExactError::FinishedEarly(got) => TransferError::Protocol {
            peer: peer.to_string(),
            message: format!("stream ended inside the {what} after {got} bytes"),
        },
        ReadExactError::ReadError(e) => read_error(peer, e, what, idle),
    }
}

/// `idle` is the connection's idle timeout, named when the connection died of it.
pub(super) fn read_error(peer: &str, e: ReadError, what: &str, idle: Duration) -> TransferError {
    match e {
        ReadError::Reset(code) => TransferError::Protocol {
            peer: peer.to_string(),
            message: format!(
                "server reset the stream while sending the {what}: {}",
                describe_code(code.into_inner())
            ),
        },
        ReadError::ConnectionLost(e) => connection_error(peer, e, what, idle),
        other => TransferError::Io {
            peer: peer.to_string(),
            source: other.into(),
        },
    }
}

pub(super) fn describe_code(code: u64) -> String {
    match ErrorCode::from_code(code) {
        Some(c) => c.to_string(),
        None => format!("unknown code 0x{code:x}"),
    }
}

/// Resolves with a "connection refused" error if `addr`'s host answers datagrams with ICMP
/// port unreachable (nothing listens on that UDP port); never resolves otherwise.
///
/// quinn's endpoint socket is unconnected, so the kernel does not report ICMP errors to it and
/// a handshake to a closed port would wait out the whole connect timeout. A connected socket
/// beside it gets them: it sends a one-byte datagram, which a QUIC server drops as too short
/// to be a packet, a few times in case one is lost.
pub(super) async fn port_unreachable(addr: SocketAddr) -> io::Error {
    let local: SocketAddr = if addr.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let refused = |e: &io::Error| e.kind() == io::ErrorKind::ConnectionRefused;
    if let Ok(socket) = tokio::net::UdpSocket::bind(local).await {
        if socket.connect(addr).await.is_ok() {
            let mut buf = [0u8; 64];
            for wait in [100, 400, 1500].map(Duration::from_millis) {
                if let Err(e) = socket.send(&[0]).await {
                    if refused(&e) {
                        return refusal(addr);
                    }
                }
                if let Ok(Err(e)) = tokio::time::timeout(wait, socket.recv(&mut buf)).await {
                    if refused(&e) {
                        return refusal(addr);
                    }
                }
            }
        }
    }
    std::future::pending().await
}

pub(super) fn refusal(addr: SocketAddr) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionRefused,
        format!("nothing listens on UDP {addr} (ICMP port unreachable)"),
    )
}

/// The TLS `unknown_ca` alert (RFC 8446 §6.2).
pub(super) const UNKNOWN_CA_ALERT: u64 = 48;

/// Longest [`Transport::close`] waits for the endpoints' drivers to send the goodbyes.
pub(super) const CLOSE_GRACE: Duration = Duration::from_millis(50);

/// Classify a dead connection: TLS alerts (QUIC crypto errors 0x100-0x1ff) are not retried,
/// timeouts and everything else are. `idle` is the client's idle timeout: quinn ends a
/// connection that received nothing for the smaller of both ends' values, so a timeout names it.
pub(super) fn connection_error(
    peer: &str,
    e: ConnectionError,
    during: &str,
    idle: Duration,
) -> TransferError {
    let crypto = |code: u64| (0x100..0x200).contains(&code);
    match &e {
        // Our own verifier refused the server's certificate: rustls sends unknown_ca for an
        // unknown issuer (RFC 9001 §4.8: crypto error 0x100 + the TLS alert).
        ConnectionError::TransportError(t) if u64::from(t.code) == 0x100 + UNKNOWN_CA_ALERT => {
            TransferError::Tls {
                peer: peer.to_string(),
                message: format!("{e}: {}", tls::UNKNOWN_ISSUER_HINT),
            }
        }
        ConnectionError::TransportError(t) if crypto(u64::from(t.code)) => TransferError::Tls {
            peer: peer.to_string(),
            message: e.to_string(),
        },
        ConnectionError::ConnectionClosed(c) if crypto(u64::from(c.error_code)) => {
            TransferError::Tls {
                peer: peer.to_string(),
                message: e.to_string(),
            }
        }
        ConnectionError::TimedOut => TransferError::Timeout {
            peer: peer.to_string(),
            what: format!(
                "no packet from the server (quic idle timeout) during the {during}; \
                 the server is gone or the path is down"
            ),
            after: idle,
        },
        _ => TransferError::Io {
            peer: peer.to_string(),
            source: io::Error::new(io::ErrorKind::ConnectionAborted, format!("{during}: {e}")),
        },
    }
}
