//! HTTP third-party copy between two xfer servers on loopback, over TLS: pull and push with a
//! token passed through `TransferHeaderAuthorization`, the error statuses, the concurrency
//! limit, a client that goes away mid-copy, and gfal2 (`gfal-copy --copy-mode pull|push
//! -K ADLER32`, as FTS's url-copy drives it) between the same servers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use xfer::crates::common::tls::{client_config, reuse_or_generate_self_signed};
use xfer::crates::service::{RemotePolicy, TpcConfig};
use xfer::serve::{ServeConfig, ServerTls};
use xfer::{ClientConfig, ClientTlsOptions};
use xfer_test_support::wait_until_async;

use crate::support::{
    require_program, sha256_file, write_random_file, BoxError, Fixture, Proto, TestResult, MIB,
};

const TOKEN: &str = "tpc-token";

const ACCESS: &str = r#"
[[token]]
name = "fts"
token = "tpc-token"
access = "write"
prefix = "/"
"#;

/// Two servers sharing one self-signed certificate, each trusting it for its copies: `a`
/// serves only callers with the token, `b` anonymous reads too.
pub(crate) struct Pair {
    pub(crate) a: Fixture,
    pub(crate) b: Fixture,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    _cert_dir: tempfile::TempDir,
}

pub(crate) async fn pair(tpc: TpcConfig) -> Result<Pair, BoxError> {
    pair_with_access(tpc, ACCESS, ACCESS).await
}

/// [`pair`] with access files of the caller's.
pub(crate) async fn pair_with_access(
    tpc: TpcConfig,
    access_a: &str,
    access_b: &str,
) -> Result<Pair, BoxError> {
    let cert_dir = tempfile::tempdir()?;
    let (made, _) = reuse_or_generate_self_signed(
        &["127.0.0.1".to_string(), "localhost".to_string()],
        cert_dir.path(),
        false,
    )?;
    let setup = |anonymous_read: bool, text: &str| {
        let (cert, key, tpc) = (made.cert_path.clone(), made.key_path.clone(), tpc.clone());
        let text = text.to_string();
        move |cfg: &mut ServeConfig, dir: &Path| {
            cfg.access_file = Some(xfer_test_support::write_access_file(dir, &text));
            cfg.anonymous_read = anonymous_read;
            cfg.uploads = Some(Default::default());
            cfg.tls = ServerTls::Files {
                cert: cert.clone(),
                key,
            };
            cfg.tpc = Some(tpc);
            cfg.tpc_client = ClientConfig::default().with_tls(ClientTlsOptions {
                ca_certs: vec![cert],
                ..Default::default()
            });
        }
    };
    let a = Fixture::start_with(Proto::Http1Tls, setup(false, access_a)).await?;
    let b = Fixture::start_with(Proto::Http1Tls, setup(true, access_b)).await?;
    Ok(Pair {
        a,
        b,
        cert: made.cert_path.clone(),
        key: made.key_path.clone(),
        _cert_dir: cert_dir,
    })
}

/// Quick markers, and loopback allowed: every remote of these tests is on 127.0.0.1, which
/// the default policy refuses.
pub(crate) fn quick() -> TpcConfig {
    loopback(TpcConfig {
        marker_interval: Duration::from_millis(200),
        ..TpcConfig::default()
    })
}

/// `cfg` with `--tpc-allow 127.0.0.0/8`.
pub(crate) fn loopback(cfg: TpcConfig) -> TpcConfig {
    TpcConfig {
        remote_policy: RemotePolicy::allowing(["127.0.0.0/8".parse().expect("a network")]),
        ..cfg
    }
}

/// A `COPY` in flight: the answer's head, its body, and the connection (aborting it closes
/// the socket).
pub(crate) struct Copy {
    pub(crate) status: u16,
    pub(crate) headers: http::HeaderMap,
    retry_after: Option<String>,
    body: Incoming,
    conn: JoinHandle<()>,
}

impl Copy {
    /// The next piece of the body, as text; `None` at its end.
    pub(crate) async fn next_text(&mut self) -> Result<Option<String>, BoxError> {
        loop {
            match self.body.frame().await {
                None => return Ok(None),
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        return Ok(Some(String::from_utf8(data.to_vec())?));
                    }
                }
            }
        }
    }

    /// The body to its end, as text.
    pub(crate) async fn text(self) -> Result<String, BoxError> {
        let bytes = self.body.collect().await?.to_bytes();
        self.conn.abort();
        Ok(String::from_utf8(bytes.to_vec())?)
    }
}

