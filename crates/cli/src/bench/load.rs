//! The load itself: lanes that each run one range request after another, against servers
//! picked round-robin, until a shared deadline.
//!
//! Every byte is counted as it arrives, so at the deadline a transfer can be cut off with its
//! bytes already accounted for. Bytes are hashed (when verifying) and dropped: nothing touches
//! a disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use xfer::crates::core::digest::LaneSha256;
use xfer::crates::core::transport::{Lane, RangeRequest, RemoteInfo};
use xfer::{TransferError, Transport};

use super::sizes::SizeDist;

/// One server under load: its transport and what `stat` said about the synthetic resource.
pub struct Target {
    pub url: String,
    pub transport: Arc<dyn Transport>,
    pub info: RemoteInfo,
    /// Requests sent to this server (round-robin bookkeeping, for the report).
    pub requests: AtomicU64,
}

/// Shared by all lanes of a run.
pub struct Plan {
    pub targets: Vec<Target>,
    pub deadline: Instant,
    pub verify: bool,
    pub mean_size: u64,
    pub size_sd: f64,
    pub seed: u64,
    /// Next operation number; operation `n` goes to server `n % targets.len()`.
    pub next_op: AtomicU64,
    /// Bytes received so far by every lane, for the live display.
    pub live_bytes: AtomicU64,
    pub live_ops: AtomicU64,
    pub live_errors: AtomicU64,
}

/// One failed operation, for the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpError {
    pub lane: usize,
    pub server: String,
    pub size: u64,
    pub message: String,
}

/// What one lane did.
#[derive(Debug, Default)]
pub struct LaneTally {
    /// Bytes received before the deadline, whatever became of their operation.
    pub bytes: u64,
    /// Operations that ended, complete and (when verifying) checked, before the deadline.
    pub completed: u64,
    /// Sum of the sizes of those operations.
    pub completed_bytes: u64,
    /// Operations still running at the deadline, and the bytes they had received.
    pub cut: u64,
    pub cut_bytes: u64,
    /// Operations that failed, and the bytes they had received before failing.
    pub errors: Vec<OpError>,
    pub errored_bytes: u64,
    /// Request sent → first body byte, per operation that got one before the deadline.
    pub ttfb: Vec<Duration>,
}

/// Bytes and first-byte time of the operation in progress; survives the operation's future
/// being dropped at the deadline.
#[derive(Default)]
struct InFlight {
    received: u64,
    first_byte: Option<Duration>,
}

/// After a failed connect, wait this long before the lane tries again, so a dead server is not
/// hammered in a tight loop.
const REOPEN_PAUSE: Duration = Duration::from_millis(100);

/// Run lane `index` until the deadline.
pub async fn run_lane(plan: Arc<Plan>, index: usize) -> LaneTally {
    let mut tally = LaneTally::default();
    let mut sizes = SizeDist::new(
        plan.mean_size,
        plan.size_sd,
        max_op_size(&plan),
        plan.seed,
        index as u64,
    );
    // One lane per server, opened when first needed and dropped after a failure (its
    // connection may be broken).
    let mut lanes: Vec<Option<Box<dyn Lane>>> = plan.targets.iter().map(|_| None).collect();
    while Instant::now() < plan.deadline {
        let n = plan.next_op.fetch_add(1, Ordering::Relaxed);
        let server = usize::try_from(n % plan.targets.len() as u64).unwrap_or(0);
        let target = &plan.targets[server];
        target.requests.fetch_add(1, Ordering::Relaxed);
        let size = sizes.next_size();
        let mut flight = InFlight::default();
        let outcome = tokio::select! {
            r = one_op(&plan, target, &mut lanes[server], index, size, &mut flight) => Some(r),
            _ = tokio::time::sleep_until(plan.deadline) => None,
        };
        tally.bytes += flight.received;
        if let Some(t) = flight.first_byte {
            tally.ttfb.push(t);
        }
        match outcome {
            None => {
                // Every operation starts before the deadline, so one cancelled by it was running.
                tally.cut += 1;
                tally.cut_bytes += flight.received;
                break;
            }
            Some(Ok(())) => {
                tally.completed += 1;
                tally.completed_bytes += size;
                plan.live_ops.fetch_add(1, Ordering::Relaxed);
            }
            Some(Err(failure)) => {
                tally.errored_bytes += flight.received;
                plan.live_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(lane = index, server = %target.url, size, error = %failure.error, "operation failed");
                tally.errors.push(OpError {
                    lane: index,
                    server: target.url.clone(),
                    size,
                    message: xfer::error_chain(&failure.error),
                });
                lanes[server] = None;
                if failure.connecting {
                    tokio::select! {
                        _ = tokio::time::sleep(REOPEN_PAUSE) => {}
                        _ = tokio::time::sleep_until(plan.deadline) => {}
                    }
                }
            }
        }
    }
    tally
}

