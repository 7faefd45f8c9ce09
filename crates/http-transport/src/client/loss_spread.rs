//! HTTP/2 under loss: when the shared connection(s) see loss, later requests spread over more
//! connections.
//!
//! Why: one TCP connection carries all of HTTP/2's streams, so every lost packet stops every
//! stream until the hole is repaired (head-of-line blocking in the kernel's receive queue),
//! and the data that arrives meanwhile fills the receive buffer. Measured at 1 Gbit/s,
//! 100 ms, 0.01% loss on a stock host (`tcp_rmem` max 32 MiB, an advertised window of about
//! 22 MB = 1.8 BDP): the server was receive-window-limited 15-20% of the time on the one
//! connection, its BBR window halved at each loss, and HTTP/2 fell behind HTTP/1.1 × 8,
//! whose eight connections each stall an eighth of the traffic with an eighth of the data
//! in flight. Several connections give several receive buffers and independent recoveries.
//!
//! The signal is the receiver's own: `tcpi_rcv_ooopack`, packets that arrived after a hole
//! (the downloading side sees no retransmits of its own). A loss *episode* is a reading where
//! that count grew, at least [`episode_gap`] after the previous episode began (one repair
//! shows up in several readings); after [`EPISODES`] episodes the transport spreads. Readings
//! are taken when a lane asks for a connection, so there is no timer.
//!
//! The gap is counted in round trips: a repair lasts one or two, and every second spent on one
//! connection under loss costs goodput (at 100 ms, 0.01% loss, the first 3 s on one
//! connection ran at 650 Mbit/s where eight connections ran at 800).
//!
//! Loss during the transfer's [`startup`] does not count, as for the path memory: at the end
//! of its slow start one connection overflows the bottleneck's queue by itself, and at 50 ms
//! that overflow alone made two episodes and spread a clean path's tree over eight
//! connections, each in a slow start of its own (3.5 % slower than one connection).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use xfer_core::layout::Lanes;

/// Episodes of loss before spreading.
pub(crate) const EPISODES: u32 = 2;
/// Loss in the first moments of a transfer is often its own start-up overflowing the
/// bottleneck's queue, not the path's: none counts for this long...
const STARTUP: Duration = Duration::from_secs(2);
/// ...or this many round trips, when that is longer.
const STARTUP_RTTS: u32 = 20;

/// How long a transfer's start-up lasts on a path of round-trip time `rtt`: its loss is not
/// the path's.
pub(crate) fn startup(rtt: Option<Duration>) -> Duration {
    rtt.map_or(STARTUP, |r| r.saturating_mul(STARTUP_RTTS).max(STARTUP))
}
/// Growth of the count closer than [`episode_gap`] to the start of the previous episode
/// belongs to it: this many round trips...
const EPISODE_GAP_RTTS: u32 = 4;
/// ...but never less than this (a short path's readings are close together)...
const EPISODE_GAP_MIN: Duration = Duration::from_millis(200);
/// ...nor more than this, which is also the gap while no RTT is known.
const EPISODE_GAP_MAX: Duration = Duration::from_secs(1);

/// How far apart two episodes of loss must begin on a path of round-trip time `rtt`.
pub(crate) fn episode_gap(rtt: Option<Duration>) -> Duration {
    rtt.map_or(EPISODE_GAP_MAX, |r| {
        r.saturating_mul(EPISODE_GAP_RTTS)
            .clamp(EPISODE_GAP_MIN, EPISODE_GAP_MAX)
    })
}

/// Loss episodes in a cumulative count of out-of-order packets.
#[derive(Debug, Default)]
pub(crate) struct Episodes {
    last_count: u64,
    episodes: u32,
    last_episode: Option<Instant>,
}

impl Episodes {
    /// Feed the count at `now` and the path's smallest RTT if known. Returns true when the
    /// count grew at least [`episode_gap`] after the previous episode began: a new one.
    pub fn observe(&mut self, count: u64, rtt: Option<Duration>, now: Instant) -> bool {
        if count <= self.last_count {
            return false;
        }
        self.last_count = count;
        let new_episode = self
            .last_episode
            .is_none_or(|t| now.saturating_duration_since(t) >= episode_gap(rtt));
        if new_episode {
            self.episodes += 1;
            self.last_episode = Some(now);
        }
        new_episode
    }

