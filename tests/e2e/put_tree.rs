//! `xfer put DIR URL/` (issue 42, "Tree uploads"): a re-run against a tree larger than the
//! server's digest cache sends nothing, because the server keeps each file's SHA-256 with the
//! file; the existence check taking a 503 retries and then reports, never uploads blindly;
//! the connections a tree upload opens are bounded by its lanes, not its files; and a stored
//! digest stops counting once the file is written behind the server's back.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use xfer::crates::common::stored_digest;

use crate::support::{
    json_report, run_xfer, sha256_file, u64_field, write_random_file, BoxError, Fixture, Proto,
    TestResult, MIB,
};

/// A fixture accepting uploads with the `upload-token` of [`crate::upload::configure`].
async fn fixture(
    proto: Proto,
    tune: impl FnOnce(&mut xfer::serve::ServeConfig),
) -> Result<Fixture, BoxError> {
    let fx = Fixture::start_with(proto, |cfg, dir| {
        crate::upload::configure(cfg, dir);
        tune(cfg);
    })
    .await?;
    std::fs::write(fx.dir.path().join("upload.token"), "upload-token\n")?;
    Ok(fx)
}

/// `xfer put SRC BASE/in/NAME/ --json` with the upload token, then `extra`.
fn put_args(fx: &Fixture, base: &str, src: &Path, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        "put".to_string(),
        src.display().to_string(),
        format!("{base}/in/{name}/"),
        "--json".into(),
        "--token-file".into(),
        fx.dir.path().join("upload.token").display().to_string(),
    ];
    if let Some(ca) = fx.ca_cert() {
        a.push("--ca-cert".into());
        a.push(ca.display().to_string());
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// `count` small files (1 to 64 bytes) spread over directories of 100.
fn small_tree(root: &Path, count: usize) -> Result<(), BoxError> {
    for i in 0..count {
        let dir = root.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let body = format!("{i:x}-").repeat(1 + i % 16);
        std::fs::write(
            dir.join(format!("f{i:05}.txt")),
            &body.as_bytes()[..body.len().min(64)],
        )?;
    }
    Ok(())
}

/// Size, inode, mtime seconds and nanoseconds.
type Stamp = (u64, u64, i64, i64);

/// The [`Stamp`] of every file under `root`, by relative path.
fn stamps(root: &Path) -> Result<BTreeMap<PathBuf, Stamp>, BoxError> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                dirs.push(entry.path());
            } else {
                let rel = entry.path().strip_prefix(root)?.to_path_buf();
                out.insert(
                    rel,
                    (meta.len(), meta.ino(), meta.mtime(), meta.mtime_nsec()),
                );
            }
        }
    }
    Ok(out)
}

/// Whether the filesystem under `dir` keeps user extended attributes. Without them the server
/// computes digests instead; only the assertions about the record itself are skipped, and
/// never under `CI=true`.
fn xattrs_kept(dir: &Path) -> bool {
    let probe = dir.join(".xattr-probe");
    let ok = std::fs::File::create(&probe).is_ok_and(|f| {
        rustix::fs::fsetxattr(&f, "user.xfer.probe", b"1", rustix::fs::XattrFlags::empty()).is_ok()
    });
    let _ = std::fs::remove_file(&probe);
    ok || xfer_test_support::gate::absent(
        "the stored-record checks",
        format!("no user xattrs under {}", dir.display()),
    )
}

