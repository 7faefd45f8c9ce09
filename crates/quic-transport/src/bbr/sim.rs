//! A bottleneck link in simulated time for the controller's tests: senders paced as quinn
//! paces (1.25 × window per smoothed RTT, up to ten datagrams per transmit), a drop-tail queue
//! in front of a fixed-rate link, receivers that acknowledge a batch of datagrams at once,
//! and loss declared when a later packet is acknowledged (RFC 9002's packet threshold).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use super::model::StartupExit;
use super::{Bbr, BbrConfig};
use crate::loss_bound::InflightBound;
use quinn::congestion::{Controller, ControllerFactory};
use std::sync::Arc;

const PKT: u64 = 1472;
const TICK_NS: u64 = 100_000;
/// quinn's batch: datagrams per transmit.
const BATCH: u64 = 10;

pub(super) struct Link {
    /// Bytes per second.
    pub rate: u64,
    pub rtt: Duration,
    /// Queue in front of the link, bytes.
    pub queue: u64,
    /// Packets a receiver acknowledges at once.
    pub per_ack: usize,
}

impl Link {
    /// 1 Gbit/s, `rtt`, a one-BDP queue, one acknowledgement per 57 datagrams.
    pub(super) fn gigabit(rtt: Duration) -> Self {
        let rate = 125_000_000;
        Self {
            rate,
            rtt,
            queue: (rate as u128 * rtt.as_nanos() / 1_000_000_000) as u64,
            per_ack: 57,
        }
    }
}

struct Sent {
    id: u64,
}

/// A loss-based competitor, as most bulk TCP senders are: slow start, then one packet per
/// round trip; on a loss event (once per round trip) the window drops to 0.7 of itself,
/// cubic's factor. It sends whatever its window allows, unpaced.
struct Reno {
    cwnd: u64,
    ssthresh: u64,
    /// Losses of packets sent before this id belong to the event already counted.
    recover: u64,
}

/// The simulated receivers acknowledge [`Link::per_ack`] datagrams at once and have no delayed
/// acknowledgement timer: a window below that would wait for an acknowledgement forever.
const RENO_MIN_WINDOW: u64 = 64 * PKT;

impl Reno {
    fn new() -> Self {
        Self {
            cwnd: RENO_MIN_WINDOW,
            ssthresh: u64::MAX,
            recover: 0,
        }
    }

    fn on_ack(&mut self, bytes: u64) {
        if self.cwnd < self.ssthresh {
            self.cwnd += bytes;
        } else {
            self.cwnd += (PKT * bytes / self.cwnd).max(1);
        }
    }

    fn on_loss(&mut self, lost_id: u64, next_id: u64) {
        if lost_id >= self.recover {
            self.ssthresh = (self.cwnd * 7 / 10).max(RENO_MIN_WINDOW);
            self.cwnd = self.ssthresh;
            self.recover = next_id;
        }
    }
}

struct Flow {
    cc: Bbr,
    /// Sends as this loss-based competitor instead of `cc`.
    reno: Option<Reno>,
    /// Sends nothing before this time, nanoseconds into the run.
    start_ns: u64,
    bound: Option<InflightBound>,
    next_id: u64,
    outstanding: VecDeque<Sent>,
    in_flight: u64,
    srtt: Option<Duration>,
    min_rtt: Duration,
    tokens: f64,
    last_tick: Option<Instant>,
    /// Receiver: ids received and not yet acknowledged.
    pending: Vec<(u64, Instant)>,
    delivered: u64,
    lost: u64,
}

impl Flow {
    fn window(&self) -> u64 {
        if let Some(r) = &self.reno {
            return r.cwnd;
        }
        let w = self.cc.window();
        self.bound.as_ref().map_or(w, |b| b.window(w))
    }
}

/// The senders of a run: `bbr` connections of xfer's BBR (with the loss bound when
/// `bounded`), and `reno` loss-based competitors that start `head_start` before them.
pub(super) struct Mix {
    pub bbr: usize,
    pub bounded: bool,
    pub reno: usize,
    pub head_start: Duration,
}

