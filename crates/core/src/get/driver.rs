//! The driver: the one task that owns the [`Scheduler`].
//!
//! Lanes, the writer thread and the whole-file hasher each run on their own and report to the
//! driver over channels; the driver reacts to each report (assign work, seal a chunk, cancel a
//! losing duplicate, end the transfer). Every failure arrives as an event: a write error (disk
//! full) ends the transfer the moment the writer reports it, a lane task that dies is noticed
//! when it ends, a hasher that stops early is noticed when its channel closes. The only timer
//! is the scheduler's own: the end of a retry backoff, and a periodic end-game look while a
//! lane is idle and chunks are still in flight.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use super::lane::{self, LaneContext, LaneEvent, LaneStart, Work};
use super::GetError;
use crate::adapt::{Action, AdaptReport};
use crate::checksum::Checksum;
use crate::chunk_adler::ChunkAdlers;
use crate::digest::Sha256Digest;
use crate::error::TransferError;
use crate::lane_sampler::{Counters, LaneSampler};
use crate::plan::ChunkIndex;
use crate::progress::Progress;
use crate::schedule::{AttemptId, AttemptOutcome, LaneIndex, ScheduleEvent, Scheduler};
use crate::sink::{self, SinkError, WriteOp};
use crate::whole_hash::HashEvent;

/// How often an idle lane's chance to duplicate a slow chunk is re-evaluated when nothing
/// else happens: end-game decisions depend on how far the slow chunks have got.
const ENDGAME_RECHECK: Duration = Duration::from_millis(100);

/// How the transfer ended, as far as the driver is concerned.
pub(super) enum Ending {
    /// Every chunk verified; the whole-file digest and the checksum asked for, each when
    /// computed.
    Complete {
        sha256: Option<Sha256Digest>,
        checksum: Option<Checksum>,
    },
    /// The shutdown future resolved.
    Interrupted,
    Failed(GetError),
    /// A chunk arrived with no digest from the server while nothing else could vouch for the
    /// file (`--require-digest` without a whole-file digest): refused at once, not after
    /// every byte was fetched.
    Unvouched {
        chunk: ChunkIndex,
    },
}

/// Where the driver's reports come from.
pub(super) struct Inputs {
    pub events: mpsc::UnboundedReceiver<LaneEvent>,
    /// Fires with the error that stopped the writer thread; closes without one when the
    /// writer ends cleanly.
    pub writer_failed: Option<oneshot::Receiver<SinkError>>,
    /// The whole-file hasher's reports; `None` when not hashing.
    pub hashes: Option<mpsc::UnboundedReceiver<HashEvent>>,
    /// The transfer is one chunk, hashed by its lane: that digest is the whole file's, and
    /// there is no hasher.
    pub whole_from_chunk: bool,
}

pub(super) struct Driver {
    sched: Scheduler,
    ctx: Arc<LaneContext>,
    events_tx: mpsc::UnboundedSender<LaneEvent>,
    /// The lane-count controller's driver, when the count adapts.
    lane_count: Option<LaneSampler>,
    source: String,
    progress: Progress,
    writer: mpsc::Sender<WriteOp>,
    stop: CancellationToken,
    /// Per lane: where to send its work, and whether it is waiting for some.
    lanes: Vec<LaneSlot>,
    tasks: JoinSet<()>,
    task_lane: HashMap<Id, LaneIndex>,
    /// Tokens of attempts in flight, to cancel the losers of an end-game race.
    tokens: HashMap<AttemptId, CancellationToken>,
    /// Winning end-game duplicates' bytes, until their chunk is sealed.
    buffers: HashMap<AttemptId, Vec<Bytes>>,
    /// The error behind each chunk's last failure, for the final message.
    errors: HashMap<ChunkIndex, TransferError>,
    /// Per chunk: verified against a digest the server sent (this run or, for resumed
    /// chunks, the journal's word). Counted into the progress's `server_digest_chunks`.
    server_checked: Vec<bool>,
    /// The digest of the chunk verified last: the whole file's when it has one chunk.
    last_verified: Option<Sha256Digest>,
    /// End the transfer at the first chunk the server sent no digest for.
    refuse_unvouched: bool,
    /// The first such chunk.
    unvouched: Option<ChunkIndex>,
    /// Each chunk's adler32 from its winning lane, when the file's is combined from them
    /// rather than computed by the whole-file hasher.
    chunk_adler32: Option<ChunkAdlers>,
    /// The hasher waits for this before hashing anything ([`crate::whole_hash::spawn`]); set
    /// at the first chunk verified without the server's digest, before its seal reaches the
    /// hasher. Never set, the transfer ends without the whole-file digest: every chunk was
    /// checked against the server's.
    whole_on_demand: Option<Arc<AtomicBool>>,
}

