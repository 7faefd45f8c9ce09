//! Who may do what. One model for every codec, decided in the core: the codec hands over what
//! the caller presented ([`Credentials`]: a bearer token, a verified client certificate), the
//! core answers with an [`Identity`] or a refusal.
//!
//! The access file (`xfer serve --access FILE`, TOML) maps tokens and certificates to a scope,
//! an access level under a path prefix:
//!
//! ```toml
//! [[token]]
//! name = "telescope"          # what logs and reports show; the secret never appears
//! sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! access = "write"            # "read", or "write" (which includes read)
//! prefix = "/incoming/telescope"
//!
//! [[certificate]]
//! name = "pipeline"
//! dns = ["pipeline.example.org"]   # subjectAltName DNS names, any of them
//! access = "read"
//! prefix = "/"
//! ```
//!
//! A token is stored as the SHA-256 of its text (`xfer token new` prints both), so a leaked
//! access file does not leak the tokens; `token = "..."` holds one in clear for tests and
//! quick setups. Presented tokens are hashed and compared with every entry in constant time.
//! Anonymous callers may read when `anonymous_read` is on (the default) and never write.

mod grant;
mod issuers;
pub mod jwt;
mod keys;

pub(crate) use grant::Grant;
pub use grant::{Level, Operation, TokenError};
pub use issuers::{LEEWAY_SECS, WLCG_ANY_AUDIENCE};
pub use keys::{HttpsGet, KeyTimes, MAX_KEY_DOCUMENT};

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use xfer_common::paths::sanitize_relative;
pub use xfer_common::secret::Secret;

/// Longest bearer token accepted, in bytes (a JWT's limit); codecs refuse longer ones
/// before hashing.
pub const MAX_TOKEN_LEN: usize = jwt::MAX_JWT_LEN;

/// How often the access file's modification time is checked for a reload.
const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// What the caller presented, as the codec received it.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// `Authorization: Bearer ...` (HTTP) or the token field of an `xfer/1` request.
    pub bearer: Option<Secret>,
    /// The end-entity certificate (DER) of a client the TLS handshake verified against the
    /// server's client CA.
    pub client_certificate: Option<Arc<Vec<u8>>>,
}

