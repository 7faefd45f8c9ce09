//! Failure classification: what the scheduler is told when bodies are short, the remote
//! changed, statuses are bad, nobody listens, or nothing arrives.

use std::time::Duration;

use bytes::Bytes;
use xfer_core::layout::LaneLayout;
use xfer_core::transport::Transport;
use xfer_core::{Sha256Digest, TransferError};
use xfer_http::{HttpClientConfig, HttpTransport, HttpVersion};

use crate::client_suite::support::{pattern, Script, TestResult, TestServer, Wire};
use crate::client_suite::{client_cfg, fetch, range_req};

const SIZE: usize = 200_000;

async fn truncated_over(wire: Wire, version: HttpVersion, want_digest: bool) -> TestResult {
    let mut script = Script::new(pattern(SIZE));
    script.truncate_to = Some(1000);
    let srv = TestServer::start(wire, script).await?;
    let t = HttpTransport::new(&srv.url("/file"), client_cfg(version))?;
    let info = t.stat().await?;
    let mut lane = t.open_lane(0).await?;
    let mut req = range_req(&info, 100..50_100);
    req.want_digest = want_digest;
    match fetch(lane.as_mut(), &req).await {
        Err(e @ TransferError::Truncated { expected, got, .. }) => {
            assert_eq!(expected, 50_000);
            assert_eq!(got, 1000);
            assert!(e.is_retryable());
        }
        other => {
            return Err(
                format!("{wire:?} digest={want_digest}: expected Truncated, got {other:?}").into(),
            )
        }
    }
    // The lane recovers: the next request gets a fresh connection if it needs one.
    let mut req = range_req(&info, 0..500);
    req.want_digest = want_digest;
    let (bytes, _) = fetch(lane.as_mut(), &req).await?;
    assert_eq!(bytes.len(), 500);
    Ok(())
}

#[tokio::test]
async fn truncated_body_is_detected_http1_content_length() -> TestResult {
    truncated_over(Wire::Http1, HttpVersion::Http1, false).await
}

#[tokio::test]
async fn truncated_body_is_detected_http1_chunked() -> TestResult {
    truncated_over(Wire::Http1, HttpVersion::Http1, true).await
}

#[tokio::test]
async fn truncated_body_is_detected_h2c() -> TestResult {
    truncated_over(Wire::H2c, HttpVersion::Http2, false).await?;
    truncated_over(Wire::H2c, HttpVersion::Http2, true).await
}

/// The ETag changed between stat and fetch: the server (honouring If-Range) answers 200 with
/// the new whole resource, which must not be taken for the range.
#[tokio::test]
async fn etag_change_is_remote_changed() -> TestResult {
    for (wire, version) in [
        (Wire::Http1, HttpVersion::Http1),
        (Wire::H2c, HttpVersion::Http2),
    ] {
        let srv = TestServer::start(wire, Script::new(pattern(SIZE))).await?;
        let t = HttpTransport::new(&srv.url("/file"), client_cfg(version))?;
        let info = t.stat().await?;
        srv.script.set_etag("\"v2\"");
        let mut lane = t.open_lane(0).await?;
        match fetch(lane.as_mut(), &range_req(&info, 10..20)).await {
            Err(e @ TransferError::RemoteChanged { .. }) => {
                assert!(!e.is_retryable());
                assert!(e.to_string().contains("/file"), "{e}");
            }
            other => return Err(format!("expected RemoteChanged, got {other:?}").into()),
        }
    }
    Ok(())
}

/// The size changed (no validator to catch it): the 206's Content-Range total tells.
#[tokio::test]
async fn size_change_is_remote_changed() -> TestResult {
    let srv = TestServer::start(Wire::Http1, Script::new(pattern(SIZE))).await?;
    let t = HttpTransport::new(&srv.url("/file"), client_cfg(HttpVersion::Http1))?;
    let mut info = t.stat().await?;
    info.etag = None;
    if let Ok(mut d) = srv.script.data.lock() {
        *d = Bytes::from(vec![0u8; SIZE + 1]);
    }
    let mut lane = t.open_lane(0).await?;
    match fetch(lane.as_mut(), &range_req(&info, 0..10)).await {
        Err(TransferError::RemoteChanged { what, .. }) => {
            assert!(what.contains(&(SIZE + 1).to_string()), "{what}")
        }
        other => return Err(format!("expected RemoteChanged, got {other:?}").into()),
    }
    Ok(())
}

