//! What a connection learns of its path for the next one: the highest delivery rate over
//! any interval of one minimum RTT, and the minimum RTT. Their product is the path's
//! bandwidth-delay product as this connection saw it; saving that, rather than the wrapped
//! controller's window, keeps BBR's gain (its window is twice the BDP) and a slow-start
//! overshoot out of the next connection's jump.

use std::time::{Duration, Instant};

use super::phase::RTT_FLOOR;

/// Rate intervals a connection must complete before its measurement replaces a saved one:
/// a connection that carried one small request learned nothing about capacity.
pub(crate) const MIN_INTERVALS: u32 = 4;

#[derive(Debug, Clone, Default)]
pub(crate) struct PathMeter {
    min_rtt: Option<Duration>,
    interval_start: Option<Instant>,
    interval_bytes: u64,
    /// Send times of the earliest and latest packet acknowledged in the interval.
    interval_sent: Option<(Instant, Instant)>,
    /// Highest rate seen, bytes per second.
    max_rate: f64,
    intervals: u32,
}

/// One connection's measurement of its path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Measurement {
    /// Delivery rate × min RTT, bytes.
    pub bdp: u64,
    pub min_rtt: Duration,
    pub intervals: u32,
}

impl PathMeter {
    /// One acknowledged packet. Returns true when an interval closed with a new highest rate.
    pub fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64) -> bool {
        let sample = now.saturating_duration_since(sent).max(RTT_FLOOR);
        let min_rtt = *self
            .min_rtt
            .insert(self.min_rtt.map_or(sample, |m| m.min(sample)));
        let Some(start) = self.interval_start else {
            // Bytes acknowledged by the first ack left before any interval began.
            self.interval_start = Some(now);
            return false;
        };
        self.interval_bytes = self.interval_bytes.saturating_add(bytes);
        let (first, last) = self.interval_sent.get_or_insert((sent, sent));
        *first = (*first).min(sent);
        *last = (*last).max(sent);
        let send_span = last.saturating_duration_since(*first);
        let elapsed = now.saturating_duration_since(start);
        if elapsed < min_rtt {
            return false;
        }
        // Over the longer of the acknowledgement and send spans, as BBR's delivery rate: acks
        // that arrive bunched must not make the path look faster than the data was sent.
        let rate = self.interval_bytes as f64 / elapsed.max(send_span).as_secs_f64();
        self.intervals = self.intervals.saturating_add(1);
        self.interval_start = Some(now);
        self.interval_bytes = 0;
        self.interval_sent = None;
        if rate > self.max_rate {
            self.max_rate = rate;
            return true;
        }
        false
    }

    pub fn measurement(&self) -> Option<Measurement> {
        let min_rtt = self.min_rtt?;
        if self.intervals == 0 || self.max_rate <= 0.0 {
            return None;
        }
        Some(Measurement {
            bdp: (self.max_rate * min_rtt.as_secs_f64()) as u64,
            min_rtt,
            intervals: self.intervals,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn measures_rate_times_min_rtt() {
        let t0 = Instant::now();
        let mut m = PathMeter::default();
        assert_eq!(m.measurement(), None);
        // 100 ms path delivering 1 MB every 10 ms: 100 MB/s, BDP 10 MB.
        for i in 1..=100u32 {
            let now = t0 + 10 * MS * i;
            m.on_ack(now, now - 100 * MS, 1_000_000);
        }
        let got = m.measurement().expect("measured");
        assert_eq!(got.min_rtt, 100 * MS);
        assert_eq!(got.intervals, 9);
        assert!((9_900_000..=10_100_000).contains(&got.bdp), "{got:?}");
    }

    #[test]
    fn bunched_acknowledgements_do_not_inflate_the_rate() {
        let t0 = Instant::now();
        let mut m = PathMeter::default();
        // A 100 ms path; 1 MB sent every 10 ms (100 MB/s, BDP 10 MB), but the acknowledgements
        // of 200 ms of sends arrive within 100 ms: the ack rate alone reads 200 MB/s.
        m.on_ack(t0, t0 - 100 * MS, 1);
        for k in 1..=20u32 {
            m.on_ack(t0 + 5 * MS * k, t0 - 200 * MS + 10 * MS * k, 1_000_000);
        }
        let got = m.measurement().expect("measured");
        assert_eq!(got.min_rtt, 100 * MS);
        assert_eq!(got.intervals, 1);
        assert!((10_000_000..=11_000_000).contains(&got.bdp), "{got:?}");
    }

    #[test]
    fn a_slow_interval_does_not_lower_the_estimate() {
        let t0 = Instant::now();
        let mut m = PathMeter::default();
        for i in 0..=20u32 {
            let now = t0 + 10 * MS * i;
            m.on_ack(now, now - 10 * MS, 1_000_000);
        }
        let before = m.measurement().expect("measured").bdp;
        for i in 21..=40u32 {
            let now = t0 + 10 * MS * i;
            m.on_ack(now, now - 10 * MS, 1_000);
        }
        assert_eq!(m.measurement().expect("measured").bdp, before);
    }
}
