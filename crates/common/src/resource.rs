//! A servable resource: a regular file under the served root, or the synthetic generator.
//!
//! [`Resource::open`] classifies failures so servers can map them to 400/403/404, and computes
//! the validators (`ETag`, `Last-Modified`). Reads are positional ([`Resource::read_at`]) and
//! blocking; [`BlockStream`] runs them on tokio's blocking pool, one block (or more) ahead of the
//! consumer, so a server sends block N while block N+1 is being read.
//!
//! A file is pinned by its open descriptor. Every read re-checks the descriptor's size and
//! modification time against the values seen at open: a file that is truncated, grown or
//! rewritten while being served yields an error, never a mix of old and new bytes under the old
//! validators. A writer that restores the old mtime is still caught: the inode's change time
//! (ctime), which no user can set, is part of the identity.

use std::collections::VecDeque;
use std::fs::File;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use tokio::task::JoinHandle;

use crate::memory::{BudgetAccount, BudgetBuf, BudgetError, MemoryBudget};
use crate::paths::{resolve_under, PathError};
use crate::synthetic::{SyntheticQueryError, SyntheticSpec, SYNTHETIC_PATH};

/// Default size of the blocks [`BlockStream`] reads and yields: 256 KiB, large enough that the
/// per-block overhead (a thread-pool hop, a syscall, a frame) is noise at multi-GB/s, small
/// enough that many streams in flight do not hold much memory.
pub const DEFAULT_BLOCK_SIZE: usize = 256 * 1024;

/// Why a resource cannot be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error(transparent)]
    Synthetic(#[from] SyntheticQueryError),
    #[error("cannot open {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The opened descriptor is not what the path check approved (swapped under us).
    #[error("{path} changed between check and open: {what}")]
    Raced { path: PathBuf, what: String },
}

/// How a server should answer a [`ResourceError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// 400
    BadRequest,
    /// 403
    Forbidden,
    /// 404
    NotFound,
    /// 414: a path segment longer than the filesystem allows. Not 500, which clients would
    /// retry as transient; the same request can never succeed.
    UriTooLong,
    /// 500
    Internal,
}

impl ResourceError {
    pub fn class(&self) -> ErrorClass {
        if self.is_name_too_long() {
            return ErrorClass::UriTooLong;
        }
        match self {
            Self::Path(p) if p.is_bad_request() => ErrorClass::BadRequest,
            Self::Path(p) if p.is_forbidden() => ErrorClass::Forbidden,
            Self::Path(p) if p.is_not_found() => ErrorClass::NotFound,
            Self::Path(_) => ErrorClass::Internal,
            Self::Synthetic(_) => ErrorClass::BadRequest,
            Self::Open { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => ErrorClass::NotFound,
                io::ErrorKind::PermissionDenied => ErrorClass::Forbidden,
                _ => ErrorClass::Internal,
            },
            Self::Raced { .. } => ErrorClass::Forbidden,
        }
    }

    /// The path names something that exists but is not a regular file (a directory, for
    /// one), as opposed to nothing at all.
    pub fn is_not_a_file(&self) -> bool {
        matches!(self, Self::Path(PathError::NotAFile { .. }))
    }

    fn is_name_too_long(&self) -> bool {
        let source = match self {
            Self::Path(PathError::Io { source, .. }) | Self::Open { source, .. } => source,
            _ => return false,
        };
        source.raw_os_error() == Some(libc::ENAMETOOLONG)
    }
}

/// A file that changed while it was being read, carried inside an `io::Error`.
#[derive(Debug, thiserror::Error)]
#[error("{path} changed while being served: {what}")]
pub struct ChangedError {
    pub path: PathBuf,
    pub what: String,
}

/// Identity of a resource's content: equal keys mean equal bytes (as far as size, mtime, the
/// inode and its change time can tell for files).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ContentKey {
    File {
        path: PathBuf,
        ino: u64,
        size: u64,
        mtime_ns: i128,
        /// Status change time: moves on every write even when the mtime is put back.
        ctime_ns: i128,
    },
    Synthetic(SyntheticSpec),
}

