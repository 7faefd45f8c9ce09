use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::get::{Download, GetConfig, GetError};
use crate::mem_transport::{MemFault, MemTransport};

const CHUNK: u64 = 64 << 10;
const NO_HANG: Duration = Duration::from_secs(60);

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn source(url: &str, t: &Arc<MemTransport>) -> Source {
    Source {
        url: url.into(),
        transport: Arc::clone(t) as Arc<dyn Transport>,
    }
}

fn config() -> GetConfig {
    GetConfig {
        chunk_size: CHUNK,
        lanes: Some(4),
        ..GetConfig::default()
    }
}

async fn fetch(
    multi: MultiSource,
    dest: &std::path::Path,
    cfg: GetConfig,
) -> Result<crate::progress::Report, GetError> {
    let dl = Download::new(Arc::new(multi), "mem://a", dest, cfg);
    tokio::time::timeout(NO_HANG, dl.run())
        .await
        .expect("the download must end")
}

#[tokio::test]
async fn two_sources_share_the_chunks() {
    let bytes = data(40 * CHUNK as usize, 1);
    let a = Arc::new(MemTransport::new(bytes.clone(), 4));
    let b = Arc::new(MemTransport::new(bytes.clone(), 4));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let multi = MultiSource::new(vec![source("mem://a", &a), source("mem://b", &b)], None);
    let report = fetch(multi, &dest, config()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    assert_eq!(report.sources.len(), 2);
    assert!(!a.requests().is_empty() && !b.requests().is_empty());
    let total: u64 = report.sources.iter().map(|s| s.bytes).sum();
    assert!(total >= bytes.len() as u64);
    assert!(report.sources.iter().all(|s| s.dropped.is_none()));
}

#[tokio::test]
async fn a_source_with_another_file_is_dropped() {
    let bytes = data(8 * CHUNK as usize, 1);
    let a = Arc::new(MemTransport::new(bytes.clone(), 4));
    let b = Arc::new(MemTransport::new(data(bytes.len(), 2), 4));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let multi = MultiSource::new(vec![source("mem://a", &a), source("mem://b", &b)], None);
    let report = fetch(multi, &dest, config()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    assert!(b.requests().is_empty(), "a refused source gets no work");
    let why = report.sources[1].dropped.clone().unwrap_or_default();
    assert!(why.contains("SHA-256"), "{why}");
}

#[tokio::test]
async fn the_only_source_with_the_wrong_digest_is_an_error() {
    let bytes = data(4 * CHUNK as usize, 1);
    let a = Arc::new(MemTransport::new(bytes.clone(), 4));
    let dir = tempfile::tempdir().unwrap();
    let multi = MultiSource::new(
        vec![source("mem://a", &a)],
        Some(Sha256Digest::of(b"something else")),
    );
    let err = fetch(multi, &dir.path().join("f"), config())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot stat"), "{err}");
    assert!(
        not_expected_digest(&err),
        "a verification failure, not a failed stat: {err:?}"
    );
    assert!(a.requests().is_empty());
}

/// The failure of a source that declares a digest other than the expected one.
fn not_expected_digest(err: &GetError) -> bool {
    matches!(
        err,
        GetError::Stat {
            source: TransferError::NotExpectedDigest { .. },
            ..
        }
    )
}

#[tokio::test]
async fn sources_that_all_hold_another_file_are_a_verification_failure() {
    let bytes = data(4 * CHUNK as usize, 1);
    let a = Arc::new(MemTransport::new(bytes.clone(), 4));
    let b = Arc::new(MemTransport::new(bytes.clone(), 4));
    let dir = tempfile::tempdir().unwrap();
    let multi = MultiSource::new(
        vec![source("mem://a", &a), source("mem://b", &b)],
        Some(Sha256Digest::of(b"something else")),
    );
    let err = fetch(multi, &dir.path().join("f"), config())
        .await
        .unwrap_err();
    assert!(not_expected_digest(&err), "{err:?}");
}

#[tokio::test]
async fn a_source_failing_mid_file_leaves_the_rest_to_the_others() {
    let bytes = data(32 * CHUNK as usize, 3);
    let a = Arc::new(MemTransport::new(bytes.clone(), 4));
    let b = Arc::new(MemTransport::new(bytes.clone(), 4));
    // b serves the first quarter, then answers every range with 503s, then 404s.
    for i in 8..32u64 {
        b.inject(i * CHUNK, MemFault::Fail { retryable: true }, 2);
        b.inject(i * CHUNK, MemFault::Fail { retryable: false }, 100);
    }
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let multi = MultiSource::new(vec![source("mem://a", &a), source("mem://b", &b)], None);
    let report = fetch(multi, &dest, config()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    assert!(report.sources[1].errors > 0);
}

#[tokio::test]
async fn resume_with_another_source_list() {
    let bytes = data(64 * CHUNK as usize, 4);
    let a = Arc::new(MemTransport::new(bytes.clone(), 4));
    for lane in 0..4 {
        a.slow_lane(lane, Duration::from_millis(2));
    }
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let multi = MultiSource::new(vec![source("mem://a", &a)], None);
    let dl = Download::new(Arc::new(multi), "mem://a", &dest, config());
    let progress = dl.progress();
    let stop = async move {
        while progress.snapshot().verified < 4 * CHUNK {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let first = tokio::time::timeout(NO_HANG, dl.run_until(stop))
        .await
        .unwrap();
    assert!(matches!(first, Err(GetError::Interrupted)), "{first:?}");

    let b = Arc::new(MemTransport::new(bytes.clone(), 4));
    let c = Arc::new(MemTransport::new(bytes.clone(), 4));
    let multi = MultiSource::new(vec![source("mem://b", &b), source("mem://c", &c)], None);
    let report = fetch(multi, &dest, config()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    assert!(
        report.resumed_bytes >= 4 * CHUNK,
        "{}",
        report.resumed_bytes
    );
}

#[test]
fn lanes_follow_per_lane_goodput() {
    let fast = Arc::new(MemTransport::new(vec![0u8; 16], 4));
    let slow = Arc::new(MemTransport::new(vec![0u8; 16], 4));
    let multi = MultiSource::new(vec![source("a", &fast), source("b", &slow)], None);
    let mut pool = multi.lock();
    for s in &mut pool.sources {
        s.info = Some(RemoteInfo {
            url: s.url.clone(),
            size: 16,
            etag: None,
            last_modified: None,
            accepts_ranges: true,
            sha256: None,
        });
    }
    pool.lanes = 8;
    let now = Instant::now();
    assert_eq!(pool.shares(now), vec![4.0, 4.0]);
    pool.delivered(0, 30 << 20, Duration::from_secs(1));
    pool.delivered(1, 10 << 20, Duration::from_secs(1));
    assert_eq!(pool.shares(now), vec![6.0, 2.0]);
    // Lanes placed by `pick` fill those shares.
    for _ in 0..8 {
        let s = pool.pick(&[], None).unwrap();
        pool.sources[s].take_slot();
    }
    assert_eq!((pool.sources[0].lanes(), pool.sources[1].lanes()), (6, 2));
    assert_eq!(pool.better_than(0), None, "at its share, nobody moves");
    // A failure halves the weight and backs the source off: its lanes leave.
    pool.failed(0, &TransferError::Config("x".into()));
    assert_eq!(pool.better_than(0), Some(1));
    assert!(
        pool.sources[0].dropped.is_some(),
        "a permanent error drops it"
    );
}

#[test]
fn duplicates_never_step_down() {
    assert!(duplicate_allowed("https://a/x", "https://b/x").is_ok());
    assert!(duplicate_allowed("https://a/x", "quic://b/x").is_ok());
    assert!(duplicate_allowed("http://a/x", "http://b/x").is_ok());
    assert!(duplicate_allowed("https://a/x", "http://b/x").is_err());
    assert!(duplicate_allowed("http://a/x", "https://b/x").is_err());
    assert!(duplicate_allowed("https://a/x", "file:///etc/passwd").is_err());
    assert!(duplicate_allowed("https://a/x", "https://u:p@b/x").is_err());
    assert!(duplicate_allowed("https://a/x", "https:///x").is_err());
    assert!(duplicate_allowed("https://a/x", "https://b/x y").is_err());
    assert!(duplicate_allowed("https://a/x", &format!("https://b/{}", "x".repeat(3000))).is_err());
}

#[test]
fn duplicates_are_judged_as_parsed() {
    let ok = |origin: &str, target: &str| {
        duplicate_allowed(origin, target).unwrap_or_else(|e| panic!("{target}: {e}"))
    };
    // A relative reference resolves against the answer's URL, and keeps its scheme.
    assert_eq!(ok("https://a/d/x", "/mirror/x"), "https://a/mirror/x");
    assert_eq!(ok("https://a/d/x", "../y"), "https://a/y");
    assert_eq!(ok("https://a/d/x", "//b/x"), "https://b/x");
    // Case and IP-literal spellings are normalised, so what is checked is what is reached.
    assert_eq!(ok("https://a/x", "HTTPS://B:443/x"), "https://b/x");
    assert_eq!(ok("https://a/x", "https://0x7f.1/x"), "https://127.0.0.1/x");
    let refused = |origin: &str, target: &str| {
        duplicate_allowed(origin, target)
            .err()
            .unwrap_or_else(|| panic!("{target} was accepted from {origin}"))
    };
    assert!(refused("https://a/x", "HTTP://b/x").contains("step down"));
    assert!(refused("quic://a/x", "http://b/x").contains("step down"));
    assert!(refused("https://a/x", "https://u@b/x").contains("credentials"));
    assert!(refused("https://a/x", "https://:p@b/x").contains("credentials"));
    assert!(refused("https://a/x", "data:text/plain,x").contains("scheme"));
    assert!(refused("https://a/x", "https://[::1/x").contains("not a URL"));
    assert!(refused("not a url", "https://b/x").contains("origin"));
}

#[test]
fn agreement_needs_evidence() {
    let info = |url: &str, size: u64, etag: Option<&str>, sha: Option<u8>| RemoteInfo {
        url: url.into(),
        size,
        etag: etag.map(str::to_string),
        last_modified: None,
        accepts_ranges: true,
        sha256: sha.map(|b| Sha256Digest([b; 32])),
    };
    let stats = vec![
        Some(Ok(info("a", 10, Some("\"1\""), Some(1)))),
        Some(Ok(info("b", 10, Some("\"2\""), Some(1)))),
        Some(Ok(info("c", 11, Some("\"1\""), Some(1)))),
        Some(Ok(info("d", 10, Some("\"3\""), Some(2)))),
        Some(Ok(info("e", 10, Some("\"1\""), None))),
        Some(Ok(info("f", 10, Some("\"9\""), None))),
        Some(Err(TransferError::Config("down".into()))),
    ];
    let v: Vec<bool> = agree(&stats, None).iter().map(Result::is_ok).collect();
    assert_eq!(v, vec![true, true, false, false, true, false, false]);
    // With the digest expected, a source without one is accepted (the end checks it), one
    // with another digest is not.
    let v: Vec<bool> = agree(&stats, Some(Sha256Digest([1; 32])))
        .iter()
        .map(Result::is_ok)
        .collect();
    assert_eq!(v, vec![true, true, false, false, true, true, false]);
}

#[test]
fn link_headers_name_duplicates() {
    let fields = [
        r#"<https://m1.example/f>; rel=duplicate; pri=1, <https://idx.example/>; rel="index""#,
        r#"<https://m2.example/a,b>; rel="duplicate alternate"; title="x, y""#,
        "<https://m1.example/f>; rel=duplicate",
        "garbage <without end",
    ];
    assert_eq!(
        link_duplicates(fields.into_iter()),
        vec!["https://m1.example/f", "https://m2.example/a,b"]
    );
    let many: Vec<String> = (0..40)
        .map(|i| format!("<https://m{i}.example/f>; rel=duplicate"))
        .collect();
    assert_eq!(
        link_duplicates(many.iter().map(String::as_str)).len(),
        MAX_SOURCES
    );
}

/// A lone source whose file changes mid-transfer: nothing else can take its chunks, so the
/// transfer ends at once with the change, not after every retry's backoff.
#[tokio::test]
async fn the_only_source_changing_ends_the_transfer_at_once() {
    let bytes = data(32 * CHUNK as usize, 5);
    let a = Arc::new(MemTransport::new(bytes.clone(), 4));
    a.inject(8 * CHUNK, MemFault::Fail { retryable: false }, 100);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let multi = MultiSource::new(vec![source("mem://a", &a)], None);
    let started = std::time::Instant::now();
    let err = fetch(multi, &dest, config()).await.unwrap_err();
    let GetError::Chunk { source, .. } = &err else {
        panic!("not a chunk error: {err}");
    };
    assert!(!source.is_retryable(), "{err}");
    assert!(!err.to_string().contains("source dropped"), "{err}");
    // One request to the bad offset: the error was not retried.
    let asked = a.requests().iter().filter(|r| r.start == 8 * CHUNK).count();
    assert_eq!(asked, 1, "{err} after {:?}", started.elapsed());
}
