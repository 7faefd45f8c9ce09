//! Directory listings over HTTP: the request for each format and a body of unknown length
//! pulled to its end, on the transport's connections.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use xfer_common::listing::manifest::MANIFEST_MEDIA_TYPE;
use xfer_common::listing::propfind;
use xfer_core::transport::{BoxFuture, ListRequest, ListResponse, RangeBody};
use xfer_core::{Sha256Digest, TransferError};

use crate::client::errors::from_hyper;
use crate::client::lane::{drain, HttpLane};
use crate::client::response::header_str;
use crate::client::target::Target;
use crate::client::transport::Inner;

/// Send the request `request` names for the directory at `dir_url` and return the body once
/// the head says it is a listing.
pub(crate) async fn list(
    inner: &Arc<Inner>,
    dir_url: &str,
    request: ListRequest,
) -> Result<ListResponse, TransferError> {
    let base = Target::parse(dir_url).map_err(TransferError::Config)?;
    let (method, target, headers, ok) = match request {
        ListRequest::Manifest => {
            let sep = if base.path.query().is_some() {
                '&'
            } else {
                '?'
            };
            let with_query =
                Target::parse(&format!("{base}{sep}manifest")).map_err(TransferError::Config)?;
            let accept = (
                header::ACCEPT,
                HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
            );
            (Method::GET, with_query, vec![accept], StatusCode::OK)
        }
        ListRequest::Propfind => {
            let depth = (
                HeaderName::from_static("depth"),
                HeaderValue::from_static("1"),
            );
            let xml = (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/xml; charset=utf-8"),
            );
            let method = Method::from_bytes(b"PROPFIND")
                .map_err(|e| TransferError::Config(format!("PROPFIND: {e}")))?;
            (method, base, vec![depth, xml], StatusCode::MULTI_STATUS)
        }
        ListRequest::Index => {
            // nginx's JSON when the server has it, else the HTML page every index server has.
            let accept = (
                header::ACCEPT,
                HeaderValue::from_static("application/json, text/html;q=0.5"),
            );
            (Method::GET, base, vec![accept], StatusCode::OK)
        }
    };
    let mut lane = HttpLane::new(Arc::clone(inner), 0);
    // PROPFIND asks for exactly the four properties a tree needs; the others have no body.
    let body = if request == ListRequest::Propfind {
        Bytes::from_static(propfind::REQUEST_BODY.as_bytes())
    } else {
        Bytes::new()
    };
    let answer = lane
        .request_with_body(method.clone(), target, &headers, body, "")
        .await?;
    let what = format!("{method} {}", answer.target);
    let status = answer.response.status();
    if status != ok {
        drain(answer.response.into_body(), inner).await;
        return Err(TransferError::Status {
            peer: answer.peer,
            status: status.as_u16(),
            what,
        });
    }
    let media_type = header_str(answer.response.headers(), header::CONTENT_TYPE).map(|v| {
        v.split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
    });
    Ok(ListResponse {
        url: answer.target.to_string(),
        media_type,
        body: Box::new(ListingBody {
            body: answer.response.into_body(),
            idle: inner.cfg.idle_timeout,
            peer: answer.peer,
            what,
            got: 0,
            _lane: lane,
        }),
    })
}

/// A listing body: any length, each read bounded by the idle timeout. It owns its lane so an
/// HTTP/1.1 connection read to the end is parked for reuse when the body is dropped.
struct ListingBody {
    body: Incoming,
    idle: Duration,
    peer: String,
    what: String,
    got: u64,
    _lane: HttpLane,
}

impl ListingBody {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        loop {
            let frame = match tokio::time::timeout(self.idle, self.body.frame()).await {
                Err(_) => {
                    return Err(TransferError::Timeout {
                        peer: self.peer.clone(),
                        what: format!("{} after {} bytes", self.what, self.got),
                        after: self.idle,
                    })
                }
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Err(from_hyper(&self.peer, &self.what, &e)),
                Ok(Some(Ok(frame))) => frame,
            };
            if let Ok(data) = frame.into_data() {
                if !data.is_empty() {
                    self.got += data.len() as u64;
                    return Ok(Some(data));
                }
            }
        }
    }
}

impl RangeBody for ListingBody {
    fn next_data(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, TransferError>> {
        Box::pin(self.next())
    }

    fn trailer_digest(&self) -> Option<Sha256Digest> {
        None
    }
}
