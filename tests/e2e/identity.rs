//! The server's TLS identity as clients see it: a `--self-signed` server keeps its
//! certificate across a restart (a download running across it completes), a certificate
//! made by `openssl req -x509` (CA:TRUE) is trusted with `--ca-cert`, and a client that
//! trusts nothing it was given is told about `--ca-cert`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer::{ClientConfig, ClientTlsOptions, Download, GetConfig, HttpVersion, TransferError};
use xfer_test_support::fault_proxy::{Fault, FaultProxy};

use crate::support::{
    free_port, require_program, sha256_file, start_server, wait_received, write_random_file,
    xfer_bin, BoxError, ChildGuard, Fixture, Proto, TestResult, MIB,
};

fn spawn_serve(root: &Path, cert_dir: &Path, addr: SocketAddr) -> Result<ChildGuard, BoxError> {
    let mut cmd = Command::new(xfer_bin());
    cmd.arg("serve")
        .arg(root)
        .args(["--self-signed", "--no-quic", "--listen", &addr.to_string()])
        // Little buffered ahead of the client, so killing the server cuts transfers short.
        .args(["--tcp-send-buffer", "64KiB"])
        .arg("--cert-dir")
        .arg(cert_dir);
    start_server(cmd, addr)
}

/// Finding 3: the server is killed mid-download and started again with the same
/// `--cert-dir`; the client, which trusts the certificate it was given before, resumes on
/// new connections and completes. A new certificate at the restart fails every handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn download_survives_a_server_restart() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let cert_dir = dir.path().join("cert");
    std::fs::create_dir(&root)?;
    let size = 24 * MIB;
    let expected = write_random_file(&root.join("big.bin"), size, 31)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let mut server = spawn_serve(&root, &cert_dir, addr)?;

    // The first connections (the client's eight lanes) crawl, so the restart lands
    // mid-transfer; later ones (after the restart) run at full speed.
    let proxy = FaultProxy::tcp(
        addr,
        vec![
            Fault::Throttle {
                bytes_per_sec: 256 * 1024
            };
            8
        ],
    )
    .await?;
    let mut client = ClientConfig::default().with_tls(ClientTlsOptions {
        ca_certs: vec![cert_dir.join("cert.pem")],
        dangerous_insecure: false,
        client_identity: None,
    });
    client.http.version = HttpVersion::Http1;
    let url = format!("https://127.0.0.1:{}/big.bin", proxy.addr().port());
    let dest = dir.path().join("big.copy");
    let get = GetConfig {
        chunk_size: MIB,
        ..GetConfig::default()
    };
    let download = Download::new(xfer::transport_for(&url, &client)?, &url, &dest, get);
    let progress = download.progress();
    let running = tokio::spawn(download.run());

    wait_received(&progress, &running, MIB, Duration::from_secs(120)).await;
    drop(server);
    let connections_before_restart = proxy.stats().connections();
    server = spawn_serve(&root, &cert_dir, addr)?;

    let report = tokio::time::timeout(Duration::from_secs(300), running).await???;
    assert_eq!(report.size, size);
    assert_eq!(sha256_file(&dest)?, expected);
    // The old server is gone, so every connection opened after the restart reached the new
    // one; its answers were accepted only because it names the file as the old one did.
    // (Whether the kill also cut a chunk short depends on how much of it the old server had
    // already handed to its kernel, so retries are not asserted.)
    assert!(
        proxy.stats().connections() > connections_before_restart,
        "no request reached the restarted server: {report:?}"
    );
    drop(server);
    Ok(())
}

/// `openssl req -x509` with `subjectAltName`, as a user would make one: basicConstraints
/// CA:TRUE. Returns (cert, key).
fn openssl_cert(
    dir: &Path,
    san: &str,
) -> Result<Option<(std::path::PathBuf, std::path::PathBuf)>, BoxError> {
    let Some(openssl) = require_program("openssl", &["/usr/bin/openssl"], "openssl") else {
        return Ok(None);
    };
    std::fs::create_dir_all(dir)?;
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new(openssl)
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", &format!("subjectAltName={san}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()?;
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"),
        "the test needs a CA:TRUE certificate"
    );
    Ok(Some((cert, key)))
}

