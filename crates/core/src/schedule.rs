//! The chunk scheduler: a state machine that decides which lane fetches which bytes.
//!
//! It performs no I/O and never reads the clock: time arrives as `now` arguments, inputs are
//! `handle_*` calls, outputs are return values and `poll_*` queues. A driver (see
//! [`crate::get`]) feeds it what lanes report; tests feed it simulated lanes and a virtual clock.
//!
//! # Policy
//! - Pending chunks are handed out in offset order, so the verified prefix (and with it the
//!   whole-file hash, which must run in order) advances steadily.
//! - A failed attempt puts its chunk back after an exponential backoff with ±50% jitter; a chunk
//!   that fails `max_attempts` times, or any non-retryable error, fails the transfer.
//! - **End game.** When nothing is pending and a lane is idle, it duplicates the in-flight chunk
//!   expected to finish last, if it can plausibly fetch the whole chunk sooner. Duplicates do
//!   not write to the file directly: they buffer the chunk and write it only if they win. The
//!   first attempt to verify wins and the others are cancelled, so one slow lane never stretches
//!   the end of a transfer.
//!
//! Why whole-chunk duplicates rather than splitting the remainder: a chunk is verified against
//! the server's digest *of the range requested*; a split would leave the first part covered by
//! no digest the server sent.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::digest::Sha256Digest;
use crate::plan::{ChunkIndex, ChunkPlan};

/// Identifies one attempt to fetch one chunk on one lane.
pub type AttemptId = u64;
/// Index of a lane, `0..lanes`.
pub type LaneIndex = usize;

/// Retry and end-game policy.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleConfig {
    /// Failed attempts (errors and digest mismatches) a chunk may have before the transfer
    /// fails. Default 8.
    pub max_attempts: u32,
    /// Backoff after a chunk's first failure; doubles per failure. Default 250 ms.
    pub backoff_initial: Duration,
    /// Cap on the backoff. Default 15 s.
    pub backoff_max: Duration,
    /// Duplicate the slowest in-flight chunk when a lane is idle at the end. Default on.
    pub endgame: bool,
    /// A duplicate is started only if the original is expected to need more than this factor
    /// times what the idle lane needs for the whole chunk. Default 1.5: duplicates cost
    /// bandwidth, so they must promise a clear gain.
    pub endgame_margin: f64,
    /// A duplicate is started only if the idle lane has shown a rate at least this many times
    /// the original's pace. Default 3: a lane at a third of its peers' pace is a straggler; one
    /// at half their pace is usually just sharing the bottleneck with them.
    pub endgame_slowness: f64,
    /// An in-flight chunk that has received nothing for this long may be duplicated by any idle
    /// lane, even one with no record yet. Default 5 s: well above a long path's round trip plus
    /// a TLS handshake, so connection set-up is not mistaken for a stall.
    pub endgame_stall: Duration,
    /// Seed for the backoff jitter.
    pub seed: u64,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            backoff_initial: Duration::from_millis(250),
            backoff_max: Duration::from_secs(15),
            endgame: true,
            endgame_margin: 1.5,
            endgame_slowness: 3.0,
            endgame_stall: Duration::from_secs(5),
            seed: 0x5eed,
        }
    }
}

/// Work for a lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub attempt: AttemptId,
    pub chunk: ChunkIndex,
    pub range: std::ops::Range<u64>,
    /// `false` for an end-game duplicate: buffer the bytes, write them only if this attempt wins.
    pub direct: bool,
}

/// How an attempt ended, as the driver saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// All bytes arrived; their SHA-256 is `digest` (`None` when running without digests).
    /// `server_digest` is what the peer sent for them, if anything.
    Received {
        digest: Option<Sha256Digest>,
        server_digest: Option<Sha256Digest>,
    },
    /// The transport failed. `retryable` per [`crate::TransferError::is_retryable`].
    Failed { retryable: bool, reason: String },
    /// The driver stopped it because the scheduler asked (see [`Scheduler::poll_cancel`]).
    Cancelled,
}

