//! One lane: a task that owns its transport connections and fetches the assignments the driver
//! hands it, reading one body at a time with the next request already sent. It shares no state with the driver: work arrives on its own
//! channel, and everything it learns (bytes received, how an attempt ended, a connection that
//! cannot be opened) goes back to the driver as a [`LaneEvent`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::digest::LaneSha256;
use crate::error::TransferError;
use crate::plan::ChunkIndex;
use crate::progress::Progress;
use crate::schedule::{Assignment, AttemptId, AttemptOutcome, LaneIndex};
use crate::sink::WriteOp;
use crate::transport::{
    FirstBody, Lane, RangeBody, RangeRequest, RemoteInfo, RoundTrips, Transport,
};

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
    /// The body being read ends within about a round trip or two: the lane can take its next
    /// assignment now and have the request in flight before this body ends.
    Ahead { lane: LaneIndex },
    /// An attempt ended. `error` is the transport's error behind a failure, kept for the final
    /// message; `buffer` holds an end-game duplicate's bytes.
    Finished {
        lane: LaneIndex,
        attempt: AttemptId,
        chunk: ChunkIndex,
        outcome: AttemptOutcome,
        error: Option<TransferError>,
        buffer: Vec<Bytes>,
        /// The adler32 of the bytes received, when every chunk's is asked for.
        adler32: Option<u32>,
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
    /// Hash each chunk as it arrives and ask the server for its digest of it. Off when the
    /// whole-file hash alone checks the bytes (see [`super::GetConfig::check_every_chunk`]).
    pub check_chunks: bool,
    /// Compute each chunk's adler32 as it arrives, for the whole file's by combination (see
    /// [`crate::chunk_adler`]).
    pub chunk_adler32: bool,
    /// One request for the whole resource (the server ignores ranges).
    pub whole: bool,
    /// Whether to request the next chunk before the current body ends (see
    /// [`LaneEvent::Ahead`]).
    pub ahead: Ahead,
    pub write_batch: usize,
    pub writer: mpsc::Sender<WriteOp>,
    pub progress: Progress,
    pub open_attempts: u32,
    /// Cancelled when the transfer stops.
    pub stop: CancellationToken,
    /// The shortest request-to-head time seen, in nanoseconds (`u64::MAX` before any): the
    /// path's response latency, for when to ask ahead. A request sent ahead cannot measure it
    /// (its answer queues behind the body before it), nor can one that opened a connection.
    pub latency_ns: std::sync::atomic::AtomicU64,
    /// The command's rate cap, charged as bytes are read.
    pub rate_limit: Option<crate::rate::RateLimiter>,
}

/// Who decides whether lanes request ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ahead {
    /// The user did: always, or never.
    Fixed(bool),
    /// The transport, asked before each request: whether it has the room can change during a
    /// transfer (HTTP/2 spreading its lanes over more connections leaves fewer streams to
    /// share each connection's window).
    Transport,
}

impl LaneContext {
    /// Whether a request starting now may send its successor ahead.
    fn ahead(&self) -> bool {
        match self.ahead {
            Ahead::Fixed(on) => on,
            Ahead::Transport => self.transport.request_ahead() == Some(true),
        }
    }

    fn note_latency(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1);
        self.latency_ns
            .fetch_min(ns, std::sync::atomic::Ordering::Relaxed);
    }

    /// The path's response latency as measured so far, else `fallback`.
    fn latency(&self, fallback: Duration) -> Duration {
        match self.latency_ns.load(std::sync::atomic::Ordering::Relaxed) {
            u64::MAX => fallback,
            ns => Duration::from_nanos(ns),
        }
    }
}

/// How a lane begins: with nothing, with a connection opened while the first request learned
/// the resource (and the chunk it asked for meanwhile), or (lane 0) with the lane that made
/// that request and the body it received.
#[derive(Default)]
pub(super) struct LaneStart {
    pub opened: Option<Box<dyn Lane>>,
    pub pending: Option<JoinHandle<Result<Preopened, TransferError>>>,
    /// The first body, and a round trip as its request measured it.
    pub first: Option<(FirstBody, Duration)>,
}