struct LaneSlot {
    work: Option<mpsc::Sender<Work>>,
    /// Assignments sent and not yet ended: 0 (idle), 1, or 2 with one requested ahead.
    outstanding: u8,
    /// The body being read nears its end and the lane would send its next request now.
    wants_ahead: bool,
    /// Waiting out a backoff after its connection failed to open.
    backoff: bool,
    /// Retired by the lane-count controller: takes no more work, and its channel closes
    /// once what it carries has ended.
    retiring: bool,
}

/// Which work a lane can take now.
enum Wants {
    /// Any: it is idle (and may duplicate a slow chunk at the end).
    Work,
    /// A pending chunk to request while its current body still streams.
    Ahead,
}

impl LaneSlot {
    fn wants(&self) -> Option<Wants> {
        if self.work.is_none() || self.backoff || self.retiring {
            return None;
        }
        match (self.outstanding, self.wants_ahead) {
            (0, _) => Some(Wants::Work),
            (1, true) => Some(Wants::Ahead),
            _ => None,
        }
    }

    fn is_idle(&self) -> bool {
        matches!(self.wants(), Some(Wants::Work))
    }
}

impl Driver {
    /// Start a lane task for each of `starts`; they wait for the driver's first assignments.
    /// With `lane_count` the driver adds and retires lanes as its controller decides.
    pub fn start(
        sched: Scheduler,
        starts: Vec<LaneStart>,
        ctx: LaneContext,
        source: String,
        server_checked: Vec<bool>,
        lane_count: Option<LaneSampler>,
    ) -> (Self, mpsc::UnboundedReceiver<LaneEvent>) {
        let ctx = Arc::new(ctx);
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let mut driver = Self {
            sched,
            source,
            progress: ctx.progress.clone(),
            writer: ctx.writer.clone(),
            stop: ctx.stop.clone(),
            ctx,
            events_tx,
            lane_count,
            lanes: Vec::with_capacity(starts.len()),
            tasks: JoinSet::new(),
            task_lane: HashMap::new(),
            tokens: HashMap::new(),
            buffers: HashMap::new(),
            errors: HashMap::new(),
            server_checked,
            last_verified: None,
            refuse_unvouched: false,
            unvouched: None,
            chunk_adler32: None,
            whole_on_demand: None,
        };
        for start in starts {
            driver.spawn_lane(start);
        }
        (driver, events_rx)
    }

    /// Start lane number `self.lanes.len()`: its task, and its slot.
    fn spawn_lane(&mut self, start: LaneStart) {
        let lane = self.lanes.len();
        // Capacity two: the current assignment and the one requested ahead.
        let (work_tx, work_rx) = mpsc::channel(2);
        let handle = self.tasks.spawn(lane::run(
            Arc::clone(&self.ctx),
            lane,
            start,
            work_rx,
            self.events_tx.clone(),
        ));
        self.task_lane.insert(handle.id(), lane);
        self.lanes.push(LaneSlot {
            work: Some(work_tx),
            outstanding: 0,
            wants_ahead: false,
            backoff: false,
            retiring: false,
        });
    }

    /// Lanes that carry or may take work (retiring ones finishing a chunk included).
    fn running_lanes(&self) -> usize {
        self.lanes.iter().filter(|s| s.work.is_some()).count()
    }

