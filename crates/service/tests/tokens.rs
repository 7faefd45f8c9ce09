//! JWT bearer tokens through `Service::respond`: a decision table over audiences, times,
//! issuers, keys, algorithms, versions, scopes and groups; key rotation, forged `kid`s that
//! must not make the server hammer the issuer, and an issuer that never answers.
//!
//! The issuer is an in-memory [`HttpsGet`] serving discovery and JWKS; tokens are signed here
//! with ring (ES256 with generated keys, RS256 with a fixed test key).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use bytes::Bytes;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use xfer_service::upload::{UploadBody, UploadHead};
use xfer_service::{
    status, AccessControl, Credentials, HttpsGet, Identity, KeyTimes, Method, Request,
    ResponsePlan, Secret, Service, ServiceConfig, UploadConfig,
};

const ISSUER: &str = "https://issuer.test";
const SCI: &str = "https://sci.test";
const ANY: &str = "https://wlcg.cern.ch/jwt/v1/any";
const HOST: &str = "storage.example.org";
const ORIGIN: &str = "https://storage.example.org:8443";

const ACCESS: &str = r#"
[[token]]
name = "static"
token = "static-secret"
access = "read"
prefix = "/"

[[issuer]]
url = "https://issuer.test"
base_path = "/atlas"
audiences = ["https://wlcg.cern.ch/jwt/v1/any", "storage.example.org", "https://storage.example.org:8443"]

[[issuer.group]]
name = "/atlas/production"
access = "modify"
path = "/prod"

[[issuer]]
url = "https://sci.test"
base_path = "/"
audiences = ["storage.example.org"]
"#;

/// A 2048-bit RSA test key (PKCS#8), for RS256.
const RSA_KEY: &str = "
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCrXGpC/lxTcgl8
iPFUGjmRq0dE7put9A9Vpy3XvsA6Uk4sW1qTLiNSVBG0BEcWAXUgecmgSCxoQOFL
FGXI4NkAK13CANNxJclaomEeT1Ie548LA5DXJLRN9l2Ep1cRGu7JMfuzskU8hart
1sPWZ8sCus2hAstnM66M7AuSyv4AtDz1BTHBMId6vYjl6yH4x8u0aDBz8g7ha+Iy
hskitR/xVIY50tL+aJ7rLIuWjMAVv4a5Puru9L2DiKBu7yGKRU3G0ooyoxwhZYtz
8YOupqIMmyyBKWx5Tqm2ZnkHw2DSvceiTu8yTkCEJb1nYK75XgW8kRF7Vl/cST1P
BfclWp09AgMBAAECggEACviA7haSSx5ZKKGsz51ZM7ADQVDEY0Plim6IUxBphqJX
0mOr3hHdXYs30e5XLbu8p65cX/hW7Xq/4bpl1NE+W1Irb7z1TIBmjnioXpQl9ggN
op8hEgEN0RL1hEVhX905TeS3EFdYsun82jq+cXbWKq/Sc901r/8BTRDcodKApgNJ
CgkHKoUGAK7cLUdp69S4UAUtwintuzFoYyMHJTY16HyxoUHrzNJG4SbS8n73eYvt
fQhvh11tm3N7KjqNSF+7CiBwzE+1cvHU8cnKMzeWftw7RtTv8uNOETTXjrWkZEoD
VqrnrglYYbjpsAdWvCLyEK4/heCGRgDP1jIWGD+TsQKBgQDqS8SLlpmPA30amQh4
4K41KGgLK/lyz5kFbfmq0ih4QX9JDUuk3l4AhG3DgIpfQI/j9qm0iWyZ1ig/gAeg
4YOTeBl6lPv4FdriDiBe1w2+viNXJBICJaTJuRRSygBt3qjYv7KAkER3DebIjMvz
RRf11hS3J3MdgwONm2PEIoLqcQKBgQC7PCuh9/9ZX8jtkTseaMw6icYqSz093ySZ
5MGyA+Tb31OEC3h0/ld7+n5n2ODeN0mYXA2ipdfi8tnV3oYnYoNwCBHbPC6yw1Rd
q//Z1xOHUM2kNoCSQYbi11xC+ct8HgzPe39iLKVBhLA0RC34J8r7/J1hKzvzA291
1E+0qTPNjQKBgQChiJt5ods9PqqCLAArVrzE6ZbSHP9eqMJXe/smSr6cKowXUZNV
l/o3YRZMM9My2NBb2zQlxJmbdotJPHwF73VHtwXZ/d26rVa7hAHNYXeYin7TFYtU
758tdO0OJzckiN7gkUoAWXbanjr/ChOTJY/fbjnaDNjRAALzHq8qCqE4AQKBgEb1
LcALYY14fIh0IsiKhOOmdSBwNTxuhcuA41tYmHIvd9IyGquT/ImyzBcFHWt53n1M
XaqHWYLb8GxaEdN5RUC+/i1s6HG9DwsU9TiUhwUgPV7/fMhw5vKvFXsYeeKG7Onw
7rzBGLv00mZsdFN4mTfYa7h4jxaw9ZvdI3vfKA+9AoGAAvlo2yqNY/0TDpohLQSd
k1DVBTBj4xCfAWcL8aPVi1xNrZGU0eGgFsDIR6S+ql1f1Gzuxe2dTrOwvwXUo8y9
n6OgpgyZ+0jo9EaTQ6m9M/Uo7+z/qWubnpuAkFJiLTxT4S1XreCiM1sLaDNs2efY
uzmS728gdKkkEE572PbAW+s=";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Signing keys and the JWK each publishes.
struct Keys {
    ec: HashMap<&'static str, EcdsaKeyPair>,
    rsa: RsaKeyPair,
}

