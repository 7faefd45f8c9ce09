//! Careful Resume end to end: real UDP on loopback, real TLS, real files. The server's
//! second connection from the same client starts from the path its first one measured;
//! observed through the server's path cache counters, never through timing.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use xfer_common::path_share::{MeasuredPath, PathShare};
use xfer_common::tls::{self, ClientTlsOptions};
use xfer_core::layout::LaneLayout;
use xfer_core::transport::{RangeRequest, Transport};
use xfer_core::Sha256Digest;
use xfer_quic::{
    CarefulResume, PathCache, QuicClientConfig, QuicServer, QuicServerConfig, QuicTransport,
    QuicTuning,
};

/// Bounds every test so a hang fails instead of blocking the suite; not a speed assertion.
const TEST_LIMIT: Duration = Duration::from_secs(120);
const FILE_BYTES: usize = 24 << 20;
/// quinn's initial window (10 datagrams of 1200 bytes and some framing slack is below this).
const INITIAL_WINDOW: u64 = 14_720;

struct Server {
    addr: SocketAddr,
    ca: std::path::PathBuf,
    cache: Option<PathCache>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Careful Resume decides on a sender its window holds back. Loopback's 65,507-byte datagrams
/// give xfer's BBR a floor of 1.3 MB, which a loopback transfer never fills; at 6550 bytes, as
/// on a path smaller than loopback, the first window does.
fn tuning() -> QuicTuning {
    QuicTuning {
        udp_send_buffer: Some(4 << 20),
        udp_recv_buffer: Some(4 << 20),
        mtu_discovery_upper_bound: 6550,
        ..QuicTuning::default()
    }
}

async fn start(dir: &Path, resume: CarefulResume) -> Server {
    start_sharing(dir, resume, PathShare::default()).await
}

/// A server that also saves the paths published to `share` (by the HTTP server's TCP resume
/// in `xfer serve`).
async fn start_sharing(dir: &Path, resume: CarefulResume, share: PathShare) -> Server {
    let root = dir.join("root");
    std::fs::create_dir_all(&root).expect("mkdir root");
    let data = xfer_test_support::random_bytes(FILE_BYTES, 7);
    std::fs::write(root.join("data.bin"), &data).expect("write file");
    let certs = tls::self_signed(&["127.0.0.1".to_string()], &dir.join("certs"))
        .expect("self-signed certificate");
    let server_tls = tls::server_config(&certs.cert_path, &certs.key_path, &[]).expect("tls");
    let mut config = QuicServerConfig::new(
        root,
        "127.0.0.1:0".parse().expect("literal"),
        Arc::new(server_tls),
    );
    config.tuning = tuning();
    config.careful_resume = resume;
    config.path_share = share;
    // A client that vanished mid-download leaves a request in flight: the tests end without
    // waiting out the default 30 s grace for it.
    config.shutdown_grace = Duration::from_secs(1);
    let server = QuicServer::bind(config).await.expect("bind");
    let addr = server.local_addr();
    let cache = server.path_cache();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));
    Server {
        addr,
        ca: certs.cert_path,
        cache,
        stop,
        task,
    }
}

impl Server {
    /// Downloads the file over one fresh connection and checks every byte.
    async fn download(&self) {
        download(&client(self.addr, &self.ca)).await;
    }

    async fn shutdown(self) {
        let _ = self.stop.send(());
        self.task.await.expect("server task");
    }
}

/// A client of the server at `addr` that opens one connection.
fn client(addr: SocketAddr, ca: &Path) -> QuicTransport {
    let config = QuicClientConfig {
        tuning: tuning(),
        tls: ClientTlsOptions {
            client_identity: None,
            ca_certs: vec![ca.to_path_buf()],
            dangerous_insecure: false,
        },
        lanes: LaneLayout {
            connections: Some(1),
            streams_per_connection: Some(1),
        },
        ..QuicClientConfig::default()
    };
    let url = format!("quic://127.0.0.1:{}/data.bin", addr.port());
    QuicTransport::new(&url, config).expect("client")
}

/// Downloads the file and checks every byte.
async fn download(t: &QuicTransport) {
    {
        let info = t.stat().await.expect("stat");
        let req = RangeRequest {
            range: 0..info.size,
            expected_size: info.size,
            want_digest: true,
            validator: info.range_validator().map(str::to_string),
            whole: false,
        };
        let mut lane = t.open_lane(0).await.expect("lane");
        let mut body = lane.fetch(&req).await.expect("fetch");
        let mut got = Vec::with_capacity(FILE_BYTES);
        while let Some(chunk) = body.next_data().await.expect("body") {
            got.extend_from_slice(&chunk);
        }
        assert_eq!(got.len(), FILE_BYTES);
        assert_eq!(body.trailer_digest(), Some(Sha256Digest::of(&got)));
    }
}

