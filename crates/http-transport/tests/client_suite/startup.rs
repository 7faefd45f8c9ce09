//! Start-up round trips: the first range request is the stat (no `HEAD`), a server that
//! ignores `Range` still works, later connections resume the TLS session, and a download
//! reports how each lane reached its first byte.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::Method;
use xfer_core::get::{Download, GetConfig};
use xfer_core::layout::LaneLayout;
use xfer_core::transport::{FirstRequest, TlsStart, Transport};
use xfer_http::{HttpTransport, HttpVersion};

use xfer_test_support::{Fault, FaultProxy};

use crate::client_suite::support::{pattern, Script, TestResult, TestServer, Wire};
use crate::client_suite::{client_cfg, read_all};

fn transport(
    srv: &TestServer,
    version: HttpVersion,
    lanes: usize,
) -> Result<HttpTransport, Box<dyn std::error::Error + Send + Sync>> {
    let mut cfg = client_cfg(version);
    cfg.tls.ca_certs = srv.cert.iter().cloned().collect();
    cfg.lanes = LaneLayout {
        connections: Some(lanes),
        streams_per_connection: None,
    };
    Ok(HttpTransport::new(&srv.url("/file"), cfg)?)
}

fn methods(srv: &TestServer) -> Vec<Method> {
    srv.script
        .requests()
        .into_iter()
        .map(|r| r.method)
        .collect()
}

