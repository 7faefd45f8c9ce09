//! The JWT decision table as data: the signing keys, the tokens, and for each case the
//! request and the status xfer answers. Shared by the in-process run
//! (crates/service/tests/tokens.rs) and the comparison with XRootD's SciTokens plugin over
//! real HTTPS (tests/e2e/xrootd_tokens.rs), which loads this file with `#[path]`; the issuer
//! URLs are parameters, since the e2e issuers listen on loopback ports.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};

pub const ANY: &str = "https://wlcg.cern.ch/jwt/v1/any";
pub const HOST: &str = "storage.example.org";
pub const ORIGIN: &str = "https://storage.example.org:8443";

/// Directories the table expects, each holding a file `f` with `data`.
pub const TREE: &[&str] = &["atlas/data", "atlas/a", "atlas/ab", "atlas/prod", "cms"];

/// The two issuers: the WLCG one, mapped to `/atlas`, and a SciTokens one mapped to `/`.
pub struct Issuers {
    pub wlcg: String,
    pub sci: String,
}

impl Issuers {
    /// The access file for these issuers; `ca_files` (wlcg's, sci's) are how the server
    /// trusts their TLS.
    pub fn access_file(&self, ca_files: Option<(&str, &str)>) -> String {
        let ca = |f: &str| format!("ca_file = \"{f}\"\n");
        let (wlcg_ca, sci_ca) = ca_files.map(|(w, s)| (ca(w), ca(s))).unwrap_or_default();
        format!(
            r#"
[[token]]
name = "static"
token = "static-secret"
access = "read"
prefix = "/"

[[issuer]]
url = "{wlcg}"
base_path = "/atlas"
audiences = ["{ANY}", "{HOST}", "{ORIGIN}"]
{wlcg_ca}
[[issuer.group]]
name = "/atlas/production"
access = "modify"
path = "/prod"

[[issuer]]
url = "{sci}"
base_path = "/"
audiences = ["{HOST}"]
{sci_ca}"#,
            wlcg = self.wlcg,
            sci = self.sci,
        )
    }
}

/// What a case asks for. `Move` names its destination path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get,
    Put,
    Delete,
    Mkcol,
    Move(&'static str),
}

/// One row: the request, the token (empty: none), and the status xfer answers.
pub struct Case {
    pub name: &'static str,
    pub op: Op,
    pub path: &'static str,
    pub token: String,
    pub want: u16,
}

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
pub struct Keys {
    ec: HashMap<&'static str, EcdsaKeyPair>,
    rsa: RsaKeyPair,
}