enum Ev {
    Tick,
    Arrive {
        flow: usize,
        id: u64,
        sent: Instant,
    },
    Ack {
        flow: usize,
        acked: Vec<(u64, Instant)>,
    },
}

pub(super) struct Outcome {
    /// Bytes delivered per flow per simulated second.
    pub per_second: Vec<Vec<u64>>,
    pub lost: Vec<u64>,
    /// Bytes lost by all flows per simulated second.
    pub lost_per_second: Vec<u64>,
    pub in_startup: Vec<bool>,
    /// Final bandwidth estimate per flow, bytes per second.
    pub bandwidth: Vec<u64>,
    /// Flow 0 every 100 ms: (ms, window, estimate in Mbit/s, in flight, startup).
    pub trace: Vec<(u64, u64, u64, u64, bool)>,
    pub exits: Vec<Option<StartupExit>>,
}

/// Runs `flows` bulk senders (with the loss bound when `bounded`) over `link` for `secs`.
pub(super) fn run(link: &Link, flows: usize, bounded: bool, secs: u64) -> Outcome {
    run_with(link, flows, bounded, secs, BbrConfig::default())
}

pub(super) fn run_with(
    link: &Link,
    flows: usize,
    bounded: bool,
    secs: u64,
    cfg: BbrConfig,
) -> Outcome {
    let mix = Mix {
        bbr: flows,
        bounded,
        reno: 0,
        head_start: Duration::ZERO,
    };
    run_mix(link, &mix, secs, cfg)
}

