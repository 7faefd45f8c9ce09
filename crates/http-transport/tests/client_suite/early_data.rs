//! TLS 1.3 early data over TCP against the xfer HTTP server: connections opened after the
//! first hold a ticket and send their first read with the ClientHello; a server that does
//! not know the ticket refuses the early data and the request is sent again; the server
//! answers early reads before the client's `Finished` and refuses early uploads with 425.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;

use xfer_core::layout::LaneLayout;
use xfer_core::transport::{FirstRequest, Lane, RoundTrips, TlsStart, Transport};
use xfer_http::server::ServerConfig;
use xfer_http::{HttpTransport, HttpVersion};

use crate::client_suite::support::{pattern, TestResult};
use crate::client_suite::{client_cfg, fetch, range_req, read_all};
use crate::loopback::Loopback;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The xfer server on `listen` over TLS with `cert`, serving `data.bin` from `root`.
async fn serve_tls(
    root: &std::path::Path,
    cert: &xfer_common::tls::SelfSigned,
    listen: SocketAddr,
    max_early_data_size: u32,
) -> Result<Loopback, BoxError> {
    let mut cfg = ServerConfig::new(root);
    cfg.listen = listen;
    cfg.max_early_data_size = max_early_data_size;
    cfg.tls = Some(Arc::new(xfer_common::tls::server_config(
        &cert.cert_path,
        &cert.key_path,
        &[],
    )?));
    Ok(Loopback::start(cfg).await?)
}

struct Fixture {
    dir: tempfile::TempDir,
    cert: xfer_common::tls::SelfSigned,
    data: Vec<u8>,
}

impl Fixture {
    fn new(len: usize) -> Result<Self, BoxError> {
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("root");
        std::fs::create_dir(&root)?;
        let data = pattern(len).to_vec();
        std::fs::write(root.join("data.bin"), &data)?;
        let cert =
            xfer_common::tls::self_signed(&["localhost".to_string()], &dir.path().join("tls"))?;
        Ok(Self { dir, cert, data })
    }

    fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("root")
    }

    /// The server on `listen` with early data at its default size.
    async fn serve(&self, listen: SocketAddr) -> Result<Loopback, BoxError> {
        let size = xfer_http::server::DEFAULT_MAX_EARLY_DATA;
        serve_tls(&self.root(), &self.cert, listen, size).await
    }

    fn transport(
        &self,
        addr: SocketAddr,
        version: HttpVersion,
        lanes: usize,
    ) -> Result<HttpTransport, BoxError> {
        let mut cfg = client_cfg(version);
        cfg.tls.ca_certs = vec![self.cert.cert_path.clone()];
        // One connection per lane for HTTP/2 too, so every later lane opens its own.
        cfg.lanes = LaneLayout {
            connections: Some(lanes),
            streams_per_connection: Some(1),
        };
        let url = format!("https://localhost:{}/data.bin", addr.port());
        Ok(HttpTransport::new(&url, cfg)?)
    }
}

/// Lane 0 learns the resource (a full handshake; its answer brings the tickets), then lanes
/// 1.. each open their own connection for one range. Returns each later lane's round trips.
async fn later_lanes(
    fx: &Fixture,
    t: &HttpTransport,
    lanes: usize,
) -> Result<Vec<RoundTrips>, BoxError> {
    let chunk = fx.data.len() as u64 / lanes as u64;
    let first = FirstRequest {
        len: chunk,
        want_digest: false,
    };
    let mut opened = t.open_first(0, first).await?;
    let mut body = opened.first.take().ok_or("no first body")?;
    assert_eq!(
        read_all(body.body.as_mut()).await?,
        fx.data[..chunk as usize]
    );
    let rt = opened
        .lane
        .first_round_trips()
        .ok_or("lane 0 has no count")?;
    assert_eq!(rt.tls, TlsStart::Full, "{rt}");
    let mut counts = Vec::new();
    let mut lanes_kept: Vec<Box<dyn Lane>> = Vec::new();
    for i in 1..lanes as u64 {
        let mut lane = t.open_lane(i as usize).await?;
        let range = i * chunk..(i + 1) * chunk;
        let req = range_req(&opened.info, range.clone());
        let (bytes, _) = fetch(lane.as_mut(), &req).await?;
        assert_eq!(
            bytes,
            fx.data[range.start as usize..range.end as usize],
            "lane {i}"
        );
        counts.push(lane.first_round_trips().ok_or("no round trips")?);
        // Kept open: a parked connection would be reused by the next lane.
        lanes_kept.push(lane);
    }
    Ok(counts)
}

