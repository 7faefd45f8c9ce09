//! A cap on the payload rate of one command, shared by all its lanes (`--limit-rate`).
//!
//! [`RateLimit`] is the user's figure, read by [`parse_rate_limit`]; [`TokenBucket`] is the
//! sans-IO pacer: it is told how many bytes went through and when (`now` is an argument, never
//! read from a clock), and answers with the instant the caller may move the next bytes, so it
//! is tested with a virtual clock. [`RateLimiter`] shares one bucket between the lanes of a
//! command (and the files of a tree) and sleeps until that instant.
//!
//! The bucket is a GCRA (generic cell rate algorithm): it keeps a *theoretical arrival time*,
//! pushed forward by `bytes / rate` per charge, and a caller waits until that time minus the
//! burst allowance. Lanes are served in the order they charge, each waiting its own turn, so
//! none is starved and each gets its share of the rate. Bytes are charged after they are read
//! (a body's next piece has no size until it arrives), so at most one piece per lane rides on
//! top of the burst.
//!
//! A lane that waits does not read, so its TCP receive window or QUIC stream credit closes
//! and the sender slows down too: the cap holds on the link, not just on the disk.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::size::{parse_size, split_quantity};

/// The burst a bucket lets through at once after an idle spell: this many of the rate's
/// milliseconds, so that the rate over a second stays within 5 % of the cap.
pub const BURST_MS: u64 = 50;
/// The smallest burst: one read of a body, so that a low rate does not wait after every piece.
pub const MIN_BURST: u64 = 16 << 10;

/// The share of a cap one lane of a download is given when the lane count is left to the
/// transport (100 MB/s, 800 Mbit/s: what one TLS connection carries on the paths xfer is
/// sized for); the count is never cut below two.
pub const BYTES_PER_CAPPED_LANE: u64 = 100_000_000;

/// Under a cap, each connection's and stream's receive window holds this many milliseconds of
/// the capped rate: enough for one lane to carry the whole cap up to a 125 ms round trip (two
/// lanes to 250 ms), small enough that bytes the client has not read yet (the kernel's buffer,
/// HTTP/2 and QUIC windows) do not let the link run far above the cap while the lanes wait.
pub const WINDOW_MS: u64 = 125;
/// The smallest receive window under a cap.
pub const MIN_WINDOW: u64 = 256 << 10;

const NANOS: u128 = 1_000_000_000;

/// A payload rate, in bytes per second (never zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    bytes_per_second: NonZeroU64,
}

impl RateLimit {
    pub fn from_bytes_per_second(bytes_per_second: NonZeroU64) -> Self {
        Self { bytes_per_second }
    }

    pub fn bytes_per_second(self) -> u64 {
        self.bytes_per_second.get()
    }

    /// Lanes a download under this cap runs when the count is left to the transport
    /// (`default`): one per [`BYTES_PER_CAPPED_LANE`], at least two, at most `default`. A
    /// connection reaches a modest cap alone; more only hold more unread bytes in their
    /// windows.
    pub fn download_lanes(self, default: usize) -> usize {
        let per = self.bytes_per_second().div_ceil(BYTES_PER_CAPPED_LANE);
        default.min(usize::try_from(per).unwrap_or(usize::MAX).max(2))
    }

    /// The receive window of each connection and stream under this cap: [`WINDOW_MS`] of the
    /// rate, at least [`MIN_WINDOW`]. A lane paced by the cap has up to this many bytes that
    /// arrived but were not read yet.
    pub fn window(self) -> u64 {
        (u128::from(self.bytes_per_second()) * u128::from(WINDOW_MS) / 1000)
            .try_into()
            .unwrap_or(u64::MAX)
            .max(MIN_WINDOW)
    }

    /// The receive buffer of each of `connections` TCP connections sharing this cap: the
    /// [`window`](Self::window) for one or two, and for more, their share of two windows (at
    /// least [`MIN_WINDOW`]). What lanes hold unread stays near a quarter second of the cap
    /// however many there are (four full windows held half a second, and the link swung
    /// by a quarter around the cap as lanes paused and resumed), while each still reaches
    /// its share of the cap at round trips up to twice [`WINDOW_MS`].
    pub fn connection_window(self, connections: usize) -> u64 {
        let window = self.window();
        let share = u64::try_from(connections.max(1)).unwrap_or(u64::MAX);
        (2 * window / share).clamp(MIN_WINDOW.min(window), window)
    }

