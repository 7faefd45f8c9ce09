//! Delivery-rate samples (draft-cheng-iccrg-delivery-rate-estimation), fitted to quinn's
//! controller calls: `on_sent` once per transmit (a GSO batch of up to ten datagrams, all
//! with the same send time), `on_ack` once per acknowledged packet with that packet's send
//! time, `on_end_acks` once per ACK frame.
//!
//! quinn's own BBR divides one packet's size by the time since the previous ACK frame. A
//! receiver that acknowledges a batch of 57 datagrams at once (quinn's does, docs/results.md)
//! makes that a fiftieth of the rate, or, for the second packet of a frame, nothing at all.
//! Here each send remembers how much had been delivered when it left; the sample of an ACK
//! frame is what was delivered since the newest packet it acknowledges was sent, over the
//! longer of the send and the acknowledgement spans, which bounds it by the rate the data
//! left at and by the rate it arrived at.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Sends remembered at most. Each is a transmit still unacknowledged or lost; the window
/// bounds how many there are (a 64 MiB window of 1,200-byte single-datagram sends is 56,000).
const MAX_RECORDS: usize = 1 << 17;

/// What the connection had delivered when one transmit left.
#[derive(Debug, Clone, Copy)]
struct SendRecord {
    sent: Instant,
    delivered: u64,
    delivered_time: Instant,
    first_sent: Instant,
    app_limited: bool,
}

/// One delivery-rate sample, taken per ACK frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateSample {
    /// Bytes per second.
    pub rate: u64,
    /// Bytes delivered when the newest acknowledged packet was sent: a round trip ends when
    /// this passes the delivered count at its start.
    pub prior_delivered: u64,
    /// The sender had nothing to send when that packet left, so the rate says how fast the
    /// application was, not the path.
    pub app_limited: bool,
    /// From that packet's send to this acknowledgement.
    pub rtt: Duration,
}

/// The connection's delivery counters and its unacknowledged sends.
#[derive(Debug, Clone, Default)]
pub(crate) struct RateSampler {
    records: VecDeque<SendRecord>,
    /// Bytes of ack-eliciting packets acknowledged so far.
    delivered: u64,
    delivered_time: Option<Instant>,
    first_sent: Option<Instant>,
    /// Bytes in flight as of the last ACK frame plus what was sent since.
    in_flight: u64,
    /// Non-zero while the application limits sending: the delivered count at which the
    /// packets sent while it did will all have been acknowledged.
    app_limited_until: u64,
    /// The newest send acknowledged by the ACK frame being processed.
    newest_acked: Option<SendRecord>,
}

