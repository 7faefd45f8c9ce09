//! The Careful Resume phase machine (RFC 9959, formerly draft-ietf-tsvwg-careful-resume),
//! free of quinn and of clocks: every event carries its time, so tests drive it exactly.
//!
//! ```text
//!  Reconnaissance ──(first cwnd-limited ack, RTT check passes, jump > cwnd)──► Unvalidated
//!        │ loss / RTT differs / nothing to gain                                 │ jump sent, or
//!        ▼                                                                     │ first jump packet acked
//!      Normal ◄──(last jump packet acked)── Validating ◄──────────────────────┘
//!        ▲                                      │ loss        (loss in Unvalidated too)
//!        └──────(last jump packet acked)── SafeRetreat ◄──────┘
//! ```
//!
//! While Unvalidated the window is at most half the saved one, and quinn paces it over the
//! RTT (its pacer spreads a window over one smoothed RTT), so the jump is a paced rate, not
//! a burst. A loss while the jump is unconfirmed drops the window to half of what the path
//! has delivered since the jump (the pipe size), below what the wrapped controller would do
//! alone, until every packet sent in the jump is accounted for.

use std::time::{Duration, Instant};

use super::SavedPath;

/// Where a connection is in Careful Resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Normal congestion control while the first RTT samples arrive; saved state in hand.
    Reconnaissance,
    /// Window raised to the jump, not yet confirmed by acknowledgements.
    Unvalidated,
    /// The jump has been sent; waiting for its last packet to be acknowledged.
    Validating,
    /// A loss during the jump: reduced window until the jump's packets are accounted for.
    SafeRetreat,
    /// The wrapped controller alone (no saved state, check failed, or resume finished).
    Normal,
}

/// Why Reconnaissance ended without a jump, or what a transition was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The window jumped to this many bytes.
    Jumped { window: u64 },
    /// The current RTT is outside the accepted range around the saved one.
    RttMismatch { current: Duration, saved: Duration },
    /// The wrapped controller's window already reaches the jump.
    NothingToGain,
    /// A loss before the jump: no resume on this connection.
    LossBeforeJump,
    /// The jump was sent (or its first packet acknowledged).
    Validating,
    /// A loss during the jump; the window fell to this many bytes.
    Retreated { window: u64 },
    /// Every packet of the jump is accounted for; the wrapped controller takes over.
    Done,
}

/// RTTs below this are counted as this (RFC 9002's timer granularity): on very short paths
/// a few microseconds of scheduling noise would otherwise fail the RTT check.
pub(crate) const RTT_FLOOR: Duration = Duration::from_millis(1);

/// Lowest window the machine sets, in datagrams (RFC 9002's minimum window).
const MIN_WINDOW_DATAGRAMS: u64 = 2;

/// While unvalidated the window quinn sees is the jump plus this fraction (1/N), so that the
/// jump leaves within its round trip. quinn paces 1.25 × window / smoothed RTT but keeps at
/// most 2 ms of tokens and waits for a full bucket: a timer that fires late loses what would
/// have refilled past it. Through the lab at 200 ms a 6.0 MB jump had 5.3 MB out when its
/// first packet was acknowledged, about 0.7 × that rate. What is sent stays the jump:
/// Validating starts, at the jump, as its last byte goes.
const JUMP_PACING_HEADROOM: u64 = 4;

/// Rules of one connection's resume, from the knobs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Largest jump, bytes.
    pub max_jump: u64,
    /// The current RTT must be at least saved / this and at most saved × `rtt_ceiling`.
    pub rtt_floor_factor: u32,
    pub rtt_ceiling_factor: u32,
}

/// Careful Resume of one connection.
#[derive(Debug, Clone)]
pub(crate) struct Resume {
    phase: Phase,
    saved: Option<SavedPath>,
    limits: Limits,
    mtu: u64,
    min_rtt: Option<Duration>,
    /// Window while in Unvalidated, Validating or SafeRetreat, bytes.
    cwnd: u64,
    jump: u64,
    /// Bytes acknowledged since the jump (RFC 9959's PipeSize).
    pipe: u64,
    in_flight: u64,
    /// Connections to the same peer open now, this one included: they share the saved path.
    share: u64,
    /// Bytes sent before the jump: evidence that the sender had more to send than its window.
    sent_before: u64,
    sent_in_jump: u64,
    first_jump_sent: Option<Instant>,
    last_jump_sent: Option<Instant>,
}