async fn limited<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, f)
        .await
        .expect("test exceeded its time limit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_connection_jumps_from_the_saved_path() {
    limited(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("paths");
        let server = start(
            dir.path(),
            CarefulResume {
                file: Some(file.clone()),
                ..CarefulResume::default()
            },
        )
        .await;
        let cache = server
            .cache
            .clone()
            .expect("careful resume is on by default");
        server.download().await;
        // A short loopback download may end before its rate has been measured often enough to
        // save as it rises; then the server saves as the connection closes, which it learns a
        // moment after the client is done.
        xfer_test_support::wait_until_async(
            std::time::Duration::from_secs(10),
            "the first connection to save its path",
            || cache.stats().saves != 0,
        )
        .await;
        let after_first = cache.stats();
        assert_eq!(
            after_first.jumps, 0,
            "nothing saved before the first connection"
        );
        assert!(
            after_first.saves >= 1,
            "the first connection saved its path"
        );
        let key = xfer_quic::resume::PathKey::of("127.0.0.1:0".parse().expect("the client"));
        let measured = cache
            .get(key, std::time::SystemTime::now())
            .expect("the client's path is saved");
        assert!(measured.cwnd > 2 * INITIAL_WINDOW, "{measured:?}");
        // Loopback's BDP is tens of KiB: on a loaded machine slow start can overtake half of
        // it before the second connection's first window-limited ack, and then no jump is
        // worth making. Careful Resume is for long paths, so the saved window is raised to
        // one of those; the RTT, which reconnaissance checks, stays as measured.
        let saved = xfer_quic::resume::SavedPath {
            cwnd: measured.cwnd.max(8 << 20),
            ..measured
        };
        // The first connection's server side may still save once more as it closes: keep the
        // raised window until its saves have stopped.
        let mut quiet = 0;
        for _ in 0..100 {
            cache.insert(key, saved);
            let saves = cache.stats().saves;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            quiet = if cache.stats().saves == saves {
                quiet + 1
            } else {
                0
            };
            if quiet >= 5 {
                break;
            }
        }
        cache.insert(key, saved);

        server.download().await;
        let after_second = cache.stats();
        assert!(after_second.jumps >= 1, "{after_second:?}");
        assert!(
            after_second.largest_jump > INITIAL_WINDOW,
            "{after_second:?}"
        );
        assert!(
            after_second.largest_jump <= saved.cwnd / 2 + 1,
            "at most half the saved BDP"
        );
        server.shutdown().await;

        // Written at shutdown; a new server starts from it. Whether its first connection then
        // jumps depends on loopback's round trip and how far slow start has already grown the
        // window (a loopback BDP is tens of KiB), so what is checked here is that the restarted
        // server holds the saved path; the jump itself is checked above.
        let text = std::fs::read_to_string(&file).expect("cache file written");
        assert!(text.contains("127.0.0.1 "), "{text}");
        let again = start(
            &dir.path().join("restarted"),
            CarefulResume {
                file: Some(file.clone()),
                ..CarefulResume::default()
            },
        )
        .await;
        let restored = again
            .cache
            .clone()
            .expect("on")
            .get(
                xfer_quic::resume::PathKey::of("127.0.0.1:0".parse().expect("the client")),
                std::time::SystemTime::now(),
            )
            .expect("the restarted server read the saved path");
        assert!(restored.cwnd > 2 * INITIAL_WINDOW, "{restored:?}");
        again.download().await;
        again.shutdown().await;
    })
    .await;
}

