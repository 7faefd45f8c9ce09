//! Whole-resource SHA-256 values, computed in the background so servers can send `Repr-Digest`
//! once known without ever delaying a response for it; and the digests of ranges already sent
//! with a `Content-Digest` trailer ([`crate::range_digests`]).
//!
//! Keyed by [`ContentKey`] (canonical path, inode, size, mtime for files; size and seed for
//! synthetic data), so a file that is replaced or rewritten gets a new entry. A computation
//! over a file re-checks size and mtime on every block and discards its result if the file
//! changed meanwhile. At most one computation per key runs at once and at most
//! [`DigestCacheConfig::max_concurrent`] run in total; further requests wait in a short queue
//! or are dropped (the next `ensure` for that resource asks again).

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use xfer_core::digest::Sha256Hasher;
use xfer_core::Sha256Digest;

use crate::range_digests::RangeDigests;
use crate::resource::{ContentKey, Resource};

/// Knobs of a [`DigestCache`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestCacheConfig {
    /// Background hashing threads at once. Default 1: hashing a large file takes a core and
    /// the disk for seconds to minutes, and must not starve the transfers themselves.
    pub max_concurrent: usize,
    /// Resources waiting for a thread; beyond this `ensure` is a no-op. Default 64.
    pub max_queued: usize,
    /// Digests remembered; the oldest are forgotten first. Default 4096 (about 0.5 MB).
    pub max_entries: usize,
    /// Files larger than this (bytes) are not hashed. Default unlimited.
    pub max_file_size: u64,
    /// Synthetic resources larger than this (bytes) are not hashed. Default 1 GiB: synthetic
    /// data exists for throughput runs, where seconds of background hashing per GiB would
    /// compete with the transfer for a core (and 1 PiB would never finish). Clients still
    /// verify every chunk through `Content-Digest` trailers.
    pub max_synthetic_size: u64,
    /// Bytes read per step, default 1 MiB.
    pub block_size: usize,
    /// Digests of ranges sent with a `Content-Digest` trailer, remembered so the same range of
    /// the same content is not hashed again; the oldest are forgotten first. Default 16384
    /// (about 2.5 MB); 0 turns this off.
    pub max_range_entries: usize,
    /// Ranges shorter than this (bytes) are not remembered. Default 1 MiB: shorter ones cost
    /// little to hash and must not push chunk digests out.
    pub min_range_len: u64,
}

impl Default for DigestCacheConfig {
    fn default() -> Self {
        Self {
            max_concurrent: 1,
            max_queued: 64,
            max_entries: 4096,
            max_file_size: u64::MAX,
            max_synthetic_size: 1 << 30,
            block_size: 1 << 20,
            max_range_entries: 16384,
            min_range_len: 1 << 20,
        }
    }
}

/// Invalid [`DigestCacheConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid digest cache {field} = {value}: allowed {allowed}")]
pub struct DigestCacheConfigError {
    pub field: &'static str,
    pub value: String,
    pub allowed: &'static str,
}

impl DigestCacheConfig {
    pub fn validate(&self) -> Result<(), DigestCacheConfigError> {
        let err = |field, value: usize, allowed| DigestCacheConfigError {
            field,
            value: value.to_string(),
            allowed,
        };
        if !(1..=64).contains(&self.max_concurrent) {
            return Err(err("max_concurrent", self.max_concurrent, "1 to 64"));
        }
        if self.max_entries == 0 {
            return Err(err("max_entries", 0, "at least 1"));
        }
        if !(4096..=(64 << 20)).contains(&self.block_size) {
            return Err(err("block_size", self.block_size, "4 KiB to 64 MiB"));
        }
        Ok(())
    }
}

enum Entry {
    /// Running or queued.
    Pending,
    Done(Sha256Digest),
}

struct State {
    entries: HashMap<ContentKey, Entry>,
    /// Keys of `Done` entries, oldest first, for eviction.
    done_order: VecDeque<ContentKey>,
    queue: VecDeque<Resource>,
    running: usize,
}

struct Shared {
    config: DigestCacheConfig,
    state: Mutex<State>,
    cancelled: AtomicBool,
    ranges: RangeDigests,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in a hashing thread cannot leave the map half-updated in a way that matters;
        // keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sets `cancelled` when the last [`DigestCache`] handle goes, so hashing threads stop.
struct CancelOnDrop(Arc<Shared>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancelled.store(true, Ordering::Release);
    }
}

