//! The HTTP codec: decode a hyper request into a [`xfer_service::Request`], let the core
//! decide, encode the [`ResponsePlan`] into HTTP headers and a [`ServeBody`].

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{
    ACCEPT, ACCEPT_RANGES, ALLOW, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG,
    IF_RANGE, LAST_MODIFIED, LOCATION, RANGE, TE, TRAILER, WWW_AUTHENTICATE,
};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Version};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use xfer_common::ranges::{content_range, unsatisfied_content_range};
use xfer_core::digest::{
    Sha256Digest, CONTENT_DIGEST, REPR_DIGEST, WANT_CONTENT_DIGEST, WANT_REPR_DIGEST,
};
use xfer_service::access::MAX_TOKEN_LEN;
use xfer_service::tpc::CopyHead;
use xfer_service::upload::resumable::DraftHead;
use xfer_service::upload::{self, UploadBody, UploadHead};
use xfer_service::{Body, ContentRange, Credentials, Method, ResponsePlan, Secret};

use super::body::ServeBody;
use super::early_tls::EarlyState;
use super::Shared;

/// Per-connection facts the codec needs.
pub(crate) struct ConnCtx {
    pub peer: SocketAddr,
    /// `http/1.1`, `h2` or `h2c`, for logs.
    pub protocol: &'static str,
    /// The server is full: every request gets 503 with `Retry-After`.
    pub refusing: bool,
    /// On a refused HTTP/2 connection: cancelled once a 503 is answered, so the connection
    /// ends with GOAWAY and the client's retry opens a new one (which may then find a slot)
    /// instead of being answered 503 on this one for as long as it keeps retrying.
    pub refused: Option<tokio_util::sync::CancellationToken>,
    /// The client certificate the TLS handshake verified, when the server asks for one.
    pub client_certificate: Option<Arc<Vec<u8>>>,
    /// The connection began with TLS early data.
    pub early: Option<Arc<EarlyState>>,
    pub shared: Arc<Shared>,
}

pub(crate) async fn handle(
    req: Request<Incoming>,
    ctx: Arc<ConnCtx>,
) -> Result<Response<ServeBody>, Infallible> {
    if ctx.refusing {
        if let Some(refused) = &ctx.refused {
            refused.cancel();
        }
        return Ok(busy(req.version()));
    }
    let request = decode(&req, &ctx);
    let version = req.version();
    if !request.method.replay_safe() && too_early(&req, &ctx) {
        tracing::debug!(peer = %ctx.peer, method = request.method.as_str(), "425 too early");
        return Ok(too_early_answer(version));
    }
    let mut body = RequestBody(req.into_body());
    let plan = ctx
        .shared
        .service
        .respond_with_body(&request, &mut body)
        .await;
    let refused = plan.status >= 400;
    let head_only = request.method == Method::Head;
    let mut response = encode(plan, version, head_only);
    if refused && !body.0.is_end_stream() {
        refuse_body(&mut response, body, version);
    }
    Ok(response)
}

/// A refusal leaves the rest of the request body unread. The core decides before it reads a
/// byte whenever it can, so no `100 Continue` went out and a client that asked for one
/// (`curl -T`) sends nothing more. What a client sends anyway is read and dropped once the
/// answer is out, within a bound; reading starts only after the answer's head is written,
/// as hyper sends `100 Continue` when a body is read before that.
///
/// HTTP/1.1: the answer says `Connection: close`, and the connection closes after
/// [`H1_DRAIN`]. Closing with unread bytes in the socket would send a TCP reset, and a client
/// still sending would lose the answer with it.
///
/// HTTP/2: the body is read to its end, up to [`H2_DRAIN`]; beyond that the stream is reset
/// with `NO_ERROR` (RFC 9113 §8.1, done by h2 when the body is dropped). Clients such as curl
/// 7.88 take a reset that arrives while they still send for a failure and drop the answer
/// they already received, so the reset is kept for clients that send more than the bound.
fn refuse_body(response: &mut Response<ServeBody>, body: RequestBody, version: Version) {
    let bound = if version >= Version::HTTP_2 {
        H2_DRAIN
    } else {
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        H1_DRAIN
    };
    response.body_mut().after_head(Box::pin(body.drain(bound)));
}

/// How much of a refused body is read after the answer, and for how long.
#[derive(Clone, Copy)]
struct Drain {
    bytes: u64,
    time: std::time::Duration,
}

/// HTTP/1.1: enough for a client to read the answer before the connection closes. Clients
/// that write a whole body before they read (hyper's, so xfer's own, with chunks of 8-64 MiB)
/// see the answer only if the body goes in; with 8 MiB, a 16 MiB chunk met a closed socket
/// and its sender reported a broken pipe instead of the 401 or 403.
const H1_DRAIN: Drain = Drain {
    bytes: 256 << 20,
    time: std::time::Duration::from_secs(10),
};

