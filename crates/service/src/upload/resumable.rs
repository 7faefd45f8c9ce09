//! Resumable single-stream uploads as the IETF draft defines them
//! (draft-ietf-httpbis-resumable-upload-12, interop version 9; `docs/upload-protocol.md`).
//!
//! A `PUT` or `POST` carrying `Upload-Complete` creates an *upload resource*,
//! `/.xfer/uploads/<id>`, announced in `Location`. `HEAD` (or `GET`) on it tells the offset,
//! `PATCH` with `application/partial-upload` appends at that offset, `DELETE` cancels. Bytes
//! go, in order, into a staging file beside the target, exactly as for the other ways in; the
//! upload's offset is the staging file's length, so it survives a server restart together with
//! a small record (`<root>/.xfer-upload.resumable/<id>`: target path, length, declared digest).
//! When the client marks the upload complete, the whole file is hashed, compared with the
//! `Repr-Digest` it declared (if any) and renamed into place.
//!
//! One request writes at a time. A newer request for the same upload (the client resuming
//! after a connection it considers dead) stops the older one at its next piece, as the draft
//! recommends, so a half-open connection never blocks a resumption.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read as _};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use xfer_common::DigestCache;
use xfer_core::digest::{Sha256Digest, Sha256Hasher};

use super::place::{commit, Replace};
use super::refusal::Refusal;
use super::staging_files;
use super::whole::whole;
use super::write::{
    digest_field, hash_file, off_runtime, resolve_for_write, staging_name, stored, stored_resource,
    to_completion, UploadBody, UploadConfig, WRITE_BLOCK,
};
use crate::plan::{Body, ResponsePlan};
pub use crate::request::DraftHead;
use crate::request::UploadHead;
use crate::status;

/// The draft's interop version this server speaks (`Upload-Draft-Interop-Version`).
pub const INTEROP_VERSION: &str = "9";
/// Where upload resources live: `/.xfer/uploads/<id>`.
pub const RESOURCE_PREFIX: &str = "/.xfer/uploads/";
/// Media type of an append's content.
pub const PARTIAL_UPLOAD: &str = "application/partial-upload";
const PROBLEM_JSON: &str = "application/problem+json";
/// Directory of upload records under the root; the staging prefix hides it from every request.
const RECORD_DIR: &str = ".xfer-upload.resumable";

impl DraftHead {
    /// `Upload-Complete`, when present and a valid Boolean (anything else is ignored, as the
    /// draft says).
    pub fn complete(&self) -> Option<bool> {
        match sf_bare_item(self.upload_complete.as_deref()?) {
            "?1" => Some(true),
            "?0" => Some(false),
            _ => None,
        }
    }

    fn offset(&self) -> Option<u64> {
        sf_non_negative_integer(self.upload_offset.as_deref()?)
    }

    fn length(&self) -> Option<u64> {
        sf_non_negative_integer(self.upload_length.as_deref()?)
    }

    /// The client names another iteration of the draft than this server's.
    fn other_interop_version(&self) -> bool {
        self.interop_version
            .as_deref()
            .is_some_and(|v| sf_bare_item(v) != INTEROP_VERSION)
    }
}

/// The item without parameters (`?1;x=y` is `?1`).
fn sf_bare_item(v: &str) -> &str {
    v.split(';').next().unwrap_or("").trim()
}

/// An RFC 9651 Integer that is not negative: 1 to 15 digits.
fn sf_non_negative_integer(v: &str) -> Option<u64> {
    let v = sf_bare_item(v);
    if v.is_empty() || v.len() > 15 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// The id in `/.xfer/uploads/<id>`, when `path` names an upload resource.
pub fn resource_id(path: &str) -> Option<&str> {
    path.strip_prefix(RESOURCE_PREFIX)
}

/// Ids are 32 lower-case hex digits from the system's random source: unguessable, and safe
/// as file names.
fn valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn new_id() -> io::Result<String> {
    let mut raw = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut raw)?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

/// Resumable uploads a server knows, by id.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    uploads: Mutex<HashMap<String, Arc<Resumable>>>,
}

