//! The decisions: method, resource, status, range, validators, digests, hashing, fault,
//! logging. Directories and WebDAV are decided in [`crate::directory`] and [`crate::dav`].

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use xfer_common::paths::sanitize_relative;
use xfer_common::ranges::{parse_range, RangeOutcome};
use xfer_common::Resource;
use xfer_core::checksum::{ChecksumAlgorithm, Checksummer};

use crate::access::{Denied, Identity, Operation};
use crate::body::{BodyStream, ChecksumsOnSend, StreamPlan};
use crate::checksums;
use crate::config::ServiceConfig;
use crate::dav_write::{self, Change};
use crate::exchange::Exchange;
use crate::plan::{Body, ContentRange, ResponsePlan, CONTENT_TYPE_BYTES};
use crate::request::{Method, Request};
use crate::status::{self, allowed, refusal_for};
use crate::tpc;
use crate::upload::{self, resumable, NoBody, Replace, UploadBody, UploadConfig};
use crate::{dav, directory, macaroon, status_page};

/// How long a macaroon refusal waits to name its caller in the log (a JWT whose issuer's keys
/// must first be fetched is logged as anonymous past it).
const MACAROON_IDENTITY_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Where a server's request core comes from: one shared with the process's other codecs, or
/// its own, built from a configuration when the server starts (a server used alone, as tests
/// and embedders do).
#[derive(Debug, Clone)]
pub enum ServiceSource {
    /// Build a core of its own with [`Service::new`].
    Build(Box<ServiceConfig>),
    /// Serve this core, shared with other codecs.
    Shared(Arc<Service>),
}

impl ServiceSource {
    /// The configuration the core has or will have.
    pub fn config(&self) -> &ServiceConfig {
        match self {
            Self::Build(cfg) => cfg,
            Self::Shared(service) => service.config(),
        }
    }

    /// The core to serve: the shared one, or one built now.
    pub fn into_service(self) -> Arc<Service> {
        match self {
            Self::Build(cfg) => Arc::new(Service::new(*cfg)),
            Self::Shared(service) => service,
        }
    }
}

impl From<ServiceConfig> for ServiceSource {
    fn from(cfg: ServiceConfig) -> Self {
        Self::Build(Box::new(cfg))
    }
}

impl From<Arc<Service>> for ServiceSource {
    fn from(service: Arc<Service>) -> Self {
        Self::Shared(service)
    }
}

/// The request core; cheap to share behind an `Arc`.
///
/// A process builds one and hands it to every codec (`xfer serve` does), the way hyper's
/// `serve_connection(io, service)` takes its service: the codecs then share its digests,
/// checksums, uploads in progress, access rules and memory budget because they share it, not
/// because each was handed copies of them.
#[derive(Debug)]
pub struct Service {
    cfg: ServiceConfig,
}

impl Service {
    /// The one constructor: every server's core, shared or its own, is built here.
    pub fn new(cfg: ServiceConfig) -> Self {
        Self { cfg }
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.cfg
    }

    /// Decide the response to `req`, and log it once.
    pub async fn respond(&self, req: &Request) -> ResponsePlan {
        self.respond_with_body(req, &mut NoBody).await
    }

    /// As [`Service::respond`], for a request with a body (an upload).
    pub async fn respond_with_body(
        &self,
        req: &Request,
        body: &mut dyn UploadBody,
    ) -> ResponsePlan {
        let exchange = Exchange::begin(req);
        let (mut plan, who) = if status_page::is_request(req) {
            (status_page::answer(req), Identity::Anonymous)
        } else {
            self.answer(req, &mut exchange.counting(body)).await
        };
        log(req, &plan, &who);
        exchange.attach(req, &mut plan, who);
        plan
    }

