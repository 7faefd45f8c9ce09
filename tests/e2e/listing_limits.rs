//! Listings that cost what their bounds say: a 400 MB record refused in a few MB with a short
//! message, a listing that grows 50 directories per level stopped at the cap, one that drips
//! an entry at a time stopped at the time cap, a `PROPFIND` answered 501 followed at once by
//! the next format, and one failed subdirectory reported while the rest of the tree is listed.
//!
//! ```text
//!   xfer get (child, or TreeDownload) ──HTTP/1.1──► listing server (loopback): each request
//!                                                  head → an answer written as it goes
//! ```

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use xfer::tree::{ListingFormat, ListingLimits, TreeConfig, TreeDownload};
use xfer::{transport_for, ClientConfig};

use crate::support::{xfer_bin, BoxError, TestResult};

/// What the listing server sends for one request.
pub(crate) enum Answer {
    Whole(String),
    /// `head`, `prefix`, `len` bytes of `fill` written 64 KiB at a time (never held whole),
    /// then `suffix`; `Content-Length` covers them all.
    Huge {
        content_type: &'static str,
        status: &'static str,
        prefix: String,
        fill: u8,
        len: u64,
        suffix: String,
    },
    /// `first`, then `each(i)` every `every` for ever; the body ends at the connection's close.
    Drip {
        content_type: &'static str,
        first: String,
        each: fn(u64) -> String,
        every: Duration,
    },
}

pub(crate) fn whole(status: &str, content_type: &str, body: &str) -> Answer {
    Answer::Whole(format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ))
}

pub(crate) fn not_found() -> Answer {
    whole("404 Not Found", "text/plain", "")
}

/// `(method, path)` of a request head.
fn request_line(head: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(head);
    let mut words = text.split_whitespace();
    let method = words.next().unwrap_or_default().to_string();
    let path = words.next().unwrap_or_default().to_string();
    (method, path)
}

/// An HTTP/1.1 server on loopback answering each request head with `answer(method, path)`.
/// Returns the URL of `/run/` and the task (aborted by the caller).
pub(crate) async fn listing_server(
    answer: impl Fn(&str, &str) -> Answer + Send + Sync + 'static,
) -> Result<(String, tokio::task::JoinHandle<()>), BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let answer = Arc::new(answer);
    let task = tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve_connection(sock, Arc::clone(&answer)));
        }
    });
    Ok((format!("http://{addr}/run/"), task))
}

async fn serve_connection(
    mut sock: TcpStream,
    answer: Arc<impl Fn(&str, &str) -> Answer + Send + Sync + 'static>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut seen = Vec::new();
    loop {
        let Ok(n) = sock.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        seen.extend_from_slice(&buf[..n]);
        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = seen.drain(..end + 4).collect();
            // A PROPFIND carries a body: drop it (its length is in the head; small).
            if let Some(len) = content_length(&head) {
                while seen.len() < len {
                    let Ok(n) = sock.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                }
                seen.drain(..len);
            }
            let (method, path) = request_line(&head);
            if write_answer(&mut sock, answer(&method, &path))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

fn content_length(head: &[u8]) -> Option<usize> {
    String::from_utf8_lossy(head).lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

async fn write_answer(sock: &mut TcpStream, answer: Answer) -> std::io::Result<()> {
    match answer {
        Answer::Whole(text) => sock.write_all(text.as_bytes()).await,
        Answer::Huge {
            content_type,
            status,
            prefix,
            fill,
            len,
            suffix,
        } => {
            let total = prefix.len() as u64 + len + suffix.len() as u64;
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {total}\r\n\r\n{prefix}"
            );
            sock.write_all(head.as_bytes()).await?;
            let block = vec![fill; 64 * 1024];
            let mut left = len;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                sock.write_all(&block[..n]).await?;
                left -= n as u64;
            }
            sock.write_all(suffix.as_bytes()).await
        }
        Answer::Drip {
            content_type,
            first,
            each,
            every,
        } => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n{first}"
            );
            sock.write_all(head.as_bytes()).await?;
            let mut tick = tokio::time::interval(every);
            for i in 0.. {
                tick.tick().await;
                sock.write_all(each(i).as_bytes()).await?;
            }
            Ok(())
        }
    }
}

/// How a child `xfer` ended: exit code, output, and its peak resident memory.
struct Measured {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    max_rss_kib: u64,
}