impl Resume {
    /// A machine for a new connection; without saved state it starts in Normal.
    pub fn new(saved: Option<SavedPath>, limits: Limits, mtu: u16) -> Self {
        Self {
            phase: if saved.is_some() {
                Phase::Reconnaissance
            } else {
                Phase::Normal
            },
            saved,
            limits,
            mtu: u64::from(mtu),
            min_rtt: None,
            cwnd: 0,
            jump: 0,
            pipe: 0,
            in_flight: 0,
            share: 1,
            sent_before: 0,
            sent_in_jump: 0,
            first_jump_sent: None,
            last_jump_sent: None,
        }
    }

    pub fn reconnoitring(&self) -> bool {
        self.phase == Phase::Reconnaissance
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn set_mtu(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu);
    }

    fn min_window(&self) -> u64 {
        MIN_WINDOW_DATAGRAMS * self.mtu
    }

    /// The window quinn should use, given the wrapped controller's.
    pub fn window(&self, inner: u64) -> u64 {
        match self.phase {
            Phase::Unvalidated => (self.cwnd + self.cwnd / JUMP_PACING_HEADROOM).max(inner),
            Phase::Validating => self.cwnd.max(inner),
            Phase::SafeRetreat => self.cwnd,
            Phase::Reconnaissance | Phase::Normal => inner,
        }
    }

    pub fn on_sent(&mut self, now: Instant, bytes: u64) -> Option<Event> {
        if self.phase == Phase::Reconnaissance {
            self.sent_before = self.sent_before.saturating_add(bytes);
        }
        if self.phase != Phase::Unvalidated {
            return None;
        }
        self.first_jump_sent.get_or_insert(now);
        self.last_jump_sent = Some(now);
        self.sent_in_jump = self.sent_in_jump.saturating_add(bytes);
        if self.sent_in_jump >= self.jump {
            return Some(self.enter_validating());
        }
        None
    }

    /// How many connections to this peer are open now (this one included). The saved BDP is
    /// the path's, so concurrent connections split the jump: together they jump to half of it.
    pub fn set_share(&mut self, connections: u64) {
        self.share = connections.max(1);
    }

    pub fn on_end_acks(&mut self, in_flight: u64) {
        self.in_flight = in_flight;
    }