    /// The plan for `req`, and who asked.
    async fn answer(&self, req: &Request, body: &mut dyn UploadBody) -> (ResponsePlan, Identity) {
        if macaroon::is_request(req) {
            // Answered before anything else, whoever asks. The identity is for the log only,
            // and the answer waits for it only briefly: a JWT whose issuer's keys are not at
            // hand logs as anonymous rather than hold the refusal up.
            let plan =
                macaroon::refusal(allowed(self.cfg.uploads.is_some(), self.cfg.tpc.is_some()));
            let who = tokio::time::timeout(
                MACAROON_IDENTITY_WAIT,
                self.cfg.access.identify(&req.credentials, &req.path),
            )
            .await
            .unwrap_or(Identity::Anonymous);
            return (plan, who);
        }
        if let (Some(up), Some(id)) = (&self.cfg.uploads, resumable::resource_id(&req.path)) {
            return self.upload_resource(req, up, id, body).await;
        }
        // With uploads off a PUT is answered 405 whoever asks, rather than asking for
        // credentials that could not help.
        let op = match (&req.method, &self.cfg.uploads) {
            (
                Method::Put
                | Method::Post
                | Method::Patch
                | Method::Delete
                | Method::Mkcol
                | Method::Move,
                None,
            ) => Operation::Read,
            _ => operation(req, &self.cfg.root).await,
        };
        match self
            .cfg
            .access
            .authorize_write(&req.credentials, op, &req.path)
            .await
        {
            // A push makes this server send a file where the caller says: never for anonymous.
            Ok((Identity::Anonymous, _))
                if req.method == Method::Copy && self.cfg.tpc.is_some() =>
            {
                denial(Denied::Unauthenticated {
                    invalid_token: false,
                })
            }
            Ok((who, may_modify)) => (self.decide(req, replace(may_modify), body).await, who),
            Err(denied) => denial(denied),
        }
    }

    /// A request on a resumable upload's resource: the caller needs write access to the file
    /// the upload goes to (or, for an unknown upload, to the resource's own path, so that an
    /// anonymous caller learns it must authenticate and nothing about which uploads exist).
    async fn upload_resource(
        &self,
        req: &Request,
        up: &UploadConfig,
        id: &str,
        body: &mut dyn UploadBody,
    ) -> (ResponsePlan, Identity) {
        let cfg = &self.cfg;
        let found = resumable::lookup(&cfg.root, cfg.upload_state.resumable(), up, id).await;
        let path = found
            .as_ref()
            .map_or(req.path.as_str(), |u| u.request_path());
        let op = write_operation(&cfg.root, path).await;
        let checked = match cfg.access.authorize_write(&req.credentials, op, path).await {
            // An authenticated caller asking for an unknown upload learns it is unknown.
            Err(Denied::OutOfScope { identity, .. }) if found.is_none() => Ok((identity, false)),
            other => other,
        };
        match checked {
            Ok((who, may_modify)) => {
                let ctx = resumable::Ctx {
                    root: &cfg.root,
                    digests: &cfg.digests,
                    registry: cfg.upload_state.resumable(),
                    cfg: up,
                    replace: replace(may_modify),
                };
                (
                    resumable::on_resource(&ctx, found, &req.method, &req.upload, body).await,
                    who,
                )
            }
            Err(denied) => denial(denied),
        }
    }

