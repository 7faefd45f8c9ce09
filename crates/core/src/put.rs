//! An upload of one local file to one URL: chunks sent over many lanes at once, each checked
//! by the server against its SHA-256 on arrival, the whole file checked before the server puts
//! it in place (`docs/upload-protocol.md`).
//!
//! Resuming needs no local journal: the upload id is derived from the URL, the file's path,
//! size and modification time, so running the same command again names the same upload; the
//! server, which records every verified chunk, says what it holds, and only the rest is sent.
//! A file changed since (another size or mtime) is another upload.
//!
//! Files of at most one chunk go in a single request.

use std::collections::VecDeque;
use std::fs::File;
use std::future::Future;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::digest::{Sha256Digest, Sha256Hasher};
use crate::error::TransferError;
use crate::plan::{ChunkIndex, ChunkPlan, PlanError};
use crate::progress::{LaneSnapshot, Progress};
use crate::transport::{ChunkUpload, Lane, Transport};

/// How an upload runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PutConfig {
    /// Bytes per chunk, each one request and one server-side check. Default 16 MiB, as for
    /// downloads ([`crate::plan::DEFAULT_CHUNK_SIZE`]): every request costs its lane one idle
    /// round trip, so a chunk must take much longer than that to send. Memory: two chunks
    /// per lane (the one on the wire, the next one read ahead).
    pub chunk_size: u64,
    /// Lanes to run; `None` takes the transport's configured parallelism.
    pub lanes: Option<usize>,
    /// Attempts per chunk (and for the final request) before giving up. Default 8.
    pub max_attempts: u32,
    /// First wait before a retry; doubles up to `backoff_max`. Default 250 ms.
    pub backoff_initial: Duration,
    /// Default 15 s.
    pub backoff_max: Duration,
    /// Cut the last chunks of a big file smaller so the lanes finish together
    /// ([`ChunkPlan::tapered`], as for downloads). Default on. A resumed upload needs no
    /// agreement on the plan: the server says which byte ranges it holds.
    pub taper: bool,
    /// Cap the payload rate of all lanes together (`--limit-rate`); clones share the cap, so
    /// a tree's files in flight share it too. Each request's body is charged as it is handed
    /// to the transport, and chunks are cut to at most [`PACED_CHUNK_SECONDS`] of the rate so
    /// that the cap holds within the second, not just over a chunk. Default `None`.
    pub rate_limit: Option<crate::rate::RateLimiter>,
}

/// Under a rate cap, the longest time a chunk may take at the capped rate, as a fraction of
/// a second: a chunk's body goes to the transport at once, so the per-second rate is steady
/// within about one chunk per lane of this size.
pub const PACED_CHUNK_SECONDS: f64 = 0.125;
/// The smallest chunk under a rate cap: each costs its lane a round trip.
const MIN_PACED_CHUNK: u64 = 1 << 20;

impl PutConfig {
    /// The chunk size the upload runs with: `chunk_size`, cut under a rate cap.
    pub fn effective_chunk_size(&self) -> u64 {
        match &self.rate_limit {
            Some(l) => {
                let paced = (l.limit().bytes_per_second() as f64 * PACED_CHUNK_SECONDS) as u64;
                self.chunk_size.min(paced.max(MIN_PACED_CHUNK))
            }
            None => self.chunk_size,
        }
    }
}

impl Default for PutConfig {
    fn default() -> Self {
        Self {
            chunk_size: crate::plan::DEFAULT_CHUNK_SIZE,
            lanes: None,
            max_attempts: 8,
            backoff_initial: Duration::from_millis(250),
            backoff_max: Duration::from_secs(15),
            taper: true,
            rate_limit: None,
        }
    }
}

/// Why an upload failed. Running the same upload again resumes from what the server holds.
#[derive(Debug, thiserror::Error)]
pub enum PutError {
    #[error("{what} {path}")]
    Local {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} changed while it was being uploaded; run the command again")]
    Changed { path: PathBuf },
    #[error("uploading {path} to {url}, bytes {start}-{end}")]
    Chunk {
        path: PathBuf,
        url: String,
        start: u64,
        end: u64,
        #[source]
        source: TransferError,
    },
    #[error("uploading {path} to {url}")]
    Remote {
        path: PathBuf,
        url: String,
        #[source]
        source: TransferError,
    },
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("interrupted; run the same command again to resume")]
    Interrupted,
}