/// A path another sender of the process measured (TCP resume, after an HTTP download) is
/// saved for QUIC too: the client's first QUIC connection jumps from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_another_protocol_measured_makes_the_first_connection_jump() {
    limited(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let share = PathShare::default();
        let server = start_sharing(dir.path(), CarefulResume::default(), share.clone()).await;
        let cache = server.cache.clone().expect("on by default");
        // As on a long path (see above: loopback's own BDP is too small to jump from), with
        // loopback's round trip, which reconnaissance checks (1 ms, the floor).
        let measured = MeasuredPath {
            rate: 8 << 30,
            min_rtt: Duration::from_millis(1),
        };
        share.publish("127.0.0.1".parse().expect("literal"), measured);
        let key = xfer_quic::resume::PathKey::of("127.0.0.1:0".parse().expect("the client"));
        let saved = cache
            .get(key, std::time::SystemTime::now())
            .expect("the published path is saved");
        assert_eq!(saved.cwnd, measured.bdp());
        // A connection that meets loss (a loaded machine's loopback drops datagrams too) or
        // stays short of data before its first full window rightly does not jump; a few
        // attempts, each from the published path again (a finished connection saves its
        // own, loopback-sized measurement), make the test about the share, not the machine.
        let mut stats = cache.stats();
        for attempt in 0..3 {
            if attempt > 0 {
                share.publish("127.0.0.1".parse().expect("literal"), measured);
            }
            server.download().await;
            stats = cache.stats();
            if stats.jumps >= 1 {
                break;
            }
        }
        assert!(stats.jumps >= 1, "{stats:?}");
        assert!(stats.largest_jump <= saved.cwnd / 2 + 1, "{stats:?}");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_with_another_rtt_does_not_jump() {
    limited(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("paths");
        // Saved from a 500 ms path: the loopback's RTT is far below half of it.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs();
        std::fs::write(&file, format!("127.0.0.1 20000000 500000 {now}\n")).expect("seed");
        let server = start(
            dir.path(),
            CarefulResume {
                file: Some(file),
                ..CarefulResume::default()
            },
        )
        .await;
        server.download().await;
        let stats = server.cache.clone().expect("on").stats();
        assert_eq!(stats.jumps, 0, "{stats:?}");
        assert!(stats.rtt_mismatches >= 1, "{stats:?}");
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turned_off_it_keeps_no_state() {
    limited(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = start(
            dir.path(),
            CarefulResume {
                enabled: false,
                ..CarefulResume::default()
            },
        )
        .await;
        assert!(server.cache.is_none());
        server.download().await;
        server.shutdown().await;
    })
    .await;
}

/// Runs `client` on a runtime of its own that ends when the future does, as a process's
/// does at exit: whatever it left for the runtime to do later (a goodbye not yet sent) never
/// happens.
async fn as_a_process<F, Fut>(client: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let exited = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(client());
    });
    tokio::task::spawn_blocking(move || exited.join())
        .await
        .expect("join")
        .expect("the client ran");
}

/// A server with Careful Resume as it is by default, and its path cache.
async fn with_resume(dir: &Path) -> (Server, PathCache) {
    let server = start(dir, CarefulResume::default()).await;
    let cache = server
        .cache
        .clone()
        .expect("careful resume is on by default");
    (server, cache)
}

/// How many of the loopback client's connections the server counts after waiting up to
/// `limit` for none.
async fn counted_after(cache: &PathCache, limit: Duration) -> u64 {
    let key = xfer_quic::resume::PathKey::of("127.0.0.1:0".parse().expect("the client"));
    let deadline = tokio::time::Instant::now() + limit;
    let mut open = cache.open_count(key);
    while open > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        open = cache.open_count(key);
    }
    open
}

/// The server divides a returning client's jump among that client's open connections, so a
/// connection it still counts after the client has gone shrinks the next command's start.
/// The client here ends right after the download, as a process does: without
/// `Transport::close` its goodbye never left, and the server counted the connection until
/// it had been silent for 2 s (before that, for its whole idle timeout, 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_closes_before_it_exits_is_not_counted_open() {
    limited(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let (server, cache) = with_resume(dir.path()).await;
        let (addr, ca) = (server.addr, server.ca.clone());
        as_a_process(move || async move {
            let t = client(addr, &ca);
            download(&t).await;
            t.close().await;
        })
        .await;
        // Half of the 2 s a silent connection is still counted: told, the server lets go
        // of it at once.
        assert_eq!(
            counted_after(&cache, Duration::from_secs(1)).await,
            0,
            "the server still counts the client's connection"
        );
        server.shutdown().await;
    })
    .await;
}

/// A client that vanishes mid-download (killed, or its goodbye lost) leaves its connection
/// open on the server until the idle timeout (30 s); once nothing it was sent has been
/// acknowledged for two seconds, it no longer counts as sharing the client's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_vanishes_mid_download_stops_counting() {
    limited(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let (server, cache) = with_resume(dir.path()).await;
        let (addr, ca) = (server.addr, server.ca.clone());
        // Ends with the body partly read and no goodbye sent.
        as_a_process(move || async move {
            let t = client(addr, &ca);
            let info = t.stat().await.expect("stat");
            let req = RangeRequest {
                range: 0..info.size,
                expected_size: info.size,
                want_digest: false,
                validator: info.range_validator().map(str::to_string),
                whole: false,
            };
            let mut lane = t.open_lane(0).await.expect("lane");
            let mut body = lane.fetch(&req).await.expect("fetch");
            let mut got = 0;
            while got < 1 << 20 {
                got += body.next_data().await.expect("body").expect("more").len();
            }
        })
        .await;
        // Five times those 2 s, a sixth of the idle timeout.
        assert_eq!(
            counted_after(&cache, Duration::from_secs(10)).await,
            0,
            "a silent connection still counts as sharing the path"
        );
        server.shutdown().await;
    })
    .await;
}
