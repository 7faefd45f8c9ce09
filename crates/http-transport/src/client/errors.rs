//! Turning hyper, rustls and socket errors into [`TransferError`]s that name the peer.

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use xfer_core::TransferError;

use crate::tcp::TcpError;

pub(crate) use xfer_core::error::error_chain as chain;

fn find_io<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a io::Error> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<io::Error>() {
            return Some(io);
        }
        cur = c.source();
    }
    None
}

/// A hyper failure while sending a request or reading a response head.
pub(crate) fn from_hyper(peer: &str, what: &str, e: &hyper::Error) -> TransferError {
    if let Some(io) = find_io(e) {
        return TransferError::Io {
            peer: peer.to_string(),
            source: io::Error::new(io.kind(), format!("{what}: {}", chain(e))),
        };
    }
    if e.is_canceled() || e.is_closed() || e.is_incomplete_message() {
        return TransferError::Io {
            peer: peer.to_string(),
            source: io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("{what}: {}", chain(e)),
            ),
        };
    }
    if e.is_timeout() {
        return TransferError::Timeout {
            peer: peer.to_string(),
            what: what.to_string(),
            after: Duration::ZERO,
        };
    }
    TransferError::Protocol {
        peer: peer.to_string(),
        message: format!("{what}: {}", chain(e)),
    }
}

/// A failure while connecting or tuning the socket.
pub(crate) fn from_tcp(peer: &str, e: TcpError) -> TransferError {
    match e {
        TcpError::Connect { source, .. } => TransferError::Connect {
            peer: peer.to_string(),
            source,
        },
        TcpError::ConnectTimeout { after, .. } => TransferError::Timeout {
            peer: peer.to_string(),
            what: "connect".to_string(),
            after,
        },
        // Socket options that cannot be applied are a configuration problem, not a transient
        // one: retrying on another connection would fail the same way.
        e @ (TcpError::Option { .. } | TcpError::CongestionUnavailable { .. }) => {
            TransferError::Config(format!("connecting to {peer}: {}", chain(&e)))
        }
    }
}

/// A failure during the TLS handshake: certificate and protocol problems are [`TransferError::Tls`]
/// (not retried); a connection that merely broke is [`TransferError::Io`].
pub(crate) fn from_tls_handshake(peer: &str, e: io::Error) -> TransferError {
    let rustls_err = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match rustls_err {
        Some(tls) => TransferError::Tls {
            peer: peer.to_string(),
            message: xfer_common::tls::handshake_error_message(tls),
        },
        None => TransferError::Io {
            peer: peer.to_string(),
            source: e,
        },
    }
}