/// What identifies a file's content as of one `stat`: the inputs of its ETag and of its
/// [`ContentKey`]. Listings take it from the directory walk, so they give the same ETag and
/// find the same cached digest as a GET of the file, without opening it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl FileStamp {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            ino: inode(meta),
            size: meta.len(),
            mtime_ns: mtime_ns(meta),
            ctime_ns: ctime_ns(meta),
        }
    }

    /// The strong ETag, with its quotes.
    pub fn etag(&self) -> String {
        // The change time is in the tag so that a file rewritten in place with its mtime put
        // back gets a new tag: a client resuming with the old one must not mix the two.
        format!(
            "\"{:x}-{:x}-{:x}-{:x}\"",
            self.ino,
            self.size,
            u64::try_from(self.mtime_ns).unwrap_or(0),
            u64::try_from(self.ctime_ns).unwrap_or(0)
        )
    }

    /// The cache key of the file at `canonical` with this stamp.
    pub fn content_key(&self, canonical: PathBuf) -> ContentKey {
        ContentKey::File {
            path: canonical,
            ino: self.ino,
            size: self.size,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
        }
    }
}

#[derive(Debug)]
struct OpenFile {
    file: File,
    path: PathBuf,
    ino: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    /// The filesystem refused a read of cached bytes only: not asked again for this file.
    no_cached_reads: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Clone)]
enum Source {
    File(Arc<OpenFile>),
    Synthetic(SyntheticSpec),
}

/// An opened resource. Cheap to clone (shares the descriptor).
#[derive(Debug, Clone)]
pub struct Resource {
    source: Source,
    size: u64,
    etag: String,
    last_modified: Option<String>,
}

impl Resource {
    /// Open what `path` (the URL path, still percent-encoded) names under `root`:
    /// [`SYNTHETIC_PATH`] with `query` is the synthetic resource, anything else a regular file
    /// (the query is then ignored). Blocking: call from a blocking pool or use
    /// [`Resource::open_async`].
    pub fn open(root: &Path, path: &str, query: Option<&str>) -> Result<Self, ResourceError> {
        if path == SYNTHETIC_PATH {
            return Ok(Self::synthetic(SyntheticSpec::from_query(
                query.unwrap_or(""),
            )?));
        }
        let canonical = resolve_under(root, path)?;
        let file = open_no_follow(&canonical).map_err(|source| ResourceError::Open {
            path: canonical.clone(),
            source,
        })?;
        let meta = file.metadata().map_err(|source| ResourceError::Open {
            path: canonical.clone(),
            source,
        })?;
        if !meta.is_file() {
            return Err(ResourceError::Raced {
                path: canonical,
                what: "no longer a regular file".into(),
            });
        }
        check_fd_under_root(&file, root, &canonical)?;
        let stamp = FileStamp::of(&meta);
        let last_modified = meta.modified().ok().map(httpdate::fmt_http_date);
        Ok(Self {
            source: Source::File(Arc::new(OpenFile {
                file,
                path: canonical,
                ino: stamp.ino,
                mtime_ns: stamp.mtime_ns,
                ctime_ns: stamp.ctime_ns,
                no_cached_reads: std::sync::atomic::AtomicBool::new(false),
            })),
            size: stamp.size,
            etag: stamp.etag(),
            last_modified,
        })
    }

    /// [`Resource::open`] on tokio's blocking pool.
    pub async fn open_async(
        root: PathBuf,
        path: String,
        query: Option<String>,
    ) -> Result<Self, ResourceError> {
        let joined =
            tokio::task::spawn_blocking(move || Self::open(&root, &path, query.as_deref())).await;
        joined.unwrap_or_else(|e| {
            Err(ResourceError::Open {
                path: PathBuf::new(),
                source: io::Error::other(format!("open task failed: {e}")),
            })
        })
    }

    /// The synthetic resource for `spec`.
    pub fn synthetic(spec: SyntheticSpec) -> Self {
        Self {
            source: Source::Synthetic(spec),
            size: spec.size,
            etag: spec.etag(),
            last_modified: None,
        }
    }

    /// Size in bytes, as of opening.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Strong entity tag, with its quotes.
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// `Last-Modified` as an HTTP date (files only).
    pub fn last_modified(&self) -> Option<&str> {
        self.last_modified.as_deref()
    }

