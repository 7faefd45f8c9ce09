//! The core's decisions, without sockets: a file in a temporary root, requests built by hand.

use std::net::SocketAddr;

use bytes::BytesMut;
use xfer_core::digest::Sha256Hasher;
use xfer_service::{
    status, Body, BodyEvent, ContentRange, Method, Request, ResponsePlan, Service, ServiceConfig,
};

const CONTENT: &[u8] = b"0123456789abcdefghij";

fn peer() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9))
}

fn setup() -> (tempfile::TempDir, Service) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f.bin"), CONTENT).expect("write");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    let root = dir.path().canonicalize().expect("canonical root");
    let mut cfg = ServiceConfig::new(root);
    cfg.repr_digest = false;
    (dir, Service::new(cfg))
}

fn get(path: &str) -> Request {
    Request::new(Method::Get, path, peer(), "test")
}

/// Body bytes and trailer digest of a plan.
async fn drain(plan: ResponsePlan) -> (Vec<u8>, Option<String>) {
    match plan.body {
        Body::Empty => (Vec::new(), None),
        Body::Message(m) => (m.to_vec(), None),
        Body::Listing(_) => panic!("a file request answered with a listing"),
        Body::Stream(mut s) => {
            let mut bytes = BytesMut::new();
            let mut trailer = None;
            while let Some(ev) = s.next().await {
                match ev.expect("body block") {
                    BodyEvent::Data(b) => bytes.extend_from_slice(&b),
                    BodyEvent::Trailer(d) => trailer = Some(d.to_header_value()),
                }
            }
            (bytes.to_vec(), trailer)
        }
    }
}

fn sha(bytes: &[u8]) -> String {
    let mut h = Sha256Hasher::new();
    h.update(bytes);
    h.finish().to_header_value()
}

#[tokio::test]
async fn whole_get_streams_the_file() {
    let (_d, svc) = setup();
    let plan = svc.respond(&get("/f.bin")).await;
    assert_eq!(plan.status, status::OK);
    assert_eq!(plan.content_length, Some(CONTENT.len() as u64));
    assert!(plan.etag.is_some());
    assert!(plan.content_range.is_none());
    assert!(!plan.trailer);
    assert_eq!(drain(plan).await, (CONTENT.to_vec(), None));
}

#[tokio::test]
async fn head_has_length_and_no_body_and_ignores_range() {
    let (_d, svc) = setup();
    let mut req = Request::new(Method::Head, "/f.bin", peer(), "test");
    req.range_headers = vec!["bytes=0-1".into()];
    let plan = svc.respond(&req).await;
    assert_eq!(plan.status, status::OK);
    assert_eq!(plan.content_length, Some(CONTENT.len() as u64));
    assert!(matches!(plan.body, Body::Empty));
}

#[tokio::test]
async fn ranges_start_middle_end_suffix_open() {
    let (_d, svc) = setup();
    for (value, want) in [
        ("bytes=0-3", 0..4),
        ("bytes=5-9", 5..10),
        ("bytes=15-19", 15..20),
        ("bytes=-4", 16..20),
        ("bytes=12-", 12..20),
    ] {
        let mut req = get("/f.bin");
        req.range_headers = vec![value.into()];
        let plan = svc.respond(&req).await;
        assert_eq!(plan.status, status::PARTIAL_CONTENT, "{value}");
        assert_eq!(
            plan.content_range,
            Some(ContentRange::Satisfied {
                range: want.clone(),
                size: 20
            }),
            "{value}"
        );
        let (body, _) = drain(plan).await;
        assert_eq!(
            body,
            &CONTENT[want.start as usize..want.end as usize],
            "{value}"
        );
    }
}

#[tokio::test]
async fn multiple_or_malformed_ranges_serve_the_whole() {
    let (_d, svc) = setup();
    for values in [
        vec!["bytes=0-1,3-4".to_string()],
        vec!["bytes=0-1".to_string(), "bytes=2-3".to_string()],
        vec!["lines=1-2".to_string()],
        vec!["bytes=x-y".to_string()],
    ] {
        let mut req = get("/f.bin");
        req.range_headers = values.clone();
        let plan = svc.respond(&req).await;
        assert_eq!(plan.status, status::OK, "{values:?}");
        assert_eq!(plan.content_length, Some(20));
    }
}

