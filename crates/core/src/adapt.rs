//! The lane-count controller: how many lanes a transfer runs, chosen from what it measures.
//!
//! A hill climber in the manner of the Falcon transfer optimiser and FTS's optimiser: measure
//! goodput over a window at the current count, add lanes, measure again, keep them only if
//! goodput rose by enough and the loss the receiver sees did not; otherwise retire them and
//! hold for a while before the next probe. Each failed probe doubles the hold, so a count that
//! fits the path is left alone instead of being shaken every few seconds.
//!
//! It does no I/O and reads no clock: the driver feeds it [`Sample`]s (time since the start of
//! the transfer, cumulative bytes received, the path's round trip, a cumulative loss count) and
//! takes [`Decision`]s from [`LaneController::poll_decision`]. Tests feed it synthetic goodput
//! curves with a virtual clock.
//!
//! Why windows span round trips, and why there is a settle time after every change:
//! - goodput over less than several round trips is mostly noise (a 16 MiB chunk at 100 Mbit/s
//!   per lane lasts 1.3 s; bursts of ACK-clocked data arrive once per round trip);
//! - a new TCP or QUIC connection starts in slow start: for a few round trips it delivers far
//!   less than it will, so measuring right after an addition would undervalue it;
//! - a retired HTTP/1.1 lane finishes its current chunk before it goes, so the count the driver
//!   runs falls some time after the decision: the controller waits until the driver reports
//!   the new count before it measures again.
//!
//! ```text
//!  Warmup ──► Measure(baseline) ──► add step ──► Settle ──► Measure(probe)
//!                ▲                                              │
//!                │           gain ≥ min_gain, no new loss ──────┤──► add again
//!                │                                              │
//!                └──── Hold (×2 after each failed probe) ◄──────┘ retire the step
//! ```

use std::time::Duration;

use serde::Serialize;

/// Most windows the first baseline waits for goodput to stop climbing.
const MAX_RAMP_WINDOWS: u32 = 8;

/// Bytes per packet used to turn received bytes into a packet count for the loss rate: a
/// 1500-byte MTU's TCP payload. A larger MTU only makes the rate read lower.
const BYTES_PER_PACKET: f64 = 1448.0;

/// How the controller behaves. Sized for the paths xfer is for: 1-10 Gbit/s, 20-300 ms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdaptConfig {
    /// Fewest lanes the transfer runs. Default 2.
    pub min_lanes: usize,
    /// Most lanes the transfer runs. Default 64: beyond that, each connection's own slow
    /// start and queue share cost more than they bring on the paths measured.
    pub max_lanes: usize,
    /// Lanes to start with. Default 8, the fixed count that measured best at 50-100 ms.
    pub initial_lanes: usize,
    /// Shortest measurement window. Default 1 s.
    pub min_window: Duration,
    /// A window spans at least this many round trips. Default 8.
    pub window_rtts: u32,
    /// Time after the start before the first window, in round trips (slow start and the
    /// lanes' first requests distort it). Default 10, at least `min_window`; then windows
    /// repeat at the starting count until two agree within `min_gain`.
    pub warmup_rtts: u32,
    /// Time after a change before the next window, in round trips. Default 4, and never less
    /// than half of `min_window`: new connections' slow start (from a 10-packet window to an
    /// eighth of 1 Gbit/s at 50 ms takes about 6 round trips) is covered by that floor at
    /// short round trips (0.5 s is 10 round trips at 50 ms) and by 4 round trips at long ones.
    pub settle_rtts: u32,
    /// Added lanes stay only if goodput rose by at least this fraction. Default 0.05.
    pub min_gain: f64,
    /// Lost or out-of-order packets per packet received above which the controller stops
    /// adding lanes and retires some. Default 0.002 (0.2 %): one-BDP queues overflowed by
    /// more connections show far above it, a path's random loss of 0.01 % far below.
    pub max_loss: f64,
    /// Windows to hold after a failed probe before the next; doubles with each consecutive
    /// failure, up to `max_hold_windows`. Default 2.
    pub hold_windows: u32,
    /// Longest hold, in windows. Default 16.
    pub max_hold_windows: u32,
    /// Round trip assumed until the driver reports one. Default 100 ms.
    pub default_rtt: Duration,
}