/// The largest size an operation may have: the synthetic resource's size on the smallest
/// server (they are all built the same, so this is the resource size).
fn max_op_size(plan: &Plan) -> u64 {
    plan.targets.iter().map(|t| t.info.size).min().unwrap_or(1)
}

struct Failure {
    error: TransferError,
    /// The lane could not be opened (rather than a request failing on an open lane).
    connecting: bool,
}

/// One operation: bytes `0..size` of the synthetic resource as one range request.
async fn one_op(
    plan: &Plan,
    target: &Target,
    slot: &mut Option<Box<dyn Lane>>,
    index: usize,
    size: u64,
    flight: &mut InFlight,
) -> Result<(), Failure> {
    let lane = match slot {
        Some(l) => l,
        None => {
            let opened = target
                .transport
                .open_lane(index)
                .await
                .map_err(|error| Failure {
                    error,
                    connecting: true,
                })?;
            slot.insert(opened)
        }
    };
    let fail = |error| Failure {
        error,
        connecting: false,
    };
    let req = RangeRequest {
        range: 0..size,
        expected_size: target.info.size,
        want_digest: plan.verify,
        validator: target.info.range_validator().map(str::to_string),
        whole: false,
    };
    let sent = Instant::now();
    let mut body = lane.fetch(&req).await.map_err(fail)?;
    let mut hasher = plan.verify.then(LaneSha256::new);
    while let Some(data) = body.next_data().await.map_err(fail)? {
        // A piece that lands after the deadline does not count, even if the timer that cancels
        // this future has not fired yet.
        if Instant::now() >= plan.deadline {
            std::future::pending::<()>().await;
        }
        if flight.first_byte.is_none() && !data.is_empty() {
            flight.first_byte = Some(sent.elapsed());
        }
        let n = data.len() as u64;
        if flight.received + n > size {
            return Err(fail(TransferError::Protocol {
                peer: target.url.clone(),
                message: format!(
                    "asked for {size} bytes, got at least {}",
                    flight.received + n
                ),
            }));
        }
        flight.received += n;
        plan.live_bytes.fetch_add(n, Ordering::Relaxed);
        if let Some(h) = hasher.as_mut() {
            h.update(data);
        }
    }
    if flight.received != size {
        return Err(fail(TransferError::Truncated {
            peer: target.url.clone(),
            expected: size,
            got: flight.received,
        }));
    }
    if let Some(h) = hasher {
        let ours = h.finish();
        match body.trailer_digest() {
            Some(theirs) if theirs == ours => {}
            Some(theirs) => {
                return Err(fail(TransferError::Protocol {
                    peer: target.url.clone(),
                    message: format!(
                        "sha-256 mismatch for bytes 0-{}: computed {ours}, server sent {theirs}",
                        size - 1
                    ),
                }))
            }
            None => {
                return Err(fail(TransferError::Protocol {
                    peer: target.url.clone(),
                    message: "server sent no content-digest for a verified request".into(),
                }))
            }
        }
    }
    Ok(())
}
