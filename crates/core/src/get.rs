//! The download driver: runs the [`Scheduler`] over a [`Transport`]'s lanes, the writer and the
//! whole-file hasher, and turns it all into a verified file at its final name.
//!
//! Life of a download:
//! 1. `stat` the remote; refuse to clobber an existing destination unless told to.
//! 2. Resume from `<dest>.xfer-journal` when it matches the remote (URL, size, validators);
//!    otherwise start over with a fresh `<dest>.part`.
//! 3. Lanes pull assignments, fetch, hash each chunk as bytes arrive, send batches to the
//!    writer; the scheduler checks digests, retries, duplicates at the tail.
//! 4. When every chunk is verified: sync, compare the whole-file hash with `--expect-sha256`
//!    and the server's `Repr-Digest`, rename `<dest>.part` to `<dest>`, sync the directory,
//!    remove the journal.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use crate::digest::{Sha256Digest, Sha256Hasher};
use crate::error::TransferError;
use crate::journal::{self, JournalError, JournalHeader, JournalWriter};
use crate::plan::{ChunkIndex, ChunkPlan, PlanError, DEFAULT_CHUNK_SIZE};
use crate::progress::{LaneReport, LaneSnapshot, Progress, Report};
use crate::schedule::{
    Assignment, AttemptId, AttemptOutcome, ScheduleConfig, ScheduleEvent, ScheduleFailure,
    Scheduler,
};
use crate::sink::{self, WriteOp, Writer};
use crate::transport::{Lane, RangeRequest, RemoteInfo, Transport};
use crate::whole_hash::{self, HashEvent};

/// How often an idle lane re-evaluates whether to duplicate a slow chunk.
const ENDGAME_RECHECK: Duration = Duration::from_millis(100);

/// How a download runs.
#[derive(Debug, Clone, PartialEq)]
pub struct GetConfig {
    /// Bytes per chunk; see [`DEFAULT_CHUNK_SIZE`] for the trade-offs. A resumed transfer keeps
    /// the chunk size its journal was written with.
    pub chunk_size: u64,
    /// Lanes to run; `None` takes the transport's configured parallelism.
    pub lanes: Option<usize>,
    /// Retries, backoff and end game.
    pub schedule: ScheduleConfig,
    /// Hash every chunk and the whole file, ask the server for digests and check them.
    /// Default on; off only to measure the raw transport.
    pub verify: bool,
    /// The whole file's SHA-256 must be this.
    pub expect_sha256: Option<Sha256Digest>,
    /// Write `<dest>.sha256` in `sha256sum` format when done.
    pub write_sha256_file: bool,
    /// Replace an existing destination. Default off: an existing file is never touched.
    pub overwrite: bool,
    /// Bytes a lane accumulates before handing them to the writer. Default 1 MiB.
    pub write_batch: usize,
    /// Batches queued for the writer before lanes wait. Default 64 (64 MiB at the default batch).
    pub write_queue: usize,
    /// Attempts to (re)open a lane's connection before the lane is given up. Default 5.
    pub lane_open_attempts: u32,
}

impl Default for GetConfig {
    fn default() -> Self {
        Self {
            chunk_size: DEFAULT_CHUNK_SIZE,
            lanes: None,
            schedule: ScheduleConfig::default(),
            verify: true,
            expect_sha256: None,
            write_sha256_file: false,
            overwrite: false,
            write_batch: 1 << 20,
            write_queue: 64,
            lane_open_attempts: 5,
        }
    }
}

/// Why a download failed. The part file and journal are kept, so running the same download
/// again resumes, except where noted.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    #[error("cannot stat {url}")]
    Stat {
        url: String,
        #[source]
        source: TransferError,
    },
    #[error("{path} exists; pass --overwrite to replace it")]
    DestinationExists { path: PathBuf },
    #[error("{path} exists and is not a regular file; xfer only writes regular files")]
    DestinationNotAFile { path: PathBuf },
    #[error("fetching {url}, chunk {chunk} (bytes {start}-{end})")]
    Chunk {
        url: String,
        chunk: ChunkIndex,
        start: u64,
        end: u64,
        #[source]
        source: TransferError,
    },
    #[error("fetching {url}: {failure}")]
    Schedule {
        url: String,
        failure: ScheduleFailure,
    },
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Write(#[from] sink::SinkError),
    #[error("{path}: whole-file SHA-256 is {actual} but {source_of_expected} says {expected}; kept as {part}")]
    WholeDigestMismatch {
        path: PathBuf,
        part: PathBuf,
        actual: Sha256Digest,
        expected: Sha256Digest,
        source_of_expected: &'static str,
    },
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("interrupted; run the same command again to resume")]
    Interrupted,
}

