//! One file from several sources (mirrors, or the data-transfer nodes of one cluster).
//!
//! [`MultiSource`] is a [`Transport`] over several transports that hold the same file. The
//! download driver does not know: it owns one scheduler, its lanes pull chunks from it as
//! always, and each lane's connection goes to the source this module picks when the lane
//! opens. A faster source therefore takes more chunks on its own (its lanes come back for work
//! sooner), and its lane count is weighted by what it delivers:
//!
//! ```text
//!   stat ──► every source's size, validators, Repr-Digest ──► agree? ── no ─► dropped, warned
//!                                                              │ yes
//!   open_lane(i) ──► the source furthest below its share ──────┴─► its transport's lane
//!   before each request: a lane on a source above its share (or backing off) moves to one below
//!   end of each body ──► the source's per-lane goodput (EWMA); a failure ──► backoff, half weight
//! ```
//!
//! A source's share of the lanes is proportional to its per-lane goodput, halved per
//! consecutive failure; a source that fails is left alone for a backoff (250 ms doubling,
//! capped at 15 s) and one that answers a request permanently wrong (404, a changed file) is
//! dropped while others remain, its chunk retried elsewhere. Every usable source keeps at
//! least one lane, so a recovered source is measured again. The scheduler's end game, which
//! duplicates a slow lane's last chunk on an idle faster lane, then duplicates a slow
//! source's tail on another source.
//!
//! Agreement, before any source gets work: the size must be the same and ranges served;
//! whole-file SHA-256 digests (`Repr-Digest`, asked for with `Want-Repr-Digest` when the stat
//! had none) must be equal where both are known; a source with no digest to compare must share
//! the first source's strong ETag, or the caller must have given the expected SHA-256 (which
//! checks the whole file at the end). Each lane sends its own source's validator with its
//! ranges.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::digest::Sha256Digest;
use crate::error::TransferError;
use crate::progress::SourceReport;
use crate::transport::RoundTrips;
use crate::transport::{
    BoxFuture, ConnectionStats, FirstRequest, Lane, Opened, RangeBody, RangeRequest, RemoteInfo,
    Speculated, Transport,
};

/// Most sources one download uses; more (from the command line or `Link` headers) are ignored.
pub const MAX_SOURCES: usize = 16;
/// Most lanes the default gives a multi-source download.
const MAX_DEFAULT_LANES: usize = 64;
/// Weight of the newest request in a source's per-lane goodput.
const RATE_ALPHA: f64 = 0.3;
/// A lane moves only when its source is this many lanes above its share and another this
/// many below: enough to keep two nearly equal sources from trading lanes back and forth.
const MOVE_MARGIN: f64 = 0.75;
const BACKOFF_INITIAL: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(15);

/// One place the file can be fetched from.
#[derive(Clone)]
pub struct Source {
    /// The URL as given (or as found in a `Link: rel=duplicate` header).
    pub url: String,
    pub transport: Arc<dyn Transport>,
}

/// A transport that spreads lanes over several sources of the same file.
#[derive(Clone)]
pub struct MultiSource {
    pool: Arc<Mutex<Pool>>,
    expect_sha256: Option<Sha256Digest>,
    /// Builds a transport for a `Link: rel=duplicate` target; `None`: such links are ignored.
    discover: Option<Arc<TransportFactory>>,
}

/// Makes a transport for a URL (with the caller's client settings).
pub type TransportFactory = dyn Fn(&str) -> Result<Arc<dyn Transport>, TransferError> + Send + Sync;

struct Pool {
    sources: Vec<Src>,
    /// Lanes the download runs (the highest lane index opened, plus one).
    lanes: usize,
}

struct Src {
    url: String,
    transport: Arc<dyn Transport>,
    /// What its stat said, once admitted.
    info: Option<RemoteInfo>,
    /// Why it takes no work, when it does not.
    dropped: Option<String>,
    /// Which of its transport's lane indices are in use.
    slots: Vec<bool>,
    bytes: u64,
    busy: Duration,
    /// Bytes per second one lane gets from it (EWMA over requests).
    rate: Option<f64>,
    requests: u64,
    errors: u64,
    failures_in_a_row: u32,
    backoff_until: Option<Instant>,
    lanes_max: usize,
}

impl Src {
    fn lanes(&self) -> usize {
        self.slots.iter().filter(|&&s| s).count()
    }

    fn usable(&self) -> bool {
        self.info.is_some() && self.dropped.is_none()
    }

    fn backing_off(&self, now: Instant) -> bool {
        self.backoff_until.is_some_and(|t| t > now)
    }

    fn take_slot(&mut self) -> usize {
        let slot = match self.slots.iter().position(|s| !s) {
            Some(i) => i,
            None => {
                self.slots.push(false);
                self.slots.len() - 1
            }
        };
        self.slots[slot] = true;
        self.lanes_max = self.lanes_max.max(self.lanes());
        slot
    }
}

