//! A loss bound on BBR's window. quinn's BBR (v1, marked experimental) ignores loss: its window
//! is twice its bandwidth estimate times the minimum RTT plus the largest ACK aggregation seen,
//! and quinn paces by window and RTT rather than by BBR's rate. Through the lab's 1 Gbit/s link
//! with a one-BDP drop-tail queue, two such connections offered about 1.7 times the link rate
//! and the queue dropped 0.4-1.6 million of their datagrams per 2 GiB: half the server's CPU
//! went on packets that never arrived, and QUIC trailed TCP.
//!
//! The bound is BBRv2's `inflight_hi` in its simplest form. Per round (one smoothed RTT) the
//! controller counts bytes acknowledged and lost. A round that loses more than
//! [`LOSS_THRESHOLD`] of what it settled bounds the window at 5/4 of what the path delivered,
//! scaled to the minimum RTT: the connection's share of the bandwidth-delay product, with room
//! for a little queue. Each lossless round in which the bound held the window back raises it by
//! [`PROBE_STEP`], so capacity freed by others is found again within a few seconds. Random
//! loss far below the threshold (the 0.01-0.1 % of a long path) leaves BBR as it is.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

/// Share of a round's settled bytes (acknowledged + lost) above which the round counts as
/// congested: BBRv2's 2 %.
pub const LOSS_THRESHOLD: f64 = 0.02;
/// Growth per lossless round while the bound holds the window back: one sixteenth, about 6 %,
/// so a bound at 1.25 BDP reaches a one-BDP queue's overflow again in eight rounds.
pub const PROBE_STEP: u64 = 16;
/// Rounds that settled fewer bytes than this many full datagrams say nothing about loss.
const MIN_ROUND_PACKETS: u64 = 16;

/// Wraps the configured controller's factory.
pub(crate) struct LossBoundFactory {
    pub inner: Arc<dyn ControllerFactory + Send + Sync>,
}

impl ControllerFactory for LossBoundFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        let inner = self.inner.clone().build(now, current_mtu);
        let floor = inner.initial_window();
        Box::new(LossBoundController {
            inner,
            bound: InflightBound::new(floor, current_mtu),
        })
    }
}

struct LossBoundController {
    inner: Box<dyn Controller>,
    bound: InflightBound,
}

impl Controller for LossBoundController {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.inner.on_sent(now, bytes, last_packet_number);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.inner.on_ack(now, sent, bytes, app_limited, rtt);
        let before = self.bound.bound;
        self.bound
            .on_ack(now, bytes, rtt.get(), rtt.min(), self.inner.window());
        if self.bound.bound != before {
            tracing::trace!(bound = ?self.bound.bound, inner = self.inner.window(), "quic loss bound");
        }
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
        self.bound.on_loss(lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu);
        self.bound.mtu = u64::from(new_mtu);
    }

    fn window(&self) -> u64 {
        self.bound.window(self.inner.window())
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = self.inner.metrics();
        m.congestion_window = self.window();
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Self {
            inner: self.inner.clone_box(),
            bound: self.bound.clone(),
        })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// The decision, apart from quinn's types so that it can be driven with made-up time.
#[derive(Debug, Clone)]
pub(crate) struct InflightBound {
    /// Bytes the window may not exceed; `None` until the first congested round.
    pub bound: Option<u64>,
    /// Lowest bound: the wrapped controller's initial window.
    floor: u64,
    mtu: u64,
    round_start: Option<Instant>,
    round_len: Duration,
    acked: u64,
    lost: u64,
    /// Whether the bound held the wrapped controller's window back during this round.
    binding: bool,
}

impl InflightBound {
    pub(crate) fn new(floor: u64, mtu: u16) -> Self {
        Self {
            bound: None,
            floor,
            mtu: u64::from(mtu),
            round_start: None,
            round_len: Duration::ZERO,
            acked: 0,
            lost: 0,
            binding: false,
        }
    }

    pub(crate) fn window(&self, inner: u64) -> u64 {
        self.bound.map_or(inner, |b| inner.min(b))
    }

    pub(crate) fn on_loss(&mut self, bytes: u64) {
        self.lost = self.lost.saturating_add(bytes);
    }

    pub(crate) fn on_ack(
        &mut self,
        now: Instant,
        bytes: u64,
        srtt: Duration,
        min_rtt: Duration,
        inner_window: u64,
    ) {
        self.acked = self.acked.saturating_add(bytes);
        self.binding |= self.bound.is_some_and(|b| inner_window > b);
        let Some(start) = self.round_start else {
            self.start_round(now, srtt);
            return;
        };
        let elapsed = now.saturating_duration_since(start);
        if elapsed < self.round_len {
            return;
        }
        self.end_round(elapsed, min_rtt);
        self.start_round(now, srtt);
    }

    fn start_round(&mut self, now: Instant, srtt: Duration) {
        self.round_start = Some(now);
        self.round_len = srtt;
        self.acked = 0;
        self.lost = 0;
        self.binding = false;
    }