/// A download of one remote resource to one local path.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use xfer_core::get::{Download, GetConfig};
/// use xfer_core::mem_transport::MemTransport;
///
/// let data: Vec<u8> = (0..3u32 << 20).map(|i| i as u8).collect();
/// // Any `Transport` will do; this one serves `data` from memory over 4 lanes.
/// let transport = Arc::new(MemTransport::new(data.clone(), 4));
/// let dir = tempfile::tempdir()?;
/// let dest = dir.path().join("copy.bin");
/// let config = GetConfig { chunk_size: 1 << 20, ..GetConfig::default() };
/// let report = Download::new(transport, "mem://resource", &dest, config).run().await?;
/// assert_eq!(std::fs::read(&dest)?, data);
/// assert_eq!(report.chunks, 3);
/// # Ok(())
/// # }
/// ```
pub struct Download {
    transport: Arc<dyn Transport>,
    source: String,
    dest: PathBuf,
    config: GetConfig,
    progress: Progress,
}

impl Download {
    /// `source` names the resource in the journal (the URL the user gave, before redirects), so
    /// a later run of the same command finds it.
    pub fn new(
        transport: Arc<dyn Transport>,
        source: impl Into<String>,
        dest: impl Into<PathBuf>,
        config: GetConfig,
    ) -> Self {
        Self {
            transport,
            source: source.into(),
            dest: dest.into(),
            config,
            progress: Progress::new(),
        }
    }

    /// Live counters, for a progress display. Clone it before calling `run`.
    pub fn progress(&self) -> Progress {
        self.progress.clone()
    }

    /// Run to completion.
    pub async fn run(self) -> Result<Report, GetError> {
        self.run_until(std::future::pending()).await
    }