/// A shared, cloneable cache of whole-resource SHA-256 values.
#[derive(Clone)]
pub struct DigestCache {
    shared: Arc<Shared>,
    _guard: Arc<CancelOnDrop>,
}

impl Default for DigestCache {
    fn default() -> Self {
        Self::build(DigestCacheConfig::default())
    }
}

impl std::fmt::Debug for DigestCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("DigestCache")
            .field("entries", &st.entries.len())
            .field("running", &st.running)
            .field("queued", &st.queue.len())
            .finish()
    }
}

impl DigestCache {
    pub fn new(config: DigestCacheConfig) -> Result<Self, DigestCacheConfigError> {
        config.validate()?;
        Ok(Self::build(config))
    }

    fn build(config: DigestCacheConfig) -> Self {
        let shared = Arc::new(Shared {
            ranges: RangeDigests::new(config.max_range_entries, config.min_range_len),
            config,
            state: Mutex::new(State {
                entries: HashMap::new(),
                done_order: VecDeque::new(),
                queue: VecDeque::new(),
                running: 0,
            }),
            cancelled: AtomicBool::new(false),
        });
        Self {
            _guard: Arc::new(CancelOnDrop(shared.clone())),
            shared,
        }
    }

    /// The resource's SHA-256 if already computed, here or by the upload that stored the file
    /// ([`crate::stored_digest`]): a digest evicted from memory, or lost with a restart, is
    /// read back from the file's record instead of being computed again.
    pub fn get(&self, resource: &Resource) -> Option<Sha256Digest> {
        let key = resource.content_key();
        if let Some(d) = self.get_by_key(&key) {
            crate::metrics::global().count_digest_lookup(true);
            return Some(d);
        }
        let stored = resource.stored_sha256();
        crate::metrics::global().count_digest_lookup(stored.is_some());
        let stored = stored?;
        record(&mut self.shared.lock(), &self.shared.config, key, stored);
        Some(stored)
    }

    /// The SHA-256 of the content `key` names, if already computed; listings ask this way,
    /// from a `stat`, without opening the file.
    pub fn get_by_key(&self, key: &ContentKey) -> Option<Sha256Digest> {
        match self.shared.lock().entries.get(key) {
            Some(Entry::Done(d)) => Some(*d),
            _ => None,
        }
    }

    /// Record a digest learned elsewhere (e.g. computed while sending the whole resource).
    pub fn insert(&self, resource: &Resource, digest: Sha256Digest) {
        let mut st = self.shared.lock();
        record(&mut st, &self.shared.config, resource.content_key(), digest);
    }

    /// Start computing the resource's SHA-256 in the background unless known, running, queued
    /// or too large. Never blocks on hashing.
    pub fn ensure(&self, resource: &Resource) {
        let cfg = &self.shared.config;
        let limit = match resource.synthetic_spec() {
            Some(_) => cfg.max_synthetic_size,
            None => cfg.max_file_size,
        };
        if resource.size() > limit {
            return;
        }
        let key = resource.content_key();
        let mut st = self.shared.lock();
        if st.entries.contains_key(&key) {
            return;
        }
        if st.running < cfg.max_concurrent {
            st.entries.insert(key.clone(), Entry::Pending);
            st.running += 1;
            drop(st);
            if let Err(e) = spawn_worker(self.shared.clone(), resource.clone()) {
                tracing::warn!(error = %e, "cannot start a digest thread");
                let mut st = self.shared.lock();
                st.entries.remove(&key);
                st.running -= 1;
            }
        } else if st.queue.len() < cfg.max_queued {
            st.entries.insert(key, Entry::Pending);
            st.queue.push_back(resource.clone());
        }
    }

    /// The SHA-256 of `range` of the resource, when a body sent earlier computed it.
    pub fn get_range(&self, resource: &Resource, range: &Range<u64>) -> Option<Sha256Digest> {
        self.shared.ranges.get(resource, range)
    }

    /// Remember the SHA-256 of `range`, computed over the bytes just sent, unless the file
    /// changed since it was opened.
    pub fn insert_range(&self, resource: &Resource, range: &Range<u64>, digest: Sha256Digest) {
        self.shared.ranges.insert(resource, range, digest);
    }

