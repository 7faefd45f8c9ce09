//! Uploads through `Service::respond_with_body`, without sockets: whole-file PUT, parallel
//! chunks out of order with a bad chunk re-sent, completion with a wrong digest, restart of
//! the server mid-upload, and what may never be written.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use xfer_core::digest::Sha256Digest;
use xfer_service::upload::{UploadBody, UploadHead};
use xfer_service::{
    status, AccessControl, Credentials, Method, Request, Secret, Service, ServiceConfig,
    UploadConfig,
};

const ACCESS: &str = r#"
[[token]]
name = "writer"
token = "w"
access = "write"
prefix = "/in"

[[token]]
name = "reader"
token = "r"
access = "read"
prefix = "/"

[[token]]
name = "creator"
token = "c"
access = "create"
prefix = "/in"

[[token]]
name = "modifier"
token = "m"
access = "modify"
prefix = "/in"
"#;

/// A waker that only notes it was woken, for polling a request by hand.
#[derive(Default)]
struct Woken(std::sync::atomic::AtomicBool);

impl std::task::Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// A body delivered in pieces, as a network would.
struct Pieces(VecDeque<Bytes>);

impl Pieces {
    fn of(data: &[u8]) -> Self {
        Self(data.chunks(7_000).map(Bytes::copy_from_slice).collect())
    }
}

impl UploadBody for Pieces {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<std::io::Result<Bytes>>> + Send + '_>> {
        let next = self.0.pop_front().map(Ok);
        Box::pin(async move { next })
    }
}

fn service(dir: &Path) -> Service {
    std::fs::create_dir_all(dir.join("root")).expect("mkdir");
    let access_file = xfer_test_support::write_access_file(dir, ACCESS);
    let mut cfg = ServiceConfig::new(dir.join("root").canonicalize().expect("root"));
    cfg.repr_digest = false;
    cfg.access = Arc::new(AccessControl::from_file(&access_file, true).expect("access"));
    cfg.uploads = Some(UploadConfig::default());
    Service::new(cfg)
}

fn put(path: &str, token: Option<&str>, upload: UploadHead) -> Request {
    let mut r = Request::new(
        Method::Put,
        path,
        SocketAddr::from(([127, 0, 0, 1], 9)),
        "test",
    );
    r.credentials = Credentials {
        bearer: token.map(Secret::new),
        client_certificate: None,
    };
    r.upload = upload;
    r
}

/// The `HEAD` asking which ranges of upload [`ID`] the server holds.
fn upload_status(path: &str) -> Request {
    let mut r = put(
        path,
        Some("w"),
        UploadHead {
            id: Some(ID.into()),
            ..UploadHead::default()
        },
    );
    r.method = Method::Head;
    r
}

fn data(n: usize) -> Vec<u8> {
    xfer_test_support::random_bytes(n, 31)
}

fn digest(b: &[u8]) -> String {
    Sha256Digest::of(b).to_header_value()
}

const ID: &str = "upload-id-0123456789";

fn chunk_head(all: &[u8], start: usize, end: usize, digest_of: &[u8]) -> UploadHead {
    UploadHead {
        content_range: Some(format!("bytes {start}-{}/{}", end - 1, all.len())),
        content_digest: Some(digest(digest_of)),
        id: Some(ID.into()),
        ..UploadHead::default()
    }
}

fn complete_head(declared: &[u8]) -> UploadHead {
    UploadHead {
        repr_digest: Some(digest(declared)),
        id: Some(ID.into()),
        complete: true,
        ..UploadHead::default()
    }
}

#[tokio::test]
async fn whole_file_put_lands_atomically_and_is_verified() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    let body = data(300_000);
    let head = UploadHead {
        content_length: Some(body.len() as u64),
        content_digest: Some(digest(&body)),
        ..UploadHead::default()
    };
    let plan = svc
        .respond_with_body(
            &put("/in/a/b.bin", Some("w"), head.clone()),
            &mut Pieces::of(&body),
        )
        .await;
    assert_eq!(plan.status, status::CREATED, "{:?}", plan.detail);
    assert_eq!(
        std::fs::read(dir.path().join("root/in/a/b.bin")).expect("read"),
        body
    );

    // Again: replaced, 204.
    let plan = svc
        .respond_with_body(&put("/in/a/b.bin", Some("w"), head), &mut Pieces::of(&body))
        .await;
    assert_eq!(plan.status, status::NO_CONTENT);

    // A wrong declared digest stores nothing and leaves no staging file.
    let bad = UploadHead {
        content_digest: Some(digest(b"something else")),
        ..UploadHead::default()
    };
    let plan = svc
        .respond_with_body(&put("/in/c.bin", Some("w"), bad), &mut Pieces::of(&body))
        .await;
    assert_eq!(plan.status, status::BAD_REQUEST);
    let left: Vec<_> = std::fs::read_dir(dir.path().join("root/in"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("a")], "{left:?}");
}

