//! The response body: a short message, nothing, or a byte range of a resource streamed in
//! blocks, optionally hashed on the way out and closed with a `Content-Digest` trailer.

use std::future::Future as _;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use tokio::task::JoinHandle;
use xfer_common::fault::corrupt_block;
use xfer_common::{BlockStream, DigestCache, Resource};
use xfer_core::digest::{Sha256Hasher, CONTENT_DIGEST};

/// Body of every response the server sends.
pub(crate) struct ServeBody {
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
    hashing: Hashing,
    plan: StreamPlan,
    done: bool,
}

/// Where the running SHA-256 of the sent bytes is.
enum Hashing {
    /// Not asked for (or already finished).
    Off,
    Idle(Sha256Hasher),
    /// Updating with the previous block on the blocking pool.
    Busy(JoinHandle<Sha256Hasher>),
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
                hashing: if plan.hash {
                    Hashing::Idle(Sha256Hasher::new())
                } else {
                    Hashing::Off
                },
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
            Kind::Stream(s) if s.plan.hash => SizeHint::default(),
            Kind::Stream(s) => SizeHint::with_exact(s.blocks.remaining()),
        }
    }
}

/// Blocks smaller than this are hashed in place; larger ones on the blocking pool, so that
/// hashing block N overlaps with sending it and reading block N+1.
const HASH_OFFLOAD_MIN: usize = 64 * 1024;

impl Streaming {
    /// Get the hasher back from the blocking pool if it is busy with the previous block.
    fn poll_hasher_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Hashing::Busy(handle) = &mut self.hashing {
            match Pin::new(handle).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(h)) => self.hashing = Hashing::Idle(h),
                Poll::Ready(Err(e)) => {
                    self.hashing = Hashing::Off;
                    return Poll::Ready(Err(io::Error::other(format!("hashing failed: {e}"))));
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    fn hash(&mut self, block: &Bytes) {
        if let Hashing::Idle(_) = self.hashing {
            let Hashing::Idle(mut h) = std::mem::replace(&mut self.hashing, Hashing::Off) else {
                return;
            };
            if block.len() < HASH_OFFLOAD_MIN {
                h.update(block);
                self.hashing = Hashing::Idle(h);
            } else {
                let block = block.clone();
                self.hashing = Hashing::Busy(tokio::task::spawn_blocking(move || {
                    h.update(&block);
                    h
                }));
            }
        }
    }

    fn fail(&mut self, offset: u64, e: io::Error) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.done = true;
        tracing::warn!(
            peer = %self.plan.peer,
            path = %self.plan.path,
            offset,
            error = %e,
            "response aborted"
        );
        Poll::Ready(Some(Err(e)))
    }

    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let offset = self.blocks.position();
        match self.poll_hasher_idle(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return self.fail(offset, e),
            Poll::Ready(Ok(())) => {}
        }
        let next = match self.blocks.poll_next_block(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(next) => next,
        };
        match next {
            Some(Ok(block)) => {
                self.hash(&block);
                let block = match self.plan.corrupt_at {
                    Some(target) => corrupt_block(block, offset, target),
                    None => block,
                };
                Poll::Ready(Some(Ok(Frame::data(block))))
            }
            Some(Err(e)) => self.fail(offset, e),
            None => {
                let Hashing::Idle(hasher) = std::mem::replace(&mut self.hashing, Hashing::Off)
                else {
                    self.done = true;
                    return Poll::Ready(None);
                };
                self.done = true;
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