    /// Run until done or until `shutdown` resolves (Ctrl-C): then stop the lanes, flush the
    /// journal and return [`GetError::Interrupted`].
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> Result<Report, GetError> {
        let started = Instant::now();
        let cfg = &self.config;
        if cfg.write_batch == 0 || cfg.write_queue == 0 {
            return Err(GetError::Config(
                "write_batch and write_queue must be at least 1".into(),
            ));
        }
        if cfg.lanes == Some(0) {
            return Err(GetError::Config("lanes must be at least 1".into()));
        }
        match std::fs::symlink_metadata(&self.dest) {
            // The result is renamed over the destination: never over a device, a directory or a
            // link (`-o /dev/null` must not replace /dev/null).
            Ok(m) if !m.file_type().is_file() => {
                return Err(GetError::DestinationNotAFile {
                    path: self.dest.clone(),
                });
            }
            Ok(_) if !cfg.overwrite => {
                return Err(GetError::DestinationExists {
                    path: self.dest.clone(),
                });
            }
            _ => {}
        }
        let info = stat_with_retries(self.transport.as_ref(), &self.source, &cfg.schedule).await?;
        tracing::info!(url = %info.url, size = info.size, etag = ?info.etag, ranges = info.accepts_ranges, "remote");

        let part_path = journal::part_path(&self.dest);
        let journal_path = journal::journal_path(&self.dest);
        let header = JournalHeader {
            url: self.source.clone(),
            size: info.size,
            etag: info.etag.clone(),
            last_modified: info.last_modified.clone(),
            chunk_size: cfg.chunk_size,
        };
        let lanes = if info.accepts_ranges {
            cfg.lanes
                .unwrap_or_else(|| self.transport.default_lanes())
                .max(1)
        } else {
            tracing::warn!(url = %info.url, "server does not accept byte ranges: one sequential stream, no resume");
            1
        };
        let prepared = {
            let (info, header, part_path, journal_path, cfg) = (
                info.clone(),
                header.clone(),
                part_path.clone(),
                journal_path.clone(),
                cfg.clone(),
            );
            // Creating files and syncing them can take a while on a busy disk: off the runtime.
            tokio::task::spawn_blocking(move || {
                prepare(&info, &header, &part_path, &journal_path, &cfg)
            })
            .await
            .map_err(|e| GetError::Config(format!("preparing the destination panicked: {e}")))??
        };
        let plan = prepared.plan;
        self.progress.update(|p| {
            p.total = info.size;
            p.resumed = prepared.resumed_bytes;
            p.verified = prepared.resumed_bytes;
            p.lanes = (0..lanes)
                .map(|lane| LaneSnapshot {
                    lane,
                    ..Default::default()
                })
                .collect();
        });

        // Whole-file hasher.
        let (sealed_tx, sealed_rx) = std::sync::mpsc::channel();
        let (hash_tx, mut hash_rx) = mpsc::unbounded_channel();
        let verify_whole = cfg.verify || cfg.expect_sha256.is_some();
        let hasher = if verify_whole {
            let read = File::open(&part_path).map_err(|source| GetError::Io {
                what: "opening for hashing",
                path: part_path.clone(),
                source,
            })?;
            let claimed = prepared
                .claimed
                .iter()
                .map(|r| (r.chunk, r.sha256))
                .collect();
            Some(
                whole_hash::spawn(plan, read, part_path.clone(), claimed, sealed_rx, hash_tx)
                    .map_err(|source| GetError::Io {
                        what: "starting the hash thread for",
                        path: part_path.clone(),
                        source,
                    })?,
            )
        } else {
            drop(sealed_rx);
            drop(hash_tx);
            None
        };
        let writer = Writer::start(
            prepared.part,
            part_path.clone(),
            prepared.journal,
            cfg.write_queue,
            sealed_tx,
        )?;

        let done: Vec<ChunkIndex> = prepared.claimed.iter().map(|r| r.chunk).collect();
        let shared = Arc::new(Shared {
            sched: Mutex::new(Scheduler::new(plan, lanes, done, cfg.schedule.clone())),
            wake: Notify::new(),
            tokens: Mutex::new(HashMap::new()),
            buffers: Mutex::new(HashMap::new()),
            errors: Mutex::new(HashMap::new()),
            progress: self.progress.clone(),
            writer: writer.tx.clone(),
            remote: info.clone(),
            verify: cfg.verify,
            write_batch: cfg.write_batch,
            whole: !info.accepts_ranges,
            stop: CancellationToken::new(),
        });

        let mut tasks = Vec::with_capacity(lanes);
        for lane in 0..lanes {
            let shared = Arc::clone(&shared);
            let transport = Arc::clone(&self.transport);
            let open_attempts = cfg.lane_open_attempts.max(1);
            tasks.push(tokio::spawn(async move {
                run_lane(shared, transport, lane, open_attempts).await
            }));
        }

        // Wait for the end, an interruption, or a hasher verdict on resumed chunks.
        let mut whole_digest = None;
        let mut interrupted = false;
        tokio::pin!(shutdown);
        loop {
            let finished = shared.lock().is_finished();
            if finished
                && (!verify_whole || whole_digest.is_some() || shared.lock().failure().is_some())
            {
                break;
            }
            tokio::select! {
                _ = &mut shutdown, if !interrupted => {
                    interrupted = true;
                    shared.stop.cancel();
                    break;
                }
                ev = hash_rx.recv(), if verify_whole => match ev {
                    Some(HashEvent::ChunkInvalid { chunk }) => {
                        tracing::warn!(chunk, "journalled chunk does not match its digest on disk; fetching it again");
                        let bytes = plan.len(chunk);
                        self.progress.update(|p| {
                            p.verified -= bytes;
                            p.resumed = p.resumed.saturating_sub(bytes);
                        });
                        shared.lock().handle_chunk_invalidated(chunk);
                        shared.wake.notify_waiters();
                    }
                    Some(HashEvent::Done(d)) => whole_digest = Some(d),
                    Some(HashEvent::Failed { path, message }) => {
                        shared.stop.cancel();
                        for t in tasks.drain(..) {
                            let _ = t.await;
                        }
                        let _ = writer.finish().await;
                        return Err(GetError::Io { what: "reading back", path, source: std::io::Error::other(message) });
                    }
                    None => {
                        // The hasher ended without a digest: only when the transfer failed.
                        if !shared.lock().is_finished() {
                            shared.wake.notified().await;
                        } else if shared.lock().failure().is_some() {
                            break;
                        } else {
                            return Err(GetError::Io { what: "hashing", path: part_path.clone(), source: std::io::Error::other("hash thread ended early") });
                        }
                    }
                },
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if let Some(e) = writer.error() {
                        shared.stop.cancel();
                        return Err(e.into());
                    }
                }
            }
        }
        shared.stop.cancel();
        shared.wake.notify_waiters();
        for t in tasks {
            let _ = t.await;
        }
        let failure = shared.lock().failure().cloned();
        // Flush what was verified, whatever happens next: that is what a re-run resumes from.
        let synced = writer.finish().await;
        if let Some(h) = hasher {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
        if interrupted {
            synced?;
            return Err(GetError::Interrupted);
        }
        if let Some(failure) = failure {
            return Err(shared.error_for(&self.source, failure));
        }
        synced?;

        // Everything verified chunk by chunk; now the whole.
        let mut verified_against = Vec::new();
        if cfg.verify {
            verified_against.push(
                if info.accepts_ranges {
                    "per-chunk Content-Digest when the server sent one"
                } else {
                    "Content-Digest when the server sent one"
                }
                .to_string(),
            );
        }
        if let Some(actual) = whole_digest {
            for (expected, source_of_expected) in [
                (cfg.expect_sha256, "--expect-sha256"),
                (info.sha256, "the server's Repr-Digest"),
            ] {
                if let Some(expected) = expected {
                    if expected != actual {
                        return Err(GetError::WholeDigestMismatch {
                            path: self.dest.clone(),
                            part: part_path.clone(),
                            actual,
                            expected,
                            source_of_expected,
                        });
                    }
                    verified_against.push(source_of_expected.to_string());
                }
            }
        }
        finalize(&part_path, &self.dest, &journal_path)?;
        if let (true, Some(d)) = (cfg.write_sha256_file, whole_digest) {
            write_sha256_file(&self.dest, d)?;
        }

        let snap = self.progress.snapshot();
        let seconds = started.elapsed().as_secs_f64();
        let new_bytes = info.size - snap.resumed.min(info.size);
        Ok(Report {
            url: info.url.clone(),
            dest: self.dest.display().to_string(),
            protocol: self.transport.protocol(),
            size: info.size,
            chunk_size: plan.chunk_size(),
            chunks: plan.chunk_count(),
            resumed_bytes: snap.resumed,
            received_bytes: snap.received,
            seconds,
            goodput_bps: if seconds > 0.0 {
                new_bytes as f64 * 8.0 / seconds
            } else {
                0.0
            },
            lanes: snap
                .lanes
                .iter()
                .map(|l| LaneReport {
                    lane: l.lane,
                    label: l.label.clone(),
                    bytes: l.bytes,
                    chunks: l.chunks,
                    busy_seconds: l.busy.as_secs_f64(),
                    throughput_bps: if l.busy.is_zero() {
                        0.0
                    } else {
                        l.bytes as f64 * 8.0 / l.busy.as_secs_f64()
                    },
                    retries: l.retries,
                })
                .collect(),
            retries: snap.retries,
            digest_mismatches: snap.digest_mismatches,
            duplicates: snap.duplicates,
            sha256: whole_digest.map(|d| d.to_hex()),
            verified_against,
            connections: self.transport.connection_stats(),
        })
    }
}

