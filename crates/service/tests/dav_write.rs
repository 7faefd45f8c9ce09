//! `DELETE`, `MKCOL`, `MOVE` and the macaroon request through `Service::respond_with_body`,
//! without sockets: every status, what is left on disk after each, and that no link, `..`,
//! staging name or foreign host gets a change outside the caller's reach.

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use xfer_common::Resource;
use xfer_core::digest::Sha256Digest;
use xfer_service::upload::UploadBody;
use xfer_service::{
    status, AccessControl, Credentials, Method, Request, ResponsePlan, Secret, Service,
    ServiceConfig, UploadConfig,
};

const ACCESS: &str = r#"
[[token]]
name = "writer"
token = "w"
access = "write"
prefix = "/"

[[token]]
name = "in-writer"
token = "in"
access = "write"
prefix = "/in"

[[token]]
name = "reader"
token = "r"
access = "read"
prefix = "/"
"#;

/// Where a test runs: the served root, and a directory beside it that links point into.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    svc: Service,
}

impl Tree {
    fn new(uploads: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).expect("mkdir root");
        std::fs::create_dir_all(&outside).expect("mkdir outside");
        std::fs::write(outside.join("victim"), b"outside").expect("write victim");
        let access_file = xfer_test_support::write_access_file(dir.path(), ACCESS);
        let mut cfg = ServiceConfig::new(root.canonicalize().expect("root"));
        cfg.repr_digest = false;
        cfg.access = Arc::new(AccessControl::from_file(&access_file, true).expect("access"));
        cfg.uploads = uploads.then(UploadConfig::default);
        Self {
            root,
            outside,
            svc: Service::new(cfg),
            _dir: dir,
        }
    }

    fn file(&self, rel: &str, data: &[u8]) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, data).expect("write");
    }

    fn dir(&self, rel: &str) {
        std::fs::create_dir_all(self.root.join(rel)).expect("mkdir");
    }

    fn exists(&self, rel: &str) -> bool {
        self.root.join(rel).symlink_metadata().is_ok()
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.root.join(rel)).expect("read")
    }

    fn victim_intact(&self) {
        assert_eq!(
            std::fs::read(self.outside.join("victim")).expect("victim still there"),
            b"outside"
        );
    }

    async fn send(&self, req: Request) -> ResponsePlan {
        self.svc.respond_with_body(&req, &mut Untouched).await
    }

    async fn delete(&self, path: &str, token: Option<&str>) -> u16 {
        self.send(request(Method::Delete, path, token)).await.status
    }

    /// No `Content-Length` and no body, as curl and davix send it.
    async fn mkcol(&self, path: &str, token: Option<&str>) -> u16 {
        let req = request(Method::Mkcol, path, token);
        self.svc
            .respond_with_body(&req, &mut OnePiece(None))
            .await
            .status
    }

    async fn mv(&self, from: &str, to: &str, overwrite: Option<&str>, token: &str) -> u16 {
        let mut r = request(Method::Move, from, Some(token));
        r.copy.destination = Some(to.to_string());
        r.copy.overwrite = overwrite.map(str::to_string);
        self.send(r).await.status
    }
}

fn request(method: Method, path: &str, token: Option<&str>) -> Request {
    let mut r = Request::new(method, path, SocketAddr::from(([127, 0, 0, 1], 9)), "test");
    r.credentials = Credentials {
        bearer: token.map(Secret::new),
        client_certificate: None,
    };
    r.authority = Some("storage.example:8443".into());
    r
}

/// A body that must never be read.
struct Untouched;

impl UploadBody for Untouched {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<std::io::Result<Bytes>>> + Send + '_>> {
        panic!("the request body was read");
    }
}

/// A body of unknown length, as chunked encoding delivers it.
struct OnePiece(Option<Bytes>);

impl UploadBody for OnePiece {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<std::io::Result<Bytes>>> + Send + '_>> {
        let next = self.0.take().map(Ok);
        Box::pin(async move { next })
    }
}