/// One upload resource.
#[derive(Debug)]
pub struct Resumable {
    id: String,
    /// The target as requested (percent-encoded), for access checks and the digest cache.
    request_path: String,
    target: PathBuf,
    staging: PathBuf,
    record: PathBuf,
    file: File,
    state: Mutex<State>,
    /// Held by the one request that writes, or reads a settled offset.
    writer: tokio::sync::Mutex<()>,
    /// Bumped by every request that wants the upload; a writer whose generation is no longer
    /// the newest stops.
    generation: AtomicU64,
    preempt: tokio::sync::Notify,
}

#[derive(Debug)]
struct State {
    offset: u64,
    length: Option<u64>,
    repr_digest: Option<Sha256Digest>,
    complete: bool,
    last_activity: Instant,
}

impl Resumable {
    /// The target path as requested, which access control checks.
    pub fn request_path(&self) -> &str {
        &self.request_path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn location(&self) -> String {
        format!("{RESOURCE_PREFIX}{}", self.id)
    }

    /// Stop any request writing to this upload and wait until it has; returns the writer lock
    /// and this request's generation.
    async fn take_over(&self) -> (tokio::sync::MutexGuard<'_, ()>, u64) {
        let mine = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        self.preempt.notify_waiters();
        let guard = self.writer.lock().await;
        (guard, mine)
    }

    fn record_text(&self) -> String {
        let s = self.lock();
        format!(
            "path {}\nlength {}\ndigest {}\n",
            self.request_path,
            s.length.map_or("-".to_string(), |l| l.to_string()),
            s.repr_digest
                .map_or("-".to_string(), |d| d.to_header_value()),
        )
    }

    fn remove_files(&self) {
        let _ = std::fs::remove_file(&self.staging);
        let _ = std::fs::remove_file(&self.record);
    }
}

impl Registry {
    fn get(&self, id: &str) -> Option<Arc<Resumable>> {
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn insert(&self, up: Arc<Resumable>) -> Arc<Resumable> {
        let mut map = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(up.id.clone()).or_insert(up).clone()
    }

    fn remove(&self, id: &str) {
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// Remove uploads idle for longer than `expiry` (completed ones are forgotten then too);
    /// one being written to is left alone. Returns how many.
    pub(crate) fn sweep(&self, expiry: Duration) -> usize {
        let expired: Vec<Arc<Resumable>> = {
            let mut map = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, u)| {
                    u.lock().last_activity.elapsed() > expiry && u.writer.try_lock().is_ok()
                })
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for u in &expired {
            if !u.lock().complete {
                tracing::info!(target = %u.target.display(), "abandoned resumable upload expired; removing its staging file");
                u.remove_files();
            }
        }
        expired.len()
    }
}

/// The upload resource `id`: known to this process, or restored from its record after a
/// restart (unless older than the expiry: then its files are removed). `None` for an unknown
/// or malformed id.
pub(crate) async fn lookup(
    root: &Path,
    registry: &Arc<Registry>,
    cfg: &UploadConfig,
    id: &str,
) -> Option<Arc<Resumable>> {
    if !valid_id(id) {
        return None;
    }
    if let Some(u) = registry.get(id) {
        return Some(u);
    }
    let (root, id_owned, expiry) = (root.to_path_buf(), id.to_string(), cfg.expiry);
    let restored = off_runtime(move || Ok(restore(&root, &id_owned, expiry)))
        .await
        .ok()
        .flatten()?;
    Some(registry.insert(Arc::new(restored)))
}

fn restore(root: &Path, id: &str, expiry: Duration) -> Option<Resumable> {
    let record = root.join(RECORD_DIR).join(id);
    let meta = std::fs::symlink_metadata(&record).ok()?;
    let text = staging_files::read_text(&record).ok()?;
    let mut fields = HashMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(' ') {
            fields.insert(k, v);
        }
    }
    let request_path = fields.get("path")?.to_string();
    let length = match fields.get("length") {
        Some(&"-") | None => None,
        Some(v) => Some(v.parse().ok()?),
    };
    let repr_digest = match fields.get("digest") {
        Some(&"-") | None => None,
        Some(v) => Sha256Digest::from_header_value(v).ok().flatten(),
    };
    let target = resolve_for_write(root, &request_path).ok()?;
    let staging = target.dir.join(staging_name(id, &target.name));
    let idle = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or_default();
    if idle > expiry {
        tracing::info!(target = %target.path.display(), "resumable upload from an earlier run expired; removing its staging file");
        let _ = std::fs::remove_file(&staging);
        let _ = std::fs::remove_file(&record);
        return None;
    }
    let file = staging_files::open_existing(&staging).ok()?;
    let offset = file.metadata().ok()?.len();
    if length.is_some_and(|l| offset > l) {
        return None;
    }
    tracing::info!(target = %target.path.display(), offset, "resumable upload restored from its record");
    Some(Resumable {
        id: id.to_string(),
        request_path,
        target: target.path,
        staging,
        record,
        file,
        state: Mutex::new(State {
            offset,
            length,
            repr_digest,
            complete: false,
            last_activity: Instant::now(),
        }),
        writer: tokio::sync::Mutex::new(()),
        generation: AtomicU64::new(0),
        preempt: tokio::sync::Notify::new(),
    })
}

/// Everything a resumable-upload request needs from the server.
pub(crate) struct Ctx<'a> {
    pub root: &'a Path,
    pub digests: &'a DigestCache,
    pub registry: &'a Arc<Registry>,
    pub cfg: &'a UploadConfig,
    /// Whether the caller of this request may replace a file that took the target's name
    /// since the upload began.
    pub replace: Replace,
}

