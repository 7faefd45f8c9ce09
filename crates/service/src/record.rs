//! The record of one request: listed on the status page while it runs ([`activity`]), and,
//! when its [`Finish`] is dropped with the body (or the plan of a body-less answer), counted
//! in the metrics, kept among the last errors and written to the access log. A leaf under
//! the plan and the bodies that carry the `Finish`: it knows the request, not the answer.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

use xfer_common::metrics::{self, CopyDirection, TransferDirection};

use crate::access::Identity;
use crate::access_log::{self, Checksum};
use crate::request::{Method, Request};

/// Errors kept for the status page.
const LAST_ERRORS: usize = 20;

/// A request in progress, as the status page shows it.
#[derive(Debug)]
pub(crate) struct Live {
    pub method: String,
    pub path: String,
    pub protocol: &'static str,
    pub peer: SocketAddr,
    pub started: Instant,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// The size of the resource or the upload, once known; 0 when unknown.
    pub size: AtomicU64,
}

/// A finished request that failed, for the status page.
#[derive(Debug, Clone)]
pub(crate) struct FailedRequest {
    pub time: SystemTime,
    pub method: String,
    pub path: String,
    pub status: u16,
    pub detail: String,
}

/// What runs now and what failed lately, for the whole process.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    pub(crate) next: AtomicU64,
    pub live: Mutex<HashMap<u64, Arc<Live>>>,
    pub errors: Mutex<VecDeque<FailedRequest>>,
}

pub(crate) fn activity() -> &'static Activity {
    static ACTIVITY: OnceLock<Activity> = OnceLock::new();
    ACTIVITY.get_or_init(Activity::default)
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The outcome of a third-party copy, filled in by its driver when it ends.
#[derive(Debug, Default)]
pub struct CopyReport {
    pub(crate) bytes: AtomicU64,
    pub(crate) success: OnceLock<bool>,
}

impl CopyReport {
    /// Record the outcome, and count it in the metrics.
    pub(crate) fn finish(&self, direction: CopyDirection, bytes: u64, success: bool) {
        self.bytes.store(bytes, Ordering::Relaxed);
        let _ = self.success.set(success);
        metrics::global().count_copy(direction, success);
    }
}

/// What an upload request is to the upload it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UploadPart {
    /// Not an upload.
    None,
    /// The whole file in one request (a plain `PUT`).
    Whole,
    /// The request that completes a parallel or resumable upload.
    Last,
    /// One part of many: counted as bytes and a request, not as an upload.
    Part,
}

impl UploadPart {
    pub(crate) fn of(req: &Request) -> Self {
        let up = &req.upload;
        match req.method {
            Method::Put | Method::Post | Method::Patch => {}
            _ => return Self::None,
        }
        let draft_last = up.draft.upload_complete.as_deref().map(str::trim) == Some("?1");
        let draft = up.draft.upload_complete.is_some() || up.draft.upload_offset.is_some();
        if up.complete || draft_last {
            Self::Last
        } else if up.id.is_some() || draft || up.content_range.is_some() {
            Self::Part
        } else if req.method == Method::Put {
            Self::Whole
        } else {
            Self::None
        }
    }
}

/// Ends the record of a request when dropped: with the plan for a body-less answer, with the
/// body otherwise.
pub struct Finish {
    pub(crate) id: u64,
    pub(crate) live: Arc<Live>,
    pub(crate) time: SystemTime,
    pub(crate) identity: Identity,
    pub(crate) status: u16,
    pub(crate) remote: Option<String>,
    pub(crate) checksum: Option<Checksum>,
    pub(crate) copy: Option<Arc<CopyReport>>,
    pub(crate) upload: UploadPart,
    pub(crate) detail: Option<String>,
    /// The body is a stream or a listing, which says whether it was sent to its end.
    pub(crate) streamed: bool,
    pub(crate) complete: bool,
}

impl std::fmt::Debug for Finish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Finish").field("id", &self.id).finish()
    }
}