impl MultiSource {
    /// Sources beyond [`MAX_SOURCES`] and repeated URLs are left out. With `expect_sha256`, a
    /// source whose whole-file digest differs is refused, and one without a digest to compare
    /// is accepted (the whole file is checked against it at the end).
    pub fn new(sources: Vec<Source>, expect_sha256: Option<Sha256Digest>) -> Self {
        let mut seen = Vec::new();
        let mut srcs = Vec::new();
        for s in sources {
            if seen.contains(&s.url) {
                continue;
            }
            if srcs.len() == MAX_SOURCES {
                tracing::warn!(url = %s.url, max = MAX_SOURCES, "too many sources; ignoring the rest");
                break;
            }
            seen.push(s.url.clone());
            srcs.push(Src {
                url: s.url,
                transport: s.transport,
                info: None,
                dropped: None,
                slots: Vec::new(),
                bytes: 0,
                busy: Duration::ZERO,
                rate: None,
                requests: 0,
                errors: 0,
                failures_in_a_row: 0,
                backoff_until: None,
                lanes_max: 0,
            });
        }
        Self {
            pool: Arc::new(Mutex::new(Pool {
                sources: srcs,
                lanes: 0,
            })),
            expect_sha256,
            discover: None,
        }
    }

    /// Also use the duplicates the sources' answers name (`Link: <...>; rel=duplicate`, RFC
    /// 6249), made into transports by `factory`: only those [`duplicate_allowed`] accepts, up
    /// to [`MAX_SOURCES`] in all, found in the first answers only (a duplicate's own links are
    /// not followed). They must agree like any other source.
    pub fn discover_duplicates(mut self, factory: Arc<TransportFactory>) -> Self {
        self.discover = Some(factory);
        self
    }

    /// Add sources found later (a `Link: rel=duplicate` header), before `stat`.
    pub fn add(&self, source: Source) {
        let mut pool = self.lock();
        if pool.sources.iter().any(|s| s.url == source.url) {
            return;
        }
        if pool.sources.len() >= MAX_SOURCES {
            tracing::warn!(url = %source.url, max = MAX_SOURCES, "too many sources; ignoring it");
            return;
        }
        let single = MultiSource::new(vec![source], None);
        let src = single.lock().sources.pop();
        pool.sources.extend(src);
    }