    /// The canonical file path, or `None` for synthetic data.
    pub fn path(&self) -> Option<&Path> {
        match &self.source {
            Source::File(f) => Some(&f.path),
            Source::Synthetic(_) => None,
        }
    }

    /// The synthetic spec, or `None` for a file.
    pub fn synthetic_spec(&self) -> Option<SyntheticSpec> {
        match &self.source {
            Source::File(_) => None,
            Source::Synthetic(s) => Some(*s),
        }
    }

    /// What identifies these bytes, for caches.
    pub fn content_key(&self) -> ContentKey {
        match &self.source {
            Source::File(f) => FileStamp {
                ino: f.ino,
                size: self.size,
                mtime_ns: f.mtime_ns,
                ctime_ns: f.ctime_ns,
            }
            .content_key(f.path.clone()),
            Source::Synthetic(s) => ContentKey::Synthetic(*s),
        }
    }

    /// The SHA-256 an upload left with the file ([`crate::stored_digest`]), when it was
    /// recorded for the size and mtime seen at open. One `fgetxattr` on the open descriptor.
    pub fn stored_sha256(&self) -> Option<xfer_core::Sha256Digest> {
        match &self.source {
            Source::File(f) => crate::stored_digest::recall(&f.file, self.size, f.mtime_ns),
            Source::Synthetic(_) => None,
        }
    }

    /// A label for logs: the canonical path or the synthetic spec.
    pub fn describe(&self) -> String {
        match &self.source {
            Source::File(f) => f.path.display().to_string(),
            Source::Synthetic(s) => s.to_string(),
        }
    }

    /// Whether `etag` (from `If-Range` or `If-Match`) is this resource's strong tag.
    pub fn matches_strong_etag(&self, etag: &str) -> bool {
        let etag = etag.trim();
        !etag.starts_with("W/") && etag == self.etag
    }

    /// Read up to `buf.len()` bytes at `offset`, blocking. Returns fewer only at the end of the
    /// resource (as of opening), 0 at or past it. Fails with a [`ChangedError`] inside the
    /// `io::Error` when the file's size or mtime differ from what was seen at open.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let remaining = self.size.saturating_sub(offset);
        let want = usize::try_from(remaining).map_or(buf.len(), |r| r.min(buf.len()));
        let buf = &mut buf[..want];
        match &self.source {
            Source::Synthetic(spec) => {
                spec.fill(offset, buf);
                Ok(want)
            }
            Source::File(f) => {
                let got = pread_full(&f.file, offset, buf)?;
                self.check_unchanged(f)?;
                if got < want {
                    return Err(changed(
                        &f.path,
                        format!(
                            "read ended at byte {} of {}",
                            offset.saturating_add(got as u64),
                            self.size
                        ),
                    ));
                }
                Ok(got)
            }
        }
    }

    /// Fill `buf` from `offset` if the page cache holds all of it, without waiting for a disk:
    /// `Ok(true)` when it did (the file checked unchanged, as [`Resource::read_at`] checks
    /// it), `Ok(false)` when some of it is not cached or the platform cannot tell; then `buf`
    /// holds nothing useful and the caller reads it with [`Resource::read_exact_at`] where
    /// blocking is allowed. Synthetic bytes count as cached where the generator runs on wide
    /// vector units ([`crate::synthetic::fill_is_wide`]), a quarter of sealing them for TLS.
    pub fn read_cached_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
        if let Source::Synthetic(spec) = &self.source {
            if offset.saturating_add(buf.len() as u64) > self.size
                || !crate::synthetic::fill_is_wide()
            {
                return Ok(false);
            }
            spec.fill(offset, buf);
            return Ok(true);
        }
        #[cfg(target_os = "linux")]
        if let Source::File(f) = &self.source {
            use crate::sys::CachedRead;
            use std::os::fd::AsFd;
            use std::sync::atomic::Ordering;
            if offset.saturating_add(buf.len() as u64) > self.size
                || f.no_cached_reads.load(Ordering::Relaxed)
            {
                return Ok(false);
            }
            let mut done = 0;
            while done < buf.len() {
                let at = offset.saturating_add(done as u64);
                match crate::sys::pread_cached(f.file.as_fd(), &mut buf[done..], at)? {
                    CachedRead::Read(n) if n > 0 => done += n,
                    CachedRead::Unsupported => {
                        f.no_cached_reads.store(true, Ordering::Relaxed);
                        return Ok(false);
                    }
                    CachedRead::Read(_) | CachedRead::WouldBlock => return Ok(false),
                }
            }
            self.check_unchanged(f)?;
            return Ok(true);
        }
        let _ = (offset, buf);
        Ok(false)
    }

    /// Fill `buf` completely from `offset` or fail (short resource counts as changed).
    pub fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let got = self.read_at(offset, buf)?;
        if got < buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{} has {} bytes; cannot read {} at {offset}",
                    self.describe(),
                    self.size,
                    buf.len()
                ),
            ));
        }
        Ok(())
    }

    /// Re-check the descriptor against what was seen at open.
    pub fn check_still_same(&self) -> io::Result<()> {
        match &self.source {
            Source::File(f) => self.check_unchanged(f),
            Source::Synthetic(_) => Ok(()),
        }
    }

    fn check_unchanged(&self, f: &OpenFile) -> io::Result<()> {
        let meta = f.file.metadata()?;
        if meta.len() != self.size {
            return Err(changed(
                &f.path,
                format!("size {} is now {}", self.size, meta.len()),
            ));
        }
        if mtime_ns(&meta) != f.mtime_ns {
            return Err(changed(&f.path, "modification time changed".to_string()));
        }
        if ctime_ns(&meta) != f.ctime_ns {
            return Err(changed(
                &f.path,
                "rewritten (change time moved)".to_string(),
            ));
        }
        Ok(())
    }

    /// Stream `range` (clipped to the resource) as blocks, reading ahead.
    pub fn stream(&self, range: Range<u64>, opts: StreamOptions) -> BlockStream {
        BlockStream::new(self.clone(), range, opts)
    }
}

