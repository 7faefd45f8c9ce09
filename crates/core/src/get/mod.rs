//! A download of one remote resource to one local file, verified and resumable.
//!
//! Life of a download:
//! 1. Refuse to clobber an existing destination unless told to. Learn the remote with lane 0's
//!    first range request (`Transport::open_first`: its answer carries size and validators)
//!    while the other lanes connect.
//! 2. Resume from `<dest>.xfer-journal` when it matches the remote (URL, size, validators);
//!    otherwise start over with a fresh `<dest>.part` (`prepare`), and a fresh journal unless
//!    the file is one chunk (fetched whole or again, so there is nothing to resume). Those
//!    two names are [`Staging::beside`] the destination unless [`Download::with_staging`]
//!    puts them elsewhere (a tree's staging directory); neither is opened through a link.
//! 3. The driver owns the scheduler. Lanes fetch the assignments it hands them, hash each
//!    chunk as bytes arrive and send batches to the writer thread; the driver checks digests,
//!    retries, duplicates at the tail, and hears of every failure as an event. The whole-file
//!    hasher takes sealed chunks in order, from bytes the writer kept or read back from the
//!    part file; a file of one chunk needs no such pass, as its lane's digest is the whole
//!    file's.
//! 4. When every chunk is verified: sync, compare the whole-file hash with `--expect-sha256`,
//!    the server's `Repr-Digest` and the checksum `--checksum` asked the server for, rename `<dest>.part` to `<dest>`, sync the directory,
//!    remove the journal (`finish`).
//!
//! ```text
//!                  Work (one channel per lane, an assignment at a time)
//!        ┌───────────────────────────────────────────┐
//!        │                                           ▼
//!  ┌─────┴──────┐  LaneEvent: progress,        ┌────────────┐  Data  ┌───────────────┐
//!  │   driver   │◄─finished, open failed ──────┤ lane tasks ├───────►│ writer thread ├─► .part
//!  │ (owns the  │                              └────────────┘        │               ├─► journal
//!  │ Scheduler) ├──── Seal (queued after the chunk's Data) ─────────►│               │
//!  │            │◄─── failed: SinkError (disk full), at once ────────┤               │
//!  │            │                                                    └───────┬───────┘
//!  │            │◄─── HashEvent: done, chunk invalid, failed ── whole-file ◄─┘ sealed chunks
//!  └────────────┘                                                  hasher
//! ```

mod disk_space;
mod driver;
mod finish;
mod lane;
mod prepare;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::adapt::AdaptConfig;
use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::digest::Sha256Digest;
use crate::error::TransferError;
use crate::journal::{self, JournalError, JournalHeader};
use crate::kept::Budget;
use crate::plan::{ChunkIndex, PlanError, DEFAULT_CHUNK_SIZE};
use crate::progress::{LaneSnapshot, Progress, Report};
use crate::schedule::{ScheduleConfig, ScheduleFailure, Scheduler};
use crate::sink::{self, PartFile, Writer};
use crate::transport::{FirstRequest, Lane, RemoteInfo, Transport};
use crate::whole_hash;

pub use disk_space::MAX_DECLARED_SIZE;
use driver::{Driver, Ending, Inputs};
use lane::{LaneContext, LaneStart, Preopened};

