//! The response body: a short message, nothing, or a byte range of a resource streamed in
//! blocks, optionally hashed on the way out and closed with a `Content-Digest` trailer.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use xfer_common::fault::corrupt_block;
use xfer_common::{BlockStream, DigestCache, Resource};
use xfer_core::digest::{Sha256Hasher, CONTENT_DIGEST};

/// Body of every response the server sends.
pub struct ServeBody {
    kind: Kind,
}

enum Kind {
    Empty,
    Message(Option<Bytes>),
    Stream(Box<Streaming>),
}

/// What a streamed body needs besides the blocks.
pub(crate) struct StreamPlan {
    /// Hash the bytes sent and end with a `Content-Digest` trailer.
    pub hash: bool,
    /// Resource offset of a byte to flip after hashing (test-only fault hook).
    pub corrupt_at: Option<u64>,
    /// When the body is the whole resource and is hashed, remember the digest here.
    pub remember_in: Option<(DigestCache, Resource)>,
    pub peer: SocketAddr,
    pub path: String,
}

struct Streaming {
    blocks: BlockStream,
    hasher: Option<Sha256Hasher>,
    plan: StreamPlan,
    done: bool,
}

impl ServeBody {
    pub(crate) fn empty() -> Self {
        Self { kind: Kind::Empty }
    }

    pub(crate) fn message(text: impl Into<Bytes>) -> Self {
        Self {
            kind: Kind::Message(Some(text.into())),
        }
    }

    pub(crate) fn stream(blocks: BlockStream, plan: StreamPlan) -> Self {
        Self {
            kind: Kind::Stream(Box::new(Streaming {
                blocks,
                hasher: plan.hash.then(Sha256Hasher::new),
                plan,
                done: false,
            })),
        }
    }
}

impl Body for ServeBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match &mut self.kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Message(m) => Poll::Ready(m.take().map(|b| Ok(Frame::data(b)))),
            Kind::Stream(s) => s.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Message(m) => m.is_none(),
            Kind::Stream(s) => s.done,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Message(m) => SizeHint::with_exact(m.as_ref().map_or(0, |b| b.len() as u64)),
            // An exact hint would make HTTP/1.1 send Content-Length instead of chunked
            // encoding, and trailers need chunked encoding.
            Kind::Stream(s) if s.hasher.is_some() => SizeHint::default(),
            Kind::Stream(s) => SizeHint::with_exact(s.blocks.remaining()),
        }
    }
}

impl Streaming {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let offset = self.blocks.position();
        let next = match self.blocks.poll_next_block(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(next) => next,
        };
        match next {
            Some(Ok(block)) => {
                if let Some(h) = &mut self.hasher {
                    h.update(&block);
                }
                let block = match self.plan.corrupt_at {
                    Some(target) => corrupt_block(block, offset, target),
                    None => block,
                };
                Poll::Ready(Some(Ok(Frame::data(block))))
            }
            Some(Err(e)) => {
                self.done = true;
                tracing::warn!(
                    peer = %self.plan.peer,
                    path = %self.plan.path,
                    offset,
                    error = %e,
                    "response aborted: reading the resource failed"
                );
                Poll::Ready(Some(Err(e)))
            }
            None => {
                self.done = true;
                let Some(hasher) = self.hasher.take() else {
                    return Poll::Ready(None);
                };
                let digest = hasher.finish();
                if let Some((cache, resource)) = self.plan.remember_in.take() {
                    // Only if the file is still the one the bytes came from.
                    if resource.check_still_same().is_ok() {
                        cache.insert(&resource, digest);
                    }
                }
                let mut trailers = HeaderMap::new();
                match HeaderValue::from_str(&digest.to_header_value()) {
                    Ok(v) => {
                        trailers.insert(HeaderName::from_static(CONTENT_DIGEST), v);
                    }
                    Err(_) => return Poll::Ready(None),
                }
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
        }
    }
}
