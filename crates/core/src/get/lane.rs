//! One lane: a task that owns one transport connection and fetches the assignments the driver
//! hands it, one at a time. It shares no state with the driver: work arrives on its own
//! channel, and everything it learns (bytes received, how an attempt ended, a connection that
//! cannot be opened) goes back to the driver as a [`LaneEvent`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::digest::Sha256Hasher;
use crate::error::TransferError;
use crate::plan::ChunkIndex;
use crate::progress::Progress;
use crate::schedule::{Assignment, AttemptId, AttemptOutcome, LaneIndex};
use crate::sink::WriteOp;
use crate::transport::{Lane, RangeRequest, RemoteInfo, Transport};

/// A batch of more pieces than this is copied into one buffer before it is written.
const COALESCE_PIECES: usize = 16;

/// Bytes between progress reports of one lane.
const PROGRESS_STEP: u64 = 256 << 10;
/// Longest time between progress reports of a lane that is receiving: end-game decisions need
/// the pace of slow lanes too, which may take long to gather a step.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// First wait before reopening a connection that failed to open; doubles per failure.
const REOPEN_BACKOFF: Duration = Duration::from_millis(200);

/// An assignment and the token that cancels it (when another attempt wins its chunk, or the
/// transfer stops).
pub(super) struct Work {
    pub assignment: Assignment,
    pub cancel: CancellationToken,
}

/// What a lane tells the driver.
pub(super) enum LaneEvent {
    /// `received` bytes of `attempt` have arrived so far.
    Progress {
        attempt: AttemptId,
        received: u64,
        at: Instant,
    },
    /// An attempt ended. `error` is the transport's error behind a failure, kept for the final
    /// message; `buffer` holds an end-game duplicate's bytes.
    Finished {
        lane: LaneIndex,
        attempt: AttemptId,
        chunk: ChunkIndex,
        outcome: AttemptOutcome,
        error: Option<TransferError>,
        buffer: Vec<Bytes>,
    },
    /// The lane's connection could not be opened for `attempt`. With `gave_up` the lane has
    /// ended; otherwise it sends [`LaneEvent::Ready`] after a backoff.
    OpenFailed {
        lane: LaneIndex,
        attempt: AttemptId,
        chunk: ChunkIndex,
        error: TransferError,
        gave_up: bool,
    },
    /// The lane waits for work again.
    Ready { lane: LaneIndex },
}

/// What every lane needs to know about the transfer.
pub(super) struct LaneContext {
    pub transport: Arc<dyn Transport>,
    pub remote: RemoteInfo,
    pub verify: bool,
    /// One request for the whole resource (the server ignores ranges).
    pub whole: bool,
    pub write_batch: usize,
    pub writer: mpsc::Sender<WriteOp>,
    pub progress: Progress,
    pub open_attempts: u32,
    /// Cancelled when the transfer stops.
    pub stop: CancellationToken,
}

/// Take work until the driver closes `work` or the transfer stops.
pub(super) async fn run(
    ctx: Arc<LaneContext>,
    lane: LaneIndex,
    mut work: mpsc::Receiver<Work>,
    events: mpsc::UnboundedSender<LaneEvent>,
) {
    let mut conn: Option<Box<dyn Lane>> = None;
    let mut open_failures = 0u32;
    while let Some(Work { assignment, cancel }) = work.recv().await {
        if conn.is_none() {
            match ctx.transport.open_lane(lane).await {
                Ok(opened) => {
                    let label = opened.label();
                    ctx.progress.lane(lane, |s| s.label = label);
                    open_failures = 0;
                    conn = Some(opened);
                }
                Err(error) => {
                    open_failures += 1;
                    tracing::warn!(lane, error = %error, "cannot open lane");
                    let gave_up = open_failures >= ctx.open_attempts;
                    let _ = events.send(LaneEvent::OpenFailed {
                        lane,
                        attempt: assignment.attempt,
                        chunk: assignment.chunk,
                        error,
                        gave_up,
                    });
                    if gave_up {
                        return;
                    }
                    let wait = REOPEN_BACKOFF.saturating_mul(1 << open_failures.min(6));
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = ctx.stop.cancelled() => return,
                    }
                    if events.send(LaneEvent::Ready { lane }).is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some(open) = conn.as_mut() else {
            continue;
        };
        let started = Instant::now();
        let fetched = fetch(&ctx, open.as_mut(), &assignment, &cancel, lane, &events).await;
        ctx.progress.lane(lane, |s| s.busy += started.elapsed());
        if !fetched.reusable {
            conn = None;
        }
        let finished = LaneEvent::Finished {
            lane,
            attempt: assignment.attempt,
            chunk: assignment.chunk,
            outcome: fetched.outcome,
            error: fetched.error,
            buffer: fetched.buffer,
        };
        if events.send(finished).is_err() {
            return;
        }
    }
}

/// How one attempt went.
struct Fetched {
    outcome: AttemptOutcome,
    error: Option<TransferError>,
    /// Whether the lane's connection can carry the next request.
    reusable: bool,
    /// An end-game duplicate's bytes.
    buffer: Vec<Bytes>,
}

impl Fetched {
    fn cancelled() -> Self {
        Self {
            outcome: AttemptOutcome::Cancelled,
            error: None,
            reusable: false,
            buffer: Vec::new(),
        }
    }

    fn failed(error: TransferError) -> Self {
        Self {
            outcome: AttemptOutcome::Failed {
                retryable: error.is_retryable(),
                reason: error.to_string(),
            },
            error: Some(error),
            reusable: false,
            buffer: Vec::new(),
        }
    }
}

/// Counts bytes for the progress display and the scheduler, in steps: a QUIC body arrives in
/// packet-sized pieces, and a message per piece would show up in the profile.
struct Pace<'a> {
    ctx: &'a LaneContext,
    events: &'a mpsc::UnboundedSender<LaneEvent>,
    lane: LaneIndex,
    attempt: AttemptId,
    received: u64,
    unreported: u64,
    last_report: Instant,
}

impl Pace<'_> {
    fn add(&mut self, n: u64) {
        self.received += n;
        self.unreported += n;
        let now = Instant::now();
        if self.unreported >= PROGRESS_STEP
            || now.duration_since(self.last_report) >= PROGRESS_INTERVAL
        {
            self.flush_display();
            let _ = self.events.send(LaneEvent::Progress {
                attempt: self.attempt,
                received: self.received,
                at: now,
            });
            self.last_report = now;
        }
    }

    fn flush_display(&mut self) {
        let n = std::mem::take(&mut self.unreported);
        if n > 0 {
            let lane = self.lane;
            self.ctx.progress.update(|p| {
                p.received += n;
                if let Some(l) = p.lanes.get_mut(lane) {
                    l.bytes += n;
                }
            });
        }
    }
}