    /// Feed the lane-count controller when a sample is due, and apply what it decides: new
    /// lanes connect at once (with TLS resumption, as every lane after the first); retired
    /// ones finish what they carry before their connection goes back to the transport.
    fn adapt_lanes(&mut self, now: Instant) {
        if self.sched.is_finished()
            || self
                .lane_count
                .as_ref()
                .is_none_or(|lc| now < lc.next_sample())
        {
            return;
        }
        let received = self.progress.snapshot().received;
        let connections = self.ctx.transport.connection_stats();
        let counters = Counters {
            received,
            remaining: self.sched.remaining_bytes(),
            lanes: self.running_lanes(),
            connections: &connections,
        };
        let Some(lc) = self.lane_count.as_mut() else {
            return;
        };
        for d in lc.handle_tick(now, &counters) {
            match d.action {
                Action::Add(n) => {
                    for _ in 0..n {
                        let lane = self.sched.handle_lane_added();
                        self.progress.update(|p| {
                            p.lanes.push(crate::progress::LaneSnapshot {
                                lane,
                                ..Default::default()
                            });
                        });
                        self.spawn_lane(LaneStart::default());
                    }
                }
                Action::Retire(n) => {
                    // The newest lanes go first: those a failed probe added.
                    let mut left = n;
                    for slot in self.lanes.iter_mut().rev() {
                        if left == 0 {
                            break;
                        }
                        if slot.work.is_none() || slot.retiring {
                            continue;
                        }
                        slot.retiring = true;
                        if slot.outstanding == 0 {
                            slot.work = None;
                        }
                        left -= 1;
                    }
                }
                Action::Hold => {}
            }
        }
    }

    /// What the report says of the lane count, when it adapted.
    fn adapt_report(&self) -> Option<AdaptReport> {
        let lc = self.lane_count.as_ref()?;
        let running = self
            .lanes
            .iter()
            .filter(|s| s.work.is_some() && !s.retiring)
            .count();
        Some(lc.report(running))
    }

    /// End the transfer at the first chunk verified without a digest from the server.
    pub fn refuse_unvouched(mut self, on: bool) -> Self {
        self.refuse_unvouched = on;
        self
    }

    /// Combine the file's adler32 from each chunk's, which the lanes compute (they must have
    /// been started with [`LaneContext::chunk_adler32`]).
    pub fn combine_chunk_adler32(mut self, on: bool) -> Self {
        self.chunk_adler32 = on.then(|| ChunkAdlers::new(self.sched.plan()));
        self
    }

    /// Hash the whole file only once a chunk comes without the server's digest.
    pub fn whole_on_demand(mut self, wanted: Option<Arc<AtomicBool>>) -> Self {
        self.whole_on_demand = wanted;
        self
    }

    /// The checksum the transfer ends with: the hasher's, or the one combined from the chunks'.
    fn final_checksum(&self, from_hasher: Option<Checksum>) -> Result<Option<Checksum>, GetError> {
        let Some(adlers) = &self.chunk_adler32 else {
            return Ok(from_hasher);
        };
        adlers
            .combine(self.sched.plan())
            .map(Some)
            .map_err(|chunk| {
                GetError::Config(format!(
                    "{}: chunk {chunk} was verified without its adler32",
                    self.source
                ))
            })
    }