/// A refusal in the draft's terms: its status, the state fields to report, and optionally a
/// problem type (RFC 9457).
struct Problem {
    refusal: Refusal,
    /// An RFC 9457 problem document as the body.
    problem: Option<String>,
    complete: Option<bool>,
    offset: Option<u64>,
    limit: bool,
}

impl From<Refusal> for Problem {
    fn from(refusal: Refusal) -> Self {
        Self {
            refusal,
            problem: None,
            complete: None,
            offset: None,
            limit: false,
        }
    }
}

impl Problem {
    fn plan(self, cfg: &UploadConfig) -> ResponsePlan {
        let mut plan = match self.problem {
            Some(json) => {
                let body = Bytes::from(json);
                ResponsePlan {
                    content_type: PROBLEM_JSON,
                    content_length: Some(body.len() as u64),
                    detail: Some(self.refusal.detail),
                    body: Body::Message(body),
                    ..ResponsePlan::empty(self.refusal.status)
                }
            }
            None => self.refusal.plan(),
        };
        if let Some(c) = self.complete {
            plan.headers.push(("upload-complete", sf_bool(c)));
        }
        if let Some(o) = self.offset {
            plan.headers.push(("upload-offset", o.to_string()));
        }
        if self.limit {
            plan.headers.push(("upload-limit", limit_field(cfg, None)));
        }
        plan
    }
}

fn sf_bool(v: bool) -> String {
    if v { "?1" } else { "?0" }.to_string()
}

/// `Upload-Limit`: the largest file, and how long the upload stays when left idle.
fn limit_field(cfg: &UploadConfig, idle: Option<Duration>) -> String {
    let left = cfg
        .expiry
        .saturating_sub(idle.unwrap_or_default())
        .as_secs();
    format!("max-size={}, max-age={left}", cfg.max_size)
}

/// `Upload-Limit` for `OPTIONS`: what any upload on this server may be.
pub(crate) fn options_limit(cfg: &UploadConfig) -> String {
    limit_field(cfg, None)
}

fn mismatching_offset(expected: u64, provided: u64) -> Problem {
    Problem {
        refusal: Refusal::new(
            status::CONFLICT,
            "",
            format!("Upload-Offset {provided}, the upload is at {expected}"),
        ),
        problem: Some(format!(
            "{{\"type\":\"https://iana.org/assignments/http-problem-types#mismatching-upload-offset\",\
             \"title\":\"Upload-Offset differs from the upload's offset\",\
             \"expected-offset\":{expected},\"provided-offset\":{provided}}}\n"
        )),
        complete: Some(false),
        offset: Some(expected),
        limit: false,
    }
}

