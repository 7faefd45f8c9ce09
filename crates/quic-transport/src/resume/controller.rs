//! The quinn congestion controller that adds Careful Resume to the one xfer runs anyway
//! (BBR, CUBIC or NewReno): every event goes to the wrapped controller unchanged; the phase
//! machine only overrides the window while a jump is unconfirmed, and the meter saves what
//! this connection learned of its path for the next one.

use std::any::Any;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

use super::cache::{Liveness, PathCache, PathKey, MAX_SAVED_CWND};
use super::meter::{PathMeter, MIN_INTERVALS};
use super::phase::{Event, Limits, Phase, Resume};
use super::SavedPath;
use crate::bbr::{Bbr, BbrConfig};

/// What Careful Resume wraps.
#[derive(Clone)]
pub(crate) enum InnerFactory {
    /// xfer's BBR, built as itself so that a validated jump can end its startup.
    Bbr(Arc<BbrConfig>),
    /// Any other controller, through quinn's factory.
    Other(Arc<dyn ControllerFactory + Send + Sync>),
}

impl InnerFactory {
    fn build(&self, now: Instant, current_mtu: u16) -> Inner {
        match self {
            Self::Bbr(config) => Inner::Bbr(Box::new(config.controller(current_mtu))),
            Self::Other(factory) => Inner::Other(factory.clone().build(now, current_mtu)),
        }
    }
}

enum Inner {
    Bbr(Box<Bbr>),
    Other(Box<dyn Controller>),
}

impl Inner {
    fn get(&self) -> &dyn Controller {
        match self {
            Self::Bbr(b) => b.as_ref(),
            Self::Other(c) => c.as_ref(),
        }
    }

    fn get_mut(&mut self) -> &mut dyn Controller {
        match self {
            Self::Bbr(b) => b.as_mut(),
            Self::Other(c) => c.as_mut(),
        }
    }

    fn clone_inner(&self) -> Self {
        match self {
            Self::Bbr(b) => Self::Bbr(b.clone()),
            Self::Other(c) => Self::Other(c.clone_box()),
        }
    }
}

/// Builds one connection's controller: the wrapped one, seeded with the peer's saved state.
pub(crate) struct ResumeFactory {
    pub inner: InnerFactory,
    pub cache: PathCache,
    pub key: PathKey,
    /// The connection's entry among its client's open ones.
    pub liveness: Arc<Liveness>,
    pub limits: Limits,
}

impl ControllerFactory for ResumeFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        let saved = self.cache.get(self.key, SystemTime::now());
        if let Some(s) = &saved {
            tracing::debug!(peer = %self.key, cwnd = s.cwnd, rtt = ?s.rtt, "careful resume: saved path state found");
        }
        Box::new(ResumeController {
            inner: self.inner.build(now, current_mtu),
            srtt: None,
            share_at_peak: 1,
            resume: Resume::new(saved, self.limits, current_mtu),
            meter: PathMeter::default(),
            cache: self.cache.clone(),
            key: self.key,
            liveness: self.liveness.clone(),
        })
    }
}

struct ResumeController {
    inner: Inner,
    /// quinn's smoothed RTT at the last acknowledgement, for the log.
    srtt: Option<std::time::Duration>,
    /// The client's open connections when this one measured its highest rate.
    share_at_peak: u64,
    resume: Resume,
    meter: PathMeter,
    cache: PathCache,
    key: PathKey,
    liveness: Arc<Liveness>,
}

impl ResumeController {
    fn record(&mut self, event: Option<Event>, validated: bool) {
        let Some(event) = event else { return };
        if event == Event::Done && validated {
            if let Inner::Bbr(b) = &mut self.inner {
                b.resumed();
            }
        }
        match event {
            Event::Jumped { window } => {
                self.cache.count_jump(window);
                // quinn paces a window over its smoothed RTT: the jump's rate is 1.25 times
                // window / srtt.
                tracing::debug!(peer = %self.key, window, srtt = ?self.srtt, "careful resume: jump");
            }
            Event::Retreated { window } => {
                self.cache.count_retreat();
                tracing::info!(peer = %self.key, window, "careful resume: loss during the jump, safe retreat");
            }
            Event::RttMismatch { current, saved } => {
                self.cache.count_rtt_mismatch();
                tracing::debug!(peer = %self.key, ?current, ?saved, "careful resume: RTT differs from the saved path, no jump");
            }
            other => {
                tracing::debug!(
                    peer = %self.key,
                    ?other,
                    inner_window = self.inner.get().window(),
                    srtt = ?self.srtt,
                    resume = ?self.resume,
                    "careful resume"
                )
            }
        }
    }

    /// Saves this connection's measurement once it has seen enough of the path.
    fn save(&self) {
        let Some(m) = self.meter.measurement() else {
            return;
        };
        if m.intervals < MIN_INTERVALS {
            return;
        }
        // The path's, not this connection's share of it: the client's connections open when
        // this one measured its highest rate shared the path, as the next command's will share
        // the jump (`Resume::set_share`). Before, the saved share was divided again at the jump,
        // and each connection of a command after a QUIC command jumped to an eighth of the path.
        self.cache.insert(
            self.key,
            SavedPath {
                cwnd: m.bdp.saturating_mul(self.share_at_peak).min(MAX_SAVED_CWND),
                rtt: m.min_rtt,
                saved_at: SystemTime::now(),
            },
        );
    }
}

impl Drop for ResumeController {
    fn drop(&mut self) {
        self.save();
        tracing::debug!(
            peer = %self.key,
            measured = ?self.meter.measurement(),
            resume = ?self.resume,
            "careful resume: connection's path state"
        );
    }
}

impl Controller for ResumeController {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.inner.get_mut().on_sent(now, bytes, last_packet_number);
        let event = self.resume.on_sent(now, bytes);
        self.record(event, false);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.inner
            .get_mut()
            .on_ack(now, sent, bytes, app_limited, rtt);
        self.srtt = Some(rtt.get());
        self.liveness.acked(now);
        // Saved as the rate rises, not only at the end: the next connection from the same
        // peer may start before this one has drained.
        if self.meter.on_ack(now, sent, bytes) {
            self.share_at_peak = self.cache.open_count(self.key).max(1);
            self.save();
        }
        let inner = self.inner.get().window();
        if self.resume.reconnoitring() {
            self.resume.set_share(self.cache.open_count(self.key));
        }
        let validating = self.resume.phase() == Phase::Validating;
        let event = self.resume.on_ack(now, sent, bytes, app_limited, inner);
        self.record(event, validating);
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        if let Inner::Bbr(b) = &mut self.inner {
            b.set_jump_in_flight(matches!(
                self.resume.phase(),
                Phase::Unvalidated | Phase::Validating
            ));
        }
        self.inner
            .get_mut()
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
        self.resume.on_end_acks(in_flight);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .get_mut()
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
        let event = self.resume.on_congestion();
        self.record(event, false);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.get_mut().on_mtu_update(new_mtu);
        self.resume.set_mtu(new_mtu);
    }

    fn window(&self) -> u64 {
        self.resume.window(self.inner.get().window())
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = self.inner.get().metrics();
        m.congestion_window = self.window();
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Self {
            inner: self.inner.clone_inner(),
            srtt: self.srtt,
            share_at_peak: self.share_at_peak,
            resume: self.resume.clone(),
            meter: self.meter.clone(),
            cache: self.cache.clone(),
            key: self.key,
            liveness: self.liveness.clone(),
        })
    }

    fn initial_window(&self) -> u64 {
        self.inner.get().initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
