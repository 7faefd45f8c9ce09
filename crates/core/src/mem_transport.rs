//! An in-memory [`Transport`]: a resource held in memory, served in pieces, with faults that
//! can be injected per request. For tests and engine benchmarks; no sockets.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::digest::Sha256Digest;
use crate::error::TransferError;
use crate::transport::{
    BoxFuture, FirstBody, Lane, RangeBody, RangeRequest, RemoteInfo, Speculated, Transport,
};

/// Something to do to a response whose range starts at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemFault {
    /// Flip one byte of the body; the trailer digest stays that of the true bytes.
    Corrupt,
    /// Fail the request before the body with this error (retryable or not).
    Fail { retryable: bool },
    /// End the body half-way.
    Truncate,
    /// Send the true bytes without their digest, as a server that has none for this range.
    NoDigest,
}

/// A resource in memory. Lanes share its state.
pub struct MemTransport(Arc<State>);

struct State {
    data: Bytes,
    repr_digest: Sha256Digest,
    etag: Mutex<Option<String>>,
    accepts_ranges: AtomicBool,
    send_digests: AtomicBool,
    /// Stat reports the whole file's digest (when digests are sent at all).
    send_repr_digest: AtomicBool,
    lanes: usize,
    piece: usize,
    /// (range start, fault, times left)
    faults: Mutex<Vec<(u64, MemFault, u32)>>,
    /// Per-lane delay between pieces, to make slow lanes.
    delays: Mutex<Vec<(usize, Duration)>>,
    requests: Arc<Mutex<Vec<std::ops::Range<u64>>>>,
    /// What `checksum` answers; none by default.
    checksum: Mutex<Option<Checksum>>,
    /// Bodies served to speculative first requests.
    speculated: AtomicUsize,
}

impl MemTransport {
    /// Serve `data` over `lanes` lanes. Hashes `data` once here, for the `Repr-Digest` stat
    /// reports, so a benchmark can build the transport outside its timed region.
    pub fn new(data: impl Into<Bytes>, lanes: usize) -> Self {
        let data: Bytes = data.into();
        Self(Arc::new(State {
            repr_digest: Sha256Digest::of(&data),
            data,
            etag: Mutex::new(Some("\"mem-1\"".into())),
            accepts_ranges: AtomicBool::new(true),
            send_digests: AtomicBool::new(true),
            send_repr_digest: AtomicBool::new(true),
            lanes,
            piece: 64 << 10,
            faults: Mutex::new(Vec::new()),
            delays: Mutex::new(Vec::new()),
            requests: Arc::new(Mutex::new(Vec::new())),
            checksum: Mutex::new(None),
            speculated: AtomicUsize::new(0),
        }))
    }

    /// Behave like a server without range support.
    pub fn without_ranges(self) -> Self {
        self.0.accepts_ranges.store(false, Ordering::Relaxed);
        self
    }

    /// Send no `Content-Digest`.
    pub fn without_digests(self) -> Self {
        self.0.send_digests.store(false, Ordering::Relaxed);
        self
    }

    /// Send a digest with every range but none for the whole file (a server that has not
    /// hashed the whole file yet).
    pub fn without_repr_digest(self) -> Self {
        self.0.send_repr_digest.store(false, Ordering::Relaxed);
        self
    }

    /// Answer a checksum request for `checksum`'s algorithm with it (right or wrong).
    pub fn with_checksum(self, checksum: Checksum) -> Self {
        if let Ok(mut c) = self.0.checksum.lock() {
            *c = Some(checksum);
        }
        self
    }

    /// Apply `fault` to the next `times` responses whose range starts at `offset`.
    pub fn inject(&self, offset: u64, fault: MemFault, times: u32) {
        if let Ok(mut f) = self.0.faults.lock() {
            f.push((offset, fault, times));
        }
    }