fn inconsistent_length(detail: String) -> Problem {
    Problem {
        refusal: Refusal::new(status::BAD_REQUEST, "", detail),
        problem: Some(
            "{\"type\":\"https://iana.org/assignments/http-problem-types#inconsistent-upload-length\",\
             \"title\":\"the upload's length values disagree\"}\n"
                .to_string(),
        ),
        complete: Some(false),
        offset: None,
        limit: false,
    }
}

fn too_large(cfg: &UploadConfig, what: String) -> Problem {
    Problem {
        limit: true,
        complete: Some(false),
        ..Refusal::new(
            status::PAYLOAD_TOO_LARGE,
            "file too large for this server\n",
            format!("{what}; the limit is {} bytes", cfg.max_size),
        )
        .into()
    }
}

/// Upload creation: a `PUT` or `POST` of `request_path` with `Upload-Complete`.
pub(crate) async fn create(
    ctx: &Ctx<'_>,
    request_path: &str,
    head: &UploadHead,
    body: &mut dyn UploadBody,
) -> ResponsePlan {
    let draft = &head.draft;
    let Some(complete) = draft.complete() else {
        return Refusal::new(
            status::BAD_REQUEST,
            "Upload-Complete must be ?0 or ?1\n",
            "malformed Upload-Complete",
        )
        .plan();
    };
    if draft.other_interop_version() {
        // A client of another iteration of the draft: no upload resource, as the draft asks
        // of servers that do not offer resumption. A whole body is still a plain upload.
        if complete {
            let (root, replace) = (ctx.root, ctx.replace);
            return whole(
                root,
                ctx.digests,
                ctx.cfg,
                request_path,
                head,
                replace,
                body,
            )
            .await
            .unwrap_or_else(Refusal::plan);
        }
        return Refusal::new(
            status::BAD_REQUEST,
            "this server speaks Upload-Draft-Interop-Version 9 of the resumable upload draft\n",
            format!("interop version {:?}", draft.interop_version),
        )
        .plan();
    }
    match start(ctx, request_path, head, complete).await {
        Ok(up) => {
            let (guard, mine) = up.take_over().await;
            let result = append(ctx, &up, mine, complete, head, body, true).await;
            drop(guard);
            result.unwrap_or_else(|p| {
                let mut plan = p.plan(ctx.cfg);
                // No 104 carried the upload's address (see `docs/upload-protocol.md`): a
                // failed creation names it, so that the client can resume.
                if ctx.registry.get(&up.id).is_some() {
                    plan.location = Some(up.location());
                }
                plan
            })
        }
        Err(p) => p.plan(ctx.cfg),
    }
}

async fn start(
    ctx: &Ctx<'_>,
    request_path: &str,
    head: &UploadHead,
    complete: bool,
) -> Result<Arc<Resumable>, Problem> {
    let declared = head.draft.length();
    let length = match (declared, complete.then_some(head.content_length).flatten()) {
        (Some(a), Some(b)) if a != b => {
            return Err(inconsistent_length(format!(
                "Upload-Length {a} but the complete content is {b} bytes"
            )))
        }
        (a, b) => a.or(b),
    };
    if let Some(l) = length.filter(|&l| l > ctx.cfg.max_size) {
        return Err(too_large(ctx.cfg, format!("{l} bytes")));
    }
    let repr_digest = digest_field(&head.repr_digest, "Repr-Digest")?;
    let (root, path) = (ctx.root.to_path_buf(), request_path.to_string());
    let up = off_runtime(move || {
        let target = resolve_for_write(&root, &path)?;
        let id = new_id().map_err(|e| Refusal::io("reading", Path::new("/dev/urandom"), &e))?;
        let records = root.join(RECORD_DIR);
        std::fs::create_dir_all(&records).map_err(|e| Refusal::io("creating", &records, &e))?;
        let staging = target.dir.join(staging_name(&id, &target.name));
        let file = staging_files::create_new(&staging)
            .map_err(|e| Refusal::io("creating", &staging, &e))?;
        let up = Resumable {
            record: records.join(&id),
            id,
            request_path: path,
            target: target.path,
            staging,
            file,
            state: Mutex::new(State {
                offset: 0,
                length,
                repr_digest,
                complete: false,
                last_activity: Instant::now(),
            }),
            writer: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
            preempt: tokio::sync::Notify::new(),
        };
        if let Err(e) = std::fs::write(&up.record, up.record_text()) {
            up.remove_files();
            return Err(Refusal::io("creating", &up.record, &e));
        }
        Ok(up)
    })
    .await?;
    tracing::info!(target = %up.target.display(), id = %up.id, ?length, "resumable upload created");
    Ok(ctx.registry.insert(Arc::new(up)))
}

