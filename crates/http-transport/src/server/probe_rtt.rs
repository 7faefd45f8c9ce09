//! Keeping Linux's BBR out of ProbeRTT while the client's window bounds the flight.
//!
//! BBR (v1, `tcp_bbr`) keeps its minimum RTT for 10 s; when no sample has been lower for that
//! long it enters ProbeRTT: the window drops to 4 packets for 200 ms and a round trip, to let
//! the bottleneck queue drain and measure the path again. An xfer client caps its connections'
//! receive windows together (`client/window.rs`), which keeps a standing queue of a quarter of
//! the path's bandwidth-delay product, so no sample is lower than the minimum taken in startup
//! and every connection of a transfer enters ProbeRTT at the same moment, 10 s after they
//! started together. The link went nearly idle each time: 0.22-0.3 s lost at 50 ms and
//! 0.35-0.45 s at 200 ms, 1-2 % of a 2 GiB download (`docs/results.md`). Draining the queue
//! from the client did not help: samples of a drained but fully loaded path were still a
//! millisecond above the startup minimum, which BBR only replaces with a strictly lower one.
//!
//! Changing a socket's congestion control to another and back restarts BBR: startup again,
//! its minimum RTT the kernel's 5-minute minimum, its 10 s counted from now. Startup's
//! gain of 2.89 cannot overshoot while the peer's receive window, not the congestion window,
//! bounds the flight: the extra can only queue what that window allows. So a connection whose
//! BBR is 8 s old and whose advertised window has been steady and below its congestion window
//! for the last samples, and is not repairing a loss, is restarted; otherwise BBR goes its own
//! way. Measured on held links side by side with the same client, `docs/results.md`, "BBR's
//! ProbeRTT skipped": 942-952 against 924-946 Mbit/s at 50 ms, 906-910 against 867-908 at 200
//! ms, with the same retransmissions.

use std::time::{Duration, Instant};

/// BBR's minimum RTT is restarted when this old: two seconds before its 10 s run out, room for
/// a few samples to find the window binding.
pub(crate) const RESTART_AFTER: Duration = Duration::from_secs(8);
/// Consecutive samples the peer's window must bound the flight, steady, before a restart.
pub(crate) const BOUND_SAMPLES: u32 = 3;

/// One reading of what limits the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendLimits {
    /// The peer's advertised receive window, bytes.
    pub peer_window: u64,
    /// The congestion window, bytes.
    pub cwnd: u64,
    /// Not repairing a loss (`TCP_CA_Open`): a restart in the middle of a recovery would
    /// hand BBR a state it did not see begin.
    pub open: bool,
}

/// When to restart one connection's BBR; pure, with time passed in.
#[derive(Debug)]
pub(crate) struct RestartPolicy {
    /// When BBR last started counting its 10 s (the connection's start, or the last restart).
    since: Instant,
    /// [`RESTART_AFTER`]; shorter in tests.
    after: Duration,
    /// The window of the previous sample, and how many samples in a row it bounded the flight
    /// without growing by more than an eighth.
    last_window: Option<u64>,
    bound: u32,
}

impl RestartPolicy {
    pub fn new(now: Instant) -> Self {
        Self {
            since: now,
            after: RESTART_AFTER,
            last_window: None,
            bound: 0,
        }
    }

    /// Feed one sample; true when BBR should be restarted now (the caller then does, and this
    /// counts from `now` again).
    pub fn observe(&mut self, now: Instant, s: SendLimits) -> bool {
        // A window still growing (a receiver's autotuning) would let startup's extra through.
        let steady = self.last_window.is_some_and(|w| s.peer_window <= w + w / 8);
        self.last_window = Some(s.peer_window);
        if steady && s.peer_window < s.cwnd {
            self.bound += 1;
        } else {
            self.bound = 0;
        }
        if now.saturating_duration_since(self.since) < self.after
            || self.bound < BOUND_SAMPLES
            || !s.open
        {
            return false;
        }
        self.since = now;
        self.bound = 0;
        true
    }
}

/// Restarts one accepted connection's BBR when [`RestartPolicy`] says so; fed by the
/// connection's I/O wrapper, which reads the socket every
/// [`super::tcp_resume::SAMPLE_INTERVAL`] (100 ms) as it writes.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub(crate) struct ProbeRttSkip {
    policy: RestartPolicy,
    /// Off for good: not BBR, no window in `TCP_INFO`, or a restart failed.
    done: bool,
    restarts: u32,
}

#[cfg(target_os = "linux")]
impl ProbeRttSkip {
    pub fn new() -> Self {
        Self {
            policy: RestartPolicy::new(Instant::now()),
            done: false,
            restarts: 0,
        }
    }

    /// BBR restarts so far.
    #[cfg(test)]
    pub(crate) fn restarts(&self) -> u32 {
        self.restarts
    }
}

