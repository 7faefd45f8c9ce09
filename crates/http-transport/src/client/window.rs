//! The receive-window cap: how much a transfer's TCP connections may have in flight together.
//!
//! Several BBR senders sharing one bottleneck keep about twice the path's bandwidth-delay
//! product in flight between them, and a queue of one BDP overflows: 8 lanes at 1 Gbit/s x 100
//! ms retransmitted 96,000-166,000 segments per GiB (`docs/results.md`). The receiver can bound
//! that without touching the sender: once a queue stands at the bottleneck (the receiver's
//! RTT estimate, `tcpi_rcv_rtt`, a quarter above the path's minimum), each connection's
//! advertised window is clamped (`TCP_WINDOW_CLAMP`) to its share of [`HEADROOM`] x goodput x
//! minimum RTT. Until a queue forms (slow start below the bottleneck's rate) nothing is
//! clamped; a cap follows the best goodput of the last windows upwards, [`HEADROOM`] per round
//! trip, so capacity freed by other traffic is taken.
//!
//! Goodput measures the path only while the application keeps reading. When it does not (the
//! disk or the CPU is behind), data waits unread in the socket, the window closes, goodput
//! drops and the receiver's RTT estimate rises, none of it the path's doing; a cap that
//! followed such a window down held the transfer at a fraction of the link for seconds after
//! the reader caught up (HTTP/2 at 100 ms: 600 Mbit/s for 5 s after a 250 ms stall). So, as
//! BBR treats its application-limited samples, a window in which any socket held
//! [`APP_LIMITED_UNREAD`] unread counts only if it raises the estimate, and it never engages
//! the cap.
//!
//! The cap is divided among the connections by [`split`], which lets one that has just joined
//! grow into its share, and [`open_for_repairs`] gives a connection repairing a loss room for
//! the packets that wait beyond the hole.
//!
//! [`WindowPolicy`] is the decision, pure and tested with time passed in; the transport's
//! statistics registry applies it to the live sockets.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Windows together may carry this much more than goodput x minimum RTT (5/4: measured at 1
/// Gbit/s x 100 ms with 8 lanes, 1.28 x the BDP in windows lost nothing and 1.66 x still
/// overflowed the one-BDP queue).
pub(crate) const HEADROOM: (u64, u64) = (5, 4);
/// Paths shorter than this are left alone: their BDP is small and a loaded host's RTT varies
/// far above the minimum, which a cap computed from the minimum would turn into a limit.
pub(crate) const MIN_RTT: Duration = Duration::from_millis(5);
/// No socket's window is clamped below this, bytes.
pub(crate) const MIN_WINDOW: u64 = 1 << 20;
/// Goodput windows remembered.
const HISTORY: usize = 8;
/// Windows the cap's goodput is averaged over (the latest counts when higher, so that the
/// cap follows goodput up at once).
const RECENT: usize = 4;
/// A queue stands when the receiver's RTT is this much above the minimum (5/4).
const QUEUED: (u128, u128) = (5, 4);
/// A measurement window is at least this long, whatever the RTT.
const MIN_WINDOW_SPAN: Duration = Duration::from_millis(50);
/// A socket holding this many unread bytes waits for its reader, not for the path: a reader
/// that keeps up leaves less than one 20 ms step of a connection's share unread.
pub(crate) const APP_LIMITED_UNREAD: u64 = 512 << 10;

/// Goodput over windows of one RTT, and the cap once it has stopped growing.
#[derive(Debug, Default)]
pub(crate) struct WindowPolicy {
    /// Start of the current window: when, and the bytes received by then.
    window: Option<(Instant, u64)>,
    rates: VecDeque<u64>,
    capped: bool,
    /// Some socket waited for its reader during the current window.
    window_app_limited: bool,
    /// The last cap, over all active connections, bytes.
    total: Option<u128>,
}

