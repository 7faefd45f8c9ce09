//! Whole trees: `xfer get URL/ DEST/` over every transport, re-runs that fetch only what is
//! missing, an interrupted tree resumed, and hostile listings and destinations refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::Notify;
use xfer::crates::common::listing::manifest::read_manifest;
use xfer::crates::core::transport::{
    BoxFuture, Lane, ListRequest, ListResponse, RangeBody, RangeRequest, RemoteInfo, Transport,
};
use xfer::tree::{FailureKind, TreeConfig, TreeDownload, TreeError, TreeReport, STAGING_DIR};
use xfer::{transport_for, ClientConfig, TransferError};

use xfer_test_support::fault_proxy::FaultProxy;

use crate::support::{
    each_transport, json_report, run_xfer, u64_field, write_random_file, BoxError, Fixture, Proto,
    TestResult, MIB,
};

/// Small chunks so the one big file of the tree is cut across lanes.
const CHUNK: u64 = 256 * 1024;

pub fn config() -> TreeConfig {
    let mut c = TreeConfig::default();
    c.get.chunk_size = CHUNK;
    c
}

/// Every regular file and directory under `root`: relative path → `Some((content, mtime))` for
/// files, `None` for directories. A tree destination's staging directory is left out: it is
/// xfer's, not the tree's.
type Snapshot = BTreeMap<String, Option<(Vec<u8>, SystemTime)>>;

pub fn snapshot(root: &Path) -> Result<Snapshot, BoxError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            let rel = path
                .strip_prefix(root)?
                .to_str()
                .ok_or("non-UTF-8 name")?
                .to_string();
            if rel == STAGING_DIR {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                out.insert(rel, None);
                stack.push(path);
            } else {
                out.insert(rel, Some((std::fs::read(&path)?, meta.modified()?)));
            }
        }
    }
    Ok(out)
}

/// A tree with nested and empty directories, empty files, names with spaces, `%` and
/// unicode, small files and one file of several chunks; returns its file count.
pub fn build_tree(root: &Path) -> Result<u64, BoxError> {
    let dirs = [
        "a",
        "a/b c",
        "a/b c/d%20e",
        "ünïcødé",
        "empty",
        "empty/deeper",
    ];
    for d in dirs {
        std::fs::create_dir_all(root.join(d))?;
    }
    let mut files = 0;
    for (i, name) in [
        "top.bin",
        "a/one file.txt",
        "a/b c/100%.dat",
        "a/b c/d%20e/x",
        "ünïcødé/π.bin",
        "a/#hash?.bin",
    ]
    .iter()
    .enumerate()
    {
        write_random_file(&root.join(name), 1000 + 7919 * i as u64, i as u64)?;
        files += 1;
    }
    std::fs::write(root.join("a/empty file"), b"")?;
    write_random_file(&root.join("a/big.bin"), 3 * MIB + 17, 99)?;
    for i in 0..20 {
        write_random_file(
            &root.join(format!("a/b c/small-{i:02}")),
            100 * i + 1,
            1000 + i,
        )?;
    }
    Ok(files + 2 + 20)
}

/// Every directory under `root` (itself excluded) and its modification time.
pub fn dir_mtimes(root: &Path) -> Result<BTreeMap<String, SystemTime>, BoxError> {
    let mut out = BTreeMap::new();
    for (rel, entry) in snapshot(root)? {
        if entry.is_none() {
            out.insert(rel.clone(), std::fs::metadata(root.join(&rel))?.modified()?);
        }
    }
    Ok(out)
}

/// Gives every directory under `root` its own whole-second mtime in 2001, far from now, so a
/// directory the client merely created or wrote into cannot match by chance.
pub fn age_dirs(root: &Path) -> Result<(), BoxError> {
    for (i, rel) in dir_mtimes(root)?.keys().enumerate() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(978_307_200 + 86_400 * i as u64);
        std::fs::File::open(root.join(rel))?.set_modified(t)?;
    }
    Ok(())
}

