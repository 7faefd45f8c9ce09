//! Saved path state, keyed by peer address: bounded, expiring, optionally kept in a file
//! across restarts. The file is read as hostile input: every line is checked and a bad line
//! is skipped with a warning, never trusted.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use xfer_common::path_share::PathShare;

use super::phase::RTT_FLOOR;
use super::SavedPath;

/// Largest path cache file read, bytes (about 100,000 entries).
const MAX_FILE_BYTES: u64 = 8 << 20;
/// Largest saved window accepted from the file, bytes (far above any real path's BDP).
pub(crate) const MAX_SAVED_CWND: u64 = 4 << 30;
/// Longest saved RTT accepted from the file.
const MAX_SAVED_RTT: Duration = Duration::from_secs(60);
const FILE_HEADER: &str = "# xfer path cache v1: address cwnd_bytes min_rtt_us saved_unix_s";
/// A connection shares its client's path while it is younger than this or was last
/// acknowledged within it. One whose client vanished without closing it (killed, or its
/// goodbye lost) stays open until the idle timeout, sending nothing that is acknowledged:
/// counted, it would shrink the next connection's jump for all that time.
pub(crate) const LIVE: Duration = Duration::from_secs(2);

/// When one open connection was opened and last had data acknowledged: whether it still
/// shares its client's path. Its congestion controller reports the acknowledgements.
#[derive(Debug)]
pub(crate) struct Liveness {
    opened: Instant,
    /// Nanoseconds from `opened` to the latest acknowledgement; 0 before any.
    acked_ns: AtomicU64,
}

impl Liveness {
    fn new(opened: Instant) -> Self {
        Self {
            opened,
            acked_ns: AtomicU64::new(0),
        }
    }

    pub fn acked(&self, now: Instant) {
        let ns = now.saturating_duration_since(self.opened).as_nanos();
        self.acked_ns
            .fetch_max(u64::try_from(ns).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn live(&self, now: Instant) -> bool {
        let last = self.opened + Duration::from_nanos(self.acked_ns.load(Ordering::Relaxed));
        now.saturating_duration_since(last) < LIVE
    }
}

/// Which saved state a peer gets: its IPv4 address, or the /64 of an IPv6 address (a host's
/// temporary addresses change within its /64; the path does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathKey(IpAddr);

impl PathKey {
    pub fn of(addr: SocketAddr) -> Self {
        match addr.ip() {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Self(IpAddr::V6(Ipv6Addr::from(prefix)))
                }
            },
            v4 => Self(v4),
        }
    }
}

impl std::fmt::Display for PathKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What Careful Resume did, for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResumeStats {
    /// Connections that jumped.
    pub jumps: u64,
    /// Largest jump taken, bytes.
    pub largest_jump: u64,
    /// Jumps ended by a loss before they were validated.
    pub retreats: u64,
    /// Connections whose RTT did not match their saved state.
    pub rtt_mismatches: u64,
    /// Measurements saved.
    pub saves: u64,
}

/// Saved path state shared by the connections of one endpoint. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PathCache {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    entries: Mutex<HashMap<PathKey, SavedPath>>,
    /// Open connections per peer (from accept to close, draining excluded).
    active: Mutex<HashMap<PathKey, Vec<Arc<Liveness>>>>,
    capacity: usize,
    lifetime: Duration,
    jumps: AtomicU64,
    largest_jump: AtomicU64,
    retreats: AtomicU64,
    rtt_mismatches: AtomicU64,
    saves: AtomicU64,
}