async fn stat_with_retries(
    transport: &dyn Transport,
    url: &str,
    policy: &ScheduleConfig,
) -> Result<RemoteInfo, GetError> {
    let mut attempt = 0u32;
    loop {
        match transport.stat().await {
            Ok(info) => return Ok(info),
            Err(e) if e.is_retryable() && attempt + 1 < policy.max_attempts.min(4) => {
                attempt += 1;
                let wait = policy
                    .backoff_initial
                    .saturating_mul(1 << attempt.min(6))
                    .min(policy.backoff_max);
                tracing::warn!(error = %e, ?wait, "stat failed; retrying");
                tokio::time::sleep(wait).await;
            }
            Err(source) => {
                return Err(GetError::Stat {
                    url: url.to_string(),
                    source,
                })
            }
        }
    }
}

/// Files and plan ready for the transfer.
struct Prepared {
    plan: ChunkPlan,
    part: File,
    journal: JournalWriter,
    claimed: Vec<journal::ChunkRecord>,
    resumed_bytes: u64,
}

/// Resume from a matching journal, or start over.
fn prepare(
    info: &RemoteInfo,
    header: &JournalHeader,
    part_path: &Path,
    journal_path: &Path,
    cfg: &GetConfig,
) -> Result<Prepared, GetError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| GetError::Io { what, path, source }
    };
    if info.accepts_ranges {
        if let Some(loaded) = journal::load(journal_path)? {
            let part_len = std::fs::metadata(part_path).map(|m| m.len()).ok();
            let reason = loaded.header.mismatch(header).or_else(|| match part_len {
                Some(len) if len == info.size => None,
                Some(len) => Some(format!(
                    "{} has {len} bytes, expected {}",
                    part_path.display(),
                    info.size
                )),
                None => Some(format!("{} is missing", part_path.display())),
            });
            match reason {
                None => {
                    let plan = ChunkPlan::new(info.size, loaded.header.chunk_size)?;
                    if loaded.header.chunk_size != cfg.chunk_size {
                        tracing::info!(
                            chunk_size = loaded.header.chunk_size,
                            "resuming with the journal's chunk size"
                        );
                    }
                    if loaded.ignored_lines > 0 {
                        tracing::warn!(lines = loaded.ignored_lines, journal = %journal_path.display(), "ignored damaged journal lines; those chunks are fetched again");
                    }
                    if header.etag.is_none() && header.last_modified.is_none() {
                        tracing::warn!("the server sends no ETag or Last-Modified: resuming trusts that the file is unchanged (the whole-file digest still checks it)");
                    }
                    let claimed: Vec<_> = loaded
                        .chunks
                        .iter()
                        .copied()
                        .filter(|r| {
                            r.chunk < plan.chunk_count()
                                && plan.range(r.chunk) == (r.offset..r.offset + r.len)
                        })
                        .collect();
                    let resumed_bytes = claimed.iter().map(|r| r.len).sum();
                    let kept = journal::LoadedJournal {
                        chunks: claimed.clone(),
                        ..loaded
                    };
                    let journal = JournalWriter::append_to(journal_path, &kept)?;
                    let part = OpenOptions::new()
                        .write(true)
                        .open(part_path)
                        .map_err(io("opening", part_path))?;
                    tracing::info!(chunks = claimed.len(), bytes = resumed_bytes, "resuming");
                    return Ok(Prepared {
                        plan,
                        part,
                        journal,
                        claimed,
                        resumed_bytes,
                    });
                }
                Some(reason) => {
                    tracing::warn!(%reason, journal = %journal_path.display(), "cannot resume: starting over");
                }
            }
        }
    }
    let plan = if info.accepts_ranges {
        ChunkPlan::new(info.size, cfg.chunk_size)?
    } else {
        ChunkPlan::whole(info.size)
    };
    let part = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(part_path)
        .map_err(io("creating", part_path))?;
    part.set_len(info.size).map_err(io("sizing", part_path))?;
    let header = JournalHeader {
        chunk_size: plan.chunk_size(),
        ..header.clone()
    };
    let journal = JournalWriter::create(journal_path, &header)?;
    Ok(Prepared {
        plan,
        part,
        journal,
        claimed: Vec::new(),
        resumed_bytes: 0,
    })
}