/// What the scheduler tells the driver and the progress display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleEvent {
    /// The chunk's bytes are final: seal it (write a winning duplicate's buffer, journal it).
    ChunkVerified {
        chunk: ChunkIndex,
        attempt: AttemptId,
        lane: LaneIndex,
        digest: Option<Sha256Digest>,
        /// Whether the server's own digest confirmed it.
        server_checked: bool,
        /// Whether the winning attempt wrote straight to the file; `false` for an end-game
        /// duplicate, whose buffered bytes must be written now.
        direct: bool,
        /// Attempts on the same chunk that lost and are being cancelled; their writes, if
        /// any, must be discarded before a duplicate's buffer is written.
        losers: Vec<AttemptId>,
    },
    /// The server's digest disagreed with the bytes received; the chunk will be fetched again.
    DigestMismatch {
        chunk: ChunkIndex,
        lane: LaneIndex,
        expected: Sha256Digest,
        actual: Sha256Digest,
    },
    /// A retryable failure; the chunk goes back to the queue after `backoff`.
    Retry {
        chunk: ChunkIndex,
        lane: LaneIndex,
        reason: String,
        backoff: Duration,
    },
    /// An end-game duplicate of `chunk` was started on `lane`.
    Duplicated { chunk: ChunkIndex, lane: LaneIndex },
    /// Every chunk is verified.
    Complete,
    /// The transfer cannot complete.
    Failed(ScheduleFailure),
}

/// Why the scheduler gave up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleFailure {
    #[error("chunk {chunk} failed {attempts} times; last: {last}")]
    TooManyAttempts {
        chunk: ChunkIndex,
        attempts: u32,
        last: String,
    },
    #[error("chunk {chunk}: {reason}")]
    Permanent { chunk: ChunkIndex, reason: String },
    #[error("no lane is left to fetch with")]
    NoLanes,
}

#[derive(Debug, Clone, PartialEq)]
enum ChunkState {
    Pending,
    /// Waiting for its backoff to expire.
    Backoff(Instant),
    InFlight,
    Done,
}

#[derive(Debug)]
struct Attempt {
    chunk: ChunkIndex,
    lane: LaneIndex,
    started: Instant,
    received: u64,
    /// The first progress report, to measure the pace once bytes flow (excluding connection
    /// set-up and the first round trip), and the latest one, to tell a stall.
    first_report: Option<(Instant, u64)>,
    last_report: Instant,
    direct: bool,
    cancelled: bool,
}

#[derive(Debug, Default, Clone)]
struct LaneRecord {
    /// Bytes this lane received in attempts that ended, and the time they took; the lane's
    /// demonstrated rate, for end-game decisions.
    bytes: u64,
    busy: Duration,
    dead: bool,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Scheduler {
    plan: ChunkPlan,
    config: ScheduleConfig,
    state: Vec<ChunkState>,
    failures: Vec<u32>,
    queue: VecDeque<ChunkIndex>,
    backoff: Vec<(Instant, ChunkIndex)>,
    attempts: HashMap<AttemptId, Attempt>,
    lanes: Vec<LaneRecord>,
    next_attempt: AttemptId,
    remaining: u32,
    events: VecDeque<ScheduleEvent>,
    cancels: VecDeque<AttemptId>,
    failed: Option<ScheduleFailure>,
    rng: SmallRng,
}

impl Scheduler {
    /// A scheduler for `plan` with `lanes` lanes, `done` listing chunks already verified (from a
    /// journal).
    pub fn new(
        plan: ChunkPlan,
        lanes: usize,
        done: impl IntoIterator<Item = ChunkIndex>,
        config: ScheduleConfig,
    ) -> Self {
        let n = plan.chunk_count();
        let mut state = vec![ChunkState::Pending; n as usize];
        for c in done {
            if let Some(s) = state.get_mut(c as usize) {
                *s = ChunkState::Done;
            }
        }
        let queue: VecDeque<ChunkIndex> = (0..n)
            .filter(|&c| state[c as usize] == ChunkState::Pending)
            .collect();
        let remaining = u32::try_from(queue.len()).unwrap_or(u32::MAX);
        let mut s = Self {
            plan,
            rng: SmallRng::seed_from_u64(config.seed),
            config,
            state,
            failures: vec![0; n as usize],
            queue,
            backoff: Vec::new(),
            attempts: HashMap::new(),
            lanes: vec![LaneRecord::default(); lanes],
            next_attempt: 1,
            remaining,
            events: VecDeque::new(),
            cancels: VecDeque::new(),
            failed: None,
        };
        if s.remaining == 0 {
            s.events.push_back(ScheduleEvent::Complete);
        }
        s
    }