    /// URLs of the sources that take work.
    pub fn usable_urls(&self) -> Vec<String> {
        self.lock()
            .sources
            .iter()
            .filter(|s| s.usable())
            .map(|s| s.url.clone())
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        // The pool holds counters only; a panic elsewhere leaves them usable.
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn stat_all(&self) -> Result<RemoteInfo, TransferError> {
        let mut sources = self.transports();
        let mut stats = stat_each(&sources).await;
        if let Some(factory) = &self.discover {
            let found = self.found_duplicates(&sources, &stats, factory.as_ref());
            if !found.is_empty() {
                stats.extend(stat_each(&found).await);
                sources.extend(found);
            }
        }
        // With several sources, one whose stat had no digest (a server that has not hashed
        // the file yet) is asked for it: without it nothing shows two hold the same bytes.
        if sources.len() > 1 {
            let mut asks = tokio::task::JoinSet::new();
            for (i, r) in stats.iter().enumerate() {
                if matches!(r, Some(Ok(info)) if info.sha256.is_none() && info.accepts_ranges) {
                    let t = Arc::clone(&sources[i].1);
                    asks.spawn(async move { (i, t.checksum(ChecksumAlgorithm::Sha256).await) });
                }
            }
            while let Some(Ok((i, asked))) = asks.join_next().await {
                if let (Some(Some(Ok(info))), Ok(Some(c))) = (stats.get_mut(i), asked) {
                    info.sha256 = Sha256Digest::from_hex(&c.to_hex()).ok();
                }
            }
        }
        let verdicts = agree(&stats, self.expect_sha256);
        // Every source declares a digest other than the expected one: a verification failure,
        // as one source's would be.
        let other_file = stats
            .iter()
            .map(|s| match s {
                Some(Ok(info)) => not_expected(info, self.expect_sha256),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .and_then(|errors| errors.into_iter().next());
        let mut pool = self.lock();
        let mut first_error = None;
        let mut reasons = Vec::new();
        for ((src, stat), verdict) in pool.sources.iter_mut().zip(stats).zip(&verdicts) {
            match (stat, verdict) {
                (Some(Ok(info)), Ok(())) => {
                    // A stat retried after a transient failure starts afresh.
                    src.info = Some(info);
                    src.dropped = None;
                }
                (stat, verdict) => {
                    let reason = match (&stat, verdict) {
                        (Some(Err(e)), _) => format!("cannot stat it: {e}"),
                        (_, Err(why)) => why.clone(),
                        _ => "its stat did not finish".to_string(),
                    };
                    if let Some(Err(e)) = stat {
                        first_error.get_or_insert(e);
                    }
                    src.info = None;
                    tracing::warn!(url = %src.url, %reason, "source dropped");
                    reasons.push(format!("{}: {reason}", src.url));
                    src.dropped = Some(reason);
                }
            }
        }
        let admitted: Vec<&RemoteInfo> = pool
            .sources
            .iter()
            .filter_map(|s| s.info.as_ref())
            .collect();
        let Some(first) = admitted.first() else {
            if let Some(e) = other_file {
                return Err(e);
            }
            return Err(match (first_error, pool.sources.len()) {
                (Some(e), 1) => e,
                _ => {
                    TransferError::Config(format!("no source can be used: {}", reasons.join("; ")))
                }
            });
        };
        let same = |f: fn(&RemoteInfo) -> Option<&String>| {
            let v = f(first);
            admitted
                .iter()
                .all(|i| f(i) == v)
                .then(|| v.cloned())
                .flatten()
        };
        // Only what a server declared: `expect_sha256` is checked as such at the end.
        let sha256 = admitted.iter().find_map(|i| i.sha256);
        // Validators every source shares, for the journal (which names the file by its digest
        // when there is one, so that it fits any list of sources); each lane sends its own
        // source's validator to the server.
        let info = RemoteInfo {
            url: first.url.clone(),
            size: first.size,
            etag: same(|i| i.etag.as_ref()),
            last_modified: same(|i| i.last_modified.as_ref()),
            accepts_ranges: first.accepts_ranges,
            sha256,
        };
        let (used, all) = (admitted.len(), pool.sources.len());
        tracing::info!(sources = used, dropped = all - used, "sources agree");
        Ok(info)
    }

    /// One source: its first range request is the stat, as for a plain download (no `HEAD`
    /// round trip before the data). `None` when its answer named mirrors (`Link:
    /// rel=duplicate`), which the general path states and weighs.
    async fn open_first_single(
        &self,
        index: usize,
        first: FirstRequest,
    ) -> Option<Result<Opened, TransferError>> {
        let (slot, transport, url) = {
            let mut pool = self.lock();
            pool.lanes = pool.lanes.max(index + 1);
            let src = pool.sources.first_mut()?;
            let slot = src.take_slot();
            (slot, Arc::clone(&src.transport), src.url.clone())
        };
        let release = |this: &Self| {
            if let Some(s) = this.lock().sources[0].slots.get_mut(slot) {
                *s = false;
            }
        };
        let opened = match transport.open_first(slot, first).await {
            Ok(o) => o,
            Err(e) => {
                release(self);
                return Some(Err(e));
            }
        };
        if self.discover.is_some() && !transport.duplicates().is_empty() {
            release(self);
            return None;
        }
        let stats = [Some(Ok(opened.info.clone()))];
        if let Some(Err(why)) = agree(&stats, self.expect_sha256).into_iter().next() {
            release(self);
            tracing::warn!(%url, reason = %why, "source dropped");
            self.lock().sources[0].dropped = Some(why.clone());
            // The one source holds another file than the one expected: a verification
            // failure, whether the server said so before the transfer or the bytes do after.
            if let Some(e) = not_expected(&opened.info, self.expect_sha256) {
                return Some(Err(e));
            }
            return Some(Err(TransferError::Config(format!(
                "no source can be used: {url}: {why}"
            ))));
        }
        {
            let mut pool = self.lock();
            pool.sources[0].info = Some(opened.info.clone());
            pool.sources[0].dropped = None;
        }
        let lane = MultiLane {
            multi: self.clone(),
            source: 0,
            slot,
            inner: opened.lane,
            validator: opened.info.range_validator().map(str::to_string),
            req: None,
            twin: false,
        };
        Some(Ok(Opened {
            info: opened.info,
            lane: Box::new(lane),
            first: opened.first,
        }))
    }

    fn transports(&self) -> Vec<(String, Arc<dyn Transport>)> {
        self.lock()
            .sources
            .iter()
            .map(|s| (s.url.clone(), Arc::clone(&s.transport)))
            .collect()
    }

    /// New sources from the `Link: rel=duplicate` headers of the sources that answered,
    /// added to the pool; what is refused is logged and left out.
    fn found_duplicates(
        &self,
        sources: &[(String, Arc<dyn Transport>)],
        stats: &[Option<Result<RemoteInfo, TransferError>>],
        factory: &TransportFactory,
    ) -> Vec<(String, Arc<dyn Transport>)> {
        let mut found = Vec::new();
        for ((origin, t), stat) in sources.iter().zip(stats) {
            if !matches!(stat, Some(Ok(_))) {
                continue;
            }
            for target in t.duplicates() {
                let url = match duplicate_allowed(origin, &target) {
                    Ok(url) => url,
                    Err(why) => {
                        tracing::warn!(%origin, %target, %why, "ignoring a Link rel=duplicate");
                        continue;
                    }
                };
                let known = sources.iter().chain(&found).any(|(u, _)| *u == url);
                if known {
                    continue;
                }
                if sources.len() + found.len() >= MAX_SOURCES {
                    tracing::warn!(%url, max = MAX_SOURCES, "too many sources; ignoring the duplicate");
                    continue;
                }
                match factory(&url) {
                    Ok(transport) => {
                        tracing::info!(%origin, %url, "source found in Link rel=duplicate");
                        found.push((url, transport));
                    }
                    Err(e) => tracing::warn!(%url, error = %e, "ignoring a Link rel=duplicate"),
                }
            }
        }
        for (url, transport) in &found {
            self.add(Source {
                url: url.clone(),
                transport: Arc::clone(transport),
            });
        }
        found
    }

    /// Open a lane on the source furthest below its share, falling back to the others when it
    /// cannot be reached.
    async fn open_best(
        &self,
        index: Option<usize>,
        avoid: Option<usize>,
    ) -> Result<MultiLane, TransferError> {
        let mut tried = Vec::new();
        let mut last_error = None;
        loop {
            let picked = {
                let mut pool = self.lock();
                if let Some(i) = index {
                    pool.lanes = pool.lanes.max(i + 1);
                }
                // One source not yet stated (the first request is learning it): its lanes
                // connect now, in parallel with that request.
                let only = match pool.sources.as_slice() {
                    [s] if s.info.is_none() && s.dropped.is_none() && tried.is_empty() => Some(0),
                    _ => None,
                };
                let Some(s) = only.or_else(|| pool.pick(&tried, avoid)) else {
                    break;
                };
                let slot = pool.sources[s].take_slot();
                (s, slot, Arc::clone(&pool.sources[s].transport))
            };
            let (s, slot, transport) = picked;
            tried.push(s);
            match transport.open_lane(slot).await {
                Ok(inner) => {
                    let info = self.lock().sources[s].info.clone();
                    return Ok(MultiLane {
                        multi: self.clone(),
                        source: s,
                        slot,
                        inner,
                        validator: info.and_then(|i| i.range_validator().map(str::to_string)),
                        req: None,
                        twin: false,
                    });
                }
                Err(e) => {
                    let mut pool = self.lock();
                    pool.sources[s].slots[slot] = false;
                    pool.failed(s, &e);
                    last_error = Some(e);
                }
            }
        }
        Err(last_error
            .unwrap_or_else(|| TransferError::Config("no source left to fetch from".into())))
    }
}

async fn stat_each(
    sources: &[(String, Arc<dyn Transport>)],
) -> Vec<Option<Result<RemoteInfo, TransferError>>> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (_, t)) in sources.iter().enumerate() {
        let t = Arc::clone(t);
        tasks.spawn(async move { (i, t.stat().await) });
    }
    let mut stats: Vec<Option<Result<RemoteInfo, TransferError>>> =
        (0..sources.len()).map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        if let Ok((i, r)) = joined {
            stats[i] = Some(r);
        }
    }
    stats
}