/// Flows `0..mix.bbr` are BBR, the rest the competitors.
pub(super) fn run_mix(link: &Link, mix: &Mix, secs: u64, cfg: BbrConfig) -> Outcome {
    let flows = mix.bbr + mix.reno;
    let bounded = mix.bounded;
    let head_ns = mix.head_start.as_nanos() as u64;
    let t0 = Instant::now();
    let at = |ns: u64| t0 + Duration::from_nanos(ns);
    let mut fl: Vec<Flow> = (0..flows)
        .map(|i| {
            let cfg = Arc::new(cfg.clone());
            let cc = cfg.clone().build(t0, PKT as u16);
            let cc = *cc.into_any().downcast::<Bbr>().expect("a Bbr");
            let competitor = i >= mix.bbr;
            Flow {
                bound: (bounded && !competitor)
                    .then(|| InflightBound::new(cc.initial_window(), PKT as u16)),
                reno: competitor.then(Reno::new),
                start_ns: if competitor { 0 } else { head_ns },
                cc,
                next_id: 0,
                outstanding: VecDeque::new(),
                in_flight: 0,
                srtt: None,
                min_rtt: Duration::MAX,
                tokens: 0.0,
                last_tick: None,
                pending: Vec::new(),
                delivered: 0,
                lost: 0,
            }
        })
        .collect();
    let one_way = link.rtt / 2;
    let per_byte_ns = 1e9 / link.rate as f64;
    let mut link_free_ns = 0u64;
    let mut heap: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut events: Vec<Option<Ev>> = Vec::new();
    let push = |heap: &mut BinaryHeap<Reverse<(u64, u64)>>,
                events: &mut Vec<Option<Ev>>,
                t: u64,
                ev: Ev| {
        heap.push(Reverse((t, events.len() as u64)));
        events.push(Some(ev));
    };
    push(&mut heap, &mut events, 0, Ev::Tick);
    let end_ns = secs * 1_000_000_000;
    let mut per_second = vec![vec![0u64; secs as usize]; flows];
    let mut trace = Vec::new();
    let mut lost_per_second = vec![0u64; secs as usize];
    while let Some(Reverse((t_ns, idx))) = heap.pop() {
        if t_ns >= end_ns {
            break;
        }
        let now = at(t_ns);
        let Some(ev) = events[idx as usize].take() else {
            continue;
        };
        match ev {
            Ev::Tick => {
                if t_ns % 100_000_000 == 0 {
                    let f = &fl[0];
                    trace.push((
                        t_ns / 1_000_000,
                        f.window(),
                        f.cc.model.bandwidth() * 8 / 1_000_000,
                        f.in_flight,
                        f.cc.in_startup(),
                    ));
                }
                for (i, f) in fl.iter_mut().enumerate() {
                    if t_ns < f.start_ns {
                        continue;
                    }
                    let srtt = f.srtt.unwrap_or(Duration::from_millis(333));
                    let rate = if f.reno.is_some() {
                        // Unpaced: as fast as the window opens.
                        f64::MAX / 4.0
                    } else {
                        1.25 * f.window() as f64 / srtt.as_secs_f64()
                    };
                    let elapsed = f.last_tick.map_or(0.0, |l| (now - l).as_secs_f64());
                    f.last_tick = Some(now);
                    let burst = (BATCH * PKT) as f64 * 2.0;
                    f.tokens = (f.tokens + rate * elapsed).min(burst.max(rate * 0.002));
                    loop {
                        let mut n = 0;
                        while n < BATCH && f.in_flight + PKT <= f.window() && f.tokens >= PKT as f64
                        {
                            f.tokens -= PKT as f64;
                            f.in_flight += PKT;
                            let id = f.next_id;
                            f.next_id += 1;
                            f.outstanding.push_back(Sent { id });
                            // The bottleneck: queue behind what is already waiting.
                            let start = link_free_ns.max(t_ns);
                            let backlog = ((start - t_ns) as f64 / per_byte_ns) as u64;
                            if backlog + PKT <= link.queue {
                                link_free_ns = start + (PKT as f64 * per_byte_ns) as u64;
                                let arrive = link_free_ns + one_way.as_nanos() as u64;
                                push(
                                    &mut heap,
                                    &mut events,
                                    arrive,
                                    Ev::Arrive {
                                        flow: i,
                                        id,
                                        sent: now,
                                    },
                                );
                            }
                            n += 1;
                        }
                        if n == 0 {
                            break;
                        }
                        f.cc.on_sent(now, n * PKT, f.next_id - 1);
                    }
                }
                push(&mut heap, &mut events, t_ns + TICK_NS, Ev::Tick);
            }
            Ev::Arrive { flow, id, sent } => {
                let f = &mut fl[flow];
                f.pending.push((id, sent));
                if f.pending.len() >= link.per_ack {
                    let acked = std::mem::take(&mut f.pending);
                    push(
                        &mut heap,
                        &mut events,
                        t_ns + one_way.as_nanos() as u64,
                        Ev::Ack { flow, acked },
                    );
                }
            }
            Ev::Ack { flow, acked } => {
                let f = &mut fl[flow];
                let largest = acked.iter().map(|a| a.0).max().unwrap_or(0);
                let mut newest_sent = None;
                for (id, sent) in &acked {
                    let Some(pos) = f.outstanding.iter().position(|s| s.id == *id) else {
                        continue;
                    };
                    f.outstanding.remove(pos);
                    f.in_flight -= PKT;
                    f.delivered += PKT;
                    per_second[flow][(t_ns / 1_000_000_000) as usize] += PKT;
                    newest_sent = Some(*sent);
                    let rtt = now - *sent;
                    f.min_rtt = f.min_rtt.min(rtt);
                    f.srtt = Some(f.srtt.map_or(rtt, |s| (s * 7 + rtt) / 8));
                    if let Some(r) = f.reno.as_mut() {
                        r.on_ack(PKT);
                        continue;
                    }
                    f.cc.ack(now, *sent, PKT, f.min_rtt);
                    if let Some(b) = f.bound.as_mut() {
                        let inner = f.cc.window();
                        b.on_ack(now, PKT, f.srtt.unwrap_or(rtt), f.min_rtt, inner);
                    }
                }
                // Packet threshold: three below the largest acknowledged are lost.
                let mut lost = 0;
                let mut first_lost = None;
                while f.outstanding.front().is_some_and(|s| s.id + 3 < largest) {
                    if let Some(s) = f.outstanding.pop_front() {
                        first_lost.get_or_insert(s.id);
                    }
                    f.in_flight -= PKT;
                    lost += PKT;
                }
                if let (Some(r), Some(id)) = (f.reno.as_mut(), first_lost) {
                    f.lost += lost;
                    lost_per_second[(t_ns / 1_000_000_000) as usize] += lost;
                    r.on_loss(id, f.next_id);
                    continue;
                }
                if f.reno.is_some() {
                    continue;
                }
                if lost > 0 {
                    f.lost += lost;
                    lost_per_second[(t_ns / 1_000_000_000) as usize] += lost;
                    f.cc.on_congestion_event(now, now, false, lost);
                    if let Some(b) = f.bound.as_mut() {
                        b.on_loss(lost);
                    }
                }
                if newest_sent.is_some() {
                    f.cc.end_acks(now, f.in_flight, false);
                }
            }
        }
    }
    Outcome {
        per_second,
        lost: fl.iter().map(|f| f.lost).collect(),
        lost_per_second,
        in_startup: fl.iter().map(|f| f.cc.in_startup()).collect(),
        bandwidth: fl.iter().map(|f| f.cc.model.bandwidth()).collect(),
        trace,
        exits: fl.iter().map(|f| f.cc.model.exit).collect(),
    }
}