    /// `COPY`: third-party copy when it is on; a pull also needs uploads on, as it writes.
    async fn copy(&self, req: &Request, replace: Replace) -> ResponsePlan {
        let cfg = &self.cfg;
        let refuse = |text: &'static str, detail: &str| {
            let mut plan =
                ResponsePlan::refusal(status::METHOD_NOT_ALLOWED, text, Some(detail.to_string()));
            plan.allow = Some(allowed(cfg.uploads.is_some(), cfg.tpc.is_some()));
            plan
        };
        let Some(tpc) = &cfg.tpc else {
            return refuse(
                "this server does not do third-party copy\n",
                "COPY while third-party copy is off",
            );
        };
        if tpc::is_pull(req) && cfg.uploads.is_none() {
            return refuse(
                "this server does not accept writes (xfer serve --allow-upload), so it cannot pull\n",
                "COPY with Source while uploads are off",
            );
        }
        tpc::copy(tpc, &cfg.root, &cfg.digests, req, replace).await
    }

    /// `DELETE`, `MKCOL`, `MOVE` ([`dav_write`]); the caller may change the request path.
    async fn change_tree(&self, req: &Request, body: &mut dyn UploadBody) -> ResponsePlan {
        let cfg = &self.cfg;
        match req.method {
            Method::Mkcol => {
                dav_write::mkcol(cfg, req, body, allowed(true, cfg.tpc.is_some())).await
            }
            Method::Move => {
                // A rename removes the source's name and may replace the destination: the
                // caller must be allowed to modify both.
                let may_modify = |dest: String| async move {
                    cfg.access
                        .authorize(
                            &req.credentials,
                            dav_write::operation(Change::Modify),
                            &dest,
                        )
                        .await
                        .map(|_| ())
                        .map_err(|denied| denial(denied).0)
                };
                dav_write::mv(cfg, req, may_modify).await
            }
            _ => dav_write::delete(cfg, req).await,
        }
    }

    /// The answer to a request the caller may make; `replace` says whether a write may
    /// replace a file that takes the target's name before it is stored.
    async fn decide(
        &self,
        req: &Request,
        replace: Replace,
        body: &mut dyn UploadBody,
    ) -> ResponsePlan {
        let cfg = &self.cfg;
        if let (Method::Put | Method::Post, Some(up), Some(_)) =
            (&req.method, &cfg.uploads, &req.upload.draft.upload_complete)
        {
            let ctx = resumable::Ctx {
                root: &cfg.root,
                digests: &cfg.digests,
                registry: cfg.upload_state.resumable(),
                cfg: up,
                replace,
            };
            return resumable::create(&ctx, &req.path, &req.upload, body).await;
        }
        let head = match req.method {
            Method::Get => false,
            Method::Head => match (&req.upload.id, &cfg.uploads) {
                (Some(id), Some(_)) => {
                    return upload::status_of(&cfg.root, &cfg.upload_state, &req.path, id).await
                }
                _ => true,
            },
            Method::Put => match &cfg.uploads {
                Some(up) => {
                    return upload::put(
                        &cfg.root,
                        &cfg.digests,
                        &cfg.upload_state,
                        up,
                        &req.path,
                        &req.upload,
                        replace,
                        body,
                    )
                    .await
                }
                None => {
                    let mut plan = ResponsePlan::refusal(
                        status::METHOD_NOT_ALLOWED,
                        "this server does not accept uploads (xfer serve --allow-upload)\n",
                        Some("PUT while uploads are off".into()),
                    );
                    plan.allow = Some(allowed(false, cfg.tpc.is_some()));
                    return plan;
                }
            },
            Method::Copy => return self.copy(req, replace).await,
            Method::Delete | Method::Mkcol | Method::Move if cfg.uploads.is_some() => {
                return self.change_tree(req, body).await
            }
            Method::Options => return dav::options(cfg.uploads.as_ref(), cfg.tpc.is_some()),
            Method::Propfind => return dav::propfind(&self.cfg, req).await,
            Method::List => return directory::manifest(&self.cfg, req, false).await,
            Method::Post
            | Method::Patch
            | Method::Delete
            | Method::Mkcol
            | Method::Move
            | Method::Other(_) => {
                let mut plan = ResponsePlan::refusal(
                    status::METHOD_NOT_ALLOWED,
                    "method not allowed here (see Allow)\n",
                    Some(format!("method {} not allowed", req.method.as_str())),
                );
                plan.allow = Some(allowed(cfg.uploads.is_some(), cfg.tpc.is_some()));
                return plan;
            }
        };
        if directory::wants_manifest(req) {
            return directory::manifest(cfg, req, head).await;
        }
        let resource =
            match Resource::open_async(cfg.root.clone(), req.path.clone(), req.query.clone()).await
            {
                Ok(r) => r,
                Err(e) => {
                    // Only a path that is not a file costs the second look, so serving files
                    // stays one resolution per request.
                    if e.is_not_a_file() {
                        if let Some(plan) = directory::index(cfg, req, head).await {
                            return plan;
                        }
                    }
                    let (code, text) = refusal_for(e.class());
                    return ResponsePlan::refusal(code, text, Some(e.to_string()));
                }
            };
        let size = resource.size();
        let repr = if cfg.repr_digest {
            let known = cfg.digests.get(&resource);
            if known.is_none() {
                cfg.digests.ensure(&resource);
            }
            known
        } else {
            None
        };
        let mut plan = ResponsePlan {
            size: Some(size),
            etag: Some(resource.etag().to_string()),
            last_modified: resource.last_modified().map(str::to_string),
            content_type: CONTENT_TYPE_BYTES,
            accept_ranges: true,
            content_length: Some(size),
            repr_digest: repr,
            ..ResponsePlan::empty(status::OK)
        };
        if let Some(link) = duplicate_links(&cfg.mirrors, req) {
            plan.headers.push(("link", link));
        }
        if !req.want_digest.is_empty() {
            // RFC 3230, as gfal2 and FTS ask for adler32; an unknown algorithm is ignored.
            plan.digest = checksums::wanted_digest(
                &cfg.checksums,
                &cfg.digests,
                &resource,
                &req.want_digest,
                repr,
            )
            .await;
        }
        if !req.want_repr_digest.is_empty() {
            // RFC 9530; `adler` is the WLCG's adler32.
            plan.repr_checksums.extend(
                checksums::repr_digest_extra(
                    &cfg.checksums,
                    &cfg.digests,
                    &resource,
                    &req.want_repr_digest,
                    repr,
                )
                .await,
            );
        }
        if let Some(v) = &req.if_match {
            if !resource.matches_strong_etag(v) {
                plan.status = status::PRECONDITION_FAILED;
                plan.content_length = Some(0);
                plan.detail = Some("validator does not match the current etag".into());
                return plan;
            }
        }
        if head {
            // RFC 9110 §14.2: range handling is defined for GET only.
            return plan;
        }
        let range = match select_range(req, &resource) {
            RangeOutcome::Full => 0..size,
            RangeOutcome::Partial(range) => {
                plan.status = status::PARTIAL_CONTENT;
                plan.content_range = Some(ContentRange::Satisfied {
                    range: range.clone(),
                    size,
                });
                range
            }
            RangeOutcome::Unsatisfiable => {
                plan.status = status::RANGE_NOT_SATISFIABLE;
                plan.content_range = Some(ContentRange::Unsatisfied { size });
                plan.content_length = Some(0);
                plan.detail = Some(format!("range outside a resource of {size} bytes"));
                return plan;
            }
        };
        let len = range.end - range.start;
        plan.content_length = Some(len);
        plan.range = Some(range.clone());
        let whole = range == (0..size);
        let hash = req.want_content_digest && req.trailers_ok;
        plan.trailer = hash;
        if !hash && req.want_content_digest && whole {
            // Without a trailer, a whole-resource body can still carry its digest up front
            // when it is already known.
            plan.content_digest = repr;
        }
        if len == 0 && !hash {
            return plan;
        }
        let corrupt_at = cfg.dangerous_fault.as_ref().and_then(|f| f.claim(&range));
        if let Some(at) = corrupt_at {
            tracing::warn!(peer = %req.peer, path = %req.path, offset = at, "dangerous_fault: corrupting one byte of this response");
        }
        // A digest already known for exactly these bytes is sent as it is: hashing them again
        // would cost the server a SHA-256 pass per byte for the same answer.
        let known_digest = if hash {
            whole
                .then_some(repr)
                .flatten()
                .or_else(|| cfg.digests.get_range(&resource, &range))
        } else {
            None
        };
        let stream_plan = StreamPlan {
            hash,
            known_digest,
            remember_range: (hash && known_digest.is_none())
                .then(|| (cfg.digests.clone(), resource.clone(), range.clone())),
            corrupt_at,
            remember_in: (hash && whole && cfg.repr_digest && repr.is_none())
                .then(|| (cfg.digests.clone(), resource.clone())),
            checksums: whole
                .then(|| checksums_on_send(cfg, &resource, repr.is_some()))
                .flatten(),
            peer: req.peer,
            path: req.path.clone(),
        };
        plan.body = Body::Stream(Box::new(BodyStream::new(
            resource.stream(range.clone(), cfg.stream.clone()),
            &range,
            stream_plan,
        )));
        plan
    }
}