#[tokio::test]
async fn delete_removes_files_and_empty_directories_only() {
    let t = Tree::new(true);
    t.file("f", b"data");
    t.dir("empty");
    t.file("full/member", b"m");
    assert_eq!(t.delete("/f", Some("w")).await, status::NO_CONTENT);
    assert!(!t.exists("f"));
    assert_eq!(t.delete("/empty/", Some("w")).await, status::NO_CONTENT);
    assert!(!t.exists("empty"));
    assert_eq!(t.delete("/full", Some("w")).await, status::CONFLICT);
    assert!(t.exists("full/member"));
    assert_eq!(t.delete("/f", Some("w")).await, status::NOT_FOUND);
    assert_eq!(t.delete("/none/f", Some("w")).await, status::NOT_FOUND);
    assert_eq!(
        t.delete("/full/member/x", Some("w")).await,
        status::CONFLICT
    );
    for root in ["/", "//", "/./"] {
        assert_eq!(t.delete(root, Some("w")).await, status::FORBIDDEN, "{root}");
    }
    assert!(t.root.is_dir());
}

#[tokio::test]
async fn delete_refuses_links_traversal_staging_and_the_wrong_caller() {
    let t = Tree::new(true);
    t.file("keep", b"k");
    symlink(t.outside.join("victim"), t.root.join("link")).expect("symlink");
    symlink(&t.outside, t.root.join("linkdir")).expect("symlink");
    t.file(".xfer-upload.abc.keep", b"staging");
    t.file("d/.xfer-upload.abc.x", b"staging");
    for path in [
        "/link",
        "/linkdir/victim",
        "/../outside/victim",
        "/%2e%2e/outside/victim",
        "/d/..%2f..%2foutside/victim",
        "/.xfer-upload.abc.keep",
        "/d/.xfer-upload.abc.x",
    ] {
        assert_eq!(t.delete(path, Some("w")).await, status::FORBIDDEN, "{path}");
    }
    t.victim_intact();
    assert!(t.exists("link") && t.exists("linkdir"));
    assert!(t.exists(".xfer-upload.abc.keep") && t.exists("d/.xfer-upload.abc.x"));
    // A directory holding only an upload in progress is not empty.
    assert_eq!(t.delete("/d", Some("w")).await, status::CONFLICT);

    assert_eq!(t.delete("/keep", Some("r")).await, status::FORBIDDEN);
    assert_eq!(t.delete("/keep", None).await, status::UNAUTHORIZED);
    assert_eq!(t.delete("/keep", Some("in")).await, status::FORBIDDEN);
    assert_eq!(t.delete("/keep", Some("bogus")).await, status::UNAUTHORIZED);
    assert_eq!(t.read("keep"), b"k");
}

/// The digest cache forgets the file the change removes from under its name.
#[tokio::test]
async fn delete_and_move_forget_what_was_known_of_the_file() {
    let t = Tree::new(true);
    t.file("f", b"data");
    t.file("a", b"data");
    let digests = &t.svc.config().digests;
    let known = |rel: &str| {
        let r = Resource::open(&t.root, rel, None).expect("open");
        digests.insert(&r, Sha256Digest::of(b"data"));
        assert!(digests.get_by_key(&r.content_key()).is_some());
        r.content_key()
    };
    let (f, a) = (known("/f"), known("/a"));
    assert_eq!(t.delete("/f", Some("w")).await, status::NO_CONTENT);
    assert_eq!(digests.get_by_key(&f), None);
    assert_eq!(t.mv("/a", "/b", None, "w").await, status::CREATED);
    assert_eq!(digests.get_by_key(&a), None);
}

#[tokio::test]
async fn tree_changes_are_refused_with_uploads_off() {
    let t = Tree::new(false);
    t.file("f", b"data");
    for method in [Method::Delete, Method::Mkcol, Method::Move] {
        let plan = t.send(request(method.clone(), "/f", None)).await;
        assert_eq!(plan.status, status::METHOD_NOT_ALLOWED, "{method:?}");
        assert_eq!(plan.allow, Some("GET, HEAD, OPTIONS, PROPFIND"));
    }
    assert_eq!(t.read("f"), b"data");
}

#[tokio::test]
async fn mkcol_creates_one_level() {
    let t = Tree::new(true);
    t.file("file", b"x");
    assert_eq!(t.mkcol("/a", Some("w")).await, status::CREATED);
    assert!(t.root.join("a").is_dir());
    assert_eq!(t.mkcol("/a/b/", Some("w")).await, status::CREATED);
    let mut again = request(Method::Mkcol, "/a", Some("w"));
    again.upload.content_length = Some(0);
    let taken = t.send(again).await;
    assert_eq!(taken.status, status::METHOD_NOT_ALLOWED);
    assert!(taken.allow.is_some_and(|a| a.contains("MKCOL")));
    assert_eq!(
        t.mkcol("/file", Some("w")).await,
        status::METHOD_NOT_ALLOWED
    );
    assert_eq!(t.mkcol("/x/y", Some("w")).await, status::CONFLICT);
    assert!(!t.exists("x"));
    assert_eq!(t.mkcol("/file/y", Some("w")).await, status::CONFLICT);
    assert_eq!(t.mkcol("/", Some("w")).await, status::FORBIDDEN);
}

