//! HTTP third-party copy (WLCG HTTP-TPC): `COPY /local/path` with `Source: <url>` pulls a
//! remote file into the tree, with `Destination: <url>` pushes a file of the tree to a remote.
//! The orchestrator (FTS through gfal2) watches a `text/perf-marker-stream` body while the
//! server moves the bytes itself.
//!
//! What is decided here, once for every codec: which direction, who may ask (a pull writes,
//! so it needs write scope on the path; a push reads it, and needs a known identity, never an
//! anonymous one, since it makes this server send data to an address of the caller's
//! choosing), which header fields travel to the remote (`TransferHeader<Name>`), how many
//! lanes (`X-Number-Of-Streams`), the concurrency limit (429), the staging file and the
//! atomic rename into place, the markers and the last line.
//!
//! Moving the bytes is not: that needs a client, and the core opens no sockets. The server's
//! composition supplies a [`CopyRunner`] (xfer's engine over its HTTP client); the core
//! only starts it, watches its progress and stops it.
//!
//! ```text
//!  COPY ─► access ─► direction, scheme, limit ─► 202 + ListingStream ◄── markers every interval
//!                                     │                                   last line
//!                                     └─► driver task ── CopyRunner::start(job)
//!                                           │  pull: engine writes .xfer-upload.<id>.<name>,
//!                                           │        renamed over <name> once verified
//!                                           │  push: engine uploads the file as it is
//!                                           └─ the body dropped (client gone) ─► stop, clean up
//! ```
//!
//! Remotes pass a [`RemotePolicy`] (`remote_policy.rs`): an IP literal at once (403), every
//! address a connection goes to in the runner. What the caller reads of a failure is a
//! [`CopyFailed`], words fixed here; the runner's detail (bodies, paths, error classes) goes
//! only to the server's log.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use url::{Host, Url};
use xfer_common::{DigestCache, Resource};
use xfer_core::digest::Sha256Digest;
use xfer_core::journal;
use xfer_core::progress::Progress;

use crate::listing_body::ListingStream;
use crate::plan::ResponsePlan;
use crate::record::CopyReport;
pub use crate::request::CopyHead;
use crate::request::Request;
use crate::status::{self, refusal_for};
use crate::upload::{self, Refusal, Replace};

mod connections;
mod fields;
#[doc(hidden)]
pub mod fuzzing;
pub mod remote_policy;

pub use connections::{OpenConnection, RemoteConnections};
pub use fields::CopyCredentials;
pub use remote_policy::{Allowance, IpNet, RemotePolicy};

/// The media type of the marker stream (HTTP-TPC draft).
pub const CONTENT_TYPE_PERF_MARKERS: &str = "text/perf-marker-stream";
/// Request header fields starting with this (any case) are sent to the remote without it.
pub const TRANSFER_HEADER_PREFIX: &str = "transferheader";

/// Header fields a caller may not set on the outgoing requests: they frame or route the
/// request, which the client does itself.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-range",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "range",
    "if-range",
    "expect",
    "proxy-authorization",
];

/// Settings of third-party copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpcConfig {
    /// Copies running at once; one more is answered 429 with `Retry-After`. Default 16: each
    /// copy runs up to [`TpcConfig::max_streams`] lanes with the engine's write queue (64 MiB
    /// at the defaults) behind them.
    pub max_active: usize,
    /// Time between performance markers. Default 5 s, the most the HTTP-TPC draft allows;
    /// clients give up on a copy that sends nothing for much longer (gfal2: 180 s).
    pub marker_interval: Duration,
    /// Most lanes a copy runs, whatever `X-Number-Of-Streams` asks. Default 64.
    pub max_streams: usize,
    /// Which remotes copies may reach, in both directions. Default: no internal, private or
    /// special-purpose address, and none of this host's (`--tpc-allow` adds hosts and
    /// networks).
    pub remote_policy: RemotePolicy,
}

impl Default for TpcConfig {
    fn default() -> Self {
        Self {
            max_active: 16,
            marker_interval: Duration::from_secs(5),
            max_streams: 64,
            remote_policy: RemotePolicy::default(),
        }
    }
}