impl Default for AdaptConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl AdaptConfig {
    /// The defaults, for constants built on them.
    pub const DEFAULT: Self = Self {
        min_lanes: 2,
        max_lanes: 64,
        initial_lanes: 8,
        min_window: Duration::from_secs(1),
        window_rtts: 8,
        warmup_rtts: 10,
        settle_rtts: 4,
        min_gain: 0.05,
        max_loss: 0.002,
        hold_windows: 2,
        max_hold_windows: 16,
        default_rtt: Duration::from_millis(100),
    };
}

/// A configuration the controller cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("adaptive lanes: {0}")]
pub struct AdaptConfigError(String);

impl AdaptConfig {
    /// Refuse bounds that admit no count and knobs that would never measure.
    pub fn validate(&self) -> Result<(), AdaptConfigError> {
        let err = |m: String| Err(AdaptConfigError(m));
        if self.min_lanes == 0 {
            return err("the fewest lanes must be at least 1".into());
        }
        if self.min_lanes > self.max_lanes {
            return err(format!(
                "the fewest lanes ({}) exceed the most ({})",
                self.min_lanes, self.max_lanes
            ));
        }
        if self.min_window.is_zero() || self.window_rtts == 0 {
            return err("a measurement window must be longer than zero".into());
        }
        if !(self.min_gain.is_finite() && self.min_gain >= 0.0) {
            return err(format!("min_gain {} is not a fraction", self.min_gain));
        }
        if !(self.max_loss.is_finite() && self.max_loss >= 0.0) {
            return err(format!("max_loss {} is not a fraction", self.max_loss));
        }
        Ok(())
    }

    /// The starting count, within the bounds.
    pub fn start_lanes(&self) -> usize {
        self.initial_lanes.clamp(self.min_lanes, self.max_lanes)
    }
}

/// What the driver measured, cumulative since the transfer began.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Time since the transfer began, on the driver's clock.
    pub at: Duration,
    /// Payload bytes received so far over all lanes.
    pub received: u64,
    /// Bytes still to fetch: near the end lanes idle and goodput falls for reasons a count
    /// cannot fix.
    pub remaining: u64,
    /// Lanes running now (retired lanes still finishing a chunk included). Fewer than the
    /// target (a lane that could not connect) does not stop the controller.
    pub lanes: usize,
    /// The path's round trip, when measured.
    pub rtt: Option<Duration>,
    /// Packets the receiving side saw lost (out of order, retransmitted), cumulative, when the
    /// transport can tell (TCP: `tcpi_rcv_ooopack`).
    pub loss_events: Option<u64>,
}

/// What the driver should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "lanes")]
pub enum Action {
    /// Open this many more lanes.
    Add(usize),
    /// Retire this many lanes, each after its current chunk.
    Retire(usize),
    /// Keep the count.
    Hold,
}

/// Why a decision was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The first window at the starting count: probe upwards.
    Baseline,
    /// Goodput rose by at least `min_gain` with the added lanes: keep them, probe further.
    GoodputRose,
    /// Goodput did not rise by `min_gain`: the added lanes cost more than they bring.
    NoGain,
    /// Loss rose above `max_loss` with the added lanes.
    LossRose,
    /// Loss above `max_loss` at a steady count: fewer lanes.
    Loss,
    /// Holding after a failed probe.
    Holding,
    /// The hold is over: probing upwards again (the path may have changed).
    Reprobe,
    /// At the most lanes allowed.
    AtMax,
    /// Too little left to judge another change.
    Ending,
}

impl Reason {
    /// A phrase for the summary line.
    pub fn describe(self) -> &'static str {
        match self {
            Reason::Baseline => "first measurement, probing up",
            Reason::GoodputRose => "goodput rose with more lanes",
            Reason::NoGain => "more lanes did not raise goodput",
            Reason::LossRose => "more lanes raised loss",
            Reason::Loss => "loss at a steady count",
            Reason::Holding => "holding after a failed probe",
            Reason::Reprobe => "probing again after a hold",
            Reason::AtMax => "at the upper bound",
            Reason::Ending => "too little left to probe",
        }
    }
}

/// One decision, for the driver and the report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Decision {
    /// Seconds since the transfer began.
    pub at_seconds: f64,
    pub action: Action,
    /// The count after the action.
    pub lanes: usize,
    /// Goodput over the window that led to it, bits per second.
    pub goodput_bps: f64,
    /// Lost or out-of-order packets per packet received over that window, when known.
    pub loss: Option<f64>,
    pub reason: Reason,
}