/// A lane connected while the first request learned the resource.
pub(super) struct Preopened {
    pub lane: Box<dyn Lane>,
    /// The chunk it asked for before the size was known, with the resource as that answer
    /// described it and a round trip as its request measured it.
    pub first: Option<(RemoteInfo, FirstBody, Duration)>,
}

/// Whether a speculative answer's description is the resource the engine planned with; its
/// body is used only then.
fn same_resource(answer: &RemoteInfo, planned: &RemoteInfo) -> bool {
    answer.url == planned.url
        && answer.size == planned.size
        && answer.etag == planned.etag
        && answer.last_modified == planned.last_modified
        && planned.accepts_ranges
}

/// One attempt running on the lane: request, head, (wait for the body before it), body.
type Running = Pin<Box<dyn Future<Output = Ended> + Send>>;

/// How a running attempt ended, with the connection it used when that can carry more.
struct Ended {
    attempt: AttemptId,
    chunk: ChunkIndex,
    conn: Option<Box<dyn Lane>>,
    result: Result<Fetched, TransferError>,
    round_trips: Option<RoundTrips>,
}

/// Take work until the driver closes `work` or the transfer stops.
///
/// A lane carries at most two attempts: the one whose body it reads, and the next, whose
/// request it sends when the driver grants it after [`LaneEvent::Ahead`]. The second goes out
/// on the same connection where it can ([`Lane::twin`]: HTTP/1.1 pipelining), else on another
/// stream or connection, and its body is read only after the first ends, so memory stays what
/// the socket or stream window holds.
pub(super) async fn run(
    ctx: Arc<LaneContext>,
    lane: LaneIndex,
    start: LaneStart,
    mut work: mpsc::Receiver<Work>,
    events: mpsc::UnboundedSender<LaneEvent>,
) {
    let mut spare: Vec<Box<dyn Lane>> = start.opened.into_iter().collect();
    let mut pending = start.pending;
    // Whether the lane's connection came up while the first request was answered, and its
    // own first request waited for that answer (it did not ask speculatively).
    let mut preconnected = pending.is_some();
    let mut first = start.first;
    let mut recorded = false;
    let mut open_failures = 0u32;
    let mut current: Option<Running> = None;
    let mut ahead: Option<Running> = None;
    let mut gate: Option<oneshot::Sender<()>> = None;
    loop {
        let ended = tokio::select! {
            w = work.recv(), if current.is_none() || ahead.is_none() => {
                let Some(w) = w else { return };
                if let Some(p) = pending.take() {
                    match p.await {
                        Ok(Ok(pre)) => {
                            spare.push(pre.lane);
                            if let Some((info, body, rtt)) = pre.first {
                                if same_resource(&info, &ctx.remote) {
                                    first = Some((body, rtt));
                                    preconnected = false;
                                } else {
                                    tracing::debug!(lane, ?info, "the speculative answer describes another resource; dropped");
                                }
                            }
                        }
                        Ok(Err(e)) => tracing::debug!(lane, error = %e, "connecting ahead failed; connecting again"),
                        Err(e) => tracing::debug!(lane, error = %e, "connecting ahead ended abnormally"),
                    }
                }
                let wait = if current.is_some() {
                    let (tx, rx) = oneshot::channel();
                    gate = Some(tx);
                    Some(rx)
                } else {
                    None
                };
                let mut conn = spare.pop();
                if ctx.ahead() && current.is_none() && spare.is_empty() {
                    // The request sent ahead rides this connection when it can (pipelined):
                    // the lane is opened here, not in the attempt, so its twin can stay in
                    // `spare` for that request; both return there afterwards.
                    if conn.is_none() {
                        conn = tokio::select! {
                            opened = ctx.transport.open_lane(lane) => opened.ok(),
                            _ = ctx.stop.cancelled() => return,
                        };
                    }
                    if let Some(twin) = conn.as_mut().and_then(|c| c.twin()) {
                        spare.push(twin);
                    }
                }
                let fut = Box::pin(attempt(
                    Arc::clone(&ctx),
                    lane,
                    conn,
                    w,
                    wait,
                    first.take(),
                    events.clone(),
                ));
                if current.is_none() {
                    current = Some(fut);
                } else {
                    ahead = Some(fut);
                }
                continue;
            }
            e = poll_running(&mut current) => {
                current = ahead.take();
                // The next body may be read now.
                if let Some(g) = gate.take() {
                    let _ = g.send(());
                }
                e
            }
            e = poll_running(&mut ahead) => {
                // Failed or cancelled before its turn to read.
                ahead = None;
                gate.take();
                e
            }
        };
        if !recorded {
            if let Some(mut rt) = ended.round_trips {
                rt.preconnected = preconnected && rt.tcp + rt.handshake > 0;
                ctx.progress.lane(lane, |s| s.round_trips = Some(rt));
                recorded = true;
            }
        }
        let busy = current.is_some();
        let fetched = match ended.result {
            Ok(f) => f,
            Err(error) => {
                open_failures += 1;
                tracing::warn!(lane, error = %error, "cannot open lane");
                let gave_up = open_failures >= ctx.open_attempts;
                let _ = events.send(LaneEvent::OpenFailed {
                    lane,
                    attempt: ended.attempt,
                    chunk: ended.chunk,
                    error,
                    gave_up,
                });
                if gave_up {
                    return;
                }
                // With an attempt still running the lane is not idle; it asks ahead again
                // only for its next body.
                if !busy {
                    let wait = REOPEN_BACKOFF.saturating_mul(1 << open_failures.min(6));
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = ctx.stop.cancelled() => return,
                    }
                }
                if events.send(LaneEvent::Ready { lane }).is_err() {
                    return;
                }
                continue;
            }
        };
        open_failures = 0;
        if let Some(conn) = ended.conn {
            spare.push(conn);
        }
        let finished = LaneEvent::Finished {
            lane,
            attempt: ended.attempt,
            chunk: ended.chunk,
            outcome: fetched.outcome,
            error: fetched.error,
            buffer: fetched.buffer,
            adler32: fetched.adler32,
        };
        if events.send(finished).is_err() {
            return;
        }
    }
}

