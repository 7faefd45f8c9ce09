//! Whole directory trees: `xfer get https://host/run-42/ ./run-42/`.
//!
//! The tree is listed as it is fetched (`lister`); every name is checked ([`RelPath`]) and
//! reached in the destination without following links (`dest`); `filter` applies
//! `--include`/`--exclude`; a name listed twice is one entry, or refused when the two
//! differ; files already complete locally (by `--compare`: size, mtime or checksum) are
//! skipped (`journal`); `prune` removes what a complete listing no longer names (`--delete`);
//! a dry run plans all of it and writes nothing; the rest run as
//! single-file [`Download`]s, several at once, over one transport whose connections they all
//! share (`driver`), with their part files and journals in a staging directory no listed
//! name can reach (`staging`).
//!
//! ```text
//!  list_tree ─ entries ─► driver: filter, case check, up to date? ─► queue
//!                           │ launch while files < max_files and free lanes ≥ what the file needs
//!                           ▼
//!                  Download × N (one sibling transport each, lanes mapped into the shared
//!                  budget) ─► verified, renamed, mtime set ─► tree journal line
//! ```
//!
//! Defaults ([`TreeConfig::default`]) are sized for the issue's dataset shape — thousands of
//! files, median a few hundred KiB — on 50-200 ms, 1 Gbit/s paths. From xfer's manifest a
//! small file is one request, so a lane spends one round trip asking for every file it
//! carries; to keep a bandwidth-delay product (12.5 MB at 100 ms, 25 MB at 200 ms) moving,
//! the files in flight must hold several BDPs: 256 requests × the ~470 KB mean file ≈ 120 MB,
//! five BDPs at 200 ms. Over HTTP/2 (the CLI's tree default, `auto`) and QUIC those are
//! streams over one or two connections, whose congestion windows every file shares and keeps
//! warm; over HTTP/1.1 each lane is a TCP connection with its own handshake and slow start,
//! and servers cap connections per client (`xfer serve`: 128), so the budget is 64 there.
//! Measured in docs/results.md ("Trees").

mod dest;
mod driver;
mod filter;
mod journal;
mod lane_map;
mod lister;
mod prune;
mod staging;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use xfer_common::listing::RelPath;
use xfer_core::adapt::{AdaptConfig, AdaptReport};
use xfer_core::get::{Download, GetConfig, Staging};
use xfer_core::progress::Progress;
use xfer_core::transport::Transport;

pub use dest::{DestError, DestRoot};
pub use filter::{GlobError, PathFilter};
pub use journal::{FileRecord, TreeJournal, TreeJournalError};
pub use lister::{url_of, ListError, ListingCap, ListingFormat, ListingLimits};
pub use staging::{staged_name, StagingDir, STAGING_DIR};

/// How a tree transfer runs. Per-file behaviour (chunk size, verification, retries per
/// chunk) is [`TreeConfig::get`].
#[derive(Debug, Clone, PartialEq)]
pub struct TreeConfig {
    /// Settings every file's download uses. `lanes` there is the most one file may use
    /// (`None`: the transport's configured parallelism, 8 by default); `overwrite` is ignored,
    /// a file that differs from the server's is replaced.
    pub get: GetConfig,
    /// Files in flight at once. Default 256 (see the module docs for the arithmetic).
    pub max_files: usize,
    /// Requests in flight at once over all files: HTTP/2 and QUIC streams, or HTTP/1.1
    /// connections. A file no bigger than one chunk takes one; a bigger one up to
    /// `get.lanes`. Default 256.
    pub lanes: usize,
    /// The budget instead of `lanes` once the server turns out to speak HTTP/1.1, where every
    /// lane is a connection. Default 64.
    pub http1_lanes: usize,
    /// Attempts per file; a failed file is queued again (resuming its chunks) until then.
    /// Default 3.
    pub file_attempts: u32,
    /// How a re-run decides that a local file is already the listed one ([`Compare`]).
    pub compare: Compare,
    /// Remove local files and directories the listing no longer names, once the listing is
    /// complete and every file is in place (never otherwise, never the staging directory,
    /// never a path the filters leave out).
    pub delete: bool,
    /// List and compare, then report what would be fetched, skipped and deleted
    /// ([`TreeReport::plan`]); nothing is written, created or removed.
    pub dry_run: bool,
    /// Fetch only paths matching one of these globs (all when empty).
    pub include: Vec<String>,
    /// Skip paths matching any of these globs, and everything below a matching directory.
    pub exclude: Vec<String>,
    /// Treat the destination as case-insensitive (refuse names that differ only by case);
    /// `None` probes it with a file.
    pub case_insensitive: Option<bool>,
    /// Adapt the lane budget to what the tree measures, starting from `lanes` (or
    /// `http1_lanes`) brought within the bounds ([`xfer_core::adapt`], the controller a
    /// single download uses). Default `None`: the budget stays fixed.
    pub adapt: Option<AdaptConfig>,
    /// Caps on the listing: entries, directories, depth and time waiting for the server.
    pub listing: ListingLimits,
}