/// Send `COPY path` to `server` over HTTP/1.1 (or HTTP/2 with `h2`) and TLS.
pub(crate) async fn copy(
    server: &Fixture,
    cert: &Path,
    path: &str,
    headers: &[(&str, &str)],
    h2: bool,
) -> Result<Copy, BoxError> {
    request(server, cert, "COPY", path, headers, h2).await
}

/// Send `method path` to `server` over HTTP/1.1 (or HTTP/2 with `h2`) and TLS.
pub(crate) async fn request(
    server: &Fixture,
    cert: &Path,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    h2: bool,
) -> Result<Copy, BoxError> {
    let alpn: &[u8] = if h2 { b"h2" } else { b"http/1.1" };
    let tls = client_config(
        &ClientTlsOptions {
            ca_certs: vec![cert.to_path_buf()],
            ..Default::default()
        },
        &[alpn],
    )?;
    let addr = server.servers.http_addr;
    let tcp = TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await?;
    let mut req = http::Request::builder().method(method);
    req = if h2 {
        req.uri(format!("https://{addr}{path}"))
            .version(http::Version::HTTP_2)
    } else {
        req.uri(path).header("host", addr.to_string())
    };
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Empty::<Bytes>::new())?;
    let (response, conn) = if h2 {
        let (mut send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await?;
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        (send.send_request(req).await?, conn)
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        (send.send_request(req).await?, conn)
    };
    let (parts, body) = response.into_parts();
    Ok(Copy {
        status: parts.status.as_u16(),
        headers: parts.headers.clone(),
        retry_after: parts
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body,
        conn,
    })
}

const BEARER: &str = "Bearer tpc-token";

/// The fields of a `COPY` by the token holder: `which` (`source` or `destination`) and the
/// remote URL, the token for the remote too when `pass_token`, then `extra`.
pub(crate) fn fields<'a>(
    which: &'a str,
    remote: &'a str,
    pass_token: bool,
    extra: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut out = vec![("authorization", BEARER), (which, remote)];
    if pass_token {
        out.push(("TransferHeaderAuthorization", BEARER));
    }
    out.extend_from_slice(extra);
    out
}