    pub fn plan(&self) -> &ChunkPlan {
        &self.plan
    }

    /// Whether the transfer has ended, well or badly: lanes should stop.
    pub fn is_finished(&self) -> bool {
        self.remaining == 0 || self.failed.is_some()
    }

    pub fn failure(&self) -> Option<&ScheduleFailure> {
        self.failed.as_ref()
    }

    /// Chunks not yet verified.
    pub fn remaining_chunks(&self) -> u32 {
        self.remaining
    }

    /// Work for an idle `lane`, or `None` (wait for an event or [`Scheduler::poll_timeout`]).
    pub fn next_assignment(&mut self, lane: LaneIndex, now: Instant) -> Option<Assignment> {
        if self.is_finished() || self.lanes.get(lane).is_none_or(|l| l.dead) {
            return None;
        }
        self.release_backoffs(now);
        if let Some(chunk) = self.queue.pop_front() {
            self.state[chunk as usize] = ChunkState::InFlight;
            return Some(self.start(chunk, lane, now, true));
        }
        if self.config.endgame {
            if let Some(chunk) = self.pick_duplicate(lane, now) {
                self.events
                    .push_back(ScheduleEvent::Duplicated { chunk, lane });
                return Some(self.start(chunk, lane, now, false));
            }
        }
        None
    }

    /// Work for a busy `lane` to request ahead, while its current body still streams: the
    /// next pending chunk, never an end-game duplicate (a lane that is still receiving is not
    /// idle), or `None`.
    pub fn next_ahead(&mut self, lane: LaneIndex, now: Instant) -> Option<Assignment> {
        if self.is_finished() || self.lanes.get(lane).is_none_or(|l| l.dead) {
            return None;
        }
        self.release_backoffs(now);
        let chunk = self.queue.pop_front()?;
        self.state[chunk as usize] = ChunkState::InFlight;
        Some(self.start(chunk, lane, now, true))
    }

    /// `attempt` has received `received` bytes in total so far.
    pub fn handle_progress(&mut self, attempt: AttemptId, received: u64, now: Instant) {
        if let Some(a) = self.attempts.get_mut(&attempt) {
            if received > a.received {
                a.last_report = now;
                a.first_report.get_or_insert((now, received));
            }
            a.received = received;
        }
    }

    /// `attempt` ended. Returns `true` when its bytes became the chunk's (it verified first).
    pub fn handle_outcome(
        &mut self,
        attempt: AttemptId,
        outcome: AttemptOutcome,
        now: Instant,
    ) -> bool {
        let Some(a) = self.attempts.remove(&attempt) else {
            return false;
        };
        if let Some(l) = self.lanes.get_mut(a.lane) {
            l.bytes += a.received;
            l.busy += now.saturating_duration_since(a.started);
        }
        let chunk = a.chunk;
        if self.state[chunk as usize] == ChunkState::Done || self.failed.is_some() {
            return false;
        }
        match outcome {
            AttemptOutcome::Received {
                digest,
                server_digest,
            } => match (server_digest, digest) {
                (Some(expected), Some(digest)) if expected != digest => {
                    self.events.push_back(ScheduleEvent::DigestMismatch {
                        chunk,
                        lane: a.lane,
                        expected,
                        actual: digest,
                    });
                    let reason =
                        format!("server digest {expected} but received bytes hash to {digest}");
                    self.chunk_failed(chunk, a.lane, reason, now, false);
                }
                _ => {
                    self.state[chunk as usize] = ChunkState::Done;
                    self.remaining -= 1;
                    let losers: Vec<AttemptId> = self
                        .attempts
                        .iter_mut()
                        .filter(|(_, o)| o.chunk == chunk && !o.cancelled)
                        .map(|(&id, o)| {
                            o.cancelled = true;
                            id
                        })
                        .collect();
                    self.cancels.extend(losers.iter().copied());
                    self.events.push_back(ScheduleEvent::ChunkVerified {
                        chunk,
                        attempt,
                        lane: a.lane,
                        digest,
                        server_checked: server_digest.is_some() && digest.is_some(),
                        direct: a.direct,
                        losers,
                    });
                    if self.remaining == 0 {
                        self.events.push_back(ScheduleEvent::Complete);
                    }
                    return true;
                }
            },
            AttemptOutcome::Failed { retryable, reason } => {
                if retryable {
                    self.chunk_failed(chunk, a.lane, reason, now, true);
                } else {
                    self.fail(ScheduleFailure::Permanent { chunk, reason });
                }
            }
            AttemptOutcome::Cancelled => {
                // Cancelled for a reason other than a sibling winning (lane shut down): put the
                // chunk back unless another attempt still carries it.
                if !a.cancelled {
                    self.requeue_if_orphaned(chunk, now, None);
                }
            }
        }
        false
    }