/// Where a `Range: bytes=N-M` request starts.
fn range_start(v: &http::HeaderValue) -> Option<u64> {
    v.to_str()
        .ok()?
        .strip_prefix("bytes=")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

#[tokio::test]
async fn the_first_range_answers_the_stat_and_no_head_is_sent() -> TestResult {
    for (wire, version) in [
        (Wire::Http1, HttpVersion::Http1),
        (Wire::H2c, HttpVersion::Http2),
        (Wire::Tls, HttpVersion::Http1),
        (Wire::Tls, HttpVersion::Http2),
    ] {
        let data = pattern(10_000);
        let srv = TestServer::start(wire, Script::new(data.clone())).await?;
        let t = transport(&srv, version, 1)?;
        let first = FirstRequest {
            len: 4096,
            want_digest: true,
        };
        let mut opened = t.open_first(0, first).await?;
        assert_eq!(opened.info.size, 10_000, "{wire:?} {version:?}");
        assert!(opened.info.accepts_ranges);
        assert_eq!(opened.info.etag.as_deref(), Some("\"v1\""));
        assert!(
            opened.info.sha256.is_some(),
            "Repr-Digest asked for and sent"
        );
        let mut body = opened.first.take().ok_or("no first body")?;
        assert_eq!(body.range, 0..4096);
        assert!(!body.whole);
        assert_eq!(read_all(body.body.as_mut()).await?, data[..4096]);
        assert!(body.body.trailer_digest().is_some());
        assert_eq!(methods(&srv), vec![Method::GET], "{wire:?} {version:?}");
        let rt = opened.lane.first_round_trips().ok_or("no round trips")?;
        assert_eq!(rt.requests, 1);
        assert_eq!(rt.tcp, 1);
        let tls = wire == Wire::Tls;
        assert_eq!(rt.handshake, u8::from(tls));
        assert_eq!(rt.tls, if tls { TlsStart::Full } else { TlsStart::None });
        assert_eq!(rt.total(), if tls { 3 } else { 2 });
    }
    Ok(())
}

#[tokio::test]
async fn a_resource_smaller_than_the_first_range_comes_whole_in_it() -> TestResult {
    let data = pattern(1000);
    let srv = TestServer::start(Wire::Http1, Script::new(data.clone())).await?;
    let t = transport(&srv, HttpVersion::Http1, 1)?;
    let first = FirstRequest {
        len: 1 << 20,
        want_digest: false,
    };
    let mut opened = t.open_first(0, first).await?;
    assert_eq!(opened.info.size, 1000);
    let mut body = opened.first.take().ok_or("no first body")?;
    assert_eq!(body.range, 0..1000);
    assert_eq!(read_all(body.body.as_mut()).await?, data);
    assert_eq!(methods(&srv), vec![Method::GET]);
    Ok(())
}

#[tokio::test]
async fn a_server_that_ignores_ranges_sends_the_whole_resource_as_the_first_body() -> TestResult {
    let data = pattern(50_000);
    let mut script = Script::new(data.clone());
    script.honour_ranges = false;
    let srv = TestServer::start(Wire::Tls, script).await?;
    let t = Arc::new(transport(&srv, HttpVersion::Http1, 4)?);
    let first = FirstRequest {
        len: 4096,
        want_digest: false,
    };
    let mut opened = t.open_first(0, first).await?;
    assert!(!opened.info.accepts_ranges);
    assert_eq!(opened.info.size, 50_000);
    let mut body = opened.first.take().ok_or("no first body")?;
    assert!(body.whole);
    assert_eq!(body.range, 0..50_000);
    assert_eq!(read_all(body.body.as_mut()).await?, data);

    // Whole downloads: one stream, the bytes right. Without digests the 200 announces its
    // length and one GET does it all; with them the server streams it chunked (to send a
    // trailer), the size is unknown from that answer, and `HEAD` is asked.
    // Lanes that ask speculatively get the whole resource too, and drop it.
    for (verify, speculate) in [(false, false), (true, false), (false, true)] {
        let mut script = Script::new(data.clone());
        script.honour_ranges = false;
        let srv = TestServer::start(Wire::Tls, script).await?;
        let t = Arc::new(transport(&srv, HttpVersion::Http1, 4)?);
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("whole");
        let cfg = GetConfig {
            chunk_size: 1 << 16,
            verify,
            speculate,
            ..GetConfig::default()
        };
        let report = Download::new(t, srv.url("/file"), &dest, cfg).run().await?;
        assert_eq!(std::fs::read(&dest)?, data);
        assert_eq!(report.chunks, 1);
        let m = methods(&srv);
        if speculate {
            // The first lane's GET, and one from each other lane, whose answer is dropped.
            assert_eq!(m, vec![Method::GET; 4]);
        } else if verify {
            assert_eq!(m.first(), Some(&Method::GET), "{m:?}");
            assert!(m.contains(&Method::HEAD), "{m:?}");
        } else {
            assert_eq!(m, vec![Method::GET]);
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_later_connection_resumes_the_tls_session() -> TestResult {
    let data = pattern(20_000);
    let srv = TestServer::start(Wire::Tls, Script::new(data.clone())).await?;
    let t = transport(&srv, HttpVersion::Http1, 2)?;
    let first = FirstRequest {
        len: 4096,
        want_digest: false,
    };
    let mut opened = t.open_first(0, first).await?;
    let mut body = opened.first.take().ok_or("no first body")?;
    read_all(body.body.as_mut()).await?;
    assert_eq!(
        opened.lane.first_round_trips().map(|r| r.tls),
        Some(TlsStart::Full)
    );
    // The first connection's ticket arrived with its answer: the next connection resumes.
    let mut lane = t.open_lane(1).await?;
    lane.connect().await?;
    let req = crate::client_suite::range_req(&opened.info, 4096..8192);
    let (bytes, _) = crate::client_suite::fetch(lane.as_mut(), &req).await?;
    assert_eq!(bytes, data[4096..8192]);
    let rt = lane.first_round_trips().ok_or("no round trips")?;
    assert_eq!(rt.tls, TlsStart::Resumed);
    assert_eq!((rt.tcp, rt.handshake, rt.requests), (1, 1, 1));
    assert_eq!(srv.script.resumed.load(Ordering::SeqCst), 1);
    assert_eq!(srv.script.connections.load(Ordering::SeqCst), 2);
    Ok(())
}

#[tokio::test]
async fn a_download_sends_no_head_and_reports_round_trips_per_lane() -> TestResult {
    for version in [HttpVersion::Http1, HttpVersion::Http2] {
        let data = pattern(16 << 16);
        let srv = TestServer::start(Wire::Tls, Script::new(data.clone())).await?;
        let t = Arc::new(transport(&srv, version, 4)?);
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("f");
        let cfg = GetConfig {
            chunk_size: 1 << 16,
            ..GetConfig::default()
        };
        let report = Download::new(t, srv.url("/file"), &dest, cfg).run().await?;
        assert_eq!(std::fs::read(&dest)?, data);
        let m = methods(&srv);
        assert!(!m.contains(&Method::HEAD), "{version:?}: {m:?}");
        // Each of the 16 chunks once: the first came with the stat, the next ones with the
        // other lanes' speculative requests. Lanes beyond the 16th asked past the end.
        let mut starts: Vec<u64> = srv
            .script
            .requests()
            .iter()
            .filter_map(|r| range_start(r.headers.get(http::header::RANGE)?))
            .filter(|&start| start < data.len() as u64)
            .collect();
        starts.sort_unstable();
        let chunks: Vec<u64> = (0..16).map(|i| i << 16).collect();
        assert_eq!(starts, chunks, "{version:?}: {m:?}");
        let first = report.lanes[0].round_trips.ok_or("lane 0 has no count")?;
        assert_eq!(first.total(), 3, "{version:?}: {first}");
        assert!(!first.preconnected);
        for lane in report.lanes.iter().skip(1) {
            if let Some(rt) = lane.round_trips {
                assert!(rt.total() <= 3, "{version:?} lane {}: {rt}", lane.lane);
                // Its first chunk was asked for as soon as its connection was up.
                assert!(!rt.preconnected, "{version:?} lane {}: {rt}", lane.lane);
            }
        }
        let startup = report.startup().ok_or("no start-up line")?;
        assert!(
            startup.starts_with("round trips to first byte: first lane 3"),
            "{startup}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn http1_lanes_request_ahead_on_their_own_connection() -> TestResult {
    let data = pattern(8 << 18);
    let mut script = Script::new(data.clone());
    // Answers that take a while to start, and bodies that take about as long: each lane's
    // next request goes while its body arrives.
    script.head_delay = Some(std::time::Duration::from_millis(30));
    let srv = TestServer::start(Wire::Tls, script).await?;
    let paced = vec![
        Fault::Throttle {
            bytes_per_sec: 2 << 20
        };
        64
    ];
    let proxy = FaultProxy::tcp(srv.addr, paced).await?;
    let mut cfg = client_cfg(HttpVersion::Http1);
    cfg.tls.ca_certs = srv.cert.iter().cloned().collect();
    cfg.lanes = LaneLayout {
        connections: Some(2),
        streams_per_connection: None,
    };
    let url = format!("https://localhost:{}/file", proxy.addr().port());
    let t = Arc::new(HttpTransport::new(&url, cfg)?);
    assert_eq!(
        t.request_ahead(),
        Some(true),
        "HTTP/1.1 pipelines by default"
    );
    let dir = tempfile::tempdir()?;
    let dest = dir.path().join("f");
    let cfg = GetConfig {
        chunk_size: 1 << 18,
        ..GetConfig::default()
    };
    let report = Download::new(t, url, &dest, cfg).run().await?;
    assert_eq!(std::fs::read(&dest)?, data);
    let m = methods(&srv);
    assert!(m.iter().all(|m| m == Method::GET), "{m:?}");
    assert_eq!(
        m.len() as u64,
        8 + report.duplicates,
        "each chunk once, and duplicates"
    );
    // The requests sent ahead rode the lanes' own connections: no second connection, which
    // would start in slow start and idle while its twin streams.
    let conns = srv.script.connections.load(Ordering::SeqCst);
    assert_eq!(conns, 2, "{conns} connections for 2 lanes");
    Ok(())
}

#[test]
fn http2_requests_ahead_only_where_the_connection_window_holds_two_streams_per_lane() -> TestResult
{
    let url = "https://localhost:1/file";
    let mut cfg = client_cfg(HttpVersion::Http2);
    // 8 lanes of 16 MiB streams: 64 MiB could be taken by unread next bodies.
    assert_eq!(HttpTransport::new(url, cfg.clone())?.request_ahead(), None);
    cfg.http2.connection_window = 256 << 20;
    assert_eq!(
        HttpTransport::new(url, cfg.clone())?.request_ahead(),
        Some(true)
    );
    cfg.http2.adaptive_window = true;
    assert_eq!(HttpTransport::new(url, cfg)?.request_ahead(), None);
    let h1 = client_cfg(HttpVersion::Http1);
    assert_eq!(HttpTransport::new(url, h1)?.request_ahead(), Some(true));
    Ok(())
}