/// How a download runs.
#[derive(Debug, Clone, PartialEq)]
pub struct GetConfig {
    /// Bytes per chunk; see [`DEFAULT_CHUNK_SIZE`] for the trade-offs. A resumed transfer keeps
    /// the chunk size its journal was written with.
    pub chunk_size: u64,
    /// Lanes to run; `None` takes the transport's configured parallelism. Ignored when
    /// `adapt` is set.
    pub lanes: Option<usize>,
    /// Choose the lane count from what the transfer measures, within the bounds given, and
    /// keep adjusting it ([`crate::adapt`]). Default `None`: a fixed count (`lanes`). The CLI
    /// turns it on unless a count is given.
    pub adapt: Option<AdaptConfig>,
    /// Retries, backoff and end game.
    pub schedule: ScheduleConfig,
    /// Hash every chunk and the whole file, ask the server for digests and check them.
    /// Default on; off only to measure the raw transport.
    pub verify: bool,
    /// Hash every chunk as it arrives and compare it with the server's digest of it, even
    /// when the server gave the whole file's digest (`Repr-Digest`) up front. Default off:
    /// then the whole-file hash checks every byte against the server's, and chunks are not
    /// hashed a second time, which saves a SHA-256 pass per byte on the client (and on a
    /// server that has not hashed those ranges before). Should the whole file not match,
    /// the download starts over once with every chunk checked, which finds the damaged
    /// chunks and fetches them again. Without a whole-file digest every chunk is checked
    /// regardless. On means damage is found and repaired chunk by chunk as it arrives.
    pub check_every_chunk: bool,
    /// The whole file's SHA-256 must be this.
    pub expect_sha256: Option<Sha256Digest>,
    /// Fail (keeping the part file) unless every byte was compared with a digest the server
    /// sent (per chunk or whole file) or with `expect_sha256`. Default off: a server without
    /// digests (nginx) gets a warning and a report that says so.
    pub require_digest: bool,
    /// Write `<dest>.sha256` in `sha256sum` format when done.
    pub write_sha256_file: bool,
    /// Compute the whole file's SHA-256 (the report's `sha256`) even when nothing needs it.
    /// Default on. Off, and when the server sends a digest with every chunk but none for the
    /// whole file, the chunks' digests check every byte and the whole-file pass is skipped:
    /// SHA-256 runs in order on one thread, so that pass bounds one file at one core's hash
    /// rate (about 1.9 GiB/s), where the chunks' hashes spread over the lanes. The pass still
    /// runs, from the first chunk, as soon as one chunk comes without a digest, and always
    /// when `expect_sha256`, `write_sha256_file`, an in-order `checksum` or a resume need it.
    pub whole_sha256: bool,
    /// Replace an existing destination. Default off: an existing file is never touched.
    pub overwrite: bool,
    /// Bytes a lane accumulates before handing them to the writer. Default 1 MiB.
    pub write_batch: usize,
    /// Batches queued for the writer before lanes wait. Default 64 (64 MiB at the default batch).
    pub write_queue: usize,
    /// Bytes the writer may keep in memory for the whole-file hash, so that chunks completed
    /// out of order need not be read back from the part file ([`crate::kept`]). Default
    /// 256 MiB: two chunks per lane at 8 lanes of 16 MiB, as each lane writes one chunk while
    /// others wait sealed for the prefix before them (128 MiB still read 55-65% of a 2 GiB
    /// file back over HTTP/1.1 x 8). A tree's files in flight share one such budget. 0
    /// reads every chunk back, which also checks the bytes as the part file holds them, for
    /// one more memory pass per byte.
    pub hash_memory: u64,
    /// Attempts to (re)open a lane's connection before the lane is given up. Default 5.
    pub lane_open_attempts: u32,
    /// Ask the server for its checksum of the whole file with this algorithm (HTTP
    /// `Want-Digest`, as gfal2 does for the WLCG's adler32) before fetching, compute the same
    /// over the bytes received, and fail (part file kept) when they differ or the server has
    /// none. Default `None`.
    pub checksum: Option<ChecksumAlgorithm>,
    /// Send each lane's next request before its current body ends, on another stream
    /// (HTTP/2, QUIC) or pipelined on the lane's connection (HTTP/1.1), so no lane idles a
    /// round trip between chunks. `None` (default) takes the transport's choice
    /// ([`Transport::request_ahead`], asked again before each request: on for HTTP/1.1, and
    /// for HTTP/2 and QUIC when their connection window holds two stream windows per lane
    /// sharing it); never where the windows are too small.
    pub request_ahead: Option<bool>,
    /// Cut the last [`crate::plan::TAPER_CHUNKS`] chunks' worth of a file of at least twice
    /// that into pieces of a half, a quarter and an eighth of `chunk_size`, so that the lanes
    /// finish together instead of up to two chunk times apart
    /// ([`crate::plan::ChunkPlan::tapered`]). Default on; off gives every chunk `chunk_size`
    /// bytes. A resumed transfer keeps the plan its journal was written with.
    pub taper: bool,
    /// Lanes after the first ask for their first chunk (lane `i` for chunk `i`) as soon as
    /// their connection is up, before the first answer has told the size, instead of a round
    /// trip after it ([`Transport::open_speculative`]). A file too small for some lanes costs
    /// them a `416`; an answer that describes another resource than the first one's is
    /// dropped. Default on; never on a resume, whose chunks left are not the first ones.
    pub speculate: bool,
    /// Cap the payload rate of all lanes together (`--limit-rate`). Clones of one limiter
    /// share its bucket, so a tree's files in flight share the cap too. Default `None`.
    pub rate_limit: Option<crate::rate::RateLimiter>,
}