/// One window's result.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Measured {
    lanes: usize,
    goodput_bps: f64,
    loss: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// From the start until [`LaneController::warmup`] has passed: slow start and the
    /// lanes' first requests.
    Warmup,
    /// Waiting `until` for the count to reach the target and new lanes to leave slow
    /// start; then `next`.
    Settle { until: Duration, next: Next },
    /// A window from `from`; `before` is the measurement before `added` lanes were added.
    Window {
        from: Mark,
        before: Option<(Measured, usize)>,
    },
    /// Holding: plain windows until `windows` more have passed; `last` is the window before.
    Hold {
        from: Mark,
        windows: u32,
        last: Option<Measured>,
    },
    /// The transfer is nearly done: no more changes.
    Done,
}

/// What follows a settle.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Next {
    /// A window judged against the measurement before `.1` lanes were added.
    Probe(Measured, usize),
    /// Holding for this many windows.
    Hold(u32),
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Mark {
    at: Duration,
    received: u64,
    loss_events: Option<u64>,
}

impl Mark {
    fn of(s: &Sample) -> Self {
        Self {
            at: s.at,
            received: s.received,
            loss_events: s.loss_events,
        }
    }
}

/// The controller. Feed it samples with [`LaneController::handle_sample`]; take decisions
/// with [`LaneController::poll_decision`].
#[derive(Debug, Clone)]
pub struct LaneController {
    cfg: AdaptConfig,
    /// The count decided, which the driver is moving to.
    target: usize,
    phase: Phase,
    rtt: Duration,
    failed_probes: u32,
    /// The window before, while the first baseline waits for goodput to stop climbing.
    ramp: Option<Measured>,
    ramp_windows: u32,
    pending: Option<Decision>,
    log: DecisionLog,
}

impl LaneController {
    /// A controller starting at [`AdaptConfig::start_lanes`]; `cfg` must have passed
    /// [`AdaptConfig::validate`] (bounds out of order are put in order).
    pub fn new(mut cfg: AdaptConfig) -> Self {
        cfg.min_lanes = cfg.min_lanes.max(1);
        cfg.max_lanes = cfg.max_lanes.max(cfg.min_lanes);
        let target = cfg.start_lanes();
        Self {
            target,
            phase: Phase::Warmup,
            rtt: cfg.default_rtt,
            failed_probes: 0,
            ramp: None,
            ramp_windows: 0,
            pending: None,
            log: DecisionLog::default(),
            cfg,
        }
    }

    /// The count decided so far.
    pub fn target(&self) -> usize {
        self.target
    }

    pub fn config(&self) -> &AdaptConfig {
        &self.cfg
    }

    /// The decisions taken so far, consecutive holds at one count merged.
    pub fn decisions(&self) -> &[Decision] {
        &self.log.0
    }

    /// The next decision to apply, once per decision.
    pub fn poll_decision(&mut self) -> Option<Decision> {
        self.pending.take()
    }

    fn window(&self) -> Duration {
        (self.rtt * self.cfg.window_rtts).max(self.cfg.min_window)
    }

    fn warmup(&self) -> Duration {
        (self.rtt * self.cfg.warmup_rtts).max(self.cfg.min_window)
    }

    fn settle(&self) -> Duration {
        (self.rtt * self.cfg.settle_rtts).max(self.cfg.min_window / 2)
    }

    /// Take one sample. The driver samples often (every few hundred milliseconds); the
    /// controller acts only at the end of its windows.
    pub fn handle_sample(&mut self, s: Sample) {
        if let Some(rtt) = s.rtt.filter(|r| !r.is_zero()) {
            self.rtt = rtt;
        }
        match self.phase {
            Phase::Done => {}
            Phase::Warmup => {
                if s.at >= self.warmup() && s.lanes <= self.target {
                    self.phase = Phase::Window {
                        from: Mark::of(&s),
                        before: None,
                    };
                }
            }
            Phase::Settle { until, next } => {
                if s.at >= until && s.lanes <= self.target {
                    let from = Mark::of(&s);
                    self.phase = match next {
                        Next::Probe(m, added) => Phase::Window {
                            from,
                            before: Some((m, added)),
                        },
                        Next::Hold(windows) => Phase::Hold {
                            from,
                            windows,
                            last: None,
                        },
                    };
                }
            }
            Phase::Window { from, before } => {
                if let Some(m) = self.measure(&from, &s) {
                    self.judge(&s, m, before);
                }
            }
            Phase::Hold {
                from,
                windows,
                last,
            } => {
                if let Some(m) = self.measure(&from, &s) {
                    self.hold_window(&s, m, windows, last);
                }
            }
        }
    }

