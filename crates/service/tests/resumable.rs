//! Resumable uploads (the IETF draft) through `Service::respond_with_body`, without sockets:
//! an upload that outlives the server, lengths that disagree or are exceeded, expiry, another
//! interop version, and a newer request taking over from a stalled one.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use xfer_core::digest::Sha256Digest;
use xfer_service::upload::resumable::DraftHead;
use xfer_service::upload::{UploadBody, UploadHead};
use xfer_service::{
    status, AccessControl, Credentials, Method, Request, ResponsePlan, Secret, Service,
    ServiceConfig, UploadConfig,
};

const ACCESS: &str = r#"
[[token]]
name = "writer"
token = "w"
access = "write"
prefix = "/in"
"#;

/// A body delivered in pieces; with `stall`, it then waits forever, as a half-open
/// connection does.
struct Pieces {
    pieces: VecDeque<Bytes>,
    stall: bool,
    /// Told when the body has handed over its last piece and stalls.
    stalled: Arc<tokio::sync::Notify>,
}

impl Pieces {
    fn of(data: &[u8]) -> Self {
        Self {
            pieces: data.chunks(7_000).map(Bytes::copy_from_slice).collect(),
            stall: false,
            stalled: Arc::default(),
        }
    }
}

impl UploadBody for Pieces {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<std::io::Result<Bytes>>> + Send + '_>> {
        let next = self.pieces.pop_front().map(Ok);
        let stall = next.is_none() && self.stall;
        let stalled = Arc::clone(&self.stalled);
        Box::pin(async move {
            if stall {
                // Asked for more than it has: everything before was taken.
                stalled.notify_one();
                std::future::pending::<()>().await;
            }
            next
        })
    }
}

fn service(dir: &Path, cfg: UploadConfig) -> Service {
    std::fs::create_dir_all(dir.join("root")).expect("mkdir");
    let access_file = xfer_test_support::write_access_file(dir, ACCESS);
    let mut c = ServiceConfig::new(dir.join("root").canonicalize().expect("root"));
    c.repr_digest = false;
    c.access = Arc::new(AccessControl::from_file(&access_file, true).expect("access"));
    c.uploads = Some(cfg);
    Service::new(c)
}

fn request(method: Method, path: &str, draft: DraftHead, content_length: Option<u64>) -> Request {
    let mut r = Request::new(method, path, SocketAddr::from(([127, 0, 0, 1], 9)), "test");
    r.credentials = Credentials {
        bearer: Some(Secret::new("w")),
        client_certificate: None,
    };
    r.upload = UploadHead {
        content_length,
        draft,
        ..UploadHead::default()
    };
    r
}

fn creation(complete: bool, length: Option<usize>) -> DraftHead {
    DraftHead {
        upload_complete: Some(if complete { "?1" } else { "?0" }.into()),
        upload_length: length.map(|l| l.to_string()),
        interop_version: Some("9".into()),
        ..DraftHead::default()
    }
}

fn append(complete: bool, offset: usize) -> DraftHead {
    DraftHead {
        upload_complete: Some(if complete { "?1" } else { "?0" }.into()),
        upload_offset: Some(offset.to_string()),
        interop_version: Some("9".into()),
        content_type: Some("application/partial-upload".into()),
        ..DraftHead::default()
    }
}

fn header<'a>(plan: &'a ResponsePlan, name: &str) -> Option<&'a str> {
    plan.headers
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_str())
}

fn data(n: usize) -> Vec<u8> {
    xfer_test_support::random_bytes(n, 37)
}

async fn create(svc: &Service, path: &str, content: &[u8], length: usize) -> String {
    let plan = svc
        .respond_with_body(
            &request(Method::Post, path, creation(false, Some(length)), None),
            &mut Pieces::of(content),
        )
        .await;
    assert_eq!(plan.status, status::CREATED, "{:?}", plan.detail);
    assert_eq!(
        header(&plan, "upload-offset"),
        Some(&*content.len().to_string())
    );
    plan.location.expect("Location")
}