impl TpcConfig {
    /// Reject values the server cannot work with, naming the field.
    pub fn validate(&self) -> Result<(), xfer_core::error::ConfigError> {
        use xfer_core::error::ConfigError;
        if !(1..=4096).contains(&self.max_active) {
            return Err(ConfigError::new(
                "tpc.max_active",
                self.max_active,
                "1 to 4096",
            ));
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(5)).contains(&self.marker_interval) {
            return Err(ConfigError::new(
                "tpc.marker_interval",
                format!("{:?}", self.marker_interval),
                "10 ms to 5 s",
            ));
        }
        if !(1..=1024).contains(&self.max_streams) {
            return Err(ConfigError::new(
                "tpc.max_streams",
                self.max_streams,
                "1 to 1024",
            ));
        }
        Ok(())
    }
}

impl CopyHead {
    /// Collect the fields of a `COPY` from a request head's (name, value) pairs; names in any
    /// case.
    pub fn from_fields<'a>(fields: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut head = Self::default();
        for (name, value) in fields {
            let lower = name.to_ascii_lowercase();
            match lower.as_str() {
                "source" => head.source = Some(value.trim().to_string()),
                "destination" => head.destination = Some(value.trim().to_string()),
                "overwrite" => head.overwrite = Some(value.trim().to_string()),
                "x-number-of-streams" => head.streams = Some(value.trim().to_string()),
                "requirechecksumverification" => {
                    head.require_checksum = value.trim().eq_ignore_ascii_case("true")
                }
                "credential" => head.credential = Some(value.to_string()),
                "x-no-delegate" => head.no_delegate = Some(value.to_string()),
                "clientinfo" => head.client_info = Some(value.to_string()),
                "scitag" => head.scitag = Some(value.to_string()),
                _ => {
                    if let Some(rest) = lower.strip_prefix(TRANSFER_HEADER_PREFIX) {
                        if !rest.is_empty() {
                            // The original spelling after the prefix, for the remote.
                            let original = &name[TRANSFER_HEADER_PREFIX.len()..];
                            head.transfer_headers
                                .push((original.to_string(), value.to_string()));
                        }
                    }
                }
            }
        }
        head
    }
}

/// Which way the bytes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyDirection {
    /// Fetch `url` into `into`, a staging file the core renames into place afterwards.
    Pull { url: String, into: PathBuf },
    /// Send the file at `from` to `url`.
    Push { from: PathBuf, url: String },
}

/// A copy to run.
pub struct CopyJob {
    pub direction: CopyDirection,
    /// Header fields for every request to the remote (`Authorization` among them).
    pub headers: Vec<(String, String)>,
    /// Lanes asked for (`X-Number-Of-Streams`, capped); `None`: the runner's default.
    pub lanes: Option<usize>,
    /// `RequireChecksumVerification: true`: a pull must match a whole-file checksum the
    /// source gives (its `Repr-Digest`, else its adler32 answer to `Want-Digest`) and fails
    /// when the source gives none; a push must match what the destination declares of the
    /// stored file and fails when it declares nothing.
    pub verify_checksum: bool,
    /// Credentials besides `headers`: the server's client certificate, or none
    /// (`Credential: none`, `X-No-Delegate: true`).
    pub credentials: CopyCredentials,
    /// Resolves when the copy must stop (the client went away, the server shuts down). The
    /// runner then stops its lanes and returns an error.
    pub stop: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl fmt::Debug for CopyJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CopyJob")
            .field("direction", &self.direction)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("lanes", &self.lanes)
            .field("verify_checksum", &self.verify_checksum)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

/// What a finished copy reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyOutcome {
    /// The SHA-256 of the whole file, when the runner computed or checked it.
    pub sha256: Option<Sha256Digest>,
    pub bytes: u64,
}

