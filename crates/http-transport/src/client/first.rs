//! The first request of a download doubles as its stat: a `GET` of the first chunk, whose
//! answer tells size, validators and digests, and whose body is that chunk. No `HEAD` round
//! trip before the data.
//!
//! | answer | what it means |
//! |---|---|
//! | `206` with `Content-Range: bytes 0-N/size` | ranges work; the body is the first chunk |
//! | `206` with an unknown size (`/*`) | fall back to `HEAD` (and its one-byte probe) |
//! | `200` with `Content-Length` | ranges ignored: the body is the whole resource, read as one stream |
//! | `200` without a length | fall back to `HEAD`, which says why the size is unknown |
//! | `416` with `bytes */0` | an empty resource |
//!
//! The other lanes may ask for their first chunk the same way before that answer
//! ([`HttpTransport::open_speculative_range`]); for them only a `206` with those bytes counts.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use http::{header, HeaderName, HeaderValue, Method, StatusCode};
use xfer_common::ranges::{parse_content_range_clamped, parse_unsatisfied_content_range};
use xfer_core::digest::{SHA256_KEY, WANT_REPR_DIGEST};
use xfer_core::transport::{FirstBody, FirstRequest, Opened, RangeRequest, Speculated};
use xfer_core::TransferError;

use crate::client::body::HttpRangeBody;
use crate::client::lane::{drain, range_headers, Answer, HttpLane};
use crate::client::pipeline::PipedLane;
use crate::client::response::{
    check_range_head, content_length, described, header_str, judge_speculative, Ctx,
    SpeculativeMiss,
};
use crate::client::target::Target;
use crate::client::transport::{HttpTransport, Inner, Mode};

impl HttpTransport {
    /// [`xfer_core::transport::Transport::open_first`] over HTTP.
    pub(crate) async fn open_with_first_range(
        &self,
        index: usize,
        first: FirstRequest,
    ) -> Result<Opened, TransferError> {
        let inner = &self.inner;
        if first.len == 0 {
            return self.open_by_stat(index).await;
        }
        let mut lane = HttpLane::new(inner.clone(), index);
        let probe = RangeRequest {
            range: 0..first.len,
            expected_size: first.len,
            want_digest: first.want_digest,
            validator: None,
            whole: false,
        };
        let (mut headers, suffix) = range_headers(&probe)?;
        headers.push((
            HeaderName::from_static(WANT_REPR_DIGEST),
            HeaderValue::from_static(SHA256_KEY),
        ));
        let answer = lane
            .request(Method::GET, inner.target(), &headers, &suffix)
            .await?;
        let url = answer.target.to_string();
        let what = format!("GET {url}{suffix}");
        let peer = answer.peer.clone();
        let h = answer.response.headers();
        let unexpected = |message: String| TransferError::Unexpected {
            peer: peer.clone(),
            message: format!("{what}: {message}"),
        };
        let mut info = described(&url, h, &peer)?;
        self.note_duplicates(h);
        let status = answer.response.status();
        let req = match status {
            StatusCode::PARTIAL_CONTENT => {
                let cr = header_str(h, header::CONTENT_RANGE)
                    .ok_or_else(|| unexpected("206 without content-range".into()))?;
                let (_, total) = parse_content_range_clamped(cr)
                    .ok_or_else(|| unexpected(format!("unreadable content-range {cr:?}")))?;
                let Some(total) = total else {
                    tracing::debug!(%url, "the first range does not tell the size; asking with HEAD");
                    drop(answer);
                    return self.open_by_stat(index).await;
                };
                info.size = total;
                RangeRequest {
                    range: 0..first.len.min(total),
                    expected_size: total,
                    ..probe
                }
            }
            StatusCode::OK => {
                let Some(size) = content_length(h) else {
                    tracing::debug!(%url, "the first answer has no length; asking with HEAD");
                    drop(answer);
                    return self.open_by_stat(index).await;
                };
                info.size = size;
                info.accepts_ranges = false;
                RangeRequest {
                    range: 0..size,
                    expected_size: size,
                    whole: true,
                    ..probe
                }
            }
            StatusCode::RANGE_NOT_SATISFIABLE => {
                // Only an empty resource cannot satisfy bytes=0-N.
                let cr = header_str(h, header::CONTENT_RANGE);
                info.size = cr
                    .and_then(parse_unsatisfied_content_range)
                    .filter(|s| *s == 0)
                    .ok_or_else(|| unexpected(format!("416 with content-range {cr:?}")))?;
                RangeRequest {
                    range: 0..0,
                    expected_size: 0,
                    ..probe
                }
            }
            s => {
                drain(answer.response.into_body(), inner).await;
                return Err(TransferError::Status {
                    peer,
                    status: s.as_u16(),
                    what,
                });
            }
        };
        if let Ok(t) = Target::parse(&info.url) {
            inner.set_target(t);
        }
        if req.range.is_empty() {
            drain(answer.response.into_body(), inner).await;
            return Ok(Opened {
                info,
                lane: Box::new(lane),
                first: None,
            });
        }
        let ctx = Ctx {
            peer: &answer.peer,
            url: &url,
            what: &what,
        };
        let len = match check_range_head(status, answer.response.headers(), &req, &ctx) {
            Ok(len) => len,
            Err(e) => {
                // Not the bytes asked for (a server whose ranges disagree with the size it
                // declares): describe the resource as it says, and let the engine judge the
                // size and ask again for the bytes.
                tracing::debug!(%url, error = %e, "the first answer's body is not used");
                drop(answer);
                return Ok(Opened {
                    info,
                    lane: Box::new(lane),
                    first: None,
                });
            }
        };
        Ok(Opened {
            info,
            lane: Box::new(lane),
            first: Some(first_body(inner, answer, what, len, &req)),
        })
    }

