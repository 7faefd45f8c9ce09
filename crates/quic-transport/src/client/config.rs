//! Client settings and the quinn transport configuration built from them.

use std::time::Duration;

use xfer_common::secret::Secret;
use xfer_common::tls::ClientTlsOptions;

use crate::tuning::{ConfigError, QuicTuning};
use xfer_core::layout::{LaneLayout, Lanes};

/// Client settings.
#[derive(Debug, Clone, PartialEq)]
pub struct QuicClientConfig {
    /// QUIC windows, congestion control, MTU, UDP buffers.
    pub tuning: QuicTuning,
    /// Whom to trust.
    pub tls: ClientTlsOptions,
    /// Lanes as M connections × K streams. Default M = 2: one quinn connection is driven by
    /// about one core (crypto and packet processing), so a second one uses the other core of a
    /// small machine; more than the core count gains nothing. Allowed 1 to 64. Default K = 4:
    /// enough parallel requests to hide per-request round trips; the connection window
    /// (64 MiB) holds four full 16 MiB stream windows. Allowed 1 to 1024 (the server's stream
    /// cap must allow it).
    pub lanes: LaneLayout,
    /// Limit on name resolution plus handshake. Default 10 s. Allowed 1 ms to 10 min.
    pub connect_timeout: Duration,
    /// A connection with no packets for this long is dead (quinn's idle timeout; the smaller
    /// of both ends' values applies): a server that vanished is given up within it. Keep-alives
    /// go out every third of it, at most 1 s apart, so an idle but healthy connection survives
    /// and a restarted server is noticed within about a second. Also bounds the wait for a response head and for each
    /// read of a body: a stream that delivers nothing for this long fails (retryable) even
    /// while its connection lives. Default 30 s. Allowed 1 s to 1 h.
    pub idle_timeout: Duration,
    /// Bearer token sent with every request. Default none.
    pub token: Option<Secret>,
}

impl Default for QuicClientConfig {
    fn default() -> Self {
        Self {
            tuning: QuicTuning::default(),
            tls: ClientTlsOptions::default(),
            lanes: LaneLayout::default(),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            token: None,
        }
    }
}

impl QuicClientConfig {
    /// The layout with QUIC's defaults (2 × 4) filled in.
    pub fn layout(&self) -> Lanes {
        self.lanes.resolve(Lanes::new(2, 4))
    }

    /// Reject values outside what the client supports, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.tuning.validate()?;
        self.lanes.validate(64, 1024, "1 to 64", "1 to 1024")?;
        if let Some(Err(why)) = self.token.as_ref().map(Secret::check_bearer) {
            return Err(ConfigError::new("token", "(not shown)", why));
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(600)).contains(&self.connect_timeout) {
            return Err(ConfigError::new(
                "connect_timeout",
                format!("{:?}", self.connect_timeout),
                "1 ms to 10 min",
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.idle_timeout) {
            return Err(ConfigError::new(
                "idle_timeout",
                format!("{:?}", self.idle_timeout),
                "1 s to 1 h",
            ));
        }
        Ok(())
    }
}

/// The client's transport settings with MTU discovery bounded by `max_udp_payload`.
pub(super) fn transport_config(
    config: &QuicClientConfig,
    max_udp_payload: u16,
) -> Result<quinn::TransportConfig, ConfigError> {
    config.tuning.transport_config(
        config.idle_timeout,
        // Servers open no streams to clients.
        0,
        Some(keep_alive(config.idle_timeout)),
        max_udp_payload,
    )
}

/// Longest pause between keep-alives. A ping after a second of silence is what finds out
/// that a server restarted: the new process answers it with a stateless reset (its reset key
/// is derived from a secret that survives restarts), and the connection is reopened at once
/// instead of waiting out the idle timeout. A second of silence costs a 40-byte datagram.
pub(super) const KEEP_ALIVE_MAX: Duration = Duration::from_secs(1);

/// Keep-alives every third of the idle timeout, at most [`KEEP_ALIVE_MAX`] apart.
pub(super) fn keep_alive(idle: Duration) -> Duration {
    (idle / 3).min(KEEP_ALIVE_MAX)
}