    /// Drop every digest of the file at `canonical` (whole-file and ranges), once the name no
    /// longer holds that content (a deletion, a rename away). The keys carry the inode and
    /// the times, so nothing stale could be served; this frees the entries and keeps a reused
    /// inode number from ever meeting an old digest. A computation still running keeps its
    /// `Pending` entry and discards its result when it finds the file gone.
    pub fn forget_path(&self, canonical: &std::path::Path) {
        let of_path =
            |k: &ContentKey| matches!(k, ContentKey::File { path, .. } if path == canonical);
        {
            let mut st = self.shared.lock();
            st.entries
                .retain(|k, e| !(of_path(k) && matches!(e, Entry::Done(_))));
            st.done_order.retain(|k| !of_path(k));
        }
        self.shared.ranges.forget(of_path);
    }

    /// Whether nothing is running or queued (for tests and orderly shutdown).
    pub fn is_idle(&self) -> bool {
        let st = self.shared.lock();
        st.running == 0 && st.queue.is_empty()
    }
}

fn record(st: &mut State, cfg: &DigestCacheConfig, key: ContentKey, digest: Sha256Digest) {
    if let Some(Entry::Done(_)) = st.entries.insert(key.clone(), Entry::Done(digest)) {
        return;
    }
    st.done_order.push_back(key);
    while st.done_order.len() > cfg.max_entries {
        if let Some(old) = st.done_order.pop_front() {
            st.entries.remove(&old);
        }
    }
}

/// Nice value of the digest threads. A digest serves later requests (`Repr-Digest`), never
/// the one that asked for it, so on a busy host the hashing waits for the transfers: nice 10
/// gets a tenth of the CPU of a default-priority thread it competes with, and all of an idle
/// core.
#[cfg(target_os = "linux")]
const DIGEST_NICE: i32 = 10;

/// Lower the calling thread's priority to [`DIGEST_NICE`]. On Linux the nice value belongs to
/// the thread, so the server's other threads keep theirs.
fn yield_to_transfers() {
    #[cfg(target_os = "linux")]
    {
        if let Err(error) = crate::sys::set_thread_nice(DIGEST_NICE) {
            tracing::debug!(%error, "digest thread keeps its priority");
        }
    }
}

fn spawn_worker(shared: Arc<Shared>, first: Resource) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("xfer-digest".into())
        .spawn(move || {
            yield_to_transfers();
            let mut next = Some(first);
            while let Some(resource) = next.take() {
                let key = resource.content_key();
                let result = compute(&shared, &resource);
                let mut st = shared.lock();
                match result {
                    Ok(digest) => {
                        tracing::debug!(resource = %resource.describe(), %digest, "digest computed");
                        record(&mut st, &shared.config, key, digest);
                    }
                    Err(e) => {
                        tracing::debug!(resource = %resource.describe(), error = %e, "digest discarded");
                        st.entries.remove(&key);
                    }
                }
                if shared.cancelled.load(Ordering::Acquire) {
                    st.queue.clear();
                }
                next = st.queue.pop_front();
                if next.is_none() {
                    st.running -= 1;
                }
            }
        })
        .map(|_| ())
}

