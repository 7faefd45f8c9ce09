//! JWTs end to end: a loopback HTTPS issuer (OpenID discovery and JWKS, its certificate
//! trusted through the access file's `ca_file`), the server fetching its keys with the real
//! client, `xfer get` presenting tokens; a key rotation mid-test; and an issuer that stops
//! answering stalls neither anonymous nor static-token reads. The full decision table runs
//! in crates/service/tests/tokens.rs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use xfer::crates::service::KeyTimes;

use crate::access::get_args;
use crate::support::{
    require_program, run_xfer, sha256_file, write_random_file, xfer_bin, BoxError, Fixture, Proto,
    TestResult,
};

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// What the loopback issuer serves, and whether it answers at all.
#[derive(Default)]
pub(crate) struct IssuerState {
    pub(crate) jwks: Mutex<Vec<u8>>,
    connections: AtomicUsize,
    silent: AtomicBool,
}

/// An HTTPS issuer on 127.0.0.1: `/.well-known/openid-configuration` and `/jwks`, one request
/// per connection. While `silent` it accepts connections and never answers.
pub(crate) async fn start_issuer(
    dir: &Path,
) -> Result<(String, PathBuf, Arc<IssuerState>), BoxError> {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])?;
    let cert = dir.join("issuer-cert.pem");
    let key = dir.join("issuer-key.pem");
    std::fs::write(&cert, made.cert.pem())?;
    std::fs::write(&key, made.key_pair.serialize_pem())?;
    let tls =
        xfer::crates::common::tls::server_config_with_client_ca(&cert, &key, &[b"http/1.1"], None)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let url = format!("https://127.0.0.1:{}", listener.local_addr()?.port());
    let state = Arc::new(IssuerState::default());
    let (issuer, served) = (url.clone(), Arc::clone(&state));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            served.connections.fetch_add(1, Ordering::SeqCst);
            let (acceptor, state, issuer) = (acceptor.clone(), Arc::clone(&served), issuer.clone());
            tokio::spawn(async move {
                if state.silent.load(Ordering::SeqCst) {
                    // Hold the connection open, answering nothing.
                    let _held = tcp;
                    return std::future::pending::<()>().await;
                }
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16_384 {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let body = if head.starts_with("GET /.well-known/openid-configuration ") {
                    json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")})
                        .to_string()
                        .into_bytes()
                } else if head.starts_with("GET /jwks ") {
                    state.jwks.lock().expect("jwks lock").clone()
                } else {
                    let _ = tls.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
                    return;
                };
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(reply.as_bytes()).await;
                let _ = tls.write_all(&body).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    Ok((url, cert, state))
}

struct Signer {
    kid: &'static str,
    pair: EcdsaKeyPair,
}

impl Signer {
    fn new(kid: &'static str) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("generate P-256 key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("load P-256 key");
        Self { kid, pair }
    }

    fn jwk(&self) -> Value {
        let p = self.pair.public_key().as_ref();
        json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "x": b64(&p[1..33]), "y": b64(&p[33..65])})
    }

    fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": self.kid});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .expect("sign");
        format!("{input}.{}", b64(sig.as_ref()))
    }
}

fn publish(state: &IssuerState, keys: &[&Signer]) {
    let keys: Vec<Value> = keys.iter().map(|k| k.jwk()).collect();
    *state.jwks.lock().expect("jwks lock") = json!({ "keys": keys }).to_string().into_bytes();
}

fn claims(issuer: &str, aud: &str, scope: &str) -> Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    json!({"iss": issuer, "sub": "prod-robot", "aud": aud, "iat": now, "exp": now + 600,
        "wlcg.ver": "1.0", "jti": "e2e-1", "scope": scope})
}