/// HTTP/2: only the stream is held, so a client that cannot take a reset may finish sending
/// a large file.
const H2_DRAIN: Drain = Drain {
    bytes: 1 << 30,
    time: std::time::Duration::from_secs(30),
};

/// A request that may have come in TLS early data not yet confirmed by the end of the
/// handshake, or that a proxy says came so (`Early-Data: 1`, RFC 8470 §5.1).
fn too_early(req: &Request<Incoming>, ctx: &ConnCtx) -> bool {
    ctx.early.as_ref().is_some_and(|e| e.unconfirmed())
        || req
            .headers()
            .get_all("early-data")
            .iter()
            .any(|v| v.as_bytes() == b"1")
}

/// 425: send it again once the handshake is complete (RFC 8470 §5.2). The body, if any, is
/// not read; an HTTP/1.1 connection is closed after the answer.
fn too_early_answer(version: Version) -> Response<ServeBody> {
    let mut r = Response::new(ServeBody::message(
        "request arrived in TLS early data; send it again after the handshake\n",
    ));
    *r.status_mut() = StatusCode::TOO_EARLY;
    let h = r.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if version < Version::HTTP_2 {
        h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// 503 for a client the server has no slot for: try again in a second, on a new connection.
fn busy(version: Version) -> Response<ServeBody> {
    let mut r = Response::new(ServeBody::message(
        "server busy: no connection slot free; retry shortly\n",
    ));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let h = r.headers_mut();
    h.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if version == Version::HTTP_11 {
        h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// A request body as the core pulls it: data frames only (an upload's trailers carry
/// nothing the core uses).
struct RequestBody(Incoming);

impl RequestBody {
    /// Read and drop the body, up to `bound`; dropping it then makes hyper close the
    /// connection's reading side (HTTP/1.1) or reset the stream (HTTP/2).
    async fn drain(mut self, bound: Drain) {
        let mut seen = 0u64;
        let read = async {
            while let Some(Ok(piece)) = self.next_chunk().await {
                seen += piece.len() as u64;
                if seen > bound.bytes {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(bound.time, read).await;
    }
}

impl UploadBody for RequestBody {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<std::io::Result<Bytes>>> + Send + '_>> {
        Box::pin(async move {
            loop {
                match self.0.frame().await? {
                    Ok(frame) => {
                        if let Ok(data) = frame.into_data() {
                            return Some(Ok(data));
                        }
                    }
                    Err(e) => return Some(Err(std::io::Error::other(e))),
                }
            }
        })
    }
}

fn decode<B>(req: &Request<B>, ctx: &ConnCtx) -> xfer_service::Request {
    let text = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let method = Method::from_name(req.method().as_str());
    let headers = req.headers();
    let mut r = xfer_service::Request::new(method, req.uri().path(), ctx.peer, ctx.protocol)
        .with_want_content_digest(values(
            headers,
            HeaderName::from_static(WANT_CONTENT_DIGEST),
        ))
        .with_want_repr_digest(values(headers, HeaderName::from_static(WANT_REPR_DIGEST)));
    r.query = req.uri().query().map(str::to_string);
    // A value that is not visible ASCII cannot be a valid range; counting it keeps a
    // repeated field from looking single.
    r.range_headers = headers
        .get_all(RANGE)
        .iter()
        .map(|v| v.to_str().unwrap_or("").to_string())
        .collect();
    // An unreadable If-Range matches nothing, like a mismatch.
    r.if_range = headers
        .get(IF_RANGE)
        .map(|v| v.to_str().unwrap_or("").to_string());
    r.depth = headers
        .get(HeaderName::from_static("depth"))
        .map(|v| v.to_str().unwrap_or("").to_string());
    r.accept = values(headers, ACCEPT).map(str::to_string).collect();
    r.upload = UploadHead {
        content_length: text("content-length").and_then(|v| v.parse().ok()),
        content_range: text("content-range"),
        content_digest: text(CONTENT_DIGEST),
        repr_digest: text(REPR_DIGEST),
        id: text(upload::UPLOAD_ID),
        complete: text(upload::UPLOAD_COMPLETE).is_some_and(|v| v.trim() == "?1"),
        draft: DraftHead {
            upload_complete: text("upload-complete"),
            upload_offset: text("upload-offset"),
            upload_length: text("upload-length"),
            interop_version: text("upload-draft-interop-version"),
            content_type: text("content-type"),
        },
    };
    r.want_digest = values(headers, HeaderName::from_static("want-digest"))
        .map(str::to_string)
        .collect();
    r.authority = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| text("host"));
    if matches!(r.method, Method::Copy | Method::Move) {
        r.copy = CopyHead::from_fields(
            headers
                .iter()
                .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str(), v))),
        );
    }
    r.credentials = Credentials {
        bearer: bearer_token(headers),
        client_certificate: ctx.client_certificate.clone(),
    };
    r.trailers_ok = match req.version() {
        Version::HTTP_2 => true,
        Version::HTTP_11 => te_has_trailers(headers),
        _ => false,
    };
    r
}

/// `Authorization: Bearer <token>` (RFC 6750 §2.1). Any other scheme, or a token too long
/// or not visible ASCII, counts as a token that matches nothing, so the caller learns it
/// was not accepted rather than being treated as anonymous.
fn bearer_token(headers: &HeaderMap) -> Option<Secret> {
    let value = headers.get(AUTHORIZATION)?;
    let text = value.to_str().unwrap_or("");
    let token = match text.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => "",
    };
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        // Never a valid token: hashes to nothing in the access file.
        return Some(Secret::new("\0unusable"));
    }
    Some(Secret::new(token))
}