impl Drop for Pace<'_> {
    fn drop(&mut self) {
        self.flush_display();
    }
}

/// Fetch one assignment, hashing and handing bytes to the writer as they arrive.
async fn fetch(
    ctx: &LaneContext,
    conn: &mut dyn Lane,
    a: &Assignment,
    cancel: &CancellationToken,
    lane: LaneIndex,
    events: &mpsc::UnboundedSender<LaneEvent>,
) -> Fetched {
    let req = RangeRequest {
        range: a.range.clone(),
        expected_size: ctx.remote.size,
        want_digest: ctx.verify,
        validator: ctx.remote.range_validator().map(str::to_string),
        whole: ctx.whole,
    };
    let len = a.range.end - a.range.start;
    let peer = conn.label();
    let mut body = tokio::select! {
        r = conn.fetch(&req) => match r {
            Ok(b) => b,
            Err(e) => return Fetched::failed(e),
        },
        _ = cancel.cancelled() => return Fetched::cancelled(),
    };
    let mut hasher = ctx.verify.then(Sha256Hasher::new);
    let mut pace = Pace {
        ctx,
        events,
        lane,
        attempt: a.attempt,
        received: 0,
        unreported: 0,
        last_report: Instant::now(),
    };
    let mut batch = Batch::new(a.range.start);
    let mut buffer: Vec<Bytes> = Vec::new();
    loop {
        // A body that is always ready (fast loopback, memory) must not keep its worker thread
        // from the other lanes.
        tokio::task::consume_budget().await;
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Fetched::cancelled(),
            r = body.next_data() => r,
        };
        match next {
            Ok(Some(data)) if data.is_empty() => {}
            Ok(Some(data)) => {
                pace.add(data.len() as u64);
                if pace.received > len {
                    return Fetched::failed(TransferError::Unexpected {
                        peer,
                        message: format!("more than the {len} bytes asked for"),
                    });
                }
                if let Some(h) = hasher.as_mut() {
                    h.update(&data);
                }
                batch.push(data);
                if batch.len >= ctx.write_batch && !batch.flush(ctx, a, &mut buffer, cancel).await {
                    return Fetched::cancelled();
                }
            }
            Ok(None) => break,
            Err(e) => return Fetched::failed(e),
        }
    }
    if pace.received != len {
        return Fetched::failed(TransferError::Truncated {
            peer,
            expected: len,
            got: pace.received,
        });
    }
    if !batch.flush(ctx, a, &mut buffer, cancel).await {
        return Fetched::cancelled();
    }
    Fetched {
        outcome: AttemptOutcome::Received {
            digest: hasher.map(Sha256Hasher::finish),
            server_digest: body.trailer_digest(),
        },
        error: None,
        reusable: true,
        buffer,
    }
}

/// Received bytes not yet handed on, and the offset they start at.
struct Batch {
    pieces: Vec<Bytes>,
    len: usize,
    offset: u64,
}

impl Batch {
    fn new(offset: u64) -> Self {
        Self {
            pieces: Vec::new(),
            len: 0,
            offset,
        }
    }

    fn push(&mut self, data: Bytes) {
        self.len += data.len();
        self.pieces.push(data);
    }

    /// Hand the batch to the writer (or to the duplicate's buffer). `false` when the attempt
    /// was cancelled or the writer has stopped meanwhile.
    async fn flush(
        &mut self,
        ctx: &LaneContext,
        a: &Assignment,
        buffer: &mut Vec<Bytes>,
        cancel: &CancellationToken,
    ) -> bool {
        if self.pieces.is_empty() {
            return true;
        }
        let mut data = std::mem::take(&mut self.pieces);
        let n = std::mem::take(&mut self.len);
        // QUIC delivers packet-sized pieces: one copy into a single buffer is far cheaper than
        // a write system call (or a buffered duplicate's bookkeeping) per piece.
        if data.len() > COALESCE_PIECES {
            let mut joined = bytes::BytesMut::with_capacity(n);
            for b in &data {
                joined.extend_from_slice(b);
            }
            data = vec![joined.freeze()];
        }
        if a.direct {
            let op = WriteOp::Data {
                attempt: a.attempt,
                offset: self.offset,
                data,
            };
            // A writer that stopped has told the driver why; this attempt just ends.
            tokio::select! {
                r = ctx.writer.send(op) => if r.is_err() { return false },
                _ = cancel.cancelled() => return false,
            }
        } else {
            buffer.extend(data);
        }
        self.offset += n as u64;
        true
    }
}
