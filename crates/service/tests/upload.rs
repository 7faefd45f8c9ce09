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
    std::fs::write(dir.join("access.toml"), ACCESS).expect("write");
    let mut cfg = ServiceConfig::new(dir.join("root").canonicalize().expect("root"));
    cfg.repr_digest = false;
    cfg.access =
        Arc::new(AccessControl::from_file(&dir.join("access.toml"), true).expect("access"));
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
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
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
                while !woken.0.swap(false, std::sync::atomic::Ordering::AcqRel) {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
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