    /// The window from `from` to `s`, once it is long enough.
    fn measure(&self, from: &Mark, s: &Sample) -> Option<Measured> {
        let span = s.at.checked_sub(from.at)?;
        if span < self.window() {
            return None;
        }
        let bytes = s.received.saturating_sub(from.received);
        if bytes == 0 {
            // Nothing arrived yet (lanes still connecting, a stalled server): a window
            // measures a count only once bytes flow.
            return None;
        }
        let goodput_bps = bytes as f64 * 8.0 / span.as_secs_f64();
        let loss = match (from.loss_events, s.loss_events) {
            (Some(a), Some(b)) => {
                Some(b.saturating_sub(a) as f64 / (bytes as f64 / BYTES_PER_PACKET))
            }
            _ => None,
        };
        Some(Measured {
            lanes: s.lanes,
            goodput_bps,
            loss,
        })
    }

    fn lossy(&self, m: &Measured) -> bool {
        m.loss.is_some_and(|l| l > self.cfg.max_loss)
    }

    /// Whether the transfer ends before another probe could be judged.
    fn ending(&self, s: &Sample, m: &Measured) -> bool {
        let left = s.remaining as f64 * 8.0 / m.goodput_bps.max(1.0);
        left < (self.settle() + self.window() * 2).as_secs_f64()
    }

    /// A window ended: after the warmup (`before` is `None`) or after a probe.
    fn judge(&mut self, s: &Sample, m: Measured, before: Option<(Measured, usize)>) {
        // Loss alone says nothing about the count: a path's random loss is there at any count
        // (and more connections ride it out better). Loss that the added lanes brought is
        // what counts against them.
        let Some((prev, added)) = before else {
            // Slow start outlasts any fixed warmup on some paths: a baseline taken while
            // goodput still climbs at the same count would credit the climb to the probe.
            // Measure again until two windows agree (or too many have passed).
            let climbing = self
                .ramp
                .is_none_or(|r| m.goodput_bps > r.goodput_bps * (1.0 + self.cfg.min_gain));
            if climbing && self.ramp_windows < MAX_RAMP_WINDOWS {
                self.ramp = Some(m);
                self.ramp_windows += 1;
                self.phase = Phase::Window {
                    from: Mark::of(s),
                    before: None,
                };
                return;
            }
            self.ramp = None;
            return self.probe_up(s, m, Reason::Baseline);
        };
        let gain = m.goodput_bps / prev.goodput_bps.max(1.0) - 1.0;
        let loss_rose = self.lossy(&m) && m.loss.unwrap_or(0.0) > 2.0 * prev.loss.unwrap_or(0.0);
        if loss_rose {
            self.failed(s, m, added, Reason::LossRose);
        } else if gain < self.cfg.min_gain {
            self.failed(s, m, added, Reason::NoGain);
        } else {
            self.failed_probes = 0;
            self.probe_up(s, m, Reason::GoodputRose);
        }
    }

    fn hold_window(&mut self, s: &Sample, m: Measured, windows: u32, last: Option<Measured>) {
        // Loss with falling goodput at a steady count: the lanes overrun the path's queue.
        let falling =
            last.is_some_and(|l| m.goodput_bps < l.goodput_bps * (1.0 - self.cfg.min_gain));
        if self.lossy(&m) && falling && self.target > self.cfg.min_lanes {
            return self.step_down(s, m, Reason::Loss);
        }
        if self.ending(s, &m) {
            return self.decide(s, m, Action::Hold, Reason::Ending);
        }
        if windows <= 1 {
            return self.probe_up(s, m, Reason::Reprobe);
        }
        let why = if self.target == self.cfg.max_lanes {
            Reason::AtMax
        } else {
            Reason::Holding
        };
        self.record(s, m, Action::Hold, why);
        self.phase = Phase::Hold {
            from: Mark::of(s),
            windows: windows - 1,
            last: Some(m),
        };
    }

    /// Add a step of lanes (half the count, at least one) and judge them after a settle.
    fn probe_up(&mut self, s: &Sample, m: Measured, why: Reason) {
        if self.ending(s, &m) {
            return self.decide(s, m, Action::Hold, Reason::Ending);
        }
        let step = (self.target / 2)
            .max(1)
            .min(self.cfg.max_lanes - self.target);
        if step == 0 {
            self.record(s, m, Action::Hold, Reason::AtMax);
            self.phase = Phase::Hold {
                from: Mark::of(s),
                windows: self.hold_for(),
                last: Some(m),
            };
            return;
        }
        self.target += step;
        self.decide(s, m, Action::Add(step), why);
        self.phase = Phase::Settle {
            until: s.at + self.settle(),
            next: Next::Probe(m, step),
        };
    }

