//! What an operator watches (docs/monitoring.md), checked against the real tools: a Debian
//! `prometheus` scraping `xfer serve --metrics-listen` and answering a query with the bytes a
//! transfer moved, `promtool` on the exposition and on the documented alert rule, the
//! `--access-log` line of each kind of request, and the status page rendered by headless
//! Chromium during a transfer.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{
    free_port, get_args, require_program, run_xfer, start_server, write_random_file, xfer_bin,
    BoxError, ChildGuard, TestResult, MIB,
};

const TOKEN: &str = "monitoring-upload-token";

/// An `xfer serve --plain` child with metrics, an access log, uploads for one token and
/// third-party copies allowed to loopback.
struct Monitored {
    _child: ChildGuard,
    addr: SocketAddr,
    metrics: SocketAddr,
    root: PathBuf,
    access_log: PathBuf,
    dir: tempfile::TempDir,
}

impl Monitored {
    fn start(listen_ip: &str, extra: &[&str]) -> Result<Self, BoxError> {
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("root");
        std::fs::create_dir(&root)?;
        let access = xfer_test_support::write_access_file(
            dir.path(),
            &xfer_test_support::token_entry("uploader", TOKEN, "write", "/"),
        );
        let access_log = dir.path().join("access.log");
        let addr: SocketAddr = format!("{listen_ip}:{}", free_port()?).parse()?;
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let mut cmd = Command::new(xfer_bin());
        cmd.arg("serve")
            .arg(&root)
            .args(["--plain", "--listen", &addr.to_string()])
            .args(["--metrics-listen", &metrics.to_string()])
            .arg("--access-log")
            .arg(&access_log)
            .arg("--access")
            .arg(&access)
            .args(["--allow-upload", "--tpc-allow", "127.0.0.0/8"])
            .args(extra);
        let connect = if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        };
        let child = start_server(cmd, connect)?;
        Ok(Self {
            _child: child,
            addr: connect,
            metrics,
            root,
            access_log,
            dir,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// `GET target` over HTTP/1.1 with `Connection: close`: the status and the body.
fn http_get(addr: SocketAddr, target: &str) -> Result<(u16, String), BoxError> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no response head from {addr}{target}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line from {addr}{target}: {head}"))?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Run `program` with `args` and `stdin`, killing it after `limit`.
fn run_with_input(
    program: &Path,
    args: &[&str],
    stdin: &[u8],
    limit: Duration,
) -> Result<std::process::Output, BoxError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(stdin)?;
    }
    let deadline = Instant::now() + limit;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("{} ran longer than {limit:?}", program.display()).into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(child.wait_with_output()?)
}

/// The alert rules file of docs/monitoring.md (its one `yaml` block).
fn documented_rules() -> Result<String, BoxError> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/monitoring.md"))?;
    let start = doc
        .find("```yaml\n")
        .ok_or("docs/monitoring.md has no yaml block")?
        + "```yaml\n".len();
    let len = doc[start..].find("```").ok_or("unterminated yaml block")?;
    Ok(doc[start..start + len].to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_bytes_a_transfer_moved() -> TestResult {
    let (Some(prometheus), Some(promtool)) = (
        require_program("prometheus", &[], "prometheus"),
        require_program("promtool", &[], "prometheus"),
    ) else {
        return Ok(());
    };
    let server = Monitored::start("127.0.0.1", &[])?;
    let size = 5 * MIB + 17;
    write_random_file(&server.root.join("data.bin"), size, 71)?;

    // Prometheus first, so the series exist before and after the transfer.
    let prom_port = free_port()?;
    let prom_dir = server.dir.path().join("prometheus");
    std::fs::create_dir(&prom_dir)?;
    let config = prom_dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: xfer\n    static_configs:\n      - targets: ['{}']\n",
            server.metrics
        ),
    )?;
    let prom_addr = SocketAddr::from(([127, 0, 0, 1], prom_port));
    let mut cmd = Command::new(&prometheus);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            prom_dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={prom_addr}"));
    let _prom = start_server(cmd, prom_addr)?;