fn changed(path: &Path, what: String) -> io::Error {
    io::Error::other(ChangedError {
        path: path.to_path_buf(),
        what,
    })
}

fn pread_full(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match read_at_raw(file, &mut buf[done..], offset.saturating_add(done as u64)) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(unix)]
fn read_at_raw(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}

#[cfg(windows)]
fn read_at_raw(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}

#[cfg(unix)]
fn open_no_follow(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NOFOLLOW: the path was canonical a moment ago, so a symlink now means it was swapped.
    // O_NONBLOCK: a FIFO swapped in must not hang the open; it is refused just after.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

#[cfg(not(unix))]
fn open_no_follow(path: &Path) -> io::Result<File> {
    File::open(path)
}

/// On Linux, ask the kernel where the descriptor really points and require it under the root.
#[cfg(target_os = "linux")]
fn check_fd_under_root(file: &File, root: &Path, canonical: &Path) -> Result<(), ResourceError> {
    use std::os::fd::AsRawFd;
    let link = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let Ok(real) = std::fs::read_link(&link) else {
        // No /proc (some containers): the canonicalize check in `resolve_under` stands alone.
        return Ok(());
    };
    let root = root.canonicalize().map_err(|source| ResourceError::Open {
        path: root.to_path_buf(),
        source,
    })?;
    if real.starts_with(&root) {
        Ok(())
    } else {
        Err(ResourceError::Raced {
            path: canonical.to_path_buf(),
            what: format!("descriptor points to {}", real.display()),
        })
    }
}

#[cfg(not(target_os = "linux"))]
fn check_fd_under_root(_: &File, _: &Path, _: &Path) -> Result<(), ResourceError> {
    Ok(())
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
}

#[cfg(unix)]
fn ctime_ns(meta: &std::fs::Metadata) -> i128 {
    use std::os::unix::fs::MetadataExt;
    i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
}

#[cfg(not(unix))]
fn ctime_ns(_: &std::fs::Metadata) -> i128 {
    0
}

fn mtime_ns(meta: &std::fs::Metadata) -> i128 {
    match meta.modified() {
        Ok(t) => match t.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        },
        Err(_) => 0,
    }
}

