//! The model behind xfer's BBR, apart from quinn's types so tests drive it with made-up time.
//!
//! ```text
//!  Startup ──(bandwidth grew < 25 % in 3 rounds, a round lost > 2 %,  ──► ProbeBw
//!             or a round's RTT a quarter above the minimum)
//!     ▲                                                                    │
//!     └──────────────────(persistent congestion: start over)───────────────┘
//! ```
//!
//! Startup grows the window by what each acknowledgement delivers (it doubles per round).
//! While a Careful Resume jump is unconfirmed only loss ends it; the validated jump does
//! (`Model::leave_startup`).
//! ProbeBw holds it at [`CWND_GAIN_PERCENT`] of the bandwidth-delay product the model
//! measured (the largest delivery rate of the last [`BW_WINDOW_ROUNDS`] rounds times the
//! smallest RTT seen). quinn paces a window over the smoothed RTT, so the window is also the
//! rate: with the path idle, a window of 1.5 estimates delivers at 1.5 times it, the next
//! estimate is that, and the window follows capacity up within rounds without a probing cycle;
//! with the bottleneck full, the extra is a standing queue of half an estimate. There is no
//! ProbeRTT: the minimum RTT is quinn's over the connection, which a transfer's own queue
//! cannot raise, and draining a single connection to four packets every ten seconds costs
//! what it did TCP (docs/results.md). Loss beyond 2 % of a round lowers a bound on the window
//! (`Model::on_lossy_round`); random loss below it is ignored, as BBR ignores it.

use std::time::Duration;

use super::rate::RateSample;

/// Window in ProbeBw, in hundredths of the measured bandwidth-delay product. TCP's BBR caps
/// its window at two, but paces at its estimate; quinn paces by the window, so here the gain
/// is the rate too: 1.5 keeps a standing queue of half the path at most. In the simulated link
/// (`sim.rs`, `explore`) two connections at 2 kept drifting apart (629/369 Mbit/s, then
/// 700/300), the larger estimate taking the queue; at 1.5 the split held.
pub const CWND_GAIN_PERCENT: u64 = 150;
/// Largest window in Startup once its estimate has stopped growing for a round, in hundredths
/// of the measured bandwidth-delay product (BBR's startup gain, 2/ln 2): quinn paces a window
/// over one RTT, so this caps the rate too.
pub const STARTUP_GAIN_PERCENT: u64 = 289;
/// Rounds the bandwidth estimate remembers its largest sample (BBR's 10).
pub const BW_WINDOW_ROUNDS: u64 = 10;
/// Startup ends after this many rounds in which the estimate grew by less than a quarter.
const FULL_BW_ROUNDS: u32 = 3;
/// A round that loses more than one part in this many of what it settled ends startup
/// (BBRv2's 2 %).
const LOSS_DIVISOR: u64 = 50;
/// Least rise of a round's RTT over the minimum that ends startup (HyStart's lower clamp).
const DELAY_MARGIN_FLOOR: Duration = Duration::from_millis(4);
/// RTT samples (one per ACK frame) a round needs before its least RTT says anything (HyStart's
/// N_RTT_SAMPLE).
const ROUND_RTT_SAMPLES: u32 = 8;
/// Rounds that settled fewer than this many datagrams say nothing about loss.
const MIN_ROUND_PACKETS: u64 = 16;
/// Lowest window, in datagrams (RFC 9002's minimum window is two; four keeps the ACK clock
/// running with quinn's acknowledgement of every other packet).
pub const MIN_WINDOW_PACKETS: u64 = 4;

/// `bytes` × `percent` / 100.
fn gain(bytes: u64, percent: u64) -> u64 {
    (u128::from(bytes) * u128::from(percent) / 100) as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Startup,
    ProbeBw,
}

/// Why startup ended, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupExit {
    /// The estimate stopped growing: the path is full.
    BandwidthPlateau { bytes_per_sec: u64 },
    /// A round lost more than the threshold.
    Loss { lost: u64, settled: u64 },
    /// The least RTT of a round was well above the minimum: a queue is building.
    Delay {
        round_min: Duration,
        min_rtt: Duration,
    },
    /// A Careful Resume jump was validated: the path carried the window already.
    Resumed,
}

/// The largest sample of the last [`BW_WINDOW_ROUNDS`] rounds: one maximum per round.
#[derive(Debug, Clone, Default)]
struct MaxFilter {
    /// (round, largest sample in it), oldest first, at most `BW_WINDOW_ROUNDS` entries.
    rounds: Vec<(u64, u64)>,
}