#[tokio::test]
async fn who_may_write_where() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    std::fs::create_dir_all(dir.path().join("root/in/dir")).expect("mkdir");
    std::os::unix::fs::symlink("/etc", dir.path().join("root/in/link")).expect("symlink");
    let body = data(1000);
    for (path, token, want) in [
        ("/in/x", None, status::UNAUTHORIZED),
        ("/in/x", Some("nope"), status::UNAUTHORIZED),
        ("/in/x", Some("r"), status::FORBIDDEN),
        ("/elsewhere/x", Some("w"), status::FORBIDDEN),
        ("/in/../x", Some("w"), status::FORBIDDEN),
        ("/in/dir", Some("w"), status::CONFLICT),
        ("/in/link/passwd", Some("w"), status::FORBIDDEN),
        ("/in/link", Some("w"), status::FORBIDDEN),
        ("/in/.xfer-upload.sneaky", Some("w"), status::NOT_FOUND),
    ] {
        let plan = svc
            .respond_with_body(
                &put(path, token, UploadHead::default()),
                &mut Pieces::of(&body),
            )
            .await;
        assert_eq!(plan.status, want, "{path} {token:?}: {:?}", plan.detail);
    }
    assert!(!dir.path().join("root/x").exists() && !dir.path().join("root/elsewhere").exists());
    assert_eq!(
        std::fs::read_link(dir.path().join("root/in/link")).expect("link"),
        Path::new("/etc")
    );
}

/// `create` adds files and never replaces one; `modify` (and `write`, its old name) does both.
#[tokio::test]
async fn create_adds_and_modify_replaces() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    let send = async |path: &str, token: &str, body: &[u8]| {
        svc.respond_with_body(
            &put(path, Some(token), UploadHead::default()),
            &mut Pieces::of(body),
        )
        .await
    };
    let plan = send("/in/new.bin", "c", b"first").await;
    assert_eq!(plan.status, status::CREATED, "{:?}", plan.detail);
    let plan = send("/in/new.bin", "c", b"second").await;
    assert_eq!(plan.status, status::FORBIDDEN, "{:?}", plan.detail);
    assert_eq!(
        std::fs::read(dir.path().join("root/in/new.bin")).expect("read"),
        b"first",
        "a create-only caller replaced a file"
    );
    let plan = send("/in/sub/deeper.bin", "c", b"x").await;
    assert_eq!(plan.status, status::CREATED, "{:?}", plan.detail);
    let plan = send("/in/new.bin", "m", b"third").await;
    assert_eq!(plan.status, status::NO_CONTENT, "{:?}", plan.detail);
    let plan = send("/in/new.bin", "w", b"fourth").await;
    assert_eq!(plan.status, status::NO_CONTENT, "{:?}", plan.detail);
    let plan = send("/in/other.bin", "m", b"x").await;
    assert_eq!(plan.status, status::CREATED, "{:?}", plan.detail);
    let plan = send("/elsewhere.bin", "c", b"x").await;
    assert_eq!(plan.status, status::FORBIDDEN, "{:?}", plan.detail);
    assert_eq!(
        std::fs::read(dir.path().join("root/in/new.bin")).expect("read"),
        b"fourth"
    );
}