/// A tree of 6,000 files, more than the 4,096 digests the server's cache holds by default,
/// over HTTP/2 (the tree's default protocol): the re-run finds every file there by the digest
/// kept with it, sends nothing, and leaves the server's files untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rerun_of_a_tree_larger_than_the_digest_cache_sends_nothing() -> TestResult {
    const FILES: usize = 6_000;
    let fx = fixture(Proto::Http2Tls, |_| {}).await?;
    assert!(
        FILES > xfer::crates::common::DigestCacheConfig::default().max_entries,
        "the tree must outgrow the server's digest cache"
    );
    let src = fx.out().join("many");
    small_tree(&src, FILES)?;
    let args = put_args(&fx, &fx.servers.http_base(), &src, "many", &[]);
    let out = run_xfer(args.clone()).await?;
    let report = json_report(&out)?;
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(u64_field(&report, "uploaded")?, FILES as u64, "{report}");
    let first_seconds = report["seconds"].as_f64().unwrap_or_default();
    let stored = fx.root().join("in/many");
    let before = stamps(&stored)?;
    assert_eq!(before.len(), FILES);
    if xattrs_kept(&stored) {
        for rel in before.keys() {
            let file = std::fs::File::open(stored.join(rel))?;
            let record = stored_digest::read(&file)
                .ok_or_else(|| format!("{} has no stored digest", rel.display()))?;
            let ours = std::fs::read(src.join(rel))?;
            assert_eq!(
                record.sha256,
                xfer::Sha256Digest::of(&ours),
                "{}",
                rel.display()
            );
        }
        // One of the first files stored, long evicted from the cache: its first `HEAD`
        // already carries the digest, read from the record, not computed.
        let client = fx
            .client
            .clone()
            .with_token(xfer::crates::common::secret::Secret::new("upload-token"));
        let first = "d000/f00000.txt";
        let info = xfer::transport_for(&fx.url(&format!("/in/many/{first}")), &client)?
            .stat()
            .await?;
        let ours = xfer::Sha256Digest::of(&std::fs::read(src.join(first))?);
        assert_eq!(info.sha256, Some(ours), "{first}: no Repr-Digest at once");
    }

    let out = run_xfer(args).await?;
    let report = json_report(&out)?;
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(u64_field(&report, "uploaded")?, 0, "{report}");
    assert_eq!(u64_field(&report, "sent_bytes")?, 0, "{report}");
    assert_eq!(u64_field(&report, "skipped")?, FILES as u64, "{report}");
    assert_eq!(
        report["failed"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );
    assert_eq!(
        stamps(&stored)?,
        before,
        "the re-run rewrote files on the server"
    );
    eprintln!(
        "{FILES} files: uploaded in {first_seconds:.1} s, re-run in {:.1} s",
        report["seconds"].as_f64().unwrap_or_default()
    );
    fx.shutdown().await;
    Ok(())
}

/// Splices TCP connections to `upstream`, counting those accepted. The first `refuse`
/// connections get `503` to their first request instead (as a server over its per-address
/// connection limit answers), and are closed.
struct Front {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

async fn front(upstream: SocketAddr, refuse: usize) -> Result<Front, BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let accepted = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let (a, r) = (Arc::clone(&accepted), Arc::clone(&refused));
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let n = a.fetch_add(1, Ordering::SeqCst);
            let r = Arc::clone(&r);
            tokio::spawn(async move {
                if n < refuse {
                    // Read the request head, then refuse it.
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match client.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => head.extend_from_slice(&buf[..k]),
                        }
                    }
                    r.fetch_add(1, Ordering::SeqCst);
                    let _ = client
                        .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .await;
                    let _ = client.shutdown().await;
                    return;
                }
                let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    Ok(Front {
        addr,
        accepted,
        refused,
    })
}

