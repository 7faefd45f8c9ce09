//! A service manager stops `xfer serve` with SIGTERM (systemd, Docker, Kubernetes) and a
//! terminal with SIGINT: either way a download in flight must finish whole, new connections
//! must be refused meanwhile, and the server must exit 0, over HTTP/1.1, HTTP/2 and QUIC. The client holds its reads after the first bytes so the response cannot already be
//! sitting complete in socket buffers when the signal arrives (the file is far larger than
//! loopback's buffers), then reads the rest and compares it byte for byte.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use xfer_test_support::signal::{self, Signal};
use xfer_test_support::write_random_file;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const SIZE: u64 = 96 << 20;

/// The server is killed when the test ends, however it ends.
pub(crate) struct ChildGuard(pub(crate) Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `xfer serve --plain` on an ephemeral port; returns it, its address and a channel
/// of its later stderr lines.
fn start_serve(root: &Path) -> Result<(ChildGuard, String, mpsc::Receiver<String>), String> {
    start_serve_with(root, &["--plain"], " at http://")
}

/// Starts `xfer serve` with `args` on an ephemeral port; returns it, the address printed
/// after `marker` and a channel of its later stderr lines.
pub(crate) fn start_serve_with(
    root: &Path,
    args: &[&str],
    marker: &str,
) -> Result<(ChildGuard, String, mpsc::Receiver<String>), String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .arg("serve")
        .arg(root)
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning xfer serve: {e}"))?;
    let stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let guard = ChildGuard(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Generous: a loaded machine can be slow to start the binary; a working one always does.
    let deadline = Duration::from_secs(60);
    loop {
        let line = rx
            .recv_timeout(deadline)
            .map_err(|e| format!("xfer serve printed no address: {e}"))?;
        if let Some(at) = line.split(marker).nth(1) {
            let addr = at.trim().trim_end_matches('/').to_string();
            return Ok((guard, addr, rx));
        }
    }
}

/// Sends `GET path` on a new connection and returns it with the response head read.
pub(crate) fn get(addr: &str, path: &str) -> Result<(BufReader<TcpStream>, u64), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).map_err(|e| e.to_string())?;
    assert!(
        status.starts_with("HTTP/1.1 200"),
        "status line: {status:?}"
    );
    let mut length = None;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<u64>().ok();
            }
        }
    }
    Ok((r, length.ok_or("no Content-Length")?))
}

fn drains_on(sig: Signal, name: &str) -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root)?;
    write_random_file(&root.join("big.bin"), SIZE, 14)?;
    let want = std::fs::read(root.join("big.bin"))?;

    let (mut server, addr, lines) = start_serve(&root)?;
    let (mut body, length) = get(&addr, "/big.bin")?;
    assert_eq!(length, SIZE);
    let mut got = vec![0u8; 1 << 20];
    body.read_exact(&mut got)?;

    signal::send(server.0.id(), sig)?;
    // The server says it is draining before the client reads on: the signal was handled while
    // most of the body was still to be sent.
    let announced = loop {
        let line = lines.recv_timeout(Duration::from_secs(60))?;
        if line.contains("shutting down") {
            break line;
        }
    };
    assert!(
        announced.contains(name),
        "{announced:?} does not name {name}"
    );

    let refused = refused_within(|| TcpStream::connect(&addr).is_err());
    assert!(refused, "new connections still accepted after {name}");

    body.read_to_end(&mut got)?;
    assert_eq!(got.len() as u64, SIZE, "body cut short after {name}");
    assert!(got == want, "body differs from the file after {name}");

    let status = server.0.wait()?;
    assert!(
        status.success(),
        "xfer serve exited with {status} after {name}"
    );
    Ok(())
}

#[test]
fn sigterm_drains_in_flight_download_and_exits_0() -> TestResult {
    drains_on(Signal::TERM, "SIGTERM")
}

#[test]
fn sigint_drains_in_flight_download_and_exits_0() -> TestResult {
    drains_on(Signal::INT, "SIGINT")
}

/// Polls `refused` until it says so, for up to 30 s (the drain announced on stderr comes a
/// moment before the listeners close).
fn refused_within(mut refused: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if refused() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The same drain over TLS with xfer's own client: one request for the whole file over
/// HTTP/2 or QUIC, read slowly enough that the signal lands mid-body.
fn drains_over(quic: bool) -> TestResult {
    use xfer::crates::core::transport::RangeRequest;
    use xfer::{ClientTlsOptions, HttpClientConfig, HttpTransport, HttpVersion, LaneLayout};
    use xfer::{QuicClientConfig, QuicTransport, Transport};

    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root)?;
    write_random_file(&root.join("big.bin"), SIZE, 15)?;
    let want = std::fs::read(root.join("big.bin"))?;
    let cert_dir = dir.path().join("cert");
    let cert_arg = cert_dir.display().to_string();
    let (mut server, addr, lines) = start_serve_with(
        &root,
        &["--self-signed", "--cert-dir", &cert_arg],
        " at https://",
    )?;
    let tls = ClientTlsOptions {
        client_identity: None,
        ca_certs: vec![cert_dir.join("cert.pem")],
        dangerous_insecure: false,
    };
    let one_lane = LaneLayout {
        connections: Some(1),
        streams_per_connection: Some(1),
    };
    let client = move || -> Result<Box<dyn Transport>, xfer::TransferError> {
        Ok(if quic {
            let cfg = QuicClientConfig {
                tls: tls.clone(),
                lanes: one_lane,
                ..QuicClientConfig::default()
            };
            Box::new(QuicTransport::new(&format!("quic://{addr}/big.bin"), cfg)?)
        } else {
            let cfg = HttpClientConfig {
                version: HttpVersion::Http2,
                tls: tls.clone(),
                lanes: one_lane,
                ..HttpClientConfig::default()
            };
            Box::new(HttpTransport::new(&format!("https://{addr}/big.bin"), cfg)?)
        })
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let pid = server.0.id();
    let got = runtime.block_on(async move {
        let t = client()?;
        let info = t.stat().await?;
        let mut lane = t.open_lane(0).await?;
        let whole = RangeRequest {
            range: 0..SIZE,
            expected_size: SIZE,
            want_digest: true,
            validator: info.range_validator().map(str::to_string),
            whole: false,
        };
        let mut body = lane.fetch(&whole).await?;
        let mut got = Vec::new();
        got.extend_from_slice(&body.next_data().await?.ok_or("an empty body")?);

        signal::send(pid, Signal::TERM)?;
        let announced = tokio::task::block_in_place(|| loop {
            match lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line.contains("shutting down") => break Ok(line),
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        })?;
        assert!(announced.contains("SIGTERM"), "{announced:?}");
        // Newcomers are refused while the response in flight goes on.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "new connections still served after SIGTERM"
            );
            if client()?.stat().await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        while let Some(block) = body.next_data().await? {
            got.extend_from_slice(&block);
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(got)
    })?;
    assert_eq!(got.len() as u64, SIZE, "body cut short after SIGTERM");
    assert!(got == want, "body differs from the file after SIGTERM");
    let status = server.0.wait()?;
    assert!(status.success(), "xfer serve exited with {status}");
    Ok(())
}

#[test]
fn sigterm_drains_an_http2_download_and_refuses_newcomers() -> TestResult {
    drains_over(false)
}

#[test]
fn sigterm_drains_a_quic_download_and_refuses_newcomers() -> TestResult {
    drains_over(true)
}
