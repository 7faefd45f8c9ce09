//! Bounded waits: the one way a test waits for something to happen.
//!
//! A fixed sleep either wastes time or, on a loaded machine, is too short; a loop without a
//! deadline hangs the suite instead of failing it. These poll a condition until it holds or the
//! deadline passes, and then panic naming what was awaited, so a failure says what never
//! happened.

use std::time::{Duration, Instant};

/// How often a condition is polled: short enough not to slow a test, long enough not to spin.
const POLL: Duration = Duration::from_millis(10);

/// Polls `cond` until it returns true; panics naming `what` if `within` passes first.
#[track_caller]
pub fn wait_until(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(POLL);
    }
}

/// [`wait_until`] for async tests: polls without blocking the runtime's thread.
#[track_caller]
pub fn wait_until_async<'a>(
    within: Duration,
    what: &'a str,
    mut cond: impl FnMut() -> bool + 'a,
) -> impl std::future::Future<Output = ()> + 'a {
    let caller = std::panic::Location::caller();
    async move {
        let deadline = tokio::time::Instant::now() + within;
        while !cond() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {within:?} waiting for {what} (at {caller})"
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn returns_once_the_condition_holds() {
        let calls = AtomicU32::new(0);
        wait_until(Duration::from_secs(5), "the third poll", || {
            calls.fetch_add(1, Ordering::Relaxed) >= 2
        });
        assert_eq!(calls.load(Ordering::Relaxed), 3);
    }

    #[test]
    #[should_panic(expected = "waiting for something that never happens")]
    fn panics_naming_what_was_awaited() {
        wait_until(
            Duration::from_millis(30),
            "something that never happens",
            || false,
        );
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for the flag")]
    async fn async_variant_has_a_deadline_too() {
        wait_until_async(Duration::from_millis(30), "the flag", || false).await;
    }
}