async fn poll_running(r: &mut Option<Running>) -> Ended {
    match r {
        Some(f) => f.as_mut().await,
        None => std::future::pending().await,
    }
}

/// One attempt on `conn` (or a connection opened for it); `wait` resolves when the body before
/// it on this lane has ended.
async fn attempt(
    ctx: Arc<LaneContext>,
    lane: LaneIndex,
    conn: Option<Box<dyn Lane>>,
    work: Work,
    wait: Option<oneshot::Receiver<()>>,
    first: Option<(FirstBody, Duration)>,
    events: mpsc::UnboundedSender<LaneEvent>,
) -> Ended {
    let Work { assignment, cancel } = work;
    let mut conn = match conn {
        Some(c) => c,
        None => match ctx.transport.open_lane(lane).await {
            Ok(opened) => opened,
            Err(e) => {
                return Ended {
                    attempt: assignment.attempt,
                    chunk: assignment.chunk,
                    conn: None,
                    result: Err(e),
                    round_trips: None,
                }
            }
        },
    };
    let label = conn.label();
    ctx.progress.lane(lane, |s| s.label = label);
    let step = Step {
        ctx: &ctx,
        a: &assignment,
        cancel: &cancel,
        lane,
        events: &events,
    };
    let fetched = fetch(step, conn.as_mut(), wait, first).await;
    let round_trips = conn.first_round_trips();
    Ended {
        attempt: assignment.attempt,
        chunk: assignment.chunk,
        conn: fetched.reusable.then_some(conn),
        result: Ok(fetched),
        round_trips,
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
    /// The adler32 of every byte received, when asked for.
    adler32: Option<u32>,
}

impl Fetched {
    fn cancelled() -> Self {
        Self {
            outcome: AttemptOutcome::Cancelled,
            error: None,
            reusable: false,
            buffer: Vec::new(),
            adler32: None,
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
            adler32: None,
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
    /// When the body began to be read, for the lane's busy time.
    started: Instant,
    /// When the latest piece arrived.
    last_seen: Instant,
}

impl Pace<'_> {
    fn add(&mut self, n: u64) {
        self.received += n;
        self.unreported += n;
        let now = Instant::now();
        self.last_seen = now;
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
        let busy = self.started.elapsed();
        self.ctx.progress.lane(self.lane, |s| s.busy += busy);
    }
}

/// What one attempt needs besides its connection.
struct Step<'a> {
    ctx: &'a LaneContext,
    a: &'a Assignment,
    cancel: &'a CancellationToken,
    lane: LaneIndex,
    events: &'a mpsc::UnboundedSender<LaneEvent>,
}

/// When to ask for the next assignment: once the rest of the body should take no longer than
/// a few response-head latencies (a request's round trip, plus a connection's set-up when the
/// next request needs one).
struct AheadClock {
    latency: Duration,
    first_byte: Option<Instant>,
    /// Bytes of the body that may have arrived but not been read: a lane paced by
    /// `--limit-rate` reads a window behind the wire. Without counting them the next request
    /// leaves a window's worth of reading too late, the connection idles for that long at
    /// the end of every chunk, and the link swings around the cap as the other lanes drain
    /// and refill their windows.
    unread: u64,
    /// The fastest the lane can read, bytes per second: the cap of `--limit-rate`, else
    /// unbounded. A paced lane's first reads take the bucket's burst and its full window at
    /// memory speed; measured alone they promise the chunk's end at once, and the request
    /// ahead went out (and was refused, the lane's first body not yet counted) a chunk early.
    max_rate: f64,
}

impl AheadClock {
    /// Round trips of lead: the request's, and two more for a connection (TCP, TLS) the
    /// lane may have to open for it.
    const LEAD: u32 = 3;

    fn due(&mut self, received: u64, len: u64, now: Instant) -> bool {
        let since = *self.first_byte.get_or_insert(now);
        let on_wire = received.saturating_add(self.unread).min(len);
        if on_wire >= len {
            // All bytes are in: the next request goes before the end is checked and written.
            return true;
        }
        let elapsed = now.duration_since(since).as_secs_f64();
        if received == 0 || elapsed <= 0.0 {
            return false;
        }
        let rate = (received as f64 / elapsed).min(self.max_rate);
        let left = len.saturating_sub(on_wire) as f64 / rate;
        left <= (self.latency * Self::LEAD).as_secs_f64()
    }
}

/// Fetch one assignment, hashing and handing bytes to the writer as they arrive. `wait`
/// resolves when the lane's previous body has ended; `first` is a body that arrived with the
/// resource's description, used when it is this assignment's.
async fn fetch(
    step: Step<'_>,
    conn: &mut dyn Lane,
    wait: Option<oneshot::Receiver<()>>,
    first: Option<(FirstBody, Duration)>,
) -> Fetched {
    let Step {
        ctx,
        a,
        cancel,
        lane,
        events,
    } = step;
    let req = RangeRequest {
        range: a.range.clone(),
        expected_size: ctx.remote.size,
        want_digest: ctx.check_chunks,
        validator: ctx.remote.range_validator().map(str::to_string),
        whole: ctx.whole,
    };
    let len = a.range.end - a.range.start;
    let peer = conn.label();
    let asked = Instant::now();
    // A first body for another range is dropped before the connection is asked again.
    let first = first.filter(|(f, _)| f.range == a.range && f.whole == ctx.whole);
    let (mut body, latency): (Box<dyn RangeBody + '_>, _) = match first {
        Some((f, rtt)) => (f.body, rtt),
        None => tokio::select! {
            r = conn.fetch(&req) => match r {
                Ok(b) => (b, asked.elapsed()),
                Err(e) => return Fetched::failed(e),
            },
            _ = cancel.cancelled() => return Fetched::cancelled(),
        },
    };
    // A pipelined answer waited for the body before it: its time says nothing of the path.
    if wait.is_none() {
        ctx.note_latency(latency);
    }
    let latency = ctx.latency(latency);
    if let Some(wait) = wait {
        tokio::select! {
            _ = wait => {}
            _ = cancel.cancelled() => return Fetched::cancelled(),
        }
    }
    let started = Instant::now();
    let mut ahead = (ctx.ahead() && !ctx.whole).then_some(AheadClock {
        latency,
        first_byte: None,
        unread: ctx.rate_limit.as_ref().map_or(0, |l| l.limit().window()),
        max_rate: ctx
            .rate_limit
            .as_ref()
            .map_or(f64::INFINITY, |l| l.limit().bytes_per_second() as f64),
    });
    let mut hasher = ctx.check_chunks.then(LaneSha256::new);
    let mut adler = ctx.chunk_adler32.then(adler2::Adler32::new);
    let mut pace = Pace {
        ctx,
        events,
        lane,
        attempt: a.attempt,
        received: 0,
        unreported: 0,
        last_report: started,
        started,
        last_seen: started,
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
                if ahead
                    .as_mut()
                    .is_some_and(|c| c.due(pace.received, len, pace.last_seen))
                {
                    ahead = None;
                    let _ = events.send(LaneEvent::Ahead { lane });
                }
                if let Some(h) = hasher.as_mut() {
                    h.update(data.clone());
                }
                if let Some(h) = adler.as_mut() {
                    h.write_slice(&data);
                }
                let n = data.len() as u64;
                batch.push(data);
                if let Some(limit) = ctx.rate_limit.as_ref() {
                    // Not reading closes the flow-control window, which slows the sender.
                    tokio::select! {
                        _ = limit.pace(n) => {}
                        _ = cancel.cancelled() => return Fetched::cancelled(),
                    }
                }
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
            digest: hasher.map(LaneSha256::finish),
            server_digest: body.trailer_digest(),
        },
        error: None,
        reusable: true,
        buffer,
        adler32: adler.map(|h| h.checksum()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane reading 1 MB/s out of a 4 MB chunk, 10 ms from its server.
    fn clock(unread: u64) -> AheadClock {
        AheadClock {
            latency: Duration::from_millis(10),
            first_byte: None,
            unread,
            max_rate: f64::INFINITY,
        }
    }

    fn first_due(mut c: AheadClock) -> u64 {
        let t0 = Instant::now();
        let len = 4_000_000;
        (0..=len)
            .step_by(10_000)
            .find(|&got| c.due(got, len, t0 + Duration::from_micros(got)))
            .expect("due by the end")
    }

    #[test]
    fn asks_ahead_a_few_latencies_before_the_end() {
        // 30 ms of lead at 1 MB/s: 30 kB before the end.
        assert_eq!(first_due(clock(0)), 3_970_000);
    }

    #[test]
    fn a_paced_lane_counts_its_unread_window_as_arrived() {
        // A 500 kB window behind the reader: the wire finishes 500 kB earlier, and so must
        // the request for what follows.
        assert_eq!(first_due(clock(500_000)), 3_470_000);
        // A window as large as the chunk: the next request goes with the first bytes.
        assert_eq!(first_due(clock(4_000_000)), 0);
    }

    #[test]
    fn a_capped_lane_is_not_due_on_its_first_burst() {
        let t0 = Instant::now();
        let len = 16_000_000;
        let mut c = AheadClock {
            latency: Duration::from_millis(50),
            first_byte: None,
            unread: 3_000_000,
            max_rate: 25e6,
        };
        assert!(!c.due(16_000, len, t0));
        // 1 MB within a millisecond (the bucket's burst and a full window): at the cap, the
        // chunk has half a second left, far more than three round trips.
        assert!(!c.due(1_000_000, len, t0 + Duration::from_millis(1)));
        // Unbounded, the same reads would have been taken for the end.
        c.max_rate = f64::INFINITY;
        assert!(c.due(1_000_000, len, t0 + Duration::from_millis(1)));
    }
}