    /// Take `count` as the level from which growth counts, without counting an episode.
    pub fn observe_baseline(&mut self, count: u64) {
        self.last_count = self.last_count.max(count);
    }

    /// Episodes so far.
    pub fn count(&self) -> u32 {
        self.episodes
    }
}

/// Whether, and over how many connections, an HTTP/2 transport's lanes are spread.
#[derive(Debug)]
pub(crate) struct LossSpread {
    /// Connections once loss is seen; `base` when spreading is off.
    target: usize,
    /// Connections requests go to now: `base`, then `target`.
    active: AtomicUsize,
    base: usize,
    /// Spread from the start on the path memory's word, not on loss seen here.
    from_memory: std::sync::atomic::AtomicBool,
    watch: Mutex<Watch>,
}

/// The episodes, and when the first reading came (the transfer's start).
#[derive(Debug, Default)]
struct Watch {
    episodes: Episodes,
    began: Option<Instant>,
}

impl LossSpread {
    /// `target <= base` turns spreading off.
    pub fn new(base: usize, target: usize) -> Self {
        let base = base.max(1);
        Self {
            target: target.max(base),
            active: AtomicUsize::new(base),
            base,
            from_memory: std::sync::atomic::AtomicBool::new(false),
            watch: Mutex::new(Watch::default()),
        }
    }

    /// Connections in use now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Connections the transport may use at most (the number of shared slots it needs).
    pub fn max_connections(&self) -> usize {
        self.target
    }

    /// Whether readings can still change anything.
    pub fn armed(&self) -> bool {
        self.active() < self.target
    }

    /// Loss episodes seen so far.
    pub fn episodes(&self) -> u32 {
        self.lock().episodes.count()
    }

    /// Feed the out-of-order packet count of the connections in use at `now`, and their
    /// smallest RTT if known. Returns true when this reading made the transport spread.
    pub fn observe(&self, count: u64, rtt: Option<Duration>, now: Instant) -> bool {
        if !self.armed() {
            return false;
        }
        let mut w = self.lock();
        let began = *w.began.get_or_insert(now);
        if now < began + startup(rtt) {
            w.episodes.observe_baseline(count);
            return false;
        }
        if !w.episodes.observe(count, rtt, now) || w.episodes.count() < EPISODES {
            return false;
        }
        self.active.swap(self.target, Ordering::Relaxed) != self.target
    }

    /// Spread now, whatever the readings say: the last transfer on this path saw loss
    /// (`path_memory.rs`).
    pub fn spread_now(&self) {
        self.from_memory.store(true, Ordering::Relaxed);
        self.active.store(self.target, Ordering::Relaxed);
    }

    /// For the report: over how many connections the lanes were spread and why (`path_memory`
    /// or `loss`), once they were.
    pub fn report(&self) -> Option<xfer_core::progress::SpreadReport> {
        let active = self.active();
        (active > self.base).then(|| xfer_core::progress::SpreadReport {
            connections: active,
            cause: if self.from_memory.load(Ordering::Relaxed) {
                "path_memory"
            } else {
                "loss"
            },
        })
    }