#[tokio::test]
async fn unsatisfiable_range_is_416_with_the_size() {
    let (_d, svc) = setup();
    let mut req = get("/f.bin");
    req.range_headers = vec!["bytes=20-".into()];
    let plan = svc.respond(&req).await;
    assert_eq!(plan.status, status::RANGE_NOT_SATISFIABLE);
    assert_eq!(
        plan.content_range,
        Some(ContentRange::Unsatisfied { size: 20 })
    );
    assert_eq!(plan.content_length, Some(0));
    assert!(matches!(plan.body, Body::Empty));
}

#[tokio::test]
async fn if_range_only_a_matching_strong_etag_keeps_the_range() {
    let (_d, svc) = setup();
    let etag = svc.respond(&get("/f.bin")).await.etag.expect("etag");
    let weak = format!("W/{etag}");
    for (if_range, want) in [
        (etag.as_str(), status::PARTIAL_CONTENT),
        ("\"other\"", status::OK),
        (weak.as_str(), status::OK),
        ("Sat, 01 Jan 2000 00:00:00 GMT", status::OK),
    ] {
        let mut req = get("/f.bin");
        req.range_headers = vec!["bytes=0-3".into()];
        req.if_range = Some(if_range.into());
        assert_eq!(svc.respond(&req).await.status, want, "{if_range}");
    }
}

#[tokio::test]
async fn if_match_mismatch_is_412() {
    let (_d, svc) = setup();
    let mut req = get("/f.bin");
    req.if_match = Some("\"nope\"".into());
    let plan = svc.respond(&req).await;
    assert_eq!(plan.status, status::PRECONDITION_FAILED);
    assert!(matches!(plan.body, Body::Empty));
}

#[tokio::test]
async fn exact_range_clamps_the_end_and_refuses_a_start_past_it() {
    let (_d, svc) = setup();
    let mut req = get("/f.bin");
    req.exact_range = Some(10..100);
    let plan = svc.respond(&req).await;
    assert_eq!(plan.status, status::PARTIAL_CONTENT);
    assert_eq!(plan.range, Some(10..20));
    req.exact_range = Some(20..30);
    assert_eq!(
        svc.respond(&req).await.status,
        status::RANGE_NOT_SATISFIABLE
    );
}

#[tokio::test]
async fn other_methods_are_405_with_allow() {
    let (_d, svc) = setup();
    let req = Request::new(Method::Other("DELETE".into()), "/f.bin", peer(), "test");
    let plan = svc.respond(&req).await;
    assert_eq!(plan.status, status::METHOD_NOT_ALLOWED);
    assert_eq!(plan.allow, Some("GET, HEAD, OPTIONS, PROPFIND"));
}

#[tokio::test]
async fn want_digest_with_trailers_hashes_the_range_sent() {
    let (_d, svc) = setup();
    let mut req = get("/f.bin").with_want_content_digest(["sha-256=3"]);
    req.trailers_ok = true;
    req.range_headers = vec!["bytes=2-5".into()];
    let plan = svc.respond(&req).await;
    assert!(plan.trailer);
    assert!(plan.content_digest.is_none());
    let (body, trailer) = drain(plan).await;
    assert_eq!(body, &CONTENT[2..6]);
    assert_eq!(trailer, Some(sha(&CONTENT[2..6])));
}

#[tokio::test]
async fn want_digest_without_trailers_sends_none_until_known() {
    let (_d, svc) = setup();
    let req = get("/f.bin").with_want_content_digest(["sha-256=1"]);
    let plan = svc.respond(&req).await;
    assert!(!plan.trailer);
    assert!(plan.content_digest.is_none());
    assert_eq!(drain(plan).await.1, None);
}