/// What failed, as the caller reads it on the `failure:` line. Fixed words: a remote's body,
/// a local path or the class of a network error (refused, reset, no such name) would let a
/// caller read the server's files or map the networks it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFailed {
    /// The remote, or a redirect of it, is outside [`TpcConfig::remote_policy`].
    NotAllowed,
    /// Name resolution, connect, reset, broken or timed-out connection: all one.
    Connect,
    /// The TLS handshake with the remote failed (certificate not trusted, wrong name).
    Tls,
    /// The remote answered this status.
    Status(u16),
    /// The remote answered 401 or 403 to a request after earlier requests of the same copy,
    /// with the same credentials, had succeeded: the token it was given expired or was
    /// revoked during the copy. Distinct from [`CopyFailed::Status`], a refusal at the start
    /// (wrong token, wrong scope), since the cure differs: a fresh token with a lifetime
    /// that covers the copy.
    TokenRefusedMidCopy(u16),
    /// The remote's answers did not make sense (sizes, ranges, framing).
    Protocol,
    /// The remote file changed while it was copied.
    RemoteChanged,
    /// The local file changed while it was pushed.
    LocalChanged,
    /// The bytes do not match the checksum the remote gives.
    ChecksumMismatch,
    /// `RequireChecksumVerification: true` and the remote gives no checksum.
    NoChecksum,
    /// The server could not read, write or store the file.
    Local,
    /// A file took the destination's name during the copy, and the caller may only create.
    Exists,
    /// The client went away or the server is shutting down.
    Stopped,
    /// Anything else.
    Other,
}

impl fmt::Display for CopyFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAllowed => f.write_str(remote_policy::NOT_ALLOWED),
            Self::Connect => f.write_str("could not connect to the remote"),
            Self::Tls => f.write_str("the TLS handshake with the remote failed"),
            Self::Status(s) => write!(f, "the remote answered {s}"),
            Self::TokenRefusedMidCopy(s) => write!(
                f,
                "remote refused the token mid-copy ({s}): it expired or was revoked after part of the file was copied"
            ),
            Self::Protocol => f.write_str("the remote's answer was not usable"),
            Self::RemoteChanged => f.write_str("the remote file changed during the copy"),
            Self::LocalChanged => f.write_str("the file changed while it was sent"),
            Self::ChecksumMismatch => f.write_str(
                "checksum verification failed: the data does not match the remote's checksum",
            ),
            Self::NoChecksum => f.write_str(
                "checksum verification failed: the remote offers no checksum to compare with",
            ),
            Self::Local => f.write_str("the server could not store or read the file"),
            Self::Exists => f.write_str(
                "the destination was created during the copy and this caller may not replace it",
            ),
            Self::Stopped => f.write_str("stopped: the client went away"),
            Self::Other => f.write_str("the copy failed"),
        }
    }
}

/// A failed copy: what the caller is told, and everything known for the server's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyFailure {
    pub what: CopyFailed,
    /// Causes, peers, paths: logged, never sent.
    pub detail: String,
}

impl CopyFailure {
    pub fn new(what: CopyFailed, detail: impl Into<String>) -> Self {
        Self {
            what,
            detail: detail.into(),
        }
    }

    /// This failure, for a copy whose remote had already accepted `done` bytes' worth of
    /// requests: a 401 or 403 then means the token stopped working during the copy.
    pub fn after_progress(mut self, done: u64) -> Self {
        if let CopyFailed::Status(s @ (401 | 403)) = self.what {
            if done > 0 {
                self.what = CopyFailed::TokenRefusedMidCopy(s);
                self.detail = format!("after {done} bytes: {}", self.detail);
            }
        }
        self
    }
}

/// A copy that has started.
pub struct RunningCopy {
    /// Live counters: `verified` is what the markers report.
    pub progress: Progress,
    /// The copy's open connections to remotes, for the markers' `RemoteConnections`; a
    /// runner that registers none leaves the line out.
    pub connections: RemoteConnections,
    /// Resolves when the copy is over.
    pub done: Pin<Box<dyn Future<Output = Result<CopyOutcome, CopyFailure>> + Send>>,
}

/// Runs copies: the server's composition implements it over a real client.
pub trait CopyRunner: Send + Sync + fmt::Debug {
    /// URL schemes it can reach (`https`, `http`); others are answered 501.
    fn schemes(&self) -> &[&str];
    /// Start `job`.
    fn start(&self, job: CopyJob) -> RunningCopy;
}