#[tokio::test]
async fn later_connections_send_their_first_read_as_early_data() -> TestResult {
    let fx = Fixture::new(8 << 20)?;
    let srv = fx.serve("127.0.0.1:0".parse()?).await?;
    for version in [HttpVersion::Http1, HttpVersion::Http2] {
        let t = fx.transport(srv.addr, version, 8)?;
        let counts = later_lanes(&fx, &t, 8).await?;
        assert_eq!(counts.len(), 7);
        for (i, rt) in counts.iter().enumerate() {
            assert_eq!(
                rt.tls,
                TlsStart::EarlyData,
                "{version:?} lane {}: {rt}",
                i + 1
            );
            assert_eq!(
                (rt.tcp, rt.handshake, rt.requests),
                (1, 0, 1),
                "{version:?} lane {}: {rt}",
                i + 1
            );
            assert_eq!(rt.total(), 2);
        }
    }
    Ok(())
}

#[tokio::test]
async fn early_data_off_on_the_client_resumes_without_it() -> TestResult {
    let fx = Fixture::new(1 << 20)?;
    let srv = fx.serve("127.0.0.1:0".parse()?).await?;
    let mut cfg = client_cfg(HttpVersion::Http1);
    cfg.tls.ca_certs = vec![fx.cert.cert_path.clone()];
    cfg.early_data = false;
    cfg.lanes = LaneLayout {
        connections: Some(4),
        streams_per_connection: None,
    };
    let url = format!("https://localhost:{}/data.bin", srv.addr.port());
    let t = HttpTransport::new(&url, cfg)?;
    for rt in later_lanes(&fx, &t, 4).await? {
        assert_eq!(rt.tls, TlsStart::Resumed, "{rt}");
        assert_eq!(rt.total(), 3, "{rt}");
    }
    Ok(())
}

#[tokio::test]
async fn early_data_a_restarted_server_refuses_is_sent_again() -> TestResult {
    // The same address and certificate, a new process's session cache: the tickets the client
    // holds allow early data but name sessions this server never saw. Once with a server that
    // takes early data (the ticket is refused), once with one that has it off.
    for early_size in [xfer_http::server::DEFAULT_MAX_EARLY_DATA, 0] {
        let fx = Fixture::new(1 << 20)?;
        let first = fx.serve("127.0.0.1:0".parse()?).await?;
        let addr = first.addr;
        let t = fx.transport(addr, HttpVersion::Http1, 2)?;
        let chunk = fx.data.len() as u64 / 2;
        let first_request = FirstRequest {
            len: chunk,
            want_digest: false,
        };
        let mut opened = t.open_first(0, first_request).await?;
        let mut body = opened.first.take().ok_or("no first body")?;
        read_all(body.body.as_mut()).await?;
        drop(body);
        first.stop().await;
        let _second = serve_tls(&fx.root(), &fx.cert, addr, early_size).await?;
        let mut lane = t.open_lane(1).await?;
        let req = range_req(&opened.info, chunk..2 * chunk);
        let (bytes, _) = fetch(lane.as_mut(), &req).await?;
        assert_eq!(bytes, fx.data[chunk as usize..], "early data {early_size}");
        let rt = lane.first_round_trips().ok_or("no round trips")?;
        assert_eq!(rt.tls, TlsStart::EarlyDataRefused, "{early_size}: {rt}");
        assert_eq!((rt.tcp, rt.handshake, rt.requests), (1, 1, 1), "{rt}");
    }
    Ok(())
}