impl Keys {
    fn new() -> Self {
        let rng = SystemRandom::new();
        let ec = ["ec1", "ec2", "other"]
            .into_iter()
            .map(|kid| {
                let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .expect("generate P-256 key");
                let pair = EcdsaKeyPair::from_pkcs8(
                    &ECDSA_P256_SHA256_FIXED_SIGNING,
                    pkcs8.as_ref(),
                    &rng,
                )
                .expect("load P-256 key");
                (kid, pair)
            })
            .collect();
        let der = STANDARD
            .decode(RSA_KEY.replace('\n', ""))
            .expect("RSA test key base64");
        let rsa = RsaKeyPair::from_pkcs8(&der).expect("RSA test key");
        Self { ec, rsa }
    }

    fn jwk(&self, kid: &str) -> Value {
        if kid == "rsa1" {
            let public =
                ring::signature::RsaPublicKeyComponents::<Vec<u8>>::from(self.rsa.public());
            return json!({"kty": "RSA", "kid": kid, "alg": "RS256",
                "n": b64(&public.n), "e": b64(&public.e)});
        }
        let point = self.ec[kid].public_key().as_ref();
        json!({"kty": "EC", "kid": kid, "crv": "P-256",
            "x": b64(&point[1..33]), "y": b64(&point[33..65])})
    }

    fn jwks(&self, kids: &[&str]) -> Vec<u8> {
        let keys: Vec<Value> = kids.iter().map(|k| self.jwk(k)).collect();
        serde_json::to_vec(&json!({ "keys": keys })).expect("jwks json")
    }