/// Make the verified part file the destination, durably.
fn finalize(part: &Path, dest: &Path, journal_path: &Path) -> Result<(), GetError> {
    std::fs::rename(part, dest).map_err(|source| GetError::Io {
        what: "renaming to its final name",
        path: part.to_path_buf(),
        source,
    })?;
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The rename is durable once the directory is.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    if let Err(e) = std::fs::remove_file(journal_path) {
        tracing::warn!(journal = %journal_path.display(), error = %e, "could not remove the journal");
    }
    Ok(())
}

/// `<dest>.sha256` in `sha256sum -c` format.
fn write_sha256_file(dest: &Path, digest: Sha256Digest) -> Result<(), GetError> {
    let path = journal::with_suffix(dest, ".sha256");
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::fs::write(&path, format!("{}  {name}\n", digest.to_hex())).map_err(|source| GetError::Io {
        what: "writing",
        path,
        source,
    })
}

/// State the lane tasks share.
struct Shared {
    sched: Mutex<Scheduler>,
    /// Woken whenever the scheduler may have work for an idle lane or the driver.
    wake: Notify,
    tokens: Mutex<HashMap<AttemptId, CancellationToken>>,
    /// End-game duplicates' bytes, held until they win or lose.
    buffers: Mutex<HashMap<AttemptId, Vec<Bytes>>>,
    /// The error behind each chunk's last failure, for the final message.
    errors: Mutex<HashMap<ChunkIndex, TransferError>>,
    progress: Progress,
    writer: mpsc::Sender<WriteOp>,
    remote: RemoteInfo,
    verify: bool,
    write_batch: usize,
    whole: bool,
    stop: CancellationToken,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Scheduler> {
        // A panic while holding the lock already fails the transfer; keep going to report it.
        self.sched.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Apply what the scheduler decided: cancel losers, seal winners, count events.
    async fn settle(&self) {
        let (events, cancels) = {
            let mut s = self.lock();
            let mut events = Vec::new();
            while let Some(e) = s.poll_event() {
                events.push(e);
            }
            let mut cancels = Vec::new();
            while let Some(c) = s.poll_cancel() {
                cancels.push(c);
            }
            (events, cancels)
        };
        if !cancels.is_empty() {
            let tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
            for c in &cancels {
                if let Some(t) = tokens.get(c) {
                    t.cancel();
                }
            }
        }
        for e in events {
            match e {
                ScheduleEvent::ChunkVerified {
                    chunk,
                    attempt,
                    lane,
                    digest,
                    direct,
                    losers,
                    ..
                } => {
                    let range = self.lock().plan().range(chunk);
                    let buffered = if direct {
                        None
                    } else {
                        self.buffers
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&attempt)
                    };
                    let len = range.end - range.start;
                    self.progress.update(|p| {
                        p.verified += len;
                        if let Some(l) = p.lanes.get_mut(lane) {
                            l.chunks += 1;
                        }
                    });
                    let op = WriteOp::Seal {
                        record: sink::record(chunk, range, digest),
                        losers,
                        buffered,
                    };
                    // A closed writer has recorded its error; the driver reports it.
                    let _ = self.writer.send(op).await;
                }
                ScheduleEvent::DigestMismatch {
                    chunk,
                    lane,
                    expected,
                    actual,
                } => {
                    tracing::warn!(chunk, lane, %expected, %actual, "chunk digest mismatch; fetching it again");
                    self.progress.update(|p| p.digest_mismatches += 1);
                }
                ScheduleEvent::Retry {
                    chunk,
                    lane,
                    reason,
                    backoff,
                } => {
                    tracing::warn!(chunk, lane, %reason, ?backoff, "retrying chunk");
                    self.progress.update(|p| {
                        p.retries += 1;
                        if let Some(l) = p.lanes.get_mut(lane) {
                            l.retries += 1;
                        }
                    });
                }
                ScheduleEvent::Duplicated { chunk, lane } => {
                    tracing::debug!(chunk, lane, "end game: duplicating a slow chunk");
                    self.progress.update(|p| p.duplicates += 1);
                }
                ScheduleEvent::Complete | ScheduleEvent::Failed(_) => {}
            }
        }
        self.wake.notify_waiters();
    }

