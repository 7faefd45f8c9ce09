//! A create-only caller never replaces a file, even one that takes the name after its
//! request was allowed: a file planted while the body arrives (or while a copy runs) is
//! still there afterwards (a parallel upload: while its completion waits for a chunk in
//! flight), the answer is 412 (a copy's last line says so), and no staging
//! file is left. A caller that may modify replaces it, as before.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use xfer_core::digest::Sha256Digest;
use xfer_core::progress::Progress;
use xfer_service::tpc::{CopyDirection, CopyHead, CopyJob, CopyOutcome, RunningCopy};
use xfer_service::upload::resumable::DraftHead;
use xfer_service::upload::{UploadBody, UploadHead};
use xfer_service::{
    status, AccessControl, CopyRunner, Credentials, Method, Request, ResponsePlan, Secret, Service,
    ServiceConfig, Tpc, TpcConfig, UploadConfig,
};

const ACCESS: &str = r#"
[[token]]
name = "creator"
token = "c"
access = "create"
prefix = "/"

[[token]]
name = "modifier"
token = "m"
access = "modify"
prefix = "/"
"#;

const THEIRS: &[u8] = b"planted by another request";
const MINE: &[u8] = b"the uploader's bytes";

/// A body that, once its bytes are delivered, creates the target as another request
/// would, between the access check and the final rename.
struct PlantAtEnd {
    data: Option<Bytes>,
    target: PathBuf,
}

impl UploadBody for PlantAtEnd {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<std::io::Result<Bytes>>> + Send + '_>> {
        let next = self.data.take();
        if next.is_none() {
            std::fs::write(&self.target, THEIRS).expect("plant the target");
        }
        Box::pin(async move { next.map(Ok) })
    }
}

/// A copy runner whose pull writes the staging file, then plants the target.
#[derive(Debug)]
struct PlantingRunner {
    target: PathBuf,
}

impl CopyRunner for PlantingRunner {
    fn schemes(&self) -> &[&str] {
        &["https"]
    }

    fn start(&self, job: CopyJob) -> RunningCopy {
        let target = self.target.clone();
        RunningCopy {
            progress: Progress::new(),
            connections: Default::default(),
            done: Box::pin(async move {
                if let CopyDirection::Pull { into, .. } = &job.direction {
                    std::fs::write(into, MINE).expect("write staging");
                    std::fs::write(&target, THEIRS).expect("plant the target");
                }
                Ok(CopyOutcome {
                    sha256: None,
                    bytes: MINE.len() as u64,
                })
            }),
        }
    }
}

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    svc: Arc<Service>,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).expect("mkdir root");
        let root = root.canonicalize().expect("root");
        let access_file = xfer_test_support::write_access_file(dir.path(), ACCESS);
        let mut cfg = ServiceConfig::new(root.clone());
        cfg.repr_digest = false;
        cfg.access = Arc::new(AccessControl::from_file(&access_file, true).expect("access"));
        cfg.uploads = Some(UploadConfig::default());
        cfg.tpc = Some(Tpc::new(
            Arc::new(PlantingRunner {
                target: root.join("pulled"),
            }),
            TpcConfig {
                marker_interval: Duration::from_millis(20),
                ..TpcConfig::default()
            },
        ));
        Self {
            root,
            svc: Arc::new(Service::new(cfg)),
            _dir: dir,
        }
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.root.join(name)).expect("read")
    }

    /// Only the named files: no staging file, part file, journal or resumable-upload record
    /// (their directory may stay, empty).
    fn holds_only(&self, names: &[&str]) {
        let records = self.root.join(".xfer-upload.resumable");
        if records.exists() {
            let left = std::fs::read_dir(&records).expect("list records").count();
            assert_eq!(left, 0, "resumable-upload records left");
        }
        let mut found: Vec<String> = std::fs::read_dir(&self.root)
            .expect("list root")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".xfer-upload.resumable")
            .collect();
        found.sort();
        assert_eq!(found, names, "what the root holds");
    }

    async fn put(&self, name: &str, token: &str, head: UploadHead, method: Method) -> ResponsePlan {
        let mut req = request(method, &format!("/{name}"), token);
        req.upload = head;
        let mut body = PlantAtEnd {
            data: Some(Bytes::from_static(MINE)),
            target: self.root.join(name),
        };
        self.svc.respond_with_body(&req, &mut body).await
    }
}

