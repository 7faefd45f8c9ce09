//! The tree driver: one task that owns the queue of files, the lane budget and the tree
//! journal, and reacts to three kinds of event — a listing entry, a file's download ending,
//! the listing ending — plus shutdown. Nothing polls: each `select!` arm is a channel or a
//! task join.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use xfer_common::listing::{CaseFold, ListingEntry, RelPath};
use xfer_core::adapt::AdaptConfig;
use xfer_core::checksum::{Checksum, ChecksumAlgorithm, Checksummer};
use xfer_core::error::error_chain;
use xfer_core::get::GetError;
use xfer_core::kept::Budget;
use xfer_core::lane_sampler::{Counters, LaneSampler};
use xfer_core::nofollow;
use xfer_core::progress::Report;
use xfer_core::transport::{RemoteInfo, Transport};
use xfer_core::Sha256Digest;

use super::lane_map::LaneMap;
use super::lister::{self, url_of, ListError, Listed, ListingFormat};
use super::staging::{self, STAGING_DIR};
use super::{
    file_download, prune, Compare, DestRoot, FailedFile, FailureKind, FileJob, FileRecord,
    LocalCheck, PathFilter, PlanEntry, TreeConfig, TreeError, TreeJournal, TreeProgress,
    TreeReport,
};

/// Entries buffered between the listing and the driver.
const ENTRY_CHANNEL: usize = 256;
/// Files waiting for a lane; beyond this the listing pauses, so memory stays bounded
/// whatever the size of the tree.
const QUEUE_LIMIT: usize = 4096;

pub(super) struct Setup {
    pub transport: Arc<dyn Transport>,
    pub root_url: String,
    pub root: DestRoot,
    pub journal: TreeJournal,
    pub filter: PathFilter,
    pub case_insensitive: bool,
    pub config: TreeConfig,
    pub progress: TreeProgress,
}

struct Running {
    job: FileJob,
    lanes: Vec<usize>,
}

/// How a file's task ended well.
enum FileOutcome {
    /// Fetched; `not_compared` when `--compare checksum` found no digest to compare with.
    Fetched {
        report: Box<Report>,
        not_compared: bool,
    },
    /// The local copy already is the server's, for this reason.
    AlreadyComplete(String),
    /// A dry run: it would be fetched, for this reason.
    WouldFetch(String),
}

/// What a file's check decided.
enum Decision {
    Skip(String),
    Fetch(String),
    /// `--compare checksum` with no digest to compare: fetched, and said so.
    NotCompared(String),
}

type Finished = (u64, Result<FileOutcome, GetError>);

struct Driver {
    s: Setup,
    /// The listing's format, once the lister has chosen it.
    format: Arc<OnceLock<ListingFormat>>,
    queue: VecDeque<FileJob>,
    running: HashMap<u64, Running>,
    tasks: JoinSet<Finished>,
    free_lanes: BTreeSet<usize>,
    fold: CaseFold,
    stop: CancellationToken,
    report: TreeReport,
    next_id: u64,
    interrupted: bool,
    /// Listed directories and their modification times, set once their files are written.
    dir_times: Vec<(RelPath, SystemTime)>,
    /// Whether the lane budget has been fitted to the protocol the server speaks.
    budget_fitted: bool,
    /// Lanes in the budget: `lanes`, or `http1_lanes` over HTTP/1.1, or what the lane
    /// controller decided. Lanes numbered at or above it that files still hold leave the
    /// pool when released.
    budget: usize,
    /// The lane controller, once the budget it starts from is known.
    sampler: Option<LaneSampler>,
    started: Instant,
    /// Memory for whole-file hashes, shared by the files in flight (`get.hash_memory` for
    /// them all, not for each).
    hash_budget: Budget,
    /// Every path listed so far, by [`Seen::key`]: a name listed twice is one entry when
    /// the two agree and refused when they differ, never two downloads into one file.
    listed: HashMap<[u8; 16], Seen>,
    /// The listing ended whole: no cap, no failed directory, no error. `--delete` needs it.
    listing_complete: bool,
}