/// A request on an upload resource that access control let through.
pub(crate) async fn on_resource(
    ctx: &Ctx<'_>,
    found: Option<Arc<Resumable>>,
    method: &crate::request::Method,
    head: &UploadHead,
    body: &mut dyn UploadBody,
) -> ResponsePlan {
    let Some(up) = found else {
        return Refusal::new(
            status::NOT_FOUND,
            "no such upload (completed, cancelled or expired)\n",
            "unknown upload resource",
        )
        .plan();
    };
    match method {
        crate::request::Method::Head | crate::request::Method::Get => {
            let (guard, _) = up.take_over().await;
            let plan = offset_answer(ctx.cfg, &up);
            drop(guard);
            plan
        }
        crate::request::Method::Patch => patch(ctx, &up, head, body)
            .await
            .unwrap_or_else(|p| p.plan(ctx.cfg)),
        crate::request::Method::Delete => {
            let (guard, _) = up.take_over().await;
            ctx.registry.remove(&up.id);
            let was_complete = up.lock().complete;
            if !was_complete {
                let u = Arc::clone(&up);
                let _ = off_runtime(move || {
                    u.remove_files();
                    Ok(())
                })
                .await;
                tracing::info!(target = %up.target.display(), id = %up.id, "resumable upload cancelled");
            }
            drop(guard);
            ResponsePlan::empty(status::NO_CONTENT)
        }
        _ => {
            let mut plan = Refusal::new(
                status::METHOD_NOT_ALLOWED,
                "an upload resource takes HEAD, GET, PATCH and DELETE\n",
                format!("{} on an upload resource", method.as_str()),
            )
            .plan();
            plan.allow = Some("HEAD, GET, PATCH, DELETE");
            plan
        }
    }
}

/// Offset retrieval: 204 with the upload's state; never cached.
fn offset_answer(cfg: &UploadConfig, up: &Resumable) -> ResponsePlan {
    let s = up.lock();
    let mut plan = ResponsePlan::empty(status::NO_CONTENT);
    plan.headers.push(("upload-offset", s.offset.to_string()));
    plan.headers.push(("upload-complete", sf_bool(s.complete)));
    if let Some(l) = s.length {
        plan.headers.push(("upload-length", l.to_string()));
    }
    plan.headers.push((
        "upload-limit",
        limit_field(cfg, Some(s.last_activity.elapsed())),
    ));
    plan.headers.push(("cache-control", "no-store".to_string()));
    plan
}

async fn patch(
    ctx: &Ctx<'_>,
    up: &Arc<Resumable>,
    head: &UploadHead,
    body: &mut dyn UploadBody,
) -> Result<ResponsePlan, Problem> {
    let draft = &head.draft;
    let media = draft
        .content_type
        .as_deref()
        .and_then(|t| t.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase());
    if media.as_deref() != Some(PARTIAL_UPLOAD) {
        return Err(Refusal::new(
            status::UNSUPPORTED_MEDIA_TYPE,
            "an append needs Content-Type: application/partial-upload\n",
            format!("Content-Type {:?}", draft.content_type),
        )
        .into());
    }
    let Some(complete) = draft.complete() else {
        return Err(Refusal::new(
            status::BAD_REQUEST,
            "an append needs Upload-Complete: ?0 or ?1\n",
            "append without a valid Upload-Complete",
        )
        .into());
    };
    let Some(provided) = draft.offset() else {
        return Err(Refusal::new(
            status::BAD_REQUEST,
            "an append needs Upload-Offset\n",
            "append without a valid Upload-Offset",
        )
        .into());
    };
    let (guard, mine) = up.take_over().await;
    let (offset, done) = {
        let s = up.lock();
        (s.offset, s.complete)
    };
    if done {
        drop(guard);
        return Err(Problem {
            complete: Some(false),
            offset: Some(offset),
            ..Refusal::new(
                status::CONFLICT,
                "this upload is already complete\n",
                format!("upload {}", up.id),
            )
            .into()
        });
    }
    if provided != offset {
        drop(guard);
        return Err(mismatching_offset(offset, provided));
    }
    let result = append(ctx, up, mine, complete, head, body, false).await;
    drop(guard);
    result
}