/// What an upload did.
#[derive(Debug, Clone, Serialize)]
pub struct PutReport {
    pub source: String,
    pub url: String,
    pub protocol: String,
    pub size: u64,
    pub chunk_size: u64,
    pub chunks: u32,
    /// Bytes the server already held from an earlier run.
    pub resumed_bytes: u64,
    /// Bytes sent in this run, including chunks sent again.
    pub sent_bytes: u64,
    pub seconds: f64,
    /// New bytes per second of this run, in bits.
    pub goodput_bps: f64,
    pub retries: u64,
    /// The whole file's SHA-256, which the server checked before storing it.
    pub sha256: String,
    pub lanes: Vec<LaneSnapshot>,
}

/// An upload of `source` to a transport's URL.
pub struct Upload {
    transport: Arc<dyn Transport>,
    source: PathBuf,
    url: String,
    config: PutConfig,
    progress: Progress,
}

impl Upload {
    pub fn new(
        transport: Arc<dyn Transport>,
        source: impl Into<PathBuf>,
        url: impl Into<String>,
        config: PutConfig,
    ) -> Self {
        Self {
            transport,
            source: source.into(),
            url: url.into(),
            config,
            progress: Progress::new(),
        }
    }

    /// Live counters: `total`, `verified` (acknowledged by the server), `received` (sent).
    pub fn progress(&self) -> Progress {
        self.progress.clone()
    }

    pub async fn run(self) -> Result<PutReport, PutError> {
        self.run_until(std::future::pending()).await
    }