fn request(method: Method, path: &str, token: &str) -> Request {
    let mut r = Request::new(method, path, SocketAddr::from(([127, 0, 0, 1], 9)), "test");
    r.credentials = Credentials {
        bearer: Some(Secret::new(token)),
        client_certificate: None,
    };
    r
}

fn whole() -> UploadHead {
    UploadHead {
        content_length: Some(MINE.len() as u64),
        ..UploadHead::default()
    }
}

/// A resumable upload created and completed in one request.
fn one_shot_resumable() -> UploadHead {
    UploadHead {
        content_length: Some(MINE.len() as u64),
        draft: DraftHead {
            upload_complete: Some("?1".into()),
            upload_length: Some(MINE.len().to_string()),
            interop_version: Some("9".into()),
            ..DraftHead::default()
        },
        ..UploadHead::default()
    }
}

async fn copy_text(plan: ResponsePlan) -> String {
    assert_eq!(plan.status, status::ACCEPTED, "{:?}", plan.detail);
    super::tpc::body_text(plan.body).await
}

/// A creator's upload loses to the planted file; a modifier's replaces it and is answered
/// `modifier_status`.
async fn creator_keeps_modifier_replaces(
    head: fn() -> UploadHead,
    method: Method,
    modifier_status: u16,
) {
    let t = Tree::new();
    let plan = t.put("f", "c", head(), method.clone()).await;
    assert_eq!(
        plan.status,
        status::PRECONDITION_FAILED,
        "{:?}",
        plan.detail
    );
    assert_eq!(t.read("f"), THEIRS);
    t.holds_only(&["f"]);

    let plan = t.put("g", "m", head(), method).await;
    assert_eq!(plan.status, modifier_status, "{:?}", plan.detail);
    assert_eq!(t.read("g"), MINE, "a modifier replaces what appeared");
    t.holds_only(&["f", "g"]);
}

#[tokio::test]
async fn a_whole_put_by_a_creator_keeps_a_file_that_appeared() {
    // 201: the answer says what the request found when it arrived.
    creator_keeps_modifier_replaces(whole, Method::Put, status::CREATED).await;
}

#[tokio::test]
async fn a_resumable_upload_by_a_creator_keeps_a_file_that_appeared() {
    // 204: the target is looked at again at the end, and was replaced.
    creator_keeps_modifier_replaces(one_shot_resumable, Method::Post, status::NO_CONTENT).await;
}

#[tokio::test]
async fn a_pull_by_a_creator_keeps_a_file_that_appeared() {
    let t = Tree::new();
    let pull = |token: &str| {
        let mut r = request(Method::Copy, "/pulled", token);
        r.copy = CopyHead::from_fields([("Source", "https://remote.example/x")]);
        r
    };
    let text = copy_text(t.svc.respond(&pull("c")).await).await;
    assert!(
        text.ends_with(
            "failure: the destination was created during the copy and this caller may not replace it\n"
        ),
        "{text}"
    );
    assert_eq!(t.read("pulled"), THEIRS);
    t.holds_only(&["pulled"]);

    std::fs::remove_file(t.root.join("pulled")).expect("rm");
    let text = copy_text(t.svc.respond(&pull("m")).await).await;
    assert!(text.ends_with("success: Created\n"), "{text}");
    assert_eq!(t.read("pulled"), MINE);
    t.holds_only(&["pulled"]);
}

#[tokio::test]
async fn overwrite_f_holds_to_the_end_of_a_pull() {
    let t = Tree::new();
    let mut r = request(Method::Copy, "/pulled", "m");
    r.copy = CopyHead::from_fields([("Source", "https://remote.example/x"), ("Overwrite", "F")]);
    let text = copy_text(t.svc.respond(&r).await).await;
    assert!(
        text.contains("failure: the destination was created"),
        "{text}"
    );
    assert_eq!(t.read("pulled"), THEIRS);
    t.holds_only(&["pulled"]);
}