/// The error for a source that declares a whole-file SHA-256 other than the expected one.
fn not_expected(info: &RemoteInfo, expect: Option<Sha256Digest>) -> Option<TransferError> {
    match (expect, info.sha256) {
        (Some(expected), Some(declared)) if expected != declared => {
            Some(TransferError::NotExpectedDigest {
                url: info.url.clone(),
                declared,
                expected,
            })
        }
        _ => None,
    }
}

/// Per source (in the order given): admitted, or why not. The first source that answered is
/// the reference the others are compared with.
fn agree(
    stats: &[Option<Result<RemoteInfo, TransferError>>],
    expect: Option<Sha256Digest>,
) -> Vec<Result<(), String>> {
    let mut out: Vec<Result<(), String>> = Vec::with_capacity(stats.len());
    let mut reference: Option<&RemoteInfo> = None;
    for stat in stats {
        let Some(Ok(info)) = stat else {
            out.push(Err("no answer".into()));
            continue;
        };
        if let (Some(want), Some(has)) = (expect, info.sha256) {
            if want != has {
                out.push(Err(format!(
                    "its SHA-256 is {has}, not the expected {want}"
                )));
                continue;
            }
        }
        let Some(r) = reference else {
            reference = Some(info);
            out.push(Ok(()));
            continue;
        };
        out.push(disagreement(r, info, expect.is_some()).map_or(Ok(()), Err));
    }
    // Ranges are what several sources are for: without them only the reference is used.
    if reference.is_some_and(|r| !r.accepts_ranges) {
        let mut first = true;
        for v in out.iter_mut().filter(|v| v.is_ok()) {
            if !std::mem::take(&mut first) {
                *v = Err("the first source does not serve byte ranges".into());
            }
        }
    }
    out
}

/// Why `other` cannot be trusted to hold the file `reference` describes.
fn disagreement(reference: &RemoteInfo, other: &RemoteInfo, expected: bool) -> Option<String> {
    if other.size != reference.size {
        return Some(format!(
            "it has {} bytes where {} has {}",
            other.size, reference.url, reference.size
        ));
    }
    if !other.accepts_ranges {
        return Some("it does not serve byte ranges".into());
    }
    match (reference.sha256, other.sha256) {
        (Some(a), Some(b)) if a != b => Some(format!(
            "its SHA-256 is {b} where {} has {a}",
            reference.url
        )),
        (Some(_), Some(_)) => None,
        _ if reference.range_validator().is_some()
            && reference.range_validator() == other.range_validator() =>
        {
            None
        }
        _ if expected => None,
        _ => Some(format!(
            "nothing shows it holds the same file as {}: no whole-file digest to compare and a \
             different ETag (pass the expected SHA-256 to use it anyway)",
            reference.url
        )),
    }
}

