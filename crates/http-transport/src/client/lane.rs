//! Lanes: the request channels the engine drives, and the request plumbing they share with
//! `stat` (connection choice, keep-alive retry, redirects).

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use xfer_core::digest::{SHA256_KEY, WANT_CONTENT_DIGEST};
use xfer_core::transport::{BoxFuture, Lane, RangeBody, RangeRequest, RoundTrips};
use xfer_core::TransferError;

use crate::client::body::HttpRangeBody;
use crate::client::connect::{self, Connection, Sender, Setup};
use crate::client::early;
use crate::client::errors::from_hyper;
use crate::client::pipeline::PipedLane;
use crate::client::req_body::{BodySource, ReqBody};
use crate::client::response::{check_range_head, header_str, is_redirect, Ctx};
use crate::client::target::Target;
use crate::client::transport::{Inner, Mode, ShareTicket, SharedPick};

/// Redirect and error bodies smaller than this are read to their end so an HTTP/1.1 connection
/// stays usable; larger ones are dropped with their connection.
const DRAIN_LIMIT: usize = 64 * 1024;

/// One request channel: an HTTP/1.1 connection of its own, or a stream slot on a shared HTTP/2
/// connection. Requests to another origin (after a cross-origin redirect) use a private
/// connection.
pub(crate) struct HttpLane {
    inner: Arc<Inner>,
    index: usize,
    own: Option<Connection>,
    /// When the lane was made: a connection ready after this was waited for.
    created: std::time::Instant,
    /// How its first request reached its response head.
    first: Option<RoundTrips>,
    /// HTTP/1.1 with requests sent ahead: the lane's connection, pipelined, shared with its
    /// twin; range requests go there once it exists.
    piped: Option<PipedLane>,
}

impl Drop for HttpLane {
    fn drop(&mut self) {
        // A lane that ends leaves its connection for the next lane (the next file of a tree),
        // which takes it only once it is between two requests.
        if let Some(conn) = self.own.take() {
            self.inner.park(conn);
        }
    }
}

/// A response head and where it came from.
pub(crate) struct Answer {
    pub response: Response<Incoming>,
    pub target: Target,
    pub peer: String,
    /// The shared HTTP/2 connection it arrived on, if any.
    pub ticket: Option<ShareTicket>,
}

impl HttpLane {
    pub fn new(inner: Arc<Inner>, index: usize) -> Self {
        Self {
            inner,
            index,
            own: None,
            created: std::time::Instant::now(),
            first: None,
            piped: None,
        }
    }

    /// Connect now unless the lane has a usable connection (or, for HTTP/2, its shared one
    /// is up).
    pub async fn connect_now(&mut self) -> Result<(), TransferError> {
        let target = self.inner.target();
        self.sender_for(&target, false, false).await.map(|_| ())
    }

    /// Hand over the lane's own connection (the transport parks it for reuse).
    pub fn take_connection(&mut self) -> Option<Connection> {
        self.own.take()
    }

    pub fn adopt(&mut self, conn: Connection) {
        self.own = Some(conn);
    }

    /// The transport's state, for the upload requests.
    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// Where requests go now.
    pub(crate) fn target(&self) -> Target {
        self.inner.target()
    }

    /// The connection index this lane's sockets are filed under.
    pub fn connection_index(&self) -> usize {
        self.inner.connection_index(self.index)
    }

    /// Send `method` to `target` (following redirects) and return the first non-redirect
    /// answer.
    pub async fn request(
        &mut self,
        method: Method,
        target: Target,
        headers: &[(HeaderName, HeaderValue)],
        what_suffix: &str,
    ) -> Result<Answer, TransferError> {
        self.request_with_body(method, target, headers, Bytes::new(), what_suffix)
            .await
    }

