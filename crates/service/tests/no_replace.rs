//! A create-only caller never replaces a file, even one that takes the name after its
//! request was allowed: a file planted while the body arrives (or while a copy runs) is
//! still there afterwards, the answer is 412 (a copy's last line says so), and no staging
//! file is left. A caller that may modify replaces it, as before.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
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
    svc: Service,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).expect("mkdir root");
        let root = root.canonicalize().expect("root");
        std::fs::write(dir.path().join("access.toml"), ACCESS).expect("write access file");
        let mut cfg = ServiceConfig::new(root.clone());
        cfg.repr_digest = false;
        cfg.access = Arc::new(
            AccessControl::from_file(&dir.path().join("access.toml"), true).expect("access"),
        );
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
            svc: Service::new(cfg),
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
