//! Compact JWS (RFC 7515) as WLCG and SciTokens issuers sign them: parsed strictly, with
//! size caps, and verified with RS256 or ES256 only. Everything here reads hostile input:
//! nothing panics and nothing echoes the token.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;

use super::grant::TokenError;

/// Longest token accepted, in bytes: real WLCG tokens are 1 to 3 KiB.
pub const MAX_JWT_LEN: usize = 16 * 1024;

/// The signature algorithms accepted. `none` and HMAC are refused: a shared secret would
/// let anyone who can verify also mint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Es256,
}

/// A token taken apart, not yet verified.
#[derive(Debug)]
pub struct Jws<'a> {
    pub alg: Alg,
    pub kid: String,
    pub claims: serde_json::Map<String, serde_json::Value>,
    signing_input: &'a str,
    signature: Vec<u8>,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
}

/// Whether `token` has the shape of a compact JWS (three base64url parts), so that other
/// bearer tokens are never parsed as one.
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("ey") && token.bytes().filter(|b| *b == b'.').count() == 2
}

/// Take a compact JWS apart: sizes, base64url (no padding, no stray bits), JSON objects,
/// an accepted `alg` and a `kid`.
pub fn parse(token: &str) -> Result<Jws<'_>, TokenError> {
    if token.len() > MAX_JWT_LEN {
        return Err(TokenError::TooLarge);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let decode = |part: &str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| TokenError::Malformed)
    };
    let header: Header =
        serde_json::from_slice(&decode(header)?).map_err(|_| TokenError::Malformed)?;
    let alg = match header.alg.as_str() {
        "RS256" => Alg::Rs256,
        "ES256" => Alg::Es256,
        _ => return Err(TokenError::Algorithm),
    };
    let kid = match header.kid {
        Some(kid) if !kid.is_empty() => kid,
        _ => return Err(TokenError::NoKeyId),
    };
    let claims = match serde_json::from_slice(&decode(payload)?) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => return Err(TokenError::Malformed),
    };
    let signature = decode(signature)?;
    let signing_input = &token[..token.len() - signature_len(token)];
    Ok(Jws {
        alg,
        kid,
        claims,
        signing_input,
        signature,
    })
}

/// Length of the last part with its dot.
fn signature_len(token: &str) -> usize {
    token.rfind('.').map_or(0, |dot| token.len() - dot)
}

/// A public key from an issuer's JWKS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// The uncompressed P-256 point, `04 || x || y`.
    P256(Vec<u8>),
}

impl Jws<'_> {
    /// Whether `key` signed this token with the algorithm its header names.
    pub fn verify(&self, key: &PublicKey) -> Result<(), TokenError> {
        let msg = self.signing_input.as_bytes();
        let ok = match (self.alg, key) {
            (Alg::Rs256, PublicKey::Rsa { n, e }) => RsaPublicKeyComponents { n, e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, msg, &self.signature)
                .is_ok(),
            (Alg::Es256, PublicKey::P256(point)) => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(msg, &self.signature)
                    .is_ok()
            }
            _ => false,
        };
        ok.then_some(()).ok_or(TokenError::Signature)
    }
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    n: Option<String>,
    e: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

/// The keys of a JWKS (RFC 7517) this server can use, by `kid`: RSA and P-256 keys with an
/// id. Others (and malformed entries) are skipped, so one odd key does not hide the rest.
pub fn parse_jwks(body: &[u8]) -> Result<Vec<(String, PublicKey)>, String> {
    let set: JwkSet = serde_json::from_slice(body).map_err(|e| format!("JWKS: {e}"))?;
    let b64 = |v: &Option<String>| v.as_deref().and_then(|s| URL_SAFE_NO_PAD.decode(s).ok());
    let keys = set
        .keys
        .into_iter()
        .filter_map(|v| serde_json::from_value::<Jwk>(v).ok())
        .filter_map(|k| {
            let kid = k.kid.clone().filter(|kid| !kid.is_empty())?;
            let key = match (k.kty.as_str(), k.crv.as_deref()) {
                ("RSA", _) => PublicKey::Rsa {
                    n: b64(&k.n)?,
                    e: b64(&k.e)?,
                },
                ("EC", Some("P-256")) => {
                    let (x, y) = (b64(&k.x)?, b64(&k.y)?);
                    if x.len() != 32 || y.len() != 32 {
                        return None;
                    }
                    let mut point = vec![4u8];
                    point.extend_from_slice(&x);
                    point.extend_from_slice(&y);
                    PublicKey::P256(point)
                }
                _ => return None,
            };
            Some((kid, key))
        })
        .collect();
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(v: &str) -> String {
        URL_SAFE_NO_PAD.encode(v)
    }

    #[test]
    fn shapes_and_algorithms_are_checked_before_anything_else() {
        let claims = b64(r#"{"sub":"a"}"#);
        for (token, want) in [
            (String::from("ey.a"), TokenError::Malformed),
            (
                format!("{}.{claims}.", b64(r#"{"alg":"none","kid":"k"}"#)),
                TokenError::Algorithm,
            ),
            (
                format!("{}.{claims}.AA", b64(r#"{"alg":"HS256","kid":"k"}"#)),
                TokenError::Algorithm,
            ),
            (
                format!("{}.{claims}.AA", b64(r#"{"alg":"RS256"}"#)),
                TokenError::NoKeyId,
            ),
            (
                format!("{}.{claims}.AA==", b64(r#"{"alg":"RS256","kid":"k"}"#)),
                TokenError::Malformed,
            ),
            (
                format!("{}.{}.AA", b64(r#"{"alg":"RS256","kid":"k"}"#), b64("[1]")),
                TokenError::Malformed,
            ),
            (
                format!("{}.{claims}.AA.x", b64(r#"{"alg":"RS256","kid":"k"}"#)),
                TokenError::Malformed,
            ),
            ("ey".repeat(MAX_JWT_LEN), TokenError::TooLarge),
        ] {
            assert_eq!(parse(&token).map(|_| ()), Err(want), "{token:.60}");
        }
        let ok = format!("{}.{claims}.AA", b64(r#"{"alg":"ES256","kid":"k"}"#));
        let jws = parse(&ok).expect("well formed");
        assert_eq!((jws.alg, jws.kid.as_str()), (Alg::Es256, "k"));
        assert_eq!(
            jws.verify(&PublicKey::P256(vec![4; 65])),
            Err(TokenError::Signature)
        );
    }

    #[test]
    fn jwks_keeps_usable_keys_only() {
        let body = br#"{"keys":[
            {"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"},
            {"kty":"EC","kid":"short","crv":"P-256","x":"AA","y":"AA"},
            {"kty":"EC","kid":"p384","crv":"P-384","x":"AA","y":"AA"},
            {"kty":"oct","kid":"h","k":"AA"},
            {"kty":"RSA","n":"AQAB","e":"AQAB"},
            7
        ]}"#;
        let keys = parse_jwks(body).expect("parses");
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].0, "r");
        assert!(parse_jwks(b"{}").is_err());
    }
}