pub async fn fetch(fx: &Fixture, dest: &Path, config: TreeConfig) -> Result<TreeReport, BoxError> {
    let url = fx.url("/");
    let transport = transport_for(&url, &fx.client)?;
    Ok(TreeDownload::new(transport, url, dest, config)
        .run()
        .await?)
}

each_transport! {
    tree_round_trip => round_trip;
    tree_interrupted_resumes => interrupted_resumes;
    tree_interrupted_mid_file_resumes_its_chunks => interrupted_mid_file;
    tree_shares_connections => shares_connections;
}

/// Sixty small files over 4 lanes: files reuse the connections of the files before them, so
/// the server sees the transport's connections (HTTP/1.1: one per lane), not one per file.
async fn shares_connections(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    for i in 0..60u64 {
        write_random_file(&fx.root().join(format!("f{i:02}.bin")), 1000 + i, i)?;
    }
    let proxy = match proto {
        Proto::Quic => {
            let upstream = fx.servers.quic_addr.ok_or("no QUIC server")?;
            FaultProxy::udp(upstream, Vec::new()).await?
        }
        _ => FaultProxy::tcp(fx.servers.http_addr, Vec::new()).await?,
    };
    let port = fx.servers.http_addr.port();
    let quic_port = fx.servers.quic_addr.map(|a| a.port()).unwrap_or_default();
    let url = fx
        .url("/")
        .replace(&format!(":{port}/"), &format!(":{}/", proxy.addr().port()))
        .replace(
            &format!(":{quic_port}/"),
            &format!(":{}/", proxy.addr().port()),
        );
    let transport = transport_for(&url, &fx.client)?;
    let cfg = TreeConfig {
        lanes: 4,
        max_files: 4,
        ..config()
    };
    let dest = fx.out().join("tree");
    let report = TreeDownload::new(transport, url, &dest, cfg).run().await?;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.fetched, 60);
    // HTTP/1.1: one connection per lane, and at most one more for the listing while the
    // first files start; HTTP/2 and QUIC: the configured connections (1 and 2).
    let most = match proto {
        Proto::Http1Tls => 5,
        Proto::Http2Tls | Proto::H2c => 1,
        Proto::Quic => 2,
    };
    let seen = proxy.stats().connections();
    assert!(
        seen <= most,
        "{seen} connections for 60 files over {proto:?}"
    );
    fx.shutdown().await;
    Ok(())
}

/// The tree arrives identical (contents, file and directory mtimes, empty files and
/// directories); a re-run fetches nothing; files new or changed on the server are the only
/// ones a later run fetches, and the directories they land in keep the server's mtimes.
async fn round_trip(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    let files = build_tree(&fx.root())?;
    age_dirs(&fx.root())?;
    let dest = fx.out().join("tree");

    let report = fetch(&fx, &dest, config()).await?;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(
        (report.files, report.fetched, report.skipped),
        (files, files, 0)
    );
    assert_eq!(report.protocol, proto.report_name());
    assert_eq!(snapshot(&dest)?, snapshot(&fx.root())?, "tree differs");
    assert_eq!(
        dir_mtimes(&dest)?,
        dir_mtimes(&fx.root())?,
        "directory mtimes differ"
    );

    let again = fetch(&fx, &dest, config()).await?;
    assert_eq!((again.fetched, again.skipped), (0, files), "{again:?}");

    write_random_file(&fx.root().join("a/b c/new one.bin"), 12_345, 7)?;
    std::fs::write(fx.root().join("top.bin"), b"changed on the server")?;
    let third = fetch(&fx, &dest, config()).await?;
    assert!(third.failed.is_empty(), "{:?}", third.failed);
    assert_eq!((third.fetched, third.skipped), (2, files - 1), "{third:?}");
    assert_eq!(
        snapshot(&dest)?,
        snapshot(&fx.root())?,
        "tree differs after the update"
    );
    assert_eq!(
        dir_mtimes(&dest)?,
        dir_mtimes(&fx.root())?,
        "directory mtimes differ after the update"
    );
    fx.shutdown().await;
    Ok(())
}