impl PathCache {
    /// An empty cache holding at most `capacity` paths, each for `lifetime`.
    pub fn new(capacity: usize, lifetime: Duration) -> Self {
        Self {
            inner: Arc::new(Shared {
                entries: Mutex::new(HashMap::new()),
                active: Mutex::new(HashMap::new()),
                capacity: capacity.max(1),
                lifetime,
                jumps: AtomicU64::new(0),
                largest_jump: AtomicU64::new(0),
                retreats: AtomicU64::new(0),
                rtt_mismatches: AtomicU64::new(0),
                saves: AtomicU64::new(0),
            }),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<PathKey, SavedPath>> {
        // A panic while holding the lock leaves a map that is still valid.
        self.inner
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn fresh(&self, saved: &SavedPath, now: SystemTime) -> bool {
        match now.duration_since(saved.saved_at) {
            Ok(age) => age <= self.inner.lifetime,
            // Saved "in the future": the clock went back; trust it no more than its lifetime.
            Err(e) => e.duration() <= self.inner.lifetime,
        }
    }

    /// The state saved for `key`, unless it has expired.
    pub fn get(&self, key: PathKey, now: SystemTime) -> Option<SavedPath> {
        let mut entries = self.entries();
        let saved = *entries.get(&key)?;
        if self.fresh(&saved, now) {
            Some(saved)
        } else {
            entries.remove(&key);
            None
        }
    }

    /// Save `path` for `key`, evicting the oldest entry when full.
    /// Save the paths the process's other senders measure ([`PathShare`]: TCP resume's, when
    /// `xfer serve` runs both): the same path from the same host, so a client's first QUIC
    /// connection after an HTTP transfer starts from it rather than from slow start. It is
    /// validated like any saved state (RTT check, half of it at most, retreat on loss).
    pub fn learn_from(&self, share: &PathShare) {
        let cache = self.clone();
        share.subscribe(move |ip, m| {
            let key = PathKey::of(SocketAddr::new(ip, 0));
            let path = SavedPath {
                cwnd: m.bdp().min(MAX_SAVED_CWND),
                rtt: m.min_rtt.clamp(RTT_FLOOR, MAX_SAVED_RTT),
                saved_at: SystemTime::now(),
            };
            tracing::debug!(peer = %key, cwnd = path.cwnd, rtt = ?path.rtt, "careful resume: path saved from another protocol's measurement");
            cache.insert(key, path);
        });
    }

    pub fn insert(&self, key: PathKey, path: SavedPath) {
        let mut entries = self.entries();
        if entries.len() >= self.inner.capacity && !entries.contains_key(&key) {
            let oldest = entries
                .iter()
                .min_by_key(|(_, p)| p.saved_at)
                .map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                entries.remove(&oldest);
            }
        }
        entries.insert(key, path);
        drop(entries);
        self.inner.saves.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection to `key` as open until the guard is dropped (when the connection
    /// closes: a draining connection sends nothing and must not shrink the next one's jump).
    pub(crate) fn open(&self, key: PathKey) -> OpenConnection {
        self.open_at(key, Instant::now())
    }

    fn open_at(&self, key: PathKey, now: Instant) -> OpenConnection {
        let liveness = Arc::new(Liveness::new(now));
        self.active().entry(key).or_default().push(liveness.clone());
        OpenConnection {
            cache: self.clone(),
            key,
            liveness,
        }
    }

    fn active(&self) -> MutexGuard<'_, HashMap<PathKey, Vec<Arc<Liveness>>>> {
        self.inner.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn close(&self, key: PathKey, liveness: &Arc<Liveness>) {
        let mut active = self.active();
        if let Some(open) = active.get_mut(&key) {
            open.retain(|l| !Arc::ptr_eq(l, liveness));
            if open.is_empty() {
                active.remove(&key);
            }
        }
    }

    /// Connections to `key` that share its path now: open, and younger than 2 s (`LIVE`) or
    /// acknowledged within it. A connection whose client went away without closing it is
    /// open until the idle timeout, but not counted once it has been silent that long.
    pub fn open_count(&self, key: PathKey) -> u64 {
        self.open_count_at(key, Instant::now())
    }

    fn open_count_at(&self, key: PathKey, now: Instant) -> u64 {
        self.active()
            .get(&key)
            .map_or(0, |open| open.iter().filter(|l| l.live(now)).count() as u64)
    }

    pub fn len(&self) -> usize {
        self.entries().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn stats(&self) -> ResumeStats {
        let s = &self.inner;
        ResumeStats {
            jumps: s.jumps.load(Ordering::Relaxed),
            largest_jump: s.largest_jump.load(Ordering::Relaxed),
            retreats: s.retreats.load(Ordering::Relaxed),
            rtt_mismatches: s.rtt_mismatches.load(Ordering::Relaxed),
            saves: s.saves.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count_jump(&self, window: u64) {
        self.inner.jumps.fetch_add(1, Ordering::Relaxed);
        self.inner.largest_jump.fetch_max(window, Ordering::Relaxed);
    }

    pub(crate) fn count_retreat(&self) {
        self.inner.retreats.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_rtt_mismatch(&self) {
        self.inner.rtt_mismatches.fetch_add(1, Ordering::Relaxed);
    }

    /// Add the entries of `file` that are well formed and not expired; returns how many.
    /// A missing file is an empty cache. Bad lines are skipped with a warning.
    pub fn load(&self, file: &Path, now: SystemTime) -> io::Result<usize> {
        let meta = match std::fs::metadata(file) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        if meta.len() > MAX_FILE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} bytes, more than the {MAX_FILE_BYTES} a path cache may hold",
                    meta.len()
                ),
            ));
        }
        let text = std::fs::read(file)?;
        let text = String::from_utf8_lossy(&text);
        let mut loaded = 0;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match parse_line(line) {
                Ok((key, saved)) if self.fresh(&saved, now) => {
                    self.insert(key, saved);
                    loaded += 1;
                }
                Ok(_) => {}
                Err(why) => tracing::warn!(
                    file = %file.display(),
                    line = n + 1,
                    why,
                    "path cache: line skipped"
                ),
            }
        }
        Ok(loaded)
    }

    /// Write the unexpired entries to `file` (through a temporary file and a rename, so a
    /// crash leaves the old file or the new one).
    pub fn save(&self, file: &Path, now: SystemTime) -> io::Result<usize> {
        let mut text = String::from(FILE_HEADER);
        text.push('\n');
        let mut written = 0;
        for (key, p) in self.entries().iter() {
            if !self.fresh(p, now) {
                continue;
            }
            let unix = p
                .saved_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            let _ = writeln!(text, "{key} {} {} {unix}", p.cwnd, p.rtt.as_micros());
            written += 1;
        }
        let mut tmp = file.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, file)?;
        Ok(written)
    }
}

/// One open connection, counted until dropped.
pub(crate) struct OpenConnection {
    cache: PathCache,
    key: PathKey,
    liveness: Arc<Liveness>,
}

impl OpenConnection {
    /// What the connection's congestion controller tells of its acknowledgements.
    pub fn liveness(&self) -> Arc<Liveness> {
        self.liveness.clone()
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.cache.close(self.key, &self.liveness);
    }
}

fn parse_line(line: &str) -> Result<(PathKey, SavedPath), &'static str> {
    let mut fields = line.split_ascii_whitespace();
    let mut next = |what| fields.next().ok_or(what);
    let ip: IpAddr = next("no address")?.parse().map_err(|_| "bad address")?;
    let cwnd: u64 = next("no window")?.parse().map_err(|_| "bad window")?;
    let rtt_us: u64 = next("no rtt")?.parse().map_err(|_| "bad rtt")?;
    let unix: u64 = next("no time")?.parse().map_err(|_| "bad time")?;
    if fields.next().is_some() {
        return Err("extra fields");
    }
    if cwnd == 0 || cwnd > MAX_SAVED_CWND {
        return Err("window out of range");
    }
    let rtt = Duration::from_micros(rtt_us);
    if rtt.is_zero() || rtt > MAX_SAVED_RTT {
        return Err("rtt out of range");
    }
    let saved_at = SystemTime::UNIX_EPOCH
        .checked_add(Duration::from_secs(unix))
        .ok_or("time out of range")?;
    let key = PathKey::of(SocketAddr::new(ip, 0));
    Ok((
        key,
        SavedPath {
            cwnd,
            rtt,
            saved_at,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn path(cwnd: u64, at: SystemTime) -> SavedPath {
        SavedPath {
            cwnd,
            rtt: Duration::from_millis(200),
            saved_at: at,
        }
    }

    fn key(s: &str) -> PathKey {
        PathKey::of(s.parse().expect("literal"))
    }

    #[test]
    fn entries_expire_after_their_lifetime() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let cache = PathCache::new(8, HOUR);
        cache.insert(key("10.0.0.1:1"), path(1_000_000, t0));
        assert_eq!(
            cache.get(key("10.0.0.1:2"), t0 + HOUR),
            Some(path(1_000_000, t0))
        );
        assert_eq!(
            cache.get(key("10.0.0.1:2"), t0 + HOUR + Duration::from_secs(1)),
            None
        );
        assert!(cache.is_empty(), "an expired entry is dropped when seen");
    }

    #[test]
    fn the_cache_is_bounded_and_evicts_the_oldest() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let cache = PathCache::new(2, HOUR);
        cache.insert(key("10.0.0.1:1"), path(1, t0));
        cache.insert(key("10.0.0.2:1"), path(2, t0 + Duration::from_secs(1)));
        cache.insert(key("10.0.0.3:1"), path(3, t0 + Duration::from_secs(2)));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(key("10.0.0.1:1"), t0), None);
        assert!(cache.get(key("10.0.0.3:1"), t0).is_some());
    }

