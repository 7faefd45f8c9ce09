//! Connections under abuse and faults: one address cannot take every slot, a shutdown lets
//! a response in flight finish while refusing newcomers, a restarted server is noticed at
//! once (stateless reset with a key that survives the restart), and a vanished one within
//! the idle timeout.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use xfer_common::synthetic;
use xfer_common::tls;
use xfer_core::layout::LaneLayout;
use xfer_core::transport::{RangeBody, Transport};
use xfer_core::TransferError;
use xfer_quic::server::reset_key_from_secret;
use xfer_quic::wire::{Method, Request, ALPN};
use xfer_quic::{QuicClientConfig, QuicServer, QuicServerConfig, QuicTransport, QuicTuning};

use super::{range_req, raw_exchange, small_buffers, Fixture, TEST_LIMIT};

/// A client endpoint on `local` (any of 127.0.0.0/8 on Linux) that trusts `fx`'s certificate.
fn endpoint_on(fx: &Fixture, local: IpAddr) -> quinn::Endpoint {
    let rustls = tls::client_config(&fx.client_tls(), &[ALPN]).expect("client tls");
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(rustls).expect("quic tls");
    let mut endpoint = quinn::Endpoint::client(SocketAddr::new(local, 0)).expect("client endpoint");
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    endpoint
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_connection_slot() {
    limited!(async {
        let fx = Fixture::start_with(None, |c| {
            c.max_connections = 256;
            c.max_connections_per_address = 128;
        })
        .await;
        fx.write("f.bin", b"served");
        // 300 handshakes from 127.0.0.1, all at once, each connection held open.
        let crowd = endpoint_on(&fx, IpAddr::from([127, 0, 0, 1]));
        let mut handshakes = JoinSet::new();
        for _ in 0..300 {
            let connecting = crowd.connect(fx.addr, "localhost").expect("connect");
            handshakes.spawn(connecting);
        }
        let mut held = Vec::new();
        let mut refused = 0;
        while let Some(done) = handshakes.join_next().await {
            match done.expect("handshake task") {
                Ok(c) => held.push(c),
                Err(quinn::ConnectionError::ConnectionClosed(c))
                    if c.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED =>
                {
                    refused += 1
                }
                Err(e) => panic!("a handshake failed otherwise than refused: {e}"),
            }
        }
        println!("one address: {} served, {refused} refused", held.len());
        assert_eq!(held.len(), 128, "the per-address cap did not hold");
        assert_eq!(refused, 300 - 128);

        // Another address is served at once, while all of those stay open.
        let other = endpoint_on(&fx, IpAddr::from([127, 0, 0, 2]));
        let conn = other
            .connect(fx.addr, "localhost")
            .expect("connect")
            .await
            .expect("another address is refused while one address holds its share");
        let stat = Request {
            method: Method::Stat,
            path: "/f.bin".into(),
            range: None,
            want_digest: false,
            validator: None,
            token: None,
            upload: None,
            checksums: Vec::new(),
        }
        .encode()
        .expect("request");
        let head = raw_exchange(&conn, &stat).await.expect("answered");
        assert_eq!(head.status, 200);
        assert_eq!(head.size, 6);
        drop(held);
        crowd.close(0u32.into(), b"done");
        fx.shutdown().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_closes_an_idle_connection_to_make_room() {
    limited!(async {
        let fx = Fixture::start_with(None, |c| {
            c.max_connections = 2;
        })
        .await;
        let ep = endpoint_on(&fx, IpAddr::from([127, 0, 0, 1]));
        let connect = || async { ep.connect(fx.addr, "localhost").expect("connect").await };
        let idle = [
            connect().await.expect("first"),
            connect().await.expect("second"),
        ];
        // Full, and both have just moved data (their handshakes): a newcomer is refused at
        // first, then served once one of the two has been quiet for the eviction threshold.
        let deadline = Instant::now() + TEST_LIMIT / 2;
        let (newcomer, refusals) = {
            let mut refusals = 0;
            loop {
                assert!(Instant::now() < deadline, "no idle connection made room");
                match connect().await {
                    Ok(c) => break (c, refusals),
                    Err(quinn::ConnectionError::ConnectionClosed(c))
                        if c.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED =>
                    {
                        refusals += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("refused otherwise: {e}"),
                }
            }
        };
        println!("idle eviction: {refusals} refusals before room was made");
        assert!(refusals > 0, "a full server served a newcomer at once");
        let [a, b] = &idle;
        let why = tokio::select! {
            why = a.closed() => why,
            why = b.closed() => why,
        };
        assert!(
            matches!(
                &why,
                quinn::ConnectionError::ApplicationClosed(a)
                    if a.error_code == xfer_quic::ErrorCode::ServerBusy.varint()
            ),
            "the idle connection closed otherwise: {why}"
        );
        drop(newcomer);
        fx.shutdown().await;
    });
}

/// A client of one lane with a small stream window, so that most of a large body stays on
/// the server until the client reads it.
fn slow_reader(url: &str, ca: &Path, idle: Duration) -> QuicTransport {
    let config = QuicClientConfig {
        tuning: QuicTuning {
            stream_receive_window: 2 << 20,
            ..small_buffers()
        },
        tls: tls::ClientTlsOptions {
            client_identity: None,
            ca_certs: vec![ca.to_path_buf()],
            dangerous_insecure: false,
        },
        lanes: LaneLayout {
            connections: Some(1),
            streams_per_connection: Some(1),
        },
        idle_timeout: idle,
        connect_timeout: Duration::from_secs(5),
        ..QuicClientConfig::default()
    };
    QuicTransport::new(url, config).expect("client")
}

/// A [`slow_reader`] of the synthetic resource `seed` of `size` bytes on a [`Killable`]
/// server made in `dir`, with what its STAT said.
async fn synthetic_client(
    dir: &Path,
    addr: SocketAddr,
    seed: u64,
    size: u64,
    idle: Duration,
) -> (QuicTransport, xfer_core::transport::RemoteInfo) {
    let url = format!(
        "quic://127.0.0.1:{}/.xfer/synthetic?size={size}&seed={seed}",
        addr.port()
    );
    let t = slow_reader(&url, &dir.join("certs/cert.pem"), idle);
    let info = t.stat().await.expect("stat");
    (t, info)
}

/// Read `body` to its end or its first error, checking every byte against the synthetic
/// resource of `seed` from `offset`; returns the bytes read and how it ended.
async fn read_checked(
    body: &mut Box<dyn RangeBody + '_>,
    seed: u64,
    mut offset: u64,
) -> (u64, Result<(), TransferError>) {
    let start = offset;
    loop {
        match body.next_data().await {
            Ok(Some(b)) => {
                let mut want = vec![0u8; b.len()];
                synthetic::fill(seed, offset, &mut want);
                assert!(b[..] == want[..], "bytes at {offset} differ");
                offset += b.len() as u64;
            }
            Ok(None) => return (offset - start, Ok(())),
            Err(e) => return (offset - start, Err(e)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_response_finish_and_refuses_newcomers() {
    limited!(async {
        let mut fx = Fixture::start(None).await;
        let size = 48u64 << 20;
        let path = format!("/.xfer/synthetic?size={size}&seed=3");
        let t = slow_reader(&fx.url(&path), &fx.ca, Duration::from_secs(30));
        let info = t.stat().await.expect("stat");
        let mut lane = t.open_lane(0).await.expect("lane");
        let whole = range_req(&info, 0..size);
        let mut body = lane.fetch(&whole).await.expect("head");
        let first = body
            .next_data()
            .await
            .expect("first bytes")
            .expect("a block");
        let _ = fx.stop.take().expect("running").send(());

        // While the response is still to be sent, newcomers are refused.
        let deadline = Instant::now() + TEST_LIMIT / 2;
        let refusal = loop {
            assert!(
                Instant::now() < deadline,
                "new connections still served while draining"
            );
            let newcomer = fx.client(&path);
            match newcomer.stat().await {
                Err(e) => break e,
                Ok(_) => tokio::task::yield_now().await,
            }
        };
        println!("newcomer during the drain: {refusal}");
        assert!(refusal.is_retryable(), "{refusal:?}");

        let (rest, end) = read_checked(&mut body, 3, first.len() as u64).await;
        end.expect("the response in flight was cut by the shutdown");
        assert_eq!(first.len() as u64 + rest, size);
        drop(body);
        drop(lane);
        t.close().await;
        fx.shutdown().await;
    });
}

/// A server in a runtime of its own, so that dropping the runtime stops it as a killed
/// process stops: no CONNECTION_CLOSE leaves, the socket simply closes.
struct Killable {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Killable {
    async fn start(config: QuicServerConfig) -> Self {
        tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("server runtime");
            let server = runtime
                .block_on(QuicServer::bind(config))
                .expect("bind quic server");
            let addr = server.local_addr();
            runtime.spawn(server.serve(std::future::pending()));
            Self {
                addr,
                runtime: Some(runtime),
            }
        })
        .await
        .expect("server start")
    }

    /// Stop every task of the server at once; returns once its socket is closed.
    async fn kill(mut self) {
        let runtime = self.runtime.take();
        // A runtime is dropped (which waits for its tasks to go) outside any runtime.
        tokio::task::spawn_blocking(move || {
            std::thread::spawn(move || drop(runtime))
                .join()
                .expect("server stop")
        })
        .await
        .expect("server stop");
    }
}

impl Drop for Killable {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A root, a certificate, and a server configuration for `listen` with a stateless-reset key
/// derived from the TLS key, as `xfer serve` derives it.
fn killable_config(dir: &Path, listen: SocketAddr) -> QuicServerConfig {
    let certs = tls::self_signed(&["127.0.0.1".to_string()], &dir.join("certs"))
        .expect("self-signed certificate");
    let server_tls = tls::server_config(&certs.cert_path, &certs.key_path, &[]).expect("tls");
    let mut config = QuicServerConfig::new(dir.join("root"), listen, Arc::new(server_tls));
    config.tuning = small_buffers();
    let key = std::fs::read(&certs.key_path).expect("read the key");
    config.stateless_reset_key = Some(reset_key_from_secret(&key));
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_noticed_at_once_and_the_download_completes() {
    limited!(async {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("root")).expect("root");
        let config = killable_config(dir.path(), "127.0.0.1:0".parse().expect("literal"));
        let server = Killable::start(config.clone()).await;
        let addr = server.addr;
        let size = 24u64 << 20;
        // Far above the test's own limit: only the reset can end the connection in time.
        let (t, info) = synthetic_client(dir.path(), addr, 5, size, Duration::from_secs(600)).await;
        let mut lane = t.open_lane(0).await.expect("lane");
        let whole = range_req(&info, 0..size);
        let mut body = lane.fetch(&whole).await.expect("head");
        let first = body
            .next_data()
            .await
            .expect("first bytes")
            .expect("a block");

        server.kill().await;
        let killed = Instant::now();
        // The fault under test: the server is away for a second.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut config = config;
        config.listen = addr;
        let server = Killable::start(config).await;
        let restarted = Instant::now();

        let (got, end) = read_checked(&mut body, 5, first.len() as u64).await;
        let err = end.expect_err("the old server's response cannot go on");
        let noticed = Instant::now();
        assert!(
            format!("{err:?}").contains("reset"),
            "the connection did not end by a stateless reset: {err:?}"
        );
        assert!(err.is_retryable(), "{err:?}");
        drop(body);
        drop(lane);

        // The transport reconnects on its own and the rest arrives. As the engine would, a
        // retryable failure of the new connection is retried (at most twice).
        let mut from = first.len() as u64 + got;
        let mut retries = 0;
        loop {
            let attempt: Result<(), TransferError> = async {
                let mut lane = t.open_lane(0).await?;
                let rest_req = range_req(&info, from..size);
                let mut body = lane.fetch(&rest_req).await?;
                let (rest, end) = read_checked(&mut body, 5, from).await;
                from += rest;
                end
            }
            .await;
            match attempt {
                Ok(()) => break,
                Err(e) if e.is_retryable() && retries < 2 => {
                    println!("restart: a retry after {e:?}");
                    retries += 1;
                }
                Err(e) => panic!("the rest after the restart: {e:?}"),
            }
        }
        assert_eq!(from, size);
        println!(
            "restart: noticed {:?} after the restart ({:?} after the kill); done {:?} after the kill, {retries} retries",
            noticed - restarted,
            noticed - killed,
            killed.elapsed()
        );
        t.close().await;
        server.kill().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_server_fails_within_the_idle_timeout() {
    limited!(async {
        let size = 24u64 << 20;
        let idle = Duration::from_secs(2);
        // A runtime torn down under a stream may still get a reset of it onto the wire on its
        // way out: that round says nothing about a server that vanishes, so it is run again.
        let mut round = 0;
        let (t, failed, err) = loop {
            round += 1;
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::create_dir_all(dir.path().join("root")).expect("root");
            let server = Killable::start(killable_config(
                dir.path(),
                "127.0.0.1:0".parse().expect("literal"),
            ))
            .await;
            let (t, info) = synthetic_client(dir.path(), server.addr, 6, size, idle).await;
            let mut lane = t.open_lane(0).await.expect("lane");
            let whole = range_req(&info, 0..size);
            let mut body = lane.fetch(&whole).await.expect("head");
            let first = body
                .next_data()
                .await
                .expect("first bytes")
                .expect("a block");

            server.kill().await;
            let killed = Instant::now();
            let (_, end) = read_checked(&mut body, 6, first.len() as u64).await;
            let failed = killed.elapsed();
            let err = end.expect_err("nothing can arrive from a killed server");
            let reset_on_the_way_out = matches!(&err, TransferError::Protocol { message, .. } if message.contains("reset the stream"));
            if reset_on_the_way_out && round < 5 {
                println!("vanished server: round {round} was reset as it went; again");
                drop(body);
                drop(lane);
                t.close().await;
                continue;
            }
            break (t, failed, err);
        };
        println!("vanished server: failed after {failed:?}: {err}");
        assert!(
            matches!(&err, TransferError::Timeout { after, .. } if *after == idle),
            "{err:?}"
        );
        assert!(!err.to_string().contains("after 0ns"), "{err}");
        assert!(failed < idle * 3, "failed only after {failed:?}");
        // Reconnecting is refused at once: nothing listens there any more.
        // A new connection goes with 0-RTT (the client holds a ticket of the dead server): no
        // handshake to be refused, yet the ICMP answer ends it at once. (When the body's own
        // timer fired a moment before quinn's, the request rides the old connection and fails
        // as it dies of the idle timeout.)
        let asked = Instant::now();
        let again = t.stat().await.expect_err("nothing listens");
        println!(
            "vanished server: a new request failed after {:?}: {again}",
            asked.elapsed()
        );
        assert!(
            again.is_refused()
                || matches!(&again, TransferError::Timeout { after, .. } if *after == idle),
            "{again:?}"
        );
        assert!(asked.elapsed() < idle * 3, "{:?}", asked.elapsed());
    });
}