    /// Sleep `delay` between pieces on `lane`.
    pub fn slow_lane(&self, lane: usize, delay: Duration) {
        if let Ok(mut d) = self.0.delays.lock() {
            d.push((lane, delay));
        }
    }

    /// Change the validator, as if the file were replaced.
    pub fn set_etag(&self, etag: &str) {
        if let Ok(mut e) = self.0.etag.lock() {
            *e = Some(etag.to_string());
        }
    }

    /// How many speculative first requests ([`Transport::open_speculative`]) got their bytes.
    pub fn speculated(&self) -> usize {
        self.0.speculated.load(Ordering::Relaxed)
    }

    /// Every range requested so far.
    pub fn requests(&self) -> Vec<std::ops::Range<u64>> {
        self.0
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }
}

impl State {
    fn take_fault(&self, offset: u64) -> Option<MemFault> {
        let mut faults = self.faults.lock().ok()?;
        let i = faults.iter().position(|(o, _, n)| *o == offset && *n > 0)?;
        faults[i].2 -= 1;
        Some(faults[i].1.clone())
    }
}

impl Transport for MemTransport {
    fn stat(&self) -> BoxFuture<'_, Result<RemoteInfo, TransferError>> {
        Box::pin(async move {
            let s = &self.0;
            Ok(RemoteInfo {
                url: "mem://resource".into(),
                size: s.data.len() as u64,
                etag: s.etag.lock().ok().and_then(|e| e.clone()),
                last_modified: None,
                accepts_ranges: s.accepts_ranges.load(Ordering::Relaxed),
                sha256: (s.send_digests.load(Ordering::Relaxed)
                    && s.send_repr_digest.load(Ordering::Relaxed))
                .then_some(s.repr_digest),
            })
        })
    }

    fn checksum(
        &self,
        algorithm: ChecksumAlgorithm,
    ) -> BoxFuture<'_, Result<Option<Checksum>, TransferError>> {
        let c = self.0.checksum.lock().ok().and_then(|c| c.clone());
        Box::pin(async move { Ok(c.filter(|c| c.algorithm == algorithm)) })
    }

    fn open_lane(&self, index: usize) -> BoxFuture<'_, Result<Box<dyn Lane>, TransferError>> {
        let t = Arc::clone(&self.0);
        Box::pin(async move { Ok(Box::new(MemLane { t, index }) as Box<dyn Lane>) })
    }

    fn open_speculative(
        &self,
        index: usize,
        range: std::ops::Range<u64>,
        want_digest: bool,
    ) -> BoxFuture<'_, Result<Speculated, TransferError>> {
        Box::pin(async move {
            let lane = MemLane {
                t: Arc::clone(&self.0),
                index,
            };
            let info = self.stat().await?;
            let range = range.start..range.end.min(info.size);
            if !info.accepts_ranges || range.is_empty() {
                return Ok(Speculated {
                    lane: Box::new(lane),
                    answer: None,
                });
            }
            let req = RangeRequest {
                range: range.clone(),
                expected_size: info.size,
                want_digest,
                validator: None,
                whole: false,
            };
            // A failed answer leaves the lane to ask again once the size is known, as a
            // server's error status would.
            let answer = lane.respond(&req).ok().map(|body| {
                self.0.speculated.fetch_add(1, Ordering::Relaxed);
                let first = FirstBody {
                    range,
                    whole: false,
                    body: Box::new(body),
                };
                (info, first)
            });
            Ok(Speculated {
                lane: Box::new(lane),
                answer,
            })
        })
    }

    fn protocol(&self) -> String {
        "mem".into()
    }

    fn default_lanes(&self) -> usize {
        self.0.lanes
    }
}

struct MemLane {
    t: Arc<State>,
    index: usize,
}

impl Lane for MemLane {
    fn fetch<'a>(
        &'a mut self,
        req: &'a RangeRequest,
    ) -> BoxFuture<'a, Result<Box<dyn RangeBody + 'a>, TransferError>> {
        Box::pin(async move {
            self.respond(req)
                .map(|body| Box::new(body) as Box<dyn RangeBody>)
        })
    }

    fn label(&self) -> String {
        format!("mem lane {}", self.index)
    }

    fn connection(&self) -> usize {
        self.index
    }
}

