//! The link model of one direction, free of I/O and clocks: given a wire packet offered at time
//! `now`, decide whether the drop-tail queue takes it, whether the wire loses it, and when it is
//! delivered. Time is in nanoseconds on any monotonic scale the caller picks.
//!
//! A packet's fate: queue check (backlog + size > queue → dropped), then serialization at the
//! bottleneck (`start = max(now, busy_until)`, `busy_until = start + bits / rate`), then loss on
//! the wire (after it used its serialization time), then propagation (`rtt / 2`) plus jitter,
//! clamped so delivery times never decrease.

use crate::config::LinkConfig;
use crate::rng::SplitMix64;

/// What happens to one offered wire packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Delivered at this time (ns).
    Deliver(u64),
    /// The bottleneck queue was full.
    DropQueue,
    /// Lost on the wire.
    DropLoss,
}

#[derive(Debug, Clone)]
pub(crate) struct LinkModel {
    ns_per_byte: f64,
    delay_ns: u64,
    jitter_ns: u64,
    queue_bytes: f64,
    loss: f64,
    rng: SplitMix64,
    /// When the bottleneck finishes serializing the last accepted packet.
    busy_until: f64,
    last_delivery: u64,
    /// Packets that pass before the next lost one (geometric draw, so loss costs O(1) per
    /// packet and stays an independent per-packet Bernoulli process).
    until_loss: u64,
}

impl LinkModel {
    pub(crate) fn new(cfg: &LinkConfig) -> Self {
        let mut m = Self {
            ns_per_byte: 8e9 / cfg.rate_bps as f64,
            delay_ns: (cfg.rtt.as_nanos() / 2) as u64,
            jitter_ns: cfg.jitter.as_nanos() as u64,
            queue_bytes: cfg.effective_queue_bytes() as f64,
            loss: cfg.loss,
            rng: SplitMix64::new(cfg.seed),
            busy_until: 0.0,
            last_delivery: 0,
            until_loss: 0,
        };
        m.until_loss = m.draw_until_loss();
        m
    }

    fn draw_until_loss(&mut self) -> u64 {
        if self.loss <= 0.0 {
            return u64::MAX;
        }
        if self.loss >= 1.0 {
            return 0;
        }
        // P(k packets pass before a loss) = (1-p)^k p: inverse transform of a uniform in (0, 1].
        let u = 1.0 - self.rng.next_f64();
        let k = u.ln() / (1.0 - self.loss).ln();
        if k >= u64::MAX as f64 {
            u64::MAX
        } else {
            k as u64
        }
    }

    /// Bytes waiting for or in serialization at `now`.
    pub(crate) fn backlog_bytes(&self, now: u64) -> f64 {
        (self.busy_until - now as f64).max(0.0) / self.ns_per_byte
    }

    /// Offers one wire packet of `wire_len` IP bytes arriving at the bottleneck at `now`.
    pub(crate) fn offer(&mut self, now: u64, wire_len: u32) -> Fate {
        let len = wire_len as f64;
        if self.backlog_bytes(now) + len > self.queue_bytes {
            return Fate::DropQueue;
        }
        self.busy_until = self.busy_until.max(now as f64) + len * self.ns_per_byte;
        if self.until_loss == 0 {
            self.until_loss = self.draw_until_loss();
            return Fate::DropLoss;
        }
        if self.until_loss != u64::MAX {
            self.until_loss -= 1;
        }
        let jitter = if self.jitter_ns > 0 {
            self.rng.below_or_eq(self.jitter_ns)
        } else {
            0
        };
        let at = (self.busy_until.ceil() as u64 + self.delay_ns + jitter).max(self.last_delivery);
        self.last_delivery = at;
        Fate::Deliver(at)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: u64 = 1_000_000;

    fn link(rate: u64, rtt_ms: u64) -> LinkConfig {
        LinkConfig::new(rate, Duration::from_millis(rtt_ms))
    }

    #[test]
    fn serialization_then_propagation() {
        // 10 Mbit/s: 1250 bytes take 1 ms; one-way delay 5 ms.
        let mut m = LinkModel::new(&link(10_000_000, 10));
        let got: Vec<_> = (0..4).map(|_| m.offer(0, 1250)).collect();
        assert_eq!(
            got,
            vec![
                Fate::Deliver(6 * MS),
                Fate::Deliver(7 * MS),
                Fate::Deliver(8 * MS),
                Fate::Deliver(9 * MS)
            ]
        );
        // After the queue drained, a packet only pays its own serialization.
        assert_eq!(m.offer(100 * MS, 1250), Fate::Deliver(106 * MS));
    }

    #[test]
    fn drop_tail_counts_bytes() {
        let mut cfg = link(10_000_000, 10);
        cfg.queue_bytes = Some(3000);
        let mut m = LinkModel::new(&cfg);
        assert!(matches!(m.offer(0, 1250), Fate::Deliver(_)));
        assert!(matches!(m.offer(0, 1250), Fate::Deliver(_)));
        assert_eq!(m.offer(0, 1250), Fate::DropQueue);
        // Small packets still fit in the remaining 500 bytes.
        assert!(matches!(m.offer(0, 400), Fate::Deliver(_)));
        // Half a millisecond later 625 bytes have left.
        assert!(matches!(m.offer(MS / 2, 600), Fate::Deliver(_)));
        assert_eq!(m.offer(MS / 2, 600), Fate::DropQueue);
    }

    #[test]
    fn loss_rate_matches_probability() {
        let mut cfg = link(100_000_000_000, 0);
        cfg.loss = 0.01;
        cfg.queue_bytes = Some(1 << 32);
        let mut m = LinkModel::new(&cfg);
        let n = 200_000u64;
        let lost = (0..n)
            .filter(|i| m.offer(i * 1000, 100) == Fate::DropLoss)
            .count() as f64;
        let sd = (n as f64 * 0.01 * 0.99).sqrt();
        assert!((lost - 2000.0).abs() < 5.0 * sd, "lost {lost}");
    }

    #[test]
    fn full_and_no_loss_are_exact() {
        let mut cfg = link(1_000_000_000, 0);
        cfg.loss = 1.0;
        let mut m = LinkModel::new(&cfg);
        assert!((0..100).all(|i| m.offer(i * MS, 100) == Fate::DropLoss));
        cfg.loss = 0.0;
        let mut m = LinkModel::new(&cfg);
        assert!((0..100).all(|i| matches!(m.offer(i * MS, 100), Fate::Deliver(_))));
    }

    #[test]
    fn jitter_never_reorders_and_stays_in_bounds() {
        let mut cfg = link(1_000_000_000, 20);
        cfg.jitter = Duration::from_millis(5);
        let mut m = LinkModel::new(&cfg);
        let mut last = 0;
        let mut spread = Vec::new();
        for i in 0..10_000u64 {
            let now = i * 3 * MS;
            let Fate::Deliver(at) = m.offer(now, 100) else {
                panic!("no loss configured")
            };
            assert!(at >= last);
            let base = now + 800 + 10 * MS;
            assert!(at >= base && at <= base + 5 * MS, "at {at} base {base}");
            spread.push(at - base);
            last = at;
        }
        assert!(spread.iter().any(|&s| s > 4 * MS));
        assert!(spread.iter().any(|&s| s < MS));
    }

    #[test]
    fn same_seed_same_fates() {
        let mut cfg = link(10_000_000, 10);
        cfg.loss = 0.1;
        cfg.jitter = Duration::from_millis(1);
        let run = || {
            let mut m = LinkModel::new(&cfg);
            (0..1000u64)
                .map(|i| m.offer(i * MS, 500))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }
}
