//! The body of a streamed response: blocks of a resource range, hashed on the way out, with
//! the digest at the end. HTTP's body and the QUIC stream writer are pumps over this.

use std::fmt;
use std::future::Future as _;
use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::task::JoinHandle;
use xfer_common::fault::corrupt_block;
use xfer_common::{BlockStream, DigestCache, Resource};
use xfer_core::checksum::{ChecksumAlgorithm, Checksummer};
use xfer_core::digest::{LaneSha256, Sha256Digest};

use crate::checksums::ChecksumCache;

/// Blocks smaller than this are hashed in place; larger ones on the blocking pool, so that
/// hashing block N overlaps with sending it and reading block N+1.
const HASH_OFFLOAD_MIN: usize = 64 * 1024;

/// What [`BodyStream::poll_next`] yields.
#[derive(Debug)]
pub enum BodyEvent {
    Data(Bytes),
    /// The SHA-256 of every byte sent (before any injected fault); the last event.
    Trailer(Sha256Digest),
}

/// What a streamed body needs besides the blocks.
pub(crate) struct StreamPlan {
    /// Send the SHA-256 of the range as a trailer.
    pub hash: bool,
    /// That SHA-256, already known (remembered from an earlier send of the same range of the
    /// same content, or the whole resource's): the bytes are not hashed again.
    pub known_digest: Option<Sha256Digest>,
    /// Where to remember the SHA-256 once computed, for the next request of this range.
    pub remember_range: Option<(DigestCache, Resource, Range<u64>)>,
    /// Resource offset of a byte to flip after hashing (test-only fault hook).
    pub corrupt_at: Option<u64>,
    /// When the body is the whole resource and is hashed, remember the digest here.
    pub remember_in: Option<(DigestCache, Resource)>,
    /// When the body is the whole resource: checksums to compute while it is sent and to
    /// remember once all of it went out from an unchanged file.
    pub checksums: Option<ChecksumsOnSend>,
    pub peer: SocketAddr,
    pub path: String,
}

/// Checksums computed over a whole resource while it is sent, for the cache that answers
/// `Want-Digest` and `Want-Repr-Digest` later (gfal2 and FTS ask for adler32 after a copy).
pub(crate) struct ChecksumsOnSend {
    pub cache: ChecksumCache,
    /// Where a SHA-256 goes, for `Repr-Digest`.
    pub digests: DigestCache,
    pub resource: Resource,
    pub running: Vec<Checksummer>,
}

/// Blocks of one range of a resource, read ahead on the blocking pool.
pub struct BodyStream {
    blocks: BlockStream,
    end: u64,
    hashing: Hashing,
    plan: StreamPlan,
    done: bool,
    /// The request's record, ended when this body is.
    pub(crate) finish: Option<Box<crate::record::Finish>>,
}

/// Where the running SHA-256 of the sent bytes (and the checksums to cache) are.
enum Hashing {
    /// Not asked for (or already finished).
    Off,
    Idle(Hashers),
    /// Updating with the previous block on the blocking pool.
    Busy(JoinHandle<Hashers>),
}

/// Everything fed with the bytes sent.
struct Hashers {
    /// The trailer's digest, when one was asked for. Blocks of two responses that meet on one
    /// thread are hashed together (`xfer-sha256`).
    trailer: Option<LaneSha256>,
    others: Vec<Checksummer>,
}

impl Hashers {
    /// Worth a trip to the blocking pool for a large block: adler32 alone runs at several
    /// times SHA-256's speed and costs less inline than the hop.
    fn is_heavy(&self) -> bool {
        self.trailer.is_some()
            || self
                .others
                .iter()
                .any(|c| c.algorithm() != ChecksumAlgorithm::Adler32)
    }

    fn update(&mut self, block: &Bytes) {
        if let Some(h) = &mut self.trailer {
            h.update(block.clone());
        }
        for c in &mut self.others {
            c.update(block);
        }
    }
}

impl fmt::Debug for BodyStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyStream")
            .field("position", &self.blocks.position())
            .field("end", &self.end)
            .field("hash", &self.plan.hash)
            .finish()
    }
}