/// Run `xfer args`, output to files (a runaway message must not fill a pipe and stall it),
/// watching its peak resident memory (`VmHWM`) until it ends. Not `wait4`'s `ru_maxrss`: a
/// forked child's count starts from this test process's size at the fork, which in a busy
/// test binary is hundreds of MB. Killed after `limit`.
// The child is reaped by `wait4`, which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[String], dir: &Path, limit: Duration) -> Result<Measured, BoxError> {
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let child = Command::new(xfer_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(std::fs::File::create(&err_path)?)
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    let deadline = Instant::now() + limit;
    let mut peak_kib = 0;
    let (status, _usage) = loop {
        // A high-water mark: read any time before the end, it holds every peak so far.
        if let Some(hwm) = vm_hwm_kib(pid) {
            peak_kib = peak_kib.max(hwm);
        }
        let mut status: libc::c_int = 0;
        // SAFETY: rusage is plain data the kernel writes; zeroed is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child only; both pointers are valid for the call.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage);
        }
        if r < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        if Instant::now() > deadline {
            // SAFETY: signals our own child, not yet reaped, so its pid is not recycled.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // Often enough that a refusal in a few milliseconds is still seen running.
        std::thread::sleep(Duration::from_millis(1));
    };
    Ok(Measured {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stdout: std::fs::read(&out_path)?,
        stderr: std::fs::read(&err_path)?,
        max_rss_kib: peak_kib,
    })
}

/// `VmHWM` of a running process, in KiB.
fn vm_hwm_kib(pid: libc::pid_t) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

const HUGE: u64 = 400 * 1000 * 1000;
const RSS_LIMIT_KIB: u64 = 64 * 1024;
/// Output a refusal may print: the report and a few short lines, nothing of the name.
const OUTPUT_LIMIT: usize = 16 * 1024;

/// A 400 MB name in a `PROPFIND` answer, an nginx JSON index and an HTML index's link, streamed by the server and
/// never held: `xfer get --json` refuses it with exit 3, a peak RSS under 64 MB, and a report
/// and messages of a few hundred bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_mb_record_is_refused_in_bounded_memory() -> TestResult {
    for format in ["propfind", "nginx", "html"] {
        let (url, server) = listing_server(move |method, path| match (format, method) {
            ("propfind", "PROPFIND") => Answer::Huge {
                content_type: "application/xml",
                status: "207 Multi-Status",
                prefix: r#"<?xml version="1.0"?><D:multistatus xmlns:D="DAV:"><D:response><D:href>/run/"#.into(),
                fill: b'x',
                len: HUGE,
                suffix: "</D:href></D:response></D:multistatus>".into(),
            },
            ("nginx", "GET") if path.starts_with("/run/") => Answer::Huge {
                content_type: "application/json",
                status: "200 OK",
                prefix: r#"[{"name":""#.into(),
                fill: b'x',
                len: HUGE,
                suffix: r#"","type":"file","size":1}]"#.into(),
            },
            ("html", "PROPFIND") => whole("405 Method Not Allowed", "text/plain", ""),
            ("html", "GET") if path == "/run/" => Answer::Huge {
                content_type: "text/html",
                status: "200 OK",
                prefix: r#"<html><body><a href=""#.into(),
                fill: b'x',
                len: HUGE,
                suffix: r#"">x</a></body></html>"#.into(),
            },
            _ => not_found(),
        })
        .await?;
        let dir = tempfile::tempdir()?;
        let args = vec![
            "get".to_string(),
            url,
            dir.path().join("dest").display().to_string(),
            "--json".into(),
        ];
        let work = dir.path().to_path_buf();
        let m = tokio::task::spawn_blocking(move || {
            run_measured(&args, &work, Duration::from_secs(120))
        })
        .await??;
        server.abort();
        let stderr = String::from_utf8_lossy(&m.stderr);
        eprintln!(
            "{format}: peak RSS {} KiB, stdout {} B, stderr {} B",
            m.max_rss_kib,
            m.stdout.len(),
            m.stderr.len()
        );
        assert_eq!(m.code, Some(3), "{format}: {stderr}");
        assert!(
            stderr.contains("longer than 65536 bytes"),
            "{format}: {stderr}"
        );
        assert!(
            m.max_rss_kib > 1024,
            "{format}: the child was never seen running"
        );
        assert!(
            m.max_rss_kib < RSS_LIMIT_KIB,
            "{format}: peak RSS {} KiB",
            m.max_rss_kib
        );
        assert!(
            m.stdout.len() < OUTPUT_LIMIT && m.stderr.len() < OUTPUT_LIMIT,
            "{format}: {} B on stdout, {} B on stderr",
            m.stdout.len(),
            m.stderr.len()
        );
        let report: serde_json::Value = serde_json::from_slice(&m.stdout)?;
        assert_eq!(report["status"].as_str(), Some("failed"), "{report}");
    }
    Ok(())
}