/// Who is asking, once the core has checked the credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Identity {
    #[default]
    Anonymous,
    Token {
        name: String,
    },
    Certificate {
        name: String,
    },
    /// A JWT whose signature, issuer, times and audience verified.
    Jwt {
        issuer: String,
        subject: String,
        jti: Option<String>,
    },
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Anonymous => f.write_str("anonymous"),
            Self::Token { name } => write!(f, "token {name}"),
            Self::Certificate { name } => write!(f, "certificate {name}"),
            Self::Jwt {
                issuer,
                subject,
                jti,
            } => {
                write!(f, "jwt {issuer} sub={subject}")?;
                match jti {
                    Some(jti) => write!(f, " jti={jti}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// 401: credentials are needed and none were given, or what was given matches nothing.
    Unauthenticated { invalid_token: bool },
    /// 401: a bearer token that looks like a JWT and does not verify.
    BadToken(TokenError),
    /// 403: the caller is known, the request is outside its scope.
    OutOfScope { identity: Identity, reason: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AccessFile {
    #[serde(default)]
    token: Vec<TokenEntry>,
    #[serde(default)]
    certificate: Vec<CertificateEntry>,
    #[serde(default)]
    issuer: Vec<issuers::IssuerEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    sha256: Option<String>,
    token: Option<String>,
    access: Level,
    prefix: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CertificateEntry {
    name: String,
    dns: Vec<String>,
    access: Level,
    prefix: String,
}

/// A scope: what an identity may do, and where.
#[derive(Debug, Clone)]
struct Scope {
    identity: Identity,
    level: Level,
    /// Relative to the served root, checked component by component.
    prefix: PathBuf,
}

#[derive(Debug, Clone)]
struct TokenScope {
    sha256: [u8; 32],
    scope: Scope,
}

#[derive(Debug, Clone)]
struct CertificateScope {
    dns: Vec<String>,
    scope: Scope,
}

/// A reason the access file cannot be used; the server refuses to start (or keeps the
/// previous policy on reload) rather than guess.
#[derive(Debug, thiserror::Error)]
#[error("access file {path}: {message}")]
pub struct AccessFileError {
    pub path: PathBuf,
    pub message: String,
}

/// The rules in force.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    anonymous_read: bool,
    tokens: Vec<TokenScope>,
    certificates: Vec<CertificateScope>,
    issuers: Vec<issuers::Issuer>,
}

impl Policy {
    /// No tokens or certificates: anonymous reads if `anonymous_read`, no writes.
    pub fn anonymous(anonymous_read: bool) -> Self {
        Self {
            anonymous_read,
            ..Self::default()
        }
    }

    /// Parse an access file's text; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path, anonymous_read: bool) -> Result<Self, AccessFileError> {
        let fail = |message: String| AccessFileError {
            path: path.to_path_buf(),
            message,
        };
        let file: AccessFile = toml::from_str(text).map_err(|e| fail(e.to_string()))?;
        let mut policy = Self::anonymous(anonymous_read);
        for (i, t) in file.token.into_iter().enumerate() {
            let what = format!("token[{i}] ({})", t.name);
            let sha256 = match (&t.sha256, &t.token) {
                (Some(hex), None) => parse_sha256(hex)
                    .ok_or_else(|| fail(format!("{what}: sha256 must be 64 hex digits")))?,
                (None, Some(clear)) if !clear.is_empty() => Sha256::digest(clear.as_bytes()).into(),
                _ => {
                    return Err(fail(format!(
                        "{what}: give exactly one of sha256 or token (non-empty)"
                    )))
                }
            };
            let scope = scope(
                Identity::Token {
                    name: t.name.clone(),
                },
                t.access,
                &t.prefix,
            )
            .map_err(|m| fail(format!("{what}: {m}")))?;
            policy.tokens.push(TokenScope { sha256, scope });
        }
        for (i, c) in file.certificate.into_iter().enumerate() {
            let what = format!("certificate[{i}] ({})", c.name);
            if c.dns.is_empty() {
                return Err(fail(format!("{what}: dns lists no name")));
            }
            let scope = scope(
                Identity::Certificate {
                    name: c.name.clone(),
                },
                c.access,
                &c.prefix,
            )
            .map_err(|m| fail(format!("{what}: {m}")))?;
            policy
                .certificates
                .push(CertificateScope { dns: c.dns, scope });
        }
        for (i, entry) in file.issuer.into_iter().enumerate() {
            let what = format!("issuer[{i}]");
            let issuer = entry.check().map_err(|m| fail(format!("{what}: {m}")))?;
            if policy.issuers.iter().any(|o| o.url == issuer.url) {
                return Err(fail(format!("{what}: {} is listed twice", issuer.url)));
            }
            policy.issuers.push(issuer);
        }
        Ok(policy)
    }

    /// Read and parse an access file.
    pub fn load(path: &Path, anonymous_read: bool) -> Result<Self, AccessFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| AccessFileError {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Self::parse(&text, path, anonymous_read)
    }

    /// Whether anyone can ever write (a token or certificate with create or modify access
    /// exists).
    pub fn allows_writes(&self) -> bool {
        let write = |s: &Scope| s.level >= Level::Create;
        // Tokens an issuer signs may carry any scope.
        !self.issuers.is_empty()
            || self.tokens.iter().any(|t| write(&t.scope))
            || self.certificates.iter().any(|c| write(&c.scope))
    }

    /// Decide whether the caller may do `op` on `request_path` (still percent-encoded).
    pub fn check(
        &self,
        creds: &Credentials,
        op: Operation,
        request_path: &str,
    ) -> Result<Identity, Denied> {
        let scope = match (&creds.bearer, &creds.client_certificate) {
            (Some(token), _) => match self.token_scope(token) {
                Some(s) => s,
                None => {
                    return Err(Denied::Unauthenticated {
                        invalid_token: true,
                    })
                }
            },
            (None, Some(cert)) => match self.certificate_scope(cert) {
                Some(s) => s,
                // Verified by the client CA but mapped to no scope: it proves nothing more
                // than an anonymous caller.
                None => return self.anonymous_check(op),
            },
            (None, None) => return self.anonymous_check(op),
        };
        if !scope.level.allows(op) {
            return Err(Denied::OutOfScope {
                identity: scope.identity.clone(),
                reason: match scope.level {
                    Level::Read => "read-only scope".into(),
                    _ => "create-only scope: the target exists".into(),
                },
            });
        }
        // A path that does not decode is refused later with 400, whoever asks.
        if let Ok(rel) = sanitize_relative(request_path) {
            if !rel.starts_with(&scope.prefix) {
                return Err(Denied::OutOfScope {
                    identity: scope.identity.clone(),
                    reason: format!("outside /{}", scope.prefix.display()),
                });
            }
        }
        Ok(scope.identity.clone())
    }

    fn anonymous_check(&self, op: Operation) -> Result<Identity, Denied> {
        if op == Operation::Read && self.anonymous_read {
            Ok(Identity::Anonymous)
        } else {
            Err(Denied::Unauthenticated {
                invalid_token: false,
            })
        }
    }

    /// Every entry is compared, matched or not, so the time taken says nothing about which.
    fn token_scope(&self, token: &Secret) -> Option<&Scope> {
        let presented: [u8; 32] = Sha256::digest(token.expose().as_bytes()).into();
        let mut found = None;
        for t in &self.tokens {
            if bool::from(t.sha256.ct_eq(&presented)) && found.is_none() {
                found = Some(&t.scope);
            }
        }
        found
    }

    fn certificate_scope(&self, der: &[u8]) -> Option<&Scope> {
        let cert_der = rustls_pki_types::CertificateDer::from(der);
        let cert = webpki::EndEntityCert::try_from(&cert_der).ok()?;
        self.certificates.iter().find_map(|c| {
            c.dns
                .iter()
                .filter_map(|n| rustls_pki_types::ServerName::try_from(n.as_str()).ok())
                .any(|name| cert.verify_is_valid_for_subject_name(&name).is_ok())
                .then_some(&c.scope)
        })
    }
}

/// Whether any of a token's grants covers `op` on `request_path`.
fn check_grants(
    identity: Identity,
    grants: &[Grant],
    op: Operation,
    request_path: &str,
) -> Result<Identity, Denied> {
    // A path that does not decode is refused later with 400, whoever asks.
    let Ok(rel) = sanitize_relative(request_path) else {
        return Ok(identity);
    };
    let covering = grants.iter().filter(|g| rel.starts_with(&g.prefix));
    if covering.clone().any(|g| g.level.allows(op)) {
        return Ok(identity);
    }
    let reason = if covering.count() == 0 {
        "no scope of the token covers the path".into()
    } else {
        format!("the token's scopes do not allow {op:?} there")
    };
    Err(Denied::OutOfScope { identity, reason })
}

fn scope(identity: Identity, level: Level, prefix: &str) -> Result<Scope, String> {
    let prefix = sanitize_relative(prefix)
        .map_err(|e| format!("prefix {prefix:?} is not a clean absolute path: {e}"))?;
    Ok(Scope {
        identity,
        level,
        prefix,
    })
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The SHA-256 of a token as the access file stores it.
pub fn token_sha256_hex(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The policy in force, replaced whole when the access file changes.
#[derive(Debug)]
pub struct AccessControl {
    current: RwLock<Arc<Policy>>,
    file: Option<PathBuf>,
    anonymous_read: bool,
    keys: keys::KeyCache,
}

impl AccessControl {
    /// No access file: anonymous reads if `anonymous_read`, no writes.
    pub fn anonymous(anonymous_read: bool) -> Self {
        Self {
            current: RwLock::new(Arc::new(Policy::anonymous(anonymous_read))),
            file: None,
            anonymous_read,
            keys: keys::KeyCache::new(None, KeyTimes::default()),
        }
    }

    /// Rules from an access file, which [`AccessControl::reload`] reads again.
    pub fn from_file(path: &Path, anonymous_read: bool) -> Result<Self, AccessFileError> {
        let policy = Policy::load(path, anonymous_read)?;
        Ok(Self {
            current: RwLock::new(Arc::new(policy)),
            file: Some(path.to_path_buf()),
            anonymous_read,
            keys: keys::KeyCache::new(None, KeyTimes::default()),
        })
    }

    /// Fetch issuers' keys with `source` (without one, every JWT is refused), cached as
    /// `times` says.
    pub fn with_key_source(mut self, source: Arc<dyn HttpsGet>, times: KeyTimes) -> Self {
        self.keys = keys::KeyCache::new(Some(source), times);
        self
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.current
            .read()
            .map(|p| Arc::clone(&p))
            .unwrap_or_else(|p| Arc::clone(&p.into_inner()))
    }

    /// Decide whether the caller may do `op` on `request_path` (still percent-encoded): the
    /// one entry point for every request, whatever the caller presented.
    pub async fn authorize(
        &self,
        creds: &Credentials,
        op: Operation,
        request_path: &str,
    ) -> Result<Identity, Denied> {
        self.authorize_write(creds, op, request_path)
            .await
            .map(|(identity, _)| identity)
    }

    /// Who the caller is, as the logs show it, whatever it may do at `request_path`: a JWT
    /// that verifies is its issuer, subject and `jti`, a static token its name, a certificate
    /// its entry; anything that does not verify is anonymous. For requests answered without
    /// an access decision (a macaroon request), so that their log line still names the
    /// caller.
    pub async fn identify(&self, creds: &Credentials, request_path: &str) -> Identity {
        match self.authorize(creds, Operation::Read, request_path).await {
            Ok(identity) | Err(Denied::OutOfScope { identity, .. }) => identity,
            Err(Denied::Unauthenticated { .. } | Denied::BadToken(_)) => Identity::Anonymous,
        }
    }

    /// As [`AccessControl::authorize`], and whether the same caller may also modify the
    /// path: a write allowed as [`Operation::Create`] must not replace a file that takes the
    /// name before it is stored unless this is `true`.
    pub async fn authorize_write(
        &self,
        creds: &Credentials,
        op: Operation,
        request_path: &str,
    ) -> Result<(Identity, bool), Denied> {
        let policy = self.policy();
        match (&creds.bearer, policy.issuers.is_empty()) {
            (Some(token), false)
                if jwt::looks_like_jwt(token.expose()) && policy.token_scope(token).is_none() =>
            {
                let (identity, grants) =
                    self.verify_jwt(&policy, token.expose())
                        .await
                        .map_err(|e| {
                            tracing::info!(reason = %e, "bearer token refused");
                            Denied::BadToken(e)
                        })?;
                let may_modify =
                    check_grants(identity.clone(), &grants, Operation::Modify, request_path)
                        .is_ok();
                check_grants(identity, &grants, op, request_path).map(|id| (id, may_modify))
            }
            _ => {
                let identity = policy.check(creds, op, request_path)?;
                let may_modify = policy.check(creds, Operation::Modify, request_path).is_ok();
                Ok((identity, may_modify))
            }
        }
    }

    /// Signature, issuer, times, audience, version and scopes of a JWT.
    async fn verify_jwt(
        &self,
        policy: &Policy,
        token: &str,
    ) -> Result<(Identity, Vec<Grant>), TokenError> {
        let jws = jwt::parse(token)?;
        let iss = jws.claims.get("iss").and_then(serde_json::Value::as_str);
        let issuer = policy
            .issuers
            .iter()
            .find(|i| Some(i.url.as_str()) == iss)
            .ok_or(TokenError::UnknownIssuer)?;
        let key = self
            .keys
            .key(&issuer.url, issuer.ca_file.as_ref(), &jws.kid)
            .await?;
        jws.verify(&key)?;
        let (subject, grants) = issuer.grants(&jws.claims, SystemTime::now())?;
        let identity = Identity::Jwt {
            issuer: issuer.url.clone(),
            subject: subject.subject,
            jti: subject.jti,
        };
        Ok((identity, grants))
    }

    /// Read the access file again. A file that no longer parses leaves the rules in force
    /// unchanged: a typo must not open the server or lock everyone out.
    pub fn reload(&self) -> Result<(), AccessFileError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let policy = Policy::load(path, self.anonymous_read)?;
        match self.current.write() {
            Ok(mut p) => *p = Arc::new(policy),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(policy),
        }
        tracing::info!(file = %path.display(), "access file reloaded");
        Ok(())
    }

    /// Reload on SIGHUP and whenever the file's modification time changes. Runs until the
    /// runtime stops.
    pub fn spawn_reloader(self: &Arc<Self>) {
        let Some(path) = self.file.clone() else {
            return;
        };
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let mut hup =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            let mut seen = modified(&path);
            let mut tick = tokio::time::interval(RELOAD_CHECK);
            loop {
                let signalled = tokio::select! {
                    _ = tick.tick() => false,
                    Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
                };
                let now = modified(&path);
                if signalled || now != seen {
                    seen = now;
                    if let Err(e) = this.reload() {
                        tracing::error!(error = %e, "access file not reloaded; the previous rules stay in force");
                    }
                }
            }
        });
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[[token]]
name = "writer"
token = "w-secret"
access = "write"
prefix = "/incoming"

[[token]]
name = "reader"
sha256 = "SHA"
access = "read"
prefix = "/"
"#;

    fn policy(anonymous_read: bool) -> Policy {
        let text = FILE.replace("SHA", &token_sha256_hex("r-secret"));
        Policy::parse(&text, Path::new("test.toml"), anonymous_read).unwrap()
    }

    fn bearer(t: &str) -> Credentials {
        Credentials {
            bearer: Some(Secret::new(t)),
            client_certificate: None,
        }
    }

    #[test]
    fn tokens_map_to_their_scopes() {
        let p = policy(true);
        let writer = Identity::Token {
            name: "writer".into(),
        };
        assert_eq!(
            p.check(&bearer("w-secret"), Operation::Write, "/incoming/a.bin"),
            Ok(writer.clone())
        );
        assert!(matches!(
            p.check(&bearer("w-secret"), Operation::Write, "/incomingx/a.bin"),
            Err(Denied::OutOfScope { .. })
        ));
        assert!(
            p.check(
                &bearer("w-secret"),
                Operation::Write,
                "/incoming/%2e%2e/etc"
            )
            .is_ok(),
            "a traversal does not decode and is refused later with 400"
        );
        assert!(matches!(
            p.check(&bearer("r-secret"), Operation::Write, "/incoming/a.bin"),
            Err(Denied::OutOfScope { .. })
        ));
        assert!(p
            .check(&bearer("r-secret"), Operation::Read, "/any/where")
            .is_ok());
        assert_eq!(
            p.check(&bearer("nope"), Operation::Read, "/a"),
            Err(Denied::Unauthenticated {
                invalid_token: true
            })
        );
    }

    #[test]
    fn levels_include_the_ones_before_them() {
        use Operation::*;
        for (level, read, create, modify) in [
            (Level::Read, true, false, false),
            (Level::Create, true, true, false),
            (Level::Modify, true, true, true),
        ] {
            assert_eq!(level.allows(Read), read, "{level:?}");
            assert_eq!(level.allows(Create), create, "{level:?}");
            assert_eq!(level.allows(Modify), modify, "{level:?}");
            assert_eq!(level.allows(Write), modify, "{level:?}");
        }
        let old: Level = toml::from_str::<toml::Value>("l = 'write'")
            .and_then(|v| v["l"].clone().try_into())
            .expect("write parses");
        assert_eq!(old, Level::Modify);
    }

    #[test]
    fn anonymous_reads_only_when_allowed_and_never_writes() {
        let none = Credentials::default();
        assert_eq!(
            policy(true).check(&none, Operation::Read, "/a"),
            Ok(Identity::Anonymous)
        );
        assert!(policy(false).check(&none, Operation::Read, "/a").is_err());
        assert!(policy(true).check(&none, Operation::Write, "/a").is_err());
    }

    #[test]
    fn bad_files_are_refused_with_the_entry_named() {
        for (text, needle) in [
            (
                "[[token]]\nname='a'\naccess='read'\nprefix='/'\n",
                "token[0] (a)",
            ),
            (
                "[[token]]\nname='a'\nsha256='zz'\naccess='read'\nprefix='/'\n",
                "64 hex",
            ),
            (
                "[[token]]\nname='a'\ntoken='x'\naccess='root'\nprefix='/'\n",
                "access",
            ),
            (
                "[[token]]\nname='a'\ntoken='x'\naccess='read'\nprefix='/../x'\n",
                "prefix",
            ),
            (
                "[[token]]\nname='a'\ntoken='x'\naccess='read'\nprefix='/'\nextra=1\n",
                "extra",
            ),
        ] {
            let e = Policy::parse(text, Path::new("f.toml"), true).unwrap_err();
            assert!(e.to_string().contains(needle), "{e}");
        }
    }

    #[test]
    fn secrets_do_not_print() {
        let c = bearer("very-secret-token");
        assert!(!format!("{c:?}").contains("very-secret"));
    }
}