/// A raw rustls client: one connection to get tickets, then a second that writes `request`
/// as early data and reads the answer *without sending its `Finished`*, so whatever comes
/// back was answered from early data before the handshake completed.
fn answer_to_early_request(
    addr: SocketAddr,
    cert: &std::path::Path,
    request: &[u8],
) -> Result<String, BoxError> {
    let opts = xfer_common::tls::ClientTlsOptions {
        ca_certs: vec![cert.to_path_buf()],
        ..Default::default()
    };
    let mut cfg = xfer_common::tls::client_config(&opts, &[b"http/1.1"])?;
    cfg.enable_early_data = true;
    let cfg = Arc::new(cfg);
    let name = rustls::pki_types::ServerName::try_from("localhost")?;

    let conn = rustls::ClientConnection::new(cfg.clone(), name.clone())?;
    let mut tls = rustls::StreamOwned::new(conn, std::net::TcpStream::connect(addr)?);
    tls.write_all(b"HEAD /data.bin HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")?;
    let mut answer = Vec::new();
    // The server closes without close_notify after `connection: close` on some paths.
    let _ = tls.read_to_end(&mut answer);
    assert!(answer.starts_with(b"HTTP/1.1 200"), "first connection");

    let mut conn = rustls::ClientConnection::new(cfg, name)?;
    conn.early_data()
        .ok_or("the ticket does not allow early data")?
        .write_all(request)?;
    let mut sock = std::net::TcpStream::connect(addr)?;
    sock.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
    // ClientHello and the early data; nothing is written after this.
    while conn.wants_write() {
        conn.write_tls(&mut sock)?;
    }
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        if conn.read_tls(&mut sock)? == 0 {
            return Err("server closed before answering".into());
        }
        conn.process_new_packets()?;
        let mut buf = [0u8; 4096];
        match conn.reader().read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
    }
    assert!(conn.is_early_data_accepted());
    Ok(String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test]
async fn the_server_answers_early_reads_at_once_and_refuses_early_uploads_with_425() -> TestResult {
    let fx = Fixture::new(1 << 16)?;
    let srv = fx.serve("127.0.0.1:0".parse()?).await?;
    let (addr, cert) = (srv.addr, fx.cert.cert_path.clone());
    let get = tokio::task::spawn_blocking(move || {
        answer_to_early_request(
            addr,
            &cert,
            b"GET /data.bin HTTP/1.1\r\nhost: localhost\r\nrange: bytes=0-99\r\n\r\n",
        )
    })
    .await??;
    assert!(get.starts_with("HTTP/1.1 206"), "{get}");
    for request in [
        &b"PUT /new.bin HTTP/1.1\r\nhost: localhost\r\ncontent-length: 5\r\n\r\nhello"[..],
        &b"DELETE /data.bin HTTP/1.1\r\nhost: localhost\r\n\r\n"[..],
        &b"COPY /data.bin HTTP/1.1\r\nhost: localhost\r\ndestination: https://a.example/x\r\n\r\n"
            [..],
    ] {
        let cert = fx.cert.cert_path.clone();
        let answer =
            tokio::task::spawn_blocking(move || answer_to_early_request(addr, &cert, request))
                .await??;
        assert!(answer.starts_with("HTTP/1.1 425"), "{answer}");
    }
    assert!(!fx.root().join("new.bin").exists());
    Ok(())
}

#[tokio::test]
async fn a_proxy_that_forwarded_early_data_gets_425_for_an_upload() -> TestResult {
    let fx = Fixture::new(1 << 10)?;
    let server = Loopback::start(crate::loopback::config(&fx.root())).await?;
    let addr = server.addr;
    let answer = tokio::task::spawn_blocking(move || -> Result<Vec<String>, BoxError> {
        let mut heads = Vec::new();
        for request in [
            &b"PUT /new.bin HTTP/1.1\r\nhost: a\r\nearly-data: 1\r\ncontent-length: 2\r\n\r\nhi"[..],
            &b"GET /data.bin HTTP/1.1\r\nhost: a\r\nearly-data: 1\r\nconnection: close\r\n\r\n"[..],
        ] {
            let mut sock = std::net::TcpStream::connect(addr)?;
            sock.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
            sock.write_all(request)?;
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = sock.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            heads.push(String::from_utf8_lossy(&got).into_owned());
        }
        Ok(heads)
    })
    .await??;
    server.stop().await;
    assert!(answer[0].starts_with("HTTP/1.1 425"), "{}", answer[0]);
    assert!(answer[1].starts_with("HTTP/1.1 200"), "{}", answer[1]);
    Ok(())
}