impl BodyStream {
    pub(crate) fn new(blocks: BlockStream, range: &Range<u64>, mut plan: StreamPlan) -> Self {
        let hashers = Hashers {
            trailer: (plan.hash && plan.known_digest.is_none()).then(LaneSha256::new),
            others: plan
                .checksums
                .as_mut()
                .map(|c| std::mem::take(&mut c.running))
                .unwrap_or_default(),
        };
        let hashing = if hashers.trailer.is_some() || !hashers.others.is_empty() {
            Hashing::Idle(hashers)
        } else {
            Hashing::Off
        };
        Self {
            blocks,
            end: range.end,
            hashing,
            plan,
            done: false,
            finish: None,
        }
    }

    /// Bytes not yet yielded.
    pub fn remaining(&self) -> u64 {
        self.blocks.remaining()
    }

    /// A trailer follows the data.
    pub fn is_hashed(&self) -> bool {
        self.plan.hash
    }

    /// Nothing more to yield.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Next block, then the trailer if hashed, then `None`. An error ends the stream.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<BodyEvent>>> {
        let next = self.poll_event(cx);
        if let (Some(finish), Poll::Ready(event)) = (&mut self.finish, &next) {
            match event {
                Some(Ok(BodyEvent::Data(block))) => {
                    finish.sent(block.len() as u64);
                    // Codecs may end an unhashed body at its length without asking again.
                    if !self.plan.hash && self.blocks.remaining() == 0 {
                        finish.completed();
                    }
                }
                Some(Ok(BodyEvent::Trailer(digest))) => {
                    finish.trailer(digest.to_hex());
                    finish.completed();
                }
                Some(Err(_)) => {}
                None => finish.completed(),
            }
        }
        next
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<BodyEvent>>> {
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
                Poll::Ready(Some(Ok(BodyEvent::Data(block))))
            }
            Some(Err(e)) => self.fail(offset, e),
            None if offset != self.end => self.fail(
                offset,
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("resource ended at byte {offset} of {}", self.end),
                ),
            ),
            None => {
                self.done = true;
                let trailer = match std::mem::replace(&mut self.hashing, Hashing::Off) {
                    Hashing::Idle(hashers) => self.finish_hashers(hashers),
                    _ => None,
                };
                if !self.plan.hash {
                    return Poll::Ready(None);
                }
                match self.plan.known_digest.or(trailer) {
                    Some(digest) => Poll::Ready(Some(Ok(BodyEvent::Trailer(digest)))),
                    // A trailer was promised and hashing was on from the start: unreachable,
                    // but an aborted body is the honest answer if it ever happened.
                    None => self.fail(
                        offset,
                        io::Error::other("the body's digest was lost before its trailer"),
                    ),
                }
            }
        }
    }

    /// Record what the hashers computed where it is remembered; the trailer's digest, if one
    /// was computed.
    fn finish_hashers(&mut self, hashers: Hashers) -> Option<Sha256Digest> {
        if let Some(on_send) = self.plan.checksums.take() {
            // Only if the file is still the one the bytes came from.
            if on_send.resource.check_still_same().is_ok() {
                for c in hashers.others {
                    let c = c.finish();
                    if let Some(d) = c.as_sha256() {
                        on_send.digests.insert(&on_send.resource, d);
                    }
                    on_send.cache.record(&on_send.resource, c);
                }
            }
        }
        let digest = hashers.trailer?.finish();
        if let Some((cache, resource)) = self.plan.remember_in.take() {
            if resource.check_still_same().is_ok() {
                cache.insert(&resource, digest);
            }
        }
        if let Some((cache, resource, range)) = self.plan.remember_range.take() {
            cache.insert_range(&resource, &range, digest);
        }
        Some(digest)
    }

    /// Await the next event.
    pub async fn next(&mut self) -> Option<io::Result<BodyEvent>> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

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
            if block.len() < HASH_OFFLOAD_MIN || !h.is_heavy() {
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

    fn fail(&mut self, offset: u64, e: io::Error) -> Poll<Option<io::Result<BodyEvent>>> {
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
}
