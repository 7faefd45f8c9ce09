//! JWT bearer tokens through `Service::respond`: a decision table over audiences, times,
//! issuers, keys, algorithms, versions, scopes and groups; key rotation, forged `kid`s that
//! must not make the server hammer the issuer, and an issuer that never answers.
//!
//! The issuer is an in-memory [`HttpsGet`] serving discovery and JWKS; the table, its keys and
//! its tokens are in token_table.rs, which tests/e2e/xrootd_tokens.rs runs against XRootD too.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::token_table::{es, now, with, Case, Issuers, Keys, Op, TREE};
use bytes::Bytes;
use serde_json::{json, Value};
use xfer_service::upload::{UploadBody, UploadHead};
use xfer_service::{
    status, AccessControl, Credentials, HttpsGet, Identity, KeyTimes, Method, Request,
    ResponsePlan, Secret, Service, ServiceConfig, UploadConfig,
};

const ISSUER: &str = "https://issuer.test";
const SCI: &str = "https://sci.test";

fn issuers() -> Issuers {
    Issuers {
        wlcg: ISSUER.into(),
        sci: SCI.into(),
    }
}

/// Discovery and JWKS for both issuers, with a fetch counter and failure switches.
#[derive(Debug, Default)]
struct FakeIssuers {
    jwks: Mutex<HashMap<String, Vec<u8>>>,
    fetches: AtomicUsize,
    down: AtomicBool,
    /// [`ISSUER`] never answers.
    hang: AtomicBool,
}

impl FakeIssuers {
    fn publish(&self, issuer: &str, jwks: Vec<u8>) {
        self.jwks
            .lock()
            .expect("jwks lock")
            .insert(format!("{issuer}/jwks"), jwks);
    }
}

impl HttpsGet for FakeIssuers {
    fn get<'a>(
        &'a self,
        url: &'a str,
        _ca_file: Option<&'a Path>,
        _limit: usize,
        _timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send + 'a>> {
        Box::pin(async move {
            self.fetches.fetch_add(1, Ordering::SeqCst);
            if self.hang.load(Ordering::SeqCst) && url.starts_with(ISSUER) {
                std::future::pending::<()>().await;
            }
            if self.down.load(Ordering::SeqCst) {
                return Err("connection refused".into());
            }
            if let Some(issuer) = url.strip_suffix("/.well-known/openid-configuration") {
                return Ok(
                    json!({ "issuer": issuer, "jwks_uri": format!("{issuer}/jwks") })
                        .to_string()
                        .into_bytes(),
                );
            }
            self.jwks
                .lock()
                .expect("jwks lock")
                .get(url)
                .cloned()
                .ok_or_else(|| format!("{url}: 404"))
        })
    }
}

struct Body(Option<Bytes>);

impl UploadBody for Body {
    fn next_chunk(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = Option<std::io::Result<Bytes>>> + Send + '_>> {
        let next = self.0.take().map(Ok);
        Box::pin(async move { next })
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    svc: Service,
    issuers: Arc<FakeIssuers>,
    keys: Keys,
}

fn setup(times: KeyTimes) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    for d in TREE {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
        std::fs::write(root.join(d).join("f"), b"data").expect("write");
    }
    let root = root.canonicalize().expect("root");
    let access_file =
        xfer_test_support::write_access_file(dir.path(), &issuers().access_file(None));
    let keys = Keys::new();
    let issuers = Arc::new(FakeIssuers::default());
    issuers.publish(ISSUER, keys.jwks(&["ec1", "rsa1"]));
    issuers.publish(SCI, keys.jwks(&["ec2"]));
    let access = AccessControl::from_file(&access_file, true)
        .expect("access file")
        .with_key_source(Arc::clone(&issuers) as Arc<dyn HttpsGet>, times);
    let mut cfg = ServiceConfig::new(root.clone());
    cfg.repr_digest = false;
    cfg.access = Arc::new(access);
    cfg.uploads = Some(UploadConfig::default());
    Setup {
        _dir: dir,
        root,
        svc: Service::new(cfg),
        issuers,
        keys,
    }
}

fn wlcg() -> Value {
    issuers().wlcg()
}

fn sci() -> Value {
    issuers().sci()
}

async fn send(s: &Setup, op: Op, path: &str, token: &str) -> ResponsePlan {
    let method = method(op);
    let mut r = Request::new(
        method.clone(),
        path,
        SocketAddr::from(([127, 0, 0, 1], 9)),
        "test",
    );
    r.credentials = Credentials {
        bearer: (!token.is_empty()).then(|| Secret::new(token)),
        client_certificate: None,
    };
    if let Op::Move(to) = op {
        r.copy.destination = Some(to.to_string());
    }
    if method == Method::Put {
        r.upload = UploadHead::default();
        return s
            .svc
            .respond_with_body(&r, &mut Body(Some(Bytes::from_static(b"new"))))
            .await;
    }
    s.svc.respond(&r).await
}