impl Finish {
    /// Body bytes handed to the codec.
    pub(crate) fn sent(&self, n: u64) {
        self.live.bytes_out.fetch_add(n, Ordering::Relaxed);
        metrics::global().add_bytes_out(self.live.protocol, n);
    }

    /// The SHA-256 a body's trailer carried.
    pub(crate) fn trailer(&mut self, hex: String) {
        self.checksum.get_or_insert(Checksum {
            algorithm: "sha-256".into(),
            value: hex,
            of: "body",
        });
    }

    /// The body went out to its end.
    pub(crate) fn completed(&mut self) {
        self.complete = true;
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        let live = &self.live;
        let a = activity();
        lock(&a.live).remove(&self.id);
        let elapsed = live.started.elapsed();
        let bytes_in = live.bytes_in.load(Ordering::Relaxed);
        let mut bytes_out = live.bytes_out.load(Ordering::Relaxed);
        let m = metrics::global();
        m.count_request(&live.method, self.status);
        let method = Method::from_name(&live.method);
        let copy = self.copy.as_ref().map(|c| {
            bytes_out = c.bytes.load(Ordering::Relaxed);
            c.success.get().copied().unwrap_or(false)
        });
        let aborted = self.streamed && !self.complete;
        // A refusal for credentials or method never began an upload.
        let refused = matches!(self.status, 401 | 403 | 405);
        if matches!(self.upload, UploadPart::Whole | UploadPart::Last) && !refused {
            m.count_upload(self.status < 400);
        }
        if self.upload == UploadPart::Whole && self.status < 400 {
            // One request is the whole transfer only for a plain PUT.
            m.observe_transfer(TransferDirection::Upload, elapsed.as_secs_f64(), bytes_in);
        } else if method == Method::Get && matches!(self.status, 200 | 206) && self.streamed {
            m.observe_transfer(
                TransferDirection::Download,
                elapsed.as_secs_f64(),
                bytes_out,
            );
        }
        let failed = self.status >= 400 || aborted || copy == Some(false);
        if failed {
            let detail = match (&self.detail, aborted, copy) {
                (_, _, Some(false)) => "third-party copy failed".to_string(),
                (_, true, _) => "the body was not sent to its end".to_string(),
                (Some(d), _, _) => d.clone(),
                (None, _, _) => String::new(),
            };
            let mut errors = lock(&a.errors);
            if errors.len() == LAST_ERRORS {
                errors.pop_front();
            }
            errors.push_back(FailedRequest {
                time: SystemTime::now(),
                method: live.method.clone(),
                path: live.path.clone(),
                status: self.status,
                detail,
            });
        }
        if access_log::is_on() {
            let line = access_log::Line {
                time: self.time,
                identity: &self.identity,
                method: &live.method,
                path: &live.path,
                status: self.status,
                bytes_in,
                bytes_out,
                seconds: elapsed.as_secs_f64(),
                protocol: live.protocol,
                client: live.peer,
                remote: self.remote.as_deref(),
                copy_result: copy,
                complete: !aborted,
                checksum: self.checksum.as_ref(),
            };
            access_log::write(&line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_requests_are_uploads() {
        let peer = "127.0.0.1:1".parse().expect("address");
        let req = |m: Method| Request::new(m, "/f", peer, "h2");
        assert_eq!(UploadPart::of(&req(Method::Get)), UploadPart::None);
        assert_eq!(UploadPart::of(&req(Method::Put)), UploadPart::Whole);
        let mut part = req(Method::Put);
        part.upload.id = Some("u1".into());
        assert_eq!(UploadPart::of(&part), UploadPart::Part);
        part.upload.complete = true;
        assert_eq!(UploadPart::of(&part), UploadPart::Last);
        let mut append = req(Method::Patch);
        append.upload.draft.upload_offset = Some("10".into());
        assert_eq!(UploadPart::of(&append), UploadPart::Part);
        append.upload.draft.upload_complete = Some("?1".into());
        assert_eq!(UploadPart::of(&append), UploadPart::Last);
    }
}