fn values(headers: &HeaderMap, name: HeaderName) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
}

/// `head_only`: the answer to a `HEAD`, whose body is never sent (HTTP/2 peers reset a
/// stream that carries one, HTTP/1.1 would misframe it).
fn encode(plan: ResponsePlan, version: Version, head_only: bool) -> Response<ServeBody> {
    let mut headers = HeaderMap::new();
    if plan.accept_ranges {
        headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(plan.content_type));
    if let Some(v) = plan
        .etag
        .as_deref()
        .and_then(|e| HeaderValue::from_str(e).ok())
    {
        headers.insert(ETAG, v);
    }
    if let Some(v) = plan
        .last_modified
        .as_deref()
        .and_then(|d| HeaderValue::from_str(d).ok())
    {
        headers.insert(LAST_MODIFIED, v);
    }
    if let Some(v) = plan
        .repr_digest_field()
        .and_then(|v| HeaderValue::from_str(&v).ok())
    {
        headers.insert(HeaderName::from_static(REPR_DIGEST), v);
    }
    if let Some(v) = plan
        .digest
        .as_ref()
        .and_then(|c| HeaderValue::from_str(&c.to_rfc3230_member()).ok())
    {
        headers.insert(HeaderName::from_static("digest"), v);
    }
    if let Some(d) = &plan.content_digest {
        insert_digest(&mut headers, CONTENT_DIGEST, d);
    }
    let content_range = match &plan.content_range {
        Some(ContentRange::Satisfied { range, size }) => Some(content_range(range, *size)),
        Some(ContentRange::Unsatisfied { size }) => Some(unsatisfied_content_range(*size)),
        None => None,
    };
    if let Some(v) = content_range.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(CONTENT_RANGE, v);
    }
    for (name, value) in &plan.headers {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    if let Some(challenge) = plan.www_authenticate {
        headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    }
    if let Some(allow) = plan.allow {
        headers.insert(ALLOW, HeaderValue::from_static(allow));
    }
    if let Some(dav) = plan.dav {
        headers.insert(
            HeaderName::from_static("dav"),
            HeaderValue::from_static(dav),
        );
    }
    if let Some(v) = plan
        .location
        .as_deref()
        .and_then(|l| HeaderValue::from_str(l).ok())
    {
        headers.insert(LOCATION, v);
    }
    if plan.trailer {
        headers.insert(TRAILER, HeaderValue::from_static(CONTENT_DIGEST));
    }
    // HTTP/1.1 cannot have both a length and trailers (trailers need chunked encoding);
    // HTTP/2 frames the body itself and can.
    // A listing's length is not known before it is produced: HTTP/1.1 sends it chunked.
    // RFC 9110 §8.6: never in a 204.
    if let Some(len) = plan.content_length.filter(|_| plan.status != 204) {
        if !plan.trailer || version == Version::HTTP_2 {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
        }
    }
    let body = match plan.body {
        _ if head_only => ServeBody::empty(),
        Body::Empty => ServeBody::empty(),
        Body::Message(text) => ServeBody::message(text),
        Body::Stream(stream) => ServeBody::stream(stream),
        Body::Listing(listing) => ServeBody::listing(listing),
    };
    let mut r = Response::new(body);
    *r.status_mut() =
        StatusCode::from_u16(plan.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    *r.headers_mut() = headers;
    r
}

fn insert_digest(headers: &mut HeaderMap, name: &'static str, digest: &Sha256Digest) {
    if let Ok(v) = HeaderValue::from_str(&digest.to_header_value()) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

fn te_has_trailers(headers: &HeaderMap) -> bool {
    headers
        .get_all(TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            t.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("trailers"))
        })
}
