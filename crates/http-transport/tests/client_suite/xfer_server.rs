//! The client against the xfer HTTP server: real files, `Repr-Digest`, `Content-Digest`
//! trailers, the synthetic resource, over HTTP/1.1, h2c and h2 over TLS.

use std::sync::Arc;

use xfer_core::transport::Transport;
use xfer_core::Sha256Digest;
use xfer_http::server::ServerConfig;
use xfer_http::{HttpTransport, HttpVersion};

use crate::client_suite::support::{pattern, TestResult};
use crate::client_suite::{client_cfg, fetch, range_req};
use crate::loopback::Loopback;

struct Running {
    server: Loopback,
    _dir: tempfile::TempDir,
    cert: Option<std::path::PathBuf>,
}

async fn start(
    data: &[u8],
    tls: bool,
) -> Result<Running, Box<dyn std::error::Error + Send + Sync>> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root)?;
    std::fs::write(root.join("data.bin"), data)?;
    let mut cfg = ServerConfig::new(&root);
    cfg.listen = "127.0.0.1:0".parse()?;
    let mut cert = None;
    if tls {
        let ss =
            xfer_common::tls::self_signed(&["localhost".to_string()], &dir.path().join("tls"))?;
        cfg.tls = Some(Arc::new(xfer_common::tls::server_config(
            &ss.cert_path,
            &ss.key_path,
            &[b"h2", b"http/1.1"],
        )?));
        cert = Some(ss.cert_path);
    }
    Ok(Running {
        server: Loopback::start(cfg).await?,
        _dir: dir,
        cert,
    })
}

async fn against_xfer_server(tls: bool, version: HttpVersion, proto: &str) -> TestResult {
    let data = pattern(3 << 20);
    let srv = start(&data, tls).await?;
    let mut cfg = client_cfg(version);
    let url = match &srv.cert {
        Some(c) => {
            cfg.tls.ca_certs = vec![c.clone()];
            format!("https://localhost:{}/data.bin", srv.server.addr.port())
        }
        None => format!("http://{}/data.bin", srv.server.addr),
    };
    let t = HttpTransport::new(&url, cfg)?;
    let info = t.stat().await?;
    assert_eq!(t.protocol(), proto);
    assert_eq!(info.size, data.len() as u64);
    assert!(info.accepts_ranges);
    // The server hashes a file in the background after first sight; a first stat may come
    // before that finishes.
    if let Some(d) = info.sha256 {
        assert_eq!(d, Sha256Digest::of(&data));
    }
    let mut lane = t.open_lane(0).await?;
    for range in [0..(1 << 20), (1 << 20) + 7..(3 << 20) - 1] {
        let (bytes, digest) = fetch(lane.as_mut(), &range_req(&info, range.clone())).await?;
        let want = &data[range.start as usize..range.end as usize];
        assert!(bytes == want);
        assert_eq!(digest, Some(Sha256Digest::of(want)), "{range:?}");
    }
    Ok(())
}

#[tokio::test]
async fn xfer_server_http1() -> TestResult {
    against_xfer_server(false, HttpVersion::Http1, "http/1.1").await
}

#[tokio::test]
async fn xfer_server_h2c() -> TestResult {
    against_xfer_server(false, HttpVersion::Http2, "h2c").await
}

#[tokio::test]
async fn xfer_server_h2_tls() -> TestResult {
    against_xfer_server(true, HttpVersion::Auto, "h2").await
}

#[tokio::test]
async fn xfer_server_synthetic_resource() -> TestResult {
    let srv = start(b"", false).await?;
    let url = format!("http://{}/.xfer/synthetic?size=64M&seed=1", srv.server.addr);
    let t = HttpTransport::new(&url, client_cfg(HttpVersion::Http2))?;
    let info = t.stat().await?;
    assert_eq!(info.size, 64 << 20);
    let spec = xfer_common::synthetic::SyntheticSpec::from_query("size=64M&seed=1")?;
    let mut lane = t.open_lane(0).await?;
    let range = (10 << 20) + 3..(12 << 20);
    let (bytes, digest) = fetch(lane.as_mut(), &range_req(&info, range.clone())).await?;
    let mut want = vec![0u8; bytes.len()];
    spec.fill(range.start, &mut want);
    assert!(bytes == want);
    assert_eq!(digest, Some(Sha256Digest::of(&want)));
    Ok(())
}