    /// Run until done or until `shutdown` resolves; chunks the server acknowledged stay
    /// acknowledged, so a re-run resumes.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<PutReport, PutError> {
        let started = Instant::now();
        let cfg = &self.config;
        if cfg.lanes == Some(0) || cfg.max_attempts == 0 {
            return Err(PutError::Config(
                "lanes and max_attempts must be at least 1".into(),
            ));
        }
        let local = |what: &'static str| {
            let path = self.source.clone();
            move |source| PutError::Local { what, path, source }
        };
        let file = File::open(&self.source).map_err(local("opening"))?;
        let meta = file.metadata().map_err(local("reading the size of"))?;
        if !meta.is_file() {
            return Err(PutError::Local {
                what: "uploading",
                path: self.source.clone(),
                source: std::io::Error::other("not a regular file"),
            });
        }
        let size = meta.len();
        let mtime = (meta.mtime(), meta.mtime_nsec());
        let file = Arc::new(file);
        let plan = ChunkPlan::with_taper(size, cfg.effective_chunk_size(), cfg.taper)?;
        let remote = |source| PutError::Remote {
            path: self.source.clone(),
            url: self.url.clone(),
            source,
        };
        let lanes = cfg
            .lanes
            .unwrap_or_else(|| self.transport.default_lanes())
            .clamp(1, plan.chunk_count().max(1) as usize);
        self.progress.update(|p| {
            p.total = size;
            p.lanes = LaneSnapshot::fresh(lanes);
        });
        let mut first = self.transport.open_lane(0).await.map_err(remote)?;

        let shutdown = async {
            shutdown.await;
        };
        tokio::pin!(shutdown);

        if size <= cfg.effective_chunk_size() {
            // One request: the body's own digest is the whole file's.
            let data = read_at(&file, &self.source, 0, size).await?;
            let digest = Sha256Digest::of(&data);
            let send = async {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    if let Some(limit) = cfg.rate_limit.as_ref() {
                        limit.pace(size).await;
                    }
                    match first.put_whole(data.clone(), digest).await {
                        Err(e) => match retry_wait(cfg, &e, attempt) {
                            Some(wait) => tokio::time::sleep(wait).await,
                            None => break Err(e),
                        },
                        ok => break ok,
                    }
                }
            };
            tokio::select! {
                r = send => r.map_err(remote)?,
                _ = &mut shutdown => return Err(PutError::Interrupted),
            }
            self.progress.update(|p| {
                p.verified = size;
                p.received = size;
            });
            check_unchanged(&self.source, size, mtime)?;
            return Ok(self.report(started, plan, 0, lanes, digest));
        }

        // The whole-file hash runs beside the upload; the server checks it at the end.
        let hasher = {
            let (file, path) = (Arc::clone(&file), self.source.clone());
            tokio::task::spawn_blocking(move || hash_file(&file, size, &path))
        };
        let id = upload_id(&self.url, &self.source, size, mtime);
        let held = first.upload_status(&id).await.map_err(remote)?;
        let missing: VecDeque<ChunkIndex> = (0..plan.chunk_count())
            .filter(|&c| {
                let r = plan.range(c);
                !held.as_ref().is_some_and(|h| {
                    h.size == size
                        && h.received
                            .iter()
                            .any(|g| g.start <= r.start && r.end <= g.end)
                })
            })
            .collect();
        let resumed: u64 = size - missing.iter().map(|&c| plan.len(c)).sum::<u64>();
        if resumed > 0 {
            tracing::info!(bytes = resumed, upload = %id, "the server holds part of this upload; sending the rest");
        }
        self.progress.update(|p| {
            p.resumed = resumed;
            p.verified = resumed;
        });

        let sent = self
            .send_chunks(
                &plan,
                &file,
                &id,
                missing,
                lanes,
                first,
                size,
                &mut shutdown,
            )
            .await?;
        let mut last = sent;

        let digest = hasher
            .await
            .map_err(|e| PutError::Config(format!("hash task failed: {e}")))??;
        check_unchanged(&self.source, size, mtime)?;
        let complete = async {
            let mut attempt = 0;
            loop {
                attempt += 1;
                match last.complete_upload(&id, digest).await {
                    Err(e) => match retry_wait(cfg, &e, attempt) {
                        Some(wait) => tokio::time::sleep(wait).await,
                        None => break Err(e),
                    },
                    ok => break ok,
                }
            }
        };
        tokio::select! {
            r = complete => r.map_err(remote)?,
            _ = &mut shutdown => return Err(PutError::Interrupted),
        }
        Ok(self.report(started, plan, resumed, lanes, digest))
    }

    /// Send `missing` over `lanes` lanes (`first` already open). Returns a lane for the
    /// final request.
    #[allow(clippy::too_many_arguments)]
    async fn send_chunks(
        &self,
        plan: &ChunkPlan,
        file: &Arc<File>,
        id: &str,
        missing: VecDeque<ChunkIndex>,
        lanes: usize,
        first: Box<dyn Lane>,
        size: u64,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<Box<dyn Lane>, PutError> {
        let queue = Arc::new(Mutex::new(missing));
        let stop = CancellationToken::new();
        let (events, mut reports) = mpsc::unbounded_channel();
        let mut tasks = tokio::task::JoinSet::new();
        let mut first = Some(first);
        for lane in 0..lanes {
            let ctx = LaneCtx {
                transport: Arc::clone(&self.transport),
                url: self.url.clone(),
                file: Arc::clone(file),
                path: self.source.clone(),
                id: id.to_string(),
                plan: *plan,
                size,
                queue: Arc::clone(&queue),
                lanes,
                cfg: self.config.clone(),
                progress: self.progress.clone(),
                stop: stop.clone(),
                events: events.clone(),
            };
            let opened = first.take();
            tasks.spawn(async move { ctx.run(lane, opened).await });
        }
        drop(events);
        let mut spare = None;
        let failure = loop {
            tokio::select! {
                report = reports.recv() => match report {
                    Some(LaneReport::Finished(lane)) => spare = spare.or(Some(lane)),
                    Some(LaneReport::Failed(e)) => break Some(e),
                    // Every lane has finished.
                    None => break None,
                },
                _ = &mut *shutdown => break Some(PutError::Interrupted),
            }
        };
        stop.cancel();
        while tasks.join_next().await.is_some() {}
        if let Some(e) = failure {
            return Err(e);
        }
        match spare {
            Some(lane) => Ok(lane),
            None => self
                .transport
                .open_lane(0)
                .await
                .map_err(|source| PutError::Remote {
                    path: self.source.clone(),
                    url: self.url.clone(),
                    source,
                }),
        }
    }

    fn report(
        &self,
        started: Instant,
        plan: ChunkPlan,
        resumed: u64,
        lanes: usize,
        digest: Sha256Digest,
    ) -> PutReport {
        let snap = self.progress.snapshot();
        let seconds = started.elapsed().as_secs_f64();
        let new_bytes = plan.size() - resumed.min(plan.size());
        PutReport {
            source: self.source.display().to_string(),
            url: self.url.clone(),
            protocol: self.transport.protocol(),
            size: plan.size(),
            chunk_size: plan.chunk_size(),
            chunks: plan.chunk_count(),
            resumed_bytes: resumed,
            sent_bytes: snap.received,
            seconds,
            goodput_bps: if seconds > 0.0 {
                new_bytes as f64 * 8.0 / seconds
            } else {
                0.0
            },
            retries: snap.retries,
            sha256: digest.to_hex(),
            lanes: snap.lanes.into_iter().take(lanes).collect(),
        }
    }
}