/// The existence check meets 503s: a few are retried and the file is then uploaded; when
/// every attempt is refused the file is reported failed (exit 3) and nothing was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_503_to_the_existence_check_is_retried_then_reported_never_taken_for_absent() -> TestResult
{
    let fx = fixture(Proto::H2c, |_| {}).await?;
    let src = fx.out().join("one");
    std::fs::create_dir_all(&src)?;
    let sha = write_random_file(&src.join("a.bin"), 5000, 7)?;

    let flaky = front(fx.servers.http_addr, 2).await?;
    let base = format!("http://{}", flaky.addr);
    let extra = ["--protocol", "http1", "--retries", "4"];
    let out = run_xfer(put_args(&fx, &base, &src, "one", &extra)).await?;
    let report = json_report(&out)?;
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(flaky.refused.load(Ordering::SeqCst), 2, "{report}");
    assert_eq!(u64_field(&report, "uploaded")?, 1, "{report}");
    assert_eq!(sha256_file(&fx.root().join("in/one/a.bin"))?, sha);

    let refusing = front(fx.servers.http_addr, usize::MAX).await?;
    let base = format!("http://{}", refusing.addr);
    let extra = ["--protocol", "http1", "--retries", "3"];
    let out = run_xfer(put_args(&fx, &base, &src, "never", &extra)).await?;
    let report = json_report(&out)?;
    assert_eq!(out.status.code(), Some(3), "{report}");
    assert_eq!(u64_field(&report, "uploaded")?, 0, "{report}");
    assert_eq!(u64_field(&report, "sent_bytes")?, 0, "{report}");
    let failed = &report["failed"][0];
    assert_eq!(failed["path"].as_str(), Some("a.bin"), "{report}");
    assert!(
        failed["error"].as_str().is_some_and(|e| e.contains("503")),
        "{report}"
    );
    // Three attempts of the check, each refused; no upload was tried behind them.
    assert_eq!(refusing.refused.load(Ordering::SeqCst), 3, "{report}");
    assert!(!fx.root().join("in/never").exists());
    fx.shutdown().await;
    Ok(())
}

/// A tree of 300 small files and one of several chunks, over 4 lanes: over HTTP/1.1 the
/// connections the server accepts are the lanes', reused from file to file; over HTTP/2 one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tree_upload_keeps_to_its_lanes_connections() -> TestResult {
    const LANES: usize = 4;
    let fx = fixture(Proto::H2c, |_| {}).await?;
    let src = fx.out().join("conns");
    small_tree(&src, 300)?;
    write_random_file(&src.join("big.bin"), 6 * MIB, 9)?;
    for (protocol, most) in [("http1", LANES), ("http2", 1)] {
        let counting = front(fx.servers.http_addr, 0).await?;
        let base = format!("http://{}", counting.addr);
        let lanes = LANES.to_string();
        let extra = [
            "--protocol",
            protocol,
            "--lanes",
            &lanes,
            "--chunk-size",
            "1MiB",
        ];
        let out = run_xfer(put_args(&fx, &base, &src, protocol, &extra)).await?;
        let report = json_report(&out)?;
        assert_eq!(out.status.code(), Some(0), "{protocol}: {report}");
        assert_eq!(u64_field(&report, "uploaded")?, 301, "{protocol}: {report}");
        let accepted = counting.accepted.load(Ordering::SeqCst);
        assert!(
            (1..=most).contains(&accepted),
            "{protocol}: {accepted} connections for 301 files over {LANES} lanes"
        );
    }
    fx.shutdown().await;
    Ok(())
}

/// A stored file rewritten behind the server's back (same size, new mtime) no longer counts
/// as there: the re-run sends it again, and only it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_changed_on_the_server_is_sent_again() -> TestResult {
    let fx = fixture(Proto::Http2Tls, |_| {}).await?;
    let src = fx.out().join("few");
    small_tree(&src, 5)?;
    let args = put_args(&fx, &fx.servers.http_base(), &src, "few", &[]);
    let out = run_xfer(args.clone()).await?;
    let report = json_report(&out)?;
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(u64_field(&report, "uploaded")?, 5, "{report}");

    let rel = Path::new("d000/f00003.txt");
    let stored = fx.root().join("in/few").join(rel);
    let original = std::fs::read(&stored)?;
    let mut changed = original.clone();
    changed[0] ^= 0x20;
    std::fs::write(&stored, &changed)?;
    std::fs::File::options()
        .write(true)
        .open(&stored)?
        .set_modified(SystemTime::now() + Duration::from_secs(10))?;
    if xattrs_kept(&stored.with_file_name("")) {
        let file = std::fs::File::open(&stored)?;
        assert!(
            stored_digest::read(&file).is_some(),
            "the record outlives the rewrite; its size and mtime must rule it out"
        );
    }

    let out = run_xfer(args).await?;
    let report = json_report(&out)?;
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(u64_field(&report, "uploaded")?, 1, "{report}");
    assert_eq!(u64_field(&report, "skipped")?, 4, "{report}");
    assert_eq!(std::fs::read(&stored)?, original);
    fx.shutdown().await;
    Ok(())
}