/// Append the request content at the upload's offset; complete the upload when asked to.
/// The caller holds the writer lock under generation `mine`.
async fn append(
    ctx: &Ctx<'_>,
    up: &Arc<Resumable>,
    mine: u64,
    complete: bool,
    head: &UploadHead,
    body: &mut dyn UploadBody,
    creation: bool,
) -> Result<ResponsePlan, Problem> {
    let start = up.lock().offset;
    learn_length(ctx, up, start, complete, head).await?;
    if let Some(d) = digest_field(&head.repr_digest, "Repr-Digest")? {
        let changed = {
            let mut s = up.lock();
            let changed = s.repr_digest != Some(d);
            s.repr_digest = Some(d);
            changed
        };
        if changed {
            write_record(up).await?;
        }
    }
    let content_digest = digest_field(&head.content_digest, "Content-Digest")?;
    let limit = up.lock().length.unwrap_or(ctx.cfg.max_size);
    let received = receive(up, mine, start, limit, body).await;
    let (end, hash) = match received {
        Ok(r) => r,
        Err(Cut::Interrupted(why)) => {
            // What arrived stays: the client resumes from the offset.
            let offset = up.lock().offset;
            tracing::info!(target = %up.target.display(), offset, "resumable upload interrupted: {why}");
            return Err(Problem {
                complete: Some(false),
                offset: Some(offset),
                ..Refusal::new(
                    if why == PREEMPTED {
                        status::CONFLICT
                    } else {
                        status::BAD_REQUEST
                    },
                    "the request content stopped early; ask for the offset and resume\n",
                    format!("{}: {why} at offset {offset}", up.target.display()),
                )
                .into()
            });
        }
        Err(Cut::TooLong) => {
            // The length is known and the content goes past it: the draft has the upload
            // resource end here.
            ctx.registry.remove(&up.id);
            up.remove_files();
            return Err(inconsistent_length(format!(
                "{}: content beyond the upload's length of {limit} bytes",
                up.target.display()
            )));
        }
        Err(Cut::Refused(r)) => {
            let offset = up.lock().offset;
            return Err(Problem {
                complete: Some(false),
                offset: Some(offset),
                limit: r.status == status::PAYLOAD_TOO_LARGE,
                ..r.into()
            });
        }
    };
    if let Some(expected) = content_digest {
        if expected != hash {
            // The content is wrong: it is not appended.
            let _ = up.file.set_len(start);
            up.lock().offset = start;
            return Err(Problem {
                complete: Some(false),
                offset: Some(start),
                ..Refusal::new(
                    status::BAD_REQUEST,
                    "Content-Digest does not match the content; it was not appended\n",
                    format!(
                        "{} bytes {start}-{end}: got {hash}, declared {expected}",
                        up.target.display()
                    ),
                )
                .into()
            });
        }
    }
    if complete {
        return finish(ctx, up, end).await;
    }
    let mut plan = ResponsePlan::empty(if creation {
        status::CREATED
    } else {
        status::NO_CONTENT
    });
    plan.location = Some(up.location());
    plan.headers.push(("upload-complete", sf_bool(false)));
    plan.headers.push(("upload-offset", end.to_string()));
    plan.headers
        .push(("upload-limit", limit_field(ctx.cfg, None)));
    Ok(plan)
}