    /// The bytes let through at once: [`BURST_MS`] of the rate, at least [`MIN_BURST`].
    pub fn burst(self) -> u64 {
        (self.bytes_per_second() / (1000 / BURST_MS)).max(MIN_BURST)
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.bytes_per_second();
        let bits = b as f64 * 8.0;
        let (v, unit) = if bits >= 1e9 {
            (bits / 1e9, "Gbit/s")
        } else if bits >= 1e6 {
            (bits / 1e6, "Mbit/s")
        } else {
            (bits / 1e3, "kbit/s")
        };
        write!(f, "{b} B/s ({v:.4} {unit})")
    }
}

/// A rate that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rate {input:?}: {reason}")]
pub struct RateParseError {
    pub input: String,
    pub reason: String,
}

/// Read a rate. Bytes per second in the size grammar ([`crate::size`]): a bare number is
/// bytes per second, as curl's `--limit-rate` takes it; `25MB`, `20MiB`, `512kB` with an
/// optional `/s`. Bits per second with an explicit bit unit, decimal as links are quoted:
/// `200Mbit`, `200Mbit/s`, `200Mbps`, `1Gbit`. The one-letter shorthands `K`, `M`, `G`, `T`
/// and a lowercase `b` (`200M`, `200Mb`) are refused: curl and rclone read `200M` as bytes,
/// a link's figure as bits, and a factor of eight is too much to guess.
pub fn parse_rate_limit(input: &str) -> Result<RateLimit, RateParseError> {
    let err = |reason: String| RateParseError {
        input: input.to_string(),
        reason,
    };
    let (num, unit) = split_quantity(input).ok_or_else(|| err("expected a number".into()))?;
    let unit = unit.trim();
    let lower = unit.to_ascii_lowercase();
    let bits_unit = ["bit/s", "bit", "bps"]
        .iter()
        .find_map(|s| lower.strip_suffix(s));
    let bytes_per_second = if let Some(prefix) = bits_unit {
        let bits = match prefix {
            "" => 1u64,
            "k" => 1_000,
            "m" => 1_000_000,
            "g" => 1_000_000_000,
            "t" => 1_000_000_000_000,
            _ => {
                return Err(err(format!(
                "unknown bit unit {unit:?} (use bit, kbit, Mbit, Gbit, Tbit, optionally with /s)"
            )))
            }
        };
        // The size grammar reads the number (fractions included); the prefix's decimal
        // factor is applied after, then bits become bytes.
        let n = parse_size(&format!("{num}kB")).map_err(|e| err(e.reason.to_string()))?;
        u128::from(n) * u128::from(bits) / 1000 / 8
    } else {
        let unit = unit.strip_suffix("/s").unwrap_or(unit).trim();
        if matches!(unit, "k" | "K" | "m" | "M" | "g" | "G" | "t" | "T") {
            let binary = unit.to_ascii_uppercase();
            let decimal = binary.replace('K', "k");
            return Err(err(format!(
                "ambiguous unit {unit:?}: write {num}{binary}iB or {num}{decimal}B for bytes per second, or {num}{decimal}bit for bits per second"
            )));
        }
        if unit.ends_with('b') {
            return Err(err(format!(
                "ambiguous unit {unit:?}: write B for bytes (MB, MiB) or bit for bits (Mbit)"
            )));
        }
        u128::from(parse_size(&format!("{num}{unit}")).map_err(|e| err(e.reason.to_string()))?)
    };
    let bytes_per_second = u64::try_from(bytes_per_second).map_err(|_| err("too large".into()))?;
    let bytes_per_second = NonZeroU64::new(bytes_per_second).ok_or_else(|| {
        err("less than one byte per second; leave the flag out for no limit".into())
    })?;
    Ok(RateLimit { bytes_per_second })
}

/// The pacer, without a clock: see the module header.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    limit: RateLimit,
    origin: Instant,
    /// The theoretical arrival time of the next byte, in nanoseconds since `origin` times the
    /// rate in bytes per second: a charge of `n` bytes adds exactly `n * 10^9`, so no rounding
    /// accumulates over a long transfer.
    tat: u128,
    /// The burst in the same unit.
    burst: u128,
}

impl TokenBucket {
    /// A full bucket: the first [`RateLimit::burst`] bytes go at once.
    pub fn new(limit: RateLimit, now: Instant) -> Self {
        Self {
            limit,
            origin: now,
            tat: 0,
            burst: u128::from(limit.burst()) * NANOS,
        }
    }

    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    fn scaled(&self, t: Instant) -> u128 {
        t.saturating_duration_since(self.origin).as_nanos()
            * u128::from(self.limit.bytes_per_second())
    }

    /// `bytes` went through at `now`: the instant the caller may move its next bytes, or `None`
    /// when it may go on at once.
    pub fn handle_bytes(&mut self, now: Instant, bytes: u64) -> Option<Instant> {
        let now_scaled = self.scaled(now);
        // Idle time refills the bucket up to the burst, no further.
        self.tat = self.tat.max(now_scaled) + u128::from(bytes) * NANOS;
        let free_at = self.tat.saturating_sub(self.burst);
        if free_at <= now_scaled {
            return None;
        }
        let rate = u128::from(self.limit.bytes_per_second());
        let nanos = free_at.div_ceil(rate);
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
        Some(self.origin + Duration::from_nanos(nanos))
    }
}