    fn error_for(&self, url: &str, failure: ScheduleFailure) -> GetError {
        let chunk = match &failure {
            ScheduleFailure::TooManyAttempts { chunk, .. }
            | ScheduleFailure::Permanent { chunk, .. } => Some(*chunk),
            ScheduleFailure::NoLanes => None,
        };
        if let Some(chunk) = chunk {
            if let Some(source) = self
                .errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&chunk)
            {
                let range = self.lock().plan().range(chunk);
                return GetError::Chunk {
                    url: url.to_string(),
                    chunk,
                    start: range.start,
                    end: range.end,
                    source,
                };
            }
        }
        GetError::Schedule {
            url: url.to_string(),
            failure,
        }
    }
}

/// One lane: take assignments until the transfer ends.
async fn run_lane(
    shared: Arc<Shared>,
    transport: Arc<dyn Transport>,
    lane: usize,
    open_attempts: u32,
) {
    let mut conn: Option<Box<dyn Lane>> = None;
    let mut open_failures = 0u32;
    loop {
        let Some(assignment) = next_assignment(&shared, lane).await else {
            return;
        };
        if conn.is_none() {
            match transport.open_lane(lane).await {
                Ok(l) => {
                    let label = l.label();
                    shared.progress.lane(lane, |s| s.label = label);
                    open_failures = 0;
                    conn = Some(l);
                }
                Err(e) => {
                    open_failures += 1;
                    let retryable = e.is_retryable();
                    tracing::warn!(lane, error = %e, "cannot open lane");
                    let outcome = AttemptOutcome::Failed {
                        retryable,
                        reason: e.to_string(),
                    };
                    shared
                        .errors
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(assignment.chunk, e);
                    shared
                        .lock()
                        .handle_outcome(assignment.attempt, outcome, Instant::now());
                    if open_failures >= open_attempts {
                        shared.lock().handle_lane_dead(lane);
                        shared.settle().await;
                        return;
                    }
                    shared.settle().await;
                    let wait = Duration::from_millis(200).saturating_mul(1 << open_failures.min(6));
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shared.stop.cancelled() => return,
                    }
                    continue;
                }
            }
        }
        let Some(lane_conn) = conn.as_mut() else {
            continue;
        };
        let token = shared.stop.child_token();
        shared
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(assignment.attempt, token.clone());
        let t0 = Instant::now();
        let fetched = fetch_chunk(&shared, lane_conn.as_mut(), &assignment, &token, lane).await;
        shared
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&assignment.attempt);
        shared.progress.lane(lane, |s| s.busy += t0.elapsed());
        if !fetched.reusable {
            conn = None;
        }
        {
            let mut s = shared.lock();
            let won = s.handle_outcome(assignment.attempt, fetched.outcome, Instant::now());
            // Parked under the scheduler lock, so whoever seals the chunk finds it.
            if won && !assignment.direct {
                shared
                    .buffers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(assignment.attempt, fetched.buffer);
            }
        }
        shared.settle().await;
    }
}