    /// [`HttpLane::request`] with a request body (uploads), sent again as is after a
    /// redirect or a reconnect.
    pub async fn request_with_body(
        &mut self,
        method: Method,
        mut target: Target,
        headers: &[(HeaderName, HeaderValue)],
        body: impl Into<BodySource>,
        what_suffix: &str,
    ) -> Result<Answer, TransferError> {
        let body = body.into();
        let max = self.inner.cfg.max_redirects;
        let mut hops = 0;
        loop {
            let what = format!("{method} {target}{what_suffix}");
            let (response, peer, ticket, setup) = self
                .send_once(&method, &target, headers, &body, &what)
                .await?;
            let status = response.status();
            if !is_redirect(status) {
                if self.first.is_none() {
                    let requests = u8::try_from(hops + 1).unwrap_or(u8::MAX);
                    self.first = Some(setup.request(self.created, requests));
                }
                return Ok(Answer {
                    response,
                    target,
                    peer,
                    ticket,
                });
            }
            let location = header_str(response.headers(), header::LOCATION)
                .ok_or_else(|| TransferError::Unexpected {
                    peer: peer.clone(),
                    message: format!("{what}: {status} without location"),
                })?
                .to_string();
            if hops >= max {
                return Err(TransferError::Status {
                    peer,
                    status: status.as_u16(),
                    what: format!("{what} (gave up after {max} redirects)"),
                });
            }
            let next = target
                .join(&location)
                .map_err(|message| TransferError::Unexpected {
                    peer: peer.clone(),
                    message: format!("{what}: {message}"),
                })?;
            if target.is_downgrade_to(&next) {
                // Following it would send the request, and then the data, in clear text.
                return Err(TransferError::Tls {
                    peer,
                    message: format!(
                        "{what}: refusing the redirect from {target} to {next}: it drops TLS"
                    ),
                });
            }
            tracing::debug!(from = %target, to = %next, %status, "following redirect");
            drain(response.into_body(), &self.inner).await;
            target = next;
            hops += 1;
        }
    }

    /// One request on a suitable connection. A request that fails before any answer on a
    /// connection that had served earlier requests is retried once on a fresh connection: the
    /// server may have closed an idle keep-alive connection just as we used it.
    async fn send_once(
        &mut self,
        method: &Method,
        target: &Target,
        headers: &[(HeaderName, HeaderValue)],
        body: &BodySource,
        what: &str,
    ) -> Result<(Response<Incoming>, String, Option<ShareTicket>, Setup), TransferError> {
        let peer = target.origin.peer();
        let inner = self.inner.clone();
        let mut fresh_only = false;
        let mut early = early::may_ride_early(method);
        loop {
            let (mut sender, fresh, setup) = self.sender_for(target, fresh_only, early).await?;
            if !early::may_ride_early(method) {
                setup.confirmed().await;
            }
            let ticket = match &sender {
                SenderRef::Shared(_, t) => Some(*t),
                SenderRef::Own(_) => None,
            };
            let head = Head {
                extra: headers,
                user_agent: inner.user_agent.clone(),
                auth: inner.authorization_for(target),
                more: inner.extra_headers_for(target),
                body: body.clone(),
            };
            let result = send_on(&mut sender, method, target, &head, &inner, &peer, what).await;
            if let (Some(t), Err(SendError::Other(TransferError::Timeout { .. }))) =
                (ticket, &result)
            {
                inner.retire_shared(t).await;
            }
            match result {
                Ok(resp) if resp.status() == StatusCode::TOO_EARLY && early => {
                    // RFC 8470: the server (or a proxy) would not act on it as early data.
                    tracing::debug!(%peer, "425 too early; sending again after the handshake");
                    drain(resp.into_body(), &inner).await;
                    early = false;
                    fresh_only = true;
                }
                Ok(resp) => return Ok((resp, peer, ticket, setup)),
                Err(SendError::BeforeAnswer(e)) if !fresh && !fresh_only => {
                    tracing::debug!(%peer, error = %e, "reused connection failed; reconnecting");
                    self.drop_connection(target);
                    fresh_only = true;
                }
                Err(SendError::BeforeAnswer(e)) | Err(SendError::Other(e)) => {
                    self.drop_connection(target);
                    return Err(e);
                }
            }
        }
    }

    /// Forget the lane's own connection to `target` after a failure. A shared HTTP/2
    /// connection is replaced by whoever next finds it closed.
    fn drop_connection(&mut self, target: &Target) {
        if self.own.as_ref().is_some_and(|c| c.origin == target.origin) {
            self.own = None;
        }
    }