    let out = run_xfer(get_args(
        &server.url("/data.bin"),
        &server.dir.path().join("got.bin"),
        &["--json"],
    ))
    .await?;
    assert!(out.status.success(), "xfer get failed: {out:?}");

    let query = percent_encoding::utf8_percent_encode(
        "sum(xfer_transferred_bytes_total{direction=\"out\"})",
        percent_encoding::NON_ALPHANUMERIC,
    )
    .to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let seen = loop {
        let (status, body) = http_get(prom_addr, &format!("/api/v1/query?query={query}"))?;
        assert_eq!(status, 200, "Prometheus query failed: {body}");
        let v: serde_json::Value = serde_json::from_str(&body)?;
        let value = v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok());
        if value == Some(size as f64) {
            break value;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never saw {size} bytes sent; last answer: {body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(seen, Some(size as f64));

    // The exposition passes Prometheus's own linter, and the request was counted.
    let (status, exposition) = http_get(server.metrics, "/metrics")?;
    assert_eq!(status, 200);
    let lint = run_with_input(
        &promtool,
        &["check", "metrics"],
        exposition.as_bytes(),
        Duration::from_secs(30),
    )?;
    assert!(
        lint.status.success() && lint.stdout.is_empty() && lint.stderr.is_empty(),
        "promtool check metrics: {lint:?}"
    );
    assert!(
        exposition.lines().any(|l| l
            .starts_with("xfer_requests_total{method=\"GET\",status=\"2xx\"} ")
            && !l.ends_with(" 0")),
        "no GET counted:\n{exposition}"
    );
    assert!(!exposition.contains("data.bin"), "a path in a label");

    // The alert rule the docs show is valid.
    let rules = server.dir.path().join("rules.yml");
    std::fs::write(&rules, documented_rules()?)?;
    let rules_s = rules.display().to_string();
    let checked = run_with_input(
        &promtool,
        &["check", "rules", &rules_s],
        b"",
        Duration::from_secs(30),
    )?;
    assert!(
        checked.status.success(),
        "promtool check rules: {checked:?}"
    );
    Ok(())
}

/// The access log's lines, once `done` says they are all there.
async fn log_lines(
    path: &Path,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Result<Vec<serde_json::Value>, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // Only whole lines: the writer may be half-way through one.
        let lines = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(|l| serde_json::from_str(l).map_err(|e| format!("bad line {l:?}: {e}").into()))
            .collect::<Result<Vec<serde_json::Value>, BoxError>>()?;
        if done(&lines) {
            return Ok(lines);
        }
        assert!(
            Instant::now() < deadline,
            "the access log is not complete:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn curl(curl: &Path, args: &[&str]) -> Result<String, BoxError> {
    let out = Command::new(curl).args(args).output()?;
    assert!(out.status.success(), "curl {args:?}: {out:?}");
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn is_rfc3339_utc(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() == 24
        && s.ends_with('Z')
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_has_one_line_per_upload_download_refusal_and_copy() -> TestResult {
    let Some(curl_bin) = require_program("curl", &[], "curl") else {
        return Ok(());
    };
    let server = Monitored::start("127.0.0.1", &[])?;
    let local = server.dir.path().join("local.bin");
    let size = MIB + 5;
    write_random_file(&local, size, 72)?;
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let local_s = local.display().to_string();

    let status_of = |extra: &[&str], path: &str| -> Result<String, BoxError> {
        let url = server.url(path);
        let mut args = vec!["-sS", "-o", "/dev/null", "-w", "%{http_code}"];
        args.extend_from_slice(extra);
        args.push(&url);
        curl(&curl_bin, &args)
    };
    assert_eq!(
        status_of(&["-H", &bearer, "-T", &local_s], "/up.bin")?,
        "201",
        "upload"
    );
    assert_eq!(status_of(&[], "/up.bin")?, "200", "download");
    assert_eq!(
        status_of(&["-T", &local_s], "/anon.bin")?,
        "401",
        "anonymous upload"
    );
    // The copy pulls another file: its own GETs of the source are logged too, apart.
    write_random_file(&server.root.join("src.bin"), size, 74)?;
    let source = format!("Source: {}", server.url("/src.bin"));
    let markers = curl(
        &curl_bin,
        &[
            "-sS",
            "-X",
            "COPY",
            "-H",
            &bearer,
            "-H",
            &source,
            &server.url("/copied.bin"),
        ],
    )?;
    assert!(markers.contains("success"), "copy: {markers}");
    assert!(server.root.join("copied.bin").is_file());

    // The copy's own GETs of the source add lines of their own.
    let lines = log_lines(&server.access_log, |lines| {
        lines.len() >= 4 && lines.iter().any(|l| l["method"] == "COPY")
    })
    .await?;
    assert!(
        lines
            .iter()
            .any(|l| l["path"] == "/src.bin" && l["method"] == "GET"),
        "the copy's reads of its source are not logged: {lines:#?}"
    );
    let find = |method: &str, path: &str| -> Result<&serde_json::Value, BoxError> {
        let found: Vec<_> = lines
            .iter()
            .filter(|l| l["method"] == method && l["path"] == path)
            .collect();
        match found.as_slice() {
            [one] => Ok(one),
            other => Err(format!("{} lines for {method} {path}: {lines:#?}", other.len()).into()),
        }
    };
    for l in &lines {
        assert!(
            is_rfc3339_utc(l["time"].as_str().unwrap_or("")),
            "time: {l}"
        );
        assert_eq!(l["protocol"], "http/1.1", "{l}");
        assert!(
            l["client"].as_str().unwrap_or("").starts_with("127.0.0.1:"),
            "{l}"
        );
        assert!(l["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{l}");
        assert!(
            !l.to_string().contains(TOKEN),
            "the secret is in the log: {l}"
        );
    }
    let up = find("PUT", "/up.bin")?;
    assert_eq!(up["status"], 201);
    assert_eq!(up["bytes_in"], size);
    assert_eq!(up["identity"]["kind"], "token");
    assert_eq!(up["identity"]["name"], "uploader");
    let down = find("GET", "/up.bin")?;
    assert_eq!(down["status"], 200);
    assert_eq!(down["bytes_out"], size);
    assert_eq!(down["complete"], true);
    let refused = find("PUT", "/anon.bin")?;
    assert_eq!(refused["status"], 401);
    assert_eq!(refused["identity"]["kind"], "anonymous");
    assert_eq!(refused["bytes_in"], 0);
    let copy = find("COPY", "/copied.bin")?;
    assert_eq!(copy["status"], 202);
    assert_eq!(copy["remote"], server.url("/src.bin"));
    assert_eq!(copy["copy_result"], true);
    assert_eq!(copy["bytes_out"], size);
    assert_eq!(copy["identity"]["name"], "uploader");
    // Whichever line carries a checksum names its algorithm and what it covers.
    for l in &lines {
        if let Some(c) = l.get("checksum") {
            assert!(
                ["adler32", "md5", "sha-256"].contains(&c["algorithm"].as_str().unwrap_or("")),
                "{l}"
            );
            assert!(c["value"].as_str().is_some_and(|v| !v.is_empty()), "{l}");
            assert!(
                ["resource", "body"].contains(&c["of"].as_str().unwrap_or("")),
                "{l}"
            );
        }
    }
    Ok(())
}

/// Reads `path` from the server slowly, until told to stop, so that a transfer is in progress.
fn slow_download(
    addr: SocketAddr,
    path: &str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    std::thread::spawn(move || {
        let mut got = 0;
        let Ok(mut s) = TcpStream::connect(addr) else {
            return got;
        };
        if s.write_all(request.as_bytes()).is_err() {
            return got;
        }
        let mut buf = vec![0u8; 16 * 1024];
        while !stop.load(Ordering::Relaxed) {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n as u64,
            }
            // A reader slower than the server: the transfer stays in progress, with a rate.
            std::thread::sleep(Duration::from_millis(20));
        }
        got
    })
}

/// Run headless Chromium with `args` (plus the flags a container needs), killing it after a
/// minute.
fn chromium(bin: &Path, args: &[&str]) -> Result<std::process::Output, BoxError> {
    let mut all = vec![
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
    ];
    all.extend_from_slice(args);
    run_with_input(bin, &all, b"", Duration::from_secs(60))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_in_chromium_shows_a_running_transfer() -> TestResult {
    let Some(browser) = require_program("chromium", &["/usr/bin/chromium"], "chromium") else {
        return Ok(());
    };
    // On every address, so that a caller from a non-loopback address can be tried too.
    // A small send buffer keeps the slow download running for half a minute: with the
    // default one the kernel would take most of the file at once.
    let server = Monitored::start("0.0.0.0", &["--tcp-send-buffer", "256KiB"])?;
    write_random_file(&server.root.join("big.bin"), 64 * MIB, 73)?;
    let stop = Arc::new(AtomicBool::new(false));
    let reader = slow_download(server.addr, "/big.bin", Arc::clone(&stop));

    // The transfer is listed, and the chart has samples to draw.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = http_get(server.addr, "/.well-known/xfer/status.json")?;
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body)?;
        let listed = v["transfers"].as_array().is_some_and(|t| {
            t.iter()
                .any(|t| t["path"] == "/big.bin" && t["bytes_out"].as_u64() > Some(0))
        });
        let samples = v["throughput"]["out"].as_array().map_or(0, Vec::len);
        if listed && samples >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the transfer never showed: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The download's connection is open, and counted so.
    let (_, exposition) = http_get(server.metrics, "/metrics")?;
    let open = exposition
        .lines()
        .find_map(|l| l.strip_prefix("xfer_connections_active{protocol=\"http/1.1\"} "))
        .and_then(|v| v.parse::<i64>().ok());
    assert!(
        open >= Some(1),
        "no open HTTP/1.1 connection counted:\n{exposition}"
    );

    let page = server.url("/.well-known/xfer/status");
    let dom = chromium(&browser, &["--dump-dom", &page])?;
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    let transfers = dom
        .split("<tbody id=\"transfers\">")
        .nth(1)
        .and_then(|rest| rest.split("</tbody>").next())
        .ok_or_else(|| format!("no transfers table in the page:\n{dom}"))?;
    assert!(
        transfers.contains("/big.bin"),
        "the transfer is not shown:\n{transfers}"
    );
    assert!(
        transfers.contains("<td>GET</td>") && transfers.contains("<td>http/1.1</td>"),
        "{transfers}"
    );
    assert!(
        transfers.contains("64.0 MiB"),
        "the size is not shown:\n{transfers}"
    );
    assert!(transfers.contains("/s</td>"), "no rate:\n{transfers}");
    // The page's own polls ended normally: none of them is listed as a failure.
    let errors = dom
        .split("<tbody id=\"errors\">")
        .nth(1)
        .and_then(|rest| rest.split("</tbody>").next())
        .ok_or("no errors table in the page")?;
    assert!(
        !errors.contains("/.well-known/xfer/"),
        "status requests listed as errors:\n{errors}"
    );
    let chart = dom.split("id=\"line-out\"").nth(1).ok_or("no chart")?;
    let points = chart
        .split("points=\"")
        .nth(1)
        .and_then(|p| p.split('"').next())
        .unwrap_or("");
    assert!(
        points.split(' ').count() >= 3,
        "the chart drew nothing: {points:?}"
    );

    let shot = server.dir.path().join("status.png");
    let shot_arg = format!("--screenshot={}", shot.display());
    chromium(&browser, &["--window-size=900,640", &shot_arg, &page])?;
    let png = std::fs::read(&shot)?;
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "not a PNG screenshot"
    );
    if let Some(keep) = std::env::var_os("XFER_STATUS_SCREENSHOT") {
        std::fs::copy(&shot, keep)?;
    }

    // A caller that is not on loopback is refused, when this host has such an address.
    let outside = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|u| u.connect("192.0.2.1:9").map(|()| u))
        .and_then(|u| u.local_addr())
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
    match outside {
        Some(ip) => {
            let (status, _) = http_get(
                SocketAddr::new(ip, server.addr.port()),
                "/.well-known/xfer/status.json",
            )?;
            assert_eq!(status, 403, "the status page was served to {ip}");
        }
        None => {
            eprintln!("no non-loopback address here: the refusal of outside callers is not tried")
        }
    }
    stop.store(true, Ordering::Relaxed);
    let got = reader.join().map_err(|_| "reader panicked")?;
    assert!(got > 0);
    Ok(())
}

/// The core answers the status page, so `xfer/1` over QUIC serves the same documents as HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_is_served_over_quic_too() -> TestResult {
    use xfer::serve::{ServeConfig, ServerTls, Servers};
    use xfer_quic::wire;

    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root)?;
    let mut cfg = ServeConfig::new(
        root,
        ServerTls::SelfSigned {
            dir: dir.path().join("cert"),
            names: vec!["127.0.0.1".into()],
        },
    );
    cfg.http.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.quic_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let servers = Servers::start(cfg).await?;
    let ca = servers
        .self_signed
        .as_ref()
        .ok_or("no self-signed certificate")?
        .cert_path
        .clone();
    let tls = xfer_common::tls::client_config(
        &xfer_common::tls::ClientTlsOptions {
            client_identity: None,
            ca_certs: vec![ca],
            dangerous_insecure: false,
        },
        &[],
    )?;
    let quic_addr = servers.quic_addr.ok_or("QUIC is not running")?;
    let (_endpoint, conn) = crate::parity::quic_connect(quic_addr, tls).await?;
    let get = |path: &'static str| {
        let conn = conn.clone();
        async move {
            let all = crate::parity::quic_plain(&conn, wire::Method::Get, path).await?;
            let (head, body) = crate::parity::split_head(&all)?;
            Ok::<_, BoxError>((head.status, String::from_utf8(body.to_vec())?))
        }
    };
    let (status, json) = get("/.well-known/xfer/status.json").await?;
    assert_eq!(status, 200, "{json}");
    let v: serde_json::Value = serde_json::from_str(&json)?;
    for key in ["time", "transfers", "errors", "throughput", "totals"] {
        assert!(v.get(key).is_some(), "no {key} in the QUIC status: {json}");
    }
    let (status, html) = get("/.well-known/xfer/status").await?;
    assert_eq!(status, 200);
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("id=\"transfers\""),
        "not the status page over QUIC: {html}"
    );
    servers.shutdown().await;
    Ok(())
}

/// `--log-format json`: the diagnostic events on stderr are JSON objects, with no escape codes
/// (stderr is a file here, not a terminal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_format_json_writes_json_events() -> TestResult {
    let dir = tempfile::tempdir()?;
    let err_path = dir.path().join("stderr");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let mut child = Command::new(xfer_bin())
        .arg("serve")
        .arg(dir.path())
        .args([
            "--plain",
            "--listen",
            &addr.to_string(),
            "--log-format",
            "json",
            "-v",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path)?)
        .spawn()?;
    crate::support::wait_listening(addr, &mut child, Duration::from_secs(30))?;
    let _child = ChildGuard(child);
    // The port may accept a moment before the "listening" event is written: wait for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&err_path)?;
        assert!(!text.contains('\u{1b}'), "escape codes in a file:\n{text}");
        let events: Vec<serde_json::Value> = text
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
        if events
            .iter()
            .any(|e| e["level"] == "INFO" && e["fields"]["message"].is_string())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no JSON event on stderr:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