fn method(op: Op) -> Method {
    match op {
        Op::Get => Method::Get,
        Op::Put => Method::Put,
        Op::Delete => Method::Delete,
        Op::Mkcol => Method::Mkcol,
        Op::Move(_) => Method::Move,
    }
}

#[tokio::test]
async fn decision_table() {
    let s = setup(KeyTimes::default());
    let cases = issuers().cases(&s.keys);
    assert!(cases.len() >= 30);
    for Case {
        name,
        op,
        path,
        token,
        want,
    } in cases
    {
        let plan = send(&s, op, path, &token).await;
        assert_eq!(
            plan.status, want,
            "{name}: {op:?} {path}: {:?}",
            plan.detail
        );
        if want == status::UNAUTHORIZED {
            let challenge = plan.www_authenticate.unwrap_or("");
            assert!(
                challenge.starts_with(
                    r#"Bearer realm="xfer", error="invalid_token", error_description=""#
                ),
                "{name}: {challenge}"
            );
            assert!(!challenge.contains(&token), "{name}: the token is echoed");
        }
        if matches!(op, Op::Put | Op::Mkcol) && want >= 400 && path.contains("new-") {
            assert!(
                !s.root.join(&path[1..]).exists(),
                "{name}: {path} was written"
            );
        }
    }
    assert_eq!(
        std::fs::read(s.root.join("atlas/data/f")).expect("read"),
        b"new"
    );
    assert!(s.root.join("atlas/data/new-dir").is_dir());
    assert!(
        !s.root.join("atlas/data/new-c").exists() && !s.root.join("atlas/data/new-moved").exists()
    );
}

#[tokio::test]
async fn forged_kids_do_not_hammer_the_issuer_and_rotation_is_picked_up() {
    let s = setup(KeyTimes {
        unknown_kid_interval: Duration::from_secs(3600),
        ..KeyTimes::default()
    });
    let k = &s.keys;
    let good = k.sign(&es("ec1"), &wlcg(), Some("ec1"));
    let get = async |s: &Setup, token: &str| send(s, Op::Get, "/atlas/data/f", token).await.status;
    assert_eq!(get(&s, &good).await, status::OK);
    let after_first = s.issuers.fetches.load(Ordering::SeqCst);
    assert_eq!(after_first, 2, "discovery and JWKS");
    for i in 0..50 {
        let forged = k.sign(&es(&format!("forged-{i}")), &wlcg(), Some("ec1"));
        assert_eq!(get(&s, &forged).await, status::UNAUTHORIZED);
    }
    assert_eq!(
        s.issuers.fetches.load(Ordering::SeqCst),
        after_first,
        "forged kids made the server fetch keys again within the interval"
    );

    // Rotation: with refetches allowed, a new kid makes the server fetch the new set.
    let s = setup(KeyTimes {
        unknown_kid_interval: Duration::ZERO,
        ..KeyTimes::default()
    });
    let k = &s.keys;
    let old = k.sign(&es("ec1"), &wlcg(), Some("ec1"));
    let new = k.sign(&es("ec2"), &wlcg(), Some("ec2"));
    assert_eq!(get(&s, &old).await, status::OK);
    assert_eq!(get(&s, &new).await, status::UNAUTHORIZED);
    s.issuers.publish(ISSUER, k.jwks(&["ec2"]));
    assert_eq!(get(&s, &new).await, status::OK);
    assert_eq!(
        get(&s, &old).await,
        status::UNAUTHORIZED,
        "a key the issuer withdrew still verifies"
    );
}

#[tokio::test]
async fn cached_keys_outlive_an_issuer_outage() {
    let s = setup(KeyTimes {
        refresh: Duration::ZERO,
        unknown_kid_interval: Duration::ZERO,
        ..KeyTimes::default()
    });
    let good = s.keys.sign(&es("ec1"), &wlcg(), Some("ec1"));
    let plan = send(&s, Op::Get, "/atlas/data/f", &good).await;
    assert_eq!(plan.status, status::OK);
    s.issuers.down.store(true, Ordering::SeqCst);
    let before = s.issuers.fetches.load(Ordering::SeqCst);
    let plan = send(&s, Op::Get, "/atlas/data/f", &good).await;
    assert_eq!(plan.status, status::OK, "{:?}", plan.detail);
    assert!(
        s.issuers.fetches.load(Ordering::SeqCst) > before,
        "due keys were not fetched again"
    );
}