/// Check a marker stream: blocks of the standard lines (and XRootD's `RemoteConnections`),
/// counts that never go down, and the last line; returns the last line.
pub(crate) fn check_markers(text: &str) -> String {
    let mut last_count = 0u64;
    let mut lines = text.lines().peekable();
    let mut last = String::new();
    while let Some(line) = lines.next() {
        if line == "Perf Marker" {
            for (i, expected) in [
                "Timestamp",
                "Stripe Index",
                "Stripe Bytes Transferred",
                "Total Stripe Count",
            ]
            .iter()
            .enumerate()
            {
                let l = lines.next().unwrap_or_default();
                let (key, value) = l.trim().split_once(": ").unwrap_or_default();
                assert_eq!(key, *expected, "line {i} of a marker: {l:?} in\n{text}");
                if key == "Stripe Bytes Transferred" {
                    let n: u64 = value.parse().unwrap_or(u64::MAX);
                    assert!(n >= last_count && n != u64::MAX, "{text}");
                    last_count = n;
                }
            }
            // XRootD's `RemoteConnections: tcp:ADDR:PORT,...`, when connections are open.
            let mut next = lines.next();
            if let Some(remote) = next.and_then(|l| l.trim().strip_prefix("RemoteConnections: ")) {
                for c in remote.split(',') {
                    let addr = c.strip_prefix("tcp:").unwrap_or_default();
                    assert!(addr.parse::<SocketAddr>().is_ok(), "{c:?} in\n{text}");
                }
                next = lines.next();
            }
            assert_eq!(next, Some("End"), "{text}");
        } else {
            assert!(lines.peek().is_none(), "text after the last line:\n{text}");
            last = line.to_string();
        }
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pull_and_push_with_a_token_passed_through() -> TestResult {
    let p = pair(quick()).await?;
    let src = p.a.root().join("data/src.bin");
    std::fs::create_dir_all(src.parent().ok_or("no parent")?)?;
    let sha = write_random_file(&src, 40 * MIB + 4321, 71)?;

    // Pull into b, from a, which wants the token: without it the copy fails and leaves nothing.
    let src_url = p.a.url("/data/src.bin");
    let c = copy(
        &p.b,
        &p.cert,
        "/in/pulled.bin",
        &fields("source", &src_url, false, &[]),
        false,
    )
    .await?;
    assert_eq!(c.status, 202);
    let text = c.text().await?;
    let last = check_markers(&text);
    assert_eq!(last, "failure: the remote answered 401", "{text}");
    assert!(!p.b.root().join("in/pulled.bin").exists());
    assert_eq!(staging_names(&p.b.root().join("in"))?, Vec::<String>::new());

    for h2 in [false, true] {
        let c = copy(
            &p.b,
            &p.cert,
            "/in/pulled.bin",
            &fields("source", &src_url, true, &[("X-Number-Of-Streams", "4")]),
            h2,
        )
        .await?;
        assert_eq!(c.status, 202);
        let text = c.text().await?;
        assert_eq!(check_markers(&text), "success: Created", "{text}");
        assert!(text.contains(&format!("Stripe Bytes Transferred: {}\n", 40 * MIB + 4321)));
        assert_eq!(sha256_file(&p.b.root().join("in/pulled.bin"))?, sha);
    }

    // Push from a to b.
    let dest_url = p.b.url("/out/pushed.bin");
    let c = copy(
        &p.a,
        &p.cert,
        "/data/src.bin",
        &fields("destination", &dest_url, true, &[]),
        false,
    )
    .await?;
    assert_eq!(c.status, 202);
    let text = c.text().await?;
    assert_eq!(check_markers(&text), "success: Created", "{text}");
    assert_eq!(sha256_file(&p.b.root().join("out/pushed.bin"))?, sha);

    // Overwrite: F keeps an existing file.
    let c = copy(
        &p.b,
        &p.cert,
        "/in/pulled.bin",
        &fields("source", &src_url, true, &[("overwrite", "F")]),
        false,
    )
    .await?;
    assert_eq!(c.status, 412);
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_answer_before_any_copy() -> TestResult {
    let p = pair(quick()).await?;
    std::fs::write(p.a.root().join("f.bin"), b"hello")?;
    let src = p.a.url("/f.bin");
    type Case<'a> = (Vec<(&'a str, &'a str)>, &'a str, u16);
    let cases: Vec<Case> = vec![
        (
            vec![
                ("authorization", BEARER),
                ("source", &src),
                ("destination", &src),
            ],
            "/x.bin",
            400,
        ),
        (vec![("authorization", BEARER)], "/x.bin", 400),
        (
            vec![("authorization", BEARER), ("source", "ftp://127.0.0.1/f")],
            "/x.bin",
            501,
        ),
        (
            vec![
                ("authorization", BEARER),
                ("source", &src),
                ("TransferHeaderHost", "elsewhere"),
            ],
            "/x.bin",
            400,
        ),
        // Anonymous callers may read b, but never make it push or pull.
        (vec![("destination", &src)], "/x.bin", 401),
        (vec![("source", &src)], "/x.bin", 401),
        (
            vec![("authorization", "Bearer wrong"), ("source", &src)],
            "/x.bin",
            401,
        ),
        // A push of something that is not there.
        (
            vec![("authorization", BEARER), ("destination", &src)],
            "/missing.bin",
            404,
        ),
        (
            vec![("authorization", BEARER), ("source", &src)],
            "/a/%2e%2e/%2e%2e/x.bin",
            403,
        ),
    ];
    for (headers, path, want) in cases {
        let c = copy(&p.b, &p.cert, path, &headers, false).await?;
        let status = c.status;
        let text = c.text().await?;
        assert_eq!(status, want, "{headers:?} {path}: {text}");
    }
    assert_eq!(staging_names(&p.b.root())?, Vec::<String>::new());
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_the_limit_429_and_a_client_that_leaves_cancels_its_copy() -> TestResult {
    let p = pair(TpcConfig {
        max_active: 1,
        ..quick()
    })
    .await?;
    let tarpit = Tarpit::start().await?;
    let slow = format!("http://{}/big.bin", tarpit.addr);
    std::fs::write(p.a.root().join("small.bin"), b"small")?;
    let small = p.a.url("/small.bin");
    // Over HTTP/1.1 the connection closes; over HTTP/2 too, with the stream reset.
    for h2 in [false, true] {
        let first = copy(
            &p.b,
            &p.cert,
            &format!("/in/slow-{h2}.bin"),
            &fields("source", &slow, false, &[]),
            h2,
        )
        .await?;
        assert_eq!(first.status, 202);
        // The copy has started writing its staging file.
        let dir = p.b.root().join("in");
        wait_until_async(Duration::from_secs(20), "a staging file", || {
            staging_names(&dir).is_ok_and(|n| !n.is_empty())
        })
        .await;

        let second = copy(
            &p.b,
            &p.cert,
            "/in/other.bin",
            &fields("source", &slow, false, &[]),
            false,
        )
        .await?;
        assert_eq!(second.status, 429);
        assert!(second.retry_after.is_some());
        drop(second.text().await?);

        // The client goes away: the copy stops, its files go, nothing has the final name.
        let Copy { body, conn, .. } = first;
        drop(body);
        conn.abort();
        wait_until_async(Duration::from_secs(20), "the staging files to go", || {
            staging_names(&dir).is_ok_and(|n| n.is_empty())
        })
        .await;
        assert!(!dir.join(format!("slow-{h2}.bin")).exists());

        // The slot is free again.
        let (mut status, mut text) = (0, String::new());
        // The slot is released a moment after the files are removed.
        for _ in 0..50 {
            let c = copy(
                &p.b,
                &p.cert,
                &format!("/in/small-{h2}.bin"),
                &fields("source", &small, true, &[]),
                false,
            )
            .await?;
            status = c.status;
            text = c.text().await?;
            if status != 429 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(status, 202, "{text}");
        assert_eq!(check_markers(&text), "success: Created");
        assert_eq!(
            std::fs::read(dir.join(format!("small-{h2}.bin")))?,
            b"small"
        );
    }
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

/// Names of uploads and copies in progress under `dir`.
pub(crate) fn staging_names(dir: &Path) -> Result<Vec<String>, BoxError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.starts_with(".xfer-upload.") {
            out.push(name);
        }
    }
    Ok(out)
}

/// A plain-HTTP source that says it holds 1 GiB, then sends 64 KiB of each range and stalls.
struct Tarpit {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Tarpit {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Tarpit {
    async fn start() -> Result<Self, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(tarpit_connection(sock));
            }
        });
        Ok(Self { addr, task })
    }
}

async fn tarpit_connection(mut sock: TcpStream) {
    const SIZE: u64 = 1 << 30;
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        buf.drain(..head_end);
        let common = "etag: \"tarpit\"\r\naccept-ranges: bytes\r\n";
        if head.starts_with("HEAD ") {
            let answer = format!("HTTP/1.1 200 OK\r\n{common}content-length: {SIZE}\r\n\r\n");
            if sock.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            continue;
        }
        let range = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("range: bytes=")
                    .map(str::to_string)
            })
            .and_then(|r| {
                let (a, b) = r.trim().split_once('-')?;
                Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
            })
            .unwrap_or((0, SIZE - 1));
        let answer = format!(
            "HTTP/1.1 206 Partial Content\r\n{common}content-range: bytes {}-{}/{SIZE}\r\ncontent-length: {}\r\n\r\n",
            range.0,
            range.1,
            range.1 - range.0 + 1
        );
        if sock.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        let _ = sock.write_all(&vec![0u8; 64 * 1024]).await;
        // Stall until the peer gives up.
        let _ = sock.read(&mut chunk).await;
        return;
    }
}