#[tokio::test]
async fn parallel_chunks_resume_across_a_restart_and_complete_verified() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = data(1_000_000);
    let parts = [(600_000, 1_000_000), (0, 300_000), (300_000, 600_000)];
    {
        let svc = service(dir.path());
        // The last chunk first, then the first with a corrupted byte: refused, not recorded.
        let (s, e) = parts[0];
        let plan = svc
            .respond_with_body(
                &put("/in/p.bin", Some("w"), chunk_head(&all, s, e, &all[s..e])),
                &mut Pieces::of(&all[s..e]),
            )
            .await;
        assert_eq!(plan.status, status::NO_CONTENT, "{:?}", plan.detail);
        let (s, e) = parts[1];
        let mut corrupt = all[s..e].to_vec();
        corrupt[1234] ^= 1;
        let plan = svc
            .respond_with_body(
                &put("/in/p.bin", Some("w"), chunk_head(&all, s, e, &all[s..e])),
                &mut Pieces::of(&corrupt),
            )
            .await;
        assert_eq!(plan.status, status::BAD_REQUEST);
        // Completing now is refused: bytes are missing.
        let plan = svc
            .respond_with_body(
                &put("/in/p.bin", Some("w"), complete_head(&all)),
                &mut Pieces::of(&[]),
            )
            .await;
        assert_eq!(plan.status, status::CONFLICT);
        assert!(!dir.path().join("root/in/p.bin").exists());
    }
    // A new server process: the upload's record on disk is all that is left.
    let svc = service(dir.path());
    let status_req = upload_status("/in/p.bin");
    let plan = svc.respond(&status_req).await;
    assert_eq!(plan.status, status::OK);
    assert!(
        plan.headers
            .contains(&("xfer-upload-received", "600000-999999".into())),
        "{:?}",
        plan.headers
    );
    for &(s, e) in &parts[1..] {
        let plan = svc
            .respond_with_body(
                &put("/in/p.bin", Some("w"), chunk_head(&all, s, e, &all[s..e])),
                &mut Pieces::of(&all[s..e]),
            )
            .await;
        assert_eq!(plan.status, status::NO_CONTENT, "{:?}", plan.detail);
    }
    // A wrong whole-file digest: refused, nothing under the final name.
    let plan = svc
        .respond_with_body(
            &put("/in/p.bin", Some("w"), complete_head(b"not it")),
            &mut Pieces::of(&[]),
        )
        .await;
    assert_eq!(plan.status, status::BAD_REQUEST);
    assert!(!dir.path().join("root/in/p.bin").exists());
}

/// The client goes away (its request's future is dropped) at the moment its chunk's record
/// line is on disk: the status the next client asks for holds that chunk all the same.
#[tokio::test]
async fn a_chunk_on_record_is_held_even_when_its_request_is_dropped() {
    let all = data(600_000);
    // On a loaded machine the blocking pool can finish the record and the rest of the answer
    // before this test looks between two polls; such a round proves nothing, so it is run
    // again on a fresh server. Every round that does drop the request is checked.
    for round in 0..20 {
        let dir = tempfile::tempdir().expect("tempdir");
        let svc = service(dir.path());
        if !drop_after_record(&svc, dir.path(), &all).await {
            eprintln!("round {round}: answered before the record was seen; again");
            continue;
        }
        let plan = svc.respond(&upload_status("/in/d.bin")).await;
        assert_eq!(plan.status, status::OK);
        assert!(
            plan.headers
                .contains(&("xfer-upload-received", "0-299999".into())),
            "{:?}",
            plan.headers
        );
        return;
    }
    panic!("in 20 rounds the request was never caught between its record and its answer");
}