fn compute(shared: &Shared, resource: &Resource) -> std::io::Result<Sha256Digest> {
    let mut hasher = Sha256Hasher::new();
    let mut buf = vec![0u8; shared.config.block_size];
    let mut offset = 0u64;
    while offset < resource.size() {
        if shared.cancelled.load(Ordering::Acquire) {
            return Err(std::io::Error::other("digest cache dropped"));
        }
        // `read_at` re-checks size and mtime after each read, so a change mid-way fails here.
        let n = resource.read_at(offset, &mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "resource ended early",
            ));
        }
        hasher.update(&buf[..n]);
        offset += n as u64;
    }
    resource.check_still_same()?;
    Ok(hasher.finish())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::synthetic::SyntheticSpec;

    fn wait_idle(cache: &DigestCache) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cache.is_idle() {
            assert!(Instant::now() < deadline, "digest never finished");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The nice value of this process's `xfer-digest` thread, if one runs.
    #[cfg(target_os = "linux")]
    fn digest_thread_nice() -> Option<i32> {
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let path = task.path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            if comm.trim() != "xfer-digest" {
                continue;
            }
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            // Fields after the parenthesised name start at field 3; the nice value is 19th.
            return stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(16)?
                .parse()
                .ok();
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_digest_thread_yields_to_transfers() {
        let cache = DigestCache::new(DigestCacheConfig {
            max_synthetic_size: 1 << 40,
            ..DigestCacheConfig::default()
        })
        .expect("config");
        // Long enough to be caught running; dropping the cache stops it.
        cache.ensure(&Resource::synthetic(SyntheticSpec {
            size: 1 << 40,
            seed: 9,
        }));
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = None;
        while seen != Some(DIGEST_NICE) && Instant::now() < deadline {
            seen = digest_thread_nice().or(seen);
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(cache);
        assert_eq!(seen, Some(DIGEST_NICE));
    }

    #[test]
    fn computes_file_and_synthetic_digests() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(dir.path().join("f"), &data).expect("write");
        let file = Resource::open(dir.path(), "/f", None).expect("open");
        let spec = SyntheticSpec {
            size: 1_000_003,
            seed: 5,
        };
        let syn = Resource::synthetic(spec);
        let cache = DigestCache::default();
        assert_eq!(cache.get(&file), None);
        cache.ensure(&file);
        cache.ensure(&file);
        cache.ensure(&syn);
        wait_idle(&cache);
        assert_eq!(cache.get(&file), Some(Sha256Digest::of(&data)));
        let mut whole = vec![0u8; 1_000_003];
        spec.fill(0, &mut whole);
        assert_eq!(cache.get(&syn), Some(Sha256Digest::of(&whole)));
    }

    #[test]
    fn a_rewritten_file_gets_a_new_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f"), b"one").expect("write");
        let a = Resource::open(dir.path(), "/f", None).expect("open");
        let cache = DigestCache::default();
        cache.ensure(&a);
        wait_idle(&cache);
        assert_eq!(cache.get(&a), Some(Sha256Digest::of(b"one")));
        std::fs::write(dir.path().join("f"), b"twotwo").expect("write");
        let b = Resource::open(dir.path(), "/f", None).expect("open");
        assert_eq!(cache.get(&b), None);
    }

    #[test]
    fn a_file_changed_while_hashing_is_discarded() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f"), vec![1u8; 8192]).expect("write");
        let r = Resource::open(dir.path(), "/f", None).expect("open");
        std::fs::write(dir.path().join("f"), vec![2u8; 100]).expect("write");
        let cache = DigestCache::default();
        cache.ensure(&r);
        wait_idle(&cache);
        assert_eq!(cache.get(&r), None);
    }

    #[test]
    fn a_digest_stored_with_the_file_outlives_eviction_until_the_file_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"stored").expect("write");
        let digest = Sha256Digest::of(b"stored");
        let f = std::fs::File::open(&path).expect("open");
        crate::stored_digest::keep(&f, digest, &path);
        if crate::stored_digest::read(&f).is_none() {
            eprintln!(
                "skipping: no user extended attributes under {}",
                dir.path().display()
            );
            return;
        }
        let cache = DigestCache::new(DigestCacheConfig {
            max_entries: 1,
            ..DigestCacheConfig::default()
        })
        .expect("config");
        let r = Resource::open(dir.path(), "/f", None).expect("open");
        assert_eq!(cache.get(&r), Some(digest));
        // Evicted by another entry: read back from the file, nothing hashed.
        cache.insert(
            &Resource::synthetic(SyntheticSpec { size: 1, seed: 1 }),
            Sha256Digest::of(b"x"),
        );
        assert_eq!(cache.get_by_key(&r.content_key()), None);
        assert_eq!(cache.get(&r), Some(digest));
        assert!(cache.is_idle());

        // Rewritten behind the server's back, same size, another mtime.
        std::fs::write(&path, b"STORED").expect("rewrite");
        std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open")
            .set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
            .expect("mtime");
        let changed = Resource::open(dir.path(), "/f", None).expect("open");
        assert_eq!(cache.get(&changed), None);
    }

    #[test]
    fn too_large_is_skipped_and_config_is_checked() {
        let cache = DigestCache::new(DigestCacheConfig {
            max_synthetic_size: 10,
            ..DigestCacheConfig::default()
        })
        .expect("config");
        let r = Resource::synthetic(SyntheticSpec { size: 11, seed: 0 });
        cache.ensure(&r);
        assert!(cache.is_idle());
        assert_eq!(cache.get(&r), None);
        let bad = DigestCache::new(DigestCacheConfig {
            max_concurrent: 0,
            ..DigestCacheConfig::default()
        });
        assert!(bad.is_err_and(|e| e.field == "max_concurrent"));
    }

    #[test]
    fn bounded_concurrency_still_finishes_the_queue() {
        let cache = DigestCache::default();
        let rs: Vec<Resource> = (0..10)
            .map(|seed| Resource::synthetic(SyntheticSpec { size: 5000, seed }))
            .collect();
        for r in &rs {
            cache.ensure(r);
        }
        wait_idle(&cache);
        for r in &rs {
            assert!(cache.get(r).is_some());
        }
    }
}