enum LaneReport {
    /// The queue is empty; the lane is handed back for the final request.
    Finished(Box<dyn Lane>),
    Failed(PutError),
}

struct LaneCtx {
    transport: Arc<dyn Transport>,
    url: String,
    file: Arc<File>,
    path: PathBuf,
    id: String,
    plan: ChunkPlan,
    size: u64,
    queue: Arc<Mutex<VecDeque<ChunkIndex>>>,
    /// Lanes running: near the end a lane reads ahead no more, so that the last chunks go to
    /// lanes that are free instead of waiting behind a busy one.
    lanes: usize,
    cfg: PutConfig,
    progress: Progress,
    stop: CancellationToken,
    events: mpsc::UnboundedSender<LaneReport>,
}

impl LaneCtx {
    async fn run(self, lane: usize, opened: Option<Box<dyn Lane>>) {
        let outcome = tokio::select! {
            r = self.work(lane, opened) => r,
            _ = self.stop.cancelled() => return,
        };
        let _ = self.events.send(match outcome {
            Ok(l) => LaneReport::Finished(l),
            Err(e) => LaneReport::Failed(e),
        });
    }

    async fn work(
        &self,
        lane: usize,
        opened: Option<Box<dyn Lane>>,
    ) -> Result<Box<dyn Lane>, PutError> {
        let mut conn = match opened {
            Some(l) => l,
            None => self
                .transport
                .open_lane(lane)
                .await
                .map_err(|source| self.remote(source))?,
        };
        let label = conn.label();
        self.progress.lane(lane, |s| s.label = label);
        let mut next = self.prepare_next(true);
        loop {
            let Some(prepared) = next.take().or_else(|| self.prepare_next(true)) else {
                return Ok(conn);
            };
            let up = prepared
                .await
                .map_err(|e| PutError::Config(format!("read task failed: {e}")))??;
            // The following chunk is read and hashed while this one is on the wire, so the
            // lane does not idle between requests for the disk and the digest.
            next = self.prepare_next(false);
            let range = up.range.clone();
            let t0 = Instant::now();
            let mut attempt = 0u32;
            loop {
                attempt += 1;
                if let Some(limit) = self.cfg.rate_limit.as_ref() {
                    limit.pace(up.data.len() as u64).await;
                }
                let e = match conn.put_chunk(&up).await {
                    Ok(()) => break,
                    Err(e) => e,
                };
                let Some(wait) = retry_wait(&self.cfg, &e, attempt) else {
                    return Err(PutError::Chunk {
                        path: self.path.clone(),
                        url: self.url.clone(),
                        start: range.start,
                        end: range.end,
                        source: e,
                    });
                };
                self.progress.update(|p| {
                    p.retries += 1;
                    if let Some(l) = p.lanes.get_mut(lane) {
                        l.retries += 1;
                    }
                });
                tokio::time::sleep(wait).await;
            }
            let n = range.end - range.start;
            self.progress.update(|p| {
                p.verified += n;
                p.received += n * u64::from(attempt);
                if let Some(l) = p.lanes.get_mut(lane) {
                    l.bytes += n;
                    l.chunks += 1;
                    l.busy += t0.elapsed();
                }
            });
        }
    }