impl Pool {
    /// Each usable source's share of the lanes.
    fn shares(&self, now: Instant) -> Vec<f64> {
        let known: Vec<f64> = self.sources.iter().filter_map(|s| s.rate).collect();
        let typical = if known.is_empty() {
            1.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        };
        let weights: Vec<f64> = self
            .sources
            .iter()
            .map(|s| {
                if !s.usable() || s.backing_off(now) {
                    return 0.0;
                }
                let w = s.rate.unwrap_or(typical).max(1.0);
                w * 0.5f64.powi(s.failures_in_a_row.min(16) as i32)
            })
            .collect();
        let total: f64 = weights.iter().sum();
        let lanes = self.lanes.max(1) as f64;
        weights
            .iter()
            .map(|&w| {
                if w == 0.0 || total == 0.0 {
                    0.0
                } else {
                    // Every usable source keeps a lane, so it is measured again.
                    (lanes * w / total).max(1.0)
                }
            })
            .collect()
    }

    /// The source to open a lane on: the one furthest below its share, not yet `tried`.
    fn pick(&self, tried: &[usize], avoid: Option<usize>) -> Option<usize> {
        let now = Instant::now();
        let shares = self.shares(now);
        let candidates = || {
            self.sources
                .iter()
                .enumerate()
                .filter(|(i, s)| s.usable() && !tried.contains(i) && Some(*i) != avoid)
        };
        let best = candidates()
            .filter(|(_, s)| !s.backing_off(now))
            .max_by(|(a, sa), (b, sb)| {
                let da = shares[*a] - sa.lanes() as f64;
                let db = shares[*b] - sb.lanes() as f64;
                da.total_cmp(&db).then(b.cmp(a))
            })
            .map(|(i, _)| i);
        // Every source backing off: the one free soonest, rather than no lane at all.
        best.or_else(|| {
            candidates()
                .min_by_key(|(_, s)| s.backoff_until)
                .map(|(i, _)| i)
        })
    }

    /// Whether a lane on `source` should move, and where.
    fn better_than(&self, source: usize) -> Option<usize> {
        let now = Instant::now();
        let shares = self.shares(now);
        let excess = self.sources[source].lanes() as f64 - shares[source];
        let leaving = !self.sources[source].usable() || self.sources[source].backing_off(now);
        if !leaving && excess < MOVE_MARGIN {
            return None;
        }
        let target = self.pick(&[source], None)?;
        let deficit = shares[target] - self.sources[target].lanes() as f64;
        (leaving || deficit >= MOVE_MARGIN).then_some(target)
    }

    fn failed(&mut self, source: usize, e: &TransferError) {
        let others = self
            .sources
            .iter()
            .enumerate()
            .any(|(i, s)| i != source && s.usable());
        let s = &mut self.sources[source];
        s.errors += 1;
        s.failures_in_a_row = s.failures_in_a_row.saturating_add(1);
        let wait = BACKOFF_INITIAL
            .saturating_mul(1 << (s.failures_in_a_row - 1).min(6))
            .min(BACKOFF_MAX);
        s.backoff_until = Some(Instant::now() + wait);
        if !e.is_retryable() && others && s.dropped.is_none() {
            tracing::warn!(url = %s.url, error = %e, "source dropped: the others carry on");
            s.dropped = Some(e.to_string());
        } else {
            tracing::warn!(url = %s.url, error = %e, ?wait, "source failed; backing off");
        }
    }

    fn delivered(&mut self, source: usize, bytes: u64, took: Duration) {
        let s = &mut self.sources[source];
        s.requests += 1;
        s.bytes += bytes;
        s.busy += took;
        s.failures_in_a_row = 0;
        s.backoff_until = None;
        if bytes > 0 && !took.is_zero() {
            let rate = bytes as f64 / took.as_secs_f64();
            s.rate = Some(match s.rate {
                Some(r) => r + RATE_ALPHA * (rate - r),
                None => rate,
            });
        }
    }
}