    /// The lanes of `configured` divided over the connections in use: unchanged until the
    /// transport spreads, then as even as the lane count allows.
    pub fn layout(&self, configured: Lanes) -> Lanes {
        let active = self.active();
        if active <= configured.connections {
            return configured;
        }
        let lanes = configured.count();
        Lanes::new(active.min(lanes), lanes.div_ceil(active.min(lanes)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spread whose transfer began at the returned instant, now past its start-up on a
    /// path of `rtt`: the instant episodes count from.
    fn past_startup(s: &LossSpread, rtt: Option<Duration>) -> Instant {
        let t0 = Instant::now();
        assert!(!s.observe(0, rtt, t0), "no loss, no episode");
        t0 + startup(rtt)
    }

    #[test]
    fn spreads_after_two_separate_episodes() {
        let s = LossSpread::new(1, 8);
        let rtt = Some(Duration::from_millis(100));
        let t0 = past_startup(&s, rtt);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(s.armed());
        assert!(!s.observe(500, rtt, at(100)), "first episode");
        assert!(!s.observe(900, rtt, at(400)), "the same repair, read again");
        assert!(!s.observe(900, rtt, at(2_000)), "no growth, no episode");
        assert_eq!(s.episodes(), 1);
        assert_eq!(s.active(), 1);
        assert!(s.observe(1_400, rtt, at(2_100)), "second episode spreads");
        assert_eq!(s.active(), 8);
        assert!(!s.armed());
        assert!(!s.observe(9_000, rtt, at(9_000)), "spreads once");
    }

    #[test]
    fn loss_in_the_start_up_is_not_the_paths() {
        let s = LossSpread::new(1, 8);
        let rtt = Some(Duration::from_millis(50));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(
            startup(rtt),
            Duration::from_secs(2),
            "20 round trips, at least 2 s"
        );
        assert_eq!(
            startup(Some(Duration::from_millis(200))),
            Duration::from_secs(4)
        );
        assert!(!s.observe(0, rtt, at(0)));
        // The slow start's overflow, in two bursts well apart: no episode.
        assert!(!s.observe(3_000, rtt, at(600)));
        assert!(!s.observe(7_000, rtt, at(1_500)));
        assert_eq!(s.episodes(), 0);
        // What the start-up left is the level later growth counts from.
        assert!(!s.observe(7_000, rtt, at(2_100)), "no growth since");
        assert_eq!(s.episodes(), 0);
        assert!(
            !s.observe(7_010, rtt, at(2_200)),
            "the path's first episode"
        );
        assert!(s.observe(7_020, rtt, at(2_500)), "and its second");
    }

    #[test]
    fn episodes_are_round_trips_apart() {
        // 100 ms: four round trips.
        let s = LossSpread::new(1, 8);
        let rtt = Some(Duration::from_millis(100));
        let t0 = past_startup(&s, rtt);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(!s.observe(10, rtt, at(0)));
        assert!(
            !s.observe(20, rtt, at(399)),
            "within the gap: the same episode"
        );
        assert!(
            s.observe(30, rtt, at(400)),
            "four round trips on: a second one"
        );
        // A short path's gap has a floor; a long one's a ceiling, also used without an RTT.
        assert_eq!(episode_gap(Some(Duration::from_millis(5))), EPISODE_GAP_MIN);
        assert_eq!(
            episode_gap(Some(Duration::from_millis(300))),
            EPISODE_GAP_MAX
        );
        assert_eq!(episode_gap(None), EPISODE_GAP_MAX);
        let s = LossSpread::new(1, 8);
        let t0 = past_startup(&s, None);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(!s.observe(10, None, at(0)));
        assert!(!s.observe(20, None, at(900)));
        assert!(s.observe(30, None, at(1_000)));
    }

    #[test]
    fn the_report_says_how_far_and_why() {
        let s = LossSpread::new(1, 8);
        assert_eq!(s.report(), None, "not spread");
        let rtt = Some(Duration::from_millis(100));
        let t0 = past_startup(&s, rtt);
        s.observe(1, rtt, t0);
        s.observe(2, rtt, t0 + Duration::from_secs(1));
        let r = s.report().expect("spread");
        assert_eq!((r.connections, r.cause), (8, "loss"));
        let s = LossSpread::new(1, 3);
        s.spread_now();
        let r = s.report().expect("spread");
        assert_eq!((r.connections, r.cause), (3, "path_memory"));
    }

    #[test]
    fn off_when_the_target_is_not_above_the_layout() {
        let s = LossSpread::new(2, 1);
        let t0 = Instant::now();
        for i in 0..5 {
            assert!(!s.observe(100 * (i + 1), None, t0 + Duration::from_secs(2 * i)));
        }
        assert_eq!(s.active(), 2);
        assert_eq!(s.max_connections(), 2);
    }

    #[test]
    fn lanes_are_divided_over_the_connections_in_use() {
        let s = LossSpread::new(1, 4);
        let one = Lanes::new(1, 8);
        assert_eq!(s.layout(one), one);
        let t0 = past_startup(&s, None);
        s.observe(1, None, t0);
        s.observe(2, None, t0 + EPISODE_GAP_MAX);
        let spread = s.layout(one);
        assert_eq!(spread, Lanes::new(4, 2));
        let conns: Vec<usize> = (0..8).map(|l| spread.connection_of(l)).collect();
        assert_eq!(conns, [0, 0, 1, 1, 2, 2, 3, 3]);
        // Fewer lanes than connections: one lane per connection, no empty ones.
        assert_eq!(s.layout(Lanes::new(1, 3)), Lanes::new(3, 1));
    }
}
