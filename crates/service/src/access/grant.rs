//! What access is decided in terms of: operations, levels, grants, and why a token is
//! refused. A leaf: the policy (`access.rs`) and the token modules below it build on these,
//! and these on nothing of theirs.

use std::path::PathBuf;

use serde::Deserialize;

/// What a request does to the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// GET, HEAD, PROPFIND, listings, checksums.
    Read,
    /// Adds a file or directory that does not exist yet; never replaces, truncates or
    /// removes anything.
    Create,
    /// Creates, overwrites, deletes or renames.
    Modify,
    /// The write of the access file's `write` level: the same as [`Operation::Modify`].
    Write,
}

impl Operation {
    pub(crate) fn normalised(self) -> Self {
        match self {
            Self::Write => Self::Modify,
            op => op,
        }
    }
}

/// Why a JWT is refused; each has its own short, fixed `WWW-Authenticate` challenge
/// (RFC 6750 §3), which never quotes the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("token is not a well-formed JWT")]
    Malformed,
    #[error("token too large")]
    TooLarge,
    #[error("token signature algorithm not accepted (RS256 and ES256 are)")]
    Algorithm,
    #[error("token header has no kid")]
    NoKeyId,
    #[error("token issuer not accepted here")]
    UnknownIssuer,
    #[error("token issuer keys unavailable")]
    KeysUnavailable,
    #[error("token signing key unknown to the issuer")]
    UnknownKey,
    #[error("token signature does not verify")]
    Signature,
    #[error("token expired")]
    Expired,
    #[error("token not yet valid")]
    NotYetValid,
    #[error("token audience not accepted here")]
    Audience,
    #[error("token lacks a required claim")]
    MissingClaim,
    #[error("token profile version not supported")]
    Version,
    #[error("token storage scope without a path")]
    ScopeWithoutPath,
    #[error("token scope path not clean")]
    ScopePath,
}

impl TokenError {
    /// The `WWW-Authenticate` field of the 401.
    pub fn challenge(self) -> &'static str {
        macro_rules! challenge {
            ($d:literal) => {
                concat!(
                    r#"Bearer realm="xfer", error="invalid_token", error_description=""#,
                    $d,
                    '"'
                )
            };
        }
        match self {
            Self::Malformed => challenge!("malformed token"),
            Self::TooLarge => challenge!("token too large"),
            Self::Algorithm => challenge!("signature algorithm not accepted"),
            Self::NoKeyId => challenge!("no kid in the token header"),
            Self::UnknownIssuer => challenge!("issuer not accepted"),
            Self::KeysUnavailable => challenge!("issuer keys unavailable"),
            Self::UnknownKey => challenge!("unknown signing key"),
            Self::Signature => challenge!("signature does not verify"),
            Self::Expired => challenge!("token expired"),
            Self::NotYetValid => challenge!("token not yet valid"),
            Self::Audience => challenge!("audience not accepted"),
            Self::MissingClaim => challenge!("required claim missing"),
            Self::Version => challenge!("token version not supported"),
            Self::ScopeWithoutPath => challenge!("storage scope without a path"),
            Self::ScopePath => challenge!("scope path not clean"),
        }
    }
}

/// An access level under a path prefix (relative to the served root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) level: Level,
    pub(crate) prefix: PathBuf,
}

/// Access level of a scope: each includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Read,
    Create,
    /// `write` in access files written before `create` existed.
    #[serde(alias = "write")]
    Modify,
}

impl Level {
    /// Whether a scope of this level covers `op`.
    pub fn allows(self, op: Operation) -> bool {
        let needed = match op.normalised() {
            Operation::Read => Self::Read,
            Operation::Create => Self::Create,
            Operation::Modify | Operation::Write => Self::Modify,
        };
        self >= needed
    }
}