/// How [`BlockStream`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOptions {
    /// Bytes per block, default [`DEFAULT_BLOCK_SIZE`] (256 KiB). Larger blocks mean fewer
    /// thread-pool hops; each stream holds up to `(1 + read_ahead) × block_size` bytes.
    pub block_size: usize,
    /// Blocks read ahead of the one being consumed, default 1. More hides slow disks (network
    /// storage) at the cost of memory per stream.
    pub read_ahead: usize,
    /// Where every block's bytes are counted, shared by all streams of the process (a clone
    /// shares it). A block is read only once the budget has room for it; default a budget of
    /// its own of [`crate::memory::DEFAULT_MEMORY_BUDGET`].
    pub budget: MemoryBudget,
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self {
            block_size: DEFAULT_BLOCK_SIZE,
            read_ahead: 1,
            budget: MemoryBudget::default(),
        }
    }
}

/// The blocks of one range of a [`Resource`], read on tokio's blocking pool ahead of use.
///
/// Must be polled inside a tokio runtime. Each read first waits for room in the
/// [`MemoryBudget`], within the share of the connection whose [`BudgetAccount`] was in scope
/// when the stream was made (servers scope each connection's tasks in one); dropping the stream cancels reads still waiting and discards the others'
/// results when they finish.
pub struct BlockStream {
    resource: Resource,
    /// Next offset to schedule a read for.
    next: u64,
    end: u64,
    opts: StreamOptions,
    /// The connection whose share the blocks count against: the [`BudgetAccount`] in scope
    /// when the stream was made, if it draws on the same budget.
    account: Option<BudgetAccount>,
    in_flight: VecDeque<(u64, BlockRead)>,
    /// Waiting for room in the budget for the block at `next`.
    acquiring: Option<Acquiring>,
    /// Offset of the next block to yield.
    position: u64,
    failed: bool,
}

impl BlockStream {
    pub fn new(resource: Resource, range: Range<u64>, opts: StreamOptions) -> Self {
        let end = range.end.min(resource.size);
        let start = range.start.min(end);
        let account = BudgetAccount::current().filter(|a| *a.budget() == opts.budget);
        Self {
            resource,
            account,
            next: start,
            end,
            opts: StreamOptions {
                block_size: opts.block_size.max(1),
                ..opts
            },
            in_flight: VecDeque::new(),
            acquiring: None,
            position: start,
            failed: false,
        }
    }

    /// Offset (within the resource) of the next block [`BlockStream::poll_next_block`] yields.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Bytes not yet yielded.
    pub fn remaining(&self) -> u64 {
        self.end - self.position
    }

    /// Keep `1 + read_ahead` reads in flight. Synthetic blocks go through the blocking pool
    /// too unless the generator runs wide: at 13 GB/s per core, generating beside the sending
    /// task (on another core) rather than inside it roughly doubles a single response's rate;
    /// at 50 GB/s the thread switch costs more than it buys.
    ///
    /// Room in the budget is asked for one block at a time, in order: a stream holding budget
    /// then always holds it for its next block to yield, so streams sharing a budget cannot
    /// each keep a later block while waiting for an earlier one.
    fn schedule(&mut self, cx: &mut Context<'_>) -> Result<(), io::Error> {
        while self.next < self.end && self.in_flight.len() <= self.opts.read_ahead {
            let offset = self.next;
            let len = block_len(self.end - offset, self.opts.block_size);
            let acquiring = self.acquiring.get_or_insert_with(|| {
                let budget = self.opts.budget.clone();
                match self.account.clone() {
                    Some(account) => Box::pin(async move { account.buffer(len).await }),
                    None => Box::pin(async move { budget.buffer(len).await }),
                }
            });
            let mut buf = match acquiring.as_mut().poll(cx) {
                Poll::Pending => return Ok(()),
                Poll::Ready(r) => {
                    self.acquiring = None;
                    r.map_err(io::Error::other)?
                }
            };
            self.next += len as u64;
            // A block the page cache holds is copied here, on the task: handing it to the
            // blocking pool cost a thread switch and two wake-ups per block, a quarter of a
            // file server's CPU in profiles (docs/results.md, "The server reads cached blocks
            // on its task").
            let read = match self.resource.read_cached_exact_at(offset, &mut buf) {
                Ok(true) => BlockRead::Done(Ok(buf.freeze())),
                Ok(false) => {
                    let resource = self.resource.clone();
                    BlockRead::Blocking(tokio::task::spawn_blocking(move || {
                        resource.read_exact_at(offset, &mut buf)?;
                        Ok(buf.freeze())
                    }))
                }
                Err(e) => BlockRead::Done(Err(e)),
            };
            self.in_flight.push_back((offset, read));
        }
        Ok(())
    }