impl Keys {
    pub fn new() -> Self {
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

    pub fn jwk(&self, kid: &str) -> Value {
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

    pub fn jwks(&self, kids: &[&str]) -> Vec<u8> {
        let keys: Vec<Value> = kids.iter().map(|k| self.jwk(k)).collect();
        serde_json::to_vec(&json!({ "keys": keys })).expect("jwks json")
    }

    /// A compact JWS of `claims` with `header`, signed by `signer` (a kid of these keys),
    /// or with an empty signature when `signer` is `None`.
    pub fn sign(&self, header: &Value, claims: &Value, signer: Option<&str>) -> String {
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

pub fn now() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    i64::try_from(secs).expect("time fits")
}

/// `claims` with the members of `changes` set, or removed where they are null.
pub fn with(mut claims: Value, changes: Value) -> Value {
    let map = claims.as_object_mut().expect("claims object");
    for (k, v) in changes.as_object().expect("changes object") {
        match v {
            Value::Null => map.remove(k),
            v => map.insert(k.clone(), v.clone()),
        };
    }
    claims
}

pub fn es(kid: &str) -> Value {
    json!({"alg": "ES256", "kid": kid, "typ": "JWT"})
}

impl Issuers {
    /// A valid WLCG token: read of the issuer's whole area, for [`HOST`].
    pub fn wlcg(&self) -> Value {
        let t = now();
        json!({"iss": self.wlcg, "sub": "alice", "aud": HOST, "exp": t + 600, "iat": t, "nbf": t,
            "jti": "j-1", "wlcg.ver": "1.0", "scope": "storage.read:/"})
    }

    /// A valid SciTokens 2.0 token: read of everything.
    pub fn sci(&self) -> Value {
        let t = now();
        json!({"iss": self.sci, "sub": "bob", "aud": HOST, "exp": t + 600, "iat": t, "nbf": t,
            "ver": "scitoken:2.0", "scope": "read:/"})
    }

    /// The decision table. The wlcg issuer publishes `ec1` and `rsa1`, the sci one `ec2`;
    /// rows run in order (an overwrite comes after the reads of the same file).
    pub fn cases(&self, k: &Keys) -> Vec<Case> {
        let t = now();
        let ec1 = es("ec1");
        let sign = |claims: Value| k.sign(&ec1, &claims, Some("ec1"));
        let wlcg = || self.wlcg();
        let scope = |s: &str| sign(with(wlcg(), json!({ "scope": s })));
        let sci = self.sci();
        let huge = sign(with(wlcg(), json!({"pad": "x".repeat(20_000)})));
        let trailing = format!("{}/", self.wlcg);
        use Op::{Delete, Get, Mkcol, Move, Put};
        let case = |name, op, path, token, want| Case {
            name,
            op,
            path,
            token,
            want,
        };
        #[rustfmt::skip]
        let cases = vec![
            case("read in the area", Get, "/atlas/data/f", sign(wlcg()), 200),
            case("outside the issuer's base path", Get, "/cms/f", sign(wlcg()), 403),
            case("audience: WLCG any", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": ANY}))), 200),
            case("audience: origin with port", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": ORIGIN}))), 200),
            case("audience: wrong host", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": "other.example.org"}))), 401),
            case("audience: origin without the port", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": "https://storage.example.org"}))), 401),
            case("audience: list with the host", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": ["x", HOST]}))), 200),
            case("audience: list without it", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": ["x", "y"]}))), 401),
            case("audience: missing", Get, "/atlas/data/f", sign(with(wlcg(), json!({"aud": null}))), 401),
            case("expired", Get, "/atlas/data/f", sign(with(wlcg(), json!({"exp": t - 120}))), 401),
            case("expired within the leeway", Get, "/atlas/data/f", sign(with(wlcg(), json!({"exp": t - 30}))), 200),
            case("no exp", Get, "/atlas/data/f", sign(with(wlcg(), json!({"exp": null}))), 401),
            case("not yet valid", Get, "/atlas/data/f", sign(with(wlcg(), json!({"nbf": t + 300}))), 401),
            case("issued in the future", Get, "/atlas/data/f", sign(with(wlcg(), json!({"iat": t + 300}))), 401),
            case("unknown issuer", Get, "/atlas/data/f", sign(with(wlcg(), json!({"iss": "https://evil.test"}))), 401),
            case("issuer with a trailing slash", Get, "/atlas/data/f", sign(with(wlcg(), json!({"iss": trailing}))), 401),
            case("no sub", Get, "/atlas/data/f", sign(with(wlcg(), json!({"sub": null}))), 401),
            case("unknown kid", Get, "/atlas/data/f", k.sign(&es("ec9"), &wlcg(), Some("ec1")), 401),
            case("known kid, another key's signature", Get, "/atlas/data/f", k.sign(&ec1, &wlcg(), Some("other")), 401),
            case("alg none", Get, "/atlas/data/f", k.sign(&json!({"alg": "none", "kid": "ec1"}), &wlcg(), None), 401),
            case("alg HS256", Get, "/atlas/data/f", k.sign(&json!({"alg": "HS256", "kid": "ec1"}), &wlcg(), Some("ec1")), 401),
            case("no kid", Get, "/atlas/data/f", k.sign(&json!({"alg": "ES256"}), &wlcg(), Some("ec1")), 401),
            case("RS256", Get, "/atlas/data/f", k.sign(&json!({"alg": "RS256", "kid": "rsa1"}), &wlcg(), Some("rsa1")), 200),
            case("RS256 header on an EC key", Get, "/atlas/data/f", k.sign(&json!({"alg": "RS256", "kid": "ec1"}), &wlcg(), Some("ec1")), 401),
            case("oversized", Get, "/atlas/data/f", huge, 401),
            case("malformed", Get, "/atlas/data/f", "eyJhbGciOi.e30.AA".into(), 401),
            case("scope without a path", Get, "/atlas/data/f", scope("storage.read"), 401),
            case("scope /a covers /a", Get, "/atlas/a/f", scope("storage.read:/a"), 200),
            case("scope /a does not cover /ab", Get, "/atlas/ab/f", scope("storage.read:/a"), 403),
            case("scope with ..", Get, "/atlas/a/f", scope("storage.read:/a/../.."), 401),
            case("read scope uploads nothing", Put, "/atlas/data/new-r", sign(wlcg()), 403),
            case("create: a new file", Put, "/atlas/data/new-c", scope("storage.create:/data"), 201),
            case("create: never an overwrite", Put, "/atlas/data/f", scope("storage.create:/data"), 403),
            case("create also reads", Get, "/atlas/data/f", scope("storage.create:/data"), 200),
            case("create: a new directory", Mkcol, "/atlas/data/new-dir", scope("storage.create:/data"), 201),
            case("create: never a delete", Delete, "/atlas/data/new-c", scope("storage.create:/data"), 403),
            case("create: never a rename", Move("/atlas/data/new-moved"), "/atlas/data/new-c", scope("storage.create:/data"), 403),
            case("read: no directory", Mkcol, "/atlas/data/new-rdir", sign(wlcg()), 403),
            case("modify: overwrite", Put, "/atlas/data/f", scope("storage.modify:/data"), 204),
            case("modify: rename", Move("/atlas/data/new-moved"), "/atlas/data/new-c", scope("storage.modify:/data"), 201),
            case("modify: delete", Delete, "/atlas/data/new-moved", scope("storage.modify:/data"), 204),
            case("modify: no rename out of its path", Move("/atlas/a/new-out"), "/atlas/data/f", scope("storage.modify:/data"), 403),
            case("modify outside its path", Put, "/atlas/a/new-m", scope("storage.modify:/data"), 403),
            case("wlcg.ver 2.0", Get, "/atlas/data/f", sign(with(wlcg(), json!({"wlcg.ver": "2.0"}))), 401),
            case("wlcg.ver 1.2", Get, "/atlas/data/f", sign(with(wlcg(), json!({"wlcg.ver": "1.2"}))), 200),
            case("no version", Get, "/atlas/data/f", sign(with(wlcg(), json!({"wlcg.ver": null}))), 401),
            case("SciTokens read", Get, "/cms/f", k.sign(&es("ec2"), &sci, Some("ec2")), 200),
            case("SciTokens without nbf", Get, "/cms/f", k.sign(&es("ec2"), &with(self.sci(), json!({"nbf": null})), Some("ec2")), 200),
            case("SciTokens read uploads nothing", Put, "/cms/new-s", k.sign(&es("ec2"), &sci, Some("ec2")), 403),
            case("SciTokens write", Put, "/cms/new-s", k.sign(&es("ec2"), &with(self.sci(), json!({"scope": "write:/cms"})), Some("ec2")), 201),
            case("SciTokens scope names in a WLCG token", Get, "/atlas/data/f", scope("read:/"), 403),
            case("a key of another issuer", Get, "/cms/f", k.sign(&ec1, &sci, Some("ec1")), 401),
            case("group fallback", Put, "/atlas/prod/new-g", sign(with(wlcg(), json!({"scope": null, "wlcg.groups": ["/atlas", "/atlas/production"]}))), 201),
            case("groups ignored beside a storage scope", Put, "/atlas/prod/new-h", sign(with(wlcg(), json!({"wlcg.groups": ["/atlas/production"]}))), 403),
            case("unknown group", Get, "/atlas/prod/f", sign(with(wlcg(), json!({"scope": "openid", "wlcg.groups": ["/cms"]}))), 403),
            case("static token beside issuers", Get, "/cms/f", "static-secret".into(), 200),
            case("anonymous read", Get, "/cms/f", String::new(), 200),
        ];
        cases
    }
}