impl Default for TreeConfig {
    fn default() -> Self {
        Self {
            get: GetConfig::default(),
            max_files: 256,
            lanes: 256,
            http1_lanes: 64,
            file_attempts: 3,
            compare: Compare::default(),
            delete: false,
            dry_run: false,
            include: Vec::new(),
            exclude: Vec::new(),
            case_insensitive: None,
            adapt: None,
            listing: ListingLimits::default(),
        }
    }
}

/// How a re-run decides that a local file is already the listed one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compare {
    /// The same size.
    Size,
    /// The same size and modification time (xfer gives a fetched file the listed time, or the
    /// server's `Last-Modified` when the listing has none; failing both, the size and ETag
    /// recorded when it was fetched).
    #[default]
    Mtime,
    /// The same content: the local file hashed and compared with the listing's SHA-256, else
    /// the server's `Repr-Digest` sha-256, else its adler32 (`Want-Digest`); a server that
    /// offers none is said so and the file fetched.
    Checksum,
}

/// What a dry run would do with one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanEntry {
    /// `fetch`, `skip` or `delete`.
    pub action: &'static str,
    pub path: String,
    pub reason: String,
}

/// Why a tree transfer could not run at all. Failures of single files and of the listing are
/// in the [`TreeReport`] instead.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error(transparent)]
    Dest(#[from] DestError),
    #[error(transparent)]
    Journal(#[from] TreeJournalError),
    #[error(transparent)]
    Glob(#[from] GlobError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("interrupted; run the same command again to resume")]
    Interrupted { report: Box<TreeReport> },
}

/// What kind of failure ended one file, for exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Network, TLS, status, protocol; or a listing that could not be read.
    Remote,
    /// A digest did not match.
    Verify,
    /// The local side: a link in the way, a full disk, a name that collides.
    Local,
}

/// A file (or the listing) that failed, and why.
#[derive(Debug, Clone, Serialize)]
pub struct FailedFile {
    pub path: String,
    pub kind: FailureKind,
    pub error: String,
}

/// What a tree transfer did; `xfer get --json` prints it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TreeReport {
    pub url: String,
    pub dest: String,
    pub protocol: String,
    pub listing: Option<ListingFormat>,
    /// Files the listing named that the filters kept.
    pub files: u64,
    /// Files fetched (completely or the rest of a partial one) in this run.
    pub fetched: u64,
    /// Files already complete in the destination.
    pub skipped: u64,
    pub directories: u64,
    /// Bytes of the files fetched in this run, as the server stated them.
    pub bytes: u64,
    /// Bytes of partly fetched files that an earlier run had already verified.
    pub resumed_bytes: u64,
    /// Bytes received in this run, re-fetches included.
    pub received_bytes: u64,
    pub seconds: f64,
    /// Bits per second of the files fetched in this run.
    pub goodput_bps: f64,
    /// Every file that failed, with its reason; a failure of the whole listing is named `""`,
    /// a subdirectory whose listing failed by its path.
    pub failed: Vec<FailedFile>,
    /// How local files were compared with the listing.
    pub compare: Compare,
    /// Whether this was a dry run: nothing written, [`TreeReport::plan`] says what would be.
    pub dry_run: bool,
    /// A dry run's plan: every file to fetch or skip, with the reason, and every path
    /// `--delete` would remove.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<PlanEntry>,
    /// Paths removed because the listing no longer names them (`--delete`).
    pub deleted: Vec<String>,
    /// Why `--delete` removed nothing, when it was asked and did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_skipped: Option<String>,
    /// Files fetched because `--compare checksum` could not compare them: the server offers
    /// no digest xfer can check a local file against.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_compared: Vec<String>,
    /// The lane budget the controller chose and why, when it adapted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive_lanes: Option<AdaptReport>,
}