    /// The next block, `None` after the last. After an error the stream ends.
    pub fn poll_next_block(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        if self.failed || self.position >= self.end {
            return Poll::Ready(None);
        }
        if let Err(e) = self.schedule(cx) {
            self.failed = true;
            return Poll::Ready(Some(Err(e)));
        }
        let Some((offset, read)) = self.in_flight.pop_front() else {
            // Waiting for room in the budget: its semaphore wakes us.
            return if self.acquiring.is_some() {
                Poll::Pending
            } else {
                Poll::Ready(None)
            };
        };
        let result = match read {
            BlockRead::Done(r) => r,
            BlockRead::Blocking(mut handle) => match Pin::new(&mut handle).poll(cx) {
                Poll::Pending => {
                    self.in_flight
                        .push_front((offset, BlockRead::Blocking(handle)));
                    return Poll::Pending;
                }
                Poll::Ready(r) => {
                    r.unwrap_or_else(|e| Err(io::Error::other(format!("read task failed: {e}"))))
                }
            },
        };
        match result {
            Ok(block) => {
                debug_assert_eq!(offset, self.position);
                self.position += block.len() as u64;
                // Start the read after the ones in flight before handing this block out. An
                // error here comes back on the next poll.
                let _ = self.schedule(cx);
                Poll::Ready(Some(Ok(block)))
            }
            Err(e) => {
                self.failed = true;
                for (_, read) in self.in_flight.drain(..) {
                    read.abort();
                }
                Poll::Ready(Some(Err(e)))
            }
        }
    }

    /// `async` form of [`BlockStream::poll_next_block`].
    pub async fn next_block(&mut self) -> Option<io::Result<Bytes>> {
        std::future::poll_fn(|cx| self.poll_next_block(cx)).await
    }
}

impl Drop for BlockStream {
    fn drop(&mut self) {
        // Reads not started yet must not run for a block nobody will send; the budget of the
        // others comes back when their results are dropped.
        for (_, read) in self.in_flight.drain(..) {
            read.abort();
        }
    }
}

/// One block's read: done on the task (from the page cache), or on the blocking pool.
enum BlockRead {
    Done(io::Result<Bytes>),
    Blocking(JoinHandle<io::Result<Bytes>>),
}

impl BlockRead {
    fn abort(self) {
        if let BlockRead::Blocking(h) = self {
            h.abort();
        }
    }
}

/// Waiting for a block's room in the budget.
type Acquiring = Pin<Box<dyn Future<Output = Result<BudgetBuf, BudgetError>> + Send>>;