impl Transport for MultiSource {
    fn stat(&self) -> BoxFuture<'_, Result<RemoteInfo, TransferError>> {
        Box::pin(self.stat_all())
    }

    fn open_first(
        &self,
        index: usize,
        first: FirstRequest,
    ) -> BoxFuture<'_, Result<Opened, TransferError>> {
        Box::pin(async move {
            if self.lock().sources.len() == 1 {
                if let Some(opened) = self.open_first_single(index, first).await {
                    return opened;
                }
            }
            let info = self.stat_all().await?;
            let lane = self.open_best(Some(index), None).await?;
            Ok(Opened {
                info,
                lane: Box::new(lane),
                first: None,
            })
        })
    }

    fn open_lane(&self, index: usize) -> BoxFuture<'_, Result<Box<dyn Lane>, TransferError>> {
        Box::pin(async move {
            let lane = self.open_best(Some(index), None).await?;
            Ok(Box::new(lane) as Box<dyn Lane>)
        })
    }

    /// One source not yet stated asks speculatively as a plain download does; several wait
    /// for their stats, which decide which of them serve at all.
    fn open_speculative(
        &self,
        index: usize,
        range: std::ops::Range<u64>,
        want_digest: bool,
    ) -> BoxFuture<'_, Result<Speculated, TransferError>> {
        Box::pin(async move {
            let picked = {
                let mut pool = self.lock();
                pool.lanes = pool.lanes.max(index + 1);
                match pool.sources.as_mut_slice() {
                    [s] if s.info.is_none() && s.dropped.is_none() => {
                        Some((s.take_slot(), Arc::clone(&s.transport)))
                    }
                    _ => None,
                }
            };
            let Some((slot, transport)) = picked else {
                let mut lane = self.open_best(Some(index), None).await?;
                lane.connect().await?;
                return Ok(Speculated {
                    lane: Box::new(lane),
                    answer: None,
                });
            };
            let s = match transport.open_speculative(slot, range, want_digest).await {
                Ok(s) => s,
                Err(e) => {
                    let mut pool = self.lock();
                    pool.sources[0].slots[slot] = false;
                    pool.failed(0, &e);
                    return Err(e);
                }
            };
            // The validator is learned from the source's stat at the lane's first fetch.
            let lane = MultiLane {
                multi: self.clone(),
                source: 0,
                slot,
                inner: s.lane,
                validator: None,
                req: None,
                twin: false,
            };
            Ok(Speculated {
                lane: Box::new(lane),
                answer: s.answer,
            })
        })
    }

    fn connection_stats(&self) -> Vec<ConnectionStats> {
        let transports: Vec<Arc<dyn Transport>> = self
            .lock()
            .sources
            .iter()
            .map(|s| Arc::clone(&s.transport))
            .collect();
        if let [only] = transports.as_slice() {
            return only.connection_stats();
        }
        let mut out = Vec::new();
        for t in transports {
            for mut c in t.connection_stats() {
                c.index = out.len();
                out.push(c);
            }
        }
        out
    }

    /// One source's spread, as its own transport tells it; several sources each have their
    /// own connections, and no one spread describes them.
    fn spread_report(&self) -> Option<crate::progress::SpreadReport> {
        let s = self.lock();
        match s.sources.as_slice() {
            [only] => only.transport.spread_report(),
            _ => None,
        }
    }

    fn protocol(&self) -> String {
        let transports: Vec<Arc<dyn Transport>> = self
            .lock()
            .sources
            .iter()
            .filter(|s| s.usable())
            .map(|s| Arc::clone(&s.transport))
            .collect();
        let mut names: Vec<String> = transports.iter().map(|t| t.protocol()).collect();
        names.dedup();
        names.join("+")
    }

    /// The reference source's: the others agreed with it on the SHA-256, and a checksum of
    /// another algorithm is compared with the bytes received, whoever sent them.
    fn checksum(
        &self,
        algorithm: ChecksumAlgorithm,
    ) -> BoxFuture<'_, Result<Option<Checksum>, TransferError>> {
        let reference = {
            let pool = self.lock();
            pool.sources
                .iter()
                .find(|s| s.usable())
                .or(pool.sources.first())
                .map(|s| Arc::clone(&s.transport))
        };
        Box::pin(async move {
            match reference {
                Some(t) => t.checksum(algorithm).await,
                None => Err(TransferError::Config("no source to ask".into())),
            }
        })
    }

    fn request_ahead(&self) -> Option<bool> {
        let pool = self.lock();
        match pool.sources.as_slice() {
            [only] => only.transport.request_ahead(),
            // A lane may move to another source between requests: none is sent ahead.
            _ => None,
        }
    }

    fn default_lanes(&self) -> usize {
        let pool = self.lock();
        // Before any stat, every source not dropped counts: the lanes are opened (and
        // connect) while the first request learns the resource.
        let stated = pool.sources.iter().any(|s| s.info.is_some());
        let usable: Vec<&Src> = pool
            .sources
            .iter()
            .filter(|s| s.usable() || (!stated && s.dropped.is_none()))
            .collect();
        let per = usable
            .iter()
            .map(|s| s.transport.default_lanes())
            .max()
            .unwrap_or(1);
        (per * usable.len().max(1)).clamp(1, MAX_DEFAULT_LANES.max(per))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let mut closing = tokio::task::JoinSet::new();
            for (_, transport) in self.transports() {
                closing.spawn(async move { transport.close().await });
            }
            while closing.join_next().await.is_some() {}
        })
    }

    fn source_reports(&self) -> Vec<SourceReport> {
        let pool = self.lock();
        if pool.sources.len() < 2 {
            return Vec::new();
        }
        pool.sources
            .iter()
            .map(|s| SourceReport {
                url: s.url.clone(),
                bytes: s.bytes,
                goodput_bps: if s.busy.is_zero() {
                    0.0
                } else {
                    s.bytes as f64 * 8.0 / s.busy.as_secs_f64()
                },
                lanes: s.lanes(),
                lanes_max: s.lanes_max,
                requests: s.requests,
                errors: s.errors,
                dropped: s.dropped.clone(),
            })
            .collect()
    }
}

