//! The happy paths: stat, ranged fetches with trailer digests, lane layout per protocol,
//! fallbacks for servers without HEAD or without ranges, redirects.

use std::sync::atomic::Ordering;

use xfer_core::layout::LaneLayout;
use xfer_core::transport::{RangeRequest, Transport};
use xfer_core::Sha256Digest;
use xfer_http::{HttpClientConfig, HttpTransport, HttpVersion};

use crate::client_suite::support::{pattern, Script, TestResult, TestServer, Wire};
use crate::client_suite::{client_cfg, fetch, range_req};

const SIZE: usize = 1_000_003;

#[tokio::test]
async fn stat_reports_size_validators_and_repr_digest() -> TestResult {
    let data = pattern(SIZE);
    let srv = TestServer::start(Wire::Http1, Script::new(data.clone())).await?;
    let t = HttpTransport::new(&srv.url("/file"), client_cfg(HttpVersion::Http1))?;
    let info = t.stat().await?;
    assert_eq!(info.size, SIZE as u64);
    assert_eq!(info.etag.as_deref(), Some("\"v1\""));
    assert_eq!(info.range_validator(), Some("\"v1\""));
    assert!(info.last_modified.is_some());
    assert!(info.accepts_ranges);
    assert_eq!(info.sha256, Some(Sha256Digest::of(&data)));
    assert_eq!(info.url, srv.url("/file"));
    let head = &srv.script.requests()[0];
    assert_eq!(head.method, http::Method::HEAD);
    assert_eq!(
        head.headers
            .get("want-repr-digest")
            .and_then(|v| v.to_str().ok()),
        Some("sha-256")
    );
    assert_eq!(t.protocol(), "http/1.1");
    Ok(())
}