/// `gfal-copy` as FTS's url-copy runs it: pull and push between the two xfer servers, the
/// token through `BEARER_TOKEN` (gfal2 sends it to the endpoint it asks and, as
/// `TransferHeaderAuthorization`, for the other), the adler32 of both ends compared.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gfal_copy_pull_and_push() -> TestResult {
    let Some(gfal) = require_program("gfal-copy", &["/usr/bin/gfal-copy"], "gfal2-util-scripts")
    else {
        return Ok(());
    };
    let Some(openssl) = require_program("openssl", &["/usr/bin/openssl"], "openssl") else {
        return Ok(());
    };
    if !gfal_http_plugin() {
        return Ok(());
    }
    let version = gfal_output(&gfal, &["--version"], &[]).await?;
    println!("gfal-copy --version: {}", version.trim());

    let p = pair(loopback(TpcConfig::default())).await?;
    // davix trusts the CAs of a hashed directory (X509_CERT_DIR), as on a grid node.
    let ca_dir = p.a.dir.path().join("ca");
    std::fs::create_dir_all(&ca_dir)?;
    let hash = Command::new(&openssl)
        .args(["x509", "-hash", "-noout", "-in"])
        .arg(&p.cert)
        .output()?;
    let hash = String::from_utf8(hash.stdout)?.trim().to_string();
    assert!(!hash.is_empty(), "openssl printed no subject hash");
    std::fs::copy(&p.cert, ca_dir.join(format!("{hash}.0")))?;

    let size = 24 * MIB + 777;
    let src = p.a.root().join("store/src.bin");
    std::fs::create_dir_all(src.parent().ok_or("no parent")?)?;
    let sha = write_random_file(&src, size, 72)?;
    let env = [
        ("X509_CERT_DIR", ca_dir.display().to_string()),
        ("BEARER_TOKEN", TOKEN.to_string()),
        ("GFAL_PYTHONBIN", "/usr/bin/python3".to_string()),
    ];
    gfal_copy_both_ways(&gfal, &p, &env, &sha).await?;
    p.a.shutdown().await;
    p.b.shutdown().await;
    Ok(())
}

