//! TCP resume's kernel half, on real sockets: the `sock_ops` program gives the first
//! connection from a peer with a saved path that path's budget as its initial congestion
//! window, and leaves every other connection at the kernel's 10 segments. It needs root (BPF
//! and a cgroup link); without it the test prints why and passes, except under `CI=true`,
//! where it fails.
#![cfg(target_os = "linux")]

use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use xfer_http::server::tcp_resume::{PathMeasurement, TcpResume, TcpResumeConfig};

/// `snd_cwnd` (segments) and the handshake's smoothed RTT (microseconds) of a socket.
fn cwnd_and_rtt(s: &TcpStream) -> (u32, u32) {
    let info = xfer_http::tcp::tcp_info(s).expect("TCP_INFO of a connected socket");
    let mss = socket2::SockRef::from(s).mss().expect("TCP_MAXSEG");
    let cwnd = info.cwnd_bytes / u64::from(mss.max(1));
    (
        u32::try_from(cwnd).expect("cwnd in segments fits u32"),
        u32::try_from(info.rtt_us).expect("RTT fits u32"),
    )
}

/// Connect to `listener` and return the server's side of the new connection.
fn accept_one(listener: &TcpListener) -> TcpStream {
    let client = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    drop(client);
    server
}

fn start(port: u16, cfg: &TcpResumeConfig) -> Option<std::sync::Arc<TcpResume>> {
    match TcpResume::start(port, cfg, Default::default()) {
        Ok(r) => Some(r),
        Err(e) => {
            xfer_test_support::gate::absent(
                "tcp_resume",
                format!("TCP resume cannot load here: {e}"),
            );
            None
        }
    }
}

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[test]
fn a_saved_path_raises_the_initial_window_of_the_next_connections() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let other = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let Some(resume) = start(port, &TcpResumeConfig::default()) else {
        return;
    };

    // Nothing saved: the kernel's window. Learn loopback's handshake RTT meanwhile.
    let mut rtt_us = u32::MAX;
    for _ in 0..5 {
        let s = accept_one(&listener);
        let (cwnd, rtt) = cwnd_and_rtt(&s);
        assert_eq!(
            cwnd, 10,
            "no saved path, yet the window is not the kernel's"
        );
        rtt_us = rtt_us.min(rtt.max(1));
    }
    assert!(resume.saved(LOCALHOST).expect("map").is_none());

    // A path whose half-BDP is 400 segments of 1,000 bytes.
    let rtt = Duration::from_micros(u64::from(rtt_us));
    let rate = 800_000u64 * 1_000_000 / u64::from(rtt_us);
    let granted = resume
        .save(
            LOCALHOST,
            PathMeasurement {
                rate,
                rtt,
                mss: 1000,
            },
        )
        .expect("save");
    assert!((399..=400).contains(&granted), "granted {granted}");
    let saved = resume.saved(LOCALHOST).expect("map").expect("entry");
    assert_eq!(saved.budget_segments, granted);

    // Another port of the same host is not this server's: untouched, budget kept.
    let s = accept_one(&other);
    assert_eq!(cwnd_and_rtt(&s).0, 10, "the program acted on another port");
    assert_eq!(
        resume
            .saved(LOCALHOST)
            .expect("map")
            .expect("entry")
            .budget_segments,
        granted
    );

    // Each connection takes half of what is left, at least 45 segments while they last, so
    // lanes opening together share the budget; then connections start as usual. A connection
    // whose handshake RTT (loopback's varies with load) left [saved / 2, saved x 10] is
    // refused the jump and leaves the budget as it was.
    let budget = || {
        resume
            .saved(LOCALHOST)
            .expect("map")
            .expect("entry")
            .budget_segments
    };
    let mut left = granted;
    for attempt in 0.. {
        assert!(attempt < 100, "the budget was never spent: {left} left");
        let want = (left / 2).max(45.min(left));
        let s = accept_one(&listener);
        let (cwnd, rtt) = cwnd_and_rtt(&s);
        if rtt < rtt_us / 2 || rtt > rtt_us * 10 {
            assert_eq!(cwnd, 10, "a jump with a handshake RTT of {rtt} µs");
            assert_eq!(budget(), left);
            continue;
        }
        if want < 11 {
            assert_eq!(cwnd, 10, "a jump from a spent budget ({left} left)");
            break;
        }
        assert_eq!(cwnd, want, "{left} segments were left");
        left -= want;
        assert_eq!(budget(), left);
    }
}

#[test]
fn no_jump_when_the_rtt_differs_or_the_entry_expired() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let cfg = TcpResumeConfig {
        lifetime: Duration::from_secs(1),
        ..TcpResumeConfig::default()
    };
    let Some(resume) = start(port, &cfg) else {
        return;
    };
    // Saved at 2 s: loopback's handshake is far below half of it.
    let far = PathMeasurement {
        rate: 1_000_000,
        rtt: Duration::from_secs(2),
        mss: 1000,
    };
    assert!(resume.save(LOCALHOST, far).expect("save") > 10);
    let s = accept_one(&listener);
    assert_eq!(cwnd_and_rtt(&s).0, 10, "jumped although the RTT differs");

    // An entry that matches but has expired.
    let (_, rtt) = cwnd_and_rtt(&accept_one(&listener));
    let near = PathMeasurement {
        rate: 800_000u64 * 1_000_000 / u64::from(rtt.max(1)),
        rtt: Duration::from_micros(u64::from(rtt.max(1))),
        mss: 1000,
    };
    assert!(resume.save(LOCALHOST, near).expect("save") > 10);
    std::thread::sleep(Duration::from_millis(1100));
    let s = accept_one(&listener);
    assert_eq!(cwnd_and_rtt(&s).0, 10, "jumped on an expired entry");
}