#[tokio::test]
async fn a_read_answered_425_is_sent_again_on_a_new_connection() -> TestResult {
    let data = crate::client_suite::support::pattern(10_000);
    let script = crate::client_suite::support::Script::new(data.clone());
    script
        .too_early
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let srv = crate::client_suite::support::TestServer::start(
        crate::client_suite::support::Wire::Tls,
        script,
    )
    .await?;
    let mut cfg = client_cfg(HttpVersion::Http1);
    cfg.tls.ca_certs = srv.cert.iter().cloned().collect();
    let t = HttpTransport::new(&srv.url("/file"), cfg)?;
    let info = t.stat().await?;
    assert_eq!(info.size, 10_000);
    let methods: Vec<_> = srv
        .script
        .requests()
        .into_iter()
        .map(|r| r.method)
        .collect();
    assert_eq!(methods, vec![http::Method::HEAD, http::Method::HEAD]);
    assert_eq!(
        srv.script
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    Ok(())
}

#[tokio::test]
async fn an_upload_on_an_http2_connection_that_began_with_early_data_waits_for_the_handshake(
) -> TestResult {
    let fx = Fixture::new(1 << 16)?;
    let access = xfer_test_support::write_access_file(
        fx.dir.path(),
        &xfer_test_support::token_entry("up", "up-token", "write", "/"),
    );
    let mut cfg = ServerConfig::new(fx.root());
    cfg.listen = "127.0.0.1:0".parse()?;
    cfg.tls = Some(Arc::new(xfer_common::tls::server_config(
        &fx.cert.cert_path,
        &fx.cert.key_path,
        &[],
    )?));
    cfg.uploads = Some(xfer_service::UploadConfig::default());
    cfg.access = Arc::new(xfer_service::AccessControl::from_file(&access, true)?);
    let server = Loopback::start(cfg).await?;
    let upstream = server.addr;
    // The second connection's handshake answer comes slowly, so a request written right
    // after the first would still be early data.
    let faults = vec![
        xfer_test_support::Fault::Pass,
        xfer_test_support::Fault::Throttle {
            bytes_per_sec: 4000,
        },
    ];
    let proxy = xfer_test_support::FaultProxy::tcp(upstream, faults).await?;
    let base = format!("https://localhost:{}", proxy.addr().port());
    let mut ccfg = client_cfg(HttpVersion::Http2);
    ccfg.tls.ca_certs = vec![fx.cert.cert_path.clone()];
    ccfg.token = Some(xfer_common::secret::Secret::new("up-token"));
    // Lanes 0 and 1 on the first connection, 2 and 3 on the second.
    ccfg.lanes = LaneLayout {
        connections: Some(2),
        streams_per_connection: Some(2),
    };
    let t = HttpTransport::new(&format!("{base}/data.bin"), ccfg)?;
    let first = FirstRequest {
        len: 1024,
        want_digest: false,
    };
    let mut opened = t.open_first(0, first).await?;
    let mut body = opened.first.take().ok_or("no first body")?;
    read_all(body.body.as_mut()).await?;
    drop(body);
    let mut reader = t.open_lane(2).await?;
    let uploads = t.sibling(&format!("{base}/new.bin"))?;
    let mut writer = uploads.open_lane(3).await?;
    let put = bytes::Bytes::from(vec![7u8; 3000]);
    let mut h = xfer_core::digest::Sha256Hasher::new();
    h.update(&put);
    let req = range_req(&opened.info, 1024..2048);
    // The read opens the connection with early data; the upload joins it at once.
    let (read, written) = tokio::join!(
        fetch(reader.as_mut(), &req),
        writer.put_whole(put.clone(), h.finish())
    );
    server.stop().await;
    assert_eq!(read?.0, fx.data[1024..2048]);
    let rt = reader.first_round_trips().ok_or("no round trips")?;
    assert_eq!(rt.tls, TlsStart::EarlyData, "{rt}");
    // Sent in early data it would have been answered 425 Too Early.
    written?;
    assert_eq!(std::fs::read(fx.root().join("new.bin"))?, put);
    Ok(())
}