/// Third-party copy as a server offers it: the runner, the settings, and the slots.
#[derive(Debug, Clone)]
pub struct Tpc {
    pub runner: Arc<dyn CopyRunner>,
    pub config: TpcConfig,
    slots: Arc<Semaphore>,
}

impl Tpc {
    pub fn new(runner: Arc<dyn CopyRunner>, config: TpcConfig) -> Self {
        let slots = Arc::new(Semaphore::new(config.max_active.max(1)));
        Self {
            runner,
            config,
            slots,
        }
    }

    /// Copies running now.
    pub fn active(&self) -> usize {
        self.config.max_active.max(1) - self.slots.available_permits()
    }
}

/// Whether a `COPY` pulls (and so writes the local path) or pushes (reads it).
pub(crate) fn is_pull(req: &Request) -> bool {
    req.copy.source.is_some()
}

/// `COPY`: check the request, take a slot, start the copy, answer 202 with the marker stream.
pub(crate) async fn copy(
    tpc: &Tpc,
    root: &std::path::Path,
    digests: &DigestCache,
    req: &Request,
    replace: Replace,
) -> ResponsePlan {
    match start(tpc, root, digests, req, replace).await {
        Ok(plan) => plan,
        Err(r) => {
            let busy = r.status == status::TOO_MANY_REQUESTS;
            let mut plan = r.plan();
            if busy {
                plan.headers.push(("retry-after", "5".to_string()));
            }
            plan
        }
    }
}

async fn start(
    tpc: &Tpc,
    root: &std::path::Path,
    digests: &DigestCache,
    req: &Request,
    replace: Replace,
) -> Result<ResponsePlan, Refusal> {
    let head = &req.copy;
    let (remote, pull) = match (&head.source, &head.destination) {
        (Some(s), None) => (s.as_str(), true),
        (None, Some(d)) => (d.as_str(), false),
        (Some(_), Some(_)) => {
            return Err(Refusal::new(
                status::BAD_REQUEST,
                "COPY takes Source (pull) or Destination (push), not both\n",
                "COPY with both Source and Destination",
            ))
        }
        (None, None) => {
            return Err(Refusal::new(
                status::BAD_REQUEST,
                "COPY needs a Source (pull) or a Destination (push) header\n",
                "COPY without Source or Destination",
            ))
        }
    };
    let url = remote_url(remote, tpc.runner.schemes())?;
    check_literal_host(&url, &tpc.config.remote_policy)?;
    let url = url.to_string();
    let headers = outgoing_headers(&head.transfer_headers)?;
    let credentials = fields::credentials(head.credential.as_deref(), head.no_delegate.as_deref())?;
    let client_info = fields::client_info(head.client_info.as_deref());
    let scitag = fields::scitag(head.scitag.as_deref());
    // gfal2 sends 0 when the user did not choose: the runner's default.
    let lanes = match head.streams.as_deref() {
        None | Some("") => None,
        Some(v) => match v.parse::<usize>() {
            Ok(0) => None,
            Ok(n) => Some(n.min(tpc.config.max_streams)),
            Err(_) => {
                return Err(Refusal::new(
                    status::BAD_REQUEST,
                    "X-Number-Of-Streams must be a non-negative integer\n",
                    format!("X-Number-Of-Streams: {v:?}"),
                ))
            }
        },
    };
    let overwrite = !head
        .overwrite
        .as_deref()
        .is_some_and(|v| v.eq_ignore_ascii_case("f"));
    // `Overwrite: F` holds to the end too: a file that appears during the copy stays.
    let replace = if overwrite { replace } else { Replace::Never };
    let (direction, finish) = if pull {
        let target = upload::blocking(root, &req.path, upload::resolve_for_write).await?;
        if target.existed && !overwrite {
            return Err(Refusal::new(
                status::PRECONDITION_FAILED,
                "the destination exists and Overwrite: F was given\n",
                format!("{} exists", target.path.display()),
            ));
        }
        let staging = target
            .dir
            .join(upload::staging_name(&upload::unique_id(), &target.name));
        (
            CopyDirection::Pull {
                url: url.clone(),
                into: staging.clone(),
            },
            Finish::Pull {
                staging,
                target: target.path,
                request_path: req.path.clone(),
                root: root.to_path_buf(),
                digests: digests.clone(),
                replace,
            },
        )
    } else {
        let resource = Resource::open_async(root.to_path_buf(), req.path.clone(), None)
            .await
            .map_err(|e| {
                let (code, text) = refusal_for(e.class());
                Refusal::new(code, text, e.to_string())
            })?;
        let from = resource.path().map(PathBuf::from).ok_or_else(|| {
            Refusal::new(
                status::BAD_REQUEST,
                "only files can be pushed\n",
                format!("{} is generated, not a file", req.path),
            )
        })?;
        (
            CopyDirection::Push {
                from,
                url: url.clone(),
            },
            Finish::Push,
        )
    };
    // Last, so a refused request never holds a slot.
    let permit = Arc::clone(&tpc.slots).try_acquire_owned().map_err(|_| {
        Refusal::new(
            status::TOO_MANY_REQUESTS,
            "too many third-party copies running; retry later\n",
            format!("{} copies running", tpc.config.max_active),
        )
    })?;
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let job = CopyJob {
        direction,
        headers,
        lanes,
        verify_checksum: head.require_checksum,
        credentials,
        stop: Box::pin(async move {
            let _ = stop_rx.await;
        }),
    };
    tracing::info!(
        peer = %req.peer,
        path = %req.path,
        remote = %url,
        pull,
        lanes = ?lanes,
        verify_checksum = head.require_checksum,
        ?credentials,
        client_info = client_info.as_deref().unwrap_or("-"),
        scitag = ?scitag,
        "third-party copy starting"
    );
    let labels = Labels {
        client_info: client_info.unwrap_or_else(|| "-".into()),
        scitag,
    };
    let running = tpc.runner.start(job);
    let (tx, rx) = mpsc::channel(4);
    let report = Arc::new(CopyReport::default());
    tokio::spawn(drive(Driven {
        report: Arc::clone(&report),
        direction: if pull {
            xfer_common::metrics::CopyDirection::Pull
        } else {
            xfer_common::metrics::CopyDirection::Push
        },
        running,
        tx,
        stop: stop_tx,
        finish,
        interval: tpc.config.marker_interval,
        _permit: permit,
        what: format!("{} {} {url}", req.path, if pull { "<-" } else { "->" }),
        labels,
    }));
    let mut plan = ResponsePlan::empty(status::ACCEPTED);
    plan.content_type = CONTENT_TYPE_PERF_MARKERS;
    plan.content_length = None;
    plan.body = crate::plan::Body::Listing(ListingStream::from_channel(rx));
    plan.copy_report = Some(report);
    Ok(plan)
}