/// One line per request: debug when served, info with the reason when refused.
fn log(req: &Request, plan: &ResponsePlan, who: &Identity) {
    let range = match &plan.content_range {
        Some(ContentRange::Satisfied { range, .. }) => format!("{}-{}", range.start, range.end),
        Some(ContentRange::Unsatisfied { size }) => format!("*/{size}"),
        None => "-".to_string(),
    };
    if plan.status < 400 && matches!(req.method, Method::Delete | Method::Mkcol | Method::Move) {
        // Changes to the tree are few and matter afterwards: always on record.
        let to = req.copy.destination.as_deref().unwrap_or("-");
        tracing::info!(peer = %req.peer, proto = req.protocol, %who, method = req.method.as_str(), path = %req.path, destination = to, status = plan.status, "tree changed");
    } else if plan.status < 400 {
        tracing::debug!(peer = %req.peer, proto = req.protocol, %who, method = req.method.as_str(), path = %req.path, %range, status = plan.status, "request");
    } else {
        tracing::info!(peer = %req.peer, proto = req.protocol, %who, method = req.method.as_str(), path = %req.path, %range, status = plan.status, detail = plan.detail.as_deref().unwrap_or(""), "request refused");
    }
}

/// The checksums of `cfg.checksums_on_send` a whole-file body should compute because nobody
/// knows them yet; `None` when there are none (or the resource is synthetic data).
fn checksums_on_send(
    cfg: &ServiceConfig,
    resource: &Resource,
    sha256_known: bool,
) -> Option<ChecksumsOnSend> {
    if resource.synthetic_spec().is_some() {
        return None;
    }
    let running: Vec<Checksummer> = cfg
        .checksums_on_send
        .iter()
        .filter(|a| match a {
            ChecksumAlgorithm::Sha256 => !sha256_known,
            _ => cfg.checksums.lookup(resource, **a).is_none(),
        })
        .map(|a| Checksummer::new(*a))
        .collect();
    (!running.is_empty()).then(|| ChecksumsOnSend {
        cache: cfg.checksums.clone(),
        digests: cfg.digests.clone(),
        resource: resource.clone(),
        running,
    })
}

