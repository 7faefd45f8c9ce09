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
    let mut status_req = put(
        "/in/p.bin",
        Some("w"),
        UploadHead {
            id: Some(ID.into()),
            ..UploadHead::default()
        },
    );
    status_req.method = Method::Head;
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