/// An nginx-style index where every directory holds 50 more: `--max-listing-dirs 120` stops
/// the listing with an error naming the flag, after at most 120 local directories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_50_directories_wide_stops_at_the_cap() -> TestResult {
    let fifty: String = {
        let entries: Vec<_> = (0..50)
            .map(|i| serde_json::json!({"name": format!("d{i:02}"), "type": "directory"}))
            .collect();
        serde_json::Value::from(entries).to_string()
    };
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&requests);
    let (url, server) = listing_server(move |method, _| {
        counted.fetch_add(1, Ordering::Relaxed);
        match method {
            "GET" => whole("200 OK", "application/json", &fifty),
            _ => not_found(),
        }
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let dest = dir.path().join("dest");
    let args = vec![
        "get".to_string(),
        url,
        dest.display().to_string(),
        "--json".into(),
        "--max-listing-dirs".into(),
        "120".into(),
    ];
    let work = dir.path().to_path_buf();
    let m =
        tokio::task::spawn_blocking(move || run_measured(&args, &work, Duration::from_secs(120)))
            .await??;
    server.abort();
    let stderr = String::from_utf8_lossy(&m.stderr);
    assert_eq!(m.code, Some(3), "{stderr}");
    assert!(
        stderr.contains("120 directories") && stderr.contains("--max-listing-dirs"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&m.stdout)?;
    let failed = report["failed"].as_array().ok_or("no failed list")?;
    assert!(
        failed.iter().any(|f| f["error"]
            .as_str()
            .is_some_and(|e| e.contains("--max-listing-dirs"))),
        "{report}"
    );
    let made = walkdir_count(&dest)?;
    assert!(made <= 120, "{made} directories created");
    assert!(made >= 50, "only {made} directories created");
    // The root, then one request per directory listed before the cap: not one per level of
    // a tree that never ends.
    assert!(requests.load(Ordering::Relaxed) < 10, "too many requests");
    Ok(())
}

/// Directories below `root`, itself excluded.
fn walkdir_count(root: &Path) -> Result<usize, BoxError> {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                n += 1;
                stack.push(e.path());
            }
        }
    }
    Ok(n)
}

fn tree(limits: ListingLimits) -> TreeConfig {
    TreeConfig {
        listing: limits,
        ..TreeConfig::default()
    }
}

/// A manifest that sends a directory entry every 100 ms and never its end record passes any
/// idle timeout; a 2 s listing time ends it, naming `--listing-timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drip_fed_listing_ends_at_the_time_cap() -> TestResult {
    let (url, server) = listing_server(|_, path| {
        if path.ends_with("?manifest") {
            Answer::Drip {
                content_type: "application/x-xfer-manifest+jsonl",
                first: "{\"xfer_manifest\":1}\n".into(),
                each: |i| format!("{{\"path\":\"d{i}\",\"type\":\"dir\"}}\n"),
                every: Duration::from_millis(100),
            }
        } else {
            not_found()
        }
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let transport = transport_for(&url, &ClientConfig::default())?;
    let limits = ListingLimits {
        max_time: Duration::from_secs(2),
        ..ListingLimits::default()
    };
    let run = TreeDownload::new(transport, url, dir.path().join("dest"), tree(limits)).run();
    let report = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .map_err(|_| "the drip-fed listing did not end at its time cap")??;
    server.abort();
    let listing = report
        .failed
        .iter()
        .find(|f| f.path.is_empty())
        .ok_or_else(|| format!("no listing failure: {report:?}"))?;
    assert!(
        listing.error.contains("--listing-timeout") && listing.error.contains("2s"),
        "{}",
        listing.error
    );
    assert!(report.directories > 0, "{report:?}");
    Ok(())
}

/// Entries and depth caps, from an index that never ends: each stops the listing and is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_and_depth_caps_stop_the_listing() -> TestResult {
    let one_dir = serde_json::json!([{"name": "d", "type": "directory"},
        {"name": "f", "type": "file", "size": 0}])
    .to_string();
    let (url, server) = listing_server(move |method, _| match method {
        "GET" => whole("200 OK", "application/json", &one_dir),
        _ => not_found(),
    })
    .await?;
    let cases = [
        (
            ListingLimits {
                max_depth: 5,
                ..ListingLimits::default()
            },
            "--max-listing-depth",
        ),
        (
            ListingLimits {
                max_entries: 7,
                ..ListingLimits::default()
            },
            "--max-listing-entries",
        ),
    ];
    for (limits, flag) in cases {
        let dir = tempfile::tempdir()?;
        let transport = transport_for(&url, &ClientConfig::default())?;
        let report = TreeDownload::new(
            transport,
            url.clone(),
            dir.path().join("dest"),
            tree(limits),
        )
        .run()
        .await?;
        let listing = report
            .failed
            .iter()
            .find(|f| f.path.is_empty())
            .ok_or_else(|| format!("{flag}: no listing failure: {report:?}"))?;
        assert!(listing.error.contains(flag), "{}", listing.error);
    }
    server.abort();
    Ok(())
}

