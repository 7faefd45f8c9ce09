//! A renewed host certificate needs no restart: after SIGHUP a new client of a real
//! `xfer serve` is shown the new certificate, a download begun under the old one completes
//! byte for byte, and a broken new certificate leaves the old one in use.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConnection, StreamOwned};
use xfer::crates::common::tls::{self, ClientTlsOptions};
use xfer_test_support::signal::Signal;
use xfer_test_support::write_random_file;

use crate::serve_signal::start_serve_with;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
type TlsStream = StreamOwned<ClientConnection, TcpStream>;

const SIZE: u64 = 48 << 20;

/// A certificate for localhost written into `dir`; returns its cert and key paths.
fn new_cert(dir: &Path) -> Result<(PathBuf, PathBuf), Box<dyn std::error::Error + Send + Sync>> {
    let made = tls::self_signed(&["localhost".into(), "127.0.0.1".into()], dir)?;
    Ok((made.cert_path, made.key_path))
}

/// A TLS connection to `addr` that accepts any certificate: the test compares the leaf
/// itself instead of trusting it.
fn connect(addr: &str) -> Result<TlsStream, Box<dyn std::error::Error + Send + Sync>> {
    let opts = ClientTlsOptions {
        dangerous_insecure: true,
        ..Default::default()
    };
    let config = tls::client_config(&opts, &[b"http/1.1"])?;
    let name = ServerName::try_from("localhost")?;
    let conn = ClientConnection::new(Arc::new(config), name)?;
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut stream = StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(stream)
}

fn leaf(stream: &TlsStream) -> Result<CertificateDer<'static>, String> {
    stream
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.clone().into_owned())
        .ok_or_else(|| "the server presented no certificate".to_string())
}

fn presented(
    addr: &str,
) -> Result<CertificateDer<'static>, Box<dyn std::error::Error + Send + Sync>> {
    Ok(leaf(&connect(addr)?)?)
}

fn der(path: &Path) -> Result<CertificateDer<'static>, Box<dyn std::error::Error + Send + Sync>> {
    Ok(tls::load_certs(path)?.remove(0))
}

fn sighup(pid: u32) -> TestResult {
    xfer_test_support::signal::send(pid, Signal::HUP)?;
    Ok(())
}

/// Polls new connections until one is shown `want`, for up to a minute.
fn wait_for_leaf(addr: &str, want: &CertificateDer<'_>) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if presented(addr)? == *want {
            return Ok(());
        }
        assert!(
            Instant::now() < deadline,
            "new connections never saw the renewed certificate"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a line of the server's stderr containing `needle`: the event that it acted.
fn wait_for_line(lines: &mpsc::Receiver<String>, needle: &str) -> TestResult {
    loop {
        let line = lines.recv_timeout(Duration::from_secs(60))?;
        if line.contains(needle) {
            return Ok(());
        }
    }
}

#[test]
fn sighup_renews_the_certificate_while_a_download_completes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root)?;
    write_random_file(&root.join("big.bin"), SIZE, 37)?;
    let want = std::fs::read(root.join("big.bin"))?;
    let (cert, key) = new_cert(&dir.path().join("live"))?;
    let old = der(&cert)?;

    let cert_arg = cert.to_string_lossy().into_owned();
    let key_arg = key.to_string_lossy().into_owned();
    let (server, addr, lines) = start_serve_with(
        &root,
        &[
            "--tls-cert",
            &cert_arg,
            "--tls-key",
            &key_arg,
            "--no-quic",
            // Small buffers, so the body is still being sent when the certificate changes.
            "--tcp-send-buffer",
            "256KiB",
        ],
        " at https://",
    )?;
    assert_eq!(presented(&addr)?, old);

    // A download under the old certificate, read only in part.
    let mut body = connect(&addr)?;
    write!(
        body,
        "GET /big.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    body.flush()?;
    let mut body = BufReader::new(body);
    let mut length = None;
    loop {
        let mut line = String::new();
        body.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line
            .strip_prefix("content-length:")
            .or(line.strip_prefix("Content-Length:"))
        {
            length = v.trim().parse::<u64>().ok();
        }
    }
    assert_eq!(length, Some(SIZE));
    let mut got = vec![0u8; 1 << 20];
    body.read_exact(&mut got)?;

    // Renew on disk (each file replaced whole, as a deploy hook would), then SIGHUP.
    let (new_cert_path, new_key_path) = new_cert(&dir.path().join("renewed"))?;
    let new = der(&new_cert_path)?;
    assert_ne!(new, old);
    std::fs::rename(&new_key_path, &key)?;
    std::fs::rename(&new_cert_path, &cert)?;
    sighup(server.0.id())?;
    wait_for_leaf(&addr, &new)?;

    // The download begun under the old certificate finishes whole.
    assert_eq!(leaf(body.get_ref())?, old);
    body.read_to_end(&mut got)?;
    assert_eq!(
        got.len() as u64,
        SIZE,
        "the download was cut short by the reload"
    );
    assert!(got == want, "the download differs from the file");

    // A broken renewal: the old certificate stays.
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\ntruncated")?;
    sighup(server.0.id())?;
    wait_for_line(&lines, "not reloaded")?;
    assert_eq!(
        presented(&addr)?,
        new,
        "a broken certificate replaced the good one"
    );
    Ok(())
}