fn show(o: &Outcome) -> String {
    format!(
        "Mbit/s per second {:?}, lost {:?}, startup {:?}, estimate {:?}",
        o.per_second
            .iter()
            .map(|f| f.iter().map(|b| b * 8 / 1_000_000).collect::<Vec<_>>())
            .collect::<Vec<_>>(),
        o.lost,
        o.in_startup,
        o.bandwidth
    )
}

fn total(o: &Outcome, from: usize, to: usize) -> u64 {
    o.per_second
        .iter()
        .map(|f| f[from..to].iter().sum::<u64>())
        .sum()
}

#[test]
fn one_connection_fills_a_long_path_and_measures_its_rate() {
    let link = Link::gigabit(Duration::from_millis(100));
    let o = run(&link, 1, false, 4);
    assert!(!o.in_startup[0], "startup never ended");
    // Seconds 1-3 at 90 % of the link or better.
    let got = total(&o, 1, 4);
    assert!(got >= 3 * link.rate * 9 / 10, "delivered {got} B in 3 s");
    // The estimate is the link's rate, not a fraction of it (quinn's divides by 57 here).
    let bw = o.bandwidth[0];
    assert!(
        (link.rate * 9 / 10..=link.rate * 13 / 10).contains(&bw),
        "estimate {bw} B/s"
    );
}

#[test]
fn startup_at_200_ms_reaches_the_link_rate_and_stops_before_overflowing_much() {
    let link = Link::gigabit(Duration::from_millis(200));
    let o = run(&link, 1, false, 4);
    // Doubling from 240 kB to 25 MB takes about seven round trips (1.4 s), after the first
    // round paced at the initial RTT of 333 ms.
    let third = total(&o, 2, 3);
    assert!(
        third >= link.rate * 85 / 100,
        "second 3: {third} B; {}",
        show(&o)
    );
    let fourth = total(&o, 3, 4);
    assert!(
        fourth >= link.rate * 9 / 10,
        "second 4: {fourth} B; {}",
        show(&o)
    );
    // Startup ends on the queue's delay before its loss; by loss alone it lost two BDPs.
    assert!(
        matches!(o.exits[0], Some(StartupExit::Delay { .. })),
        "{:?}",
        o.exits
    );
    assert!(o.lost[0] <= link.queue * 3 / 2, "{}", show(&o));
}

#[test]
fn two_connections_share_a_full_queue_without_losing_much() {
    let link = Link::gigabit(Duration::from_millis(100));
    let o = run(&link, 2, false, 6);
    let got = total(&o, 2, 6);
    assert!(got >= 4 * link.rate * 9 / 10, "delivered {got} B in 4 s");
    let sent: u64 = total(&o, 0, 6) + o.lost.iter().sum::<u64>();
    let lost: u64 = o.lost.iter().sum();
    assert!(lost * 20 < sent, "lost {lost} of {sent} B; {}", show(&o));
}