/// Record the length this request declares (`Upload-Length`, or the offset plus a complete
/// request's `Content-Length`); it must agree with what the upload already knows.
async fn learn_length(
    ctx: &Ctx<'_>,
    up: &Arc<Resumable>,
    offset: u64,
    complete: bool,
    head: &UploadHead,
) -> Result<(), Problem> {
    let mut said = Vec::new();
    if let Some(l) = head.draft.length() {
        said.push(("Upload-Length", l));
    }
    if let (true, Some(n)) = (complete, head.content_length) {
        said.push((
            "Upload-Complete with Content-Length",
            offset.saturating_add(n),
        ));
    }
    let known = up.lock().length;
    let mut learned = known;
    for (how, l) in said {
        match learned {
            Some(k) if k != l => {
                return Err(inconsistent_length(format!(
                    "{}: {how} says {l} bytes, the upload {k}",
                    up.target.display()
                )))
            }
            _ => learned = Some(l),
        }
    }
    if let Some(l) = learned {
        if l < offset {
            return Err(inconsistent_length(format!(
                "{}: length {l} below the offset {offset}",
                up.target.display()
            )));
        }
        if l > ctx.cfg.max_size {
            return Err(too_large(ctx.cfg, format!("{l} bytes")));
        }
    }
    if learned != known {
        up.lock().length = learned;
        write_record(up).await?;
    }
    Ok(())
}

async fn write_record(up: &Arc<Resumable>) -> Result<(), Refusal> {
    let u = Arc::clone(up);
    off_runtime(move || {
        let tmp = u.record.with_extension("new");
        staging_files::replace_text(&u.record, &tmp, &u.record_text())
            .map_err(|e| Refusal::io("recording", &u.record, &e))
    })
    .await
}

const PREEMPTED: &str = "a newer request for this upload took over";

enum Cut {
    /// The body failed or a newer request took over; what was written stays.
    Interrupted(String),
    /// More content than the upload's length.
    TooLong,
    Refused(Refusal),
}

/// Write the body at the upload's offset in blocks, advancing the offset after each write.
/// Returns the new offset and the SHA-256 of this request's content.
async fn receive(
    up: &Arc<Resumable>,
    mine: u64,
    start: u64,
    limit: u64,
    body: &mut dyn UploadBody,
) -> Result<(u64, Sha256Digest), Cut> {
    let mut hasher = Sha256Hasher::new();
    let mut at = start;
    let mut pending: Vec<Bytes> = Vec::new();
    let mut pending_len = 0u64;
    loop {
        let notified = up.preempt.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let superseded = up.generation.load(Ordering::SeqCst) != mine;
        let next = if superseded {
            Err(PREEMPTED.to_string())
        } else {
            tokio::select! {
                piece = body.next_chunk() => Ok(piece),
                () = &mut notified => Err(PREEMPTED.to_string()),
            }
        };
        let (done, cut) = match next {
            Ok(Some(Ok(b))) => {
                pending_len += b.len() as u64;
                pending.push(b);
                (false, None)
            }
            Ok(None) => (true, None),
            Ok(Some(Err(e))) => (true, Some(e.to_string())),
            Err(why) => (true, Some(why)),
        };
        if at + pending_len > limit {
            return Err(Cut::TooLong);
        }
        if pending_len >= WRITE_BLOCK as u64 || (done && pending_len > 0) {
            let batch = std::mem::take(&mut pending);
            let n = std::mem::take(&mut pending_len);
            let u = Arc::clone(up);
            let (h, res) = tokio::task::spawn_blocking(move || {
                let mut h = hasher;
                let mut pos = at;
                for b in &batch {
                    if let Err(e) = u.file.write_all_at(b, pos) {
                        return (h, Err(e));
                    }
                    h.update(b);
                    pos += b.len() as u64;
                }
                (h, Ok(()))
            })
            .await
            .map_err(|e| {
                Cut::Refused(Refusal::new(
                    status::INTERNAL_ERROR,
                    "server error\n",
                    e.to_string(),
                ))
            })?;
            hasher = h;
            if let Err(e) = res {
                // A partial write leaves bytes past the offset; the next append overwrites
                // them, and the staging file is cut back to the offset here.
                let _ = up.file.set_len(at);
                return Err(Cut::Refused(Refusal::io("writing", &up.staging, &e)));
            }
            at += n;
            let mut s = up.lock();
            s.offset = at;
            s.last_activity = Instant::now();
        }
        if let Some(why) = cut {
            return Err(Cut::Interrupted(why));
        }
        if done {
            return Ok((at, hasher.finish()));
        }
    }
}