#[tokio::test]
async fn a_hashed_whole_body_fills_the_cache_for_the_next_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f.bin"), CONTENT).expect("write");
    let svc = Service::new(ServiceConfig::new(
        dir.path().canonicalize().expect("canonical root"),
    ));
    let mut req = get("/f.bin").with_want_content_digest(["sha-256"]);
    req.trailers_ok = true;
    let plan = svc.respond(&req).await;
    let (_, trailer) = drain(plan).await;
    assert_eq!(trailer, Some(sha(CONTENT)));
    // Up front now: no trailer needed, and the representation digest is known.
    req.trailers_ok = false;
    let plan = svc.respond(&req).await;
    assert_eq!(
        plan.repr_digest.map(|d| d.to_header_value()),
        Some(sha(CONTENT))
    );
    assert_eq!(
        plan.content_digest.map(|d| d.to_header_value()),
        Some(sha(CONTENT))
    );
}

/// A range sent with a digest trailer is remembered: the next request for the same range of
/// the same content gets the remembered digest without a second pass over the bytes, and a
/// rewritten file (same size, mtime put back) is hashed afresh.
#[tokio::test]
async fn a_range_digest_is_remembered_until_the_file_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.bin");
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &data).expect("write");
    let root = dir.path().canonicalize().expect("canonical root");
    let mut cfg = ServiceConfig::new(root.clone());
    cfg.repr_digest = false;
    let svc = Service::new(cfg);
    let resource = || xfer_common::Resource::open(&root, "/big.bin", None).expect("open");
    let mut req = get("/big.bin").with_want_content_digest(["sha-256"]);
    req.trailers_ok = true;
    let chunk = 0..(2u64 << 20);
    req.range_headers = vec![format!("bytes=0-{}", chunk.end - 1)];
    let digests = svc.config().digests.clone();

    let (body, trailer) = drain(svc.respond(&req).await).await;
    assert_eq!(body, &data[..2 << 20]);
    assert_eq!(trailer, Some(sha(&data[..2 << 20])));
    let remembered = digests.get_range(&resource(), &chunk).expect("remembered");
    assert_eq!(Some(remembered.to_header_value()), trailer);

    // What the next answer sends is the remembered value, not a new hash of the bytes.
    let planted = Sha256Hasher::new().finish();
    digests.insert_range(&resource(), &(0..(1u64 << 20)), planted);
    let mut other = req.clone();
    other.range_headers = vec![format!("bytes=0-{}", (1u64 << 20) - 1)];
    let (_, trailer) = drain(svc.respond(&other).await).await;
    assert_eq!(trailer, Some(planted.to_header_value()));

    // Same size, mtime put back: the change time still tells the contents apart (after a
    // pause longer than a coarse timestamp tick).
    std::thread::sleep(std::time::Duration::from_millis(20));
    let before = std::fs::metadata(&path).expect("stat");
    let changed: Vec<u8> = data.iter().map(|b| b ^ 0xff).collect();
    std::fs::write(&path, &changed).expect("rewrite");
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(before.modified()?))
        .expect("put the mtime back");
    let (body, trailer) = drain(svc.respond(&req).await).await;
    assert_eq!(body, &changed[..2 << 20]);
    assert_eq!(trailer, Some(sha(&changed[..2 << 20])));
}

#[tokio::test]
async fn refusals_map_to_statuses() {
    let (_d, svc) = setup();
    let long = format!("/{}", "a".repeat(300));
    for (path, want) in [
        ("/missing", status::NOT_FOUND),
        ("/../etc/passwd", status::FORBIDDEN),
        ("/%2e%2e/etc/passwd", status::FORBIDDEN),
        (long.as_str(), status::URI_TOO_LONG),
    ] {
        let plan = svc.respond(&get(path)).await;
        assert_eq!(plan.status, want, "{path}");
        assert!(matches!(plan.body, Body::Message(_)), "{path}");
    }
}

#[test]
fn uri_too_long_is_permanent_for_both_clients() {
    // Both clients turn a status into `TransferError::Status`, retried only when this says so.
    assert!(!xfer_core::error::is_transient_status(status::URI_TOO_LONG));
    assert!(xfer_core::error::is_transient_status(
        status::INTERNAL_ERROR
    ));
}