/// Wait for work; `None` when the transfer is over for this lane.
async fn next_assignment(shared: &Shared, lane: usize) -> Option<Assignment> {
    loop {
        let notified = shared.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let next = {
            let mut s = shared.lock();
            // A complete schedule is not the end for lanes: the hasher may still find a resumed
            // chunk damaged and put it back. The driver stops lanes when all is verified.
            if s.failure().is_some() || shared.stop.is_cancelled() {
                return None;
            }
            match s.next_assignment(lane, Instant::now()) {
                Some(a) => Ok(a),
                None => Err(s.poll_timeout()),
            }
        };
        let timeout = match next {
            Ok(a) => {
                // Report `Duplicated` events promptly.
                shared.settle().await;
                return Some(a);
            }
            Err(t) => t,
        };
        // End-game decisions depend on time (how far the slow chunks have got), so an idle
        // lane looks again now and then even when nothing wakes it.
        let recheck = Instant::now() + ENDGAME_RECHECK;
        let wake_at = timeout.map_or(recheck, |t| t.min(recheck));
        let sleep = tokio::time::sleep_until(wake_at.into());
        tokio::select! {
            _ = notified => {}
            _ = sleep => {}
            _ = shared.stop.cancelled() => return None,
        }
    }
}

/// How one attempt went.
struct Fetched {
    outcome: AttemptOutcome,
    /// Whether the lane's connection can carry the next request.
    reusable: bool,
    /// An end-game duplicate's bytes.
    buffer: Vec<Bytes>,
}

impl Fetched {
    fn cancelled() -> Self {
        Self {
            outcome: AttemptOutcome::Cancelled,
            reusable: false,
            buffer: Vec::new(),
        }
    }
}