    /// The probe did not pay: retire its lanes and hold, longer after each failure.
    fn failed(&mut self, s: &Sample, m: Measured, added: usize, why: Reason) {
        self.failed_probes = self.failed_probes.saturating_add(1);
        let retire = added.min(self.target - self.cfg.min_lanes);
        self.target -= retire;
        self.decide(s, m, Action::Retire(retire), why);
        // The first hold window begins once the retired lanes are gone.
        self.phase = Phase::Settle {
            until: s.at,
            next: Next::Hold(self.hold_for()),
        };
    }

    fn hold_for(&self) -> u32 {
        let doubled = self
            .cfg
            .hold_windows
            .saturating_mul(1 << self.failed_probes.saturating_sub(1).min(16));
        doubled.clamp(1, self.cfg.max_hold_windows.max(1))
    }

    /// Loss at a steady count: a quarter fewer lanes (at least one), not below the minimum.
    fn step_down(&mut self, s: &Sample, m: Measured, why: Reason) {
        let retire = (self.target / 4)
            .max(1)
            .min(self.target - self.cfg.min_lanes);
        self.failed_probes = self.failed_probes.saturating_add(1);
        self.target -= retire;
        self.decide(s, m, Action::Retire(retire), why);
        self.phase = Phase::Settle {
            until: s.at,
            next: Next::Hold(self.hold_for()),
        };
    }

    fn decide(&mut self, s: &Sample, m: Measured, action: Action, why: Reason) {
        let action = match action {
            Action::Add(0) | Action::Retire(0) => Action::Hold,
            a => a,
        };
        let d = self.record(s, m, action, why);
        if action != Action::Hold {
            self.pending = Some(d);
        }
        if why == Reason::Ending {
            self.phase = Phase::Done;
        }
    }

    fn record(&mut self, s: &Sample, m: Measured, action: Action, why: Reason) -> Decision {
        let d = Decision {
            at_seconds: s.at.as_secs_f64(),
            action,
            lanes: self.target,
            goodput_bps: m.goodput_bps,
            loss: m.loss,
            reason: why,
        };
        self.log.push(d);
        d
    }
}

/// Decisions in order; a hold that follows a hold at the same count replaces it (the latest
/// reason and figures win), so a long transfer's log stays short.
#[derive(Debug, Clone, Default)]
struct DecisionLog(Vec<Decision>);

impl DecisionLog {
    fn push(&mut self, d: Decision) {
        if let Some(last) = self.0.last_mut() {
            if d.action == Action::Hold && last.action == Action::Hold && last.lanes == d.lanes {
                *last = d;
                return;
            }
        }
        self.0.push(d);
    }
}

/// What the report says about the lane count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdaptReport {
    /// Bounds the count was kept within.
    pub min_lanes: usize,
    pub max_lanes: usize,
    pub initial_lanes: usize,
    /// The count when the transfer ended.
    pub final_lanes: usize,
    /// Most lanes running at once.
    pub peak_lanes: usize,
    pub decisions: Vec<Decision>,
}

impl AdaptReport {
    /// One line for the summary: `lanes auto 2..64: 8→12→8 (more lanes did not raise
    /// goodput)`; a long path keeps its first and last changes.
    pub fn summary(&self) -> String {
        let mut path = vec![self.initial_lanes.to_string()];
        let changes: Vec<&Decision> = self
            .decisions
            .iter()
            .filter(|d| d.action != Action::Hold)
            .collect();
        for (i, d) in changes.iter().enumerate() {
            if changes.len() > 8 && i == 4 {
                path.push(format!("…({} more)…", changes.len() - 7));
            }
            if changes.len() <= 8 || i < 4 || i + 3 >= changes.len() {
                path.push(d.lanes.to_string());
            }
        }
        let why = self
            .decisions
            .iter()
            .rev()
            .find(|d| d.action != Action::Hold)
            .or(self.decisions.last())
            .map_or("no full measurement window", |d| d.reason.describe());
        format!(
            "lanes auto {}..{}: {} ({why})",
            self.min_lanes,
            self.max_lanes,
            path.join("→")
        )
    }
}

#[cfg(test)]
#[path = "adapt_tests.rs"]
mod tests;