#[cfg(target_os = "linux")]
impl super::io::SendPolicy for ProbeRttSkip {
    fn sample(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        now: Instant,
        _path: crate::tcp::PathSample,
        limits: Option<SendLimits>,
    ) {
        if self.done {
            return;
        }
        let Some(limits) = limits else {
            self.done = true;
            return;
        };
        if !self.policy.observe(now, limits) {
            return;
        }
        let sock = socket2::SockRef::from(&fd);
        let name = sock.tcp_congestion().unwrap_or_default();
        if name.split(|b| *b == 0).next() != Some(b"bbr".as_slice()) {
            self.done = true;
            return;
        }
        match sock
            .set_tcp_congestion(b"reno")
            .and_then(|()| sock.set_tcp_congestion(b"bbr"))
        {
            Ok(()) => {
                self.restarts += 1;
                tracing::debug!(
                    peer_window = limits.peer_window,
                    cwnd = limits.cwnd,
                    "BBR restarted ahead of ProbeRTT"
                );
            }
            Err(e) => {
                self.done = true;
                // Never leave the socket on reno.
                let back = sock.set_tcp_congestion(b"bbr");
                tracing::warn!(error = %e, restored = back.is_ok(), "restarting BBR failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(100);

    /// `n` samples of `s`, 100 ms apart; the indices of those that restarted.
    fn feed(p: &mut RestartPolicy, t: &mut Instant, n: u32, s: SendLimits) -> Vec<u32> {
        let mut restarts = Vec::new();
        for i in 0..n {
            *t += MS;
            if p.observe(*t, s) {
                restarts.push(i);
            }
        }
        restarts
    }

    #[test]
    fn restarts_every_eight_seconds_while_the_peer_window_bounds_the_flight() {
        let start = Instant::now();
        let mut t = start;
        let mut p = RestartPolicy::new(start);
        let bound = SendLimits {
            peer_window: 4 << 20,
            cwnd: 6 << 20,
            open: true,
        };
        let restarts = feed(&mut p, &mut t, 250, bound);
        // At 8 s, 16 s and 24 s, not before.
        assert_eq!(restarts, vec![79, 159, 239]);
        // Not while a loss is being repaired: the first sample after it.
        let mut p = RestartPolicy::new(t);
        let recovering = SendLimits {
            open: false,
            ..bound
        };
        assert!(feed(&mut p, &mut t, 90, recovering).is_empty());
        assert_eq!(feed(&mut p, &mut t, 2, bound), vec![0]);
    }

    #[test]
    fn a_congestion_window_that_binds_or_a_growing_peer_window_is_left_alone() {
        let start = Instant::now();
        let mut t = start;
        let mut p = RestartPolicy::new(start);
        // BBR's own window is the bound (a client that does not cap): never.
        let free = SendLimits {
            peer_window: 64 << 20,
            cwnd: 6 << 20,
            open: true,
        };
        assert!(feed(&mut p, &mut t, 150, free).is_empty());
        // A window that doubles every sample (autotuning still growing): never.
        let mut w = 1 << 20;
        for _ in 0..20 {
            t += MS;
            w *= 2;
            let grown = SendLimits {
                peer_window: w,
                cwnd: u64::MAX,
                open: true,
            };
            assert!(!p.observe(t, grown));
        }
        // Once it binds without growing for three samples: at once, since BBR is old enough.
        let steady = SendLimits {
            peer_window: 4 << 20,
            cwnd: 6 << 20,
            open: true,
        };
        assert_eq!(feed(&mut p, &mut t, 10, steady), vec![2]);
    }

    /// The skip behind a lock, so the test reads it while the sampler feeds it.
    #[cfg(target_os = "linux")]
    #[derive(Debug)]
    struct Watched(std::sync::Arc<std::sync::Mutex<ProbeRttSkip>>);

    #[cfg(target_os = "linux")]
    impl crate::server::io::SendPolicy for Watched {
        fn sample(
            &mut self,
            fd: std::os::fd::BorrowedFd<'_>,
            now: Instant,
            path: crate::tcp::PathSample,
            limits: Option<SendLimits>,
        ) {
            let mut skip = self.0.lock().expect("not poisoned");
            skip.sample(fd, now, path, limits);
        }
    }

    /// A real socket on BBR whose peer clamps its window: restarted, and still on BBR after.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_sender_bound_by_its_peers_window_is_restarted_and_stays_on_bbr() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let reader = std::thread::spawn(move || {
            let (conn, _) = listener.accept().expect("accept");
            // Small, and set before the sender's data arrives.
            crate::tcp::set_window_clamp(&conn, 64 << 10).expect("TCP_WINDOW_CLAMP");
            let mut conn = conn;
            let mut buf = vec![0u8; 64 << 10];
            while matches!(conn.read(&mut buf), Ok(n) if n > 0) {
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let mut sender = std::net::TcpStream::connect(addr).expect("connect");
        if let Err(e) = socket2::SockRef::from(&sender).set_tcp_congestion(b"bbr") {
            assert!(
                std::env::var_os("CI").is_none(),
                "bbr is not available under CI: {e}"
            );
            eprintln!("skipped: this kernel has no bbr ({e})");
            return;
        }
        let mut skip = ProbeRttSkip::new();
        skip.policy.after = Duration::from_millis(300);
        let skip = std::sync::Arc::new(std::sync::Mutex::new(skip));
        let mut sampler = crate::server::io::SendSampler::new(
            sender.as_raw_fd(),
            vec![Box::new(Watched(skip.clone()))],
        )
        .expect("something to sample for");
        let block = vec![7u8; 16 << 10];
        let end = Instant::now() + Duration::from_secs(3);
        let restarts = || skip.lock().expect("not poisoned").restarts();
        while restarts() < 2 && Instant::now() < end {
            sender.write_all(&block).expect("write");
            sampler.wrote();
        }
        let cc = socket2::SockRef::from(&sender)
            .tcp_congestion()
            .expect("TCP_CONGESTION");
        drop(sender);
        reader.join().expect("reader");
        assert_eq!(restarts(), 2, "not restarted within 3 s");
        assert!(!skip.lock().expect("not poisoned").done);
        assert_eq!(cc.split(|b| *b == 0).next(), Some(b"bbr".as_slice()));
    }
}