#[tokio::test]
async fn mkcol_with_a_body_is_415() {
    let t = Tree::new(true);
    let mut declared = request(Method::Mkcol, "/a", Some("w"));
    declared.upload.content_length = Some(12);
    assert_eq!(
        t.svc
            .respond_with_body(&declared, &mut Untouched)
            .await
            .status,
        status::UNSUPPORTED_MEDIA_TYPE
    );
    let chunked = request(Method::Mkcol, "/a", Some("w"));
    let mut body = OnePiece(Some(Bytes::from_static(b"<mkcol/>")));
    assert_eq!(
        t.svc.respond_with_body(&chunked, &mut body).await.status,
        status::UNSUPPORTED_MEDIA_TYPE
    );
    assert!(!t.exists("a"));
    let mut empty = OnePiece(Some(Bytes::new()));
    assert_eq!(
        t.svc.respond_with_body(&chunked, &mut empty).await.status,
        status::CREATED
    );
}

#[tokio::test]
async fn mkcol_refuses_links_staging_and_the_wrong_caller() {
    let t = Tree::new(true);
    symlink(&t.outside, t.root.join("linkdir")).expect("symlink");
    assert_eq!(t.mkcol("/linkdir/new", Some("w")).await, status::FORBIDDEN);
    assert!(!t.outside.join("new").exists());
    assert_eq!(
        t.mkcol("/linkdir", Some("w")).await,
        status::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        t.mkcol("/.xfer-upload.x.d", Some("w")).await,
        status::FORBIDDEN
    );
    assert_eq!(
        t.mkcol("/%2e%2e/escape", Some("w")).await,
        status::FORBIDDEN
    );
    assert_eq!(t.mkcol("/a", Some("r")).await, status::FORBIDDEN);
    assert_eq!(t.mkcol("/a", None).await, status::UNAUTHORIZED);
    assert_eq!(t.mkcol("/a", Some("in")).await, status::FORBIDDEN);
    assert_eq!(t.mkcol("/in", Some("in")).await, status::CREATED);
    assert!(!t.exists("a"));
}

#[tokio::test]
async fn move_renames_and_replaces_as_asked() {
    let t = Tree::new(true);
    t.file("a", b"A");
    t.file("b", b"B");
    t.file("d/member", b"M");
    assert_eq!(t.mv("/a", "/c", None, "w").await, status::CREATED);
    assert!(!t.exists("a"));
    assert_eq!(t.read("c"), b"A");
    assert_eq!(
        t.mv("/c", "/b", Some("F"), "w").await,
        status::PRECONDITION_FAILED
    );
    assert_eq!((t.read("c"), t.read("b")), (b"A".to_vec(), b"B".to_vec()));
    assert_eq!(t.mv("/c", "/b", Some("T"), "w").await, status::NO_CONTENT);
    assert_eq!(t.read("b"), b"A");
    assert!(!t.exists("c"));
    // A directory, to an absolute URL on this server.
    let to = "https://storage.example:8443/e";
    assert_eq!(t.mv("/d", to, None, "w").await, status::CREATED);
    assert_eq!(t.read("e/member"), b"M");
    assert_eq!(t.mv("/e", "/e/inside", None, "w").await, status::CONFLICT);
    assert_eq!(t.mv("/b", "/e", None, "w").await, status::CONFLICT);
    assert_eq!(t.mv("/b", "/b", None, "w").await, status::FORBIDDEN);
    assert_eq!(t.mv("/missing", "/x", None, "w").await, status::NOT_FOUND);
    assert_eq!(t.mv("/b", "/no/x", None, "w").await, status::CONFLICT);
    assert_eq!(t.mv("/b", "/e/member/x", None, "w").await, status::CONFLICT);
    assert_eq!(
        t.mv("/b", "/x", Some("maybe"), "w").await,
        status::BAD_REQUEST
    );
    let mut no_destination = request(Method::Move, "/b", Some("w"));
    no_destination.copy.overwrite = Some("T".into());
    assert_eq!(t.send(no_destination).await.status, status::BAD_REQUEST);
    assert_eq!(t.read("b"), b"A");
}