impl MemLane {
    /// The answer to `req`, as a server would give it, faults included.
    fn respond(&self, req: &RangeRequest) -> Result<MemBody, TransferError> {
        let t = &self.t;
        if let Ok(mut r) = t.requests.lock() {
            r.push(req.range.clone());
        }
        let peer = format!("mem lane {}", self.index);
        if req.expected_size != t.data.len() as u64 {
            return Err(TransferError::RemoteChanged {
                url: "mem://resource".into(),
                what: "size".into(),
            });
        }
        if let (Some(v), Some(now)) = (&req.validator, t.etag.lock().ok().and_then(|e| e.clone())) {
            if *v != now {
                return Err(TransferError::RemoteChanged {
                    url: "mem://resource".into(),
                    what: "ETag".into(),
                });
            }
        }
        let range = req.range.clone();
        let (start, end) = (
            usize::try_from(range.start).unwrap_or(usize::MAX),
            usize::try_from(range.end).unwrap_or(usize::MAX),
        );
        let Some(slice) = t.data.get(start..end) else {
            return Err(TransferError::Status {
                peer,
                status: 416,
                what: format!("{range:?}"),
            });
        };
        // Like a server, hash only what the client asks a digest for.
        let send_digest = req.want_digest && t.send_digests.load(Ordering::Relaxed);
        let mut true_digest = send_digest.then(|| Sha256Digest::of(slice));
        let mut body = t.data.slice(start..end);
        let mut cut = None;
        match t.take_fault(range.start) {
            Some(MemFault::Fail { retryable }) => {
                return Err(if retryable {
                    TransferError::Status {
                        peer,
                        status: 503,
                        what: "injected".into(),
                    }
                } else {
                    TransferError::Status {
                        peer,
                        status: 404,
                        what: "injected".into(),
                    }
                });
            }
            Some(MemFault::Corrupt) => {
                let mut v = body.to_vec();
                let mid = v.len() / 2;
                if let Some(b) = v.get_mut(mid) {
                    *b ^= 0xff;
                }
                body = Bytes::from(v);
            }
            Some(MemFault::Truncate) => cut = Some(body.len() / 2),
            Some(MemFault::NoDigest) => true_digest = None,
            None => {}
        }
        let delay = t
            .delays
            .lock()
            .ok()
            .and_then(|d| d.iter().find(|(l, _)| *l == self.index).map(|(_, d)| *d));
        Ok(MemBody {
            body,
            pos: 0,
            cut,
            piece: t.piece,
            delay,
            digest: true_digest,
            peer,
        })
    }
}

struct MemBody {
    body: Bytes,
    pos: usize,
    cut: Option<usize>,
    piece: usize,
    delay: Option<Duration>,
    digest: Option<Sha256Digest>,
    peer: String,
}

impl RangeBody for MemBody {
    fn next_data(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, TransferError>> {
        Box::pin(async move {
            match self.delay {
                Some(d) => tokio::time::sleep(d).await,
                // A socket is not always ready; yielding lets the other lanes run as they would.
                None => tokio::task::yield_now().await,
            }
            let end = self.cut.unwrap_or(self.body.len());
            if self.pos >= end {
                if self.cut.is_some() {
                    return Err(TransferError::Truncated {
                        peer: self.peer.clone(),
                        expected: self.body.len() as u64,
                        got: self.pos as u64,
                    });
                }
                return Ok(None);
            }
            let n = self.piece.min(end - self.pos);
            let b = self.body.slice(self.pos..self.pos + n);
            self.pos += n;
            Ok(Some(b))
        })
    }

    fn trailer_digest(&self) -> Option<Sha256Digest> {
        self.digest
    }
}