/// Where a [`GatedTransport`] stops the transfer: the test's Ctrl-C, at a point fixed by count,
/// not by time.
#[derive(Clone, Copy)]
enum GateOn {
    /// When the `n`th file starts (one sibling transport per file).
    FileStart(usize),
    /// At the `n`th request for a chunk after a file's first: that request never answers.
    LaterChunk(usize),
}

struct Gate {
    on: GateOn,
    count: AtomicUsize,
    reached: Notify,
}

impl Gate {
    fn new(on: GateOn) -> Arc<Self> {
        Arc::new(Self {
            on,
            count: AtomicUsize::new(0),
            reached: Notify::new(),
        })
    }

    /// Count one event; whether it is the one the gate waits for.
    fn hit(&self) -> bool {
        let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        let at = match self.on {
            GateOn::FileStart(n) | GateOn::LaterChunk(n) => n,
        };
        if n == at {
            self.reached.notify_one();
        }
        n >= at
    }
}

/// A transport (and the siblings and lanes it makes) that reports to a [`Gate`].
struct GatedTransport {
    inner: Arc<dyn Transport>,
    gate: Arc<Gate>,
}

impl Transport for GatedTransport {
    fn stat(&self) -> BoxFuture<'_, Result<RemoteInfo, TransferError>> {
        self.inner.stat()
    }
    fn open_lane(&self, index: usize) -> BoxFuture<'_, Result<Box<dyn Lane>, TransferError>> {
        Box::pin(async move {
            let inner = self.inner.open_lane(index).await?;
            Ok(Box::new(GatedLane {
                inner,
                gate: Arc::clone(&self.gate),
            }) as Box<dyn Lane>)
        })
    }
    fn protocol(&self) -> String {
        self.inner.protocol()
    }
    fn request_ahead(&self) -> Option<bool> {
        self.inner.request_ahead()
    }
    fn default_lanes(&self) -> usize {
        self.inner.default_lanes()
    }
    fn list<'a>(
        &'a self,
        dir_url: &'a str,
        request: ListRequest,
    ) -> BoxFuture<'a, Result<ListResponse, TransferError>> {
        self.inner.list(dir_url, request)
    }
    fn sibling(&self, url: &str) -> Result<Arc<dyn Transport>, TransferError> {
        if matches!(self.gate.on, GateOn::FileStart(_)) {
            self.gate.hit();
        }
        Ok(Arc::new(GatedTransport {
            inner: self.inner.sibling(url)?,
            gate: Arc::clone(&self.gate),
        }))
    }
}

struct GatedLane {
    inner: Box<dyn Lane>,
    gate: Arc<Gate>,
}

impl Lane for GatedLane {
    fn fetch<'a>(
        &'a mut self,
        req: &'a RangeRequest,
    ) -> BoxFuture<'a, Result<Box<dyn RangeBody + 'a>, TransferError>> {
        Box::pin(async move {
            if matches!(self.gate.on, GateOn::LaterChunk(_))
                && req.range.start > 0
                && self.gate.hit()
            {
                std::future::pending::<()>().await;
            }
            self.inner.fetch(req).await
        })
    }
    fn label(&self) -> String {
        self.inner.label()
    }
    fn connection(&self) -> usize {
        self.inner.connection()
    }
}

/// Run a tree download through `gate` until it is reached; the report of the interrupted run.
async fn interrupted_at(
    fx: &Fixture,
    dest: &Path,
    config: TreeConfig,
    on: GateOn,
) -> Result<TreeReport, BoxError> {
    let url = fx.url("/");
    let gate = Gate::new(on);
    let transport = Arc::new(GatedTransport {
        inner: transport_for(&url, &fx.client)?,
        gate: Arc::clone(&gate),
    });
    let first = TreeDownload::new(transport, url, dest, config)
        .run_until(async move { gate.reached.notified().await })
        .await;
    match first {
        Err(TreeError::Interrupted { report }) => Ok(*report),
        other => Err(format!("expected an interruption, got {other:?}").into()),
    }
}