/// A body that says when it is first asked for bytes, then holds them until released: the
/// request keeps what it took before reading (a parallel upload's chunk holds the upload's
/// gate, which its completion waits for).
struct Held {
    data: Option<Bytes>,
    started: Option<oneshot::Sender<()>>,
    release: Option<oneshot::Receiver<()>>,
}

impl UploadBody for Held {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<std::io::Result<Bytes>>> + Send + '_>> {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(());
        }
        let release = self.release.take();
        let next = self.data.take();
        Box::pin(async move {
            if let Some(rx) = release {
                let _ = rx.await;
            }
            next.map(Ok)
        })
    }
}

const UPLOAD_ID: &str = "race-upload-0123456789";

fn parallel(token: &str, head: UploadHead) -> Request {
    let mut r = request(Method::Put, "/f", token);
    r.upload = UploadHead {
        id: Some(UPLOAD_ID.into()),
        ..head
    };
    r
}

fn chunk() -> UploadHead {
    UploadHead {
        content_range: Some(format!("bytes 0-{}/{}", MINE.len() - 1, MINE.len())),
        content_digest: Some(Sha256Digest::of(MINE).to_header_value()),
        ..UploadHead::default()
    }
}

fn completion() -> UploadHead {
    UploadHead {
        repr_digest: Some(Sha256Digest::of(MINE).to_header_value()),
        complete: true,
        ..UploadHead::default()
    }
}

/// A parallel upload by `token` whose completion was allowed while `/f` was free, then found
/// it taken: the completion's status.
async fn parallel_completion_after_a_plant(t: &Tree, token: &str) -> u16 {
    let svc = &t.svc;
    let whole = svc
        .respond_with_body(
            &parallel(token, chunk()),
            &mut Whole(Some(Bytes::from_static(MINE))),
        )
        .await;
    assert_eq!(whole.status, status::NO_CONTENT, "{:?}", whole.detail);
    // The same chunk again, held mid-body: it holds the upload's gate.
    let (started_tx, started) = oneshot::channel();
    let (release, release_rx) = oneshot::channel();
    let dup = tokio::spawn({
        let svc = Arc::clone(svc);
        let req = parallel(token, chunk());
        async move {
            let mut body = Held {
                data: Some(Bytes::from_static(MINE)),
                started: Some(started_tx),
                release: Some(release_rx),
            };
            svc.respond_with_body(&req, &mut body).await.status
        }
    });
    started.await.expect("the duplicate chunk started");
    // Two completions: one passes the access check (nothing has the name), marks the upload
    // as completing and waits for the gate; the other is told it is being completed.
    let complete = || {
        let svc = Arc::clone(svc);
        let req = parallel(token, completion());
        tokio::spawn(async move { svc.respond(&req).await })
    };
    let (mut a, mut b) = (complete(), complete());
    let (first, waiting) = tokio::select! {
        r = &mut a => (r, b),
        r = &mut b => (r, a),
    };
    let first = first.expect("completion task");
    assert_eq!(first.status, status::CONFLICT, "{:?}", first.detail);
    std::fs::write(t.root.join("f"), THEIRS).expect("plant the target");
    release.send(()).expect("release the chunk");
    assert_eq!(dup.await.expect("chunk task"), status::NO_CONTENT);
    waiting.await.expect("completion task").status
}

/// A body handed over whole.
struct Whole(Option<Bytes>);

impl UploadBody for Whole {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<std::io::Result<Bytes>>> + Send + '_>> {
        let next = self.0.take();
        Box::pin(async move { next.map(Ok) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parallel_upload_by_a_creator_keeps_a_file_that_appeared() {
    let t = Tree::new();
    let status = parallel_completion_after_a_plant(&t, "c").await;
    assert_eq!(status, status::PRECONDITION_FAILED);
    assert_eq!(t.read("f"), THEIRS);
    t.holds_only(&["f"]);

    let t = Tree::new();
    let status = parallel_completion_after_a_plant(&t, "m").await;
    assert_eq!(status, status::CREATED);
    assert_eq!(t.read("f"), MINE, "a modifier replaces what appeared");
    t.holds_only(&["f"]);
}