/// The client marked the upload complete at `end` bytes: verify and rename into place.
/// Its own task, so a client gone mid-way cannot leave the file stored but the upload
/// still open.
async fn finish(ctx: &Ctx<'_>, up: &Arc<Resumable>, end: u64) -> Result<ResponsePlan, Problem> {
    let (root, digests, registry) = (
        ctx.root.to_path_buf(),
        ctx.digests.clone(),
        Arc::clone(ctx.registry),
    );
    let (up, replace) = (Arc::clone(up), ctx.replace);
    let settled =
        to_completion(
            async move { Ok(settle(&root, &digests, &registry, &up, end, replace).await) },
        )
        .await;
    settled.unwrap_or_else(|r| Err(r.into()))
}

async fn settle(
    root: &Path,
    digests: &DigestCache,
    registry: &Arc<Registry>,
    up: &Arc<Resumable>,
    end: u64,
    replace: Replace,
) -> Result<ResponsePlan, Problem> {
    let declared = {
        let mut s = up.lock();
        s.length = Some(end);
        s.repr_digest
    };
    let u = Arc::clone(up);
    let (root, path) = (root.to_path_buf(), up.request_path.clone());
    let finished = off_runtime(move || {
        let actual = hash_file(&u.file, end).map_err(|e| Refusal::io("reading", &u.staging, &e))?;
        if let Some(declared) = declared {
            if actual != declared {
                return Err(Refusal::new(
                    status::BAD_REQUEST,
                    "the file's SHA-256 differs from the declared Repr-Digest; nothing was stored\n",
                    format!("{}: got {actual}, declared {declared}", u.target.display()),
                ));
            }
        }
        // The tree may have changed since creation: check the way in again.
        let target = resolve_for_write(&root, &path)?;
        xfer_common::stored_digest::keep(&u.file, actual, &u.staging);
        commit(&u.file, &u.staging, &target.path, replace)?;
        let _ = std::fs::remove_file(&u.record);
        Ok((actual, target.existed, stored_resource(&root, &path, &u.file)))
    })
    .await;
    match finished {
        Ok((digest, existed, resource)) => {
            if let Some(resource) = resource {
                digests.insert(&resource, digest);
            }
            up.lock().complete = true;
            tracing::info!(path = %up.target.display(), size = end, sha256 = %digest, "resumable upload complete");
            let mut plan = stored(existed, digest);
            plan.location = Some(up.location());
            plan.headers.push(("upload-complete", sf_bool(true)));
            Ok(plan)
        }
        Err(r) => {
            if r.status == status::BAD_REQUEST
                || r.status == status::FORBIDDEN
                || r.status == status::CONFLICT
                || r.status == status::PRECONDITION_FAILED
            {
                // Processing the whole representation failed: the upload is over.
                registry.remove(&up.id);
                up.remove_files();
                return Err(Problem {
                    complete: Some(true),
                    ..r.into()
                });
            }
            Err(Problem {
                complete: Some(false),
                offset: Some(end),
                ..r.into()
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_field_items() {
        let head = |c: &str| DraftHead {
            upload_complete: Some(c.into()),
            ..DraftHead::default()
        };
        assert_eq!(head("?1").complete(), Some(true));
        assert_eq!(head(" ?0 ").complete(), Some(false));
        assert_eq!(head("?1;a=b").complete(), Some(true));
        assert_eq!(head("1").complete(), None);
        assert_eq!(head("true").complete(), None);
        assert_eq!(sf_non_negative_integer("25000000"), Some(25_000_000));
        assert_eq!(sf_non_negative_integer("-1"), None);
        assert_eq!(sf_non_negative_integer("1234567890123456"), None);
        assert_eq!(sf_non_negative_integer("12a"), None);
        assert_eq!(sf_non_negative_integer(""), None);
    }

    #[test]
    fn ids_are_random_hex() {
        let a = new_id().expect("urandom");
        let b = new_id().expect("urandom");
        assert!(valid_id(&a) && valid_id(&b));
        assert_ne!(a, b);
        assert!(!valid_id("../../etc/passwd"));
        assert!(!valid_id(&a.to_uppercase()));
        assert_eq!(resource_id("/.xfer/uploads/abc"), Some("abc"));
        assert_eq!(resource_id("/in/x"), None);
    }
}