impl MaxFilter {
    fn update(&mut self, round: u64, value: u64) {
        match self.rounds.last_mut() {
            Some((r, v)) if *r == round => *v = (*v).max(value),
            _ => self.rounds.push((round, value)),
        }
        self.rounds
            .retain(|(r, _)| round.saturating_sub(*r) < BW_WINDOW_ROUNDS);
    }

    fn get(&self) -> u64 {
        self.rounds.iter().map(|(_, v)| *v).max().unwrap_or(0)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Model {
    pub mode: Mode,
    cwnd: u64,
    initial_window: u64,
    mtu: u64,
    max_bw: MaxFilter,
    round: u64,
    next_round_delivered: u64,
    full_bw: u64,
    full_bw_rounds: u32,
    round_acked: u64,
    round_lost: u64,
    /// Bytes acknowledged in the ACK frame being processed.
    frame_acked: u64,
    min_rtt: Duration,
    /// Smallest RTT sample of the current round.
    round_min_rtt: Option<Duration>,
    round_rtt_samples: u32,
    /// Bound on the window after lossy rounds; `None` before the first.
    inflight_hi: Option<u64>,
    loss_bound: bool,
    /// This round has been found lossy (and the bound lowered) already.
    lost_this_round: bool,
    /// The bound held the window back during this round.
    bound_binding: bool,
    /// Why startup ended.
    pub exit: Option<StartupExit>,
    cwnd_gain: u64,
    startup_gain: u64,
    /// A Careful Resume jump is unconfirmed: its rounds say nothing about the path yet.
    jump_in_flight: bool,
    /// The lowest window, in datagrams.
    min_window_packets: u64,
}

impl Model {
    pub(crate) fn new(
        initial_window: u64,
        mtu: u16,
        cwnd_gain: u64,
        startup_gain: u64,
        loss_bound: bool,
    ) -> Self {
        Self {
            cwnd_gain,
            startup_gain,
            mode: Mode::Startup,
            cwnd: initial_window,
            initial_window,
            mtu: u64::from(mtu),
            max_bw: MaxFilter::default(),
            round: 0,
            next_round_delivered: 0,
            full_bw: 0,
            full_bw_rounds: 0,
            round_acked: 0,
            round_lost: 0,
            frame_acked: 0,
            min_rtt: Duration::ZERO,
            round_min_rtt: None,
            round_rtt_samples: 0,
            inflight_hi: None,
            loss_bound,
            lost_this_round: false,
            bound_binding: false,
            exit: None,
            jump_in_flight: false,
            min_window_packets: MIN_WINDOW_PACKETS,
        }
    }

    /// Never let the window fall below `packets` datagrams (at least [`MIN_WINDOW_PACKETS`]).
    pub(crate) fn with_min_window_packets(mut self, packets: u64) -> Self {
        self.min_window_packets = packets.max(MIN_WINDOW_PACKETS);
        self.cwnd = self.cwnd.max(self.min_window());
        self
    }

    /// Careful Resume raised the window to a jump (`true`) and has not yet seen it all
    /// acknowledged. The jump is paced at about the saved path's rate, so it queues for a few
    /// milliseconds at the bottleneck while the estimate, built from the handful of rounds
    /// before it, is still a few Mbit/s: a delay or plateau exit then would leave startup with
    /// that estimate, and ProbeBw would climb from it by half a window per round. Measured on a
    /// held 100 ms lossy link, that ramp took 0.95 s against 0.45 (docs/results.md). Loss still
    /// ends startup; a validated jump ends it with the rate the jump measured
    /// (`leave_startup`).
    pub(crate) fn set_jump_in_flight(&mut self, in_flight: bool) {
        self.jump_in_flight = in_flight;
    }

    pub(crate) fn window(&self) -> u64 {
        self.cwnd
    }

    pub(crate) fn initial_window(&self) -> u64 {
        self.initial_window
    }

    /// Smallest RTT seen; zero before the first sample.
    pub(crate) fn min_rtt(&self) -> Duration {
        self.min_rtt
    }

    /// Bytes per second.
    pub(crate) fn bandwidth(&self) -> u64 {
        self.max_bw.get()
    }

    pub(crate) fn set_mtu(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu);
        self.cwnd = self.cwnd.max(self.min_window());
    }

    fn min_window(&self) -> u64 {
        self.min_window_packets * self.mtu
    }

    pub(crate) fn on_ack(&mut self, bytes: u64, min_rtt: Duration) {
        self.frame_acked = self.frame_acked.saturating_add(bytes);
        if !min_rtt.is_zero() {
            self.min_rtt = min_rtt;
        }
    }

    pub(crate) fn on_loss(&mut self, bytes: u64) {
        self.round_lost = self.round_lost.saturating_add(bytes);
    }

    /// A Careful Resume jump was just validated (RFC 9959: the sender then continues in
    /// congestion avoidance, not slow start). Startup would double the window the path has just
    /// carried, into the queue and a round of loss; ProbeBw grows it by half per round while
    /// the path has room, from the rate the jump measured.
    pub(crate) fn leave_startup(&mut self) -> bool {
        if self.mode != Mode::Startup || self.max_bw.get() == 0 {
            return false;
        }
        self.mode = Mode::ProbeBw;
        self.exit = Some(StartupExit::Resumed);
        true
    }

    /// RFC 9002 §7.6.2: everything in flight over a whole persistent-congestion period was
    /// lost; the path may have changed, so the model starts over from the minimum window.
    pub(crate) fn on_persistent_congestion(&mut self) {
        self.mode = Mode::Startup;
        self.cwnd = self.min_window();
        self.max_bw = MaxFilter::default();
        self.full_bw = 0;
        self.full_bw_rounds = 0;
    }

    /// Ends an ACK frame; `delivered` is the connection's total after it. Returns why startup
    /// ended when it did.
    pub(crate) fn on_end_acks(
        &mut self,
        sample: Option<RateSample>,
        delivered: u64,
        app_limited: bool,
    ) -> Option<StartupExit> {
        let acked = std::mem::take(&mut self.frame_acked);
        self.round_acked = self.round_acked.saturating_add(acked);
        let mut round_start = false;
        if let Some(s) = sample {
            if s.prior_delivered >= self.next_round_delivered {
                self.round += 1;
                self.next_round_delivered = delivered;
                round_start = true;
                self.round_min_rtt = None;
                self.round_rtt_samples = 0;
            }
            self.round_min_rtt = Some(self.round_min_rtt.map_or(s.rtt, |r| r.min(s.rtt)));
            self.round_rtt_samples += 1;
            // A sample from an idle application only counts when it beats the estimate.
            if !s.app_limited || s.rate >= self.max_bw.get() {
                self.max_bw.update(self.round, s.rate);
            }
        }
        // Loss is checked on every frame, not once a round: by the end of a round that
        // overflowed the queue, startup has doubled the window again. quinn reports a frame's
        // losses after the frame, so they are counted here, before a new round resets them.
        let lossy = if self.lost_this_round {
            None
        } else {
            self.lossy_round()
        };
        let mut exit = None;
        if self.mode == Mode::Startup {
            exit = lossy.or_else(|| {
                if self.jump_in_flight {
                    None
                } else {
                    self.queue_building()
                }
            });
            if exit.is_none() && round_start && !self.jump_in_flight {
                exit = self.check_full_bw(app_limited);
            }
            if exit.is_some() {
                self.mode = Mode::ProbeBw;
                self.exit = exit;
            }
        }
        if lossy.is_some() {
            self.on_lossy_round();
        }
        if round_start {
            self.end_round();
        }
        let grown = self.cwnd.saturating_add(acked);
        self.cwnd = match self.mode {
            // Once the estimate has stopped growing for a round the path is probably full:
            // the window stops doubling past what the estimate can use while startup waits
            // for two more rounds to be sure. Before that it is left alone, as the early
            // estimates lag the window by a round (and the first by the pacer's first RTT).
            Mode::Startup if self.full_bw_rounds > 0 => match self.bdp() {
                0 => grown,
                bdp => grown.min(gain(bdp, self.startup_gain).max(self.cwnd)),
            },
            Mode::Startup => grown,
            // Up by what was delivered, as in startup; down at once.
            Mode::ProbeBw => {
                let target = self.target();
                let bounded = self.inflight_hi.map_or(target, |hi| target.min(hi));
                self.bound_binding |= bounded < target && grown > bounded;
                grown.min(bounded)
            }
        };
        self.cwnd = self.cwnd.max(self.min_window());
        exit
    }

    /// The measured bandwidth-delay product, bytes; zero before the first sample.
    fn bdp(&self) -> u64 {
        (u128::from(self.max_bw.get()) * self.min_rtt.as_nanos() / 1_000_000_000) as u64
    }

    /// The ProbeBw window: `cwnd_gain` bandwidth-delay products.
    fn target(&self) -> u64 {
        match self.bdp() {
            0 => self.initial_window,
            bdp => gain(bdp, self.cwnd_gain).max(self.min_window()),
        }
    }

    /// The round that just ended: a lossless one in which the loss bound held the window back
    /// raises it by an eighth.
    fn end_round(&mut self) {
        if !self.lost_this_round && self.bound_binding {
            if let Some(hi) = self.inflight_hi.as_mut() {
                *hi = hi.saturating_add((*hi / 8).max(self.mtu));
            }
        }
        self.round_acked = 0;
        self.round_lost = 0;
        self.lost_this_round = false;
        self.bound_binding = false;
    }

    /// BBRv2's `inflight_hi`, in its simplest form: a round that loses more than the threshold
    /// bounds the window at 85 % of what it was, but never below the measured BDP, which the
    /// loss does not lower (a full queue loses; the path's rate is what was measured). So a
    /// queue shallower than the window's extra loses a few rounds until the window fits it,
    /// and a loss spike costs at most the standing queue, where bounding by what the lossy
    /// round delivered (the wrapper `crate::loss_bound` does that for quinn's BBR) cut a
    /// connection at 200 ms to 150 Mbit/s and took seconds to grow back.
    fn on_lossy_round(&mut self) {
        self.lost_this_round = true;
        if !self.loss_bound {
            return;
        }
        let hi = gain(self.cwnd, 85).max(self.bdp()).max(self.min_window());
        self.inflight_hi = Some(self.inflight_hi.map_or(hi, |old| old.min(hi)));
    }

    fn lossy_round(&self) -> Option<StartupExit> {
        let settled = self.round_acked.saturating_add(self.round_lost);
        (settled >= MIN_ROUND_PACKETS * self.mtu
            && self.round_lost.saturating_mul(LOSS_DIVISOR) > settled)
            .then_some(StartupExit::Loss {
                lost: self.round_lost,
                settled,
            })
    }

    /// HyStart's signal (RFC 9406), for the window quinn paces by: once the path is full,
    /// doubling the window only fills the queue, and a one-BDP queue overflows a round trip
    /// before the loss is seen, by then a window later: up to two BDPs lost. The least RTT of
    /// the round so far, once it has [`ROUND_RTT_SAMPLES`], above the minimum by a quarter (at
    /// least 4 ms) is a queue of a quarter of the path, as much as ProbeBw keeps; jitter would
    /// have to delay every one of those samples.
    fn queue_building(&self) -> Option<StartupExit> {
        let round_min = self.round_min_rtt?;
        if self.min_rtt.is_zero() || self.round_rtt_samples < ROUND_RTT_SAMPLES {
            return None;
        }
        let margin = (self.min_rtt / 4).max(DELAY_MARGIN_FLOOR);
        (round_min > self.min_rtt + margin).then_some(StartupExit::Delay {
            round_min,
            min_rtt: self.min_rtt,
        })
    }

    fn check_full_bw(&mut self, app_limited: bool) -> Option<StartupExit> {
        let bw = self.max_bw.get();
        if bw >= self.full_bw.saturating_add(self.full_bw / 4) {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
            return None;
        }
        if !app_limited {
            self.full_bw_rounds += 1;
        }
        (self.full_bw_rounds >= FULL_BW_ROUNDS)
            .then_some(StartupExit::BandwidthPlateau { bytes_per_sec: bw })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT: Duration = Duration::from_millis(200);

    fn round(m: &mut Model, acked: u64, rate: u64, prior_delivered: u64, delivered: u64) {
        m.on_ack(acked, RTT);
        m.on_end_acks(
            Some(RateSample {
                rate,
                prior_delivered,
                app_limited: false,
                rtt: RTT,
            }),
            delivered,
            false,
        );
    }

    /// Rounds at `rtt` delivering `per_round` bytes each at `rate`; the window at the end.
    fn window_after_rounds(mut m: Model, rtt: Duration, rate: u64, per_round: u64) -> u64 {
        for r in 0..40u64 {
            m.on_ack(per_round, rtt);
            m.on_end_acks(
                Some(RateSample {
                    rate,
                    prior_delivered: r * per_round,
                    app_limited: false,
                    rtt,
                }),
                (r + 1) * per_round,
                false,
            );
        }
        m.window()
    }

    #[test]
    fn the_window_keeps_its_floor_on_a_short_path() {
        // 100 MB/s over 50 us is a BDP of 5 KB, under four datagrams: the default floor of
        // four lets the window shrink to it; a floor of 20 (a peer acknowledging every tenth
        // packet, twice over) holds.
        let tiny = Duration::from_micros(50);
        let fresh = || Model::new(240_000, 1472, 150, 289, true);
        let low = window_after_rounds(fresh(), tiny, 100_000_000, 4 * 1472);
        assert!(low < 20 * 1472, "default floor: {low}");
        let held = window_after_rounds(
            fresh().with_min_window_packets(20),
            tiny,
            100_000_000,
            4 * 1472,
        );
        assert!(held >= 20 * 1472, "floor of 20 datagrams: {held}");
    }

    #[test]
    fn a_validated_jump_leaves_startup_with_the_rate_it_measured() {
        let mut m = Model::new(240_000, 1472, 150, 289, true);
        assert!(!m.leave_startup(), "no estimate yet: nothing to leave with");
        // The jump: 6 MB delivered in a round at 30 MB/s.
        round(&mut m, 6_000_000, 30_000_000, 0, 6_000_000);
        assert_eq!(m.mode, Mode::Startup);
        assert_eq!(m.window(), 6_240_000);
        assert!(m.leave_startup());
        assert_eq!(m.exit, Some(StartupExit::Resumed));
        // The next round grows the window toward 1.5 × 30 MB/s × 200 ms, not to twice it.
        round(&mut m, 6_000_000, 30_000_000, 6_000_000, 12_000_000);
        assert_eq!(m.window(), 9_000_000);
        // A faster round raises it with the estimate.
        round(&mut m, 9_000_000, 45_000_000, 12_000_000, 21_000_000);
        assert_eq!(m.window(), 13_500_000);
    }

    #[test]
    fn the_rounds_of_an_unconfirmed_jump_do_not_end_startup() {
        let slow = Duration::from_millis(150);
        let run = |jumping: bool| {
            let mut m = Model::new(240_000, 1472, 150, 289, true);
            // Two slow-start rounds at the path's 100 ms.
            let fast = Duration::from_millis(100);
            for (i, (acked, rate)) in [(240_000, 1_200_000), (480_000, 2_400_000)]
                .into_iter()
                .enumerate()
            {
                m.on_ack(acked, fast);
                m.on_end_acks(
                    Some(RateSample {
                        rate,
                        prior_delivered: i as u64 * 240_000,
                        app_limited: false,
                        rtt: fast,
                    }),
                    (i as u64 + 1) * 240_000 * 2,
                    false,
                );
            }
            m.set_jump_in_flight(jumping);
            // The jump's round: a queue of 50 ms in every sample, the rate still low.
            for _ in 0..ROUND_RTT_SAMPLES {
                m.on_ack(100_000, fast);
                m.on_end_acks(
                    Some(RateSample {
                        rate: 3_000_000,
                        prior_delivered: 720_000,
                        app_limited: false,
                        rtt: slow,
                    }),
                    1_520_000,
                    false,
                );
            }
            m
        };
        let alone = run(false);
        assert!(
            matches!(alone.exit, Some(StartupExit::Delay { .. })),
            "{:?}",
            alone.exit
        );
        let mut jumping = run(true);
        assert_eq!(jumping.mode, Mode::Startup, "{:?}", jumping.exit);
        // The jump validated at 60 MB/s: startup ends with that rate.
        round(&mut jumping, 6_000_000, 60_000_000, 1_520_000, 7_520_000);
        jumping.set_jump_in_flight(false);
        assert!(jumping.leave_startup());
        assert_eq!(jumping.bandwidth(), 60_000_000);
    }

    #[test]
    fn startup_doubles_and_a_lossy_round_bounds_the_window_at_the_bdp() {
        let mut m = Model::new(240_000, 1472, 150, 289, true);
        round(&mut m, 240_000, 1_200_000, 0, 240_000);
        round(&mut m, 480_000, 2_400_000, 240_000, 720_000);
        assert_eq!(m.window(), 960_000);
        // Half of a round lost: startup ends, the window falls to 85 % but not below the BDP.
        m.on_loss(500_000);
        round(&mut m, 500_000, 2_500_000, 720_000, 1_220_000);
        assert!(
            matches!(m.exit, Some(StartupExit::Loss { .. })),
            "{:?}",
            m.exit
        );
        // Target 1.5 × 2.5 MB/s × 0.2 s = 750 kB; bound max(85 % of 960 kB, 500 kB) = 816 kB.
        assert_eq!(m.window(), 750_000);
    }
}