    /// React to reports until the transfer is complete, fails or `shutdown` resolves. Lanes
    /// are stopped and joined before this returns; the writer is left to the caller to finish.
    pub async fn run(
        mut self,
        mut inputs: Inputs,
        shutdown: impl Future<Output = ()>,
    ) -> (Ending, Option<AdaptReport>) {
        tokio::pin!(shutdown);
        let verify_whole = inputs.hashes.is_some();
        let mut whole_digest = None;
        let mut journal_tick = tokio::time::interval(crate::sink::JOURNAL_INTERVAL / 2);
        journal_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ending = loop {
            self.adapt_lanes(Instant::now());
            self.dispatch().await;
            if let Some(failure) = self.sched.failure().cloned() {
                break Ending::Failed(self.error_for(failure));
            }
            if let Some(chunk) = self.unvouched {
                break Ending::Unvouched { chunk };
            }
            if inputs.whole_from_chunk && self.sched.is_finished() {
                break match (self.last_verified, self.final_checksum(None)) {
                    (Some(d), Ok(checksum)) => Ending::Complete {
                        sha256: Some(d),
                        checksum,
                    },
                    (None, _) => Ending::Failed(GetError::Config(
                        "the only chunk was verified without a digest".into(),
                    )),
                    (_, Err(e)) => Ending::Failed(e),
                };
            }
            // A complete schedule is not the end while the hasher may still find a resumed
            // chunk damaged and put it back.
            let whole_unneeded = self
                .whole_on_demand
                .as_ref()
                .is_some_and(|w| !w.load(Ordering::Acquire));
            if self.sched.is_finished()
                && (!verify_whole || whole_digest.is_some() || whole_unneeded)
            {
                let (sha256, checksum) = match whole_digest {
                    Some((d, c)) => (Some(d), c),
                    None => (None, None),
                };
                break match self.final_checksum(checksum) {
                    Ok(checksum) => Ending::Complete { sha256, checksum },
                    Err(e) => Ending::Failed(e),
                };
            }
            let wake_at = self.next_timer();
            tokio::select! {
                biased;
                _ = &mut shutdown => break Ending::Interrupted,
                failed = writer_failure(&mut inputs.writer_failed) => match failed {
                    Some(e) => break Ending::Failed(GetError::Write(e)),
                    None => inputs.writer_failed = None,
                },
                ev = recv_opt(&mut inputs.hashes) => match ev {
                    Some(HashEvent::ChunkInvalid { chunk }) => self.chunk_invalid(chunk),
                    Some(HashEvent::Done(d, c, sources)) => {
                        tracing::debug!(
                            from_memory = sources.from_memory,
                            read_back = sources.read_back,
                            "whole-file hash done"
                        );
                        whole_digest = Some((d, c));
                    }
                    Some(HashEvent::Failed { path, message }) => {
                        break Ending::Failed(GetError::Io {
                            what: "reading back",
                            path,
                            source: std::io::Error::other(message),
                        });
                    }
                    None => {
                        inputs.hashes = None;
                        if whole_digest.is_none() {
                            // The hasher also ends when the writer stops on an error (a full
                            // disk), which arrives on its own channel, maybe a moment later:
                            // that error is the cause to report.
                            if let Some(rx) = inputs.writer_failed.take() {
                                if let Ok(Ok(e)) = tokio::time::timeout(WRITER_VERDICT_WAIT, rx).await {
                                    break Ending::Failed(GetError::Write(e));
                                }
                            }
                            break Ending::Failed(GetError::Config(
                                "the whole-file hash thread ended without a digest".into(),
                            ));
                        }
                    }
                },
                Some(ev) = inputs.events.recv() => self.lane_event(ev),
                Some(joined) = self.tasks.join_next_with_id() => self.lane_ended(joined),
                // A full queue means a busy writer, which syncs on its next seal anyway.
                _ = journal_tick.tick() => { let _ = self.writer.try_send(WriteOp::Tick); }
                _ = sleep_until(wake_at) => {}
            }
        };
        let adapted = self.adapt_report();
        self.stop_lanes().await;
        (ending, adapted)
    }

    /// Give every idle lane work, then apply what the scheduler decided.
    async fn dispatch(&mut self) {
        let now = Instant::now();
        for lane in 0..self.lanes.len() {
            let Some(wants) = self.lanes[lane].wants() else {
                continue;
            };
            if self.sched.failure().is_some() {
                break;
            }
            let assignment = match wants {
                Wants::Work => self.sched.next_assignment(lane, now),
                Wants::Ahead => self.sched.next_ahead(lane, now),
            };
            let Some(assignment) = assignment else {
                continue;
            };
            let cancel = self.stop.child_token();
            self.tokens.insert(assignment.attempt, cancel.clone());
            let attempt = assignment.attempt;
            let sent = self.lanes[lane]
                .work
                .as_ref()
                .is_some_and(|tx| tx.try_send(Work { assignment, cancel }).is_ok());
            if sent {
                let slot = &mut self.lanes[lane];
                slot.outstanding += 1;
                slot.wants_ahead = false;
            } else {
                // The lane task is gone; its end is (or will be) reported by the join set.
                self.tokens.remove(&attempt);
                self.sched
                    .handle_outcome(attempt, AttemptOutcome::Cancelled, now);
                self.lanes[lane].work = None;
            }
        }
        self.settle().await;
    }

    /// The next instant something is due without any report: a chunk leaving backoff, or an
    /// end-game look while a lane idles beside chunks in flight.
    fn next_timer(&self) -> Option<Instant> {
        let idle = self.lanes.iter().any(LaneSlot::is_idle);
        let endgame = (idle && !self.tokens.is_empty()).then(|| Instant::now() + ENDGAME_RECHECK);
        let sample = self.lane_count.as_ref().map(LaneSampler::next_sample);
        [self.sched.poll_timeout(), endgame, sample]
            .into_iter()
            .flatten()
            .min()
    }