    fn end_round(&mut self, elapsed: Duration, min_rtt: Duration) {
        let settled = self.acked.saturating_add(self.lost);
        if settled < MIN_ROUND_PACKETS.saturating_mul(self.mtu) || elapsed.is_zero() {
            return;
        }
        if self.lost as f64 > LOSS_THRESHOLD * settled as f64 {
            // What the path delivered per minimum RTT, with a quarter on top.
            let share = self.acked as f64 * min_rtt.as_secs_f64() / elapsed.as_secs_f64();
            self.bound = Some(((share * 1.25) as u64).max(self.floor));
        } else if self.binding {
            if let Some(b) = self.bound.as_mut() {
                *b = b.saturating_add((*b / PROBE_STEP).max(self.mtu));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: u16 = 1452;
    const MS: Duration = Duration::from_millis(1);

    /// Rounds of 100 ms (min RTT 100 ms, smoothed `srtt`), each acking `acked` and losing
    /// `lost` bytes, with the wrapped window at `inner`.
    fn run(
        b: &mut InflightBound,
        t0: Instant,
        rounds: u32,
        acked: u64,
        lost: u64,
        srtt: Duration,
        inner: u64,
    ) -> Instant {
        let mut t = t0;
        for _ in 0..rounds {
            // Ten acks spread over the round, the loss reported in the middle.
            for i in 0..10 {
                t += srtt / 10;
                if i == 5 {
                    b.on_loss(lost);
                }
                b.on_ack(t, acked / 10, srtt, 100 * MS, inner);
            }
        }
        t
    }

    /// A one-BDP queue standing: smoothed RTT twice the minimum, the link delivering 12.5 MB
    /// per 100 ms (1 Gbit/s), and 40 % of what is sent lost, for three rounds.
    fn congest(b: &mut InflightBound) -> Instant {
        run(
            b,
            Instant::now(),
            3,
            25_000_000,
            10_000_000,
            200 * MS,
            60_000_000,
        )
    }

    /// Twenty rounds of 1 Gbit/s at the minimum RTT (no queue), losing `lost` bytes each.
    fn steady(lost: u64) -> InflightBound {
        let mut b = InflightBound::new(14_520, MTU);
        run(
            &mut b,
            Instant::now(),
            20,
            12_500_000,
            lost,
            100 * MS,
            50_000_000,
        );
        b
    }

    #[test]
    fn lossless_rounds_leave_the_window_alone() {
        let b = steady(0);
        assert_eq!(b.bound, None);
        assert_eq!(b.window(50_000_000), 50_000_000);
    }

    #[test]
    fn random_loss_below_the_threshold_is_not_congestion() {
        // 0.1 % loss.
        let b = steady(12_500);
        assert_eq!(b.bound, None);
    }

    #[test]
    fn an_overflowing_queue_bounds_the_window_near_the_bdp() {
        let mut b = InflightBound::new(14_520, MTU);
        let t = congest(&mut b);
        let bound = b.bound.expect("no bound after congested rounds");
        // 5/4 of 12.5 MB.
        assert!(
            (15_000_000..=16_500_000).contains(&bound),
            "bound {bound}, expected about 15.6 MB"
        );
        assert_eq!(b.window(60_000_000), bound);
        // A smaller wrapped window is left as it is.
        assert_eq!(b.window(1_000_000), 1_000_000);
        // Lossless rounds in which the bound holds the window back raise it a sixteenth each.
        run(&mut b, t, 4, 12_500_000, 0, 100 * MS, 60_000_000);
        let raised = b.bound.unwrap_or(0);
        // Three or four rounds ended (the first was still 200 ms long).
        assert!(
            raised > bound + bound / 8 && raised < bound + bound / 3,
            "{bound} -> {raised}"
        );
    }

    #[test]
    fn a_bound_that_does_not_bind_does_not_grow() {
        let mut b = InflightBound::new(14_520, MTU);
        let t = congest(&mut b);
        let bound = b.bound.expect("bound");
        run(&mut b, t, 5, 12_500_000, 0, 100 * MS, bound / 2);
        assert_eq!(b.bound, Some(bound));
    }

    #[test]
    fn the_bound_never_falls_below_the_initial_window() {
        let mut b = InflightBound::new(14_520, MTU);
        // Starved rounds: two thirds of little lost.
        run(
            &mut b,
            Instant::now(),
            3,
            10_000,
            20_000,
            100 * MS,
            1_000_000,
        );
        assert_eq!(b.bound, Some(14_520));
    }

    #[test]
    fn tiny_rounds_say_nothing() {
        let mut b = InflightBound::new(14_520, MTU);
        run(
            &mut b,
            Instant::now(),
            5,
            10_000,
            5_000,
            100 * MS,
            1_000_000,
        );
        assert_eq!(b.bound, None);
    }
}
