//! A quinn `ServerConfig` per incoming connection, so each connection's congestion
//! controller is seeded with its own peer's saved state (quinn's controller factory never
//! learns the peer address; `Incoming::accept_with` lets the server choose per peer).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::cache::Liveness;
use super::{CarefulResume, PathCache};
use crate::tuning::{ConfigError, QuicTuning};

pub(crate) struct PerPeerConfig {
    knobs: CarefulResume,
    cache: PathCache,
    base: quinn::ServerConfig,
    tuning: QuicTuning,
    idle_timeout: Duration,
    max_bidi_streams: u32,
    /// Largest UDP payload MTU discovery may reach, as the shared server config has it.
    max_udp_payload: u16,
}

impl PerPeerConfig {
    pub fn new(
        knobs: CarefulResume,
        cache: PathCache,
        base: quinn::ServerConfig,
        tuning: QuicTuning,
        idle_timeout: Duration,
        max_bidi_streams: u32,
        max_udp_payload: u16,
    ) -> Self {
        Self {
            knobs,
            cache,
            base,
            tuning,
            idle_timeout,
            max_bidi_streams,
            max_udp_payload,
        }
    }

    pub fn cache(&self) -> &PathCache {
        &self.cache
    }

    pub fn knobs(&self) -> &CarefulResume {
        &self.knobs
    }

    /// The server configuration for a connection from `peer`, whose controller reports its
    /// acknowledgements to `liveness`.
    pub fn for_peer(
        &self,
        peer: SocketAddr,
        liveness: Arc<Liveness>,
    ) -> Result<Arc<quinn::ServerConfig>, ConfigError> {
        let mut transport = self.tuning.transport_config(
            self.idle_timeout,
            self.max_bidi_streams,
            None,
            self.max_udp_payload,
        )?;
        transport.congestion_controller_factory(self.knobs.factory(
            self.tuning.resume_inner(),
            &self.cache,
            peer,
            liveness,
        ));
        let mut config = self.base.clone();
        config.transport_config(Arc::new(transport));
        Ok(Arc::new(config))
    }
}