/// RFC 3230 `Want-Digest`, as gfal2 asks for adler32: the known vectors for "Wikipedia"
/// (adler32 11e60398) and the empty string's MD5 (d41d8cd9…), best algorithm first, unknown
/// ones ignored.
#[tokio::test]
async fn want_digest_is_answered_with_digest() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("w.txt"), b"Wikipedia").expect("write");
    std::fs::write(dir.path().join("e.txt"), b"").expect("write");
    let svc = Service::new(ServiceConfig::new(
        dir.path().canonicalize().expect("canonical root"),
    ));
    let ask = |path: &str, want: &str| {
        let mut r = Request::new(Method::Head, path, peer(), "test");
        r.want_digest = vec![want.to_string()];
        r
    };
    let digest = |plan: &ResponsePlan| plan.digest.as_ref().map(|c| c.to_rfc3230_member());
    let plan = svc.respond(&ask("/w.txt", "ADLER32")).await;
    assert_eq!(digest(&plan).as_deref(), Some("adler32=11e60398"));
    let plan = svc
        .respond(&ask("/e.txt", "md5;q=0.9, adler32;q=0.1, crc64"))
        .await;
    assert_eq!(
        digest(&plan).as_deref(),
        Some("md5=1B2M2Y8AsgTpgAmY7PhCfg==")
    );
    let plan = svc.respond(&ask("/w.txt", "crc64, unknown")).await;
    assert_eq!(plan.status, status::OK);
    assert_eq!(digest(&plan), None, "an unknown algorithm is ignored");
}

/// The `Repr-Digest` a plan's head carries, as the HTTP codec writes it.
fn repr_digest(plan: &ResponsePlan) -> Option<String> {
    plan.repr_digest_field()
}

/// `Want-Digest` split over several field lines is one list (RFC 9110 §5.3): the best
/// q-value wins whichever line it is on.
#[tokio::test]
async fn want_digest_lines_make_one_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("w.txt"), b"Wikipedia").expect("write");
    let svc = Service::new(ServiceConfig::new(
        dir.path().canonicalize().expect("canonical root"),
    ));
    let mut r = Request::new(Method::Head, "/w.txt", peer(), "test");
    r.want_digest = vec!["md5;q=0.2".into(), "ADLER32;q=0.9, sha-512".into()];
    let plan = svc.respond(&r).await;
    let digest = plan.digest.map(|c| c.to_rfc3230_member());
    assert_eq!(digest.as_deref(), Some("adler32=11e60398"));
}

/// RFC 9530 `Want-Repr-Digest: adler=…` is answered with `Repr-Digest: adler=:…:`, the best
/// ranked of adler and MD5; unknown keys, `0` and a field that is not a dictionary are
/// ignored, never an error.
#[tokio::test]
async fn want_repr_digest_adler_is_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("w.txt"), b"Wikipedia").expect("write");
    let mut cfg = ServiceConfig::new(dir.path().canonicalize().expect("canonical root"));
    cfg.repr_digest = false;
    let svc = Service::new(cfg);
    let ask = |want: &[&str]| {
        Request::new(Method::Head, "/w.txt", peer(), "test").with_want_repr_digest(want.to_vec())
    };
    let plan = svc.respond(&ask(&["adler=3"])).await;
    assert_eq!(repr_digest(&plan).as_deref(), Some("adler=:EeYDmA==:"));
    let plan = svc.respond(&ask(&["crc32c=9, adler=1", "md5=5"])).await;
    assert_eq!(
        repr_digest(&plan).as_deref(),
        Some("md5=:nGdyhoZqrTj46bZg9UEYFA==:")
    );
    for ignored in [
        &["adler=0"][..],
        &["sha-512=3"],
        &["ADLER32;q=1"],
        &["adler=(1)"],
    ] {
        let plan = svc.respond(&ask(ignored)).await;
        assert_eq!(plan.status, status::OK, "{ignored:?}");
        assert_eq!(repr_digest(&plan), None, "{ignored:?}");
    }
}