async fn offset_of(svc: &Service, location: &str) -> ResponsePlan {
    svc.respond(&request(Method::Head, location, DraftHead::default(), None))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_outlives_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = data(3_000_000);
    let location = {
        let svc = service(dir.path(), UploadConfig::default());
        create(&svc, "/in/x/a.bin", &all[..1_000_000], all.len()).await
    };
    // A new server on the same root knows the upload from its record and staging file.
    let svc = service(dir.path(), UploadConfig::default());
    let head = offset_of(&svc, &location).await;
    assert_eq!(head.status, status::NO_CONTENT);
    assert_eq!(header(&head, "upload-offset"), Some("1000000"));
    assert_eq!(header(&head, "upload-length"), Some("3000000"));
    let mut last = request(Method::Patch, &location, append(true, 1_000_000), None);
    last.upload.repr_digest = Some(Sha256Digest::of(&all).to_header_value());
    let done = svc
        .respond_with_body(&last, &mut Pieces::of(&all[1_000_000..]))
        .await;
    assert_eq!(done.status, status::CREATED, "{:?}", done.detail);
    assert_eq!(header(&done, "upload-complete"), Some("?1"));
    let stored = std::fs::read(dir.path().join("root/in/x/a.bin")).expect("stored");
    assert!(stored == all, "the stored file differs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lengths_must_agree_and_are_enforced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path(), UploadConfig::default());
    let all = data(100_000);
    let location = create(&svc, "/in/l.bin", &all[..10_000], 50_000).await;
    // Another length in an append: 400 with the problem type.
    let mut other = request(Method::Patch, &location, append(false, 10_000), None);
    other.upload.draft.upload_length = Some("60000".into());
    let plan = svc
        .respond_with_body(&other, &mut Pieces::of(&all[10_000..20_000]))
        .await;
    assert_eq!(plan.status, status::BAD_REQUEST);
    assert_eq!(plan.content_type, "application/problem+json");
    // Content past the length ends the upload.
    let plan = svc
        .respond_with_body(
            &request(Method::Patch, &location, append(false, 10_000), None),
            &mut Pieces::of(&all[10_000..]),
        )
        .await;
    assert_eq!(plan.status, status::BAD_REQUEST);
    assert_eq!(offset_of(&svc, &location).await.status, status::NOT_FOUND);
    assert!(!dir.path().join("root/in/l.bin").exists());
    let left: Vec<_> = std::fs::read_dir(dir.path().join("root/in"))
        .expect("dir")
        .collect();
    assert!(left.is_empty(), "staging left behind: {left:?}");
    // A declared length over the server's limit is refused at creation, with the limits.
    let small_dir = tempfile::tempdir().expect("tempdir");
    let small = service(
        small_dir.path(),
        UploadConfig {
            max_size: 1000,
            ..UploadConfig::default()
        },
    );
    let plan = small
        .respond_with_body(
            &request(Method::Put, "/in/big", creation(false, Some(5000)), None),
            &mut Pieces::of(&[]),
        )
        .await;
    assert_eq!(plan.status, status::PAYLOAD_TOO_LARGE);
    assert!(header(&plan, "upload-limit").is_some_and(|l| l.contains("max-size=1000")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_uploads_expire_with_their_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path(), UploadConfig::default());
    let location = create(&svc, "/in/e.bin", &data(5000), 9000).await;
    assert_eq!(
        svc.config().upload_state.sweep(Duration::from_secs(3600)),
        0
    );
    assert_eq!(svc.config().upload_state.sweep(Duration::ZERO), 1);
    assert_eq!(offset_of(&svc, &location).await.status, status::NOT_FOUND);
    let left: Vec<_> = std::fs::read_dir(dir.path().join("root/in"))
        .expect("dir")
        .collect();
    assert!(left.is_empty(), "staging left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_interop_version_gets_no_upload_resource() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path(), UploadConfig::default());
    let mut draft = creation(false, None);
    draft.interop_version = Some("3".into());
    let plan = svc
        .respond_with_body(
            &request(Method::Post, "/in/v.bin", draft.clone(), None),
            &mut Pieces::of(b"abc"),
        )
        .await;
    assert_eq!(plan.status, status::BAD_REQUEST);
    assert!(plan.location.is_none());
    // A whole body is still stored, as a plain upload.
    draft.upload_complete = Some("?1".into());
    let plan = svc
        .respond_with_body(
            &request(Method::Put, "/in/v.bin", draft, Some(3)),
            &mut Pieces::of(b"abc"),
        )
        .await;
    assert_eq!(plan.status, status::CREATED, "{:?}", plan.detail);
    assert!(plan.location.is_none());
    assert_eq!(
        std::fs::read(dir.path().join("root/in/v.bin")).expect("stored"),
        b"abc"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_request_takes_over_from_a_stalled_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path(), UploadConfig::default());
    let all = data(4_000_000);
    let location = create(&svc, "/in/s.bin", &[], all.len()).await;
    let mut stalled = Pieces::of(&all[..2_500_000]);
    stalled.stall = true;
    let took_all = Arc::clone(&stalled.stalled);
    let append_req = request(Method::Patch, &location, append(false, 0), None);
    let (cut, head) = tokio::join!(svc.respond_with_body(&append_req, &mut stalled), async {
        // Once the stalled append has taken all it was given, ask for the offset.
        tokio::time::timeout(Duration::from_secs(20), took_all.notified())
            .await
            .expect("the append took its pieces");
        offset_of(&svc, &location).await
    });
    assert_eq!(cut.status, status::CONFLICT, "{:?}", cut.detail);
    assert_eq!(head.status, status::NO_CONTENT);
    let offset: usize = header(&head, "upload-offset")
        .and_then(|o| o.parse().ok())
        .expect("offset");
    assert!(offset > 0 && offset <= 2_500_000, "offset {offset}");
    let mut last = request(Method::Patch, &location, append(true, offset), None);
    last.upload.repr_digest = Some(Sha256Digest::of(&all).to_header_value());
    let done = svc
        .respond_with_body(&last, &mut Pieces::of(&all[offset..]))
        .await;
    assert_eq!(done.status, status::CREATED, "{:?}", done.detail);
    assert!(std::fs::read(dir.path().join("root/in/s.bin")).expect("stored") == all);
}
