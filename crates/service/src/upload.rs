//! Uploads, decided once for every codec: a plain `PUT` of a whole file (`curl -T`), and
//! xfer's parallel scheme, where many lanes send verified chunks of one file at once and a
//! last request completes it (`docs/upload-protocol.md`).
//!
//! Bytes land in a staging file in the destination directory (`.xfer-upload.<id>.<name>`),
//! never under the final name. A chunk is recorded as received only after its
//! `Content-Digest` matched the bytes; the file is renamed into place only after the
//! whole-file digest the client declared matches, so a reader sees the old file or the new
//! one, never a mixture. Received ranges are kept in a sidecar next to the staging file, so an
//! upload survives a server restart and resumes where it stopped.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use xfer_common::paths::STAGING_PREFIX;
use xfer_common::{stored_digest, DigestCache, Resource};
use xfer_core::digest::{Sha256Digest, Sha256Hasher};

use crate::plan::ResponsePlan;
pub use crate::request::UploadHead;
use crate::status;

mod place;
mod refusal;
pub mod resumable;
mod staging_files;
mod whole;
mod write;

pub(crate) use refusal::Refusal;
pub(crate) use whole::{receive, unique_id, whole};
pub(crate) use write::{
    blocking, digest_field, hash_file, off_runtime, resolve_for_write, staging_name, stored,
    stored_resource, to_completion, WriteTarget, WRITE_BLOCK,
};
pub use write::{NoBody, UploadBody, UploadConfig};

pub(crate) use place::commit;
pub use place::Replace;

use staging_files::check_room;

/// Request header naming the upload a chunk, a status query or a completion belongs to.
pub const UPLOAD_ID: &str = "xfer-upload";
/// Request header (`?1`) asking the server to complete the upload.
pub const UPLOAD_COMPLETE: &str = "xfer-upload-complete";
/// Response header: the byte ranges received and verified, `start-end` (inclusive) joined by
/// `,`.
pub const UPLOAD_RECEIVED: &str = "xfer-upload-received";
/// Response header: the size the upload was started with.
pub const UPLOAD_SIZE: &str = "xfer-upload-size";

/// Parallel uploads in progress, shared by every codec of a server.
#[derive(Debug, Clone, Default)]
pub struct Uploads {
    parts: Arc<Mutex<HashMap<String, Arc<Part>>>>,
    resumable: Arc<resumable::Registry>,
}

#[derive(Debug)]
struct Part {
    target: PathBuf,
    staging: PathBuf,
    sidecar: PathBuf,
    size: u64,
    file: File,
    state: Mutex<PartState>,
    /// Chunks write under the read side; completion takes the write side, so it waits for
    /// writes in flight and no write lands after the rename. `true` once completed.
    gate: tokio::sync::RwLock<bool>,
    /// SHA-256 of the verified bytes from offset 0, advanced in the background while the
    /// upload runs, so that completion hashes only what is left instead of the whole file.
    prefix: Mutex<PrefixHash>,
    /// A background task is advancing `prefix`.
    hashing: std::sync::atomic::AtomicBool,
    /// Given up after a write failed for lack of space: its files are gone, and chunks still
    /// in flight record nothing.
    abandoned: std::sync::atomic::AtomicBool,
}

struct PrefixHash {
    end: u64,
    /// `None` once completion took it.
    hasher: Option<Sha256Hasher>,
}

#[derive(Debug)]
struct PartState {
    /// Verified ranges, start → end (exclusive), merged.
    received: BTreeMap<u64, u64>,
    last_activity: Instant,
    completing: bool,
}

impl Uploads {
    /// The resumable uploads in progress.
    pub(crate) fn resumable(&self) -> &Arc<resumable::Registry> {
        &self.resumable
    }