/// The remote URL, read by the URL standard's parser (the one the HTTP client uses), with
/// WebDAV's `davs`/`dav` spelled as the HTTP they are. A host is required; credentials in the
/// URL are refused (a token travels in `TransferHeaderAuthorization`), a fragment is dropped.
/// The URL returned is the parser's normalised form, so the host judged is the host reached:
/// `http://0x7f.1/` is `http://127.0.0.1/`.
fn remote_url(remote: &str, schemes: &[&str]) -> Result<Url, Refusal> {
    let malformed = |why: String| Refusal::new(status::BAD_REQUEST, "malformed remote URL\n", why);
    let Some((scheme, rest)) = remote.split_once("://") else {
        return Err(Refusal::new(
            status::BAD_REQUEST,
            "the remote must be an absolute URL\n",
            format!("{:?} has no scheme", fields::bounded(remote)),
        ));
    };
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "davs" => "https".to_string(),
        "dav" => "http".to_string(),
        s => s.to_string(),
    };
    if !schemes.contains(&scheme.as_str()) {
        return Err(Refusal::new(
            status::NOT_IMPLEMENTED,
            "this server cannot copy over that URL scheme\n",
            format!(
                "{}:// is not one of {}",
                fields::bounded(&scheme),
                schemes
                    .iter()
                    .map(|s| format!("{s}://"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    // The parser would drop tabs and newlines silently; a remote holding them is refused.
    if remote.chars().any(|c| c.is_ascii_control() || c == ' ') {
        return Err(malformed(format!("{:?}", fields::bounded(remote))));
    }
    let mut url = Url::parse(&format!("{scheme}://{rest}"))
        .map_err(|e| malformed(format!("{:?}: {e}", fields::bounded(remote))))?;
    if url.host().is_none() {
        return Err(malformed(format!(
            "{:?} names no host",
            fields::bounded(remote)
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Refusal::new(
            status::BAD_REQUEST,
            "credentials in the remote URL are not passed on: send the remote's token in TransferHeaderAuthorization\n",
            "a remote URL with user information",
        ));
    }
    url.set_fragment(None);
    Ok(url)
}

/// The 403's body: [`remote_policy::NOT_ALLOWED`] as a line.
const NOT_ALLOWED_TEXT: &str = "the remote is not allowed by the server's copy policy\n";

/// A remote whose host is an IP literal is judged at once, so a refused one is a 403 before
/// anything starts; names are judged on the addresses they resolve to, as the runner
/// connects.
fn check_literal_host(url: &Url, policy: &RemotePolicy) -> Result<(), Refusal> {
    let host = match url.host() {
        Some(Host::Ipv4(ip)) => ip.to_string(),
        Some(Host::Ipv6(ip)) => format!("[{ip}]"),
        Some(Host::Domain(_)) | None => return Ok(()),
    };
    match policy.check_literal(&host) {
        Some(Err(why)) => Err(Refusal::new(
            status::FORBIDDEN,
            NOT_ALLOWED_TEXT,
            format!("copy remote {host}: {why}"),
        )),
        _ => Ok(()),
    }
}

/// `TransferHeader<Name>` fields as the remote gets them; names that frame the request are
/// refused rather than silently dropped, so the caller learns why its copy would behave
/// differently.
fn outgoing_headers(fields: &[(String, String)]) -> Result<Vec<(String, String)>, Refusal> {
    let mut out = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        let lower = name.to_ascii_lowercase();
        let token_char = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if !name.bytes().all(token_char) || RESERVED_HEADERS.contains(&lower.as_str()) {
            return Err(Refusal::new(
                status::BAD_REQUEST,
                "a TransferHeader field names a header that cannot be passed on\n",
                format!("TransferHeader{name}"),
            ));
        }
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(Refusal::new(
                status::BAD_REQUEST,
                "a TransferHeader field has an unusable value\n",
                format!("TransferHeader{name}"),
            ));
        }
        out.push((name.clone(), value.clone()));
    }
    Ok(out)
}

/// What happens after the runner succeeds.
enum Finish {
    /// Rename the verified staging file over the target, remember its digest.
    Pull {
        staging: PathBuf,
        target: PathBuf,
        request_path: String,
        root: PathBuf,
        digests: DigestCache,
        /// [`Replace::Never`] for a create-only caller: a file that took the name during
        /// the copy stays, and the copy fails.
        replace: Replace,
    },
    Push,
}

impl Finish {
    async fn complete(&self, outcome: &CopyOutcome) -> Result<(), CopyFailure> {
        let Finish::Pull {
            staging,
            target,
            request_path,
            root,
            digests,
            replace,
        } = self
        else {
            return Ok(());
        };
        let (s, t, r, p) = (
            staging.clone(),
            target.clone(),
            root.clone(),
            request_path.clone(),
        );
        let (sha256, replace) = (outcome.sha256, *replace);
        let stored = upload::off_runtime(move || {
            let file = std::fs::File::open(&s).map_err(|e| Refusal::io("opening", &s, &e))?;
            if let Some(d) = sha256 {
                xfer_common::stored_digest::keep(&file, d, &s);
            }
            upload::commit(&file, &s, &t, replace)?;
            Ok(upload::stored_resource(&r, &p, &file))
        })
        .await
        .map_err(|r| {
            let what = if r.status == status::PRECONDITION_FAILED {
                CopyFailed::Exists
            } else {
                CopyFailed::Local
            };
            CopyFailure::new(what, r.detail())
        })?;
        if let (Some(resource), Some(d)) = (stored, outcome.sha256) {
            digests.insert(&resource, d);
        }
        Ok(())
    }

    /// Remove what a failed or stopped pull left: the staging file, the engine's part file
    /// and journal. Nothing ever reached the final name.
    fn clean_up(&self) {
        if let Finish::Pull { staging, .. } = self {
            for p in [
                staging.clone(),
                journal::part_path(staging),
                journal::journal_path(staging),
            ] {
                match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(path = %p.display(), error = %e, "cannot remove what a failed copy left")
                    }
                }
            }
        }
    }
}

struct Driven {
    running: RunningCopy,
    tx: mpsc::Sender<io::Result<Bytes>>,
    stop: oneshot::Sender<()>,
    finish: Finish,
    interval: Duration,
    /// Held until the copy is over and cleaned up.
    _permit: OwnedSemaphorePermit,
    what: String,
    labels: Labels,
    report: Arc<CopyReport>,
    direction: xfer_common::metrics::CopyDirection,
}

/// What the caller said the copy belongs to, for the log lines of its end.
struct Labels {
    /// `ClientInfo`, sanitised (`-` when none).
    client_info: String,
    /// `SciTag`, when valid.
    scitag: Option<u32>,
}

/// Run the copy, send a marker every interval, then the last line. A marker that cannot be
/// delivered means the client is gone: the copy is stopped and its files removed.
async fn drive(d: Driven) {
    let Driven {
        running,
        tx,
        stop,
        finish,
        interval,
        _permit,
        what,
        labels,
        report,
        direction,
    } = d;
    let RunningCopy {
        progress,
        connections,
        done,
    } = running;
    let mut done = done;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stop = Some(stop);
    let result = loop {
        tokio::select! {
            r = &mut done => break r,
            _ = tick.tick(), if stop.is_some() => {
                let marker = perf_marker(progress.snapshot().verified, connections.describe());
                if tx.send(Ok(Bytes::from(marker))).await.is_err() {
                    tracing::info!(copy = %what, "client went away; stopping the copy");
                    if let Some(s) = stop.take() {
                        let _ = s.send(());
                    }
                }
            }
            _ = tx.closed(), if stop.is_some() => {
                tracing::info!(copy = %what, "client went away; stopping the copy");
                if let Some(s) = stop.take() {
                    let _ = s.send(());
                }
            }
        }
    };
    let result = match result {
        Ok(outcome) if stop.is_some() => finish.complete(&outcome).await.map(|()| outcome),
        Ok(_) => Err(CopyFailure::new(
            CopyFailed::Stopped,
            "the client went away before the copy was stored",
        )),
        Err(e) => Err(e),
    };
    match &result {
        Ok(outcome) => report.finish(direction, outcome.bytes, true),
        Err(_) => report.finish(direction, progress.snapshot().verified, false),
    }
    let last = match &result {
        Ok(outcome) => {
            tracing::info!(copy = %what, bytes = outcome.bytes, client_info = %labels.client_info, scitag = ?labels.scitag, "third-party copy complete");
            // A last marker with the final count, then the verdict.
            format!("{}success: Created\n", perf_marker(outcome.bytes, None))
        }
        Err(e) => {
            finish.clean_up();
            tracing::warn!(copy = %what, failed = %e.what, detail = %e.detail, client_info = %labels.client_info, scitag = ?labels.scitag, "third-party copy failed");
            format!("failure: {}\n", e.what)
        }
    };
    let _ = tx.send(Ok(Bytes::from(last))).await;
}

/// One performance-marker block: the lines of the HTTP-TPC draft, then, as XRootD sends it,
/// `RemoteConnections` with the copy's open connections (left out when there are none; gfal2's
/// davix reads it, FTS's monitoring uses it). One stripe: xfer's lanes are one transfer to the
/// client.
fn perf_marker(bytes: u64, connections: Option<String>) -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let remote = connections
        .map(|c| format!("\tRemoteConnections: {c}\n"))
        .unwrap_or_default();
    format!(
        "Perf Marker\n\tTimestamp: {now}\n\tStripe Index: 0\n\tStripe Bytes Transferred: {bytes}\n\tTotal Stripe Count: 1\n{remote}End\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_collected_whatever_their_case() {
        let head = CopyHead::from_fields([
            ("Source", " https://a/x "),
            ("TransferHeaderAuthorization", "Bearer t"),
            ("transferheaderX-Custom", "v"),
            ("TransferHeader", "ignored"),
            ("X-Number-Of-Streams", "4"),
        ]);
        assert_eq!(head.source.as_deref(), Some("https://a/x"));
        assert!(
            !format!("{head:?}").contains("Bearer t"),
            "a token in Debug"
        );
        assert_eq!(head.streams.as_deref(), Some("4"));
        assert_eq!(
            head.transfer_headers,
            vec![
                ("Authorization".to_string(), "Bearer t".to_string()),
                ("X-Custom".to_string(), "v".to_string())
            ]
        );
    }

    #[test]
    fn schemes_and_reserved_headers() {
        let schemes = ["https", "http"];
        assert_eq!(
            remote_url("davs://h/x", &schemes).ok().map(String::from),
            Some("https://h/x".to_string())
        );
        for bad in [
            "https://",
            "https://u:p@h/x",
            "https://h/\tx",
            "https://[::1/x",
        ] {
            assert_eq!(
                remote_url(bad, &schemes).err().map(|r| r.status),
                Some(status::BAD_REQUEST),
                "{bad:?}"
            );
        }
        assert_eq!(
            remote_url("ftp://h/x", &schemes).err().map(|r| r.status),
            Some(status::NOT_IMPLEMENTED)
        );
        assert_eq!(
            remote_url("nonsense", &schemes).err().map(|r| r.status),
            Some(status::BAD_REQUEST)
        );
        assert!(outgoing_headers(&[("Host".into(), "x".into())]).is_err());
        assert!(outgoing_headers(&[("Authorization".into(), "a\nb".into())]).is_err());
        assert!(outgoing_headers(&[("Authorization".into(), "Bearer x".into())]).is_ok());
    }

    #[test]
    fn literal_hosts_are_judged_before_the_copy() {
        let policy = RemotePolicy {
            refuse_own_addresses: false,
            ..RemotePolicy::default()
        };
        let url = |u: &str| Url::parse(u).expect("a URL");
        for u in [
            "https://127.0.0.1:8443/x",
            "http://[::1]/x",
            "https://user@10.0.0.1/x",
            "https://169.254.169.254",
            // Spellings of 127.0.0.1 the parser normalises, as the resolver would.
            "http://0x7f.1/x",
            "http://2130706433/x",
            "http://[::ffff:127.0.0.1]/x",
        ] {
            assert_eq!(
                check_literal_host(&url(u), &policy).err().map(|r| r.status),
                Some(status::FORBIDDEN),
                "{u}"
            );
        }
        for u in [
            "https://8.8.8.8/x",
            "https://localhost/x",
            "https://[2001:db8::1]:1/x",
        ] {
            assert!(check_literal_host(&url(u), &policy).is_ok(), "{u}");
        }
        let allowed = RemotePolicy::allowing(["127.0.0.0/8".parse().expect("net")]);
        assert!(check_literal_host(&url("https://127.0.0.1:8443/x"), &allowed).is_ok());
    }

    #[test]
    fn markers_hold_the_standard_lines_and_remote_connections() {
        let m = perf_marker(42, Some("tcp:192.0.2.7:443,tcp:[2001:db8::7]:1094".into()));
        assert!(m.ends_with(
            "\tTotal Stripe Count: 1\n\tRemoteConnections: tcp:192.0.2.7:443,tcp:[2001:db8::7]:1094\nEnd\n"
        ));
        let m = perf_marker(42, None);
        let keys: Vec<&str> = m
            .lines()
            .map(|l| l.trim().split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(
            keys,
            [
                "Perf Marker",
                "Timestamp",
                "Stripe Index",
                "Stripe Bytes Transferred",
                "Total Stripe Count",
                "End"
            ]
        );
        assert!(m.contains("Stripe Bytes Transferred: 42\n"));
        assert_eq!(
            NOT_ALLOWED_TEXT.trim_end(),
            CopyFailed::NotAllowed.to_string()
        );
    }
}
