//! One request in, one response out: method check, resource lookup, `Range`/`If-Range`,
//! validators, `Repr-Digest`, and the choice to hash the body into a `Content-Digest` trailer.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{
    ACCEPT_RANGES, ALLOW, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG, IF_RANGE,
    LAST_MODIFIED, RANGE, TE, TRAILER,
};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version};
use xfer_common::ranges::{content_range, parse_range, unsatisfied_content_range, RangeOutcome};
use xfer_common::{ErrorClass, Resource};
use xfer_core::digest::{wants_sha256, CONTENT_DIGEST, REPR_DIGEST, WANT_CONTENT_DIGEST};

use super::body::{ServeBody, StreamPlan};
use super::Shared;

/// Per-connection facts the handler logs and decides with.
pub(crate) struct ConnCtx {
    pub peer: SocketAddr,
    /// `http/1.1`, `h2` or `h2c`, for logs.
    pub protocol: &'static str,
    pub shared: Arc<Shared>,
}

pub(crate) async fn handle<B>(
    req: Request<B>,
    ctx: Arc<ConnCtx>,
) -> Result<Response<ServeBody>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let response = respond(&req, &ctx).await;
    let status = response.status();
    let range = response
        .headers()
        .get(CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    if status.is_success() {
        tracing::debug!(peer = %ctx.peer, proto = ctx.protocol, %method, %path, %range, status = status.as_u16(), "request");
    } else {
        tracing::info!(peer = %ctx.peer, proto = ctx.protocol, %method, %path, %range, status = status.as_u16(), "request refused");
    }
    Ok(response)
}

async fn respond<B>(req: &Request<B>, ctx: &ConnCtx) -> Response<ServeBody> {
    let head = match *req.method() {
        Method::GET => false,
        Method::HEAD => true,
        _ => {
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
    };
    let shared = &ctx.shared;
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let resource = match Resource::open_async(shared.root.clone(), path.clone(), query).await {
        Ok(r) => r,
        Err(e) => {
            let (status, text) = match e.class() {
                ErrorClass::BadRequest => (StatusCode::BAD_REQUEST, "bad request\n"),
                ErrorClass::Forbidden => (StatusCode::FORBIDDEN, "forbidden\n"),
                ErrorClass::NotFound => (StatusCode::NOT_FOUND, "not found\n"),
                ErrorClass::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "server error\n"),
            };
            tracing::debug!(peer = %ctx.peer, %path, error = %e, "cannot open");
            return plain(status, text);
        }
    };
    let size = resource.size();

    // RFC 9110 §14.2: range handling is defined for GET only.
    let outcome = if head {
        RangeOutcome::Full
    } else {
        select_range(req.headers(), &resource)
    };

    let mut headers = HeaderMap::new();
    headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(v) = HeaderValue::from_str(resource.etag()) {
        headers.insert(ETAG, v);
    }
    if let Some(v) = resource
        .last_modified()
        .and_then(|d| HeaderValue::from_str(d).ok())
    {
        headers.insert(LAST_MODIFIED, v);
    }
    let repr = if shared.repr_digest {
        let known = shared.digests.get(&resource);
        if known.is_none() {
            shared.digests.ensure(&resource);
        }
        known
    } else {
        None
    };
    if let Some(d) = repr {
        if let Ok(v) = HeaderValue::from_str(&d.to_header_value()) {
            headers.insert(HeaderName::from_static(REPR_DIGEST), v);
        }
    }

    let (status, range) = match outcome {
        RangeOutcome::Unsatisfiable => {
            let mut r = Response::new(ServeBody::empty());
            *r.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            *r.headers_mut() = headers;
            if let Ok(v) = HeaderValue::from_str(&unsatisfied_content_range(size)) {
                r.headers_mut().insert(CONTENT_RANGE, v);
            }
            r.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
            return r;
        }
        RangeOutcome::Full => (StatusCode::OK, 0..size),
        RangeOutcome::Partial(range) => {
            if let Ok(v) = HeaderValue::from_str(&content_range(&range, size)) {
                headers.insert(CONTENT_RANGE, v);
            }
            (StatusCode::PARTIAL_CONTENT, range)
        }
    };
    let len = range.end - range.start;

    let want_digest = req
        .headers()
        .get_all(HeaderName::from_static(WANT_CONTENT_DIGEST))
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(wants_sha256);
    let trailers_ok = match req.version() {
        Version::HTTP_2 => true,
        Version::HTTP_11 => te_has_trailers(req.headers()),
        _ => false,
    };
    let hash = !head && want_digest && trailers_ok;
    if hash {
        headers.insert(TRAILER, HeaderValue::from_static(CONTENT_DIGEST));
    }
    // HTTP/1.1 cannot have both a length and trailers (trailers need chunked encoding);
    // HTTP/2 frames the body itself and can.
    if !hash || req.version() == Version::HTTP_2 {
        headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
    }
    if !hash {
        // Without trailers, a whole-resource response can still carry its digest up front
        // when it is already known.
        if want_digest && status == StatusCode::OK {
            if let Some(d) = repr {
                if let Ok(v) = HeaderValue::from_str(&d.to_header_value()) {
                    headers.insert(HeaderName::from_static(CONTENT_DIGEST), v);
                }
            }
        }
    }

    let body = if head || len == 0 && !hash {
        ServeBody::empty()
    } else {
        let corrupt_at = shared.fault.as_ref().and_then(|f| f.claim(&range));
        if let Some(at) = corrupt_at {
            tracing::warn!(peer = %ctx.peer, %path, offset = at, "dangerous_fault: corrupting one byte of this response");
        }
        let whole = range.start == 0 && range.end == size;
        let plan = StreamPlan {
            hash,
            corrupt_at,
            remember_in: (hash && whole && shared.repr_digest && repr.is_none())
                .then(|| (shared.digests.clone(), resource.clone())),
            peer: ctx.peer,
            path: path.clone(),
        };
        ServeBody::stream(resource.stream(range, shared.stream_options), plan)
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r
}

/// Apply `Range` and `If-Range` (RFC 9110 §13.1.5, §14.2).
fn select_range(headers: &HeaderMap, resource: &Resource) -> RangeOutcome {
    let mut ranges = headers.get_all(RANGE).iter();
    let (Some(range), None) = (ranges.next(), ranges.next()) else {
        // Absent, or repeated (which no valid request does): serve the whole.
        return RangeOutcome::Full;
    };
    let Ok(range) = range.to_str() else {
        return RangeOutcome::Full;
    };
    if let Some(if_range) = headers.get(IF_RANGE) {
        // Only a strong entity tag that matches lets the range through; a date or a
        // mismatch means "send me the whole new representation".
        let matches = if_range
            .to_str()
            .map(|v| resource.matches_strong_etag(v))
            .unwrap_or(false);
        if !matches {
            return RangeOutcome::Full;
        }
    }
    parse_range(range, resource.size())
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

fn plain(status: StatusCode, text: &'static str) -> Response<ServeBody> {
    let mut r = Response::new(ServeBody::message(text));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(text.len()));
    r
}
