//! xfer's BBR for quinn: a model-based controller whose bandwidth estimate is a delivery rate
//! measured the way TCP's BBR measures it (`rate.rs`), and whose startup, window and exit
//! follow that estimate (`model.rs`).
//!
//! It replaces quinn's BBR (0.11, marked experimental) as xfer's default. That one's estimate
//! is one packet's size over the time since the previous ACK frame, so it swings with how the
//! receiver batches its acknowledgements; its startup ends at the first loss; and the window
//! it then computes from the estimate can be a tenth of what the path carries. Measured in the
//! lab, its window after a validated Careful Resume jump of 7 MB was 0.3-0.9 MB, and the jump's
//! gain was given back (docs/results.md). quinn's own stays available as `quinn-bbr`.

mod model;
mod rate;

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

#[cfg(test)]
use model::Mode;
use model::Model;
pub use model::{BW_WINDOW_ROUNDS, CWND_GAIN_PERCENT, MIN_WINDOW_PACKETS, STARTUP_GAIN_PERCENT};
use rate::RateSampler;

/// Initial window in datagrams of the 1,200-byte QUIC minimum: quinn's BBR's 200 (240,000
/// bytes), kept so that cold starts compare with it as they did.
const INITIAL_WINDOW: u64 = 200 * 1200;

/// Builds the controllers, one per connection.
#[derive(Debug, Clone)]
pub struct BbrConfig {
    /// Window before the first acknowledgement, bytes.
    pub initial_window: u64,
    /// Window after startup, in hundredths of the measured bandwidth-delay product.
    pub cwnd_gain_percent: u64,
    /// Largest window during startup, in hundredths of the measured bandwidth-delay product.
    pub startup_gain_percent: u64,
    /// Bound the window after a round that loses more than 2 % (`QuicTuning::loss_bound`).
    pub loss_bound: bool,
    /// Lowest window, in datagrams; at least [`MIN_WINDOW_PACKETS`] (4). A sender that
    /// asks its peer to acknowledge only every N+1 packets
    /// (`QuicTuning::ack_eliciting_threshold`) needs room for more than that in flight, or
    /// the peer holds each acknowledgement for its delay timer.
    pub min_window_packets: u64,
}

impl Default for BbrConfig {
    fn default() -> Self {
        Self {
            initial_window: INITIAL_WINDOW,
            cwnd_gain_percent: CWND_GAIN_PERCENT,
            startup_gain_percent: STARTUP_GAIN_PERCENT,
            loss_bound: true,
            min_window_packets: MIN_WINDOW_PACKETS,
        }
    }
}

impl BbrConfig {
    /// One connection's controller, as itself (Careful Resume tells it when a jump is
    /// validated).
    pub(crate) fn controller(&self, current_mtu: u16) -> Bbr {
        Bbr {
            model: Model::new(
                self.initial_window,
                current_mtu,
                self.cwnd_gain_percent,
                self.startup_gain_percent,
                self.loss_bound,
            )
            .with_min_window_packets(self.min_window_packets),
            sampler: RateSampler::default(),
        }
    }
}

impl ControllerFactory for BbrConfig {
    fn build(self: Arc<Self>, _now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(self.controller(current_mtu))
    }
}

/// One connection's controller: quinn's calls fed to the sampler and the model.
#[derive(Debug, Clone)]
pub(crate) struct Bbr {
    model: Model,
    sampler: RateSampler,
}

impl Controller for Bbr {
    fn on_sent(&mut self, now: Instant, bytes: u64, _last_packet_number: u64) {
        self.sampler.on_sent(now, bytes);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        _app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.ack(now, sent, bytes, rtt.min());
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        _largest_packet_num_acked: Option<u64>,
    ) {
        self.end_acks(now, in_flight, app_limited);
    }

    fn on_congestion_event(
        &mut self,
        _now: Instant,
        _sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.model.on_loss(lost_bytes);
        if is_persistent_congestion {
            self.model.on_persistent_congestion();
            tracing::debug!("bbr: persistent congestion, starting over");
        }
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.model.set_mtu(new_mtu);
    }

    fn window(&self) -> u64 {
        self.model.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.model.window();
        m.pacing_rate = Some(self.model.bandwidth().saturating_mul(8));
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        self.model.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl Bbr {
    /// A Careful Resume jump was validated: leave startup (`Model::leave_startup`).
    pub(crate) fn resumed(&mut self) {
        if self.model.leave_startup() {
            tracing::debug!(
                window = self.model.window(),
                bandwidth_mbit = self.model.bandwidth() * 8 / 1_000_000,
                "bbr: startup done after a validated jump"
            );
        }
    }

    /// Whether a Careful Resume jump is unconfirmed (`Model::set_jump_in_flight`).
    pub(crate) fn set_jump_in_flight(&mut self, in_flight: bool) {
        self.model.set_jump_in_flight(in_flight);
    }

    fn ack(&mut self, now: Instant, sent: Instant, bytes: u64, min_rtt: Duration) {
        self.sampler.on_ack(now, sent, bytes);
        self.model.on_ack(bytes, min_rtt);
    }

    fn end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool) {
        let sample = self
            .sampler
            .on_end_acks(now, in_flight, app_limited, self.model.min_rtt());
        let exit = self
            .model
            .on_end_acks(sample, self.sampler.delivered(), app_limited);
        if let Some(exit) = exit {
            tracing::debug!(
                ?exit,
                window = self.model.window(),
                bandwidth_mbit = self.model.bandwidth() * 8 / 1_000_000,
                min_rtt = ?self.model.min_rtt(),
                "bbr: startup done"
            );
        }
    }

    #[cfg(test)]
    fn in_startup(&self) -> bool {
        self.model.mode == Mode::Startup
    }
}

#[cfg(test)]
mod sim;