    fn lane_event(&mut self, ev: LaneEvent) {
        let now = Instant::now();
        match ev {
            LaneEvent::Progress {
                attempt,
                received,
                at,
            } => self.sched.handle_progress(attempt, received, at),
            LaneEvent::Finished {
                lane,
                attempt,
                chunk,
                outcome,
                error,
                buffer,
                adler32,
            } => {
                self.tokens.remove(&attempt);
                if let Some(e) = error {
                    self.errors.insert(chunk, e);
                }
                let buffered = !buffer.is_empty();
                let won = self.sched.handle_outcome(attempt, outcome, now);
                if won && buffered {
                    self.buffers.insert(attempt, buffer);
                }
                // The winner's bytes are the ones sealed for the chunk, so its adler32 is the
                // chunk's.
                if let (true, Some(adlers), Some(v)) = (won, self.chunk_adler32.as_mut(), adler32) {
                    adlers.set(chunk, v);
                }
                self.ended_on(lane);
            }
            LaneEvent::OpenFailed {
                lane,
                attempt,
                chunk,
                error,
                gave_up,
            } => {
                self.tokens.remove(&attempt);
                let outcome = AttemptOutcome::Failed {
                    retryable: error.is_retryable(),
                    reason: error.to_string(),
                };
                self.errors.insert(chunk, error);
                self.sched.handle_outcome(attempt, outcome, now);
                self.ended_on(lane);
                if let Some(slot) = self.lanes.get_mut(lane) {
                    slot.backoff = true;
                }
                if gave_up {
                    self.lanes[lane].work = None;
                    self.sched.handle_lane_dead(lane);
                }
            }
            LaneEvent::Ready { lane } => {
                if let Some(slot) = self.lanes.get_mut(lane) {
                    slot.backoff = false;
                }
            }
            LaneEvent::Ahead { lane } => {
                if let Some(slot) = self.lanes.get_mut(lane) {
                    slot.wants_ahead = slot.outstanding == 1;
                }
            }
        }
    }

    /// One of `lane`'s assignments ended; a lane that asked ahead asks again for its next
    /// body.
    fn ended_on(&mut self, lane: LaneIndex) {
        if let Some(slot) = self.lanes.get_mut(lane) {
            slot.outstanding = slot.outstanding.saturating_sub(1);
            slot.wants_ahead = false;
            if slot.retiring && slot.outstanding == 0 {
                // Its task ends when the channel closes; the join reports it.
                slot.work = None;
            }
        }
    }

    /// A lane task ended on its own: it gave up opening its connection (already reported) or
    /// it panicked. Either way it takes no more work; what it carried is fetched elsewhere.
    fn lane_ended(&mut self, joined: Result<(Id, ()), tokio::task::JoinError>) {
        let id = match &joined {
            Ok((id, ())) => *id,
            Err(e) => e.id(),
        };
        let Some(lane) = self.task_lane.remove(&id) else {
            return;
        };
        if let Err(e) = &joined {
            tracing::error!(lane, error = %e, "lane task ended abnormally");
        }
        self.lanes[lane].work = None;
        self.lanes[lane].outstanding = 0;
        let orphaned: Vec<AttemptId> = self.sched.attempts_on_lane(lane);
        let now = Instant::now();
        for attempt in orphaned {
            self.tokens.remove(&attempt);
            self.sched.handle_outcome(
                attempt,
                AttemptOutcome::Failed {
                    retryable: true,
                    reason: format!("lane {lane} stopped"),
                },
                now,
            );
        }
        self.sched.handle_lane_dead(lane);
    }

    fn chunk_invalid(&mut self, chunk: ChunkIndex) {
        tracing::warn!(
            chunk,
            "journalled chunk does not match its digest on disk; fetching it again"
        );
        if let Some(adlers) = self.chunk_adler32.as_mut() {
            adlers.clear(chunk);
        }
        let bytes = self.sched.plan().len(chunk);
        self.progress.update(|p| {
            p.verified -= bytes;
            p.resumed = p.resumed.saturating_sub(bytes);
        });
        self.set_server_checked(chunk, false);
        self.sched.handle_chunk_invalidated(chunk);
    }

    /// Apply what the scheduler decided: cancel losers, seal winners, count events.
    async fn settle(&mut self) {
        while let Some(attempt) = self.sched.poll_cancel() {
            if let Some(t) = self.tokens.get(&attempt) {
                t.cancel();
            }
        }
        while let Some(event) = self.sched.poll_event() {
            self.apply(event).await;
        }
    }