impl TreeReport {
    pub fn summary(&self) -> String {
        if self.dry_run {
            let count = |a| self.plan.iter().filter(|p| p.action == a).count();
            return format!(
                "dry run: {} files listed, {} to fetch, {} to skip, {} to delete; nothing changed",
                self.files,
                count("fetch"),
                count("skip"),
                count("delete")
            );
        }
        let mut s = format!(
            "{} files ({} fetched, {} already complete), {} in {:.2} s, {} over {}",
            self.files,
            self.fetched,
            self.skipped,
            xfer_core::size::HumanBytes(self.bytes),
            self.seconds,
            xfer_core::progress::format_bps(self.goodput_bps),
            self.protocol
        );
        if !self.deleted.is_empty() {
            s.push_str(&format!(", {} deleted", self.deleted.len()));
        }
        if !self.failed.is_empty() {
            s.push_str(&format!(", {} failed", self.failed.len()));
        }
        s
    }
}

/// Live counters of a tree transfer, for a progress display.
#[derive(Debug, Clone, Default)]
pub struct TreeProgress {
    inner: Arc<Mutex<Counters>>,
}

#[derive(Debug, Default)]
struct Counters {
    files_total: u64,
    files_done: u64,
    files_failed: u64,
    listing_done: bool,
    bytes_total: u64,
    bytes_done: u64,
    received_done: u64,
    running: Vec<(u64, Progress)>,
}

/// A moment of [`TreeProgress`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TreeSnapshot {
    /// Files to fetch or check so far; grows while the listing streams in.
    pub files_total: u64,
    /// Files complete (fetched or found complete) or failed.
    pub files_done: u64,
    pub files_failed: u64,
    pub listing_done: bool,
    /// Bytes of the files to fetch, as listed so far.
    pub bytes_total: u64,
    /// Bytes verified so far (finished files and the verified part of running ones).
    pub bytes_done: u64,
    /// Bytes received so far in this run.
    pub received: u64,
}

impl TreeProgress {
    pub fn snapshot(&self) -> TreeSnapshot {
        let Ok(c) = self.inner.lock() else {
            return TreeSnapshot::default();
        };
        let (mut verified, mut received) = (c.bytes_done, c.received_done);
        for (_, p) in &c.running {
            let s = p.snapshot();
            verified += s.verified.saturating_sub(s.resumed);
            received += s.received;
        }
        TreeSnapshot {
            files_total: c.files_total,
            files_done: c.files_done,
            files_failed: c.files_failed,
            listing_done: c.listing_done,
            bytes_total: c.bytes_total,
            bytes_done: verified,
            received,
        }
    }

    fn update(&self, f: impl FnOnce(&mut Counters)) {
        if let Ok(mut c) = self.inner.lock() {
            f(&mut c);
        }
    }
}

/// A download of the tree at a directory URL into a local directory.
pub struct TreeDownload {
    transport: Arc<dyn Transport>,
    root_url: String,
    dest: PathBuf,
    config: TreeConfig,
    progress: TreeProgress,
}

impl TreeDownload {
    /// `transport` is made for `root_url` (which must end in `/`); every file is fetched over
    /// a [`Transport::sibling`] of it.
    pub fn new(
        transport: Arc<dyn Transport>,
        root_url: impl Into<String>,
        dest: impl Into<PathBuf>,
        config: TreeConfig,
    ) -> Self {
        Self {
            transport,
            root_url: root_url.into(),
            dest: dest.into(),
            config,
            progress: TreeProgress::default(),
        }
    }

    pub fn progress(&self) -> TreeProgress {
        self.progress.clone()
    }

    /// Run to the end of the listing and of every file.
    pub async fn run(self) -> Result<TreeReport, TreeError> {
        self.run_until(std::future::pending()).await
    }