/// Send the first half of `all` as a chunk and drop the request the moment its record line
/// is on disk; false when it answered before the line was seen.
async fn drop_after_record(svc: &Service, dir: &std::path::Path, all: &[u8]) -> bool {
    let req = put(
        "/in/d.bin",
        Some("w"),
        chunk_head(all, 0, 300_000, &all[..300_000]),
    );
    let mut body = Pieces::of(&all[..300_000]);
    let recorded = || {
        std::fs::read_dir(dir.join("root/in"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".ranges"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .any(|t| t.lines().any(|l| l == "0-300000"))
    };
    let answer = svc.respond_with_body(&req, &mut body);
    tokio::pin!(answer);
    let woken = Arc::new(Woken::default());
    let waker = std::task::Waker::from(Arc::clone(&woken));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Poll by hand, one step at a time. Between steps, wait for the step's wake-up and look
    // at the record; drop the request as soon as the line is there, before its future is
    // polled again. The line is written before that wake-up, so it is seen.
    loop {
        let mut cx = std::task::Context::from_waker(&waker);
        if answer.as_mut().poll(&mut cx).is_ready() {
            return false;
        }
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "the chunk was never recorded"
            );
            let was_woken = woken.0.swap(false, std::sync::atomic::Ordering::AcqRel);
            if recorded() {
                return true;
            }
            if was_woken {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
}

/// A completion whose client goes away after any number of its steps is done whole or not
/// at all: never the file stored while the upload stays open (and refuses to complete).
#[tokio::test]
async fn a_dropped_completion_is_done_whole_or_not_at_all() {
    let all = data(400_000);
    for steps in 1..=4 {
        let dir = tempfile::tempdir().expect("tempdir");
        let svc = service(dir.path());
        for (s, e) in [(0, 200_000), (200_000, 400_000)] {
            let plan = svc
                .respond_with_body(
                    &put("/in/c.bin", Some("w"), chunk_head(&all, s, e, &all[s..e])),
                    &mut Pieces::of(&all[s..e]),
                )
                .await;
            assert_eq!(plan.status, status::NO_CONTENT);
        }
        let completion = put("/in/c.bin", Some("w"), complete_head(&all));
        let mut empty = Pieces::of(&[]);
        {
            let answer = svc.respond_with_body(&completion, &mut empty);
            tokio::pin!(answer);
            let woken = Arc::new(Woken::default());
            let waker = std::task::Waker::from(Arc::clone(&woken));
            for _ in 0..steps {
                let mut cx = std::task::Context::from_waker(&waker);
                if answer.as_mut().poll(&mut cx).is_ready() {
                    break;
                }
                xfer_test_support::wait_until_async(
                    std::time::Duration::from_secs(10),
                    "the completion to be woken",
                    || woken.0.swap(false, std::sync::atomic::Ordering::AcqRel),
                )
                .await;
            }
        }
        let stored = dir.path().join("root/in/c.bin");
        let status_req = upload_status("/in/c.bin");
        // Work that outlived the request settles; then the upload is either stored and gone,
        // or still open with all its bytes.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let open = loop {
            let open = svc.respond(&status_req).await.status == status::OK;
            if open != stored.exists() {
                break open;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "after {steps} steps: stored = {}, upload open = {open}",
                stored.exists()
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        if open {
            let plan = svc
                .respond_with_body(&completion, &mut Pieces::of(&[]))
                .await;
            assert_eq!(
                plan.status,
                status::CREATED,
                "after {steps} steps: {:?}",
                plan.detail
            );
        }
        assert_eq!(
            std::fs::read(&stored).expect("read"),
            all,
            "after {steps} steps"
        );
    }
}

#[tokio::test]
async fn completion_with_the_right_digest_renames_into_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    let all = data(500_000);
    for (s, e) in [(250_000, 500_000), (0, 250_000)] {
        let plan = svc
            .respond_with_body(
                &put("/in/q.bin", Some("w"), chunk_head(&all, s, e, &all[s..e])),
                &mut Pieces::of(&all[s..e]),
            )
            .await;
        assert_eq!(plan.status, status::NO_CONTENT);
    }
    let plan = svc
        .respond_with_body(
            &put("/in/q.bin", Some("w"), complete_head(&all)),
            &mut Pieces::of(&[]),
        )
        .await;
    assert_eq!(plan.status, status::CREATED, "{:?}", plan.detail);
    assert_eq!(
        std::fs::read(dir.path().join("root/in/q.bin")).expect("read"),
        all
    );
    let names: Vec<String> = std::fs::read_dir(dir.path().join("root/in"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        vec!["q.bin".to_string()],
        "no staging file or record left"
    );
}

#[tokio::test]
async fn uploads_off_answers_405() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("root")).expect("mkdir");
    let svc = Service::new(ServiceConfig::new(
        dir.path().join("root").canonicalize().expect("root"),
    ));
    let plan = svc
        .respond_with_body(
            &put("/x", None, UploadHead::default()),
            &mut Pieces::of(b"x"),
        )
        .await;
    assert_eq!(plan.status, status::METHOD_NOT_ALLOWED);
    assert!(!dir.path().join("root/x").exists());
}

/// A chunk sent again after it was recorded, corrupted this time: refused, and it does not
/// replace the verified bytes, so the upload still completes with the right file.
#[tokio::test]
async fn a_corrupt_resend_of_a_recorded_chunk_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    let all = data(400_000);
    for (s, e) in [(0, 200_000), (200_000, 400_000)] {
        let plan = svc
            .respond_with_body(
                &put("/in/r.bin", Some("w"), chunk_head(&all, s, e, &all[s..e])),
                &mut Pieces::of(&all[s..e]),
            )
            .await;
        assert_eq!(plan.status, status::NO_CONTENT);
    }
    let mut corrupt = all[..200_000].to_vec();
    corrupt[99] ^= 0xff;
    let plan = svc
        .respond_with_body(
            &put(
                "/in/r.bin",
                Some("w"),
                chunk_head(&all, 0, 200_000, &all[..200_000]),
            ),
            &mut Pieces::of(&corrupt),
        )
        .await;
    assert_eq!(plan.status, status::BAD_REQUEST);
    let plan = svc
        .respond_with_body(
            &put("/in/r.bin", Some("w"), complete_head(&all)),
            &mut Pieces::of(&[]),
        )
        .await;
    assert_eq!(plan.status, status::CREATED, "{:?}", plan.detail);
    assert_eq!(
        std::fs::read(dir.path().join("root/in/r.bin")).expect("read"),
        all
    );
}

/// A body that hands out `first`, then tells `asked` that more was wanted and never ends, as
/// a client that went away mid-upload would; or, with nothing, one that may not be read.
struct Stalled {
    first: Option<Bytes>,
    asked: Option<tokio::sync::oneshot::Sender<()>>,
    polled: bool,
}

impl UploadBody for Stalled {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<std::io::Result<Bytes>>> + Send + '_>> {
        self.polled = true;
        if let Some(first) = self.first.take() {
            return Box::pin(async move { Some(Ok(first)) });
        }
        if let Some(asked) = self.asked.take() {
            let _ = asked.send(());
        }
        Box::pin(std::future::pending())
    }
}