    /// A lane joins the transfer; its index is the next after the last.
    pub fn handle_lane_added(&mut self) -> LaneIndex {
        self.lanes.push(LaneRecord::default());
        self.lanes.len() - 1
    }

    /// Bytes of chunks not yet verified.
    pub fn remaining_bytes(&self) -> u64 {
        (0..self.plan.chunk_count())
            .filter(|&c| self.state[c as usize] != ChunkState::Done)
            .map(|c| self.plan.len(c))
            .sum()
    }

    /// A lane can no longer be used (its connection cannot be re-established). Its work was
    /// already reported through [`Scheduler::handle_outcome`].
    pub fn handle_lane_dead(&mut self, lane: LaneIndex) {
        if let Some(l) = self.lanes.get_mut(lane) {
            l.dead = true;
        }
        if !self.is_finished() && self.lanes.iter().all(|l| l.dead) {
            self.fail(ScheduleFailure::NoLanes);
        }
    }

    /// A chunk the journal claimed turned out not to match its recorded digest on disk (a torn
    /// write before a crash): fetch it again.
    pub fn handle_chunk_invalidated(&mut self, chunk: ChunkIndex) {
        if self.state.get(chunk as usize) == Some(&ChunkState::Done) {
            self.state[chunk as usize] = ChunkState::Pending;
            self.remaining += 1;
            // Front of the queue: the in-order whole-file hash waits for it.
            self.queue.push_front(chunk);
        }
    }

    /// Attempts in flight on `lane`, for a driver whose lane task ended without reporting them.
    pub fn attempts_on_lane(&self, lane: LaneIndex) -> Vec<AttemptId> {
        let mut on_lane: Vec<AttemptId> = self
            .attempts
            .iter()
            .filter(|(_, a)| a.lane == lane)
            .map(|(&id, _)| id)
            .collect();
        on_lane.sort_unstable();
        on_lane
    }

    /// Earliest instant at which a chunk leaves backoff.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.backoff.iter().map(|&(t, _)| t).min()
    }

    pub fn poll_event(&mut self) -> Option<ScheduleEvent> {
        self.events.pop_front()
    }

    /// Attempts the driver must stop (their chunk was won by another attempt).
    pub fn poll_cancel(&mut self) -> Option<AttemptId> {
        self.cancels.pop_front()
    }

    fn start(
        &mut self,
        chunk: ChunkIndex,
        lane: LaneIndex,
        now: Instant,
        direct: bool,
    ) -> Assignment {
        let attempt = self.next_attempt;
        self.next_attempt += 1;
        self.attempts.insert(
            attempt,
            Attempt {
                chunk,
                lane,
                started: now,
                received: 0,
                first_report: None,
                last_report: now,
                direct,
                cancelled: false,
            },
        );
        Assignment {
            attempt,
            chunk,
            range: self.plan.range(chunk),
            direct,
        }
    }

    fn release_backoffs(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.backoff.len() {
            if self.backoff[i].0 <= now {
                let (_, chunk) = self.backoff.swap_remove(i);
                if self.state[chunk as usize] != ChunkState::Done {
                    self.state[chunk as usize] = ChunkState::Pending;
                    // Retried chunks go first: they hold back the in-order hash.
                    self.queue.push_front(chunk);
                }
            } else {
                i += 1;
            }
        }
    }

