//! Access decisions through `Service::respond`: the status, the challenge, and that a refused
//! request touches nothing.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use xfer_service::{
    status, AccessControl, Credentials, Method, Request, Secret, Service, ServiceConfig,
};

const ACCESS: &str = r#"
[[token]]
name = "reader"
token = "r-token"
access = "read"
prefix = "/public"
"#;

fn service(dir: &Path, anonymous_read: bool) -> Service {
    std::fs::create_dir_all(dir.join("root/public")).expect("mkdir");
    std::fs::write(dir.join("root/public/f"), b"data").expect("write");
    std::fs::write(dir.join("root/secret"), b"hidden").expect("write");
    let file = dir.join("access.toml");
    std::fs::write(&file, ACCESS).expect("write");
    let root = dir.join("root").canonicalize().expect("root");
    let mut cfg = ServiceConfig::new(root);
    cfg.repr_digest = false;
    cfg.access = Arc::new(AccessControl::from_file(&file, anonymous_read).expect("access file"));
    Service::new(cfg)
}

fn request(method: Method, path: &str, token: Option<&str>) -> Request {
    let mut r = Request::new(method, path, SocketAddr::from(([127, 0, 0, 1], 9)), "test");
    r.credentials = Credentials {
        bearer: token.map(Secret::new),
        client_certificate: None,
    };
    r
}

#[tokio::test]
async fn statuses_and_challenges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path(), false);
    let cases = [
        (
            Method::Get,
            "/public/f",
            None,
            status::UNAUTHORIZED,
            Some(r#"Bearer realm="xfer""#),
        ),
        (
            Method::Head,
            "/public/f",
            Some("wrong"),
            status::UNAUTHORIZED,
            Some(r#"Bearer realm="xfer", error="invalid_token""#),
        ),
        (
            Method::Get,
            "/secret",
            Some("r-token"),
            status::FORBIDDEN,
            None,
        ),
        (
            Method::Propfind,
            "/",
            Some("r-token"),
            status::FORBIDDEN,
            None,
        ),
        (Method::Get, "/public/f", Some("r-token"), status::OK, None),
        // Unknown to the token's scope and to the filesystem alike: scope first, so a
        // caller cannot probe names outside it.
        (
            Method::Get,
            "/nothing-here",
            Some("r-token"),
            status::FORBIDDEN,
            None,
        ),
    ];
    for (method, path, token, want, challenge) in cases {
        let plan = svc.respond(&request(method.clone(), path, token)).await;
        assert_eq!(plan.status, want, "{method:?} {path} {token:?}");
        assert_eq!(plan.www_authenticate, challenge, "{method:?} {path}");
        if want != status::OK {
            assert!(
                plan.etag.is_none() && plan.size.is_none(),
                "{path}: a refusal leaks nothing"
            );
        }
    }
}

#[tokio::test]
async fn anonymous_reads_when_allowed_and_a_reload_changes_the_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(dir.path(), true);
    let plan = svc.respond(&request(Method::Get, "/secret", None)).await;
    assert_eq!(plan.status, status::OK);

    // The file changes: the token now covers the whole tree.
    std::fs::write(
        dir.path().join("access.toml"),
        ACCESS.replace("/public", "/"),
    )
    .expect("rewrite");
    svc.config().access.reload().expect("reload");
    let plan = svc
        .respond(&request(Method::Get, "/secret", Some("r-token")))
        .await;
    assert_eq!(plan.status, status::OK);

    // A broken file keeps the rules in force.
    std::fs::write(dir.path().join("access.toml"), "[[token]]\nname=").expect("rewrite");
    assert!(svc.config().access.reload().is_err());
    let plan = svc
        .respond(&request(Method::Get, "/secret", Some("r-token")))
        .await;
    assert_eq!(plan.status, status::OK);
}