/// gfal-copy's arguments for a verified third-party copy, as FTS gives them.
pub(crate) fn copy_args<'a>(mode: &'a str, src: &'a str, dst: &'a str) -> [&'a str; 8] {
    ["--copy-mode", mode, "-K", "ADLER32", "-t", "120", src, dst]
}

/// `gfal-copy --copy-mode pull`, then `push`, of a's `/store/src.bin` to b's `/store/pulled.bin`
/// and `/store/pushed.bin`, with ADLER32 verification; both copies must hold `sha`.
pub(crate) async fn gfal_copy_both_ways(
    gfal: &Path,
    p: &Pair,
    env: &[(&str, String)],
    sha: &str,
) -> Result<(), BoxError> {
    for (mode, dest) in [("pull", "/store/pulled.bin"), ("push", "/store/pushed.bin")] {
        let (src, dst) = (p.a.url("/store/src.bin"), p.b.url(dest));
        let args = copy_args(mode, &src, &dst);
        let out = gfal_output(gfal, &args, env).await?;
        eprintln!("gfal-copy --copy-mode {mode}: {}", out.trim());
        assert_eq!(
            sha256_file(&p.b.root().join(&dest[1..]))?,
            sha,
            "gfal-copy --copy-mode {mode}"
        );
    }
    Ok(())
}

/// Whether gfal2's http plugin is installed; under `CI=true` it must be.
pub(crate) fn gfal_http_plugin() -> bool {
    let plugin = Path::new("/usr/lib/x86_64-linux-gnu/gfal2-plugins/libgfal_plugin_http.so");
    plugin.exists()
        || glob_plugin()
        || xfer_test_support::gate::absent(
            "gfal2 http plugin",
            "gfal2's http plugin is missing (apt-get install gfal2-plugin-http)",
        )
}

/// The http plugin under any multiarch directory.
fn glob_plugin() -> bool {
    std::fs::read_dir("/usr/lib").is_ok_and(|d| {
        d.filter_map(Result::ok).any(|e| {
            e.path()
                .join("gfal2-plugins/libgfal_plugin_http.so")
                .exists()
        })
    })
}

/// Run gfal with `args`, off the runtime the servers run on; its output, or an error with
/// both streams.
pub(crate) async fn gfal_output(
    bin: &Path,
    args: &[&str],
    env: &[(&str, String)],
) -> Result<String, BoxError> {
    let mut cmd = Command::new(bin);
    cmd.args(args).stdin(Stdio::null());
    cmd.env("GFAL_PYTHONBIN", "/usr/bin/python3");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!(
            "{} {args:?} failed ({}):\n{text}",
            bin.display(),
            out.status
        )
        .into());
    }
    Ok(text)
}