    /// Pick the connection for `target`: the shared HTTP/2 slot for the transport's origin, else
    /// the lane's own connection, connecting when there is none (or `fresh_only`).
    async fn sender_for(
        &mut self,
        target: &Target,
        fresh_only: bool,
        early: bool,
    ) -> Result<(SenderRef<'_>, bool, Setup), TransferError> {
        let shared_origin =
            self.inner.mode() != Some(Mode::H1) && target.origin == self.inner.target().origin;
        if shared_origin {
            self.inner.watch_loss();
        }
        let conn_index = self.connection_index();
        if shared_origin {
            match self
                .inner
                .shared_sender(conn_index, self.index, early)
                .await?
            {
                SharedPick::H2(s, fresh, ticket, setup) => {
                    return Ok((SenderRef::Shared(s, ticket), fresh, setup))
                }
                SharedPick::H1(conn) => {
                    // Auto over TLS and the server picked HTTP/1.1: the lane keeps it.
                    let setup = conn.setup.clone();
                    self.own = Some(conn);
                    return Ok((SenderRef::Own(self.own_sender()?), true, setup));
                }
            }
        }
        let usable = self
            .own
            .as_ref()
            .is_some_and(|c| c.origin == target.origin && !c.sender.is_closed());
        let fresh = !usable || fresh_only;
        if fresh {
            self.own = None;
            let mut params = self.inner.params();
            params.early_data &= early;
            let conn = connect::connect(&params, &target.origin).await?;
            self.inner.learn_mode(&conn);
            self.inner.register(self.connection_index(), &conn);
            self.own = Some(conn);
        }
        let setup = self
            .own
            .as_ref()
            .map(|c| c.setup.clone())
            .ok_or_else(|| TransferError::Config("lane has no connection".into()))?;
        Ok((SenderRef::Own(self.own_sender()?), fresh, setup))
    }

    fn own_sender(&mut self) -> Result<&mut Sender, TransferError> {
        self.own
            .as_mut()
            .map(|c| &mut c.sender)
            .ok_or_else(|| TransferError::Config("lane has no connection".into()))
    }

    pub(crate) async fn fetch_range(
        &mut self,
        req: &RangeRequest,
    ) -> Result<HttpRangeBody, TransferError> {
        let target = self.inner.target();
        let url = target.to_string();
        if req.range.is_empty() || req.range.end > req.expected_size {
            return Err(TransferError::Config(format!(
                "invalid range {}..{} of {} bytes for {url}",
                req.range.start, req.range.end, req.expected_size
            )));
        }
        let (headers, suffix) = range_headers(req)?;
        let answer = self.request(Method::GET, target, &headers, &suffix).await?;
        let url = answer.target.to_string();
        let what = format!("GET {url}{suffix}");
        let ctx = Ctx {
            peer: &answer.peer,
            url: &url,
            what: &what,
        };
        let status = answer.response.status();
        let len = match check_range_head(status, answer.response.headers(), req, &ctx) {
            Ok(len) => len,
            Err(e) => {
                if !status.is_success() {
                    drain(answer.response.into_body(), &self.inner).await;
                }
                return Err(e);
            }
        };
        let stall = answer.ticket.map(|t| (self.inner.clone(), t));
        Ok(HttpRangeBody::new(
            answer.response.into_body(),
            answer.peer,
            what,
            len,
            self.inner.cfg.idle_timeout,
            stall,
        ))
    }
}