    /// A compact JWS of `claims` with `header`, signed by `signer` (a kid of these keys),
    /// or with an empty signature when `signer` is `None`.
    fn sign(&self, header: &Value, claims: &Value, signer: Option<&str>) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match signer {
            None => Vec::new(),
            Some("rsa1") => {
                let mut sig = vec![0; self.rsa.public().modulus_len()];
                self.rsa
                    .sign(
                        &ring::signature::RSA_PKCS1_SHA256,
                        &rng,
                        input.as_bytes(),
                        &mut sig,
                    )
                    .expect("RSA sign");
                sig
            }
            Some(kid) => self.ec[kid]
                .sign(&rng, input.as_bytes())
                .expect("EC sign")
                .as_ref()
                .to_vec(),
        };
        format!("{input}.{}", b64(&signature))
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
    for d in ["atlas/data", "atlas/a", "atlas/ab", "atlas/prod", "cms"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
        std::fs::write(root.join(d).join("f"), b"data").expect("write");
    }
    let root = root.canonicalize().expect("root");
    std::fs::write(dir.path().join("access.toml"), ACCESS).expect("write access file");
    let keys = Keys::new();
    let issuers = Arc::new(FakeIssuers::default());
    issuers.publish(ISSUER, keys.jwks(&["ec1", "rsa1"]));
    issuers.publish(SCI, keys.jwks(&["ec2"]));
    let access = AccessControl::from_file(&dir.path().join("access.toml"), true)
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

fn now() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    i64::try_from(secs).expect("time fits")
}

/// A valid WLCG token of [`ISSUER`]: read of its whole area, for [`HOST`].
fn wlcg() -> Value {
    let t = now();
    json!({"iss": ISSUER, "sub": "alice", "aud": HOST, "exp": t + 600, "iat": t, "nbf": t,
        "jti": "j-1", "wlcg.ver": "1.0", "scope": "storage.read:/"})
}

/// A valid SciTokens 2.0 token of [`SCI`]: read of everything.
fn sci() -> Value {
    let t = now();
    json!({"iss": SCI, "sub": "bob", "aud": HOST, "exp": t + 600, "iat": t,
        "ver": "scitoken:2.0", "scope": "read:/"})
}

/// `claims` with the members of `changes` set, or removed where they are null.
fn with(mut claims: Value, changes: Value) -> Value {
    let map = claims.as_object_mut().expect("claims object");
    for (k, v) in changes.as_object().expect("changes object") {
        match v {
            Value::Null => map.remove(k),
            v => map.insert(k.clone(), v.clone()),
        };
    }
    claims
}

fn es(kid: &str) -> Value {
    json!({"alg": "ES256", "kid": kid, "typ": "JWT"})
}

async fn send(s: &Setup, method: Method, path: &str, token: &str) -> ResponsePlan {
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
    if method == Method::Put {
        r.upload = UploadHead::default();
        return s
            .svc
            .respond_with_body(&r, &mut Body(Some(Bytes::from_static(b"new"))))
            .await;
    }
    s.svc.respond(&r).await
}