#[tokio::test]
async fn issuer_keys_over_https_rotation_and_an_issuer_that_stops_answering() -> TestResult {
    let issuer_dir = tempfile::tempdir()?;
    let (issuer, issuer_ca, state) = start_issuer(issuer_dir.path()).await?;
    let (k1, k2, k3) = (Signer::new("k1"), Signer::new("k2"), Signer::new("k3"));
    publish(&state, &[&k1]);
    let access = format!(
        r#"
[[token]]
name = "static-reader"
token = "static-read-token"
access = "read"
prefix = "/"

[[issuer]]
url = "{issuer}"
base_path = "/"
audiences = ["https://wlcg.cern.ch/jwt/v1/any", "127.0.0.1"]
ca_file = "{}"
"#,
        issuer_ca.display()
    );
    let fx = Fixture::start_with(Proto::Http1Tls, |cfg, dir| {
        cfg.access_file = Some(xfer_test_support::write_access_file(dir, &access));
        // Refetch at once for a new kid, so the rotation below is seen; the silent issuer
        // holds a fetch for as long as the test needs it to.
        cfg.issuer_keys = KeyTimes {
            unknown_kid_interval: Duration::ZERO,
            fetch_timeout: Duration::from_secs(300),
            ..KeyTimes::default()
        };
    })
    .await?;
    std::fs::create_dir_all(fx.root().join("data"))?;
    let sha = write_random_file(&fx.root().join("data/a.bin"), 200_000, 7)?;
    let token_file = |name: &str, token: &str| -> Result<PathBuf, BoxError> {
        let path = fx.dir.path().join(name);
        std::fs::write(&path, format!("{token}\n"))?;
        Ok(path)
    };
    let read = |name: &'static str, token: Option<PathBuf>| {
        let args = get_args(&fx, "/data/a.bin", &fx.out().join(name), token.as_deref());
        async move { run_xfer(args).await }
    };

    // Keys fetched over HTTPS: a valid token reads; a wrong audience is refused (exit 3).
    let good = token_file(
        "good",
        &k1.sign(&claims(&issuer, "127.0.0.1", "storage.read:/data")),
    )?;
    let out = read("good.bin", Some(good)).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sha256_file(&fx.out().join("good.bin"))?, sha);
    let wrong = token_file(
        "wrong",
        &k1.sign(&claims(
            &issuer,
            "elsewhere.example.org",
            "storage.read:/data",
        )),
    )?;
    let out = read("wrong.bin", Some(wrong)).await?;
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let outside = token_file(
        "outside",
        &k1.sign(&claims(&issuer, "127.0.0.1", "storage.read:/dat")),
    )?;
    let out = read("outside.bin", Some(outside)).await?;
    assert_eq!(out.status.code(), Some(3), "/dat does not cover /data");
    assert!(!fx.out().join("wrong.bin").exists() && !fx.out().join("outside.bin").exists());

    // Rotation: the issuer now publishes k2 only; a k2 token makes the server fetch again.
    publish(&state, &[&k2]);
    let rotated = token_file(
        "rotated",
        &k2.sign(&claims(
            &issuer,
            "https://wlcg.cern.ch/jwt/v1/any",
            "storage.read:/",
        )),
    )?;
    let out = read("rotated.bin", Some(rotated)).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The issuer stops answering: a token with a new kid waits on its fetch, while reads by
    // anonymous and static-token callers go through.
    state.silent.store(true, Ordering::SeqCst);
    let before = state.connections.load(Ordering::SeqCst);
    let waiting_token = token_file(
        "waiting",
        &k3.sign(&claims(&issuer, "127.0.0.1", "storage.read:/")),
    )?;
    let mut waiting = Command::new(xfer_bin())
        .args(get_args(
            &fx,
            "/data/a.bin",
            &fx.out().join("waiting.bin"),
            Some(&waiting_token),
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while state.connections.load(Ordering::SeqCst) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never asked the issuer"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = read("anonymous.bin", None).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let static_token = token_file("static", "static-read-token")?;
    let out = read("static.bin", Some(static_token)).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        waiting.try_wait()?.is_none(),
        "the request waiting on the silent issuer ended early"
    );
    waiting.kill()?;
    waiting.wait()?;
    fx.shutdown().await;
    Ok(())
}

/// An https server taking uploads, with `access` as its access file.
pub(crate) async fn uploads_with_access(access: &str) -> Result<Fixture, BoxError> {
    Fixture::start_with(Proto::Http1Tls, |cfg, dir| {
        cfg.access_file = Some(xfer_test_support::write_access_file(dir, access));
        cfg.uploads = Some(Default::default());
    })
    .await
}

/// Mints tokens with the `scitokens` Python package (the reference implementation's
/// library) for the issuer URL in argv[1]: prints the issuer's JWKS and the tokens, as JSON.
const MINT: &str = r#"
import base64, json, sys
import scitokens
from cryptography.hazmat.primitives.asymmetric import ec, rsa

iss = sys.argv[1]
def b64(n, length):
    return base64.urlsafe_b64encode(n.to_bytes(length, "big")).rstrip(b"=").decode()
eck = ec.generate_private_key(ec.SECP256R1())
rk = rsa.generate_private_key(public_exponent=65537, key_size=2048)
en, rn = eck.public_key().public_numbers(), rk.public_key().public_numbers()
jwks = {"keys": [
    {"kty": "EC", "crv": "P-256", "kid": "py-ec", "x": b64(en.x, 32), "y": b64(en.y, 32)},
    {"kty": "RSA", "kid": "py-rsa", "n": b64(rn.n, 256), "e": b64(rn.e, 3)},
]}
def mint(claims, key=eck, kid="py-ec", alg="ES256", lifetime=600):
    t = scitokens.SciToken(key=key, key_id=kid, algorithm=alg)
    t.update_claims(dict({"sub": "py-robot", "aud": "127.0.0.1"}, **claims))
    return t.serialize(issuer=iss, lifetime=lifetime).decode()
