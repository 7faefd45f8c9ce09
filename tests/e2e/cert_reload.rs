//! A certificate renewed on disk reaches the QUIC listener as well as the TCP one after a
//! reload (what SIGHUP does; `crates/cli/tests/serve_reload.rs` sends the signal to a real
//! process over HTTP/1.1): a client trusting only the new certificate is refused before and
//! served after, and a broken renewal leaves the new certificate in use.

use std::path::Path;

use crate::support::{get_args, run_xfer, sha256_file, Fixture, Proto, TestResult};
use xfer::crates::common::tls;
use xfer_test_support::write_random_file;

async fn renewed_certificate_reaches_new_connections(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    let sha = write_random_file(&fx.root().join("a.bin"), 300_000, 5)?;
    let live = fx.servers.live_tls.clone().ok_or("the fixture runs TLS")?;
    let in_use = fx.ca_cert().ok_or("the fixture runs TLS")?;
    let key = in_use.with_file_name("key.pem");

    let renewed = fx.dir.path().join("renewed");
    let made = tls::self_signed(&["127.0.0.1".into(), "localhost".into()], &renewed)?;
    let trust_new = |dest: &Path| {
        let ca = made.cert_path.display().to_string();
        get_args(&fx.url("/a.bin"), dest, &["--ca-cert", &ca])
    };
    let before = fx.out().join("before.bin");
    let out = run_xfer(trust_new(&before)).await?;
    assert_ne!(
        out.status.code(),
        Some(0),
        "{proto:?}: the renewed certificate was served before the reload"
    );

    // Replace both files whole, as a deploy hook does, then reload.
    std::fs::copy(&made.key_path, renewed.join("key.next"))?;
    std::fs::copy(&made.cert_path, renewed.join("cert.next"))?;
    std::fs::rename(renewed.join("key.next"), &key)?;
    std::fs::rename(renewed.join("cert.next"), &in_use)?;
    let failed = live.reload();
    assert!(failed.is_empty(), "{proto:?}: {failed:?}");
    let after = fx.out().join("after.bin");
    let out = run_xfer(trust_new(&after)).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{proto:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sha256_file(&after)?, sha);

    // A key that does not belong to the certificate: refused, the renewed pair stays.
    let other = tls::self_signed(&["localhost".into()], &fx.dir.path().join("other"))?;
    std::fs::copy(&other.key_path, &key)?;
    let failed = live.reload();
    assert!(
        matches!(failed.as_slice(), [tls::TlsError::KeyMismatch { .. }]),
        "{proto:?}: {failed:?}"
    );
    let again = fx.out().join("again.bin");
    let out = run_xfer(trust_new(&again)).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{proto:?}: a broken renewal replaced the certificate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    fx.shutdown().await;
    Ok(())
}

mod renewed {
    use crate::support::{Proto, TestResult};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn http2_tls() -> TestResult {
        super::renewed_certificate_reaches_new_connections(Proto::Http2Tls).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn quic() -> TestResult {
        super::renewed_certificate_reaches_new_connections(Proto::Quic).await
    }
}
