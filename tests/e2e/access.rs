//! Access control through every codec and the real `xfer` binary: tokens from a file map to
//! scopes; missing, unknown and out-of-scope credentials are refused with 401 or 403 and
//! nothing is written.

use std::path::Path;

use crate::support::{
    each_transport, run_xfer, sha256_file, write_random_file, Fixture, Proto, TestResult,
};

const ACCESS: &str = r#"
[[token]]
name = "analysis"
token = "read-data-token"
access = "read"
prefix = "/data"
"#;

async fn fixture(proto: Proto) -> Result<Fixture, crate::support::BoxError> {
    let fx = Fixture::start_with(proto, |cfg, dir| {
        cfg.access_file = Some(xfer_test_support::write_access_file(dir, ACCESS));
        cfg.anonymous_read = false;
    })
    .await?;
    std::fs::create_dir_all(fx.root().join("data"))?;
    std::fs::create_dir_all(fx.root().join("private"))?;
    Ok(fx)
}

pub(crate) fn get_args(fx: &Fixture, path: &str, dest: &Path, token: Option<&Path>) -> Vec<String> {
    let mut a = vec![
        "get".to_string(),
        fx.url(path),
        "-o".into(),
        dest.display().to_string(),
        "--quiet".into(),
    ];
    if let Some(ca) = fx.ca_cert() {
        a.push("--ca-cert".into());
        a.push(ca.display().to_string());
    }
    if let Some(t) = token {
        a.push("--token-file".into());
        a.push(t.display().to_string());
    }
    a
}

async fn tokens_map_to_scopes(proto: Proto) -> TestResult {
    let fx = fixture(proto).await?;
    let sha = write_random_file(&fx.root().join("data/a.bin"), 3_000_000, 5)?;
    write_random_file(&fx.root().join("private/b.bin"), 100_000, 6)?;
    let good = fx.dir.path().join("good.token");
    std::fs::write(&good, "read-data-token\n")?;
    let bad = fx.dir.path().join("bad.token");
    std::fs::write(&bad, "guessed-token\n")?;

    // The right token, in scope.
    let dest = fx.out().join("a.bin");
    let out = run_xfer(get_args(&fx, "/data/a.bin", &dest, Some(&good))).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{proto:?}: {stderr}");
    assert_eq!(sha256_file(&dest)?, sha);
    assert!(
        !stderr.contains("read-data-token"),
        "{proto:?}: token in output: {stderr}"
    );

    // No token, a wrong token, the right token out of its scope.
    for (token, path, status) in [
        (None, "/data/a.bin", "401"),
        (Some(bad.as_path()), "/data/a.bin", "401"),
        (Some(good.as_path()), "/private/b.bin", "403"),
    ] {
        let dest = fx.out().join("refused.bin");
        let out = run_xfer(get_args(&fx, path, &dest, token)).await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{proto:?} {path}: {stderr}");
        assert!(
            stderr.contains(status),
            "{proto:?} {path}: want {status}: {stderr}"
        );
        assert!(!dest.exists(), "{proto:?} {path}");
        assert!(!stderr.contains("guessed-token") && !stderr.contains("read-data-token"));
    }
    fx.shutdown().await;
    Ok(())
}

/// A tree is listed and fetched with the token (every request carries it, the listing's and
/// each file's); without it the listing is refused with 401 and nothing is written.
async fn tree_with_a_token(proto: Proto) -> TestResult {
    let fx = fixture(proto).await?;
    std::fs::create_dir_all(fx.root().join("data/sub"))?;
    let sha = write_random_file(&fx.root().join("data/sub/a.bin"), 300_000, 7)?;
    write_random_file(&fx.root().join("data/b.bin"), 1_000, 8)?;
    let good = fx.dir.path().join("good.token");
    std::fs::write(&good, "read-data-token\n")?;

    let dest = fx.out().join("tree");
    let out = run_xfer(get_args(&fx, "/data/", &dest, Some(&good))).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{proto:?}: {stderr}");
    assert_eq!(sha256_file(&dest.join("sub/a.bin"))?, sha);
    assert!(dest.join("b.bin").is_file());

    let refused = fx.out().join("refused");
    let out = run_xfer(get_args(&fx, "/data/", &refused, None)).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{proto:?}: {stderr}");
    assert!(stderr.contains("401"), "{proto:?}: {stderr}");
    let left: Vec<_> = std::fs::read_dir(&refused)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    assert!(left.is_empty(), "{proto:?}: {left:?}");
    fx.shutdown().await;
    Ok(())
}