#[test]
fn a_queue_shallower_than_the_window_stops_losing_once_the_bound_fits_it() {
    let mut link = Link::gigabit(Duration::from_millis(100));
    link.queue /= 8;
    let mut late = Vec::new();
    for bound in [true, false] {
        let cfg = BbrConfig {
            loss_bound: bound,
            ..BbrConfig::default()
        };
        let o = run_with(&link, 2, false, 8, cfg);
        let lost: u64 = o.lost_per_second[4..].iter().sum();
        let got = total(&o, 4, 8);
        eprintln!("bound {bound}: lost {lost} B in seconds 5-8; {}", show(&o));
        assert!(got >= 4 * link.rate * 85 / 100, "delivered {got} B");
        late.push(lost);
    }
    // Half a window's extra over an eighth of a BDP of queue loses every round unbounded.
    assert!(
        late[0] * 4 < late[1],
        "bounded {} B, unbounded {} B",
        late[0],
        late[1]
    );
}

/// Goodput per flow over seconds `from..to`, Mbit/s.
fn shares(o: &Outcome, from: usize, to: usize) -> Vec<u64> {
    o.per_second
        .iter()
        .map(|f| f[from..to].iter().sum::<u64>() * 8 / 1_000_000 / (to - from) as u64)
        .collect()
}

/// Two connections beside one loss-based flow that filled the one-BDP queue first, as the
/// lab's fairness cell has it (`scenarios/fairness.toml`):
/// `cargo test --release -p xfer-quic --lib bbr::sim::beside_a_loss_based_flow -- --ignored --nocapture`
///
/// In this link the competitor, which gives up 30 % at every loss event while the controller
/// ignores loss under 2 % of a round, is pushed down to 0-100 Mbit/s: the opposite of the
/// lab, where QUIC kept 84-493 Mbit/s beside a Linux cubic flow (docs/results.md,
/// "Fairness"). What this link lacks to show the lab's case is open; a burst that makes
/// quinn declare persistent congestion, which restarts the model from the minimum window
/// into a standing queue, is the first candidate.
#[test]
#[ignore]
fn beside_a_loss_based_flow() {
    for rtt in [50u64, 100, 200] {
        let link = Link::gigabit(Duration::from_millis(rtt));
        let mix = Mix {
            bbr: 2,
            bounded: false,
            reno: 1,
            head_start: Duration::from_secs(3),
        };
        let o = run_mix(&link, &mix, 33, BbrConfig::default());
        let s = shares(&o, 13, 33);
        println!(
            "rtt {rtt}: Mbit/s over seconds 13-33: bbr {:?} reno {:?}; lost {:?}",
            &s[..2],
            &s[2..],
            o.lost
        );
        if std::env::var_os("SIM_TRACE").is_some() {
            let per: Vec<Vec<u64>> = o
                .per_second
                .iter()
                .map(|f| f.iter().map(|b| b * 8 / 1_000_000).collect())
                .collect();
            println!("  {per:?}");
        }
    }
}

/// Prints the simulated goodput of each gain, RTT and flow count:
/// `cargo test --release -p xfer-quic --lib bbr::sim::explore -- --ignored --nocapture`
/// (`SIM_TRACE=1` adds flow 0's window every 100 ms).
#[test]
#[ignore]
fn explore() {
    for rtt in [50u64, 100, 200] {
        for (cg, sg) in [(125, 289), (150, 289), (200, 289), (125, 200)] {
            for flows in [1, 2] {
                let link = Link::gigabit(Duration::from_millis(rtt));
                let cfg = BbrConfig {
                    cwnd_gain_percent: cg,
                    startup_gain_percent: sg,
                    ..BbrConfig::default()
                };
                let o = run_with(&link, flows, false, 6, cfg);
                println!("rtt {rtt} gain {cg}/{sg} flows {flows}: {}", show(&o));
                println!("  exit {:?}", o.exits);
                if std::env::var_os("SIM_TRACE").is_some() {
                    println!("{:?}", &o.trace[..30]);
                }
            }
        }
    }
}