    /// Remove uploads idle for longer than `expiry`, with their files. Returns how many.
    pub fn sweep(&self, expiry: Duration) -> usize {
        let expired: Vec<Arc<Part>> = {
            let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
            let ids: Vec<String> = parts
                .iter()
                .filter(|(_, p)| p.lock().last_activity.elapsed() > expiry)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| parts.remove(id)).collect()
        };
        for p in &expired {
            tracing::info!(target = %p.target.display(), "abandoned upload expired; removing its staging file");
            let _ = std::fs::remove_file(&p.staging);
            let _ = std::fs::remove_file(&p.sidecar);
        }
        expired.len() + self.resumable.sweep(expiry)
    }

    /// Every `period`, remove uploads idle for longer than `expiry`. Runs until the runtime
    /// stops.
    pub fn spawn_sweeper(&self, expiry: Duration) {
        let this = self.clone();
        let period = (expiry / 4).clamp(Duration::from_secs(1), Duration::from_secs(600));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                this.sweep(expiry);
            }
        });
    }

    fn get(&self, id: &str) -> Option<Arc<Part>> {
        self.parts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn remove(&self, id: &str) {
        self.parts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// Give up upload `id` after a write found the disk full: its staging file and sidecar
    /// are removed at once, and the file is closed once the chunks still in flight let go of
    /// it, so the space it held is free for the next request, which is then decided on what
    /// is really free. A client resuming later starts the upload again.
    fn abandon(&self, id: &str, part: &Arc<Part>) {
        {
            let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
            if parts.get(id).is_some_and(|p| Arc::ptr_eq(p, part)) {
                parts.remove(id);
            }
        }
        // Under the state's lock, so that no chunk records itself in the removed sidecar.
        let _state = part.lock();
        if part.abandoned.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(target = %part.target.display(), "disk full; upload abandoned and its staging file removed");
        let _ = std::fs::remove_file(&part.staging);
        let _ = std::fs::remove_file(&part.sidecar);
    }
}

fn abandoned_refusal(target: &Path) -> Refusal {
    Refusal::new(
        status::INSUFFICIENT_STORAGE,
        "insufficient storage on the server; the upload was abandoned, start it again\n",
        format!("upload of {} abandoned for lack of space", target.display()),
    )
}

impl Part {
    fn new(
        target: PathBuf,
        staging: PathBuf,
        sidecar: PathBuf,
        size: u64,
        file: File,
        received: BTreeMap<u64, u64>,
    ) -> Self {
        Self {
            target,
            staging,
            sidecar,
            size,
            file,
            state: Mutex::new(PartState {
                received,
                last_activity: Instant::now(),
                completing: false,
            }),
            gate: tokio::sync::RwLock::new(false),
            prefix: Mutex::new(PrefixHash {
                end: 0,
                hasher: Some(Sha256Hasher::new()),
            }),
            hashing: std::sync::atomic::AtomicBool::new(false),
            abandoned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// End of the verified bytes that start at offset 0.
    fn contiguous_end(&self) -> u64 {
        self.lock().received.get(&0).copied().unwrap_or(0)
    }

    /// Hash verified bytes from where the prefix hash stands up to `until` (page-cache reads).
    fn advance_prefix(&self, until: u64) -> io::Result<()> {
        let mut p = self.prefix.lock().unwrap_or_else(|e| e.into_inner());
        let PrefixHash { end, hasher } = &mut *p;
        let Some(h) = hasher.as_mut() else {
            return Ok(());
        };
        let mut buf = vec![0u8; WRITE_BLOCK];
        while *end < until {
            let want =
                usize::try_from((until - *end).min(WRITE_BLOCK as u64)).unwrap_or(WRITE_BLOCK);
            self.file.read_exact_at(&mut buf[..want], *end)?;
            h.update(&buf[..want]);
            *end += want as u64;
        }
        Ok(())
    }

    /// Start advancing the prefix hash in the background, unless a task already does; that
    /// task runs until the prefix stops growing.
    fn spawn_prefix_hash(self: &Arc<Self>) {
        if self.hashing.swap(true, Ordering::AcqRel) {
            return;
        }
        let part = Arc::clone(self);
        tokio::task::spawn_blocking(move || loop {
            let until = part.contiguous_end();
            if let Err(e) = part.advance_prefix(until) {
                // Completion hashes what is missing itself and reports the error there.
                tracing::debug!(target = %part.target.display(), "background hash stopped: {e}");
            }
            part.hashing.store(false, Ordering::Release);
            // A chunk recorded while the flag was still set found it busy: look again.
            if part.contiguous_end() <= until || part.hashing.swap(true, Ordering::AcqRel) {
                return;
            }
        });
    }

    /// The whole file's SHA-256: the prefix hash, finished over the rest.
    fn whole_digest(&self) -> io::Result<Sha256Digest> {
        self.advance_prefix(self.size)?;
        let taken = {
            let mut p = self.prefix.lock().unwrap_or_else(|e| e.into_inner());
            let at_end = p.end == self.size;
            p.hasher.take().filter(|_| at_end)
        };
        match taken {
            Some(h) => Ok(h.finish()),
            // Taken by an earlier completion that failed after hashing: read it all again.
            None => hash_file(&self.file, self.size),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PartState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn received_header(&self) -> String {
        let s = self.lock();
        s.received
            .iter()
            .map(|(a, b)| format!("{a}-{}", b - 1))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether `start..end` is already verified and recorded.
    fn holds(&self, start: u64, end: u64) -> bool {
        let s = self.lock();
        s.received
            .range(..=start)
            .next_back()
            .is_some_and(|(_, &e)| e >= end)
    }

    /// Journal the verified range `start..end`, then hold it in memory. A crash after the
    /// journal line keeps the chunk, before it loses only this chunk. Both steps run in one
    /// call on the blocking pool, under the state's lock: a request's future is dropped when
    /// its client goes away, and no one may see the chunk on disk but missing from what
    /// `HEAD` reports (a client resuming would send it again, or give up on a gap).
    fn record(&self, start: u64, end: u64) -> Result<(), Refusal> {
        let mut s = self.lock();
        if self.abandoned.load(Ordering::Acquire) {
            return Err(abandoned_refusal(&self.target));
        }
        staging_files::open_append(&self.sidecar)
            .and_then(|mut f| f.write_all(format!("{start}-{end}\n").as_bytes()))
            .map_err(|e| Refusal::io("recording", &self.sidecar, &e))?;
        insert_range(&mut s.received, start, end);
        s.last_activity = Instant::now();
        Ok(())
    }

    fn is_whole(&self) -> bool {
        let s = self.lock();
        s.received.len() == 1 && s.received.get(&0) == Some(&self.size) || self.size == 0
    }
}

impl std::fmt::Debug for PrefixHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixHash")
            .field("end", &self.end)
            .finish()
    }
}

/// Merge `start..end` into a set of disjoint ranges.
fn insert_range(set: &mut BTreeMap<u64, u64>, mut start: u64, mut end: u64) {
    let overlapping: Vec<(u64, u64)> = set
        .range(..=end)
        .filter(|(_, &e)| e >= start)
        .map(|(&s, &e)| (s, e))
        .collect();
    for (s, e) in overlapping {
        set.remove(&s);
        start = start.min(s);
        end = end.max(e);
    }
    set.insert(start, end);
}

/// `bytes START-END/TOTAL` (RFC 9110 §14.4; the total is required here), read by the one
/// parser clients use for a 206: digits only, the span inside the total.
fn parse_content_range(v: &str) -> Option<(u64, u64, u64)> {
    let (range, total) = xfer_common::ranges::parse_content_range(v)?;
    Some((range.start, range.end, total?))
}

/// An upload id: 16 to 64 characters of `[A-Za-z0-9_-]`, so it can name a file.
fn valid_id(id: &str) -> bool {
    (16..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Handle a `PUT` (and the upload-status `HEAD`) for `request_path` under `root`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn put(
    root: &Path,
    digests: &DigestCache,
    uploads: &Uploads,
    cfg: &UploadConfig,
    request_path: &str,
    head: &UploadHead,
    replace: Replace,
    body: &mut dyn UploadBody,
) -> ResponsePlan {
    let result = match (&head.id, head.complete, &head.content_range) {
        (Some(id), true, _) => {
            complete(root, digests, uploads, request_path, id, head, replace).await
        }
        (Some(id), false, Some(range)) => {
            chunk(root, uploads, cfg, request_path, id, range, head, body).await
        }
        (Some(_), false, None) => Err(Refusal::new(
            status::BAD_REQUEST,
            "a chunk of a parallel upload needs Content-Range\n",
            "Xfer-Upload without Content-Range or Xfer-Upload-Complete",
        )),
        (None, _, Some(_)) => Err(Refusal::new(
            status::BAD_REQUEST,
            "a partial PUT needs an Xfer-Upload id (docs/upload-protocol.md)\n",
            "Content-Range without Xfer-Upload",
        )),
        (None, _, None) => whole(root, digests, cfg, request_path, head, replace, body).await,
    };
    result.unwrap_or_else(Refusal::plan)
}

/// The `HEAD` of an upload: which ranges the server holds.
pub(crate) async fn status_of(
    root: &Path,
    uploads: &Uploads,
    request_path: &str,
    id: &str,
) -> ResponsePlan {
    let found = async {
        let target = blocking(root, request_path, resolve_for_write).await?;
        open_part(uploads, id, &target, None).await
    }
    .await;
    match found {
        Ok(part) => {
            let mut plan = ResponsePlan::empty(status::OK);
            plan.headers.push((UPLOAD_RECEIVED, part.received_header()));
            plan.headers.push((UPLOAD_SIZE, part.size.to_string()));
            plan
        }
        Err(r) => r.plan(),
    }
}

/// The upload `id` for `target`: in memory, or restored from its sidecar after a restart, or
/// (with `create`, the total size) started now.
async fn open_part(
    uploads: &Uploads,
    id: &str,
    target: &WriteTarget,
    create: Option<u64>,
) -> Result<Arc<Part>, Refusal> {
    if !valid_id(id) {
        return Err(Refusal::new(
            status::BAD_REQUEST,
            "bad upload id\n",
            "an upload id is 16 to 64 characters of A-Z, a-z, 0-9, '-' and '_'",
        ));
    }
    if let Some(p) = uploads.get(id) {
        if p.target != target.path || create.is_some_and(|size| size != p.size) {
            return Err(Refusal::new(
                status::CONFLICT,
                "this upload id belongs to another file or size\n",
                format!(
                    "upload {id} is for {} ({} bytes)",
                    p.target.display(),
                    p.size
                ),
            ));
        }
        return Ok(p);
    }
    let staging = target.dir.join(staging_name(id, &target.name));
    let sidecar = target
        .dir
        .join(format!("{}.ranges", staging_name(id, &target.name)));
    let path = target.path.clone();
    let opened = off_runtime(move || restore_or_create(path, staging, sidecar, create)).await?;
    let part = Arc::new(opened);
    let mut parts = uploads.parts.lock().unwrap_or_else(|p| p.into_inner());
    // Two first chunks raced: keep the one registered first.
    Ok(parts.entry(id.to_string()).or_insert(part).clone())
}

fn restore_or_create(
    target: PathBuf,
    staging: PathBuf,
    sidecar: PathBuf,
    create: Option<u64>,
) -> Result<Part, Refusal> {
    match staging_files::read_text(&sidecar) {
        Ok(text) => {
            let mut lines = text.lines();
            let size: u64 = lines
                .next()
                .and_then(|l| l.strip_prefix("size "))
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| {
                    Refusal::new(
                        status::INTERNAL_ERROR,
                        "server error\n",
                        format!("{}: damaged upload record", sidecar.display()),
                    )
                })?;
            if create.is_some_and(|s| s != size) {
                return Err(Refusal::new(
                    status::CONFLICT,
                    "this upload id belongs to another size\n",
                    format!("upload record {} says {size} bytes", sidecar.display()),
                ));
            }
            let mut received = BTreeMap::new();
            // A torn last line (a crash mid-append) is ignored: that chunk is sent again.
            for l in lines {
                if let Some((a, b)) = l.split_once('-') {
                    if let (Ok(a), Ok(b)) = (a.parse::<u64>(), b.parse::<u64>()) {
                        if a < b && b <= size {
                            insert_range(&mut received, a, b);
                        }
                    }
                }
            }
            let file = staging_files::open_existing(&staging)
                .map_err(|e| Refusal::io("opening", &staging, &e))?;
            Ok(Part::new(target, staging, sidecar, size, file, received))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let Some(size) = create else {
                return Err(Refusal::new(
                    status::NOT_FOUND,
                    "no such upload\n",
                    format!("no upload record {}", sidecar.display()),
                ));
            };
            if let Some(dir) = staging.parent() {
                check_room(dir, size)?;
            }
            let file = staging_files::create_new(&staging)
                .map_err(|e| Refusal::io("creating", &staging, &e))?;
            // Sparse: space is taken as chunks arrive, and a full disk shows as 507 then.
            let made = file
                .set_len(size)
                .map_err(|e| Refusal::io("sizing", &staging, &e))
                .and_then(|()| {
                    staging_files::write_new(&sidecar, &format!("size {size}\n"))
                        .map_err(|e| Refusal::io("creating", &sidecar, &e))
                });
            if let Err(refusal) = made {
                let _ = std::fs::remove_file(&staging);
                return Err(refusal);
            }
            Ok(Part::new(
                target,
                staging,
                sidecar,
                size,
                file,
                BTreeMap::new(),
            ))
        }
        Err(e) => Err(Refusal::io("reading", &sidecar, &e)),
    }
}

#[allow(clippy::too_many_arguments)]
async fn chunk(
    root: &Path,
    uploads: &Uploads,
    cfg: &UploadConfig,
    request_path: &str,
    id: &str,
    range: &str,
    head: &UploadHead,
    body: &mut dyn UploadBody,
) -> Result<ResponsePlan, Refusal> {
    let (start, end, total) = parse_content_range(range).ok_or_else(|| {
        Refusal::new(
            status::BAD_REQUEST,
            "malformed Content-Range\n",
            format!("{range:?}: want bytes START-END/TOTAL"),
        )
    })?;
    if total > cfg.max_size {
        return Err(Refusal::new(
            status::PAYLOAD_TOO_LARGE,
            "file too large for this server\n",
            format!("{total} bytes; the limit is {}", cfg.max_size),
        ));
    }
    let expected = digest_field(&head.content_digest, "Content-Digest")?.ok_or_else(|| {
        Refusal::new(
            status::BAD_REQUEST,
            "a chunk needs Content-Digest: sha-256\n",
            "chunk without Content-Digest",
        )
    })?;
    let target = blocking(root, request_path, resolve_for_write).await?;
    let part = open_part(uploads, id, &target, Some(total)).await?;
    part.lock().last_activity = Instant::now();
    let gate = part.gate.read().await;
    if *gate {
        return Err(Refusal::new(
            status::CONFLICT,
            "this upload is already complete\n",
            format!("upload {id}"),
        ));
    }
    // A chunk sent again (a retry whose answer was lost) is checked but not written: its
    // unverified bytes must not replace verified ones.
    let file = if part.holds(start, end) {
        None
    } else {
        check_room(&target.dir, end - start)?;
        Some(
            part.file
                .try_clone()
                .map_err(|e| Refusal::io("opening", &part.staging, &e))?,
        )
    };
    let received = receive(
        file,
        &part.staging,
        start,
        Some(end - start),
        end - start,
        body,
    )
    .await;
    let actual = match received {
        Ok((actual, _)) => actual,
        Err(r) => {
            if r.status == status::INSUFFICIENT_STORAGE {
                uploads.abandon(id, &part);
            }
            return Err(r);
        }
    };
    if actual != expected {
        let mut plan = Refusal::new(
            status::BAD_REQUEST,
            "Content-Digest does not match the bytes received; send the chunk again\n",
            format!(
                "bytes {start}-{} of {}: got {actual}, declared {expected}",
                end - 1,
                target.path.display()
            ),
        )
        .plan();
        // The received ranges (and, for xfer/1, the size) mark this 400 as "the bytes were
        // damaged", which a client answers by sending the chunk again, unlike a malformed
        // request.
        plan.headers.push((UPLOAD_RECEIVED, part.received_header()));
        plan.headers.push((UPLOAD_SIZE, part.size.to_string()));
        return Ok(plan);
    }
    let p = Arc::clone(&part);
    off_runtime(move || p.record(start, end)).await?;
    part.spawn_prefix_hash();
    drop(gate);
    let mut plan = ResponsePlan::empty(status::NO_CONTENT);
    plan.headers.push((UPLOAD_RECEIVED, part.received_header()));
    Ok(plan)
}

async fn complete(
    root: &Path,
    digests: &DigestCache,
    uploads: &Uploads,
    request_path: &str,
    id: &str,
    head: &UploadHead,
    replace: Replace,
) -> Result<ResponsePlan, Refusal> {
    let declared = digest_field(&head.repr_digest, "Repr-Digest")?.ok_or_else(|| {
        Refusal::new(
            status::BAD_REQUEST,
            "completing an upload needs Repr-Digest: sha-256 of the whole file\n",
            "completion without Repr-Digest",
        )
    })?;
    let target = blocking(root, request_path, resolve_for_write).await?;
    let part = open_part(uploads, id, &target, None).await?;
    // Its own task: a completion cut off between its steps (the client gone) would leave
    // the upload marked as completing, or stored but still listed as in progress.
    let (digests, uploads) = (digests.clone(), uploads.clone());
    let (root, path, id) = (root.to_path_buf(), request_path.to_string(), id.to_string());
    to_completion(async move {
        settle(
            &root, &path, &id, &digests, &uploads, part, target, declared, replace,
        )
        .await
    })
    .await
}

/// The steps of [`complete`] after the upload was found.
#[allow(clippy::too_many_arguments)]
async fn settle(
    root: &Path,
    request_path: &str,
    id: &str,
    digests: &DigestCache,
    uploads: &Uploads,
    part: Arc<Part>,
    target: WriteTarget,
    declared: Sha256Digest,
    replace: Replace,
) -> Result<ResponsePlan, Refusal> {
    {
        let mut s = part.lock();
        if s.completing {
            return Err(Refusal::new(
                status::CONFLICT,
                "this upload is being completed by another request\n",
                format!("upload {id}"),
            ));
        }
        s.completing = true;
        s.last_activity = Instant::now();
    }
    if !part.is_whole() {
        part.lock().completing = false;
        return Err(Refusal::new(
            status::CONFLICT,
            "the upload is missing bytes; send them, then complete it\n",
            format!("received {} of {} bytes", part.received_header(), part.size),
        ));
    }
    // Waits for chunk writes in flight; none starts after this.
    let mut gate = part.gate.write().await;
    let p = Arc::clone(&part);
    let (r, path) = (root.to_path_buf(), request_path.to_string());
    let finished = off_runtime(move || finish(&p, declared, &r, &path, replace)).await;
    *gate = finished.is_ok();
    drop(gate);
    match finished {
        Ok(stored_file) => {
            if let Some(resource) = stored_file {
                digests.insert(&resource, declared);
            }
            uploads.remove(id);
            tracing::info!(path = %target.path.display(), size = part.size, sha256 = %declared, "upload complete");
            Ok(stored(target.existed, declared))
        }
        Err(r) => {
            if r.status == status::BAD_REQUEST || r.status == status::PRECONDITION_FAILED {
                // The bytes are wrong, or the name was taken from a create-only caller:
                // keeping them would only let a retry fail the same way.
                uploads.remove(id);
                let _ = std::fs::remove_file(&part.staging);
                let _ = std::fs::remove_file(&part.sidecar);
            } else {
                part.lock().completing = false;
            }
            Err(r)
        }
    }
}

/// Hash the staging file, compare, make it durable and rename it into place; the stored
/// file as [`stored_resource`] finds it.
fn finish(
    part: &Part,
    declared: Sha256Digest,
    root: &Path,
    request_path: &str,
    replace: Replace,
) -> Result<Option<Resource>, Refusal> {
    let actual = part
        .whole_digest()
        .map_err(|e| Refusal::io("reading", &part.staging, &e))?;
    if actual != declared {
        return Err(Refusal::new(
            status::BAD_REQUEST,
            "the file's SHA-256 differs from the declared Repr-Digest; nothing was stored\n",
            format!(
                "{}: got {actual}, declared {declared}",
                part.target.display()
            ),
        ));
    }
    stored_digest::keep(&part.file, actual, &part.staging);
    commit(&part.file, &part.staging, &part.target, replace)?;
    let _ = std::fs::remove_file(&part.sidecar);
    Ok(stored_resource(root, request_path, &part.file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge() {
        let mut s = BTreeMap::new();
        insert_range(&mut s, 10, 20);
        insert_range(&mut s, 0, 5);
        insert_range(&mut s, 5, 10);
        insert_range(&mut s, 30, 40);
        insert_range(&mut s, 15, 32);
        assert_eq!(s.into_iter().collect::<Vec<_>>(), vec![(0, 40)]);
    }

    #[test]
    fn content_range_needs_a_total_and_order() {
        assert_eq!(parse_content_range("bytes 0-9/10"), Some((0, 10, 10)));
        assert_eq!(parse_content_range("bytes 5-4/10"), None);
        assert_eq!(parse_content_range("bytes 0-10/10"), None);
        assert_eq!(parse_content_range("bytes 0-9/*"), None);
        assert_eq!(parse_content_range("items 0-9/10"), None);
        // What `u64::from_str` alone would take.
        assert_eq!(parse_content_range("bytes +0-9/10"), None);
        assert_eq!(parse_content_range("bytes 0-+9/10"), None);
    }

    #[test]
    fn upload_ids_are_file_name_safe() {
        assert!(valid_id("0123456789abcdef"));
        assert!(!valid_id("short"));
        assert!(!valid_id("../../../../etc/passwd-x"));
        assert!(!valid_id("0123456789abcdef/"));
    }
}