    async fn apply(&mut self, event: ScheduleEvent) {
        match event {
            ScheduleEvent::ChunkVerified {
                chunk,
                attempt,
                lane,
                digest,
                server_checked,
                direct,
                losers,
            } => {
                self.set_server_checked(chunk, server_checked);
                if !server_checked {
                    if let Some(wanted) = &self.whole_on_demand {
                        wanted.store(true, Ordering::Release);
                    }
                }
                if self.refuse_unvouched && !server_checked && self.unvouched.is_none() {
                    self.unvouched = Some(chunk);
                }
                self.last_verified = digest;
                let range = self.sched.plan().range(chunk);
                let buffered = if direct {
                    None
                } else {
                    self.buffers.remove(&attempt)
                };
                let len = range.end - range.start;
                self.progress.update(|p| {
                    p.verified += len;
                    if let Some(l) = p.lanes.get_mut(lane) {
                        l.chunks += 1;
                    }
                });
                let op = WriteOp::Seal {
                    record: sink::record(chunk, range, digest, server_checked),
                    losers,
                    buffered,
                };
                // Lanes' writes of this chunk are queued before this seal, so the record is
                // journalled after its bytes are in place. A writer that has stopped has
                // reported why on its own channel; that report ends the transfer.
                let _ = self.writer.send(op).await;
            }
            ScheduleEvent::DigestMismatch {
                chunk,
                lane,
                expected,
                actual,
            } => {
                tracing::warn!(chunk, lane, %expected, %actual, "chunk digest mismatch; fetching it again");
                self.progress.update(|p| p.digest_mismatches += 1);
            }
            ScheduleEvent::Retry {
                chunk,
                lane,
                reason,
                backoff,
            } => {
                tracing::warn!(chunk, lane, %reason, ?backoff, "retrying chunk");
                self.progress.update(|p| {
                    p.retries += 1;
                    if let Some(l) = p.lanes.get_mut(lane) {
                        l.retries += 1;
                    }
                });
            }
            ScheduleEvent::Duplicated { chunk, lane } => {
                tracing::debug!(chunk, lane, "end game: duplicating a slow chunk");
                self.progress.update(|p| p.duplicates += 1);
            }
            ScheduleEvent::Complete | ScheduleEvent::Failed(_) => {}
        }
    }

    fn set_server_checked(&mut self, chunk: ChunkIndex, checked: bool) {
        let Some(flag) = self.server_checked.get_mut(chunk as usize) else {
            return;
        };
        let was = std::mem::replace(flag, checked);
        if was != checked {
            self.progress.update(|p| {
                if checked {
                    p.server_digest_chunks += 1;
                } else {
                    p.server_digest_chunks -= 1;
                }
            });
        }
    }

    /// Cancel what is in flight, close every lane's work channel and wait for the tasks.
    async fn stop_lanes(&mut self) {
        self.stop.cancel();
        for slot in &mut self.lanes {
            slot.work = None;
        }
        while self.tasks.join_next().await.is_some() {}
    }

    fn error_for(&mut self, failure: crate::schedule::ScheduleFailure) -> GetError {
        use crate::schedule::ScheduleFailure;
        let chunk = match &failure {
            ScheduleFailure::TooManyAttempts { chunk, .. }
            | ScheduleFailure::Permanent { chunk, .. } => Some(*chunk),
            ScheduleFailure::NoLanes => None,
        };
        if let Some(chunk) = chunk {
            if let Some(source) = self.errors.remove(&chunk) {
                let range = self.sched.plan().range(chunk);
                return GetError::Chunk {
                    url: self.source.clone(),
                    chunk,
                    start: range.start,
                    end: range.end,
                    source,
                };
            }
        }
        GetError::Schedule {
            url: self.source.clone(),
            failure,
        }
    }
}

async fn recv_opt<T>(rx: &mut Option<mpsc::UnboundedReceiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// How long a hasher that ended without a digest waits for the writer's error, which is the
/// cause when there is one (the writer sends it as it stops, after the hasher has seen its
/// input end).
const WRITER_VERDICT_WAIT: Duration = Duration::from_secs(2);

async fn writer_failure(rx: &mut Option<oneshot::Receiver<SinkError>>) -> Option<SinkError> {
    match rx {
        Some(rx) => rx.await.ok(),
        None => std::future::pending().await,
    }
}