    #[test]
    fn a_silent_connection_stops_sharing_the_path() {
        let cache = PathCache::new(8, HOUR);
        let t0 = Instant::now();
        let peer = key("10.0.0.1:9");
        let busy = cache.open_at(key("10.0.0.1:1"), t0);
        let gone = cache.open_at(key("10.0.0.1:2"), t0);
        // Both count while young, before any acknowledgement.
        assert_eq!(cache.open_count_at(peer, t0 + LIVE / 2), 2);
        gone.liveness().acked(t0 + Duration::from_millis(500));
        busy.liveness().acked(t0 + Duration::from_secs(4));
        // The one whose client vanished half a second in, not the one still acknowledged.
        assert_eq!(cache.open_count_at(peer, t0 + Duration::from_secs(5)), 1);
        assert_eq!(cache.open_count_at(peer, t0 + Duration::from_secs(7)), 0);
        // An acknowledgement reported late never moves the latest one back.
        busy.liveness().acked(t0 + Duration::from_secs(1));
        assert_eq!(cache.open_count_at(peer, t0 + Duration::from_secs(5)), 1);
        drop(gone);
        drop(busy);
        assert!(cache.active().is_empty());
    }

    #[test]
    fn open_connections_are_counted_until_closed() {
        let cache = PathCache::new(8, HOUR);
        let a = cache.open(key("10.0.0.1:1"));
        let b = cache.open(key("10.0.0.1:2"));
        let _other = cache.open(key("10.0.0.2:1"));
        assert_eq!(cache.open_count(key("10.0.0.1:9")), 2);
        drop(a);
        assert_eq!(cache.open_count(key("10.0.0.1:9")), 1);
        drop(b);
        assert_eq!(cache.open_count(key("10.0.0.1:9")), 0);
        assert_eq!(cache.open_count(key("10.0.0.2:9")), 1);
    }