/// What a request does, for access control.
async fn operation(req: &Request, root: &Path) -> Operation {
    match &req.method {
        Method::Put | Method::Post | Method::Patch => write_operation(root, &req.path).await,
        // Removes a name (or cancels an upload).
        Method::Delete => dav_write::operation(Change::Modify),
        // Makes a new directory, replacing nothing.
        Method::Mkcol => dav_write::operation(Change::Create),
        // Removes the source's name; the destination is checked in `change_tree`.
        Method::Move => dav_write::operation(Change::Modify),
        // A pull writes the path; a push reads it (and needs a known caller, checked later).
        Method::Copy if tpc::is_pull(req) => write_operation(root, &req.path).await,
        Method::Copy => Operation::Read,
        // An upload's status is for its uploader.
        Method::Head if req.upload.id.is_some() => write_operation(root, &req.path).await,
        Method::Get | Method::Head | Method::Options | Method::Propfind | Method::List => {
            Operation::Read
        }
        // Answered 405 once the caller is known to be allowed to read.
        Method::Other(_) => Operation::Read,
    }
}

/// A write to `request_path`: [`Operation::Create`] while nothing has its name, so that a
/// create-only scope can add files; [`Operation::Modify`] when it would replace something
/// (or when the path cannot be checked, which a create-only caller may then not do).
async fn write_operation(root: &Path, request_path: &str) -> Operation {
    let Ok(rel) = sanitize_relative(request_path) else {
        return Operation::Modify;
    };
    match tokio::fs::symlink_metadata(root.join(rel)).await {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Operation::Create,
        _ => Operation::Modify,
    }
}

/// A caller allowed to modify the path may replace what takes its name meanwhile; one
/// allowed only to create may not.
fn replace(may_modify: bool) -> Replace {
    if may_modify {
        Replace::Allowed
    } else {
        Replace::Never
    }
}

