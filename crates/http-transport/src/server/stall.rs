//! Ending responses that stopped moving.
//!
//! hyper polls a response body only when the protocol can take more of it, so a body cannot
//! time itself out: when an HTTP/2 client keeps its stream window shut, the body is simply never
//! polled again while its blocks sit in h2's send buffer and in read-ahead. The watch therefore
//! lives outside the body. Each HTTP/2 stream's task (spawned through [`StallExecutor`]) and each
//! HTTP/1.1 connection runs with a [`StreamWatch`] in a task-local; a [`Sending`] guard, held by
//! every streamed body, counts the blocks it hands over. A watch whose body is sending and counted
//! nothing for `stall_timeout` ends its task: dropping an HTTP/2 stream's task makes h2 reset the
//! stream (`RST_STREAM` with `CANCEL`) and drop its send buffer; an HTTP/1.1 connection is closed.
//! Either way the blocks go back to the memory budget.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use xfer_common::BudgetAccount;

/// Checks per stall period: a stalled response ends between 1 and 1¼ periods after its last
/// block.
const SAMPLES: u32 = 4;

tokio::task_local! {
    static WATCH: Arc<StreamWatch>;
}

/// Progress of the responses of one HTTP/2 stream or one HTTP/1.1 connection.
#[derive(Debug, Default)]
pub(crate) struct StreamWatch {
    /// Streamed bodies alive.
    sending: AtomicUsize,
    /// Blocks handed to the protocol so far.
    blocks: AtomicU64,
}

impl StreamWatch {
    /// Poll `f` with this watch in scope, so bodies created inside report to it.
    pub(crate) fn scope<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        WATCH.sync_scope(Arc::clone(self), f)
    }
}

/// Held by a streamed body: marks its watch as sending until dropped.
#[derive(Debug)]
pub(crate) struct Sending(Arc<StreamWatch>);

impl Sending {
    /// A guard on the watch in scope; `None` outside of a watched task.
    pub(crate) fn start() -> Option<Self> {
        let watch = WATCH.try_with(Arc::clone).ok()?;
        watch.sending.fetch_add(1, Ordering::Relaxed);
        Some(Self(watch))
    }

    /// A block went out.
    pub(crate) fn progressed(&self) {
        self.0.blocks.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        self.0.sending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Decides, sample by sample, whether a watch stalled.
#[derive(Debug)]
pub(crate) struct StallClock {
    watch: Arc<StreamWatch>,
    last: u64,
    quiet: u32,
}

impl StallClock {
    pub(crate) fn new(watch: Arc<StreamWatch>) -> Self {
        Self {
            watch,
            last: 0,
            quiet: 0,
        }
    }

    /// Interval between samples for `stall`.
    pub(crate) fn period(stall: Duration) -> Duration {
        stall / SAMPLES
    }

    /// Take one sample; true once a sending body moved nothing for [`SAMPLES`] samples.
    pub(crate) fn sample(&mut self) -> bool {
        let now = self.watch.blocks.load(Ordering::Relaxed);
        if now != self.last || self.watch.sending.load(Ordering::Relaxed) == 0 {
            self.last = now;
            self.quiet = 0;
            return false;
        }
        self.quiet += 1;
        self.quiet >= SAMPLES
    }
}

/// Runs hyper's HTTP/2 stream tasks on tokio, each under its own [`StreamWatch`] and its
/// connection's share of the memory budget.
#[derive(Debug, Clone)]
pub(crate) struct StallExecutor {
    pub stall: Duration,
    pub peer: SocketAddr,
    pub account: BudgetAccount,
}

impl<F> hyper::rt::Executor<F> for StallExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        let watch = Arc::new(StreamWatch::default());
        let period = StallClock::period(self.stall);
        tokio::spawn(self.account.clone().scope(Watched {
            inner: Box::pin(fut),
            clock: StallClock::new(Arc::clone(&watch)),
            watch,
            period,
            timer: Box::pin(tokio::time::sleep(period)),
            stall: self.stall,
            peer: self.peer,
        }));
    }
}

/// A stream task that ends early (dropping the stream) when its response stalls.
struct Watched<F> {
    inner: Pin<Box<F>>,
    watch: Arc<StreamWatch>,
    clock: StallClock,
    period: Duration,
    timer: Pin<Box<Sleep>>,
    stall: Duration,
    peer: SocketAddr,
}

impl<F: Future<Output = ()>> Future for Watched<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let inner = &mut this.inner;
        if this.watch.scope(|| inner.as_mut().poll(cx)).is_ready() {
            return Poll::Ready(());
        }
        while this.timer.as_mut().poll(cx).is_ready() {
            if this.clock.sample() {
                tracing::info!(peer = %this.peer, after = ?this.stall, "HTTP/2 response sent nothing for the stall timeout; resetting its stream");
                xfer_common::metrics::global().count_stall_reset("h2");
                return Poll::Ready(());
            }
            let next = Instant::now() + this.period;
            this.timer.as_mut().reset(next);
        }
        Poll::Pending
    }
}