impl Lane for HttpLane {
    fn fetch<'a>(
        &'a mut self,
        req: &'a RangeRequest,
    ) -> BoxFuture<'a, Result<Box<dyn RangeBody + 'a>, TransferError>> {
        Box::pin(async move {
            if let Some(piped) = self.piped.as_mut() {
                let body = piped.fetch_range(req).await?;
                return Ok(body as Box<dyn RangeBody + 'a>);
            }
            let body = self.fetch_range(req).await?;
            Ok(Box::new(body) as Box<dyn RangeBody + 'a>)
        })
    }

    fn twin(&mut self) -> Option<Box<dyn Lane>> {
        if self.inner.mode() != Some(Mode::H1) {
            return None;
        }
        let piped = match self.piped.as_mut() {
            Some(p) => p,
            None => {
                let own = self
                    .own
                    .take()
                    .filter(|c| c.origin == self.inner.target().origin);
                let fresh = self.first.is_none();
                self.piped.insert(PipedLane::new(
                    self.inner.clone(),
                    self.index,
                    own,
                    fresh,
                    self.created,
                ))
            }
        };
        Some(Box::new(piped.share()))
    }

    fn label(&self) -> String {
        match self.inner.mode() {
            Some(Mode::H2) => {
                let layout = self.inner.h2_layout();
                format!(
                    "conn {} / stream slot {}",
                    layout.connection_of(self.index),
                    layout.slot_of(self.index)
                )
            }
            _ => format!("conn {}", self.index),
        }
    }

    fn connection(&self) -> usize {
        self.connection_index()
    }

    fn connect(&mut self) -> BoxFuture<'_, Result<(), TransferError>> {
        Box::pin(self.connect_now())
    }

    fn first_round_trips(&self) -> Option<RoundTrips> {
        self.first
            .or_else(|| self.piped.as_ref().and_then(|p| p.first_round_trips()))
    }

    fn put_whole<'a>(
        &'a mut self,
        data: Bytes,
        sha256: xfer_core::Sha256Digest,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        Box::pin(self.put_whole_file(data, sha256))
    }

    fn put_chunk<'a>(
        &'a mut self,
        chunk: &'a xfer_core::transport::ChunkUpload,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        Box::pin(self.put_one_chunk(chunk))
    }

    fn upload_status<'a>(
        &'a mut self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<xfer_core::transport::UploadStatus>, TransferError>> {
        Box::pin(self.query_upload(id))
    }

    fn speaks_upload_protocol(&mut self) -> BoxFuture<'_, Result<bool, TransferError>> {
        Box::pin(self.announces_upload_protocol())
    }

    fn put_file(
        &mut self,
        body: xfer_core::transport::FileBody,
    ) -> BoxFuture<'_, Result<Vec<xfer_core::checksum::Checksum>, TransferError>> {
        Box::pin(self.put_whole_from_file(body))
    }

    fn complete_upload<'a>(
        &'a mut self,
        id: &'a str,
        sha256: xfer_core::Sha256Digest,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        Box::pin(self.complete(id, sha256))
    }
}

/// The sender a request goes out on: a clone of the shared HTTP/2 handle, or the lane's own.
enum SenderRef<'a> {
    Shared(
        hyper::client::conn::http2::SendRequest<ReqBody>,
        ShareTicket,
    ),
    Own(&'a mut Sender),
}

enum SendError {
    /// Failed before any response byte: safe to send again elsewhere.
    BeforeAnswer(TransferError),
    Other(TransferError),
}

async fn send_on(
    sender: &mut SenderRef<'_>,
    method: &Method,
    target: &Target,
    headers: &Head<'_>,
    inner: &Inner,
    peer: &str,
    what: &str,
) -> Result<Response<Incoming>, SendError> {
    let idle = inner.cfg.idle_timeout;
    let timeout = || {
        SendError::Other(TransferError::Timeout {
            peer: peer.to_string(),
            what: format!("{what}: waiting for the response head"),
            after: idle,
        })
    };
    let before = |e: hyper::Error| SendError::BeforeAnswer(from_hyper(peer, what, &e));
    let fut = async {
        match sender {
            SenderRef::Shared(s, _) => {
                s.ready().await.map_err(before)?;
                let req = build(method, target, headers, true)?;
                s.send_request(req).await.map_err(classify(peer, what))
            }
            SenderRef::Own(Sender::H2(s)) => {
                s.ready().await.map_err(before)?;
                let req = build(method, target, headers, true)?;
                s.send_request(req).await.map_err(classify(peer, what))
            }
            SenderRef::Own(Sender::H1(s)) => {
                s.ready().await.map_err(before)?;
                let req = build(method, target, headers, false)?;
                s.send_request(req).await.map_err(classify(peer, what))
            }
        }
    };
    tokio::time::timeout(idle, fut)
        .await
        .map_err(|_| timeout())?
}

