//! The response body hyper sends: nothing, a short message, a pump over the core's
//! [`BodyStream`] that turns its blocks into data frames and its digest into a
//! `Content-Digest` trailer, or a pump over a [`ListingStream`] of unknown length.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use xfer_core::digest::CONTENT_DIGEST;
use xfer_service::{BodyEvent, BodyStream, ListingStream};

use super::stall::Sending;

/// Body of every response the server sends.
pub(crate) struct ServeBody {
    kind: Kind,
    /// Streamed bodies report each frame to the stall watch of their stream or connection.
    sending: Option<Sending>,
    /// Work that may start only once the response's head is written; spawned when the body
    /// is dropped, which hyper does after writing the head (and the body, if any).
    after: Option<AfterHead>,
}

/// Work spawned when a response body is dropped.
type AfterHeadWork = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

struct AfterHead(Option<AfterHeadWork>);

impl Drop for AfterHead {
    fn drop(&mut self) {
        if let (Some(work), Ok(rt)) = (self.0.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(work);
        }
    }
}

enum Kind {
    Empty,
    Message(Option<Bytes>),
    Stream(Box<BodyStream>),
    Listing(ListingStream),
}

impl ServeBody {
    pub(crate) fn empty() -> Self {
        Self {
            kind: Kind::Empty,
            sending: None,
            after: None,
        }
    }

    pub(crate) fn message(text: impl Into<Bytes>) -> Self {
        Self {
            kind: Kind::Message(Some(text.into())),
            sending: None,
            after: None,
        }
    }

    pub(crate) fn stream(stream: Box<BodyStream>) -> Self {
        Self {
            kind: Kind::Stream(stream),
            sending: Sending::start(),
            after: None,
        }
    }

    pub(crate) fn listing(listing: ListingStream) -> Self {
        Self {
            kind: Kind::Listing(listing),
            sending: Sending::start(),
            after: None,
        }
    }

    /// Run `work` once the response's head is written and this body is done with.
    pub(crate) fn after_head(&mut self, work: AfterHeadWork) {
        self.after = Some(AfterHead(Some(work)));
    }
}

impl Body for ServeBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let polled = self.poll_kind(cx);
        if let (Poll::Ready(Some(_)), Some(s)) = (&polled, &self.sending) {
            s.progressed();
        }
        if let Poll::Ready(None | Some(Err(_))) = &polled {
            self.sending = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.kind.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.kind.size_hint()
    }
}

impl ServeBody {
    fn poll_kind(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match &mut self.kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Message(m) => Poll::Ready(m.take().map(|b| Ok(Frame::data(b)))),
            Kind::Listing(l) => l
                .poll_next(cx)
                .map(|chunk| chunk.map(|r| r.map(Frame::data))),
            Kind::Stream(s) => match s.poll_next(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(BodyEvent::Data(block)))) => {
                    Poll::Ready(Some(Ok(Frame::data(block))))
                }
                Poll::Ready(Some(Ok(BodyEvent::Trailer(digest)))) => {
                    let mut trailers = HeaderMap::new();
                    match HeaderValue::from_str(&digest.to_header_value()) {
                        Ok(v) => {
                            trailers.insert(HeaderName::from_static(CONTENT_DIGEST), v);
                        }
                        Err(_) => return Poll::Ready(None),
                    }
                    Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                }
            },
        }
    }
}

impl Kind {
    fn is_end_stream(&self) -> bool {
        match self {
            Kind::Empty => true,
            Kind::Message(m) => m.is_none(),
            Kind::Stream(s) => s.is_done(),
            Kind::Listing(l) => l.is_done(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Message(m) => SizeHint::with_exact(m.as_ref().map_or(0, |b| b.len() as u64)),
            // An exact hint would make HTTP/1.1 send Content-Length instead of chunked
            // encoding, and trailers need chunked encoding.
            Kind::Stream(s) if s.is_hashed() => SizeHint::default(),
            Kind::Stream(s) => SizeHint::with_exact(s.remaining()),
            Kind::Listing(_) => SizeHint::default(),
        }
    }
}