impl Default for GetConfig {
    fn default() -> Self {
        Self {
            chunk_size: DEFAULT_CHUNK_SIZE,
            lanes: None,
            adapt: None,
            schedule: ScheduleConfig::default(),
            verify: true,
            check_every_chunk: false,
            whole_sha256: true,
            expect_sha256: None,
            require_digest: false,
            write_sha256_file: false,
            overwrite: false,
            write_batch: 1 << 20,
            write_queue: 64,
            hash_memory: 256 << 20,
            lane_open_attempts: 5,
            checksum: None,
            request_ahead: None,
            taper: true,
            speculate: true,
            rate_limit: None,
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
    #[error("{path} is a symbolic link; xfer never writes a part file or journal through a link (its target is left alone): remove it and run again")]
    StagingLink { path: PathBuf },
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
    #[error("{path}: whole-file {} is {} but the server's Digest says {}; kept as {part}", expected.algorithm, actual.to_hex(), expected.to_hex())]
    ChecksumMismatch {
        path: PathBuf,
        part: PathBuf,
        actual: Checksum,
        expected: Checksum,
    },
    #[error("asking {url} for its {algorithm} of the whole file")]
    ServerChecksum {
        url: String,
        algorithm: ChecksumAlgorithm,
        #[source]
        source: TransferError,
    },
    #[error("{url} sent no {algorithm} of the whole file (Want-Digest: {}); nothing was fetched", algorithm.rfc3230_name())]
    NoServerChecksum {
        url: String,
        algorithm: ChecksumAlgorithm,
    },
    #[error("{url} declares {size} bytes, more than any file xfer writes ({max}); nothing was written", max = MAX_DECLARED_SIZE)]
    ImplausibleSize { url: String, size: u64 },
    #[error("{path}: the server declares {size} bytes but the filesystem has {available} free; nothing was written")]
    NoRoom {
        path: PathBuf,
        size: u64,
        available: u64,
    },
    #[error("{path}: {what}, and --require-digest was given; kept as {part}")]
    Unverified {
        path: PathBuf,
        part: PathBuf,
        what: String,
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
    part_file: Option<PartFileWrapper>,
    staging: Staging,
    known: Option<RemoteInfo>,
    hash_budget: Option<Budget>,
    /// Whether the last attempt left its chunks to the whole-file hash alone; its mismatch
    /// then sends the download round once more with every chunk checked.
    chunks_unchecked: bool,
}

/// Where a download keeps its part file and journal until it is complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staging {
    pub part: PathBuf,
    pub journal: PathBuf,
}

impl Staging {
    /// `<dest>.part` and `<dest>.xfer-journal`, beside the destination: for a single file,
    /// whose neighbours no remote listing names.
    pub fn beside(dest: &std::path::Path) -> Self {
        Self {
            part: journal::part_path(dest),
            journal: journal::journal_path(dest),
        }
    }
}

/// Turns the opened part file into what the writer writes through.
type PartFileWrapper = Box<dyn FnMut(std::fs::File) -> Box<dyn PartFile> + Send>;

impl Download {
    /// `source` names the resource in the journal (the URL the user gave, before redirects), so
    /// a later run of the same command finds it.
    pub fn new(
        transport: Arc<dyn Transport>,
        source: impl Into<String>,
        dest: impl Into<PathBuf>,
        config: GetConfig,
    ) -> Self {
        let dest = dest.into();
        Self {
            transport,
            source: source.into(),
            staging: Staging::beside(&dest),
            dest,
            config,
            progress: Progress::new(),
            part_file: None,
            known: None,
            hash_budget: None,
            chunks_unchecked: false,
        }
    }

    /// Keep the part file and journal at `staging` instead of beside the destination: a tree
    /// keeps them where no listed name can land. Both must be on the destination's filesystem
    /// (the part file is renamed into place).
    pub fn with_staging(mut self, staging: Staging) -> Self {
        self.staging = staging;
        self
    }

    /// Keep bytes for the whole-file hash against `budget`, shared with other downloads (a
    /// tree's files in flight share one), instead of one of `GetConfig::hash_memory` of its own.
    pub fn share_hash_budget(mut self, budget: Budget) -> Self {
        self.hash_budget = Some(budget);
        self
    }

    /// Take `info` for what `stat` would say, and skip it: a tree listing that already gave
    /// the size and validators saves the round trip per file. A wrong `info` costs no wrong
    /// bytes: ranges carry `info`'s validator and size, and a remote that differs is refused
    /// (`RemoteChanged`).
    pub fn with_known_remote(mut self, info: RemoteInfo) -> Self {
        self.known = Some(info);
        self
    }

    /// Route the part file's writes and syncs through `wrap`: to inject faults in tests (a
    /// disk that fills up after some bytes), or to account for disk I/O. Called each time the
    /// part file is opened (twice when a server turns out to ignore ranges).
    pub fn wrap_part_file(
        mut self,
        wrap: impl FnMut(std::fs::File) -> Box<dyn PartFile> + Send + 'static,
    ) -> Self {
        self.part_file = Some(Box::new(wrap));
        self
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
    pub async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Report, GetError> {
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
        if let Some(a) = &cfg.adapt {
            a.validate().map_err(|e| GetError::Config(e.to_string()))?;
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
        let (mut info, mut starts) = match self.known.take() {
            Some(info) => (info, Vec::new()),
            None => {
                // A journal means a resume, whose chunks left to fetch are not the first ones.
                let speculate =
                    cfg.speculate && std::fs::symlink_metadata(&self.staging.journal).is_err();
                open_first(Arc::clone(&self.transport), &self.source, cfg, speculate).await?
            }
        };
        tracing::info!(url = %info.url, size = info.size, etag = ?info.etag, ranges = info.accepts_ranges, "remote");
        let server_checksum = match cfg.checksum {
            Some(algorithm) => {
                Some(server_checksum(self.transport.as_ref(), &info, algorithm).await?)
            }
            None => None,
        };
        let mut shutdown = std::pin::pin!(shutdown);
        let mut check_every_chunk = self.config.check_every_chunk;
        loop {
            let starts = std::mem::take(&mut starts);
            match self
                .attempt(
                    &info,
                    server_checksum.as_ref(),
                    starts,
                    started,
                    check_every_chunk,
                    shutdown.as_mut(),
                )
                .await
            {
                Err(GetError::Chunk {
                    source: TransferError::RangesIgnored { peer },
                    ..
                }) if info.accepts_ranges => {
                    // It said it serves ranges and does not: what it does serve is the whole
                    // resource, which one sequential stream can take.
                    tracing::warn!(%peer, url = %info.url, "the server advertises byte ranges but ignores them: starting over with one sequential stream, no resume");
                    info.accepts_ranges = false;
                }
                Err(GetError::WholeDigestMismatch { actual, .. })
                    if self.chunks_unchecked && info.sha256.is_some_and(|s| s != actual) =>
                {
                    // Bytes were damaged on their way (or on this disk) and no chunk was
                    // hashed on its own: start over with every chunk checked against the
                    // server's digest of it, which finds and fetches again the damaged ones.
                    tracing::warn!(url = %info.url, %actual, "whole file does not match the server's Repr-Digest; fetching it again with every chunk checked");
                    let journal_path = &self.staging.journal;
                    if let Err(source) = crate::nofollow::remove_if_present(journal_path) {
                        return Err(GetError::Io {
                            what: "removing the journal of a mismatched file",
                            path: journal_path.clone(),
                            source,
                        });
                    }
                    check_every_chunk = true;
                }
                other => return other,
            }
        }
    }

    /// One try at the transfer, as `info` describes the remote; `starts` are lanes opened
    /// while learning it.
    async fn attempt(
        &mut self,
        info: &RemoteInfo,
        server_checksum: Option<&Checksum>,
        mut starts: Vec<LaneStart>,
        started: Instant,
        check_every_chunk: bool,
        shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Report, GetError> {
        let cfg = &self.config;
        let part_path = self.staging.part.clone();
        let journal_path = self.staging.journal.clone();
        let header = JournalHeader {
            url: self.source.clone(),
            size: info.size,
            etag: info.etag.clone(),
            last_modified: info.last_modified.clone(),
            chunk_size: cfg.chunk_size,
            tapered: cfg.taper,
            sha256: info.sha256.map(|d| d.to_hex()),
        };
        let lanes = if info.accepts_ranges {
            initial_lanes(cfg, self.transport.as_ref())
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
                prepare::prepare(&info, &header, &part_path, &journal_path, &cfg)
            })
            .await
            .map_err(|e| GetError::Config(format!("preparing the destination panicked: {e}")))??
        };
        let plan = prepared.plan;
        let mut server_checked = vec![false; plan.chunk_count() as usize];
        for r in prepared.claimed.iter().filter(|r| r.server_checked) {
            if let Some(flag) = server_checked.get_mut(r.chunk as usize) {
                *flag = true;
            }
        }
        let resumed_server_checked = server_checked.iter().filter(|&&c| c).count() as u64;
        self.progress.update(|p| {
            p.total = info.size;
            p.resumed = prepared.resumed_bytes;
            p.verified = prepared.resumed_bytes;
            p.server_digest_chunks = resumed_server_checked;
            p.lanes = LaneSnapshot::fresh(lanes);
        });

        // The whole-file hasher takes each sealed chunk in order, from the writer's memory or
        // read back from the part file. A file of one chunk, fetched now and hashed by its
        // lane, needs no second pass: that chunk's digest is the whole file's (most files of a
        // tree are one chunk).
        //
        // adler32 combines exactly, so on a fresh transfer each lane computes its chunks'
        // and the file's follows at the end: no in-order pass for it. A resume takes the
        // in-order path, which reads the journal's chunks back (checking them against their
        // journalled digests) and so computes their adler32 from the bytes on disk.
        let (sealed_tx, sealed_rx) = std::sync::mpsc::channel();
        let chunk_adler32 =
            cfg.checksum == Some(ChecksumAlgorithm::Adler32) && prepared.claimed.is_empty();
        let in_order_checksum = cfg.checksum.filter(|_| !chunk_adler32);
        let verify_whole = cfg.verify || cfg.expect_sha256.is_some() || in_order_checksum.is_some();
        let whole_from_chunk = cfg.verify
            && in_order_checksum.is_none()
            && plan.chunk_count() == 1
            && prepared.claimed.is_empty();
        // The whole-file pass waits until a chunk arrives without the server's digest, if
        // nothing else needs it: until then each chunk's own check covers its bytes.
        let on_demand = (!cfg.whole_sha256
            && cfg.verify
            && verify_whole
            && !whole_from_chunk
            && prepared.claimed.is_empty()
            && in_order_checksum.is_none()
            && cfg.expect_sha256.is_none()
            && info.sha256.is_none()
            && !cfg.write_sha256_file)
            .then(|| Arc::new(AtomicBool::new(false)));
        let (hasher, hashes) = if verify_whole && !whole_from_chunk {
            let (hash_tx, hash_rx) = mpsc::unbounded_channel();
            let read = crate::nofollow::open_read(&part_path).map_err(|source| {
                prepare::staging_error("opening for hashing", part_path.clone(), source)
            })?;
            let claimed = prepared
                .claimed
                .iter()
                .map(|r| (r.chunk, r.sha256))
                .collect();
            let job = whole_hash::HashJob {
                plan,
                also: in_order_checksum,
                part: read,
                part_path: part_path.clone(),
                claimed,
                wanted: on_demand.clone(),
            };
            let thread =
                whole_hash::spawn(job, sealed_rx, hash_tx).map_err(|source| GetError::Io {
                    what: "starting the hash thread for",
                    path: part_path.clone(),
                    source,
                })?;
            (Some(thread), Some(hash_rx))
        } else {
            (None, None)
        };
        // With the server's digest of the whole file, the whole-file hash checks every byte;
        // hashing each chunk too would be a second SHA-256 pass over the same bytes.
        let check_chunks =
            cfg.verify && (check_every_chunk || info.sha256.is_none() || hasher.is_none());
        self.chunks_unchecked = cfg.verify && !check_chunks;
        if self.chunks_unchecked {
            tracing::debug!(url = %info.url, "chunks not hashed one by one: the server's Repr-Digest checks the whole file");
        }
        let journal = prepared.journal;
        let journalled = journal.is_some();
        let part: Box<dyn PartFile> = match self.part_file.as_mut() {
            Some(wrap) => wrap(prepared.part),
            None => Box::new(prepared.part),
        };
        // Without a hasher nothing would take the kept bytes.
        let keep = match (&hasher, &self.hash_budget) {
            (None, _) => Budget::new(0),
            (Some(_), Some(shared)) => shared.clone(),
            (Some(_), None) => Budget::new(cfg.hash_memory),
        };
        let mut writer = Writer::start(
            part,
            part_path.clone(),
            journal,
            cfg.write_queue,
            sealed_tx,
            keep,
        )?;

        let done: Vec<ChunkIndex> = prepared.claimed.iter().map(|r| r.chunk).collect();
        let sched = Scheduler::new(plan, lanes, done, cfg.schedule.clone());
        let ctx = LaneContext {
            transport: Arc::clone(&self.transport),
            remote: info.clone(),
            check_chunks,
            chunk_adler32,
            whole: !info.accepts_ranges,
            ahead: match (self.transport.request_ahead(), cfg.request_ahead) {
                (Some(_), Some(asked)) => lane::Ahead::Fixed(asked),
                (None, Some(true)) => {
                    tracing::warn!("request ahead needs a connection window of at least two stream windows per lane; not sending requests ahead");
                    lane::Ahead::Fixed(false)
                }
                (_, Some(false)) => lane::Ahead::Fixed(false),
                (_, None) => lane::Ahead::Transport,
            },
            write_batch: cfg.write_batch,
            writer: writer.tx.clone(),
            progress: self.progress.clone(),
            open_attempts: cfg.lane_open_attempts.max(1),
            stop: CancellationToken::new(),
            latency_ns: std::sync::atomic::AtomicU64::new(u64::MAX),
            rate_limit: cfg.rate_limit.clone(),
        };
        // The first request's measure of a round trip, for the controller's windows.
        let rtt = starts.first().and_then(|s| s.first.as_ref()).map(|f| f.1);
        let lane_count = match capped_adapt(cfg) {
            // A server without ranges gets its one stream; a file of a chunk or two has
            // nothing to adapt.
            Some(a) if info.accepts_ranges && plan.chunk_count() > 2 => {
                Some(crate::lane_sampler::LaneSampler::new(a, rtt, started))
            }
            _ => None,
        };
        // Lanes opened beyond what the transfer uses (a server without ranges gets one) go
        // back to the transport when dropped.
        starts.truncate(lanes);
        starts.resize_with(lanes, LaneStart::default);
        let (driver, events) = Driver::start(
            sched,
            starts,
            ctx,
            self.source.clone(),
            server_checked,
            lane_count,
        );
        // Only per-chunk digests could vouch for the file: one chunk without is enough to
        // know `require_digest` will refuse it, so the rest is not fetched.
        let driver = driver
            .refuse_unvouched(
                cfg.require_digest
                    && info.sha256.is_none()
                    && cfg.expect_sha256.is_none()
                    && server_checksum.is_none(),
            )
            .combine_chunk_adler32(chunk_adler32)
            .whole_on_demand(on_demand.clone());
        let inputs = Inputs {
            events,
            writer_failed: writer.failed.take(),
            hashes,
            whole_from_chunk,
        };
        let (ending, adaptive_lanes) = driver.run(inputs, shutdown).await;

        // Flush what was verified, whatever happens next: that is what a re-run resumes from.
        let synced = writer.finish().await;
        if let Some(h) = hasher {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
        let (whole_digest, whole_checksum) = match ending {
            Ending::Complete { sha256, checksum } => (sha256, checksum),
            Ending::Interrupted => {
                synced?;
                return Err(GetError::Interrupted);
            }
            // The error that ended it, not the writer's echo of a write error.
            Ending::Failed(e) => return Err(e),
            Ending::Unvouched { chunk } => {
                synced?;
                return Err(GetError::Unverified {
                    path: self.dest.clone(),
                    part: part_path,
                    what: format!(
                        "the server sent no digest for chunk {chunk} nor for the whole file"
                    ),
                });
            }
        };
        synced?;
        let mut verification =
            finish::check_whole(cfg, info, whole_digest, &self.dest, &part_path)?;
        // Skipped, the whole-file pass left each chunk's SHA-256 as the local hashing.
        verification.local_hash |= on_demand.is_some();
        verification.server_checksum =
            finish::check_checksum(server_checksum, whole_checksum, &self.dest, &part_path)?;
        verification.chunks = u64::from(plan.chunk_count());
        verification.chunks_with_server_digest = self.progress.snapshot().server_digest_chunks;
        finish::require_evidence(cfg, &verification, &self.dest, &part_path)?;
        prepare::finalize(
            &part_path,
            &self.dest,
            journalled.then_some(journal_path.as_path()),
        )?;
        if let (true, Some(d)) = (cfg.write_sha256_file, whole_digest) {
            prepare::write_sha256_file(&self.dest, d)?;
        }
        Ok(finish::report(finish::Finished {
            info,
            dest: &self.dest,
            transport: self.transport.as_ref(),
            plan: &plan,
            progress: &self.progress,
            started,
            whole_digest,
            verification,
            adaptive_lanes,
        }))
    }
}

/// The server's checksum of the whole file, asked before any byte is fetched so that a server
/// without it costs no transfer. The ranges that follow carry `info`'s validator, so the bytes
/// fetched are of the version the checksum describes.
async fn server_checksum(
    transport: &dyn Transport,
    info: &RemoteInfo,
    algorithm: ChecksumAlgorithm,
) -> Result<Checksum, GetError> {
    match transport.checksum(algorithm).await {
        Ok(Some(c)) if c.algorithm == algorithm => Ok(c),
        Ok(_) => Err(GetError::NoServerChecksum {
            url: info.url.clone(),
            algorithm,
        }),
        Err(source) => Err(GetError::ServerChecksum {
            url: info.url.clone(),
            algorithm,
            source,
        }),
    }
}

/// Lanes to start with: the controller's starting count when it adapts, else the count
/// asked for, else the transport's.
fn initial_lanes(cfg: &GetConfig, transport: &dyn Transport) -> usize {
    match capped_adapt(cfg) {
        Some(a) => a.start_lanes(),
        None => cfg
            .lanes
            .unwrap_or_else(|| capped_lanes(cfg, transport.default_lanes())),
    }
    .max(1)
}

/// Under a rate cap, fewer lanes than the transport's default may do
/// ([`crate::rate::RateLimit::download_lanes`]).
fn capped_lanes(cfg: &GetConfig, default: usize) -> usize {
    match &cfg.rate_limit {
        Some(l) => l.limit().download_lanes(default),
        None => default,
    }
}

/// The controller's configuration; under a rate cap it starts at its fewest lanes: it adds
/// lanes only for a gain in goodput, which a capped transfer shows only while its lanes
/// cannot reach the cap, so a cap one connection carries is not spread over eight.
fn capped_adapt(cfg: &GetConfig) -> Option<AdaptConfig> {
    let mut a = cfg.adapt.clone()?;
    if cfg.rate_limit.is_some() {
        a.initial_lanes = a.min_lanes;
    }
    Some(a)
}

/// One round trip of the path, for a lane's first request ahead: the time its first request
/// took since `asked`, over the round trips it counted (connection set-up included).
fn one_round_trip(lane: &dyn Lane, asked: Instant) -> std::time::Duration {
    let round_trips = lane
        .first_round_trips()
        .map_or(1, |r| u32::from(r.total().max(1)));
    asked.elapsed() / round_trips
}

/// Learn the resource with lane 0's first request while the other lanes connect: each
/// lane then starts with its connection, lane 0 with the body of the first chunk. With
/// `speculate`, lane `i` asks for chunk `i` as soon as its connection is up, before the
/// size is known ([`Transport::open_speculative`]), and starts with that body too.
async fn open_first(
    transport: Arc<dyn Transport>,
    source: &str,
    cfg: &GetConfig,
    speculate: bool,
) -> Result<(RemoteInfo, Vec<LaneStart>), GetError> {
    let lanes = initial_lanes(cfg, transport.as_ref());
    let chunk_size = cfg.chunk_size;
    let want_digest = cfg.verify;
    let pending: Vec<_> = (1..lanes)
        .map(|index| {
            let transport = Arc::clone(&transport);
            // Lanes take chunks in order on a fresh download: lane `i` gets chunk `i`.
            let guess = (index as u64)
                .checked_mul(chunk_size)
                .and_then(|start| Some(start..start.checked_add(chunk_size)?))
                .filter(|_| speculate);
            tokio::spawn(async move {
                let Some(range) = guess else {
                    let mut lane = transport.open_lane(index).await?;
                    lane.connect().await?;
                    return Ok(Preopened { lane, first: None });
                };
                let asked = Instant::now();
                let s = transport
                    .open_speculative(index, range, want_digest)
                    .await?;
                let rtt = one_round_trip(s.lane.as_ref(), asked);
                Ok(Preopened {
                    first: s.answer.map(|(info, body)| (info, body, rtt)),
                    lane: s.lane,
                })
            })
        })
        .collect();
    let first = FirstRequest {
        len: chunk_size,
        want_digest,
    };
    let asked = Instant::now();
    let opened = prepare::open_with_retries(transport.as_ref(), source, first, &cfg.schedule).await;
    let opened = match opened {
        Ok(o) => o,
        Err(e) => {
            for p in &pending {
                p.abort();
            }
            return Err(e);
        }
    };
    let rtt = one_round_trip(opened.lane.as_ref(), asked);
    let first = opened.first.map(|body| (body, rtt));
    let mut starts = vec![LaneStart {
        opened: Some(opened.lane),
        pending: None,
        first,
    }];
    starts.extend(pending.into_iter().map(|p| LaneStart {
        pending: Some(p),
        ..LaneStart::default()
    }));
    Ok((opened.info, starts))
}