fn staging_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".xfer-upload."))
        .collect()
}

/// A declared size the disk cannot hold is answered 507 before a byte of the body is read,
/// for a whole PUT and for the first chunk of a parallel upload (whose staging file would
/// be that large).
#[tokio::test]
async fn no_room_is_answered_507_before_the_body_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    // Below the 16 TiB upload limit, above any disk a test runs on.
    let huge: u64 = 15 << 40;
    let mut body = Stalled {
        first: None,
        asked: None,
        polled: false,
    };
    let whole = UploadHead {
        content_length: Some(huge),
        ..UploadHead::default()
    };
    let first_chunk = UploadHead {
        content_range: Some(format!("bytes 0-999/{huge}")),
        content_digest: Some(digest(&data(1000))),
        id: Some(ID.into()),
        ..UploadHead::default()
    };
    for (head, what) in [(whole, "whole"), (first_chunk, "chunk")] {
        let plan = svc
            .respond_with_body(&put("/in/huge.bin", Some("w"), head), &mut body)
            .await;
        let detail = plan.detail;
        assert_eq!(
            plan.status,
            status::INSUFFICIENT_STORAGE,
            "{what}: {detail:?}"
        );
        assert!(
            !body.polled,
            "{what}: the body of a refused upload was read"
        );
    }
    assert_eq!(
        staging_names(&dir.path().join("root/in")),
        Vec::<String>::new()
    );
}

/// A whole PUT whose client goes away mid-body (its request future dropped) leaves no
/// staging file behind.
#[tokio::test]
async fn a_whole_put_cut_off_mid_body_removes_its_staging_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    std::fs::create_dir_all(dir.path().join("root/in")).expect("mkdir");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut body = Stalled {
        first: Some(Bytes::from(data(100_000))),
        asked: Some(tx),
        polled: false,
    };
    let head = UploadHead {
        content_length: Some(1_000_000),
        ..UploadHead::default()
    };
    let req = put("/in/cut.bin", Some("w"), head);
    tokio::select! {
        plan = svc.respond_with_body(&req, &mut body) => {
            panic!("a stalled body was answered: {} {:?}", plan.status, plan.detail)
        }
        _ = rx => {}
    }
    assert_eq!(
        staging_names(&dir.path().join("root/in")),
        Vec::<String>::new()
    );
    assert!(!dir.path().join("root/in/cut.bin").exists());
}