    /// One acknowledged packet, sent at `sent`; `inner` is the wrapped controller's window.
    pub fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        inner: u64,
    ) -> Option<Event> {
        let sample = now.saturating_duration_since(sent).max(RTT_FLOOR);
        self.min_rtt = Some(self.min_rtt.map_or(sample, |m| m.min(sample)));
        match self.phase {
            // Jump only for a sender with more to send than its window: quinn's flag says it
            // was not short of data, and it has sent at least half a window (a handshake
            // flight alone is not a cwnd-limited sender).
            Phase::Reconnaissance if !app_limited && self.sent_before >= inner / 2 => {
                self.reconnaissance_done(inner)
            }
            Phase::Reconnaissance | Phase::Normal => None,
            Phase::Unvalidated => {
                self.pipe = self.pipe.saturating_add(bytes);
                if self.first_jump_sent.is_some_and(|first| sent >= first) {
                    return Some(self.enter_validating());
                }
                None
            }
            Phase::Validating | Phase::SafeRetreat => {
                self.pipe = self.pipe.saturating_add(bytes);
                match self.last_jump_sent {
                    Some(last) if sent < last => None,
                    _ => {
                        self.phase = Phase::Normal;
                        Some(Event::Done)
                    }
                }
            }
        }
    }

    pub fn on_congestion(&mut self) -> Option<Event> {
        match self.phase {
            Phase::Reconnaissance => {
                self.phase = Phase::Normal;
                Some(Event::LossBeforeJump)
            }
            Phase::Unvalidated | Phase::Validating => {
                self.phase = Phase::SafeRetreat;
                self.cwnd = (self.pipe / 2).max(self.min_window());
                Some(Event::Retreated { window: self.cwnd })
            }
            Phase::SafeRetreat | Phase::Normal => None,
        }
    }

    fn reconnaissance_done(&mut self, inner: u64) -> Option<Event> {
        let (saved, current) = match (self.saved, self.min_rtt) {
            (Some(s), Some(c)) => (s, c),
            _ => return None,
        };
        self.phase = Phase::Normal;
        let saved_rtt = saved.rtt.max(RTT_FLOOR);
        if current < saved_rtt / self.limits.rtt_floor_factor.max(1)
            || current > saved_rtt.saturating_mul(self.limits.rtt_ceiling_factor.max(1))
        {
            return Some(Event::RttMismatch {
                current,
                saved: saved_rtt,
            });
        }
        let jump = (saved.cwnd / 2 / self.share).min(self.limits.max_jump);
        if jump <= inner {
            return Some(Event::NothingToGain);
        }
        self.phase = Phase::Unvalidated;
        self.jump = jump;
        self.cwnd = jump;
        self.pipe = self.in_flight;
        Some(Event::Jumped { window: jump })
    }

    fn enter_validating(&mut self) -> Event {
        self.phase = Phase::Validating;
        // What is actually outstanding, not more: an application that did not fill the jump
        // must not be able to send the rest of it unvalidated later.
        self.cwnd = self.in_flight.max(self.sent_in_jump).min(self.jump);
        Event::Validating
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    const MS: Duration = Duration::from_millis(1);
    const MTU: u16 = 1200;

    fn limits() -> Limits {
        Limits {
            max_jump: 64 << 20,
            rtt_floor_factor: 2,
            rtt_ceiling_factor: 10,
        }
    }

    fn saved(cwnd: u64, rtt: Duration) -> SavedPath {
        SavedPath {
            cwnd,
            rtt,
            saved_at: SystemTime::UNIX_EPOCH,
        }
    }

    /// A machine with saved state of 20 MB at 200 ms that has seen a 200 ms handshake RTT.
    fn after_handshake(t0: Instant) -> Resume {
        let mut r = Resume::new(Some(saved(20_000_000, 200 * MS)), limits(), MTU);
        assert_eq!(r.on_ack(t0 + 200 * MS, t0, 1200, true, 14_720), None);
        assert_eq!(r.phase(), Phase::Reconnaissance);
        fill_window(&mut r, t0 + 200 * MS);
        r
    }

    /// Sends one initial window, as a sender with data queued does.
    fn fill_window(r: &mut Resume, at: Instant) {
        for _ in 0..12 {
            assert_eq!(r.on_sent(at, 1200), None);
        }
    }

    #[test]
    fn jumps_to_half_the_saved_window_after_the_rtt_check() {
        let t0 = Instant::now();
        let mut r = after_handshake(t0);
        assert_eq!(
            r.window(14_720),
            14_720,
            "no jump before a cwnd-limited ack"
        );
        let mut idle = Resume::new(Some(saved(20_000_000, 200 * MS)), limits(), MTU);
        idle.on_sent(t0, 4_000);
        assert_eq!(
            idle.on_ack(t0 + 200 * MS, t0, 1200, false, 14_720),
            None,
            "a handshake flight alone does not show a cwnd-limited sender"
        );
        assert_eq!(idle.phase(), Phase::Reconnaissance);
        let ev = r.on_ack(t0 + 400 * MS, t0 + 200 * MS, 1200, false, 14_720);
        assert_eq!(ev, Some(Event::Jumped { window: 10_000_000 }));
        assert_eq!(r.phase(), Phase::Unvalidated);
        // Offered with a quarter more for quinn's pacer; sending the jump ends it (below).
        assert_eq!(r.window(16_000), 12_500_000);
        // The first packet of the jump acknowledged one RTT later: validating.
        let t1 = t0 + 400 * MS;
        assert_eq!(r.on_sent(t1, 1200), None);
        assert_eq!(r.on_sent(t1 + 100 * MS, 1200), None);
        assert_eq!(
            r.on_ack(t1 + 200 * MS, t1, 1200, false, 20_000),
            Some(Event::Validating)
        );
        assert_eq!(r.phase(), Phase::Validating);
        // The jump's last packet acknowledged: the wrapped controller takes over.
        assert_eq!(
            r.on_ack(t1 + 300 * MS, t1 + 100 * MS, 1200, false, 20_000),
            Some(Event::Done)
        );
        assert_eq!(r.phase(), Phase::Normal);
        assert_eq!(r.window(30_000), 30_000);
    }

    #[test]
    fn sending_the_whole_jump_starts_validation() {
        let t0 = Instant::now();
        let mut r = after_handshake(t0);
        r.on_ack(t0 + 400 * MS, t0 + 200 * MS, 1200, false, 14_720);
        let t1 = t0 + 400 * MS;
        for i in 0..8_333u32 {
            assert_eq!(r.on_sent(t1 + Duration::from_micros(i.into()), 1200), None);
        }
        assert_eq!(r.on_sent(t1 + 10 * MS, 1200), Some(Event::Validating));
        assert_eq!(r.window(0), 10_000_000);
    }

    #[test]
    fn loss_while_unvalidated_retreats_to_half_the_pipe() {
        let t0 = Instant::now();
        let mut r = after_handshake(t0);
        r.on_end_acks(100_000);
        r.on_ack(t0 + 400 * MS, t0 + 200 * MS, 1200, false, 14_720);
        let t1 = t0 + 400 * MS;
        r.on_sent(t1, 1200);
        r.on_sent(t1 + 50 * MS, 1200);
        // Packets sent before the jump acknowledged: 1 MB more in the pipe.
        assert_eq!(
            r.on_ack(t1 + 10 * MS, t0 + 300 * MS, 1_000_000, false, 1_000_000),
            None
        );
        let ev = r.on_congestion();
        assert_eq!(ev, Some(Event::Retreated { window: 550_000 }));
        assert_eq!(r.phase(), Phase::SafeRetreat);
        assert_eq!(
            r.window(5_000_000),
            550_000,
            "retreat overrides a larger inner window"
        );
        assert_eq!(r.on_congestion(), None, "one retreat per connection");
        // Still retreating until the jump's last packet is accounted for.
        assert_eq!(r.on_ack(t1 + 240 * MS, t1 + 40 * MS, 1200, false, 0), None);
        assert_eq!(
            r.on_ack(t1 + 250 * MS, t1 + 50 * MS, 1200, false, 0),
            Some(Event::Done)
        );
        assert_eq!(r.window(700_000), 700_000);
    }

    #[test]
    fn loss_while_validating_retreats_too() {
        let t0 = Instant::now();
        let mut r = after_handshake(t0);
        r.on_ack(t0 + 400 * MS, t0 + 200 * MS, 1200, false, 14_720);
        let t1 = t0 + 400 * MS;
        r.on_sent(t1, 1200);
        r.on_ack(t1 + 200 * MS, t1, 4_000_000, false, 14_720);
        assert_eq!(r.phase(), Phase::Validating);
        assert_eq!(
            r.on_congestion(),
            Some(Event::Retreated { window: 2_000_000 })
        );
    }

    #[test]
    fn no_jump_when_the_rtt_differs() {
        let t0 = Instant::now();
        for (rtt, expect_jump) in [
            (99 * MS, false),
            (100 * MS, true),
            (2_000 * MS, true),
            (2_001 * MS, false),
        ] {
            let mut r = Resume::new(Some(saved(20_000_000, 200 * MS)), limits(), MTU);
            r.on_ack(t0 + rtt, t0, 1200, true, 14_720);
            fill_window(&mut r, t0 + rtt);
            let ev = r.on_ack(t0 + rtt * 2, t0 + rtt, 1200, false, 14_720);
            assert_eq!(
                matches!(ev, Some(Event::Jumped { .. })),
                expect_jump,
                "rtt {rtt:?}: {ev:?}"
            );
            if !expect_jump {
                assert!(matches!(ev, Some(Event::RttMismatch { .. })));
                assert_eq!(r.phase(), Phase::Normal);
                assert_eq!(r.window(14_720), 14_720);
            }
        }
    }

    #[test]
    fn no_jump_without_gain_or_after_an_early_loss_or_without_state() {
        let t0 = Instant::now();
        let mut r = after_handshake(t0);
        r.on_sent(t0 + 300 * MS, 6_000_000);
        assert_eq!(
            r.on_ack(t0 + 400 * MS, t0 + 200 * MS, 1200, false, 12_000_000),
            Some(Event::NothingToGain)
        );
        let mut r = after_handshake(t0);
        assert_eq!(r.on_congestion(), Some(Event::LossBeforeJump));
        assert_eq!(r.on_ack(t0 + 400 * MS, t0 + 200 * MS, 1200, false, 1), None);
        assert_eq!(r.window(14_720), 14_720);
        let mut r = Resume::new(None, limits(), MTU);
        assert_eq!(r.phase(), Phase::Normal);
        assert_eq!(r.on_ack(t0 + 400 * MS, t0 + 200 * MS, 1200, false, 1), None);
    }

    #[test]
    fn concurrent_connections_split_the_jump() {
        let t0 = Instant::now();
        let mut r = after_handshake(t0);
        r.set_share(4);
        assert_eq!(
            r.on_ack(t0 + 400 * MS, t0 + 200 * MS, 1200, false, 14_720),
            Some(Event::Jumped { window: 2_500_000 })
        );
    }

    #[test]
    fn the_jump_is_capped() {
        let t0 = Instant::now();
        let capped = Limits {
            max_jump: 4 << 20,
            ..limits()
        };
        let mut r = Resume::new(Some(saved(20_000_000, 200 * MS)), capped, MTU);
        r.on_ack(t0 + 200 * MS, t0, 1200, true, 14_720);
        fill_window(&mut r, t0);
        assert_eq!(
            r.on_ack(t0 + 400 * MS, t0 + 200 * MS, 1200, false, 14_720),
            Some(Event::Jumped { window: 4 << 20 })
        );
    }
}
