//! Careful Resume (RFC 9959, the IETF's draft-ietf-tsvwg-careful-resume): the second
//! connection to a peer does not pay slow start again. The sender remembers, per peer, the
//! path's bandwidth-delay product and minimum RTT as the last connection measured them, and
//! the next connection, once its own RTT matches the saved one, raises its window to at
//! most half the saved BDP (paced over one RTT by quinn's pacer), keeps it only if the
//! acknowledgements confirm it, and falls back below slow start's own result on a loss.
//!
//! # Trust model
//! The state lives only in the sender (for `xfer get`, the server), keyed by the peer's IP
//! address (IPv6: its /64). Nothing on the wire changes and nothing the peer sends is taken
//! as a window: a client can influence the saved value only by acknowledging data it was
//! sent, and any saved value is re-validated by the next connection (RTT check, half the
//! saved window at most, capped by [`CarefulResume::max_jump`], retreat on the first loss).
//! A client that spoofs another host's address cannot complete a handshake from it, so it
//! cannot make the server jump into a path the server never measured. The cache file is
//! read as hostile input.
//!
//! # Pieces
//! - `phase`: the phase machine (Reconnaissance, Unvalidated, Validating, SafeRetreat,
//!   Normal), pure, time passed in.
//! - `meter`: what a connection learns of its path (peak delivery rate × min RTT).
//! - [`PathCache`]: saved state per peer, bounded, expiring, optionally in a file.
//! - `controller`: the quinn controller that wraps BBR/CUBIC/NewReno with the above.

mod cache;
pub(crate) mod controller;
mod meter;
mod per_peer;
mod phase;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use quinn::congestion::ControllerFactory;

pub use cache::{PathCache, PathKey, ResumeStats};
pub(crate) use per_peer::PerPeerConfig;

use crate::tuning::ConfigError;

/// One path as a connection measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedPath {
    /// Bandwidth-delay product: peak delivery rate × minimum RTT, bytes.
    pub cwnd: u64,
    /// Minimum RTT.
    pub rtt: Duration,
    /// When it was measured (wall clock, so the state survives a restart).
    pub saved_at: SystemTime,
}

/// Careful Resume knobs of a sending endpoint (the server for downloads).
#[derive(Debug, Clone, PartialEq)]
pub struct CarefulResume {
    /// Use saved path state on new connections, and save it. Default on: the jump is
    /// validated before it is kept, so a wrong saved value costs one retreat, while a right
    /// one saves the ~log2(BDP / 15 KB) round trips of slow start (11 at 1 Gbit/s × 200 ms).
    pub enabled: bool,
    /// How long saved state stays usable. Default 1 hour: paths between data centres keep
    /// their capacity for hours, but other traffic may have grown since; older state is
    /// dropped and the connection starts cold. Allowed 1 s to 7 days.
    pub lifetime: Duration,
    /// Largest window of a jump, bytes. Default 64 MiB (the default send window; 2.7× the
    /// BDP of 1 Gbit/s × 200 ms). The jump is at most half the saved BDP in any case.
    /// Allowed 64 KiB to 4 GiB.
    pub max_jump: u64,
    /// Peers remembered at once; the oldest is forgotten first. Default 4096 (about 100
    /// bytes each). Allowed 1 to 1,000,000.
    pub max_paths: usize,
    /// Keep the saved state in this file across restarts (read at start, written every
    /// [`SAVE_INTERVAL`] and at shutdown). Default none: memory only.
    pub file: Option<PathBuf>,
}

/// How often an endpoint with a cache file writes it.
pub const SAVE_INTERVAL: Duration = Duration::from_secs(30);

/// The current RTT must lie within [saved / 2, saved × 10] for a jump. A shorter RTT means
/// the saved window would be sent faster than the path was ever seen to carry it; a much
/// longer one means a different path (or a queue someone else is filling).
const RTT_FLOOR_FACTOR: u32 = 2;
const RTT_CEILING_FACTOR: u32 = 10;

impl Default for CarefulResume {
    fn default() -> Self {
        Self {
            enabled: true,
            lifetime: Duration::from_secs(3600),
            max_jump: 64 << 20,
            max_paths: 4096,
            file: None,
        }
    }
}

impl CarefulResume {
    /// Reject values out of range, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        xfer_core::path_resume::validate_resume_knobs(
            xfer_core::path_resume::ResumeFieldNames {
                lifetime: "careful_resume.lifetime",
                max_jump: "careful_resume.max_jump",
                max_paths: "careful_resume.max_paths",
            },
            self.lifetime,
            self.max_jump,
            self.max_paths as u64,
        )
    }

    /// The cache these knobs describe, loaded from [`CarefulResume::file`] when set.
    pub fn open_cache(&self) -> std::io::Result<PathCache> {
        let cache = PathCache::new(self.max_paths, self.lifetime);
        if let Some(file) = &self.file {
            let loaded = cache.load(file, SystemTime::now()).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("reading path cache {}: {e}", file.display()),
                )
            })?;
            tracing::info!(file = %file.display(), loaded, "path cache loaded");
        }
        Ok(cache)
    }

    /// The congestion controller factory of one connection to `peer`: `inner` with Careful
    /// Resume around it.
    pub(crate) fn factory(
        &self,
        inner: controller::InnerFactory,
        cache: &PathCache,
        peer: SocketAddr,
        liveness: Arc<cache::Liveness>,
    ) -> Arc<dyn ControllerFactory + Send + Sync> {
        Arc::new(controller::ResumeFactory {
            inner,
            cache: cache.clone(),
            key: PathKey::of(peer),
            liveness,
            limits: phase::Limits {
                max_jump: self.max_jump,
                rtt_floor_factor: RTT_FLOOR_FACTOR,
                rtt_ceiling_factor: RTT_CEILING_FACTOR,
            },
        })
    }
}

/// Writes the cache to its file every [`SAVE_INTERVAL`] while the returned guard lives;
/// `None` without a file.
pub(crate) fn spawn_saver(per_peer: &PerPeerConfig) -> Option<AbortOnDrop> {
    let file = per_peer.knobs().file.clone()?;
    let cache = per_peer.cache().clone();
    Some(AbortOnDrop(tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAVE_INTERVAL);
        tick.tick().await;
        loop {
            tick.tick().await;
            let (cache, file) = (cache.clone(), file.clone());
            let _ = tokio::task::spawn_blocking(move || save_cache(&cache, &file)).await;
        }
    })))
}

/// Stops a background task when dropped.
pub(crate) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Writes `cache` to `file`, logging rather than failing: a lost cache only costs speed.
pub(crate) fn save_cache(cache: &PathCache, file: &std::path::Path) {
    match cache.save(file, SystemTime::now()) {
        Ok(n) => tracing::debug!(file = %file.display(), paths = n, "path cache written"),
        Err(e) => tracing::warn!(file = %file.display(), error = %e, "cannot write the path cache"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_values_name_their_field() {
        assert!(CarefulResume::default().validate().is_ok());
        for (c, field) in [
            (
                CarefulResume {
                    lifetime: Duration::ZERO,
                    ..CarefulResume::default()
                },
                "careful_resume.lifetime",
            ),
            (
                CarefulResume {
                    max_jump: 1,
                    ..CarefulResume::default()
                },
                "careful_resume.max_jump",
            ),
            (
                CarefulResume {
                    max_paths: 0,
                    ..CarefulResume::default()
                },
                "careful_resume.max_paths",
            ),
        ] {
            assert_eq!(c.validate().expect_err("refused").field, field);
        }
    }
}