#[tokio::test]
async fn not_found_is_permanent_and_503_is_retryable() -> TestResult {
    let mut script = Script::new(pattern(SIZE));
    script.statuses.insert("/busy".into(), 503);
    script.statuses.insert("/gone".into(), 410);
    let srv = TestServer::start(Wire::Http1, script).await?;
    for (path, status, retry) in [
        ("/missing", 404, false),
        ("/gone", 410, false),
        ("/busy", 503, true),
    ] {
        let t = HttpTransport::new(&srv.url(path), client_cfg(HttpVersion::Http1))?;
        match t.stat().await {
            Err(e @ TransferError::Status { status: s, .. }) => {
                assert_eq!(s, status);
                assert_eq!(e.is_retryable(), retry, "{e}");
                assert!(e.to_string().contains(path), "{e}");
                assert!(e.to_string().contains(&srv.addr.port().to_string()), "{e}");
            }
            other => return Err(format!("{path}: expected Status, got {other:?}").into()),
        }
        // The same classification for a range request on a lane.
        let mut lane = t.open_lane(0).await?;
        let req = xfer_core::transport::RangeRequest {
            range: 0..10,
            expected_size: SIZE as u64,
            want_digest: false,
            validator: None,
            whole: false,
        };
        match fetch(lane.as_mut(), &req).await {
            Err(e @ TransferError::Status { status: s, .. }) => {
                assert_eq!(s, status);
                assert_eq!(e.is_retryable(), retry);
            }
            other => return Err(format!("{path}: expected Status, got {other:?}").into()),
        }
    }
    Ok(())
}

/// The transport hands the trailer through as sent; checking it is the engine's job, and a
/// wrong one must reach it unchanged.
#[tokio::test]
async fn wrong_trailer_digest_is_passed_through() -> TestResult {
    let data = pattern(SIZE);
    let mut script = Script::new(data.clone());
    script.bad_digest = true;
    let srv = TestServer::start(Wire::Http1, script).await?;
    let t = HttpTransport::new(&srv.url("/file"), client_cfg(HttpVersion::Http1))?;
    let info = t.stat().await?;
    let mut lane = t.open_lane(0).await?;
    let (bytes, digest) = fetch(lane.as_mut(), &range_req(&info, 0..100)).await?;
    assert!(bytes == data[..100]);
    assert_eq!(digest, Some(Sha256Digest::of(b"something else")));
    Ok(())
}

#[tokio::test]
async fn refused_connection_is_a_retryable_connect_error() -> TestResult {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let t = HttpTransport::new(
        &format!("http://{addr}/file"),
        client_cfg(HttpVersion::Http1),
    )?;
    match t.stat().await {
        Err(e @ TransferError::Connect { .. }) => {
            assert!(e.is_retryable());
            assert!(e.to_string().contains(&addr.to_string()), "{e}");
        }
        other => return Err(format!("expected Connect, got {other:?}").into()),
    }
    Ok(())
}

/// A server that accepts and then says nothing: the idle timeout turns the wait into an error.
#[tokio::test]
async fn silent_server_times_out() -> TestResult {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let t = HttpTransport::new(
        &format!("http://{addr}/file"),
        HttpClientConfig {
            idle_timeout: Duration::from_millis(300),
            ..client_cfg(HttpVersion::Http1)
        },
    )?;
    let r = t.stat().await;
    hold.abort();
    match r {
        Err(e @ TransferError::Timeout { .. }) => assert!(e.is_retryable()),
        other => return Err(format!("expected Timeout, got {other:?}").into()),
    }
    Ok(())
}

#[tokio::test]
async fn bad_configuration_is_refused_up_front() {
    let bad = HttpClientConfig {
        lanes: LaneLayout {
            connections: Some(0),
            streams_per_connection: None,
        },
        ..HttpClientConfig::default()
    };
    assert!(matches!(
        HttpTransport::new("http://127.0.0.1:1/x", bad),
        Err(TransferError::Config(m)) if m.contains("connections")
    ));
    let mut cc = HttpClientConfig::default();
    cc.tcp.congestion = Some("nosuchcc".into());
    assert!(matches!(
        HttpTransport::new("http://127.0.0.1:1/x", cc),
        Err(TransferError::Config(m)) if m.contains("nosuchcc")
    ));
    assert!(matches!(
        HttpTransport::new("ftp://127.0.0.1/x", HttpClientConfig::default()),
        Err(TransferError::Config(_))
    ));
}

/// A shared HTTP/2 connection that goes silent mid-body: the lane times out, the connection is
/// retired, and the next request on any lane of that slot gets a fresh connection.
#[tokio::test]
async fn stalled_h2_connection_is_replaced() -> TestResult {
    let data = pattern(SIZE);
    let mut script = Script::new(data.clone());
    script.stall_bodies_on_connection = Some(1);
    let srv = TestServer::start(Wire::H2c, script).await?;
    let t = HttpTransport::new(
        &srv.url("/file"),
        HttpClientConfig {
            idle_timeout: Duration::from_millis(300),
            ..client_cfg(HttpVersion::Http2)
        },
    )?;
    let info = t.stat().await?;
    let mut lane = t.open_lane(0).await?;
    match fetch(lane.as_mut(), &range_req(&info, 0..1000)).await {
        Err(e @ TransferError::Timeout { .. }) => assert!(e.is_retryable()),
        other => return Err(format!("expected Timeout, got {other:?}").into()),
    }
    let mut other_lane = t.open_lane(1).await?;
    let (bytes, _) = fetch(other_lane.as_mut(), &range_req(&info, 0..1000)).await?;
    assert!(bytes == data[..1000]);
    assert_eq!(
        srv.script
            .connections
            .load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    Ok(())
}