/// `PROPFIND` answered 501 is the server saying it has no WebDAV: the JSON index is asked for
/// at once, and the `PROPFIND` is not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_propfind_answered_501_falls_back_at_once() -> TestResult {
    let propfinds = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&propfinds);
    let (url, server) = listing_server(move |method, path| match (method, path) {
        ("PROPFIND", _) => {
            counted.fetch_add(1, Ordering::Relaxed);
            whole("501 Not Implemented", "text/plain", "")
        }
        ("GET", "/run/") => whole(
            "200 OK",
            "application/json",
            r#"[{"name":"sub","type":"directory"}]"#,
        ),
        ("GET", "/run/sub/") => whole("200 OK", "application/json", "[]"),
        _ => not_found(),
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let dest = dir.path().join("dest");
    let transport = transport_for(&url, &ClientConfig::default())?;
    let started = Instant::now();
    let report = TreeDownload::new(transport, url, &dest, TreeConfig::default())
        .run()
        .await?;
    server.abort();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.listing, Some(ListingFormat::NginxJson));
    assert_eq!(report.directories, 1);
    assert!(dest.join("sub").is_dir());
    assert_eq!(propfinds.load(Ordering::Relaxed), 1, "PROPFIND retried");
    eprintln!("listed in {:?}", started.elapsed());
    Ok(())
}

/// One subdirectory whose listing fails (403) and one whose listing is malformed: both are
/// reported by path, the others are listed to the bottom, and the command exits 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failed_subdirectory_leaves_the_rest_listed() -> TestResult {
    let (url, server) = listing_server(|method, path| match (method, path) {
        ("GET", "/run/") => whole(
            "200 OK",
            "application/json",
            r#"[{"name":"bad","type":"directory"},{"name":"broken","type":"directory"},{"name":"good","type":"directory"}]"#,
        ),
        ("GET", "/run/bad/") => whole("403 Forbidden", "text/plain", ""),
        ("GET", "/run/broken/") => whole("200 OK", "application/json", "[{"),
        ("GET", "/run/good/") => whole(
            "200 OK",
            "application/json",
            r#"[{"name":"inner","type":"directory"}]"#,
        ),
        ("GET", "/run/good/inner/") => whole(
            "200 OK",
            "application/json",
            r#"[{"name":"deepest","type":"directory"}]"#,
        ),
        ("GET", "/run/good/inner/deepest/") => whole("200 OK", "application/json", "[]"),
        _ => not_found(),
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let dest = dir.path().join("dest");
    let args = vec![
        "get".to_string(),
        url,
        dest.display().to_string(),
        "--json".into(),
    ];
    let work = dir.path().to_path_buf();
    let m =
        tokio::task::spawn_blocking(move || run_measured(&args, &work, Duration::from_secs(120)))
            .await??;
    server.abort();
    let stderr = String::from_utf8_lossy(&m.stderr);
    assert_eq!(m.code, Some(3), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&m.stdout)?;
    let failed = report["failed"].as_array().ok_or("no failed list")?;
    let mut paths: Vec<&str> = failed.iter().filter_map(|f| f["path"].as_str()).collect();
    paths.sort_unstable();
    assert_eq!(paths, ["bad", "broken"], "{report}");
    assert!(dest.join("good/inner/deepest").is_dir(), "{report}");
    assert!(
        stderr.contains("failed: bad: ") && stderr.contains("403"),
        "{stderr}"
    );
    Ok(())
}
