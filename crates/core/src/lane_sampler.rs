//! A driver's side of adaptive lanes: gathers what the controller ([`crate::adapt`]) needs
//! from progress counters and the transport's connection statistics, on a timer of its own,
//! and hands back the controller's decisions for the driver to apply. The download driver
//! (lanes of one file) and the tree driver (its pool of lanes over all files) both use it.

use std::time::{Duration, Instant};

use crate::adapt::{AdaptConfig, AdaptReport, Decision, LaneController, Sample};
use crate::transport::ConnectionStats;

/// How often the counters are read, at most: samples a fifth of the shortest window apart
/// end a window within 20 % of its length.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// And at least: reading every connection's `TCP_INFO` has a cost.
const SAMPLE_AT_MOST_EVERY: Duration = Duration::from_millis(5);

/// The controller with its sampling clock.
#[derive(Debug)]
pub struct LaneSampler {
    ctl: LaneController,
    started: Instant,
    next_sample: Instant,
    every: Duration,
    /// The path's round trip as the first request measured it.
    rtt: Option<Duration>,
    initial: usize,
    peak: usize,
}

/// What the driver knows at a sample.
pub struct Counters<'a> {
    /// Payload bytes received so far.
    pub received: u64,
    /// Bytes still to fetch; `u64::MAX` while unknown (a listing still streaming).
    pub remaining: u64,
    /// Lanes running, retired ones still finishing included.
    pub lanes: usize,
    /// The transport's connections, for the round trip and receiver-side loss.
    pub connections: &'a [ConnectionStats],
}

impl LaneSampler {
    /// `rtt`: the path's round trip, when measured (the first request's); else the
    /// connections' smoothed round trips are used. `started`: the transfer's start.
    pub fn new(cfg: AdaptConfig, rtt: Option<Duration>, started: Instant) -> Self {
        let every = (cfg.min_window / 5).clamp(SAMPLE_AT_MOST_EVERY, SAMPLE_EVERY);
        let ctl = LaneController::new(cfg);
        let initial = ctl.target();
        Self {
            ctl,
            started,
            every,
            next_sample: started + every,
            rtt,
            initial,
            peak: initial,
        }
    }

    /// When [`LaneSampler::handle_tick`] next has something to do.
    pub fn next_sample(&self) -> Instant {
        self.next_sample
    }

    /// Feed one sample when due; the decisions to apply, oldest first.
    pub fn handle_tick(&mut self, now: Instant, c: &Counters<'_>) -> Vec<Decision> {
        if now < self.next_sample {
            return Vec::new();
        }
        self.next_sample = now + self.every;
        self.peak = self.peak.max(c.lanes);
        // Receiver-side loss where the transport can see it; the sum over every connection
        // (closed ones keep their last reading), so it only grows.
        let loss: Vec<u64> = c
            .connections
            .iter()
            .filter_map(|s| s.out_of_order_packets)
            .collect();
        // The first request's measure, else the transport's smoothed round trips (the
        // smallest: a receiver's own estimate runs high with delayed acknowledgements).
        let rtt = self.rtt.or_else(|| {
            c.connections
                .iter()
                .filter_map(|s| s.rtt_us)
                .filter(|&us| us > 0)
                .min()
                .map(Duration::from_micros)
        });
        self.ctl.handle_sample(Sample {
            at: now.duration_since(self.started),
            received: c.received,
            remaining: c.remaining,
            lanes: c.lanes,
            rtt,
            loss_events: (!loss.is_empty()).then(|| loss.iter().sum()),
        });
        let mut out = Vec::new();
        while let Some(d) = self.ctl.poll_decision() {
            tracing::info!(
                at = d.at_seconds,
                lanes = d.lanes,
                goodput_mbps = d.goodput_bps / 1e6,
                loss = ?d.loss,
                reason = d.reason.describe(),
                "lane count"
            );
            out.push(d);
        }
        out
    }

    /// The count decided so far.
    pub fn target(&self) -> usize {
        self.ctl.target()
    }

    /// What the report says, `final_lanes` being the count running at the end.
    pub fn report(&self, final_lanes: usize) -> AdaptReport {
        let cfg = self.ctl.config();
        AdaptReport {
            min_lanes: cfg.min_lanes,
            max_lanes: cfg.max_lanes,
            initial_lanes: self.initial,
            final_lanes,
            peak_lanes: self.peak.max(final_lanes),
            decisions: self.ctl.decisions().to_vec(),
        }
    }
}
