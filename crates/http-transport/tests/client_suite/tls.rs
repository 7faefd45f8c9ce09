//! TLS trust and ALPN: a CA file is required to trust the test server, a wrong CA fails with a
//! non-retryable `Tls` error, and ALPN decides the protocol under `Auto`.

use std::sync::atomic::Ordering;

use xfer_core::layout::LaneLayout;
use xfer_core::transport::Transport;
use xfer_core::TransferError;
use xfer_http::{HttpClientConfig, HttpTransport, HttpVersion};

use crate::client_suite::support::{pattern, Script, TestResult, TestServer, Wire};
use crate::client_suite::{client_cfg, fetch, range_req};

#[tokio::test]
async fn wrong_ca_fails_with_tls_error() -> TestResult {
    let srv = TestServer::start(Wire::Tls, Script::new(pattern(1000))).await?;
    let other_dir = tempfile::tempdir()?;
    let other = xfer_common::tls::self_signed(&["localhost".to_string()], other_dir.path())?;
    let mut cfg = client_cfg(HttpVersion::Auto);
    cfg.tls.ca_certs = vec![other.cert_path];
    let t = HttpTransport::new(&srv.url("/file"), cfg)?;
    match t.stat().await {
        Err(e @ TransferError::Tls { .. }) => {
            assert!(!e.is_retryable());
            assert!(e.to_string().contains("localhost"), "{e}");
        }
        other => return Err(format!("expected Tls, got {other:?}").into()),
    }
    // The web roots do not know a self-signed certificate either.
    let t = HttpTransport::new(&srv.url("/file"), client_cfg(HttpVersion::Auto))?;
    assert!(matches!(t.stat().await, Err(TransferError::Tls { .. })));
    Ok(())
}

#[tokio::test]
async fn certificate_for_another_name_is_refused() -> TestResult {
    let srv = TestServer::start(Wire::Tls, Script::new(pattern(1000))).await?;
    let mut cfg = client_cfg(HttpVersion::Auto);
    cfg.tls.ca_certs = srv.cert.iter().cloned().collect();
    // The certificate names localhost and 127.0.0.1, not ::1's spelling "ip6-localhost".
    let url = format!("https://127.0.0.2:{}/file", srv.addr.port());
    let t = HttpTransport::new(&url, cfg)?;
    match t.stat().await {
        // 127.0.0.2 is loopback on Linux but the server only listens on 127.0.0.1.
        Err(TransferError::Tls { .. }) | Err(TransferError::Connect { .. }) => Ok(()),
        other => Err(format!("expected Tls or Connect, got {other:?}").into()),
    }
}

#[tokio::test]
async fn dangerous_insecure_accepts_the_unknown_certificate() -> TestResult {
    let data = pattern(5000);
    let srv = TestServer::start(Wire::Tls, Script::new(data.clone())).await?;
    let mut cfg = client_cfg(HttpVersion::Auto);
    cfg.tls.dangerous_insecure = true;
    let t = HttpTransport::new(&srv.url("/file"), cfg)?;
    let info = t.stat().await?;
    let mut lane = t.open_lane(0).await?;
    let (bytes, _) = fetch(lane.as_mut(), &range_req(&info, 0..5000)).await?;
    assert!(bytes == data);
    Ok(())
}

/// `Auto` against a server that only offers http/1.1: the transport speaks HTTP/1.1 and gives
/// each lane its own connection; `Http2` against the same server fails
/// without retry.
#[tokio::test]
async fn alpn_decides_under_auto() -> TestResult {
    let data = pattern(100_000);
    let mut script = Script::new(data.clone());
    script.tls_h1_only = true;
    let srv = TestServer::start(Wire::Tls, script).await?;
    let ca = srv.cert.iter().cloned().collect::<Vec<_>>();
    let mut cfg = HttpClientConfig {
        lanes: LaneLayout {
            connections: Some(2),
            streams_per_connection: None,
        },
        ..client_cfg(HttpVersion::Auto)
    };
    cfg.tls.ca_certs = ca.clone();
    let t = HttpTransport::new(&srv.url("/file"), cfg)?;
    let info = t.stat().await?;
    assert_eq!(t.protocol(), "http/1.1");
    assert_eq!(t.default_lanes(), 2);
    let mut a = t.open_lane(0).await?;
    let mut b = t.open_lane(1).await?;
    let (ra, rb) = (
        range_req(&info, 0..50_000),
        range_req(&info, 50_000..100_000),
    );
    let (x, y) = tokio::join!(fetch(a.as_mut(), &ra), fetch(b.as_mut(), &rb));
    assert!(x?.0 == data[..50_000] && y?.0 == data[50_000..]);
    assert_eq!(srv.script.connections.load(Ordering::SeqCst), 2);

    // A lane opened before any stat learns the protocol by connecting, and its socket is
    // reported under its own number.
    let mut cfg = client_cfg(HttpVersion::Auto);
    cfg.tls.ca_certs = ca.clone();
    let fresh = HttpTransport::new(&srv.url("/file"), cfg)?;
    let mut lane = fresh.open_lane(1).await?;
    assert_eq!(fresh.protocol(), "http/1.1");
    let (bytes, _) = fetch(lane.as_mut(), &range_req(&info, 0..10)).await?;
    assert!(bytes == data[..10]);
    assert_eq!(lane.connection(), 1);
    let indexes: Vec<usize> = fresh.connection_stats().iter().map(|s| s.index).collect();
    assert_eq!(indexes, vec![1]);

    let mut cfg = client_cfg(HttpVersion::Http2);
    cfg.tls.ca_certs = ca;
    let t = HttpTransport::new(&srv.url("/file"), cfg)?;
    match t.stat().await {
        // rustls refuses the handshake itself when no protocol is shared (RFC 7301 §3.2).
        Err(TransferError::Tls { message, .. }) => {
            assert!(message.contains("NoApplicationProtocol"), "{message}")
        }
        Err(TransferError::Protocol { message, .. }) => {
            assert!(message.contains("h2"), "{message}")
        }
        other => return Err(format!("expected Tls or Protocol, got {other:?}").into()),
    }
    Ok(())
}

#[tokio::test]
async fn a_redirect_from_https_to_http_is_refused() -> TestResult {
    let mut script = Script::new(pattern(1000));
    script
        .redirects
        .insert("/file".into(), "http://127.0.0.1:9/file".into());
    let srv = TestServer::start(Wire::Tls, script).await?;
    let mut cfg = client_cfg(HttpVersion::Auto);
    cfg.tls.ca_certs = srv.cert.iter().cloned().collect();
    let t = HttpTransport::new(&srv.url("/file"), cfg)?;
    match t.stat().await {
        Err(e @ TransferError::Tls { .. }) => {
            assert!(!e.is_retryable());
            assert!(e.to_string().contains("drops TLS"), "{e}");
        }
        other => return Err(format!("expected a refused downgrade, got {other:?}").into()),
    }
    Ok(())
}