/// What the listing said of a path, reduced to a fingerprint (16 bytes a path, whatever
/// the length of its name, for trees of millions of files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Directory,
    File([u8; 16]),
}

impl Seen {
    fn of(e: &ListingEntry) -> Self {
        if e.is_dir() {
            return Self::Directory;
        }
        let described = format!(
            "{:?}|{:?}|{:?}|{:?}",
            e.size,
            e.modified,
            e.etag,
            e.sha256.map(|d| d.to_hex())
        );
        Self::File(truncated(Sha256Digest::of(described.as_bytes())))
    }

    fn key(path: &RelPath) -> [u8; 16] {
        truncated(Sha256Digest::of(path.as_str().as_bytes()))
    }
}

fn truncated(d: Sha256Digest) -> [u8; 16] {
    let mut out = [0; 16];
    out.copy_from_slice(&d.0[..16]);
    out
}

pub(super) async fn run(
    setup: Setup,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<TreeReport, TreeError> {
    let started = Instant::now();
    let (tx, mut entries) = mpsc::channel(ENTRY_CHANNEL);
    let format = Arc::new(OnceLock::new());
    let setup_lanes = setup.config.lanes;
    let mut lister = tokio::spawn(lister::list_tree(
        Arc::clone(&setup.transport),
        setup.root_url.clone(),
        setup.config.listing.clone(),
        Arc::clone(&format),
        tx,
    ));
    let hash_budget = Budget::new(setup.config.get.hash_memory);
    let mut d = Driver {
        hash_budget,
        report: TreeReport {
            url: setup.root_url.clone(),
            dest: setup.root.path().display().to_string(),
            ..TreeReport::default()
        },
        free_lanes: (0..setup.config.lanes).collect(),
        s: setup,
        format,
        queue: VecDeque::new(),
        running: HashMap::new(),
        tasks: JoinSet::new(),
        fold: CaseFold::new(),
        stop: CancellationToken::new(),
        next_id: 0,
        interrupted: false,
        dir_times: Vec::new(),
        budget_fitted: false,
        budget: setup_lanes,
        sampler: None,
        started,
        listed: HashMap::new(),
        listing_complete: false,
    };
    d.report.compare = d.s.config.compare;
    d.report.dry_run = d.s.config.dry_run;
    let (mut listing_open, mut lister_done) = (true, false);
    tokio::pin!(shutdown);
    loop {
        d.launch();
        if !listing_open && lister_done && d.queue.is_empty() && d.running.is_empty() {
            break;
        }
        tokio::select! {
            // Ctrl-C first: no new file starts once it is seen.
            biased;
            _ = &mut shutdown, if !d.interrupted => {
                tracing::info!("interrupted: stopping every file");
                d.interrupted = true;
                d.stop.cancel();
                d.queue.clear();
                // The listing's reader sees the closed channel and stops.
                entries.close();
            }
            Some(joined) = d.tasks.join_next(), if !d.tasks.is_empty() => match joined {
                Ok((id, result)) => d.handle_finished(id, result),
                Err(e) => d.handle_panic(&e),
            },
            entry = entries.recv(), if listing_open && d.queue.len() < QUEUE_LIMIT => match entry {
                Some(e) => d.handle_entry(e),
                None => listing_open = false,
            },
            listed = &mut lister, if !lister_done => {
                lister_done = true;
                d.handle_listing_end(listed);
            }
            _ = sample_due(d.sampler.as_ref().map(LaneSampler::next_sample)) => {
                d.adapt_budget(listing_open || !lister_done);
            }
        }
    }
    d.report.adaptive_lanes = d.sampler.as_ref().map(|s| s.report(d.budget));
    d.s.progress.update(|c| c.listing_done = true);
    if !d.interrupted && !d.s.config.dry_run {
        d.set_dir_times();
        if d.report.failed.is_empty() {
            d.remove_staging_leftovers();
        }
    }
    if !d.interrupted && d.s.config.delete {
        d.delete_unlisted();
    }
    let r = &mut d.report;
    r.protocol = d.s.transport.protocol();
    r.seconds = started.elapsed().as_secs_f64();
    r.goodput_bps = if r.seconds > 0.0 {
        r.bytes as f64 * 8.0 / r.seconds
    } else {
        0.0
    };
    if d.interrupted {
        return Err(TreeError::Interrupted {
            report: Box::new(d.report),
        });
    }
    Ok(d.report)
}

impl Driver {
    fn handle_entry(&mut self, e: ListingEntry) {
        let path = e.path.as_str().to_string();
        if self.s.filter.excluded(&path, e.is_dir())
            || (!e.is_dir() && !self.s.filter.keeps_file(&path))
        {
            return;
        }
        if staging::is_reserved(&e.path) {
            let error = format!(
                "{STAGING_DIR} is where xfer stages a tree's files; a listed name there is refused (--exclude '{STAGING_DIR}' skips it)"
            );
            self.fail(path, FailureKind::Local, error, !e.is_dir());
            return;
        }
        let listed = Seen::of(&e);
        match self.listed.insert(Seen::key(&e.path), listed) {
            None => {}
            Some(before) if before == listed => {
                tracing::debug!(file = %path, "listed twice alike: one entry");
                return;
            }
            Some(_) => {
                let error = "listed twice, and the two entries differ (kind, size, time, ETag or digest): which one is meant is unknown".to_string();
                self.fail(path, FailureKind::Remote, error, !e.is_dir());
                return;
            }
        }
        if self.s.case_insensitive {
            if let Err(other) = self.fold.insert(&e.path) {
                let error = format!(
                    "differs from {other} only by case: one file on this case-insensitive destination"
                );
                self.fail(path, FailureKind::Local, error, !e.is_dir());
                return;
            }
        }
        if e.is_dir() && self.s.config.dry_run {
            self.report.directories += 1;
            return;
        }
        if e.is_dir() {
            match self.s.root.create_dir(&e.path) {
                Ok(_) => {
                    self.report.directories += 1;
                    if let Some(t) = e.modified {
                        self.dir_times.push((e.path, t));
                    }
                }
                Err(err) => self.fail(path, FailureKind::Local, err.to_string(), false),
            }
            return;
        }
        self.report.files += 1;
        let size = e.size.unwrap_or(0);
        self.s.progress.update(|c| {
            c.files_total += 1;
            c.bytes_total += size;
        });
        let check = match self.local_state(&e) {
            LocalState::Complete(reason) => {
                self.report.skipped += 1;
                self.s.progress.update(|c| c.files_done += 1);
                self.plan("skip", &path, reason);
                return;
            }
            LocalState::Fetch(reason) if self.s.config.dry_run => {
                self.s.progress.update(|c| c.files_done += 1);
                self.plan("fetch", &path, reason);
                return;
            }
            LocalState::Fetch(_) => None,
            LocalState::Check(check) => Some(check),
        };
        self.next_id += 1;
        self.queue.push_back(FileJob {
            id: self.next_id,
            path: e.path,
            size: e.size,
            modified: e.modified,
            etag: e.etag,
            sha256: e.sha256,
            attempts: 0,
            check,
        });
    }

    /// A dry run's plan entry; nothing in a real run.
    fn plan(&mut self, action: &'static str, path: &str, reason: impl Into<String>) {
        if self.s.config.dry_run {
            self.report.plan.push(PlanEntry {
                action,
                path: path.to_string(),
                reason: reason.into(),
            });
        }
    }

    /// Whether the local file already is the listed one, by `--compare`: its size; its size
    /// and mtime (xfer gives a fetched file the listed mtime), or when the listing has no mtime
    /// the size and ETag recorded when it was fetched; its checksum. What the listing does not
    /// say is left to the file's task, which asks the server (`LocalState::Check`).
    /// The local file is looked at from the destination's root without following a link
    /// (`DestRoot::stat_file`): a link in the way is fetched, and refused then.
    fn local_state(&self, e: &ListingEntry) -> LocalState {
        let Ok(Some(local)) = self.s.root.stat_file(&e.path) else {
            return LocalState::Fetch("not in the destination");
        };
        if e.size.is_some_and(|s| s != local.len) {
            return LocalState::Fetch("size differs from the listing");
        }
        let fetched_alike = || {
            self.s.journal.record(e.path.as_str()).is_some_and(|r| {
                r.size == local.len
                    && r.mtime_ns == local.mtime_ns
                    && r.etag.is_some()
                    && r.etag == e.etag
            })
        };
        let remote = LocalState::Check(LocalCheck::Remote { local });
        match self.s.config.compare {
            Compare::Checksum => LocalState::Check(LocalCheck::Checksum),
            Compare::Size if e.size.is_some() => LocalState::Complete("same size as listed"),
            Compare::Size | Compare::Mtime if fetched_alike() => {
                LocalState::Complete("same size and ETag as when it was fetched")
            }
            Compare::Size => remote,
            Compare::Mtime => match e.modified {
                Some(t) if local.mtime_ns.is_some() && local.mtime_ns == nanos(t) => {
                    LocalState::Complete("same size and modification time as listed")
                }
                Some(_) => LocalState::Fetch("modification time differs from the listing"),
                None => remote,
            },
        }
    }

    /// Shrink the budget to `http1_lanes` when the server speaks HTTP/1.1 (every lane a
    /// connection). Known once the listing's first response came, before any file starts.
    fn fit_budget(&mut self) {
        if self.budget_fitted || self.queue.is_empty() {
            return;
        }
        self.budget_fitted = true;
        let protocol = self.s.transport.protocol();
        if protocol.starts_with("http/1") && self.s.config.http1_lanes < self.s.config.lanes {
            let cap = self.s.config.http1_lanes;
            self.free_lanes.retain(|&l| l < cap);
            self.budget = cap;
            tracing::debug!(%protocol, lanes = cap, "HTTP/1.1: fewer lanes, one connection each");
        }
        if let Some(cfg) = &self.s.config.adapt {
            let cfg = AdaptConfig {
                initial_lanes: self.budget,
                ..cfg.clone()
            };
            let sampler = LaneSampler::new(cfg, None, self.started);
            let start = sampler.target();
            self.sampler = Some(sampler);
            self.set_budget(start);
        }
    }

    /// Feed the lane controller what the tree has received and apply its decisions to the
    /// budget. `listing`: the listing still streams, so what is left is unknown.
    fn adapt_budget(&mut self, listing: bool) {
        let snap = self.s.progress.snapshot();
        let in_use: usize = self.running.values().map(|r| r.lanes.len()).sum();
        let connections = self.s.transport.connection_stats();
        let counters = Counters {
            received: snap.received,
            remaining: if listing {
                u64::MAX
            } else {
                snap.bytes_total.saturating_sub(snap.bytes_done)
            },
            lanes: self.free_lanes.len() + in_use,
            connections: &connections,
        };
        let Some(sampler) = self.sampler.as_mut() else {
            return;
        };
        if sampler.handle_tick(Instant::now(), &counters).is_empty() {
            return;
        }
        let target = sampler.target();
        self.set_budget(target);
    }

    /// Grow the pool with lanes no file holds, or shrink it: free lanes above the budget go
    /// now, held ones when their file releases them.
    fn set_budget(&mut self, budget: usize) {
        if budget > self.budget {
            let held: BTreeSet<usize> = self
                .running
                .values()
                .flat_map(|r| r.lanes.iter().copied())
                .collect();
            self.free_lanes
                .extend((self.budget..budget).filter(|l| !held.contains(l)));
        } else {
            self.free_lanes.retain(|&l| l < budget);
        }
        self.budget = budget;
    }

    /// Start queued files, in order, while the file limit and the lane budget allow.
    fn launch(&mut self) {
        self.fit_budget();
        while let Some(job) = self.queue.front() {
            if self.interrupted || self.running.len() >= self.s.config.max_files {
                return;
            }
            // A dry run's task asks the server one question at most.
            let need = if self.s.config.dry_run {
                1
            } else {
                self.lanes_for(job.size)
            };
            if self.free_lanes.len() < need {
                return;
            }
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            let lanes: Vec<usize> = self.free_lanes.iter().copied().take(need).collect();
            for l in &lanes {
                self.free_lanes.remove(l);
            }
            self.start(job, lanes);
        }
    }

    /// A file no bigger than one chunk is one request; a bigger one gets one lane per chunk
    /// up to the per-file limit.
    fn lanes_for(&self, size: Option<u64>) -> usize {
        let cfg = &self.s.config;
        let per_file = cfg
            .get
            .lanes
            .unwrap_or_else(|| self.s.transport.default_lanes())
            .clamp(1, self.budget);
        match size {
            Some(s) => {
                let chunks = s.div_ceil(cfg.get.chunk_size.max(1)).max(1);
                usize::try_from(chunks).unwrap_or(usize::MAX).min(per_file)
            }
            None => per_file,
        }
    }

    fn start(&mut self, job: FileJob, lanes: Vec<usize>) {
        let path = job.path.as_str().to_string();
        let dry_run = self.s.config.dry_run;
        // A dry run creates nothing; the file was found through `stat_file`, without links.
        let prepared = if dry_run {
            Ok(self.s.root.path().join(job.path.as_str()))
        } else {
            self.s.root.prepare_file(&job.path)
        };
        let local = match prepared {
            Ok(p) => p,
            Err(e) => {
                self.release(&lanes);
                return self.fail(path, FailureKind::Local, e.to_string(), true);
            }
        };
        let url = url_of(&self.s.root_url, &job.path);
        let transport = match self.s.transport.sibling(&url) {
            Ok(t) => t,
            Err(e) => {
                self.release(&lanes);
                return self.fail(path, FailureKind::Remote, e.to_string(), true);
            }
        };
        let mapped: Arc<LaneMap> = Arc::new(LaneMap {
            inner: transport,
            lanes: lanes.clone(),
        });
        let mut download = file_download(
            mapped.clone(),
            &url,
            &local,
            self.s.root.staging().for_file(&job.path),
            self.s.config.get.clone(),
            lanes.len(),
            job.sha256,
        )
        .share_hash_budget(self.hash_budget.clone());
        let known = self.known_remote(&job, &url);
        let progress = download.progress();
        let (id, modified) = (job.id, job.modified);
        self.s.progress.update(|c| c.running.push((id, progress)));
        let stop = self.stop.clone();
        let (check, listed_sha256, compare) = (job.check, job.sha256, self.s.config.compare);
        tracing::debug!(file = %path, lanes = lanes.len(), "starting");
        self.tasks.spawn(async move {
            let mut info = known;
            if info.is_none() && matches!(check, Some(LocalCheck::Remote { .. })) {
                // A failure here is the download's to report, with its own retries.
                info = mapped.stat().await.ok();
            }
            let decision = match check {
                None => Decision::Fetch("not in the destination".into()),
                Some(LocalCheck::Remote { local }) => compare_remote(compare, local, info.as_ref()),
                Some(LocalCheck::Checksum) => {
                    compare_checksum(mapped.as_ref(), &local, listed_sha256, info.as_ref()).await
                }
            };
            let not_compared = match decision {
                Decision::Skip(why) => return (id, Ok(FileOutcome::AlreadyComplete(why))),
                Decision::Fetch(why) | Decision::NotCompared(why) if dry_run => {
                    return (id, Ok(FileOutcome::WouldFetch(why)))
                }
                Decision::Fetch(_) => false,
                Decision::NotCompared(why) => {
                    tracing::warn!(file = %local.display(), "{why}; fetching it");
                    true
                }
            };
            if let Some(i) = info {
                download = download.with_known_remote(i);
            }
            let mut result =
                download
                    .run_until(stop.cancelled_owned())
                    .await
                    .map(|r| FileOutcome::Fetched {
                        report: Box::new(r),
                        not_compared,
                    });
            // A listing without times (an HTML index that shows none): the file's first
            // answer said it, and the local copy gets it, so that a re-run can compare.
            let modified = modified.or_else(|| match &result {
                Ok(FileOutcome::Fetched { report, .. }) => {
                    httpdate::parse_http_date(report.last_modified.as_deref()?).ok()
                }
                _ => None,
            });
            if let (Ok(_), Some(t)) = (&result, modified) {
                if let Err(source) = set_mtime(&local, t) {
                    result = Err(GetError::Io {
                        what: "setting the modification time of",
                        path: local,
                        source,
                    });
                }
            }
            (id, result)
        });
        self.running.insert(job.id, Running { job, lanes });
    }

    /// What `stat` would say, when xfer's manifest already said it: a small file is then one
    /// request, not two round trips. Only xfer's server is known to honour ranges and send the
    /// strong ETag its manifest lists; a retried file asks again.
    fn known_remote(&self, job: &FileJob, url: &str) -> Option<RemoteInfo> {
        if self.format.get() != Some(&ListingFormat::XferManifest) || job.attempts > 0 {
            return None;
        }
        Some(RemoteInfo {
            url: url.to_string(),
            size: job.size?,
            etag: Some(job.etag.clone()?),
            last_modified: None,
            accepts_ranges: true,
            sha256: None,
        })
    }

    fn release(&mut self, lanes: &[usize]) {
        let budget = self.budget;
        self.free_lanes
            .extend(lanes.iter().copied().filter(|&l| l < budget));
    }

    fn handle_finished(&mut self, id: u64, result: Result<FileOutcome, GetError>) {
        let Some(Running { mut job, lanes }) = self.running.remove(&id) else {
            return;
        };
        self.release(&lanes);
        self.s
            .progress
            .update(|c| c.running.retain(|(i, _)| *i != id));
        let path = job.path.as_str().to_string();
        match result {
            Ok(FileOutcome::AlreadyComplete(why)) => {
                self.report.skipped += 1;
                self.s.progress.update(|c| c.files_done += 1);
                self.plan("skip", &path, why);
            }
            Ok(FileOutcome::WouldFetch(why)) => {
                self.s.progress.update(|c| c.files_done += 1);
                self.plan("fetch", &path, why);
            }
            Ok(FileOutcome::Fetched {
                report,
                not_compared,
            }) => {
                if not_compared {
                    self.report.not_compared.push(path.clone());
                }
                let new = report.size.saturating_sub(report.resumed_bytes);
                self.report.fetched += 1;
                self.report.bytes += new;
                self.report.resumed_bytes += report.resumed_bytes;
                self.report.received_bytes += report.received_bytes;
                self.s.progress.update(|c| {
                    c.files_done += 1;
                    c.bytes_done += new;
                    c.received_done += report.received_bytes;
                });
                let record = FileRecord {
                    path: path.clone(),
                    size: report.size,
                    mtime_ns: job.modified.and_then(nanos),
                    etag: job.etag.clone(),
                    sha256: report
                        .sha256
                        .as_deref()
                        .and_then(|h| Sha256Digest::from_hex(h).ok()),
                };
                if let Err(e) = self.s.journal.append(record) {
                    // The file is in place; a re-run checks it against the listing again.
                    tracing::warn!(error = %e, file = %path, "cannot record a finished file");
                }
                tracing::debug!(file = %path, "done");
            }
            Err(GetError::Interrupted) => {}
            Err(e) => {
                let kind = classify(&e);
                let error = error_chain(&e);
                job.attempts += 1;
                if kind == FailureKind::Remote
                    && job.attempts < self.s.config.file_attempts
                    && !self.interrupted
                {
                    tracing::warn!(file = %path, attempt = job.attempts, error = %error, "file failed; queued again");
                    self.queue.push_back(job);
                } else {
                    self.fail(path, kind, error, true);
                }
            }
        }
    }

    fn handle_panic(&mut self, e: &tokio::task::JoinError) {
        // The task's id is lost with its panic: count it failed, free nothing (its lanes
        // stay out of the budget, which only shrinks parallelism).
        tracing::error!(error = %e, "a file's task panicked");
        self.fail(
            String::new(),
            FailureKind::Local,
            format!("a file's task panicked: {e}"),
            true,
        );
    }

    fn handle_listing_end(
        &mut self,
        listed: Result<Result<Listed, ListError>, tokio::task::JoinError>,
    ) {
        match listed {
            Ok(Ok(listed)) => {
                self.report.listing = Some(listed.format);
                self.listing_complete = listed.failed_dirs.is_empty();
                // Named by the directory, as a file would be: what is below it was not listed.
                for (dir, e) in listed.failed_dirs {
                    self.fail(
                        dir.as_str().to_string(),
                        FailureKind::Remote,
                        error_chain(&e),
                        false,
                    );
                }
            }
            Ok(Err(_)) if self.interrupted => {}
            Ok(Err(e)) => {
                tracing::error!(error = %error_chain(&e), "listing failed");
                self.fail(String::new(), FailureKind::Remote, error_chain(&e), false);
            }
            Err(e) => self.fail(
                String::new(),
                FailureKind::Local,
                format!("the listing task failed: {e}"),
                false,
            ),
        }
    }

    /// Directories get the listed mtimes last: every file written into one (a rename into
    /// place) moves its mtime. Deepest first, though a child's times do not touch its parent's.
    fn set_dir_times(&mut self) {
        let mut dirs = std::mem::take(&mut self.dir_times);
        dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.segments().count()));
        for (path, t) in dirs {
            if let Err(e) = self.s.root.set_dir_mtime(&path, t) {
                self.fail(
                    path.as_str().to_string(),
                    FailureKind::Local,
                    e.to_string(),
                    false,
                );
            }
        }
    }

    /// `--delete`: remove what the listing no longer names, only after a listing that ended
    /// whole and a run in which nothing failed; otherwise say why nothing was removed.
    fn delete_unlisted(&mut self) {
        let why_not = if !self.listing_complete {
            Some("the listing did not complete (failed, capped or cut short)")
        } else if !self.report.failed.is_empty() {
            Some("some paths failed; a re-run that succeeds deletes")
        } else {
            None
        };
        if let Some(why) = why_not {
            tracing::warn!("--delete: nothing deleted: {why}");
            self.report.delete_skipped = Some(why.to_string());
            return;
        }
        let (listed, filter) = (&self.listed, &self.s.filter);
        let keep = |path: &str, is_dir: bool| -> bool {
            let Ok(rel) = RelPath::parse(path) else {
                return true;
            };
            // Paths the filters leave out are not the listing's to judge.
            let filtered_out =
                filter.excluded(path, is_dir) || (!is_dir && !filter.keeps_file(path));
            filtered_out
                || staging::is_reserved(&rel)
                || match listed.get(&Seen::key(&rel)) {
                    Some(Seen::Directory) => is_dir,
                    Some(Seen::File(_)) => !is_dir,
                    None => false,
                }
        };
        let dry_run = self.s.config.dry_run;
        let pruned = prune::prune(self.s.root.fd(), &keep, dry_run);
        for path in pruned.removed {
            if dry_run {
                self.plan("delete", &path, "no longer listed");
            } else {
                self.report.deleted.push(path);
            }
        }
        for (path, error) in pruned.errors {
            self.fail(
                path,
                FailureKind::Local,
                format!("--delete: {error}"),
                false,
            );
        }
    }

    /// Once every listed file is complete, part files and journals still staged belong to
    /// files the listing no longer names.
    fn remove_staging_leftovers(&self) {
        let staging = self.s.root.staging();
        match staging.remove_leftovers() {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(files = n, dir = %staging.path().display(), "removed staged files of files no longer listed")
            }
            Err(e) => {
                tracing::warn!(error = %e, dir = %staging.path().display(), "cannot clear the staging directory")
            }
        }
    }

    fn fail(&mut self, path: String, kind: FailureKind, error: String, is_file: bool) {
        tracing::warn!(file = %path, %error, "failed");
        if is_file {
            self.s.progress.update(|c| {
                c.files_done += 1;
                c.files_failed += 1;
            });
        }
        self.report.failed.push(FailedFile { path, kind, error });
    }
}