#[tokio::test]
async fn an_issuer_that_never_answers_stalls_only_its_own_tokens() {
    // The fetch waits out a timeout long enough that the other requests below finish
    // while it waits.
    let s = Arc::new(setup(KeyTimes {
        fetch_timeout: Duration::from_secs(120),
        ..KeyTimes::default()
    }));
    s.issuers.hang.store(true, Ordering::SeqCst);
    let token = s.keys.sign(&es("ec1"), &wlcg(), Some("ec1"));
    let waiting = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { send(&s, Op::Get, "/atlas/data/f", &token).await.status })
    };
    while s.issuers.fetches.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(send(&s, Op::Get, "/cms/f", "").await.status, status::OK);
    assert_eq!(
        send(&s, Op::Get, "/cms/f", "static-secret").await.status,
        status::OK
    );
    let sci = s.keys.sign(&es("ec2"), &sci(), Some("ec2"));
    assert_eq!(
        send(&s, Op::Get, "/cms/f", &sci).await.status,
        status::OK,
        "another issuer's tokens wait for this one"
    );
    assert!(!waiting.is_finished(), "the issuer's fetch ended early");
    waiting.abort();

    // A short timeout: the token is refused, not left hanging.
    let s = setup(KeyTimes {
        fetch_timeout: Duration::from_millis(50),
        ..KeyTimes::default()
    });
    s.issuers.hang.store(true, Ordering::SeqCst);
    let token = s.keys.sign(&es("ec1"), &wlcg(), Some("ec1"));
    let plan = send(&s, Op::Get, "/atlas/data/f", &token).await;
    assert_eq!(plan.status, status::UNAUTHORIZED);
    assert_eq!(
        plan.www_authenticate,
        Some(
            r#"Bearer realm="xfer", error="invalid_token", error_description="issuer keys unavailable""#
        )
    );
}

#[test]
fn bad_issuer_entries_are_refused_with_the_entry_named() {
    let entry = |body: &str| format!("[[issuer]]\n{body}\n");
    let ok = "url='https://i.test'\nbase_path='/'\naudiences=['a']";
    for (text, needle) in [
        (
            entry("url='http://i.test'\nbase_path='/'\naudiences=['a']"),
            "issuer[0]: url",
        ),
        (
            entry("url='https://i.test'\nbase_path='/'\naudiences=[]"),
            "issuer[0]: audiences",
        ),
        (
            entry("url='https://i.test'\nbase_path='/../x'\naudiences=['a']"),
            "issuer[0]: base_path",
        ),
        (
            entry(&format!("{ok}\nca_file='/nonexistent/ca.pem'")),
            "issuer[0]: ca_file",
        ),
        (
            entry(&format!("{ok}\nrestricted_paths=['x']")),
            "issuer[0]: restricted path",
        ),
        (entry(&format!("{ok}\nbogus=1")), "bogus"),
        (
            format!("{}{}", entry(ok), entry(ok)),
            "issuer[1]: https://i.test is listed twice",
        ),
    ] {
        let e = xfer_service::Policy::parse(&text, Path::new("f.toml"), true)
            .expect_err("a bad issuer entry");
        assert!(e.to_string().contains(needle), "{e}");
    }
}

#[tokio::test]
async fn a_macaroon_request_names_the_token_holder_by_issuer_and_subject() {
    let s = setup(KeyTimes::default());
    let good = s.keys.sign(&es("ec1"), &wlcg(), Some("ec1"));
    let creds = |token: &str| Credentials {
        bearer: (!token.is_empty()).then(|| Secret::new(token)),
        client_certificate: None,
    };
    let access = &s.svc.config().access;
    let jwt = Identity::Jwt {
        issuer: ISSUER.into(),
        subject: "alice".into(),
        jti: Some("j-1".into()),
    };
    assert_eq!(access.identify(&creds(&good), "/atlas/data/f").await, jwt);
    // Outside the token's scope: still who it is.
    assert_eq!(access.identify(&creds(&good), "/cms/f").await, jwt);
    let shown = jwt.to_string();
    assert_eq!(shown, format!("jwt {ISSUER} sub=alice jti=j-1"));
    assert!(!shown.contains(&good));
    let expired = s.keys.sign(
        &es("ec1"),
        &with(wlcg(), json!({"exp": now() - 3600})),
        Some("ec1"),
    );
    for unknown in ["", "bogus", expired.as_str()] {
        assert_eq!(
            access.identify(&creds(unknown), "/atlas/data/f").await,
            Identity::Anonymous
        );
    }
    // And the request itself is still answered as before.
    let mut r = Request::new(
        Method::Post,
        "/atlas/data/f",
        SocketAddr::from(([127, 0, 0, 1], 9)),
        "test",
    );
    r.credentials = creds(&good);
    r.upload.draft.content_type = Some("application/macaroon-request".into());
    assert_eq!(s.svc.respond(&r).await.status, status::METHOD_NOT_ALLOWED);
}