/// Interrupted after a few files, one file at a time: the re-run keeps what was finished and
/// fetches only the rest.
async fn interrupted_resumes(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    let files = build_tree(&fx.root())?;
    let dest = fx.out().join("tree");
    let one_at_a_time = TreeConfig {
        max_files: 1,
        ..config()
    };
    let done = interrupted_at(&fx, &dest, one_at_a_time, GateOn::FileStart(5))
        .await?
        .fetched;
    assert!(done <= 5, "{done} files finished after the 5th started");

    let second = fetch(&fx, &dest, config()).await?;
    assert!(second.failed.is_empty(), "{:?}", second.failed);
    assert_eq!(second.skipped, done, "{second:?}");
    assert_eq!(second.fetched, files - done, "{second:?}");
    assert_eq!(
        snapshot(&dest)?,
        snapshot(&fx.root())?,
        "tree differs after the resume"
    );
    fx.shutdown().await;
    Ok(())
}

/// Interrupted while a file of many chunks is half done: the re-run fetches the rest of its
/// chunks, not the file again.
async fn interrupted_mid_file(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    let size = 8 * MIB + 99;
    write_random_file(&fx.root().join("big.bin"), size, 5)?;
    let dest = fx.out().join("tree");
    // Each of the file's 8 lanes has at most two requests out (one sent ahead), so when the
    // 20th is sent at least 4 chunks were answered.
    let first = interrupted_at(&fx, &dest, config(), GateOn::LaterChunk(20)).await?;
    assert_eq!(first.fetched, 0);

    let second = fetch(&fx, &dest, config()).await?;
    assert!(second.failed.is_empty(), "{:?}", second.failed);
    assert_eq!(second.fetched, 1);
    // Chunk 0 and the later ones answered before the 20th: all verified and kept but for
    // those still in flight on the file's 8 lanes.
    assert!(second.resumed_bytes >= 4 * CHUNK, "{second:?}");
    assert_eq!(second.bytes + second.resumed_bytes, size, "{second:?}");
    assert_eq!(snapshot(&dest)?, snapshot(&fx.root())?);
    fx.shutdown().await;
    Ok(())
}

/// Links placed in the destination beforehand never lead a write outside it; names that differ
/// only by case fail on a case-insensitive destination. The other files still arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn links_and_case_collisions_in_the_destination_are_refused() -> TestResult {
    let fx = Fixture::start(Proto::Http2Tls).await?;
    let root = fx.root();
    std::fs::create_dir_all(root.join("sub"))?;
    std::fs::write(root.join("sub/inside.txt"), b"inside")?;
    std::fs::write(root.join("linked.txt"), b"target")?;
    std::fs::write(root.join("Case.txt"), b"upper")?;
    std::fs::write(root.join("case.txt"), b"lower")?;
    std::fs::write(root.join("plain.txt"), b"plain")?;
    let outside = fx.out().join("outside");
    std::fs::create_dir_all(&outside)?;
    let dest = fx.out().join("tree");
    std::fs::create_dir_all(&dest)?;
    std::os::unix::fs::symlink(&outside, dest.join("sub"))?;
    std::os::unix::fs::symlink(outside.join("linked.txt"), dest.join("linked.txt"))?;

    let cfg = TreeConfig {
        case_insensitive: Some(true),
        ..config()
    };
    let report = fetch(&fx, &dest, cfg).await?;
    assert_eq!(
        std::fs::read_dir(&outside)?.count(),
        0,
        "wrote through a link"
    );
    let failed: BTreeMap<&str, FailureKind> = report
        .failed
        .iter()
        .map(|f| (f.path.as_str(), f.kind))
        .collect();
    // The directory fails, and the file listed inside it.
    assert_eq!(failed.get("sub"), Some(&FailureKind::Local));
    assert_eq!(failed.get("sub/inside.txt"), Some(&FailureKind::Local));
    assert_eq!(failed.get("linked.txt"), Some(&FailureKind::Local));
    let case_failures = ["Case.txt", "case.txt"]
        .iter()
        .filter(|n| failed.contains_key(*n))
        .count();
    assert_eq!(case_failures, 1, "{:?}", report.failed);
    assert_eq!(failed.len(), 4, "{:?}", report.failed);
    assert_eq!(std::fs::read(dest.join("plain.txt"))?, b"plain");
    fx.shutdown().await;
    Ok(())
}