    /// Take the next chunk from the queue and read and hash it on the blocking pool. A lane
    /// reading ahead (`now` false) leaves the last `lanes` chunks to lanes that are free.
    fn prepare_next(
        &self,
        now: bool,
    ) -> Option<tokio::task::JoinHandle<Result<ChunkUpload, PutError>>> {
        let chunk = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            if !now && q.len() <= self.lanes {
                return None;
            }
            q.pop_front()?
        };
        let range = self.plan.range(chunk);
        let (file, path, id, total) = (
            Arc::clone(&self.file),
            self.path.clone(),
            self.id.clone(),
            self.size,
        );
        Some(tokio::task::spawn_blocking(move || {
            let len = usize::try_from(range.end - range.start).unwrap_or(usize::MAX);
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, range.start)
                .map_err(|source| PutError::Local {
                    what: "reading",
                    path,
                    source,
                })?;
            let data = Bytes::from(buf);
            Ok(ChunkUpload {
                id,
                sha256: Sha256Digest::of(&data),
                range,
                total,
                data,
            })
        }))
    }

    fn remote(&self, source: TransferError) -> PutError {
        PutError::Remote {
            path: self.path.clone(),
            url: self.url.clone(),
            source,
        }
    }
}

/// The wait before attempt `attempt + 1`: `backoff_initial`, doubling, at most `backoff_max`.
pub fn backoff(cfg: &PutConfig, attempt: u32) -> Duration {
    cfg.backoff_initial
        .saturating_mul(1 << attempt.saturating_sub(1).min(10))
        .min(cfg.backoff_max)
}

/// How long to wait before trying again after `e` on attempt `attempt`; `None`: give up.
fn retry_wait(cfg: &PutConfig, e: &TransferError, attempt: u32) -> Option<Duration> {
    if e.is_retryable() && attempt < cfg.max_attempts {
        let wait = backoff(cfg, attempt);
        tracing::warn!(error = %e, ?wait, "upload request failed; retrying");
        Some(wait)
    } else {
        None
    }
}

async fn read_at(file: &Arc<File>, path: &Path, offset: u64, len: u64) -> Result<Bytes, PutError> {
    let (file, path) = (Arc::clone(file), path.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut buf, offset)
            .map(|()| Bytes::from(buf))
            .map_err(|source| PutError::Local {
                what: "reading",
                path,
                source,
            })
    })
    .await
    .map_err(|e| PutError::Config(format!("read task failed: {e}")))?
}

fn hash_file(file: &File, size: u64, path: &Path) -> Result<Sha256Digest, PutError> {
    let mut h = Sha256Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < size {
        let n = usize::try_from((size - off).min(buf.len() as u64)).unwrap_or(buf.len());
        file.read_exact_at(&mut buf[..n], off)
            .map_err(|source| PutError::Local {
                what: "hashing",
                path: path.to_path_buf(),
                source,
            })?;
        h.update(&buf[..n]);
        off += n as u64;
    }
    Ok(h.finish())
}

/// The same file (size and mtime) as when the upload started, or the chunks may mix
/// versions.
fn check_unchanged(path: &Path, size: u64, mtime: (i64, i64)) -> Result<(), PutError> {
    let m = std::fs::metadata(path).map_err(|source| PutError::Local {
        what: "checking",
        path: path.to_path_buf(),
        source,
    })?;
    if m.len() != size || (m.mtime(), m.mtime_nsec()) != mtime {
        return Err(PutError::Changed {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// The same upload on every run of the same command for an unchanged file.
pub fn upload_id(url: &str, path: &Path, size: u64, mtime: (i64, i64)) -> String {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let key = format!(
        "xfer-put\n{url}\n{}\n{size}\n{}.{}",
        abs.display(),
        mtime.0,
        mtime.1
    );
    Sha256Digest::of(key.as_bytes()).to_hex()[..32].to_string()
}