impl WindowPolicy {
    /// Feed the bytes received so far over all the transfer's connections, the connections
    /// that received since the last call, the smallest RTT any has seen and the receivers'
    /// current RTT estimate (the smallest over the active connections), and whether a socket
    /// waits for its reader now. Returns the window each active connection may advertise, or
    /// `None` while uncapped.
    pub fn step(
        &mut self,
        now: Instant,
        received: u64,
        active: usize,
        min_rtt: Option<Duration>,
        current_rtt: Option<Duration>,
        app_limited: bool,
    ) -> Option<u64> {
        let rtt = min_rtt.filter(|r| *r >= MIN_RTT)?;
        self.window_app_limited |= app_limited;
        let queue = !app_limited
            && current_rtt.is_some_and(|c| c.as_micros() * QUEUED.1 >= rtt.as_micros() * QUEUED.0);
        self.capped |= queue;
        let Some((start, at_start)) = self.window else {
            self.window = Some((now, received));
            return None;
        };
        let span = now.saturating_duration_since(start);
        if span >= rtt.max(MIN_WINDOW_SPAN) {
            let bytes = received.saturating_sub(at_start);
            let rate = (u128::from(bytes) * 1_000_000 / span.as_micros().max(1)) as u64;
            self.window = Some((now, received));
            if !std::mem::take(&mut self.window_app_limited) || rate > self.goodput() {
                self.rates.push_back(rate);
                if self.rates.len() > HISTORY {
                    self.rates.pop_front();
                }
            }
        }
        // A single connection is capped too: BBR's startup keeps up to 2.89 times its BDP
        // estimate in flight, and one HTTP/2 connection at 200 ms left it with 2 BDPs out and
        // lost 5,000 packets to a one-BDP queue, twice. But a connection's window, once
        // lowered, is slow to grow back, so a single connection's cap is never lowered.
        if !self.capped || self.rates.is_empty() {
            return None;
        }
        let recent = self.goodput();
        let mut total = u128::from(recent) * rtt.as_micros() / 1_000_000 * u128::from(HEADROOM.0)
            / u128::from(HEADROOM.1);
        // Lower only while a queue stands. A clamp raised again does not open the window at
        // once: the kernel regrows it by two segments per packet received (per 64 KiB
        // super-packet under GRO), so a lowered window carries less than the cap, its goodput
        // lowers the next cap, and without this rule the cap spiralled down to its floor (an
        // HTTP/2 download at 50 ms held at 165 Mbit/s for a minute).
        if let Some(prev) = self.total.filter(|p| *p > total && !(queue && active >= 2)) {
            total = prev;
        }
        self.total = Some(total);
        let each = u64::try_from(total / active.max(1) as u128).unwrap_or(u64::MAX);
        Some(each.max(MIN_WINDOW))
    }

    /// The goodput the cap is computed from, bytes/s: the mean of the last windows, or the
    /// latest when higher. (A single window can count a loss's recovered bytes twice over, as
    /// they become in-order at once, which a maximum would keep for 8 RTTs.)
    fn goodput(&self) -> u64 {
        let last: Vec<u64> = self.rates.iter().rev().take(RECENT).copied().collect();
        let mean = last.iter().sum::<u64>() / last.len().max(1) as u64;
        mean.max(self.rates.back().copied().unwrap_or(0))
    }
}

/// A connection with a hole in its data keeps its window open this long after the last
/// reading that found packets arriving beyond the hole (readings come every 20 ms).
const REPAIR_HOLD: Duration = Duration::from_millis(50);

/// The connections repairing losses may together advertise this much of the cap more (1/4).
const REPAIR_BUDGET: (u64, u64) = (1, 4);

/// A hole in a connection's data, as the 20 ms readings of its out-of-order count see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hole {
    /// The first reading that found packets arriving beyond it.
    pub since: Instant,
    /// The last reading that found more.
    pub last: Instant,
}

impl Hole {
    /// Fold in a reading at `now` that found more packets beyond a hole than the one before.
    pub fn seen(prev: Option<Hole>, now: Instant) -> Hole {
        match prev {
            Some(h) if h.open(now) => Hole { last: now, ..h },
            _ => Hole {
                since: now,
                last: now,
            },
        }
    }

    fn open(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last) <= REPAIR_HOLD
    }
}

/// Open the windows of connections repairing a loss: each `windows[i]` is the share of the
/// cap of `members[i]`, which carries its latest hole. The connections whose holes are open, the
/// oldest first, may advertise up to twice their share, while the extra over all of them
/// stays within a quarter of the cap; a lone connection keeps its share.
///
/// A window is counted from the hole, and the packets waiting beyond it are no longer in
/// flight. The sender learns of the loss a round trip after it sent the lost packet, the
/// repair reaches the receiver half a round trip later and its acknowledgement the sender half
/// a round trip after that: two round trips of sending before the window moves again. A share
/// (5/4 of one round trip's worth) stopped the sender for most of a round trip per loss. Twice
/// the share covers the two round trips. Random loss leaves one or two of eight connections
/// repairing at a time, and those then keep what is in flight about their share.
///
/// A queue's overflow is another matter: every connection loses, and a lone one loses
/// thousands of packets to its own start-up, for many round trips. Opening every window then
/// let the senders overflow the queue again: a lone HTTP/2 connection at 200 ms, whose cap is
/// what holds BBR's start-up back, lost 35,730 packets where it had lost 5,122, and moved 880
/// Mbit/s against 911. Hence the budget, and nothing for a lone connection.
pub(crate) fn open_for_repairs(windows: &mut [u64], members: &[Member], now: Instant) {
    if windows.len() < 2 || members.len() != windows.len() {
        return;
    }
    let total: u128 = windows.iter().map(|&w| u128::from(w)).sum();
    let mut budget = total * u128::from(REPAIR_BUDGET.0) / u128::from(REPAIR_BUDGET.1);
    let mut repairing: Vec<(Instant, usize)> = members
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.hole.filter(|h| h.open(now)).map(|h| (h.since, i)))
        .collect();
    repairing.sort();
    for (_, i) in repairing {
        let extra = u128::from(windows[i]).min(budget);
        budget -= extra;
        windows[i] = windows[i].saturating_add(u64::try_from(extra).unwrap_or(u64::MAX));
    }
}