/// A small HTTP/1.1 server on loopback (plain TCP) that answers each request head with what
/// `answer` makes of it: enough to hand a client a crafted listing.
pub async fn crafted_server(
    answer: impl Fn(&[u8]) -> String + Send + Sync + 'static,
) -> Result<(String, tokio::task::JoinHandle<()>), BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let answer = Arc::new(answer);
    let task = tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let answer = Arc::clone(&answer);
            tokio::spawn(async move {
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
                        if sock.write_all(answer(&head).as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    Ok((format!("http://{addr}/run/"), task))
}

pub fn response(status: &str, content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Every hostile name, in each format that can carry it, ends the listing with an error
/// naming it, and nothing appears outside the destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_listings_are_refused() -> TestResult {
    let manifest = |path: &str| {
        format!(
            "{{\"xfer_manifest\":1}}\n{}\n{{\"end\":{{\"entries\":1}}}}\n",
            serde_json::json!({"path": path, "type": "file", "size": 3})
        )
    };
    let propfind = |href: &str| {
        format!(
            r#"<?xml version="1.0"?><D:multistatus xmlns:D="DAV:"><D:response><D:href>{href}</D:href><D:propstat><D:prop><D:getcontentlength>3</D:getcontentlength><D:resourcetype/></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response></D:multistatus>"#
        )
    };
    let autoindex =
        |name: &str| serde_json::json!([{"name": name, "type": "file", "size": 3}]).to_string();
    let manifest_type = "application/x-xfer-manifest+jsonl";
    let cases: Vec<(&str, &str, String, &str)> = vec![
        (manifest_type, "200 OK", manifest("../escape"), "escape"),
        (
            manifest_type,
            "200 OK",
            manifest("a/../../escape"),
            "escape",
        ),
        (
            manifest_type,
            "200 OK",
            manifest("/tmp/absolute"),
            "absolute",
        ),
        (manifest_type, "200 OK", manifest("a\\..\\escape"), "escape"),
        (manifest_type, "200 OK", manifest("nul\u{0}name"), "nul"),
        (
            manifest_type,
            "200 OK",
            manifest("evil\u{202e}txt.exe"),
            "evil\\u{202e}txt.exe\" from the listing: bidirectional",
        ),
        (
            manifest_type,
            "200 OK",
            manifest("c1\u{85}name"),
            "c1\\u{85}name",
        ),
        (
            "application/json",
            "200 OK",
            autoindex("isolate\u{2066}x"),
            "isolate\\u{2066}x",
        ),
        (
            "application/json",
            "200 OK",
            autoindex("../escape"),
            "escape",
        ),
        ("application/json", "200 OK", autoindex("a/b"), "a/b"),
        ("application/json", "200 OK", autoindex("a\\b"), "a\\\\b"),
        (
            "application/xml",
            "207 Multi-Status",
            propfind("/run/%2e%2e/escape"),
            "escape",
        ),
        (
            "application/xml",
            "207 Multi-Status",
            propfind("/elsewhere/escape"),
            "escape",
        ),
        (
            "application/xml",
            "207 Multi-Status",
            propfind("/run/mark%E2%80%8Fname"),
            "mark\\u{200f}name",
        ),
    ];
    for (content_type, status, body, needle) in cases {
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("dest");
        // The listing answers the request for its format (PROPFIND is asked after the
        // manifest request fails); every other request is 404.
        let listing = response(status, content_type, &body);
        let is_dav = status.starts_with("207");
        let (url, server) = crafted_server(move |head| {
            if head.starts_with(b"PROPFIND") == is_dav {
                listing.clone()
            } else {
                response("404 Not Found", "text/plain", "")
            }
        })
        .await?;
        let transport = transport_for(&url, &ClientConfig::default())?;
        let report = TreeDownload::new(transport, url, &dest, config())
            .run()
            .await?;
        server.abort();
        let listing = report
            .failed
            .iter()
            .find(|f| f.path.is_empty())
            .ok_or_else(|| format!("listing {body:?} was accepted: {report:?}"))?;
        assert!(
            listing.error.contains(needle),
            "{body:?}: error {:?} does not name {needle:?}",
            listing.error
        );
        assert_eq!(report.fetched, 0);
        let left: Vec<PathBuf> = std::fs::read_dir(dir.path())?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        let mut names: Vec<String> = left
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        names.sort();
        assert_eq!(names, ["dest"], "{body:?}");
        let inside: Vec<_> = std::fs::read_dir(&dest)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        // Not even the staging directory: a run that staged nothing leaves none.
        assert!(inside.is_empty(), "{body:?} wrote {inside:?} in dest");
    }
    Ok(())
}

/// The command: a link in the destination fails that file alone; the run says which and why
/// in `--json`, exits 5, and every other file is in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_reports_failed_files_and_exits_nonzero() -> TestResult {
    let fx = Fixture::start(Proto::Http1Tls).await?;
    let files = build_tree(&fx.root())?;
    let dest = fx.out().join("tree");
    std::fs::create_dir_all(&dest)?;
    let outside = fx.out().join("outside");
    std::fs::create_dir_all(&outside)?;
    std::os::unix::fs::symlink(&outside, dest.join("ünïcødé"))?;
    let ca = fx.ca_cert().ok_or("no CA")?;
    let args = |json: bool| {
        let mut a = vec![
            "get".to_string(),
            fx.url("/"),
            dest.display().to_string(),
            "--ca-cert".into(),
            ca.display().to_string(),
            "--chunk-size".into(),
            "256KiB".into(),
        ];
        if json {
            a.push("--json".into());
        }
        a
    };
    let out = run_xfer(args(true)).await?;
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_report(&out)?;
    assert_eq!(report["status"].as_str(), Some("failed"));
    assert_eq!(u64_field(&report, "files")?, files);
    assert_eq!(u64_field(&report, "fetched")?, files - 1);
    let failed = report["failed"].as_array().ok_or("no failed list")?;
    // The linked directory and the file listed in it, each with its reason.
    let paths: Vec<&str> = failed.iter().filter_map(|f| f["path"].as_str()).collect();
    assert_eq!(paths.len(), 2, "{report}");
    assert!(
        paths.contains(&"ünïcødé") && paths.contains(&"ünïcødé/π.bin"),
        "{report}"
    );
    for f in failed {
        assert!(
            f["error"]
                .as_str()
                .unwrap_or_default()
                .contains("symbolic link"),
            "{report}"
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("failed: ünïcødé/π.bin"), "{stderr}");
    assert_eq!(std::fs::read_dir(&outside)?.count(), 0);

    // With the link gone, a re-run fetches that one file.
    std::fs::remove_file(dest.join("ünïcødé"))?;
    let out = run_xfer(args(true)).await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_report(&out)?;
    assert_eq!(u64_field(&report, "fetched")?, 1, "{report}");
    assert_eq!(snapshot(&dest)?, snapshot(&fx.root())?);
    fx.shutdown().await;
    Ok(())
}

/// The manifest of `url`, read whole, as `(path, sha256 known)` pairs.
async fn manifest_digests(
    transport: &dyn Transport,
    url: &str,
) -> Result<Vec<(String, bool)>, BoxError> {
    let mut listing = transport.list(url, ListRequest::Manifest).await?;
    let mut body = Vec::new();
    while let Some(piece) = listing.body.next_data().await? {
        body.extend_from_slice(&piece);
    }
    let mut out = Vec::new();
    read_manifest(body.as_slice(), |e| {
        if !e.is_dir() {
            out.push((e.path.to_string(), e.sha256.is_some()));
        }
        Ok(())
    })?;
    Ok(out)
}

/// A local copy damaged in place (same size, same mtime) passes the size-and-mtime check;
/// `--checksum` hashes it against the manifest's digest and fetches it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checksum_finds_a_local_copy_damaged_in_place() -> TestResult {
    let fx = Fixture::start(Proto::Http2Tls).await?;
    for i in 0..4u64 {
        write_random_file(&fx.root().join(format!("f{i}.bin")), 10_000 + i, i)?;
    }
    let dest = fx.out().join("tree");
    let first = fetch(&fx, &dest, config()).await?;
    assert_eq!(first.fetched, 4);

    // The server hashes each file in the background after serving it; the manifest carries
    // a digest once it is known. Wait (bounded) until all four are.
    let url = fx.url("/");
    let transport = transport_for(&url, &fx.client)?;
    let mut known = false;
    for _ in 0..400 {
        if manifest_digests(transport.as_ref(), &url)
            .await?
            .iter()
            .all(|(_, k)| *k)
        {
            known = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(known, "the server never listed the digests");

    let damaged = dest.join("f2.bin");
    let mtime = std::fs::metadata(&damaged)?.modified()?;
    let mut bytes = std::fs::read(&damaged)?;
    bytes[5000] ^= 0xff;
    std::fs::write(&damaged, &bytes)?;
    std::fs::File::options()
        .write(true)
        .open(&damaged)?
        .set_modified(mtime)?;

    let plain = fetch(&fx, &dest, config()).await?;
    assert_eq!(
        (plain.fetched, plain.skipped),
        (0, 4),
        "size and mtime match"
    );
    let checked = fetch(
        &fx,
        &dest,
        TreeConfig {
            compare: xfer::tree::Compare::Checksum,
            ..config()
        },
    )
    .await?;
    assert!(checked.failed.is_empty(), "{:?}", checked.failed);
    assert_eq!((checked.fetched, checked.skipped), (1, 3), "{checked:?}");
    assert_eq!(snapshot(&dest)?, snapshot(&fx.root())?);
    fx.shutdown().await;
    Ok(())
}

/// `--include` keeps matching files at any depth, `--exclude` prunes a directory and what is
/// below it (`dir/` too, as in `.gitignore`); directories not excluded are created even when
/// no file in them is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn include_and_exclude_select_files() -> TestResult {
    let fx = Fixture::start(Proto::H2c).await?;
    build_tree(&fx.root())?;
    let dest = fx.out().join("tree");
    let cfg = TreeConfig {
        include: vec!["*.bin".into()],
        exclude: vec!["a/b c".into()],
        ..config()
    };
    let slash = fetch(
        &fx,
        &fx.out().join("slash"),
        TreeConfig {
            exclude: vec!["b c/".into(), "empty/".into()],
            ..config()
        },
    )
    .await?;
    assert!(slash.failed.is_empty(), "{:?}", slash.failed);
    let kept = snapshot(&fx.out().join("slash"))?;
    assert!(
        kept.keys()
            .all(|k| !k.starts_with("a/b c") && !k.starts_with("empty")),
        "`dir/` excludes the directory and what is below it: {:?}",
        kept.keys()
    );
    assert!(kept.contains_key("a/big.bin") && kept.contains_key("top.bin"));
    let report = fetch(&fx, &dest, cfg).await?;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let got: Vec<String> = snapshot(&dest)?
        .into_iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        got,
        ["a/#hash?.bin", "a/big.bin", "top.bin", "ünïcødé/π.bin"]
    );
    assert!(dest.join("empty/deeper").is_dir());
    assert!(
        !dest.join("a/b c").exists(),
        "an excluded directory was created"
    );
    fx.shutdown().await;
    Ok(())
}