    #[test]
    fn ipv6_peers_share_their_64_and_mapped_v4_is_v4() {
        assert_eq!(key("[2001:db8:1:2::5]:1"), key("[2001:db8:1:2:aaaa::9]:7"));
        assert_ne!(key("[2001:db8:1:2::5]:1"), key("[2001:db8:1:3::5]:1"));
        assert_eq!(key("[::ffff:10.0.0.1]:1"), key("10.0.0.1:9"));
    }

    #[test]
    fn the_file_round_trips_and_hostile_lines_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("paths");
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let cache = PathCache::new(8, HOUR);
        cache.insert(key("10.0.0.1:1"), path(25_000_000, now));
        assert_eq!(cache.save(&file, now).expect("save"), 1);
        let mut text = std::fs::read_to_string(&file).expect("read");
        text.push_str(concat!(
            "10.0.0.2 0 200000 2000000000\n",
            "10.0.0.3 99999999999999 200000 2000000000\n",
            "10.0.0.4 1000 0 2000000000\n",
            "not-an-ip 1000 1000 2000000000\n",
            "10.0.0.5 1000 1000 99999999999999999999\n",
            "10.0.0.6 1000 1000 2000000000 extra\n",
            "10.0.0.7 1000\n",
            "10.0.0.8 1000 1000 1\n",
            "\u{feff}\u{0} garbage\n",
        ));
        std::fs::write(&file, text).expect("write");
        let loaded = PathCache::new(8, HOUR);
        assert_eq!(
            loaded.load(&file, now).expect("load"),
            1,
            "only the good, fresh line"
        );
        let got = loaded.get(key("10.0.0.1:5"), now).expect("round-tripped");
        assert_eq!(got.cwnd, 25_000_000);
        assert_eq!(got.rtt, Duration::from_millis(200));
        assert_eq!(
            PathCache::new(8, HOUR)
                .load(&dir.path().join("absent"), now)
                .expect("a missing file is empty"),
            0
        );
    }

    #[test]
    fn an_oversized_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("big");
        let f = std::fs::File::create(&file).expect("create");
        f.set_len(MAX_FILE_BYTES + 1).expect("set_len");
        let err = PathCache::new(8, HOUR)
            .load(&file, SystemTime::now())
            .expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