/// hyper reports requests that never reached the peer (connection already closed, or closed
/// before a response) as canceled/closed/incomplete; those are safe to resend.
fn classify<'a>(peer: &'a str, what: &'a str) -> impl Fn(hyper::Error) -> SendError + 'a {
    move |e| {
        let err = from_hyper(peer, what, &e);
        if e.is_canceled() || e.is_closed() || e.is_incomplete_message() {
            SendError::BeforeAnswer(err)
        } else {
            SendError::Other(err)
        }
    }
}

/// Header fields and body of a request, besides method and target.
struct Head<'a> {
    extra: &'a [(HeaderName, HeaderValue)],
    user_agent: HeaderValue,
    auth: Option<HeaderValue>,
    /// Configured extra fields for this origin.
    more: &'a [(HeaderName, HeaderValue)],
    body: BodySource,
}

fn build(
    method: &Method,
    target: &Target,
    head: &Head<'_>,
    h2: bool,
) -> Result<Request<ReqBody>, SendError> {
    let mut b = Request::builder().method(method.clone());
    if h2 {
        let uri = target.absolute_uri().map_err(|e| {
            SendError::Other(TransferError::Config(format!(
                "cannot request {target}: {e}"
            )))
        })?;
        b = b.uri(uri).version(Version::HTTP_2);
    } else {
        b = b
            .uri(target.origin_form_uri())
            .version(Version::HTTP_11)
            .header(header::HOST, target.origin.authority());
    }
    b = b
        .header(header::USER_AGENT, head.user_agent.clone())
        // Ranges address the stored bytes; a compressed answer would address something else.
        .header(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    if let Some(auth) = &head.auth {
        b = b.header(header::AUTHORIZATION, auth.clone());
    }
    for (k, v) in head.more.iter().chain(head.extra) {
        b = b.header(k, v);
    }
    b.body(head.body.open()).map_err(|e| {
        SendError::Other(TransferError::Config(format!(
            "cannot build request for {target}: {e}"
        )))
    })
}

/// The header fields of a range request, and how it reads in messages (` bytes=0-99`).
pub(crate) fn range_headers(
    req: &RangeRequest,
) -> Result<(Vec<(HeaderName, HeaderValue)>, String), TransferError> {
    let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::with_capacity(5);
    let suffix = if req.whole {
        " (whole)".to_string()
    } else {
        let spec = format!("bytes={}-{}", req.range.start, req.range.end - 1);
        headers.push((header::RANGE, header_value(&spec)?));
        if let Some(v) = &req.validator {
            headers.push((header::IF_RANGE, header_value(v)?));
        }
        format!(" {spec}")
    };
    if req.want_digest {
        headers.push((
            HeaderName::from_static(WANT_CONTENT_DIGEST),
            HeaderValue::from_static(SHA256_KEY),
        ));
        headers.push((header::TE, HeaderValue::from_static("trailers")));
    }
    Ok((headers, suffix))
}

fn header_value(s: &str) -> Result<HeaderValue, TransferError> {
    HeaderValue::from_str(s)
        .map_err(|_| TransferError::Config(format!("value {s:?} cannot be sent in a header")))
}

/// Read a small body to its end so its connection can carry the next request.
pub(crate) async fn drain(mut body: Incoming, inner: &Inner) {
    let mut seen = 0usize;
    let deadline = tokio::time::Instant::now()
        + inner
            .cfg
            .idle_timeout
            .min(std::time::Duration::from_secs(2));
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, body.frame()).await {
        if let Some(d) = frame.data_ref() {
            seen += d.len();
            if seen > DRAIN_LIMIT {
                return;
            }
        }
    }
}

/// Read a whole small body (a one-byte probe).
pub(crate) async fn read_small(
    body: Incoming,
    inner: &Inner,
    peer: &str,
    what: &str,
) -> Result<Bytes, TransferError> {
    let limited = http_body_util::Limited::new(body, DRAIN_LIMIT);
    match tokio::time::timeout(inner.cfg.idle_timeout, limited.collect()).await {
        Err(_) => Err(TransferError::Timeout {
            peer: peer.to_string(),
            what: what.to_string(),
            after: inner.cfg.idle_timeout,
        }),
        Ok(Err(e)) => Err(TransferError::Protocol {
            peer: peer.to_string(),
            message: format!("{what}: {e}"),
        }),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}