/// One bucket shared by every lane of a command (and every file of a tree). Clones share it.
#[derive(Clone)]
pub struct RateLimiter {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimiter {
    pub fn new(limit: RateLimit) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(TokenBucket::new(limit, Instant::now()))),
        }
    }

    pub fn limit(&self) -> RateLimit {
        self.lock().limit()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TokenBucket> {
        // The bucket holds plain numbers that a panicking holder cannot leave half-updated.
        self.bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Charge `bytes` that just went through, and wait for this caller's turn: a timer, not
    /// a polling loop. Cancel-safe: dropping the future leaves the charge in place.
    pub async fn pace(&self, bytes: u64) {
        let until = self.lock().handle_bytes(Instant::now(), bytes);
        if let Some(until) = until {
            tokio::time::sleep_until(until.into()).await;
        }
    }

    /// The same charge, for a caller that polls (a request body): the instant to wait for.
    pub fn charge(&self, bytes: u64) -> Option<Instant> {
        self.lock().handle_bytes(Instant::now(), bytes)
    }
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RateLimiter").field(&self.limit()).finish()
    }
}

/// Two limiters are equal when they share a bucket.
impl PartialEq for RateLimiter {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.bucket, &other.bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(n: u64) -> RateLimit {
        RateLimit::from_bytes_per_second(NonZeroU64::new(n).expect("nonzero rate"))
    }

    #[test]
    fn the_window_holds_an_eighth_of_a_second_of_the_cap() {
        assert_eq!(rate(25_000_000).window(), 3_125_000);
        assert_eq!(rate(1_000_000).window(), MIN_WINDOW);
        assert_eq!(rate(u64::MAX).window(), u64::MAX / 8);
    }

    #[test]
    fn parses_bytes_and_bits() {
        let ok = |s: &str| parse_rate_limit(s).map(RateLimit::bytes_per_second);
        assert_eq!(ok("1000"), Ok(1000));
        assert_eq!(ok("25MB"), Ok(25_000_000));
        assert_eq!(ok("25MB/s"), Ok(25_000_000));
        assert_eq!(ok("20MiB"), Ok(20 << 20));
        assert_eq!(ok("512kB/s"), Ok(512_000));
        assert_eq!(ok("200Mbit"), Ok(25_000_000));
        assert_eq!(ok("200Mbit/s"), Ok(25_000_000));
        assert_eq!(ok("200mbit/s"), Ok(25_000_000));
        assert_eq!(ok("200Mbps"), Ok(25_000_000));
        assert_eq!(ok("1.5Gbit"), Ok(187_500_000));
        assert_eq!(ok("8bit"), Ok(1));
        assert_eq!(ok("800kbit"), Ok(100_000));
    }

    #[test]
    fn refuses_ambiguous_and_bad_rates() {
        for bad in [
            "200M",
            "200m",
            "1G",
            "64K",
            "200M/s",
            "200Mb",
            "200mb",
            "200b",
            "0",
            "0Mbit",
            "4bit",
            "",
            "fast",
            "-1MB",
            "1e9",
            "10Xbit",
            "1.2.3MB",
            "99999999999999999999",
        ] {
            assert!(parse_rate_limit(bad).is_err(), "{bad:?} accepted");
        }
        let e = parse_rate_limit("200M").expect_err("ambiguous");
        assert!(e.to_string().contains("200M"), "{e}");
        assert!(
            e.to_string().contains("MiB") && e.to_string().contains("Mbit"),
            "{e}"
        );
    }

    #[test]
    fn display_gives_bytes_and_bits() {
        assert_eq!(
            rate(25_000_000).to_string(),
            "25000000 B/s (200.0000 Mbit/s)"
        );
    }

    #[test]
    fn burst_goes_at_once_then_the_rate() {
        let t0 = Instant::now();
        let limit = rate(1_000_000); // 1 MB/s: burst 50 kB.
        assert_eq!(limit.burst(), 50_000);
        let mut b = TokenBucket::new(limit, t0);
        // The burst passes without a wait, exactly.
        assert_eq!(b.handle_bytes(t0, 50_000), None);
        // One byte more is due one microsecond later.
        assert_eq!(b.handle_bytes(t0, 1), Some(t0 + Duration::from_micros(1)));
        // 10 kB more: 10 ms of the rate after the byte.
        assert_eq!(
            b.handle_bytes(t0, 10_000),
            Some(t0 + Duration::from_micros(10_001))
        );
    }