/// What the destination holds for a listed file.
enum LocalState {
    Complete(&'static str),
    Fetch(&'static str),
    Check(LocalCheck),
}

/// `--compare size|mtime` against the server's answer to a `HEAD`, for a listing that did
/// not say the size or time.
fn compare_remote(
    compare: Compare,
    local: super::dest::LocalFile,
    info: Option<&RemoteInfo>,
) -> Decision {
    let Some(info) = info else {
        return Decision::Fetch("the server's size and time are unknown".into());
    };
    if info.size != local.len {
        return Decision::Fetch("size differs from the server's".into());
    }
    let remote_time = info
        .last_modified
        .as_deref()
        .and_then(|t| httpdate::parse_http_date(t).ok())
        .and_then(nanos);
    match compare {
        Compare::Size => Decision::Skip("same size as the server's".into()),
        _ if remote_time.is_some() && remote_time == local.mtime_ns => {
            Decision::Skip("same size and modification time as the server's".into())
        }
        _ => Decision::Fetch("modification time differs from the server's".into()),
    }
}

/// `--compare checksum`: the local file's digest against the listing's SHA-256 (or one the
/// server already sent), else the server's sha-256 asked with a `HEAD` (`Want-Repr-Digest` and
/// `Want-Digest`), else its adler32 the same way. With none of them the file is fetched and the reason says why.
async fn compare_checksum(
    transport: &dyn Transport,
    local: &Path,
    listed: Option<Sha256Digest>,
    info: Option<&RemoteInfo>,
) -> Decision {
    let known = listed.or_else(|| info.and_then(|i| i.sha256));
    let mut want = known.and_then(|d| Checksum::from_bytes(ChecksumAlgorithm::Sha256, &d.0));
    for algorithm in [ChecksumAlgorithm::Sha256, ChecksumAlgorithm::Adler32] {
        if want.is_some() {
            break;
        }
        match transport.checksum(algorithm).await {
            Ok(Some(c)) if c.algorithm == algorithm => want = Some(c),
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, %algorithm, "asking the server for a checksum"),
        }
    }
    let Some(want) = want else {
        return Decision::NotCompared(
            "cannot compare by checksum: the server offers no Repr-Digest sha-256 and no adler32 digest".into(),
        );
    };
    let (at, algorithm) = (local.to_path_buf(), want.algorithm);
    let have = tokio::task::spawn_blocking(move || -> std::io::Result<Checksum> {
        let mut file = nofollow::open_read(&at)?;
        let mut hasher = Checksummer::new(algorithm);
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = std::io::Read::read(&mut file, &mut buf)?;
            if n == 0 {
                return Ok(hasher.finish());
            }
            hasher.update(&buf[..n]);
        }
    })
    .await;
    match have {
        Ok(Ok(have)) if have == want => Decision::Skip(format!("same {algorithm} as the server's")),
        Ok(Ok(_)) => Decision::Fetch(format!("{algorithm} differs from the server's")),
        Ok(Err(e)) => Decision::Fetch(format!("cannot read the local copy to hash it: {e}")),
        Err(e) => Decision::Fetch(format!("hashing the local copy failed: {e}")),
    }
}

fn classify(e: &GetError) -> FailureKind {
    match e {
        GetError::Stat { .. } | GetError::Chunk { .. } | GetError::Schedule { .. } => {
            FailureKind::Remote
        }
        GetError::WholeDigestMismatch { .. } => FailureKind::Verify,
        _ => FailureKind::Local,
    }
}

fn nanos(t: SystemTime) -> Option<u64> {
    t.duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_nanos()).ok())
}

/// Not through a link: the name was just renamed into place, and only another local process
/// could have put one there since.
fn set_mtime(path: &Path, t: SystemTime) -> std::io::Result<()> {
    nofollow::open_write(path)?.set_modified(t)
}

/// Resolves when the lane controller wants its next sample; never without one.
async fn sample_due(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