async fn tls_server(dir: &Path, cert: &Path, key: &Path) -> Result<Servers, BoxError> {
    let root = dir.join("root");
    std::fs::create_dir_all(&root)?;
    let tls = ServerTls::Files {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
    };
    let mut cfg = ServeConfig::new(&root, tls);
    cfg.http.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.quic_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    Ok(Servers::start(cfg).await?)
}

fn trusting(cert: &Path) -> ClientConfig {
    ClientConfig::default().with_tls(ClientTlsOptions {
        ca_certs: vec![cert.to_path_buf()],
        dangerous_insecure: false,
        client_identity: None,
    })
}

fn urls(servers: &Servers, host: &str, path: &str) -> Vec<String> {
    let quic = servers.quic_addr.map(|a| a.port()).unwrap_or_default();
    vec![
        format!("https://{host}:{}{path}", servers.http_addr.port()),
        format!("quic://{host}:{quic}{path}"),
    ]
}

/// A CA:TRUE self-signed certificate given with `--ca-cert` is trusted as the server's own,
/// over HTTPS and QUIC; its name is still checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn openssl_self_signed_ca_cert_is_trusted() -> TestResult {
    let dir = tempfile::tempdir()?;
    let Some((cert, key)) = openssl_cert(&dir.path().join("tls"), "DNS:localhost,IP:127.0.0.1")?
    else {
        return Ok(());
    };
    let servers = tls_server(dir.path(), &cert, &key).await?;
    let expected = write_random_file(&dir.path().join("root/f.bin"), 3 * MIB + 5, 7)?;
    for (i, url) in urls(&servers, "127.0.0.1", "/f.bin")
        .into_iter()
        .enumerate()
    {
        let dest = dir.path().join(format!("copy{i}"));
        let report = xfer::download(&url, &dest, &trusting(&cert), GetConfig::default())
            .await
            .map_err(|e| format!("{url}: {e:?}"))?;
        assert_eq!(report.size, 3 * MIB + 5);
        assert_eq!(sha256_file(&dest)?, expected, "{url}");
    }

    // The same kind of certificate for another name: refused for the name, not trusted blindly.
    let Some((other, other_key)) = openssl_cert(&dir.path().join("other"), "DNS:other.example")?
    else {
        return Ok(());
    };
    let wrong = tls_server(&dir.path().join("w"), &other, &other_key).await?;
    for url in urls(&wrong, "127.0.0.1", "/f.bin") {
        let err = xfer::transport_for(&url, &trusting(&other))?
            .stat()
            .await
            .err()
            .ok_or_else(|| format!("{url}: a certificate for other.example was accepted"))?;
        assert!(matches!(err, TransferError::Tls { .. }), "{url}: {err}");
        assert!(!err.to_string().contains("--ca-cert"), "{url}: {err}");
    }
    servers.shutdown().await;
    wrong.shutdown().await;
    Ok(())
}

/// A client without the server's certificate is told how to trust it, over HTTPS and QUIC.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_issuer_names_ca_cert() -> TestResult {
    for proto in [Proto::Http1Tls, Proto::Quic] {
        let fx = Fixture::start(proto).await?;
        write_random_file(&fx.root().join("f.bin"), 1000, 1)?;
        let url = fx.url("/f.bin");
        let err = xfer::transport_for(&url, &ClientConfig::default())?
            .stat()
            .await
            .err()
            .ok_or_else(|| format!("{url}: an unknown certificate was accepted"))?;
        assert!(matches!(err, TransferError::Tls { .. }), "{url}: {err}");
        let message = err.to_string();
        assert!(
            message.contains("--ca-cert FILE") && message.contains("XFER_CA_CERT"),
            "{url}: {message}"
        );
        fx.shutdown().await;
    }
    Ok(())
}