    fn chunk_failed(
        &mut self,
        chunk: ChunkIndex,
        lane: LaneIndex,
        reason: String,
        now: Instant,
        retry_event: bool,
    ) {
        self.failures[chunk as usize] += 1;
        let failures = self.failures[chunk as usize];
        if failures >= self.config.max_attempts {
            self.fail(ScheduleFailure::TooManyAttempts {
                chunk,
                attempts: failures,
                last: reason,
            });
            return;
        }
        let backoff = if retry_event {
            Some(self.backoff_for(failures))
        } else {
            None
        };
        if retry_event {
            self.events.push_back(ScheduleEvent::Retry {
                chunk,
                lane,
                reason,
                backoff: backoff.unwrap_or_default(),
            });
        }
        self.requeue_if_orphaned(chunk, now, backoff);
    }

    fn requeue_if_orphaned(&mut self, chunk: ChunkIndex, now: Instant, backoff: Option<Duration>) {
        let carried = self
            .attempts
            .values()
            .any(|a| a.chunk == chunk && !a.cancelled);
        if carried {
            return;
        }
        match backoff {
            Some(d) if !d.is_zero() => {
                self.state[chunk as usize] = ChunkState::Backoff(now + d);
                self.backoff.push((now + d, chunk));
            }
            _ => {
                self.state[chunk as usize] = ChunkState::Pending;
                self.queue.push_front(chunk);
            }
        }
    }

    fn backoff_for(&mut self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(20);
        let base = self
            .config
            .backoff_initial
            .saturating_mul(1u32 << exp)
            .min(self.config.backoff_max);
        base.mul_f64(self.rng.gen_range(0.5..1.5))
    }

    fn fail(&mut self, failure: ScheduleFailure) {
        if self.failed.is_none() {
            self.failed = Some(failure.clone());
            let live: Vec<AttemptId> = self.attempts.keys().copied().collect();
            for id in live {
                if let Some(a) = self.attempts.get_mut(&id) {
                    a.cancelled = true;
                }
                self.cancels.push_back(id);
            }
            self.events.push_back(ScheduleEvent::Failed(failure));
        }
    }

    /// The in-flight chunk expected to finish last, if `lane` can beat it by the margin.
    fn pick_duplicate(&self, lane: LaneIndex, now: Instant) -> Option<ChunkIndex> {
        let my_rate = self.lane_rate(lane);
        let mut best: Option<(f64, ChunkIndex)> = None;
        for a in self.attempts.values() {
            if a.cancelled || a.lane == lane {
                continue;
            }
            // One duplicate per chunk at most.
            if self
                .attempts
                .values()
                .filter(|o| o.chunk == a.chunk && !o.cancelled)
                .count()
                > 1
            {
                continue;
            }
            let len = self.plan.len(a.chunk);
            let left = len.saturating_sub(a.received) as f64;
            // Stalled: nothing new for a while (a connection stuck in loss recovery, a dead
            // peer that has not timed out yet). Only then may a lane with no record step in.
            let stalled = now.saturating_duration_since(a.last_report) >= self.config.endgame_stall;
            // The original's pace since its bytes began to flow, else its lane's record.
            let pace = match a.first_report {
                Some((t0, b0)) if a.received > b0 && now > t0 => {
                    Some((a.received - b0) as f64 / now.saturating_duration_since(t0).as_secs_f64())
                }
                _ => self.lane_rate(a.lane),
            };
            let eta = match pace {
                _ if stalled => f64::INFINITY,
                Some(p) if p > 0.0 => left / p,
                // Too early to judge.
                _ => continue,
            };
            // Lanes sharing one bottleneck slow each other down and speed up again as others
            // finish; duplicating then only splits the same link further. So the original
            // must also be several times slower than this lane has shown it can be.
            let worth = match (my_rate, pace) {
                _ if stalled => true,
                (Some(r), Some(p)) if r > 0.0 => {
                    eta > len as f64 / r * self.config.endgame_margin
                        && p * self.config.endgame_slowness < r
                }
                _ => false,
            };
            if worth && best.is_none_or(|(e, _)| eta > e) {
                best = Some((eta, a.chunk));
            }
        }
        best.map(|(_, c)| c)
    }

    fn lane_rate(&self, lane: LaneIndex) -> Option<f64> {
        let l = self.lanes.get(lane)?;
        let secs = l.busy.as_secs_f64();
        (secs > 0.0 && l.bytes > 0).then(|| l.bytes as f64 / secs)
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