    #[test]
    fn idle_time_refills_no_more_than_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(rate(1_000_000), t0);
        let later = t0 + Duration::from_secs(60);
        assert_eq!(b.handle_bytes(later, 50_000), None);
        assert_eq!(
            b.handle_bytes(later, 1_000),
            Some(later + Duration::from_millis(1))
        );
    }

    #[test]
    fn a_cap_takes_fewer_lanes() {
        assert_eq!(rate(25_000_000).download_lanes(8), 2);
        assert_eq!(rate(250_000_000).download_lanes(8), 3);
        assert_eq!(rate(10_000_000_000).download_lanes(8), 8);
        assert_eq!(rate(1).download_lanes(1), 1);
    }

    #[test]
    fn many_connections_share_two_windows() {
        let limit = rate(25_000_000); // 200 Mbit/s: a window of 3,125,000 bytes.
        assert_eq!(limit.connection_window(1), 3_125_000);
        assert_eq!(limit.connection_window(2), 3_125_000);
        assert_eq!(limit.connection_window(4), 1_562_500);
        assert_eq!(limit.connection_window(0), 3_125_000);
        // Never below the smallest window, however many.
        assert_eq!(limit.connection_window(1000), MIN_WINDOW);
        // A cap so low its window is the smallest one stays there.
        assert_eq!(rate(1000).connection_window(8), MIN_WINDOW);
    }

    #[test]
    fn low_rates_keep_a_read_as_burst() {
        assert_eq!(rate(1000).burst(), MIN_BURST);
    }

    /// Lanes that read a piece, charge it and wait for their turn, driven by a virtual clock.
    /// Returns the bytes each lane moved by `end`, and the total moved in each whole second.
    fn simulate(limit: RateLimit, pieces: &[u64], end: Duration) -> (Vec<u64>, Vec<u64>) {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(limit, t0);
        // (when the lane may read, when it queued): ties go to the lane that queued first,
        // as a fair executor runs tasks woken at the same instant.
        let mut next: Vec<(Instant, u64)> = (0..pieces.len() as u64).map(|i| (t0, i)).collect();
        let mut seq = pieces.len() as u64;
        let mut moved = vec![0u64; pieces.len()];
        let mut per_second = vec![0u64; end.as_secs() as usize];
        loop {
            // The lane whose wait ends first reads next.
            let (lane, &(at, _)) = next
                .iter()
                .enumerate()
                .min_by_key(|(_, k)| **k)
                .expect("lanes");
            if at >= t0 + end {
                break;
            }
            moved[lane] += pieces[lane];
            per_second[at.duration_since(t0).as_secs() as usize] += pieces[lane];
            next[lane] = (b.handle_bytes(at, pieces[lane]).unwrap_or(at), seq);
            seq += 1;
        }
        (moved, per_second)
    }

    #[test]
    fn long_run_rate_is_exact_within_burst_and_a_piece() {
        let limit = rate(25_000_000);
        let (moved, per_second) = simulate(limit, &[65_536; 8], Duration::from_secs(10));
        let total: u64 = moved.iter().sum();
        let cap = 25_000_000 * 10 + limit.burst() + 8 * 65_536;
        assert!(total <= cap, "{total} > {cap}");
        // The lanes never wait longer than their turn: the cap is reached, not undershot.
        assert!(total >= 25_000_000 * 10 - 8 * 65_536, "{total}");
        // Every second after the first holds the rate within one piece per lane.
        for (s, &n) in per_second.iter().enumerate().skip(1) {
            assert!(n.abs_diff(25_000_000) <= 8 * 65_536, "second {s}: {n}");
        }
        assert!(per_second[0] <= 25_000_000 + limit.burst() + 8 * 65_536);
    }

    #[test]
    fn lanes_share_fairly() {
        let limit = rate(10_000_000);
        // Equal pieces: equal shares, within one piece.
        let (moved, _) = simulate(limit, &[16_384; 16], Duration::from_secs(5));
        let (lo, hi) = (moved.iter().min(), moved.iter().max());
        assert!(
            hi.zip(lo).is_some_and(|(h, l)| h - l <= 16_384),
            "{moved:?}"
        );
        // A lane of small pieces beside lanes of big ones still moves: each charge waits its
        // turn, so no lane is starved, and bytes are shared by turns taken.
        let (moved, _) = simulate(limit, &[1_024, 1 << 20, 1 << 20], Duration::from_secs(5));
        assert!(moved[0] > 0, "{moved:?}");
        let total: u64 = moved.iter().sum();
        assert!(
            total <= 50_000_000 + limit.burst() + 3 * (1 << 20),
            "{total}"
        );
    }
}