/// A connection counts as joining for this many of the path's round trips after its first
/// byte: long enough for slow start from ten segments to reach a share of the path.
pub(crate) const JOIN_RTTS: u32 = 8;

/// One active connection, as the split of the cap and the repairs see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    /// It received its first byte less than [`JOIN_RTTS`] round trips ago.
    pub joining: bool,
    /// What it delivered over its last round trip, bytes.
    pub delivered: u64,
    /// Its latest hole, if it has had one.
    pub hole: Option<Hole>,
}

/// Each active connection's window, given `each`, the equal share [`WindowPolicy::step`]
/// returned. Equal shares are right for connections that all carry their part, but not for one
/// that has just joined: HTTP/2 spreading its lanes over new connections after a loss, or
/// `--lanes auto` adding lanes. An equal share halved the old connection's window the moment
/// the first new one received a byte, while the new one was still in slow start and the old
/// one still carried seven of eight lanes: held at 100 ms with 0.01 % loss, the download ran at
/// 550-800 Mbit/s for 1.5 s. So a joining connection gets room to double what it delivered
/// last round trip (as slow start does), at least [`MIN_WINDOW`] and at most the equal share,
/// and the settled ones divide the rest; the whole stays the cap. With no settled connection
/// (a transfer's start) or none joining, the shares are equal.
pub(crate) fn split(each: u64, members: &[Member]) -> Vec<u64> {
    let settled = members.iter().filter(|m| !m.joining).count() as u64;
    if settled == 0 || settled == members.len() as u64 {
        return vec![each; members.len()];
    }
    let joining_cap = |m: &Member| {
        (u128::from(m.delivered) * 2 * u128::from(HEADROOM.0) / u128::from(HEADROOM.1))
            .clamp(u128::from(MIN_WINDOW), u128::from(each.max(MIN_WINDOW))) as u64
    };
    let total = u128::from(each) * members.len() as u128;
    let joined: u128 = members
        .iter()
        .filter(|m| m.joining)
        .map(|m| u128::from(joining_cap(m)))
        .sum();
    let rest = u64::try_from(total.saturating_sub(joined) / u128::from(settled))
        .unwrap_or(u64::MAX)
        .max(each);
    members
        .iter()
        .map(|m| if m.joining { joining_cap(m) } else { rest })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joining_connection_does_not_take_an_equal_share_at_once() {
        let each = 8_000_000;
        let old = Member {
            joining: false,
            delivered: 12_000_000,
            hole: None,
        };
        let new = |delivered| Member {
            joining: true,
            delivered,
            hole: None,
        };
        // All settled, or all joining (a transfer's start): equal shares.
        assert_eq!(split(each, &[old, old]), vec![each, each]);
        assert_eq!(split(each, &[new(0), new(0)]), vec![each, each]);
        // The first new connection's first round trip: it gets the floor, the old one the rest.
        assert_eq!(
            split(each, &[old, new(100_000)]),
            vec![2 * each - MIN_WINDOW, MIN_WINDOW]
        );
        // It grows by doubling, 5/4 of twice what it delivered.
        assert_eq!(
            split(each, &[old, new(2_000_000)]),
            vec![2 * each - 5_000_000, 5_000_000]
        );
        // Never past the equal share, and the whole never past the cap.
        assert_eq!(split(each, &[old, new(9_000_000)]), vec![each, each]);
        let three = split(each, &[old, old, new(0)]);
        assert_eq!(three.iter().sum::<u64>(), 3 * each);
        assert_eq!(three[0], three[1]);
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn connections_repairing_a_loss_get_up_to_twice_their_share_within_a_budget() {
        let s = 2_000_000;
        let t0 = Instant::now();
        let hole = |since_ms: u32, last_ms: u32| {
            Some(Hole {
                since: t0 + since_ms * MS,
                last: t0 + last_ms * MS,
            })
        };
        let now = t0 + 100 * MS;
        let open = |holes: &[Option<Hole>]| {
            let members: Vec<Member> = holes
                .iter()
                .map(|&hole| Member {
                    joining: false,
                    delivered: 0,
                    hole,
                })
                .collect();
            let mut w = vec![s; holes.len()];
            open_for_repairs(&mut w, &members, now);
            w
        };
        // Eight connections, one repairing: twice its share.
        let mut holes = vec![None; 8];
        holes[3] = hole(40, 100);
        assert_eq!(open(&holes)[3], 2 * s);
        assert_eq!(open(&holes).iter().sum::<u64>(), 9 * s);
        // Three repairing: the two oldest holes take the budget (a quarter of the cap).
        holes[5] = hole(20, 80);
        holes[0] = hole(60, 100);
        let w = open(&holes);
        assert_eq!((w[5], w[3], w[0]), (2 * s, 2 * s, s));
        assert_eq!(w.iter().sum::<u64>(), 10 * s);
        // A hole with no new packet beyond it for longer than the hold is closed.
        holes[5] = hole(20, 40);
        assert_eq!(open(&holes)[0], 2 * s);
        // Two connections: the budget is half a share.
        assert_eq!(open(&[hole(90, 100), None]), vec![s + s / 2, s]);
        // A lone connection keeps its share: its losses are mostly its own start-up's.
        assert_eq!(open(&[hole(90, 100)]), vec![s]);
    }

    #[test]
    fn a_hole_is_one_while_readings_keep_finding_packets_beyond_it() {
        let t0 = Instant::now();
        let h = Hole::seen(None, t0);
        let h = Hole::seen(Some(h), t0 + 20 * MS);
        let h = Hole::seen(Some(h), t0 + 60 * MS);
        assert_eq!((h.since, h.last), (t0, t0 + 60 * MS));
        // A reading after the hold starts a new one.
        let h = Hole::seen(Some(h), t0 + 200 * MS);
        assert_eq!((h.since, h.last), (t0 + 200 * MS, t0 + 200 * MS));
    }

    /// Feed `rate` bytes/s for `windows` RTTs of `rtt` with the receivers seeing `current` and
    /// the sockets holding unread data (`app_limited`) or not, one call per 10 ms; the last
    /// answer.
    #[allow(clippy::too_many_arguments)]
    fn run(
        p: &mut WindowPolicy,
        t: &mut Instant,
        total: &mut u64,
        rate: u64,
        windows: u32,
        rtt: Duration,
        current: Duration,
        active: usize,
        app_limited: bool,
    ) -> Option<u64> {
        let mut last = None;
        let ticks = windows * (rtt.as_millis() as u32 / 10);
        for _ in 0..ticks {
            *t += 10 * MS;
            *total += rate / 100;
            last = p.step(*t, *total, active, Some(rtt), Some(current), app_limited);
        }
        last
    }

    #[test]
    fn a_reader_falling_behind_neither_lowers_nor_engages_the_cap() {
        let rtt = 100 * MS;
        // Engaged at 1 Gbit/s, then the reader stalls for three round trips: the path did not
        // get slower, so the cap stays where it was.
        let mut p = WindowPolicy::default();
        let (mut t, mut total) = (Instant::now(), 0);
        let before = run(
            &mut p,
            &mut t,
            &mut total,
            125_000_000,
            4,
            rtt,
            150 * MS,
            2,
            false,
        )
        .expect("capped");
        let stalled = run(&mut p, &mut t, &mut total, 0, 3, rtt, 400 * MS, 2, true);
        assert_eq!(stalled, Some(before));
        // The same fall in goodput with the reader keeping up is the path's: the cap follows.
        let slower = run(
            &mut p,
            &mut t,
            &mut total,
            20_000_000,
            4,
            rtt,
            150 * MS,
            2,
            false,
        );
        assert!(
            slower.is_some_and(|c| c < before / 2),
            "{slower:?} vs {before}"
        );
        // An RTT raised while data waits unread is not a queue at the bottleneck.
        let mut q = WindowPolicy::default();
        let (mut t, mut total) = (Instant::now(), 0);
        let r = run(
            &mut q,
            &mut t,
            &mut total,
            125_000_000,
            4,
            rtt,
            300 * MS,
            2,
            true,
        );
        assert_eq!(r, None);
    }

    #[test]
    fn uncapped_until_a_queue_stands_then_the_share_of_five_quarters_bdp() {
        let mut p = WindowPolicy::default();
        let (mut t, mut total) = (Instant::now(), 0);
        let rtt = 100 * MS;
        // Slow start, and a first request's idle round trip: no queue, no cap.
        let mut rate = 1_000_000;
        while rate < 125_000_000 {
            assert_eq!(
                run(&mut p, &mut t, &mut total, rate, 1, rtt, rtt, 8, false),
                None
            );
            assert_eq!(
                run(&mut p, &mut t, &mut total, 0, 1, rtt, rtt, 8, false),
                None
            );
            rate *= 2;
        }
        // The link is full and a queue of 0.9 BDP stands: capped.
        let cap = run(
            &mut p,
            &mut t,
            &mut total,
            125_000_000,
            2,
            rtt,
            190 * MS,
            8,
            false,
        )
        .expect("capped");
        // 1.25 x 12.5 MB / 8 lanes.
        let want = 125_000_000 / 10 * 5 / 4 / 8;
        assert!(cap.abs_diff(want) < want / 50, "{cap} vs {want}");
        // Fewer lanes active: each may carry more.
        let cap2 = run(
            &mut p,
            &mut t,
            &mut total,
            125_000_000,
            1,
            rtt,
            rtt,
            2,
            false,
        )
        .expect("capped");
        assert!(cap2.abs_diff(want * 4) < want / 10, "{cap2}");
    }

    #[test]
    fn the_cap_follows_goodput_up_and_never_goes_below_the_floor() {
        let mut p = WindowPolicy::default();
        let (mut t, mut total) = (Instant::now(), 0);
        let rtt = 50 * MS;
        let low = run(
            &mut p,
            &mut t,
            &mut total,
            10_000_000,
            3,
            rtt,
            80 * MS,
            2,
            false,
        )
        .expect("capped");
        // 10 MB/s x 50 ms x 1.25 = 625 KB: below the floor.
        assert_eq!(low, MIN_WINDOW);
        let high = run(
            &mut p,
            &mut t,
            &mut total,
            100_000_000,
            2,
            rtt,
            rtt,
            2,
            false,
        )
        .expect("capped");
        assert!(high > 3_000_000, "{high}");
    }

    #[test]
    fn one_connection_is_capped_on_a_queue_but_never_lowered() {
        let rtt = 50 * MS;
        let queued = 90 * MS;
        let mut p = WindowPolicy::default();
        let (mut t, mut total) = (Instant::now(), 0);
        // Four RTTs of `rate` bytes/s over `active` connections, the receivers seeing `current`.
        let mut feed = |rate: u64, current: Duration, active: usize| {
            run(
                &mut p, &mut t, &mut total, rate, 4, rtt, current, active, false,
            )
        };
        // No queue yet (a sender below the bottleneck's rate): nothing to bound.
        assert_eq!(feed(60_000_000, rtt, 1), None, "no queue, no cap");
        // One sender whose startup stands a queue: 5/4 of goodput x RTT.
        let one = feed(125_000_000, queued, 1).expect("one connection is capped on a queue");
        let bdp = 125_000_000 / 20;
        assert!(
            one >= bdp && one <= bdp * 3 / 2,
            "{one} against a BDP of {bdp}"
        );
        // Its goodput falls with a queue standing: still not lowered, since a lowered window
        // is slow to regrow and one sender cannot spiral others down.
        assert_eq!(feed(20_000_000, queued, 1), Some(one));
        // Spread over four connections: the cap is shared out.
        let cap = feed(125_000_000, queued, 4).expect("capped");
        assert!(cap < one, "{cap} per connection against {one} for one");
        // Goodput falls (a window that regrows slowly) but no queue stands: the cap holds.
        assert_eq!(feed(20_000_000, rtt, 4), Some(cap));
        // With a queue and several connections it follows goodput down.
        assert_eq!(feed(20_000_000, queued, 4), Some(MIN_WINDOW), "{cap}");
    }

    #[test]
    fn short_or_unknown_paths_are_left_alone() {
        let mut p = WindowPolicy::default();
        let (mut t, mut total) = (Instant::now(), 0);
        let short = Duration::from_micros(200);
        for _ in 0..200 {
            t += 10 * MS;
            total += 1_000_000;
            assert_eq!(
                p.step(t, total, 8, Some(short), Some(10 * short), false),
                None
            );
            assert_eq!(p.step(t, total, 8, None, Some(100 * MS), false), None);
        }
    }
}