/// The answer to a caller the access rules refuse; the identity is what the log shows.
fn denial(denied: Denied) -> (ResponsePlan, Identity) {
    match denied {
        Denied::Unauthenticated { invalid_token } => {
            let mut plan = ResponsePlan::refusal(
                status::UNAUTHORIZED,
                "authentication required: pass a token (--token-file) or a client certificate\n",
                Some(if invalid_token {
                    "the token matches no entry of the access file".into()
                } else {
                    "no credentials".into()
                }),
            );
            plan.www_authenticate = Some(if invalid_token {
                r#"Bearer realm="xfer", error="invalid_token""#
            } else {
                r#"Bearer realm="xfer""#
            });
            (plan, Identity::Anonymous)
        }
        Denied::BadToken(why) => {
            let mut plan = ResponsePlan::refusal(
                status::UNAUTHORIZED,
                "authentication required: the token was refused\n",
                Some(why.to_string()),
            );
            plan.www_authenticate = Some(why.challenge());
            (plan, Identity::Anonymous)
        }
        Denied::OutOfScope { identity, reason } => {
            let plan = ResponsePlan::refusal(
                status::FORBIDDEN,
                "forbidden: outside the scope of your credentials\n",
                Some(format!("{identity}: {reason}")),
            );
            (plan, identity)
        }
    }
}

/// Apply `Range` and `If-Range` (RFC 9110 §13.1.5, §14.2), or `xfer/1`'s exact range.
fn select_range(req: &Request, resource: &Resource) -> RangeOutcome {
    let size = resource.size();
    if let Some(r) = &req.exact_range {
        return exact_range(r, size);
    }
    let [range] = req.range_headers.as_slice() else {
        // Absent, or repeated (which no valid request does): serve the whole.
        return RangeOutcome::Full;
    };
    if let Some(if_range) = &req.if_range {
        // Only a strong entity tag that matches lets the range through; a date or a
        // mismatch means "send me the whole new representation".
        if !resource.matches_strong_etag(if_range) {
            return RangeOutcome::Full;
        }
    }
    parse_range(range, size)
}

/// `xfer/1` ranges: the end is clamped to the size; a start at or past it cannot be served.
fn exact_range(r: &Range<u64>, size: u64) -> RangeOutcome {
    if r.start >= size {
        RangeOutcome::Unsatisfiable
    } else {
        RangeOutcome::Partial(r.start..r.end.min(size))
    }
}

/// `Link: <mirror/path?query>; rel=duplicate` for each configured mirror (RFC 6249).
fn duplicate_links(mirrors: &[String], req: &Request) -> Option<String> {
    if mirrors.is_empty() {
        return None;
    }
    let query = req
        .query
        .as_deref()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let links: Vec<String> = mirrors
        .iter()
        .map(|m| {
            format!(
                "<{}{}{query}>; rel=duplicate",
                m.trim_end_matches('/'),
                req.path
            )
        })
        .collect();
    Some(links.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::BodyEvent;
    use crate::record::{activity, lock};

    fn live_paths() -> Vec<String> {
        lock(&activity().live)
            .values()
            .map(|l| l.path.clone())
            .collect()
    }

    fn failed_paths() -> Vec<String> {
        lock(&activity().errors)
            .iter()
            .map(|e| e.path.clone())
            .collect()
    }

    /// A body is listed while it is sent; one dropped half-way is a failure, a HEAD is not.
    #[tokio::test]
    async fn a_request_is_live_until_its_body_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("root");
        std::fs::write(root.join("exchange-live.bin"), vec![7u8; 3 << 20]).expect("write");
        let service = Service::new(ServiceConfig::new(root));
        let peer = "127.0.0.1:1".parse().expect("address");
        let path = "/exchange-live.bin";

        let head = service
            .respond(&Request::new(Method::Head, path, peer, "h2"))
            .await;
        assert_eq!(head.status, 200);
        drop(head);
        assert!(!live_paths().iter().any(|p| p == path));
        assert!(!failed_paths().iter().any(|p| p == path), "a HEAD failed");

        let plan = service
            .respond(&Request::new(Method::Get, path, peer, "h2"))
            .await;
        let Body::Stream(mut body) = plan.body else {
            panic!("a file's GET has no stream body");
        };
        let first = body.next().await.expect("a block").expect("read");
        assert!(matches!(first, BodyEvent::Data(_)));
        assert!(
            live_paths().iter().any(|p| p == path),
            "not listed while sent"
        );
        drop(body);
        assert!(!live_paths().iter().any(|p| p == path));
        assert!(
            failed_paths().iter().any(|p| p == path),
            "a body dropped half-way is not a failure"
        );
    }
}