#[tokio::test]
async fn move_stays_inside_the_root_and_the_scope() {
    let t = Tree::new(true);
    t.file("f", b"F");
    t.file("in/g", b"G");
    t.file(".xfer-upload.abc.s", b"staging");
    symlink(t.outside.join("victim"), t.root.join("link")).expect("symlink");
    symlink(&t.outside, t.root.join("linkdir")).expect("symlink");
    let refused = [
        ("/f", "/../outside/f", status::FORBIDDEN),
        ("/f", "/%2e%2e/outside/f", status::FORBIDDEN),
        ("/f", "/in/..%2f..%2foutside/f", status::FORBIDDEN),
        (
            "/f",
            "https://storage.example:8443/a/../../outside/f",
            status::FORBIDDEN,
        ),
        (
            "/f",
            "https://storage.example:8443/%2E%2E/outside/f",
            status::FORBIDDEN,
        ),
        (
            "/f",
            "https://elsewhere.example:8443/f2",
            status::BAD_GATEWAY,
        ),
        ("/f", "https://storage.example:9999/f2", status::BAD_GATEWAY),
        ("/f", "/linkdir/f", status::FORBIDDEN),
        ("/f", "/link", status::FORBIDDEN),
        ("/link", "/f2", status::FORBIDDEN),
        ("/linkdir/victim", "/f2", status::FORBIDDEN),
        ("/.xfer-upload.abc.s", "/f2", status::FORBIDDEN),
        ("/f", "/.xfer-upload.abc.f", status::FORBIDDEN),
        ("/f", "/in/.xfer-upload.abc.f", status::FORBIDDEN),
        ("/f", "/", status::FORBIDDEN),
        ("/", "/f2", status::FORBIDDEN),
    ];
    for (from, to, want) in refused {
        assert_eq!(t.mv(from, to, None, "w").await, want, "{from} -> {to}");
    }
    t.victim_intact();
    assert!(!t.outside.join("f").exists());
    assert!(t.root.join("link").symlink_metadata().is_ok());
    assert!(!t.exists("f2"));
    assert_eq!(t.read("f"), b"F");
    assert_eq!(t.read(".xfer-upload.abc.s"), b"staging");

    // Modify on both sides: the source and the destination must be in scope.
    assert_eq!(t.mv("/in/g", "/g", None, "in").await, status::FORBIDDEN);
    assert_eq!(t.mv("/f", "/in/f", None, "in").await, status::FORBIDDEN);
    assert_eq!(t.mv("/f", "/f3", None, "r").await, status::FORBIDDEN);
    let mut anonymous = request(Method::Move, "/f", None);
    anonymous.copy.destination = Some("/f3".into());
    assert_eq!(t.send(anonymous).await.status, status::UNAUTHORIZED);
    assert!(t.exists("in/g") && t.exists("f") && !t.exists("g") && !t.exists("f3"));
    assert_eq!(t.mv("/in/g", "/in/h", None, "in").await, status::CREATED);
}

#[tokio::test]
async fn a_macaroon_request_is_refused_at_once_and_other_posts_as_before() {
    for uploads in [true, false] {
        let t = Tree::new(uploads);
        t.file("f", b"data");
        for token in [None, Some("w"), Some("bogus")] {
            let mut r = request(Method::Post, "/f", token);
            r.upload.draft.content_type =
                Some("Application/Macaroon-Request; charset=utf-8".into());
            r.upload.content_length = Some(1 << 40);
            // `Untouched` panics if the body is read.
            let plan = t.send(r).await;
            assert_eq!(plan.status, status::METHOD_NOT_ALLOWED, "{token:?}");
            assert!(plan.www_authenticate.is_none());
            assert!(plan.allow.is_some());
        }
        let mut other = request(Method::Post, "/f", None);
        other.upload.draft.content_type = Some("application/json".into());
        let want = if uploads {
            status::UNAUTHORIZED
        } else {
            status::METHOD_NOT_ALLOWED
        };
        assert_eq!(t.send(other).await.status, want);
        assert_eq!(t.read("f"), b"data");
    }
}

#[tokio::test]
async fn options_lists_the_tree_changes_with_uploads_on() {
    let on = Tree::new(true);
    let allow = on.send(request(Method::Options, "/", None)).await.allow;
    assert_eq!(
        allow,
        Some("GET, HEAD, OPTIONS, PROPFIND, PUT, POST, DELETE, MKCOL, MOVE")
    );
    let off = Tree::new(false);
    let allow = off.send(request(Method::Options, "/", None)).await.allow;
    assert_eq!(allow, Some("GET, HEAD, OPTIONS, PROPFIND"));
}