fn block_len(remaining: u64, block_size: usize) -> usize {
    usize::try_from(remaining).map_or(block_size, |r| r.min(block_size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(name: &str, data: &[u8]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(name), data).expect("write");
        dir
    }

    /// Whether `dir` is on tmpfs, which has no reads of cached bytes only.
    fn on_tmpfs(dir: &Path) -> bool {
        let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
            return false;
        };
        let Ok(dir) = dir.canonicalize() else {
            return false;
        };
        // The longest mount point that holds `dir` is its filesystem.
        mounts
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (_, point, kind) = (f.next()?, f.next()?, f.next()?);
                dir.starts_with(point)
                    .then(|| (point.len(), kind == "tmpfs"))
            })
            .max_by_key(|(len, _)| *len)
            .is_some_and(|(_, tmpfs)| tmpfs)
    }

    #[test]
    fn a_cached_block_is_read_without_the_blocking_pool() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let dir = root_with("f", &data);
        let r = Resource::open(dir.path(), "/f", None).expect("open");
        let mut buf = vec![0u8; 100_000];
        // Just written: the page cache holds it, on Linux, which can tell (except on
        // filesystems that refuse to say, tmpfs among them).
        let cached = r.read_cached_exact_at(50_000, &mut buf).expect("read");
        let tells = cfg!(target_os = "linux") && !on_tmpfs(dir.path());
        assert_eq!(cached, tells);
        if cached {
            assert_eq!(buf, data[50_000..150_000]);
        }
        // Past the end is never a cached read: the blocking read says what is wrong.
        assert!(!r
            .read_cached_exact_at(250_000, &mut buf)
            .expect("past the end"));
        // Synthetic bytes are generated on the task only where that is cheap.
        let s = Resource::open(dir.path(), SYNTHETIC_PATH, Some("size=1000")).expect("synthetic");
        let wide = crate::synthetic::fill_is_wide();
        assert_eq!(
            s.read_cached_exact_at(0, &mut buf[..1000])
                .expect("synthetic"),
            wide
        );
        if wide {
            let mut want = vec![0u8; 1000];
            crate::synthetic::fill(0, 0, &mut want);
            assert_eq!(buf[..1000], want);
        }
        assert!(!s
            .read_cached_exact_at(500, &mut buf[..1000])
            .expect("synthetic past its end"));
    }

    #[test]
    fn a_cached_read_of_a_changed_file_fails() {
        let dir = root_with("f", &[7u8; 10_000]);
        let r = Resource::open(dir.path(), "/f", None).expect("open");
        std::fs::write(dir.path().join("f"), [8u8; 20_000]).expect("rewrite");
        let mut buf = vec![0u8; 5_000];
        match r.read_cached_exact_at(0, &mut buf) {
            Ok(cached) => assert!(!cached || !cfg!(target_os = "linux"), "changed file read"),
            Err(e) => assert!(e.to_string().contains("size"), "{e}"),
        }
    }

    #[test]
    fn a_rewrite_with_the_mtime_put_back_is_another_resource() {
        use std::io::{Seek, SeekFrom, Write};
        let dir = root_with("f", b"hello world");
        let path = dir.path().join("f");
        let before = Resource::open(dir.path(), "/f", None).expect("open");
        let mtime = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .expect("mtime");
        // Later than the first stat even on filesystems with coarse timestamps.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open rw");
        f.seek(SeekFrom::Start(0)).expect("seek");
        f.write_all(b"J").expect("write");
        f.set_modified(mtime).expect("restore mtime");
        drop(f);
        let after = Resource::open(dir.path(), "/f", None).expect("open again");
        assert_eq!(
            after.last_modified(),
            before.last_modified(),
            "mtime restored"
        );
        assert_ne!(after.content_key(), before.content_key());
        assert_ne!(after.etag(), before.etag());
        assert!(before.check_still_same().is_err());
        let cache = crate::DigestCache::new(crate::DigestCacheConfig::default()).expect("cache");
        cache.insert(&before, xfer_core::digest::Sha256Digest::of(b"hello world"));
        assert_eq!(cache.get(&after), None, "the stale digest is not served");
    }

    #[test]
    fn open_classifies_errors() {
        let dir = root_with("f", b"hello");
        let class = |p: &str, q: Option<&str>| {
            Resource::open(dir.path(), p, q)
                .map(|_| ())
                .map_err(|e| e.class())
        };
        assert_eq!(class("/f", None), Ok(()));
        assert_eq!(class("/nope", None), Err(ErrorClass::NotFound));
        assert_eq!(class("/../f", None), Err(ErrorClass::Forbidden));
        assert_eq!(class("/a%00", None), Err(ErrorClass::BadRequest));
        assert_eq!(
            class(SYNTHETIC_PATH, Some("size=1&x=2")),
            Err(ErrorClass::BadRequest)
        );
        assert_eq!(class(SYNTHETIC_PATH, None), Err(ErrorClass::BadRequest));
        assert_eq!(class(SYNTHETIC_PATH, Some("size=1K")), Ok(()));
    }

    #[test]
    fn validators_and_reads() {
        let dir = root_with("f", b"hello world");
        let r = Resource::open(dir.path(), "/f", Some("ignored")).expect("open");
        assert_eq!(r.size(), 11);
        assert!(r.etag().starts_with('"') && r.etag().ends_with('"'));
        // inode, size, mtime and change time.
        assert_eq!(r.etag().matches('-').count(), 3);
        assert!(r.matches_strong_etag(r.etag()));
        assert!(!r.matches_strong_etag(&format!("W/{}", r.etag())));
        assert!(r.last_modified().is_some_and(|d| d.ends_with("GMT")));
        let mut buf = [0u8; 5];
        assert_eq!(r.read_at(6, &mut buf).expect("read"), 5);
        assert_eq!(&buf, b"world");
        assert_eq!(r.read_at(9, &mut buf).expect("read"), 2);
        assert_eq!(r.read_at(11, &mut buf).expect("read"), 0);
        assert_eq!(r.read_at(u64::MAX, &mut buf).expect("read"), 0);
    }

    #[test]
    fn a_file_that_changes_size_is_an_error() {
        let dir = root_with("f", &[7u8; 4096]);
        let r = Resource::open(dir.path(), "/f", None).expect("open");
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("f"))
            .and_then(|f| f.set_len(100))
            .expect("truncate");
        let mut buf = [0u8; 64];
        let err = r.read_at(0, &mut buf).expect_err("changed");
        assert!(
            err.get_ref().is_some_and(|e| e.is::<ChangedError>()),
            "{err}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stream_yields_the_range_in_blocks() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let dir = root_with("f", &data);
        let r = Resource::open(dir.path(), "/f", None).expect("open");
        for read_ahead in [0, 1, 3] {
            let opts = StreamOptions {
                block_size: 4096,
                read_ahead,
                ..StreamOptions::default()
            };
            let mut s = r.stream(1234..98_765, opts);
            let mut got = Vec::new();
            while let Some(b) = s.next_block().await {
                let b = b.expect("block");
                assert!(b.len() <= 4096);
                got.extend_from_slice(&b);
            }
            assert_eq!(got, data[1234..98_765]);
        }
        // Ranges past the end are clipped.
        let mut s = r.stream(99_990..200_000, StreamOptions::default());
        let b = s.next_block().await.expect("one").expect("ok");
        assert_eq!(b.len(), 10);
        assert!(s.next_block().await.is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streams_sharing_a_small_budget_wait_for_room_and_give_it_back() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
        let dir = root_with("f", &data);
        let r = Resource::open(dir.path(), "/f", None).expect("open");
        // Room for two blocks, read-ahead asking for four per stream, two streams.
        let budget = MemoryBudget::new(8192);
        let opts = StreamOptions {
            block_size: 4096,
            read_ahead: 3,
            budget: budget.clone(),
        };
        // Each stream drained by its own task, as each response is by its own connection.
        let mut drains = Vec::new();
        for _ in 0..2 {
            let mut st = r.stream(0..100_000, opts.clone());
            let budget = budget.clone();
            drains.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(block) = st.next_block().await {
                    got.extend_from_slice(&block.expect("block"));
                    assert!(budget.in_use() <= budget.limit());
                }
                got
            }));
        }
        for d in drains {
            let got = tokio::time::timeout(std::time::Duration::from_secs(30), d)
                .await
                .expect("streams sharing a budget finish")
                .expect("task");
            assert_eq!(got, data);
        }
        // A stream dropped mid-way returns what it read ahead.
        let mut c = r.stream(
            0..100_000,
            StreamOptions {
                block_size: 4096,
                read_ahead: 1,
                budget: budget.clone(),
            },
        );
        drop(c.next_block().await);
        drop(c);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while budget.in_use() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{budget:?} never returned"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn synthetic_stream_matches_fill() {
        let spec = SyntheticSpec {
            size: 70_001,
            seed: 3,
        };
        let r = Resource::synthetic(spec);
        let mut whole = vec![0u8; 70_001];
        crate::synthetic::fill(3, 0, &mut whole);
        let mut s = r.stream(
            5..70_001,
            StreamOptions {
                block_size: 1000,
                read_ahead: 1,
                ..StreamOptions::default()
            },
        );
        let mut got = Vec::new();
        while let Some(b) = s.next_block().await {
            got.extend_from_slice(&b.expect("block"));
        }
        assert_eq!(got, whole[5..]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stream_of_a_truncated_file_errors() {
        let dir = root_with("f", &[1u8; 64 * 1024]);
        let r = Resource::open(dir.path(), "/f", None).expect("open");
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("f"))
            .and_then(|f| f.set_len(1000))
            .expect("truncate");
        let mut s = r.stream(0..64 * 1024, StreamOptions::default());
        assert!(matches!(s.next_block().await, Some(Err(_))));
        assert!(s.next_block().await.is_none());
    }
}