#[tokio::test]
async fn decision_table() {
    let s = setup(KeyTimes::default());
    let k = &s.keys;
    let t = now();
    let ec1 = es("ec1");
    let sign = |claims: Value| k.sign(&ec1, &claims, Some("ec1"));
    let huge = sign(with(wlcg(), json!({"pad": "x".repeat(20_000)})));
    use Method::{Get, Put};
    #[rustfmt::skip]
    let cases: Vec<(&str, Method, &str, String, u16)> = vec![
        ("read in the area", Get, "/atlas/data/f", sign(wlcg()), status::OK),
        ("outside the issuer's base path", Get, "/cms/f", sign(wlcg()), status::FORBIDDEN),
        ("audience: WLCG any", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": ANY}))), status::OK),
        ("audience: origin with port", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": ORIGIN}))), status::OK),
        ("audience: wrong host", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": "other.example.org"}))), status::UNAUTHORIZED),
        ("audience: origin without the port", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": "https://storage.example.org"}))), status::UNAUTHORIZED),
        ("audience: list with the host", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": ["x", HOST]}))), status::OK),
        ("audience: list without it", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": ["x", "y"]}))), status::UNAUTHORIZED),
        ("audience: missing", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": null}))), status::UNAUTHORIZED),
        ("expired", Get, "/atlas/data/f", sign(with(wlcg(), json!({"exp": t - 120}))), status::UNAUTHORIZED),
        ("expired within the leeway", Get, "/atlas/data/f", sign(with(wlcg(), json!({"exp": t - 30}))), status::OK),
        ("no exp", Get, "/atlas/data/f", sign(with(wlcg(), json!({"exp": null}))), status::UNAUTHORIZED),
        ("not yet valid", Get, "/atlas/data/f", sign(with(wlcg(), json!({"nbf": t + 300}))), status::UNAUTHORIZED),
        ("issued in the future", Get, "/atlas/data/f", sign(with(wlcg(), json!({"iat": t + 300}))), status::UNAUTHORIZED),
        ("unknown issuer", Get, "/atlas/data/f", sign(with(wlcg(), json!({"iss": "https://evil.test"}))), status::UNAUTHORIZED),
        ("issuer with a trailing slash", Get, "/atlas/data/f", sign(with(wlcg(), json!({"iss": "https://issuer.test/"}))), status::UNAUTHORIZED),
        ("no sub", Get, "/atlas/data/f", sign(with(wlcg(), json!({"sub": null}))), status::UNAUTHORIZED),
        ("unknown kid", Get, "/atlas/data/f", k.sign(&es("ec9"), &wlcg(), Some("ec1")), status::UNAUTHORIZED),
        ("known kid, another key's signature", Get, "/atlas/data/f", k.sign(&ec1, &wlcg(), Some("other")), status::UNAUTHORIZED),
        ("alg none", Get, "/atlas/data/f", k.sign(&json!({"alg": "none", "kid": "ec1"}), &wlcg(), None), status::UNAUTHORIZED),
        ("alg HS256", Get, "/atlas/data/f", k.sign(&json!({"alg": "HS256", "kid": "ec1"}), &wlcg(), Some("ec1")), status::UNAUTHORIZED),
        ("no kid", Get, "/atlas/data/f", k.sign(&json!({"alg": "ES256"}), &wlcg(), Some("ec1")), status::UNAUTHORIZED),
        ("RS256", Get, "/atlas/data/f", k.sign(&json!({"alg": "RS256", "kid": "rsa1"}), &wlcg(), Some("rsa1")), status::OK),
        ("RS256 header on an EC key", Get, "/atlas/data/f", k.sign(&json!({"alg": "RS256", "kid": "ec1"}), &wlcg(), Some("ec1")), status::UNAUTHORIZED),
        ("oversized", Get, "/atlas/data/f", huge, status::UNAUTHORIZED),
        ("malformed", Get, "/atlas/data/f", "eyJhbGciOi.e30.AA".into(), status::UNAUTHORIZED),
        ("scope without a path", Get, "/atlas/data/f", sign(with(wlcg(), json!({"scope": "storage.read"}))), status::UNAUTHORIZED),
        ("scope /a covers /a", Get, "/atlas/a/f", sign(with(wlcg(), json!({"scope": "storage.read:/a"}))), status::OK),
        ("scope /a does not cover /ab", Get, "/atlas/ab/f", sign(with(wlcg(), json!({"scope": "storage.read:/a"}))), status::FORBIDDEN),
        ("scope with ..", Get, "/atlas/a/f", sign(with(wlcg(), json!({"scope": "storage.read:/a/../.."}))), status::UNAUTHORIZED),
        ("read scope uploads nothing", Put, "/atlas/data/new-r", sign(wlcg()), status::FORBIDDEN),
        ("create: a new file", Put, "/atlas/data/new-c", sign(with(wlcg(), json!({"scope": "storage.create:/data"}))), status::CREATED),
        ("create: never an overwrite", Put, "/atlas/data/f", sign(with(wlcg(), json!({"scope": "storage.create:/data"}))), status::FORBIDDEN),
        ("create also reads", Get, "/atlas/data/f", sign(with(wlcg(), json!({"scope": "storage.create:/data"}))), status::OK),
        ("modify: overwrite", Put, "/atlas/data/f", sign(with(wlcg(), json!({"scope": "storage.modify:/data"}))), status::NO_CONTENT),
        ("modify outside its path", Put, "/atlas/a/new-m", sign(with(wlcg(), json!({"scope": "storage.modify:/data"}))), status::FORBIDDEN),
        ("wlcg.ver 2.0", Get, "/atlas/data/f", sign(with(wlcg(), json!({"wlcg.ver": "2.0"}))), status::UNAUTHORIZED),
        ("wlcg.ver 1.2", Get, "/atlas/data/f", sign(with(wlcg(), json!({"wlcg.ver": "1.2"}))), status::OK),
        ("no version", Get, "/atlas/data/f", sign(with(wlcg(), json!({"wlcg.ver": null}))), status::UNAUTHORIZED),
        ("SciTokens read", Get, "/cms/f", k.sign(&es("ec2"), &sci(), Some("ec2")), status::OK),
        ("SciTokens read uploads nothing", Put, "/cms/new-s", k.sign(&es("ec2"), &sci(), Some("ec2")), status::FORBIDDEN),
        ("SciTokens write", Put, "/cms/new-s", k.sign(&es("ec2"), &with(sci(), json!({"scope": "write:/cms"})), Some("ec2")), status::CREATED),
        ("SciTokens scope names in a WLCG token", Get, "/atlas/data/f", sign(with(wlcg(), json!({"scope": "read:/"}))), status::FORBIDDEN),
        ("a key of another issuer", Get, "/cms/f", k.sign(&ec1, &sci(), Some("ec1")), status::UNAUTHORIZED),
        ("group fallback", Put, "/atlas/prod/new-g", sign(with(wlcg(), json!({"scope": null, "wlcg.groups": ["/atlas", "/atlas/production"]}))), status::CREATED),
        ("groups ignored beside a storage scope", Put, "/atlas/prod/new-h", sign(with(wlcg(), json!({"wlcg.groups": ["/atlas/production"]}))), status::FORBIDDEN),
        ("unknown group", Get, "/atlas/prod/f", sign(with(wlcg(), json!({"scope": "openid", "wlcg.groups": ["/cms"]}))), status::FORBIDDEN),
        ("static token beside issuers", Get, "/cms/f", "static-secret".into(), status::OK),
        ("anonymous read", Get, "/cms/f", String::new(), status::OK),
    ];
    assert!(cases.len() >= 30);
    for (name, method, path, token, want) in cases {
        let plan = send(&s, method.clone(), path, &token).await;
        assert_eq!(
            plan.status, want,
            "{name}: {method:?} {path}: {:?}",
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
        if method == Method::Put && want >= 400 && path.contains("new-") {
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
}

#[tokio::test]
async fn forged_kids_do_not_hammer_the_issuer_and_rotation_is_picked_up() {
    let s = setup(KeyTimes {
        unknown_kid_interval: Duration::from_secs(3600),
        ..KeyTimes::default()
    });
    let k = &s.keys;
    let good = k.sign(&es("ec1"), &wlcg(), Some("ec1"));
    let get =
        async |s: &Setup, token: &str| send(s, Method::Get, "/atlas/data/f", token).await.status;
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
    let plan = send(&s, Method::Get, "/atlas/data/f", &good).await;
    assert_eq!(plan.status, status::OK);
    s.issuers.down.store(true, Ordering::SeqCst);
    let before = s.issuers.fetches.load(Ordering::SeqCst);
    let plan = send(&s, Method::Get, "/atlas/data/f", &good).await;
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
        tokio::spawn(async move { send(&s, Method::Get, "/atlas/data/f", &token).await.status })
    };
    while s.issuers.fetches.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(send(&s, Method::Get, "/cms/f", "").await.status, status::OK);
    assert_eq!(
        send(&s, Method::Get, "/cms/f", "static-secret")
            .await
            .status,
        status::OK
    );
    let sci = s.keys.sign(&es("ec2"), &sci(), Some("ec2"));
    assert_eq!(
        send(&s, Method::Get, "/cms/f", &sci).await.status,
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
    let plan = send(&s, Method::Get, "/atlas/data/f", &token).await;
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