/// Symbolic links planted at the staging file and at the received-ranges record of a
/// parallel upload (names a client can predict, as it picks the id) are never written or
/// read through: the upload fails, the links' targets are untouched.
#[tokio::test]
async fn a_link_planted_at_a_staging_name_is_never_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path());
    let inside = dir.path().join("root/in");
    std::fs::create_dir_all(&inside).expect("mkdir");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let all = data(200_000);
    let staging = format!(".xfer-upload.{ID}.p.bin");
    let ranges = format!("{staging}.ranges");
    // A record a reader through the link would take for a complete upload.
    let victim_record = format!("size {}\n0-{}\n", all.len(), all.len());
    for (links, what) in [
        (&[staging.as_str()][..], "staging"),
        (&[ranges.as_str()][..], "record"),
        (&[staging.as_str(), ranges.as_str()][..], "both"),
    ] {
        let victim_text = |link: &str| {
            if link.ends_with(".ranges") {
                victim_record.clone()
            } else {
                "precious\n".to_string()
            }
        };
        for link in links {
            let victim = outside.join(link);
            std::fs::write(&victim, victim_text(link)).expect("victim");
            std::os::unix::fs::symlink(&victim, inside.join(link)).expect("symlink");
        }
        for (head, body) in [
            (chunk_head(&all, 0, all.len(), &all), &all[..]),
            (complete_head(&all), &[][..]),
        ] {
            let plan = svc
                .respond_with_body(&put("/in/p.bin", Some("w"), head), &mut Pieces::of(body))
                .await;
            let detail = plan.detail;
            assert!(plan.status >= 400, "{what}: {} {detail:?}", plan.status);
        }
        for link in links {
            let victim = outside.join(link);
            assert_eq!(
                std::fs::read_to_string(&victim).expect("victim"),
                victim_text(link),
                "{what}: written through {link}"
            );
            let meta = std::fs::symlink_metadata(inside.join(link)).expect("link");
            assert!(meta.file_type().is_symlink(), "{what}: {link} replaced");
            std::fs::remove_file(inside.join(link)).expect("unlink");
        }
        assert!(!inside.join("p.bin").exists(), "{what}");
    }
    // With the links gone the same upload goes through.
    let plan = svc
        .respond_with_body(
            &put("/in/p.bin", Some("w"), chunk_head(&all, 0, all.len(), &all)),
            &mut Pieces::of(&all),
        )
        .await;
    assert_eq!(plan.status, status::NO_CONTENT, "{:?}", plan.detail);
    // Its staging file and record exist now, and no request reaches or lists them.
    assert_eq!(staging_names(&inside).len(), 2);
    for name in [&staging, &ranges] {
        let mut get = put(&format!("/in/{name}"), Some("w"), UploadHead::default());
        get.method = Method::Get;
        let plan = svc.respond(&get).await;
        assert_eq!(plan.status, status::NOT_FOUND, "GET {name}");
    }
    let mut propfind = put("/in/", Some("w"), UploadHead::default());
    propfind.method = Method::Propfind;
    propfind.depth = Some("1".into());
    let plan = svc.respond(&propfind).await;
    let xfer_service::Body::Listing(mut listing) = plan.body else {
        panic!("PROPFIND answered {} without a listing", plan.status);
    };
    let mut text = Vec::new();
    while let Some(chunk) = listing.next().await {
        text.extend_from_slice(&chunk.expect("listing"));
    }
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("/in/"), "{text}");
    assert!(!text.contains(".xfer-upload."), "{text}");
}

/// An upload under way whose record, or (across a restart) whose staging file, is swapped for
/// a symbolic link: the next chunk fails, and the link's target is neither appended to nor
/// overwritten.
#[tokio::test]
async fn a_link_swapped_in_mid_upload_is_never_followed() {
    let all = data(200_000);
    let half = all.len() / 2;
    let staging = format!(".xfer-upload.{ID}.p.bin");
    for swapped in [format!("{staging}.ranges"), staging.clone()] {
        let dir = tempfile::tempdir().expect("tempdir");
        let inside = dir.path().join("root/in");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").expect("victim");
        let first = service(dir.path());
        let plan = first
            .respond_with_body(
                &put(
                    "/in/p.bin",
                    Some("w"),
                    chunk_head(&all, 0, half, &all[..half]),
                ),
                &mut Pieces::of(&all[..half]),
            )
            .await;
        assert_eq!(plan.status, status::NO_CONTENT, "{:?}", plan.detail);
        std::fs::remove_file(inside.join(&swapped)).expect("unlink");
        std::os::unix::fs::symlink(&victim, inside.join(&swapped)).expect("symlink");
        // The record is read again only by a server that does not hold the upload: a restart.
        let svc = if swapped == staging {
            drop(first);
            service(dir.path())
        } else {
            first
        };
        let plan = svc
            .respond_with_body(
                &put(
                    "/in/p.bin",
                    Some("w"),
                    chunk_head(&all, half, all.len(), &all[half..]),
                ),
                &mut Pieces::of(&all[half..]),
            )
            .await;
        assert!(
            plan.status >= 400,
            "{swapped}: {} {:?}",
            plan.status,
            plan.detail
        );
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "precious\n",
            "written through {swapped}"
        );
        assert!(!inside.join("p.bin").exists(), "{swapped}");
    }
}