/// A known SHA-256 that the client ranks first is all `Repr-Digest` carries; ranked below
/// adler, or not yet known, adler comes too.
#[tokio::test]
async fn want_repr_digest_keeps_a_known_sha256() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("w.txt"), b"Wikipedia").expect("write");
    let svc = Service::new(ServiceConfig::new(
        dir.path().canonicalize().expect("canonical root"),
    ));
    let ask = |want: &str| {
        Request::new(Method::Head, "/w.txt", peer(), "test").with_want_repr_digest([want])
    };
    // Not known yet: adler stands in.
    let plan = svc.respond(&ask("sha-256=10, adler=1")).await;
    let first = repr_digest(&plan).expect("a repr-digest");
    assert!(first.contains("adler=:EeYDmA==:"), "{first}");
    // Asking through Want-Digest computes the SHA-256 and caches it for Repr-Digest.
    let mut r = Request::new(Method::Head, "/w.txt", peer(), "test");
    r.want_digest = vec!["sha-256".into()];
    svc.respond(&r).await;
    let plan = svc.respond(&ask("sha-256=10, adler=1")).await;
    assert_eq!(repr_digest(&plan), Some(sha(b"Wikipedia")));
    let plan = svc.respond(&ask("sha-256=1, adler=10")).await;
    assert_eq!(
        repr_digest(&plan),
        Some(format!("{}, adler=:EeYDmA==:", sha(b"Wikipedia")))
    );
}

/// A whole file sent once leaves its adler32 in the cache, so FTS's `Want-Digest` after a
/// copy needs no second read; a range does not, and a rewrite (same size, mtime put back)
/// is not answered from the old entry.
#[tokio::test]
async fn adler32_is_computed_while_sending_and_invalidated_by_a_rewrite() {
    use xfer_core::checksum::{ChecksumAlgorithm, Checksummer};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.txt");
    std::fs::write(&path, b"Wikipedia").expect("write");
    let root = dir.path().canonicalize().expect("canonical root");
    let svc = Service::new(ServiceConfig::new(root.clone()));
    let resource = || xfer_common::Resource::open(&root, "/w.txt", None).expect("open");
    let known = |svc: &Service| {
        svc.config()
            .checksums
            .lookup(&resource(), ChecksumAlgorithm::Adler32)
    };

    let mut ranged = get("/w.txt");
    ranged.range_headers = vec!["bytes=0-3".into()];
    drain(svc.respond(&ranged).await).await;
    assert_eq!(known(&svc), None, "a range is not the whole file");

    let (body, _) = drain(svc.respond(&get("/w.txt")).await).await;
    assert_eq!(body, b"Wikipedia");
    assert_eq!(
        known(&svc),
        Some(Checksummer::of(ChecksumAlgorithm::Adler32, b"Wikipedia"))
    );

    let before = std::fs::metadata(&path).expect("stat");
    std::fs::write(&path, b"wikipedia").expect("rewrite");
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(before.modified()?))
        .expect("put the mtime back");
    let mut r = Request::new(Method::Head, "/w.txt", peer(), "test");
    r.want_digest = vec!["adler32".into()];
    let plan = svc.respond(&r).await;
    let want = Checksummer::of(ChecksumAlgorithm::Adler32, b"wikipedia").to_rfc3230_member();
    assert_eq!(plan.digest.map(|c| c.to_rfc3230_member()), Some(want));
}

/// A large synthetic resource is never read whole for a checksum: one `HEAD` must not hold a
/// thread for hours. A small one is answered.
#[tokio::test]
async fn no_checksum_of_a_huge_synthetic_resource() {
    let (_d, svc) = setup();
    let ask = |path: &str| {
        let mut r = Request::new(Method::Head, "/.xfer/synthetic", peer(), "test");
        r.query = Some(path.to_string());
        r.want_digest = vec!["adler32".into()];
        r
    };
    let plan = svc.respond(&ask("size=2G&seed=1")).await;
    assert_eq!(plan.status, status::OK);
    assert_eq!(plan.digest, None);
    let plan = svc.respond(&ask("size=1000&seed=1")).await;
    assert!(plan.digest.is_some());
}