async fn ranged_fetch_over(wire: Wire, version: HttpVersion, expect_proto: &str) -> TestResult {
    let data = pattern(SIZE);
    let srv = TestServer::start(wire, Script::new(data.clone())).await?;
    let mut cfg = client_cfg(version);
    if let Some(cert) = &srv.cert {
        cfg.tls.ca_certs = vec![cert.clone()];
    }
    let t = HttpTransport::new(&srv.url("/file"), cfg)?;
    let info = t.stat().await?;
    assert_eq!(t.protocol(), expect_proto);
    let mut lane = t.open_lane(0).await?;
    for range in [0..1, 1000..300_000, (SIZE as u64 - 17)..SIZE as u64] {
        let req = range_req(&info, range.clone());
        let (bytes, digest) = fetch(lane.as_mut(), &req).await?;
        let want = &data[range.start as usize..range.end as usize];
        assert!(bytes == want, "bytes {range:?} differ");
        assert_eq!(
            digest,
            Some(Sha256Digest::of(want)),
            "trailer for {range:?}"
        );
    }
    let get = srv
        .script
        .requests()
        .into_iter()
        .find(|r| r.method == http::Method::GET)
        .ok_or("no GET logged")?;
    let h = |n: &str| {
        get.headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(h("range").as_deref(), Some("bytes=0-0"));
    assert_eq!(h("if-range").as_deref(), Some("\"v1\""));
    assert_eq!(h("want-content-digest").as_deref(), Some("sha-256"));
    assert_eq!(h("te").as_deref(), Some("trailers"));
    // stat and all fetches rode one connection.
    assert_eq!(srv.script.connections.load(Ordering::SeqCst), 1);
    let stats = t.connection_stats();
    assert_eq!(stats.len(), 1);
    let host = if srv.cert.is_some() {
        "localhost"
    } else {
        "127.0.0.1"
    };
    assert_eq!(stats[0].peer, format!("{host}:{}", srv.addr.port()));
    assert!(stats[0].rtt_us.is_some() && stats[0].cwnd_bytes.is_some());
    assert!(stats[0].bytes_received.unwrap_or(0) > 299_000, "{stats:?}");
    assert!(stats[0].congestion.is_some());
    Ok(())
}

#[tokio::test]
async fn ranged_fetch_http1() -> TestResult {
    ranged_fetch_over(Wire::Http1, HttpVersion::Http1, "http/1.1").await
}

#[tokio::test]
async fn ranged_fetch_h2c_prior_knowledge() -> TestResult {
    ranged_fetch_over(Wire::H2c, HttpVersion::Http2, "h2c").await
}

#[tokio::test]
async fn ranged_fetch_h2_over_tls_by_alpn() -> TestResult {
    ranged_fetch_over(Wire::Tls, HttpVersion::Auto, "h2").await
}

#[tokio::test]
async fn ranged_fetch_http1_over_tls() -> TestResult {
    ranged_fetch_over(Wire::Tls, HttpVersion::Http1, "http/1.1").await
}

/// Lanes map onto connections as configured: one connection each for HTTP/1.1, K streams on
/// each of M connections for HTTP/2. Counted at the server's accept loop.
#[tokio::test]
async fn lanes_map_onto_connections() -> TestResult {
    let data = pattern(SIZE);
    for (wire, cfg, lanes, want_conns) in [
        (
            Wire::Http1,
            HttpClientConfig {
                lanes: LaneLayout {
                    connections: Some(3),
                    streams_per_connection: None,
                },
                ..client_cfg(HttpVersion::Http1)
            },
            3,
            3,
        ),
        (
            Wire::H2c,
            HttpClientConfig {
                lanes: LaneLayout {
                    connections: Some(2),
                    streams_per_connection: Some(3),
                },
                ..client_cfg(HttpVersion::Http2)
            },
            6,
            2,
        ),
    ] {
        let srv = TestServer::start(wire, Script::new(data.clone())).await?;
        let t = HttpTransport::new(&srv.url("/file"), cfg)?;
        let info = t.stat().await?;
        assert_eq!(t.default_lanes(), lanes);
        let mut all = Vec::new();
        for i in 0..lanes {
            all.push(t.open_lane(i).await?);
        }
        let chunk = SIZE as u64 / lanes as u64;
        let jobs = all.iter_mut().enumerate().map(|(i, lane)| {
            let range = (i as u64 * chunk)..((i as u64 + 1) * chunk);
            let req = range_req(&info, range.clone());
            async move {
                let (bytes, _) = fetch(lane.as_mut(), &req).await?;
                Ok::<_, xfer_core::TransferError>((range, bytes))
            }
        });
        for r in futures_util::future::join_all(jobs).await {
            let (range, bytes) = r?;
            assert!(bytes == data[range.start as usize..range.end as usize]);
        }
        assert_eq!(
            srv.script.connections.load(Ordering::SeqCst),
            want_conns,
            "{wire:?} {:?}",
            t.connection_stats()
        );
        let labels: Vec<String> = all.iter().map(|l| l.label()).collect();
        let conns: Vec<usize> = all.iter().map(|l| l.connection()).collect();
        if wire == Wire::H2c {
            assert_eq!(conns, vec![0, 0, 0, 1, 1, 1]);
            assert_eq!(labels[4], "conn 1 / stream slot 1");
        } else {
            assert_eq!(conns, vec![0, 1, 2]);
            assert_eq!(labels[2], "conn 2");
        }
        assert_eq!(t.connection_stats().len(), want_conns);
    }
    Ok(())
}

#[tokio::test]
async fn head_refused_falls_back_to_one_byte_probe() -> TestResult {
    let data = pattern(SIZE);
    let mut script = Script::new(data.clone());
    script.allow_head = false;
    let srv = TestServer::start(Wire::Http1, script).await?;
    let t = HttpTransport::new(&srv.url("/file"), client_cfg(HttpVersion::Http1))?;
    let info = t.stat().await?;
    assert_eq!(info.size, SIZE as u64);
    assert!(info.accepts_ranges);
    assert_eq!(info.etag.as_deref(), Some("\"v1\""));
    assert_eq!(info.sha256, Some(Sha256Digest::of(&data)));
    let reqs = srv.script.requests();
    assert_eq!(reqs[1].method, http::Method::GET);
    assert_eq!(
        reqs[1].headers.get("range").and_then(|v| v.to_str().ok()),
        Some("bytes=0-0")
    );
    Ok(())
}

#[tokio::test]
async fn missing_accept_ranges_is_probed() -> TestResult {
    let mut script = Script::new(pattern(4096));
    script.send_accept_ranges = false;
    let srv = TestServer::start(Wire::Http1, script).await?;
    let t = HttpTransport::new(&srv.url("/file"), client_cfg(HttpVersion::Http1))?;
    let info = t.stat().await?;
    assert!(
        info.accepts_ranges,
        "a 206 to the probe proves range support"
    );
    assert_eq!(srv.script.requests().len(), 2);
    Ok(())
}

/// A server that ignores Range: stat says so, a whole-resource request works, and a ranged
/// request is refused as unexpected rather than misread.
#[tokio::test]
async fn server_without_ranges() -> TestResult {
    let data = pattern(SIZE);
    let mut script = Script::new(data.clone());
    script.honour_ranges = false;
    script.send_accept_ranges = false;
    let srv = TestServer::start(Wire::Http1, script).await?;
    let t = HttpTransport::new(&srv.url("/file"), client_cfg(HttpVersion::Http1))?;
    let info = t.stat().await?;
    assert!(!info.accepts_ranges);
    assert_eq!(info.size, SIZE as u64);
    let mut lane = t.open_lane(0).await?;
    let whole = RangeRequest {
        range: 0..info.size,
        expected_size: info.size,
        want_digest: false,
        validator: None,
        whole: true,
    };
    let (bytes, _) = fetch(lane.as_mut(), &whole).await?;
    assert!(bytes == data);
    let whole_log = srv.script.requests().pop().ok_or("no request")?;
    assert!(whole_log.headers.get("range").is_none());
    let ranged = RangeRequest {
        range: 10..20,
        expected_size: info.size,
        want_digest: false,
        validator: None,
        whole: false,
    };
    match lane.fetch(&ranged).await {
        Err(e @ xfer_core::TransferError::RangesIgnored { .. }) => {
            assert!(e.to_string().contains("ignores ranges"), "{e}");
            assert!(!e.is_retryable(), "{e}");
        }
        Err(e) => return Err(format!("expected RangesIgnored, got {e}").into()),
        Ok(_) => return Err("a 200 to a range request was accepted".into()),
    }
    Ok(())
}

#[tokio::test]
async fn redirects_are_followed_by_stat_and_by_range_requests() -> TestResult {
    let data = pattern(SIZE);
    let mut script = Script::new(data.clone());
    script.redirects.insert("/dir/old".into(), "../file".into());
    script.redirects.insert("/loop".into(), "/loop".into());
    let srv = TestServer::start(Wire::Http1, script).await?;

    let t = HttpTransport::new(&srv.url("/dir/old"), client_cfg(HttpVersion::Http1))?;
    let info = t.stat().await?;
    assert_eq!(info.url, srv.url("/file"));
    assert_eq!(t.url(), srv.url("/file"));
    assert_eq!(info.size, SIZE as u64);

    // A lane of a transport that never ran stat meets the redirect on its range GET.
    let t2 = HttpTransport::new(&srv.url("/dir/old"), client_cfg(HttpVersion::Http1))?;
    let mut lane = t2.open_lane(0).await?;
    let (bytes, digest) = fetch(lane.as_mut(), &range_req(&info, 5..50)).await?;
    assert!(bytes == data[5..50]);
    assert_eq!(digest, Some(Sha256Digest::of(&data[5..50])));

    let t3 = HttpTransport::new(
        &srv.url("/loop"),
        HttpClientConfig {
            max_redirects: 3,
            ..client_cfg(HttpVersion::Http1)
        },
    )?;
    match t3.stat().await {
        Err(e @ xfer_core::TransferError::Status { status: 302, .. }) => {
            assert!(!e.is_retryable());
            assert!(e.to_string().contains("3 redirects"), "{e}");
        }
        other => return Err(format!("expected a redirect-limit error, got {other:?}").into()),
    }
    Ok(())
}

/// The TCP knobs reach the client's sockets: the report shows the granted receive buffer and
/// the requested congestion control, read back from the kernel.
#[tokio::test]
async fn tcp_settings_reach_the_socket() -> TestResult {
    let Some(available) = xfer_http::tcp::available_congestion() else {
        eprintln!("skipping: no congestion control list in procfs");
        return Ok(());
    };
    let Some(algo) = available.iter().find(|a| a.as_str() != "bbr").cloned() else {
        return Ok(());
    };
    let srv = TestServer::start(Wire::Http1, Script::new(pattern(10_000))).await?;
    let mut cfg = client_cfg(HttpVersion::Http1);
    cfg.tcp.recv_buffer = Some(1 << 20);
    cfg.tcp.congestion = Some(algo.clone());
    let t = HttpTransport::new(&srv.url("/file"), cfg)?;
    t.stat().await?;
    let stats = t.connection_stats();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].recv_buffer, Some(1 << 20));
    assert_eq!(stats[0].congestion.as_deref(), Some(algo.as_str()));
    Ok(())
}