/// Fetch one assignment, hashing and handing bytes to the writer as they arrive.
async fn fetch_chunk(
    shared: &Shared,
    lane: &mut dyn Lane,
    a: &Assignment,
    token: &CancellationToken,
    lane_index: usize,
) -> Fetched {
    let req = RangeRequest {
        range: a.range.clone(),
        expected_size: shared.remote.size,
        want_digest: shared.verify,
        validator: shared.remote.range_validator().map(str::to_string),
        whole: shared.whole,
    };
    let len = a.range.end - a.range.start;
    let peer = lane.label();
    let failed = |e: TransferError| {
        let outcome = AttemptOutcome::Failed {
            retryable: e.is_retryable(),
            reason: e.to_string(),
        };
        shared
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(a.chunk, e);
        Fetched {
            outcome,
            reusable: false,
            buffer: Vec::new(),
        }
    };
    let mut body = tokio::select! {
        r = lane.fetch(&req) => match r {
            Ok(b) => b,
            Err(e) => return failed(e),
        },
        _ = token.cancelled() => return Fetched::cancelled(),
    };
    let mut hasher = shared.verify.then(Sha256Hasher::new);
    let mut received = 0u64;
    let mut batch: Vec<Bytes> = Vec::new();
    let mut batch_len = 0usize;
    let mut batch_offset = a.range.start;
    let mut buffer: Vec<Bytes> = Vec::new();
    let mut unreported = 0u64;
    let mut last_report = Instant::now();
    loop {
        // A body that is always ready (fast loopback, memory) must not keep its worker thread
        // from the other lanes.
        tokio::task::consume_budget().await;
        let next = tokio::select! {
            biased;
            _ = token.cancelled() => {
                report_received(shared, lane_index, unreported);
                return Fetched::cancelled();
            }
            r = body.next_data() => r,
        };
        match next {
            Ok(Some(data)) => {
                if data.is_empty() {
                    continue;
                }
                let n = data.len() as u64;
                received += n;
                if received > len {
                    return failed(TransferError::Unexpected {
                        peer: peer.clone(),
                        message: format!("more than the {len} bytes asked for"),
                    });
                }
                if let Some(h) = hasher.as_mut() {
                    h.update(&data);
                }
                // Counted in steps: a QUIC body arrives in packet-sized pieces, and a lock per
                // piece would show up in the profile.
                unreported += n;
                // And at least every PROGRESS_INTERVAL: end-game decisions need the pace of
                // slow lanes too, which may take long to gather a step.
                let now = Instant::now();
                if unreported >= PROGRESS_STEP
                    || now.duration_since(last_report) >= PROGRESS_INTERVAL
                {
                    report_received(shared, lane_index, std::mem::take(&mut unreported));
                    shared.lock().handle_progress(a.attempt, received, now);
                    last_report = now;
                }
                batch_len += data.len();
                batch.push(data);
                if batch_len >= shared.write_batch {
                    batch_len = 0;
                    if !flush(shared, a, &mut batch, &mut batch_offset, &mut buffer, token).await {
                        report_received(shared, lane_index, unreported);
                        return Fetched::cancelled();
                    }
                }
            }
            Ok(None) => break,
            Err(e) => {
                report_received(shared, lane_index, unreported);
                return failed(e);
            }
        }
    }
    report_received(shared, lane_index, unreported);
    if received != len {
        return failed(TransferError::Truncated {
            peer: peer.clone(),
            expected: len,
            got: received,
        });
    }
    if !flush(shared, a, &mut batch, &mut batch_offset, &mut buffer, token).await {
        return Fetched::cancelled();
    }
    let server_digest = body.trailer_digest();
    Fetched {
        outcome: AttemptOutcome::Received {
            digest: hasher.map(Sha256Hasher::finish),
            server_digest,
        },
        reusable: true,
        buffer,
    }
}

/// A batch of more pieces than this is copied into one buffer before it is written.
const COALESCE_PIECES: usize = 16;

/// Bytes between progress updates of one lane.
const PROGRESS_STEP: u64 = 256 << 10;
/// Longest time between progress updates of a lane that is receiving.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

fn report_received(shared: &Shared, lane: usize, n: u64) {
    if n > 0 {
        shared.progress.update(|p| {
            p.received += n;
            if let Some(l) = p.lanes.get_mut(lane) {
                l.bytes += n;
            }
        });
    }
}

/// Hand a batch to the writer (or to the duplicate's buffer). `false` if cancelled meanwhile.
async fn flush(
    shared: &Shared,
    a: &Assignment,
    batch: &mut Vec<Bytes>,
    offset: &mut u64,
    buffer: &mut Vec<Bytes>,
    token: &CancellationToken,
) -> bool {
    if batch.is_empty() {
        return true;
    }
    let mut data = std::mem::take(batch);
    let n: u64 = data.iter().map(|b| b.len() as u64).sum();
    // QUIC delivers packet-sized pieces: one copy into a single buffer is far cheaper than a
    // write system call (or a buffered duplicate's bookkeeping) per piece.
    if data.len() > COALESCE_PIECES {
        let mut joined = bytes::BytesMut::with_capacity(usize::try_from(n).unwrap_or(0));
        for b in &data {
            joined.extend_from_slice(b);
        }
        data = vec![joined.freeze()];
    }
    if a.direct {
        let op = WriteOp::Data {
            attempt: a.attempt,
            offset: *offset,
            data,
        };
        tokio::select! {
            r = shared.writer.send(op) => if r.is_err() { return false },
            _ = token.cancelled() => return false,
        }
    } else {
        buffer.extend(data);
    }
    *offset += n;
    true
}