each_transport! {
    tokens => tokens_map_to_scopes;
    tree_tokens => tree_with_a_token;
}

/// A CA, and a client certificate it signed for `name`, written as PEM into `dir`:
/// `ca.pem`, `client.pem`, `client.key`.
fn client_pki(dir: &Path, name: &str) -> Result<(), crate::support::BoxError> {
    use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![name.to_string()])?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &ca, &ca_key)?;
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    std::fs::write(dir.join("client.pem"), cert.pem())?;
    std::fs::write(dir.join("client.key"), key.serialize_pem())?;
    Ok(())
}

pub(crate) const CERT_ACCESS: &str = r#"
[[certificate]]
name = "pipeline"
dns = ["pipeline.example.org"]
access = "read"
prefix = "/data"
"#;

/// A client certificate from the server's client CA maps to its scope, like a token; none
/// at all is anonymous (refused here), and one from another CA fails the handshake.
async fn client_certificates_map_to_scopes(proto: Proto) -> TestResult {
    let fx = Fixture::start_with(proto, |cfg, dir| {
        client_pki(dir, "pipeline.example.org").expect("client certificates");
        cfg.access_file = Some(xfer_test_support::write_access_file(dir, CERT_ACCESS));
        cfg.anonymous_read = false;
        cfg.client_ca = Some(dir.join("ca.pem"));
    })
    .await?;
    std::fs::create_dir_all(fx.root().join("data"))?;
    std::fs::create_dir_all(fx.root().join("private"))?;
    let sha = write_random_file(&fx.root().join("data/a.bin"), 2_000_000, 7)?;
    write_random_file(&fx.root().join("private/b.bin"), 1000, 8)?;
    let other = tempfile::tempdir()?;
    client_pki(other.path(), "pipeline.example.org")?;

    let with_cert = |dir: &Path, path: &str, dest: &Path| {
        let mut a = get_args(&fx, path, dest, None);
        a.extend([
            "--client-cert".into(),
            dir.join("client.pem").display().to_string(),
            "--client-key".into(),
            dir.join("client.key").display().to_string(),
        ]);
        a
    };
    let dest = fx.out().join("a.bin");
    let out = run_xfer(with_cert(fx.dir.path(), "/data/a.bin", &dest)).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{proto:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sha256_file(&dest)?, sha);

    let dest = fx.out().join("b.bin");
    let out = run_xfer(with_cert(fx.dir.path(), "/private/b.bin", &dest)).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{proto:?}: {stderr}");
    assert!(stderr.contains("403"), "{proto:?}: {stderr}");

    let out = run_xfer(get_args(&fx, "/data/a.bin", &fx.out().join("c.bin"), None)).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("401"),
        "{proto:?}: no certificate is anonymous: {stderr}"
    );

    let out = run_xfer(with_cert(
        other.path(),
        "/data/a.bin",
        &fx.out().join("d.bin"),
    ))
    .await?;
    assert_ne!(
        out.status.code(),
        Some(0),
        "{proto:?}: a certificate from another CA"
    );
    assert!(!fx.out().join("d.bin").exists() && !fx.out().join("b.bin").exists());
    fx.shutdown().await;
    Ok(())
}

mod mutual_tls {
    use crate::support::{Proto, TestResult};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn http1_tls() -> TestResult {
        super::client_certificates_map_to_scopes(Proto::Http1Tls).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn http2_tls() -> TestResult {
        super::client_certificates_map_to_scopes(Proto::Http2Tls).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn quic() -> TestResult {
        super::client_certificates_map_to_scopes(Proto::Quic).await
    }
}