    /// Run until done or until `shutdown` resolves: then every file stops, keeping its journal,
    /// and [`TreeError::Interrupted`] carries what was done.
    pub async fn run_until(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<TreeReport, TreeError> {
        let cfg = &self.config;
        if cfg.max_files == 0 || cfg.lanes == 0 || cfg.http1_lanes == 0 || cfg.file_attempts == 0 {
            return Err(TreeError::Config(
                "max_files, lanes, http1_lanes and file_attempts must be at least 1".into(),
            ));
        }
        if let Some(a) = &cfg.adapt {
            a.validate().map_err(|e| TreeError::Config(e.to_string()))?;
        }
        cfg.listing.validate().map_err(TreeError::Config)?;
        if !self.root_url.ends_with('/') {
            return Err(TreeError::Config(format!(
                "a tree URL ends in `/`: {}",
                self.root_url
            )));
        }
        let filter = PathFilter::new(&cfg.include, &cfg.exclude)?;
        // A dry run into a destination that does not exist yet creates none: an empty
        // directory of its own stands in (everything is then to fetch) and goes at the end.
        let stand_in = (cfg.dry_run && !self.dest.exists()).then(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            std::env::temp_dir().join(format!("xfer-dry-run-{}-{nanos}", std::process::id()))
        });
        let root = DestRoot::open(stand_in.as_deref().unwrap_or(&self.dest))?;
        let case_insensitive = match cfg.case_insensitive {
            Some(v) => v,
            None => root.is_case_insensitive()?,
        };
        if !cfg.dry_run {
            root.staging()
                .adopt_legacy_journal(&legacy_journal_path(&self.dest)?)?;
        }
        let journal = TreeJournal::open(&root.staging().tree_journal())?;
        let result = driver::run(
            driver::Setup {
                transport: self.transport,
                root_url: self.root_url,
                root,
                journal,
                filter,
                case_insensitive,
                config: self.config,
                progress: self.progress,
            },
            shutdown,
        )
        .await;
        if let Some(dir) = stand_in {
            let _ = std::fs::remove_dir(&dir);
        }
        result.map(|mut r| {
            r.dest = self.dest.display().to_string();
            r
        })
    }
}

/// `<dest>.xfer-tree-journal`, beside the destination directory, where the tree journal was
/// kept before the staging directory; a journal found there is moved in.
pub fn legacy_journal_path(dest: &Path) -> Result<PathBuf, TreeError> {
    let abs = std::path::absolute(dest)
        .map_err(|e| TreeError::Config(format!("{}: {e}", dest.display())))?;
    let mut name = abs
        .components()
        .next_back()
        .and_then(|c| match c {
            std::path::Component::Normal(n) => Some(n.to_os_string()),
            _ => None,
        })
        .ok_or_else(|| {
            TreeError::Config(format!(
                "{}: name the destination directory (not `/`, `.` or `..`)",
                dest.display()
            ))
        })?;
    name.push(".xfer-tree-journal");
    Ok(abs.with_file_name(name))
}

/// A file to fetch.
#[derive(Debug, Clone)]
struct FileJob {
    id: u64,
    path: RelPath,
    size: Option<u64>,
    modified: Option<std::time::SystemTime>,
    etag: Option<String>,
    sha256: Option<xfer_core::Sha256Digest>,
    attempts: u32,
    /// A local file is there but whether it is current needs the server or a hash.
    check: Option<LocalCheck>,
}

/// What a file's task must look at before it knows whether to fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LocalCheck {
    /// Compare the local file's size (and time, under `--compare mtime`) with the server's
    /// answer to a `HEAD`: the listing did not say them.
    Remote { local: dest::LocalFile },
    /// Hash the local file and compare with the listing's SHA-256 or the server's digest.
    Checksum,
}

/// Build one file's download.
fn file_download(
    transport: Arc<dyn Transport>,
    url: &str,
    path: &Path,
    staging: Staging,
    mut get: GetConfig,
    lanes: usize,
    sha256: Option<xfer_core::Sha256Digest>,
) -> Download {
    get.lanes = Some(lanes);
    get.overwrite = true;
    // The listing's digest, when it has one, checks the file as `--expect-sha256` would.
    get.expect_sha256 = sha256;
    Download::new(transport, url, path, get).with_staging(staging)
}