sci = {"ver": "scitoken:2.0"}
wlcg = {"wlcg.ver": "1.0"}
print(json.dumps({"jwks": jwks, "tokens": {
    "sci_read": mint(dict(sci, scope="read:/data")),
    "sci_write": mint(dict(sci, scope="write:/data")),
    "wlcg_create": mint(dict(wlcg, scope="storage.create:/data")),
    "wlcg_read_rsa": mint(dict(wlcg, scope="storage.read:/"), key=rk, kid="py-rsa", alg="RS256"),
    "wlcg_wrong_aud": mint(dict(wlcg, scope="storage.read:/", aud="other.example.org")),
    "wlcg_expired": mint(dict(wlcg, scope="storage.read:/"), lifetime=-600),
    "wlcg_v2": mint({"wlcg.ver": "2.0", "scope": "storage.read:/"}),
}}))
"#;

/// Whether `python` can import the `scitokens` package; under `CI=true` it must.
fn scitokens_importable(python: &Path) -> bool {
    let ok = Command::new(python)
        .args(["-c", "import scitokens"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok || xfer_test_support::gate::absent(
        "scitokens",
        "the scitokens Python package is missing (pip install scitokens)",
    )
}

/// Tokens minted by the `scitokens` library, sent by curl: the verdicts this server gives
/// the reference implementation's tokens, SciTokens and WLCG, ES256 and RS256.
#[tokio::test]
async fn tokens_minted_by_the_scitokens_library() -> TestResult {
    let Some(python) = require_program("python3", &[], "python3") else {
        return Ok(());
    };
    let Some(curl) = require_program("curl", &[], "curl") else {
        return Ok(());
    };
    if !scitokens_importable(&python) {
        return Ok(());
    }
    let issuer_dir = tempfile::tempdir()?;
    let (issuer, issuer_ca, state) = start_issuer(issuer_dir.path()).await?;
    let minted = Command::new(&python).args(["-c", MINT, &issuer]).output()?;
    assert!(
        minted.status.success(),
        "minting: {}",
        String::from_utf8_lossy(&minted.stderr)
    );
    let minted: Value = serde_json::from_slice(&minted.stdout)?;
    *state.jwks.lock().expect("jwks lock") = minted["jwks"].to_string().into_bytes();
    let access = format!(
        "[[issuer]]\nurl = \"{issuer}\"\nbase_path = \"/\"\naudiences = [\"127.0.0.1\"]\nca_file = \"{}\"\n",
        issuer_ca.display()
    );
    let fx = uploads_with_access(&access).await?;
    std::fs::create_dir_all(fx.root().join("data"))?;
    write_random_file(&fx.root().join("data/a.bin"), 10_000, 8)?;
    let body = fx.dir.path().join("body.bin");
    std::fs::write(&body, b"uploaded")?;
    let ca = fx.ca_cert().ok_or("the fixture has no CA")?;
    for (name, put, path, want) in [
        ("sci_read", false, "/data/a.bin", 200),
        ("sci_read", true, "/data/py-new", 403),
        ("sci_write", true, "/data/py-new", 201),
        ("sci_write", true, "/data/py-new", 204),
        ("wlcg_create", true, "/data/py-new", 403),
        ("wlcg_create", true, "/data/py-other", 201),
        ("wlcg_create", false, "/data/a.bin", 200),
        ("wlcg_read_rsa", false, "/data/a.bin", 200),
        ("wlcg_wrong_aud", false, "/data/a.bin", 401),
        ("wlcg_expired", false, "/data/a.bin", 401),
        ("wlcg_v2", false, "/data/a.bin", 401),
    ] {
        let token = minted["tokens"][name].as_str().ok_or("a minted token")?;
        let mut cmd = Command::new(&curl);
        cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(&ca)
            .arg("-H")
            .arg(format!("Authorization: Bearer {token}"));
        if put {
            cmd.arg("-T").arg(&body);
        }
        cmd.arg(fx.url(path));
        // Off the runtime: the server under test runs on it.
        let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
        let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(
            code,
            want.to_string(),
            "{name} {} {path}",
            if put { "PUT" } else { "GET" }
        );
    }
    assert_eq!(std::fs::read(fx.root().join("data/py-new"))?, b"uploaded");
    fx.shutdown().await;
    Ok(())
}