    /// [`xfer_core::transport::Transport::open_speculative`] over HTTP: a `GET` of `range`
    /// before the size is known. Only a `206` for exactly those bytes (or their part up to the
    /// end) is kept; a `416` (the resource is smaller) or any other answer leaves the lane to
    /// ask again once the engine knows what to ask.
    pub(crate) async fn open_speculative_range(
        &self,
        index: usize,
        range: Range<u64>,
        want_digest: bool,
    ) -> Result<Speculated, TransferError> {
        let inner = &self.inner;
        let guess = RangeRequest {
            range: range.clone(),
            expected_size: range.end,
            want_digest,
            validator: None,
            whole: false,
        };
        if inner.mode() == Some(Mode::H1) {
            // Over HTTP/1.1 the lane's own codec carries it, so that the next request can be
            // pipelined behind it (`PipedLane::fetch_speculative`).
            let mut lane = PipedLane::new(inner.clone(), index, None, true, Instant::now());
            let answer = lane.fetch_speculative(&guess).await?;
            return Ok(Speculated {
                lane: Box::new(lane),
                answer: answer.map(|(info, req, body)| {
                    let first = FirstBody {
                        range: req.range,
                        whole: false,
                        body,
                    };
                    (info, first)
                }),
            });
        }
        let mut lane = HttpLane::new(inner.clone(), index);
        let (headers, suffix) = range_headers(&guess)?;
        let answer = lane
            .request(Method::GET, inner.target(), &headers, &suffix)
            .await?;
        let url = answer.target.to_string();
        let what = format!("GET {url}{suffix}");
        let status = answer.response.status();
        let ctx = Ctx {
            peer: &answer.peer,
            url: &url,
            what: &what,
        };
        let judged = judge_speculative(status, answer.response.headers(), &guess, &ctx);
        let (info, req, len) = match judged {
            Ok(j) => j,
            Err(miss) => {
                if miss == SpeculativeMiss::NoChunk && status != StatusCode::OK {
                    drain(answer.response.into_body(), inner).await;
                } else {
                    // The whole resource, or bytes not asked for, is on its way: closing the
                    // connection is cheaper.
                    drop(answer);
                }
                return Ok(Speculated {
                    lane: Box::new(lane),
                    answer: None,
                });
            }
        };
        let first = first_body(inner, answer, what, len, &req);
        Ok(Speculated {
            lane: Box::new(lane),
            answer: Some((info, first)),
        })
    }

    /// The resource as `HEAD` (and a one-byte probe) describe it, and a lane.
    async fn open_by_stat(&self, index: usize) -> Result<Opened, TransferError> {
        let info = self.stat_inner().await?;
        let lane = self.open(index).await?;
        Ok(Opened {
            info,
            lane,
            first: None,
        })
    }
}

/// The body of `answer`, `len` bytes of `req`'s range, for the lane's first chunk.
fn first_body(
    inner: &Arc<Inner>,
    answer: Answer,
    what: String,
    len: u64,
    req: &RangeRequest,
) -> FirstBody {
    let stall = answer.ticket.map(|t| (inner.clone(), t));
    let body = HttpRangeBody::new(
        answer.response.into_body(),
        answer.peer,
        what,
        len,
        inner.cfg.idle_timeout,
        stall,
    );
    FirstBody {
        range: req.range.clone(),
        whole: req.whole,
        body: Box::new(body),
    }
}