/// A lane bound to one source for as long as its source keeps its share.
struct MultiLane {
    multi: MultiSource,
    source: usize,
    slot: usize,
    inner: Box<dyn Lane>,
    /// The source's own validator for `If-Range`.
    validator: Option<String>,
    /// The request as this source gets it.
    req: Option<RangeRequest>,
    /// A second handle on another lane's connection ([`Lane::twin`]): it holds no slot of its
    /// own and never moves.
    twin: bool,
}

impl Drop for MultiLane {
    fn drop(&mut self) {
        if self.twin {
            return;
        }
        let mut pool = self.multi.lock();
        if let Some(s) = pool.sources[self.source].slots.get_mut(self.slot) {
            *s = false;
        }
    }
}

impl MultiLane {
    /// Move to a source that is below its share, when this one is above it or failing.
    async fn rebalance(&mut self) {
        if self.twin {
            return;
        }
        let target = self.multi.lock().better_than(self.source);
        if target.is_none() {
            return;
        }
        if let Ok(moved) = self.multi.open_best(None, Some(self.source)).await {
            tracing::debug!(
                from = self.source,
                to = moved.source,
                "lane moves to a source below its share"
            );
            // The old binding's slot is released when `moved`'s fields swap in.
            *self = moved;
        }
    }
}

impl Lane for MultiLane {
    fn fetch<'a>(
        &'a mut self,
        req: &'a RangeRequest,
    ) -> BoxFuture<'a, Result<Box<dyn RangeBody + 'a>, TransferError>> {
        Box::pin(async move {
            self.rebalance().await;
            let started = Instant::now();
            let MultiLane {
                multi,
                source,
                inner,
                validator,
                req: mine,
                ..
            } = self;
            let source = *source;
            // A lane opened before its source's stat (connecting while the first request
            // learned the resource) takes the validator the stat found.
            if validator.is_none() {
                *validator = multi.lock().sources[source]
                    .info
                    .as_ref()
                    .and_then(|i| i.range_validator().map(str::to_string));
            }
            let mine: &'a RangeRequest = mine.insert(RangeRequest {
                validator: validator.clone(),
                ..req.clone()
            });
            let single = multi.lock().sources.len() < 2;
            match inner.fetch(mine).await {
                // One source has no share to weigh: its body goes through untouched.
                Ok(body) if single => Ok(body),
                Ok(body) => Ok(Box::new(SourceBody {
                    multi: multi.clone(),
                    source,
                    inner: body,
                    bytes: 0,
                    started,
                }) as Box<dyn RangeBody + 'a>),
                Err(e) => Err(multi.failure(source, e)),
            }
        })
    }

    fn label(&self) -> String {
        let pool = self.multi.lock();
        match pool.sources.get(self.source) {
            Some(s) if pool.sources.len() > 1 => {
                format!("{} {}", host_of(&s.url), self.inner.label())
            }
            _ => self.inner.label(),
        }
    }

    fn connection(&self) -> usize {
        self.inner.connection()
    }

    fn connect(&mut self) -> BoxFuture<'_, Result<(), TransferError>> {
        self.inner.connect()
    }

    fn first_round_trips(&self) -> Option<RoundTrips> {
        self.inner.first_round_trips()
    }

    fn twin(&mut self) -> Option<Box<dyn Lane>> {
        // Lanes move between sources only when there are several, and then none asks ahead.
        if self.multi.lock().sources.len() > 1 {
            return None;
        }
        let inner = self.inner.twin()?;
        Some(Box::new(MultiLane {
            multi: self.multi.clone(),
            source: self.source,
            slot: self.slot,
            inner,
            validator: self.validator.clone(),
            req: None,
            twin: true,
        }))
    }
}

impl MultiSource {
    /// Record a source's failure; a permanent one is made retryable when other sources can
    /// take the chunk, since it says nothing about them.
    fn failure(&self, source: usize, e: TransferError) -> TransferError {
        let mut pool = self.lock();
        pool.failed(source, &e);
        // Only other sources can take the chunk: a lone source's permanent failure (the file
        // changed under it) ends the transfer at once, not after every retry's backoff.
        let others = pool
            .sources
            .iter()
            .enumerate()
            .any(|(i, s)| i != source && s.usable());
        if e.is_retryable() || !others {
            return e;
        }
        TransferError::Unexpected {
            peer: pool.sources[source].url.clone(),
            message: format!("source dropped: {e}"),
        }
    }
}