impl RateSampler {
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered
    }

    pub(crate) fn on_sent(&mut self, now: Instant, bytes: u64) {
        if self.in_flight == 0 {
            // Starting after idle: the span of the next sample begins now, not at the last
            // acknowledgement, which may be seconds ago.
            self.first_sent = Some(now);
            self.delivered_time = Some(now);
        }
        self.in_flight = self.in_flight.saturating_add(bytes);
        // Transmits of one instant share one snapshot; the first one's is kept.
        if self.records.back().is_some_and(|r| r.sent >= now) {
            return;
        }
        if self.records.len() >= MAX_RECORDS {
            self.records.pop_front();
        }
        self.records.push_back(SendRecord {
            sent: now,
            delivered: self.delivered,
            delivered_time: self.delivered_time.unwrap_or(now),
            first_sent: self.first_sent.unwrap_or(now),
            app_limited: self.app_limited_until != 0,
        });
    }

    pub(crate) fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64) {
        self.delivered = self.delivered.saturating_add(bytes);
        self.delivered_time = Some(now);
        // Sends older than this one are acknowledged or lost; a late acknowledgement of one
        // already dropped counts as delivered but gives no sample.
        let idx = self.records.partition_point(|r| r.sent < sent);
        self.records.drain(..idx);
        let Some(record) = self.records.front().copied() else {
            return;
        };
        if record.sent != sent {
            return;
        }
        if self.newest_acked.is_none_or(|n| record.sent >= n.sent) {
            self.newest_acked = Some(record);
        }
    }

    /// Ends an ACK frame: the sample of its newest acknowledged send, unless its span is
    /// shorter than `min_rtt` (acknowledgements bunched by the path or the receiver would
    /// overstate the rate) or empty.
    pub(crate) fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        min_rtt: Duration,
    ) -> Option<RateSample> {
        self.in_flight = in_flight;
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        if app_limited && self.app_limited_until == 0 {
            self.app_limited_until = self.delivered.saturating_add(in_flight).max(1);
        }
        let p = self.newest_acked.take()?;
        self.first_sent = Some(p.sent);
        let send_elapsed = p.sent.saturating_duration_since(p.first_sent);
        let ack_elapsed = now.saturating_duration_since(p.delivered_time);
        let interval = send_elapsed.max(ack_elapsed);
        if interval.is_zero() || interval < min_rtt {
            return None;
        }
        let bytes = self.delivered.saturating_sub(p.delivered);
        let rate = (u128::from(bytes) * 1_000_000_000 / interval.as_nanos()) as u64;
        Some(RateSample {
            rate,
            prior_delivered: p.delivered,
            app_limited: p.app_limited,
            rtt: now.saturating_duration_since(p.sent),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const PKT: u64 = 1472;

    /// 1 Gbit/s for 1 s at 100 ms RTT, ten datagrams per transmit, the receiver
    /// acknowledging `per_ack` packets at a time. Returns the largest sample.
    fn run(per_ack: u64) -> u64 {
        enum Ev {
            Send,
            Ack { first: u64, last: u64 },
        }
        let t0 = Instant::now();
        let per_packet = Duration::from_nanos(PKT * 8); // 1 Gbit/s
        let at = |k: u64| t0 + per_packet * k as u32;
        let n = 80_000u64;
        let mut events: Vec<(Instant, u8, Ev)> =
            (0..n / 10).map(|b| (at(b * 10), 0, Ev::Send)).collect();
        let mut first = 0;
        while first + per_ack <= n {
            let last = first + per_ack - 1;
            events.push((at(last) + 100 * MS, 1, Ev::Ack { first, last }));
            first += per_ack;
        }
        events.sort_by_key(|e| (e.0, e.1));
        let mut s = RateSampler::default();
        let (mut sent, mut acked, mut best) = (0, 0, 0);
        for (t, _, ev) in events {
            match ev {
                Ev::Send => {
                    s.on_sent(t, 10 * PKT);
                    sent += 10 * PKT;
                }
                Ev::Ack { first, last } => {
                    for k in first..=last {
                        s.on_ack(t, at(k - k % 10), PKT);
                        acked += PKT;
                    }
                    if let Some(r) = s.on_end_acks(t, sent - acked, false, 100 * MS) {
                        best = best.max(r.rate);
                    }
                }
            }
        }
        best
    }

    #[test]
    fn batched_acknowledgements_give_the_link_rate_not_a_fraction_of_it() {
        for per_ack in [2, 10, 57] {
            let best = run(per_ack);
            // 125 MB/s, within a few per cent (the send span starts at a batch boundary).
            assert!(
                (118_000_000..=132_000_000).contains(&best),
                "{per_ack} packets per ACK: {best} B/s"
            );
        }
    }

    #[test]
    fn a_span_shorter_than_the_min_rtt_gives_no_sample() {
        let t0 = Instant::now();
        let mut s = RateSampler::default();
        s.on_sent(t0, 1000);
        s.on_ack(t0 + 10 * MS, t0, 1000);
        assert_eq!(s.on_end_acks(t0 + 10 * MS, 0, false, 100 * MS), None);
        s.on_sent(t0 + 200 * MS, 1000);
        s.on_ack(t0 + 300 * MS, t0 + 200 * MS, 1000);
        let r = s
            .on_end_acks(t0 + 300 * MS, 0, false, 100 * MS)
            .expect("sample");
        assert_eq!(r.rate, 10_000);
        assert_eq!(r.prior_delivered, 1000);
    }

    #[test]
    fn sends_while_the_application_is_idle_are_flagged() {
        let t0 = Instant::now();
        let mut s = RateSampler::default();
        s.on_sent(t0, 1000);
        s.on_ack(t0 + 100 * MS, t0, 1000);
        s.on_end_acks(t0 + 100 * MS, 0, true, 100 * MS);
        s.on_sent(t0 + 150 * MS, 1000);
        s.on_ack(t0 + 250 * MS, t0 + 150 * MS, 1000);
        let r = s
            .on_end_acks(t0 + 250 * MS, 0, false, 100 * MS)
            .expect("sample");
        assert!(r.app_limited);
        // Once everything sent while idle is delivered, samples count again.
        s.on_sent(t0 + 260 * MS, 1000);
        s.on_ack(t0 + 360 * MS, t0 + 260 * MS, 1000);
        let r = s
            .on_end_acks(t0 + 360 * MS, 0, false, 100 * MS)
            .expect("sample");
        assert!(!r.app_limited);
    }

    #[test]
    fn acknowledgements_of_forgotten_sends_count_but_give_no_sample() {
        let t0 = Instant::now();
        let mut s = RateSampler::default();
        s.on_sent(t0, 1000);
        s.on_sent(t0 + MS, 1000);
        // The second send is acknowledged first; the first is then forgotten.
        s.on_ack(t0 + 101 * MS, t0 + MS, 1000);
        assert!(s.on_end_acks(t0 + 101 * MS, 1000, false, 50 * MS).is_some());
        s.on_ack(t0 + 102 * MS, t0, 1000);
        assert_eq!(s.on_end_acks(t0 + 102 * MS, 0, false, 50 * MS), None);
        assert_eq!(s.delivered(), 2000);
    }
}
