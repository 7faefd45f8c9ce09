//! The controller against synthetic paths: goodput and loss as functions of the lane count,
//! a virtual clock, no sockets.

use std::time::Duration;

use super::*;

const MBIT: f64 = 1e6;
const STEP: Duration = Duration::from_millis(100);

/// A path: goodput (bit/s) and loss (per packet) at a lane count, and a little deterministic
/// noise on goodput.
struct Path {
    goodput: Box<dyn Fn(usize) -> f64>,
    loss: Box<dyn Fn(usize) -> f64>,
    /// Relative amplitude of the noise, 0.0 for none.
    noise: f64,
    /// Size of the transfer; `u64::MAX` for one that does not end within the run.
    size: u64,
}

impl Path {
    fn new(goodput: impl Fn(usize) -> f64 + 'static) -> Self {
        Self {
            goodput: Box::new(goodput),
            loss: Box::new(|_| 0.0),
            noise: 0.0,
            size: u64::MAX,
        }
    }
}

/// Run `secs` of virtual time; the driver applies each decision at once. The lane count at
/// every step, and the controller.
fn run(cfg: AdaptConfig, path: &Path, secs: u64, rtt: Duration) -> (Vec<usize>, LaneController) {
    let mut ctl = LaneController::new(cfg);
    let mut lanes = ctl.target();
    let mut received = 0u64;
    let mut lost = 0.0f64;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut history = Vec::new();
    let steps = secs * 1000 / STEP.as_millis() as u64;
    for i in 1..=steps {
        // xorshift: noise in [-1, 1).
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let jitter = (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
        let bps = (path.goodput)(lanes) * (1.0 + path.noise * jitter);
        let bytes = (bps * STEP.as_secs_f64() / 8.0) as u64;
        received = (received + bytes).min(path.size);
        lost += (path.loss)(lanes) * bytes as f64 / BYTES_PER_PACKET;
        ctl.handle_sample(Sample {
            at: STEP * i as u32,
            received,
            remaining: path.size - received,
            lanes,
            rtt: Some(rtt),
            loss_events: Some(lost as u64),
        });
        while let Some(d) = ctl.poll_decision() {
            match d.action {
                Action::Add(n) => lanes += n,
                Action::Retire(n) => lanes -= n,
                Action::Hold => panic!("holds are not handed to the driver"),
            }
            assert_eq!(lanes, d.lanes, "decision {d:?}");
        }
        history.push(lanes);
        if received == path.size {
            break;
        }
    }
    (history, ctl)
}

fn adds(ctl: &LaneController) -> usize {
    ctl.decisions()
        .iter()
        .filter(|d| matches!(d.action, Action::Add(_)))
        .count()
}

/// Times the count turned from rising to falling or back.
fn reversals(history: &[usize]) -> usize {
    let mut dirs = history
        .windows(2)
        .filter(|w| w[0] != w[1])
        .map(|w| w[1] > w[0]);
    let Some(mut last) = dirs.next() else {
        return 0;
    };
    let mut n = 0;
    for d in dirs {
        if d != last {
            n += 1;
            last = d;
        }
    }
    n
}

#[test]
fn climbs_while_goodput_grows_and_stops_where_it_saturates() {
    // 50 Mbit/s per lane up to 900 Mbit/s at 18 lanes: 8 → 12 → 18, then 27 brings nothing.
    let path = Path::new(|n| (n as f64 * 50.0 * MBIT).min(900.0 * MBIT));
    let (history, ctl) = run(
        AdaptConfig::default(),
        &path,
        60,
        Duration::from_millis(100),
    );
    assert_eq!(&history[..5], &[8; 5], "no change during the warmup");
    assert_eq!(*history.iter().max().unwrap(), 27);
    // It settles at 18 and probes 27 now and then, ever more rarely.
    let late = &history[history.len() / 2..];
    let at_18 = late.iter().filter(|&&n| n == 18).count();
    assert!(at_18 * 10 >= late.len() * 8, "{:#?}", ctl.decisions());
    let kept: Vec<Reason> = ctl.decisions().iter().map(|d| d.reason).collect();
    assert_eq!(
        &kept[..4],
        &[
            Reason::Baseline,
            Reason::GoodputRose,
            Reason::GoodputRose,
            Reason::NoGain
        ]
    );
}

#[test]
fn backs_off_when_more_lanes_bring_nothing_and_probes_ever_more_rarely() {
    let path = Path::new(|_| 900.0 * MBIT);
    let (history, ctl) = run(
        AdaptConfig::default(),
        &path,
        300,
        Duration::from_millis(100),
    );
    assert_eq!(ctl.target(), 8);
    assert!(history.iter().all(|&n| n == 8 || n == 12), "{history:?}");
    // Holds of 2, 4, 8, then 16 windows of ~1 s between probes of ~1.5 s: about 18 in
    // 300 s, not the 120 a probe after every window would make.
    let probes = adds(&ctl);
    assert!((4..=20).contains(&probes), "{probes} probes");
    let times: Vec<f64> = ctl
        .decisions()
        .iter()
        .filter(|d| matches!(d.action, Action::Add(_)))
        .map(|d| d.at_seconds)
        .collect();
    for pair in times.windows(2).skip(3) {
        assert!(pair[1] - pair[0] >= 16.0, "{times:?}");
    }
    // Every probe was retired for the same reason.
    assert!(ctl
        .decisions()
        .iter()
        .filter(|d| matches!(d.action, Action::Retire(_)))
        .all(|d| d.reason == Reason::NoGain));
}

#[test]
fn lanes_that_bring_loss_are_retired_even_when_goodput_rises() {
    // Goodput keeps growing, but beyond 12 lanes the queue overflows.
    let mut path = Path::new(|n| n as f64 * 40.0 * MBIT);
    path.loss = Box::new(|n| if n > 12 { 0.01 } else { 0.0 });
    let (history, ctl) = run(AdaptConfig::default(), &path, 60, Duration::from_millis(50));
    assert_eq!(ctl.target(), 12, "{:#?}", ctl.decisions());
    assert!(history.iter().all(|&n| n <= 18));
    assert!(ctl.decisions().iter().any(|d| d.reason == Reason::LossRose));
}

#[test]
fn random_loss_at_every_count_does_not_drive_the_count_down() {
    // 0.5 % loss whatever the count (above max_loss), goodput growing to 24 lanes.
    let mut path = Path::new(|n| (n as f64 * 40.0 * MBIT).min(960.0 * MBIT));
    path.loss = Box::new(|_| 0.005);
    let (_, ctl) = run(
        AdaptConfig::default(),
        &path,
        60,
        Duration::from_millis(100),
    );
    assert!(ctl.target() >= 18, "{:#?}", ctl.decisions());
}

#[test]
fn loss_with_falling_goodput_at_a_steady_count_steps_down() {
    // Holding at 8 on a flat path, then cross traffic: loss and a goodput that halves.
    let cfg = AdaptConfig::default();
    let mut ctl = LaneController::new(cfg);
    let mut received = 0u64;
    let mut lost = 0u64;
    let mut t = Duration::ZERO;
    let mut lanes = 8;
    for i in 0..400 {
        t += STEP;
        let congested = i >= 200;
        let bps = if congested { 400.0 } else { 900.0 } * MBIT;
        let bytes = (bps * STEP.as_secs_f64() / 8.0) as u64;
        received += bytes;
        if congested {
            lost += bytes / 1448 / 50;
        }
        ctl.handle_sample(Sample {
            at: t,
            received,
            remaining: u64::MAX,
            lanes,
            rtt: Some(Duration::from_millis(100)),
            loss_events: Some(lost),
        });
        while let Some(d) = ctl.poll_decision() {
            lanes = d.lanes;
        }
    }
    assert!(
        ctl.decisions().iter().any(|d| d.reason == Reason::Loss),
        "{:#?}",
        ctl.decisions()
    );
    assert!(lanes >= ctl.config().min_lanes);
}

#[test]
fn stays_within_the_bounds() {
    let cfg = AdaptConfig {
        min_lanes: 4,
        max_lanes: 10,
        initial_lanes: 6,
        ..AdaptConfig::default()
    };
    // Goodput grows with every lane: the controller wants more than it may have.
    let path = Path::new(|n| n as f64 * 10.0 * MBIT);
    let (history, ctl) = run(cfg.clone(), &path, 120, Duration::from_millis(100));
    assert!(
        history.iter().all(|&n| (4..=10).contains(&n)),
        "{history:?}"
    );
    assert_eq!(ctl.target(), 10);
    assert!(ctl.decisions().iter().any(|d| d.reason == Reason::AtMax));

    // Nothing grows: it never goes below the minimum either.
    let flat = Path::new(|_| 500.0 * MBIT);
    let cfg = AdaptConfig {
        min_lanes: 8,
        max_lanes: 8,
        ..AdaptConfig::default()
    };
    let (history, ctl) = run(cfg, &flat, 60, Duration::from_millis(100));
    assert!(history.iter().all(|&n| n == 8));
    assert_eq!(adds(&ctl), 0);
}

#[test]
fn noisy_plateau_does_not_make_it_swing() {
    // ±4 % noise on a flat 900 Mbit/s: a lucky window must not carry the count away, and
    // the probes (one up, one back each) come ever more rarely.
    let mut path = Path::new(|_| 900.0 * MBIT);
    path.noise = 0.04;
    let (history, ctl) = run(
        AdaptConfig::default(),
        &path,
        200,
        Duration::from_millis(100),
    );
    assert!(
        history.iter().all(|&n| n == 8 || n == 12),
        "{:#?}",
        ctl.decisions()
    );
    let at_8 = history.iter().filter(|&&n| n == 8).count();
    assert!(at_8 * 100 >= history.len() * 85, "{:#?}", ctl.decisions());
    // A probe per ~17 s once the hold is at its longest: 5 in the first 40 s, 9 after.
    assert!(adds(&ctl) <= 15, "{:#?}", ctl.decisions());
    assert!(reversals(&history) < 2 * adds(&ctl));
}

#[test]
fn no_probe_when_the_transfer_ends_before_it_could_be_judged() {
    // 1 GiB at 900 Mbit/s lasts under 10 s: after a 1 s warmup and a 1.6 s baseline (200 ms
    // round trip) there is time for one probe at most, then none.
    let mut path = Path::new(|n| (n as f64 * 100.0 * MBIT).min(900.0 * MBIT));
    path.size = 1 << 30;
    let (_, ctl) = run(
        AdaptConfig::default(),
        &path,
        60,
        Duration::from_millis(200),
    );
    assert!(adds(&ctl) <= 1, "{:#?}", ctl.decisions());
    assert_eq!(
        ctl.decisions().last().map(|d| d.reason),
        Some(Reason::Ending)
    );
}

#[test]
fn warmup_and_windows_stretch_with_the_round_trip() {
    let path = Path::new(|n| n as f64 * 50.0 * MBIT);
    let (_, ctl) = run(
        AdaptConfig::default(),
        &path,
        30,
        Duration::from_millis(300),
    );
    // Warmup 10 × 300 ms, then a window of 8 × 300 ms: nothing before 5.4 s.
    let first = ctl.decisions()[0];
    assert!(first.at_seconds >= 5.4, "{first:?}");
    assert_eq!(first.reason, Reason::Baseline);
}

#[test]
fn waits_for_retired_lanes_before_measuring_again() {
    let mut ctl = LaneController::new(AdaptConfig::default());
    let mut received = 0u64;
    let mut t = Duration::ZERO;
    let mut feed = |ctl: &mut LaneController, lanes: usize, secs: u32| {
        for _ in 0..secs * 10 {
            t += STEP;
            received += 10_000_000;
            ctl.handle_sample(Sample {
                at: t,
                received,
                remaining: u64::MAX,
                lanes,
                rtt: Some(Duration::from_millis(50)),
                loss_events: None,
            });
        }
    };
    feed(&mut ctl, 8, 3);
    assert_eq!(ctl.poll_decision().map(|d| d.action), Some(Action::Add(4)));
    feed(&mut ctl, 12, 3);
    assert_eq!(
        ctl.poll_decision().map(|d| d.action),
        Some(Action::Retire(4))
    );
    // The driver still runs 12 (retired lanes finishing their chunks): no window yet, so
    // no decision however long that takes.
    let before = ctl.decisions().len();
    feed(&mut ctl, 12, 30);
    assert_eq!(ctl.decisions().len(), before);
    feed(&mut ctl, 8, 10);
    assert!(ctl.decisions().len() > before);
}

#[test]
fn report_summary_names_the_path_and_the_last_reason() {
    let path = Path::new(|n| (n as f64 * 50.0 * MBIT).min(900.0 * MBIT));
    let (_, ctl) = run(
        AdaptConfig::default(),
        &path,
        12,
        Duration::from_millis(100),
    );
    let report = AdaptReport {
        min_lanes: 2,
        max_lanes: 64,
        initial_lanes: 8,
        final_lanes: ctl.target(),
        peak_lanes: 27,
        decisions: ctl.decisions().to_vec(),
    };
    assert_eq!(
        report.summary(),
        "lanes auto 2..64: 8→12→18→27→18→27→18 (more lanes did not raise goodput)"
    );
    let many = AdaptReport {
        decisions: [report.decisions.clone(), report.decisions.clone()].concat(),
        ..report
    };
    assert!(many.summary().contains("…(5 more)…"), "{}", many.summary());
}

#[test]
fn bad_bounds_are_refused() {
    let bad = AdaptConfig {
        min_lanes: 9,
        max_lanes: 4,
        ..AdaptConfig::default()
    };
    assert!(bad.validate().unwrap_err().to_string().contains("exceed"));
    let zero = AdaptConfig {
        min_lanes: 0,
        ..AdaptConfig::default()
    };
    assert!(zero.validate().is_err());
    assert!(AdaptConfig::default().validate().is_ok());
    let clamp = AdaptConfig {
        min_lanes: 16,
        max_lanes: 32,
        ..AdaptConfig::default()
    };
    assert_eq!(clamp.start_lanes(), 16);
}

#[test]
fn slow_start_is_not_credited_to_a_probe() {
    // Goodput climbs for 9 s whatever the count (a long slow start), then stays at 900
    // Mbit/s: no count beats 8, so every probe must be retired.
    let mut ctl = LaneController::new(AdaptConfig::default());
    let mut received = 0u64;
    let mut lanes = 8;
    for i in 1..=300u32 {
        let at = STEP * i;
        let bps = (100.0 * MBIT * at.as_secs_f64()).min(900.0 * MBIT);
        received += (bps * STEP.as_secs_f64() / 8.0) as u64;
        ctl.handle_sample(Sample {
            at,
            received,
            remaining: u64::MAX,
            lanes,
            rtt: Some(Duration::from_millis(100)),
            loss_events: Some(0),
        });
        while let Some(d) = ctl.poll_decision() {
            lanes = d.lanes;
        }
    }
    let first = ctl.decisions()[0];
    assert_eq!(first.reason, Reason::Baseline);
    assert!(first.at_seconds >= 8.0, "{:#?}", ctl.decisions());
    assert!(
        ctl.decisions()
            .iter()
            .all(|d| d.reason != Reason::GoodputRose),
        "{:#?}",
        ctl.decisions()
    );
    // At most a probe in flight at the end.
    assert!(lanes == 8 || lanes == 12, "{lanes}");
}