/// Counts what one source delivers.
struct SourceBody<'a> {
    multi: MultiSource,
    source: usize,
    inner: Box<dyn RangeBody + 'a>,
    bytes: u64,
    started: Instant,
}

impl RangeBody for SourceBody<'_> {
    fn next_data(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, TransferError>> {
        Box::pin(async move {
            match self.inner.next_data().await {
                Ok(Some(d)) => {
                    self.bytes += d.len() as u64;
                    Ok(Some(d))
                }
                Ok(None) => {
                    self.multi.lock().delivered(
                        self.source,
                        std::mem::take(&mut self.bytes),
                        self.started.elapsed(),
                    );
                    Ok(None)
                }
                Err(e) => {
                    let bytes = std::mem::take(&mut self.bytes);
                    self.multi.lock().sources[self.source].bytes += bytes;
                    Err(self.multi.failure(self.source, e))
                }
            }
        })
    }

    fn trailer_digest(&self) -> Option<Sha256Digest> {
        self.inner.trailer_digest()
    }
}

impl Drop for SourceBody<'_> {
    /// A cancelled body (the other copy of an end-game race won) still counts its bytes.
    fn drop(&mut self) {
        if self.bytes > 0 {
            let mut pool = self.multi.lock();
            let s = &mut pool.sources[self.source];
            s.bytes += self.bytes;
            s.busy += self.started.elapsed();
        }
    }
}

fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split(['/', '?', '#']).next().unwrap_or(rest)
}

/// Whether a `Link: rel=duplicate` target may be used for a resource fetched from `origin`,
/// and the URL it names: the target is a URI reference (RFC 8288), resolved against `origin`
/// by the `url` crate, and must come out an http(s) or quic URL with a host, without
/// credentials, of sane length, that does not step down from TLS to plain text. Every check
/// is made on the parsed URL, so the scheme and host judged are the ones that will be reached.
pub fn duplicate_allowed(origin: &str, candidate: &str) -> Result<String, String> {
    const MAX_URL: usize = 2048;
    if candidate.len() > MAX_URL {
        return Err(format!("longer than {MAX_URL} bytes"));
    }
    if candidate
        .chars()
        .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err("contains whitespace or control characters".into());
    }
    // `https:///x` would be read as host `x` by the WHATWG rules; an empty authority is no host.
    if candidate
        .split_once("://")
        .is_some_and(|(_, rest)| rest.starts_with('/'))
    {
        return Err("no host".into());
    }
    let base = url::Url::parse(origin).map_err(|e| format!("the origin is not a URL: {e}"))?;
    let target = base
        .join(candidate)
        .map_err(|e| format!("not a URL reference: {e}"))?;
    let (from, to) = (base.scheme(), target.scheme());
    if !matches!(to, "http" | "https" | "quic") {
        return Err(format!("scheme {to:?} is not one xfer fetches from"));
    }
    let secure = |s: &str| s == "https" || s == "quic";
    if secure(from) && !secure(to) {
        return Err("it would step down from TLS to plain text".into());
    }
    if from != to && !(secure(from) && secure(to)) {
        return Err(format!("{from}:// may only name {from}:// duplicates"));
    }
    if target.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if !target.username().is_empty() || target.password().is_some() {
        return Err("credentials in the URL".into());
    }
    Ok(target.into())
}

/// The targets of `Link: <...>; rel=duplicate` (RFC 6249) in `values` (each a `Link` header
/// field), unchecked (see [`duplicate_allowed`]), at most [`MAX_SOURCES`]; fields past 8 KiB in
/// all are not read.
pub fn link_duplicates<'a>(values: impl Iterator<Item = &'a str>) -> Vec<String> {
    const MAX_FIELD_BYTES: usize = 8 << 10;
    let mut out = Vec::new();
    let mut read = 0;
    for value in values {
        read += value.len();
        if read > MAX_FIELD_BYTES {
            break;
        }
        let mut rest = value;
        while let Some(open) = rest.find('<') {
            let Some(close) = rest[open..].find('>') else {
                break;
            };
            let target = &rest[open + 1..open + close];
            let after = &rest[open + close + 1..];
            // Parameters run to the next link (a `,` outside quotes) or the end.
            let mut quoted = false;
            let end = after
                .char_indices()
                .find(|&(_, c)| {
                    if c == '"' {
                        quoted = !quoted;
                    }
                    c == ',' && !quoted
                })
                .map_or(after.len(), |(i, _)| i);
            let duplicate = after[..end].split(';').any(|param| {
                let Some((name, value)) = param.split_once('=') else {
                    return false;
                };
                name.trim().eq_ignore_ascii_case("rel")
                    && value
                        .trim()
                        .trim_matches('"')
                        .split_ascii_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("duplicate"))
            });
            if duplicate && out.len() < MAX_SOURCES && !out.iter().any(|u| u == target) {
                out.push(target.to_string());
            }
            rest = &after[end..];
        }
    }
    out
}

#[cfg(test)]
#[path = "multi_tests.rs"]
mod tests;
