//! What a finished file was checked against, stated exactly.
//!
//! Hashing every chunk locally proves only that the bytes written are the bytes received. A
//! claim of verification needs something from the other side to compare with: the server's
//! digest of every chunk (`Content-Digest`), its digest of the whole file (`Repr-Digest`), or
//! the user's `--expect-sha256`. A server that sends none (nginx) can hand over altered bytes
//! undetected, so the report says when that was the case, and `--require-digest` refuses it.

use serde::Serialize;

/// The evidence behind a finished file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// Chunks in the file.
    pub chunks: u64,
    /// Chunks whose bytes matched a digest the server sent for exactly those bytes, in this
    /// run or (as the journal recorded) an earlier one.
    pub chunks_with_server_digest: u64,
    /// The whole file matched the server's `Repr-Digest`.
    pub server_whole_digest: bool,
    /// The whole file matched `--expect-sha256`.
    pub expected_sha256: bool,
    /// The whole file matched the checksum the server sent when asked for it (`--checksum`):
    /// `adler32:0a1b2c3d`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_checksum: Option<String>,
    /// SHA-256 was computed at all (off with `--no-verify`).
    pub local_hash: bool,
}

impl Verification {
    /// Every byte was compared with a digest the server sent: every chunk's, or the whole
    /// file's.
    pub fn is_server_checked(&self) -> bool {
        self.server_whole_digest
            || self.server_checksum.is_some()
            || (self.chunks > 0 && self.chunks_with_server_digest == self.chunks)
    }

    /// Every byte was compared with something that did not come from this transfer's bytes:
    /// the server's digests or the user's.
    pub fn is_checked(&self) -> bool {
        self.is_server_checked() || self.expected_sha256
    }

    /// One phrase per piece of evidence, for the report's `verified_against`.
    pub fn sources(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.chunks > 0 && self.chunks_with_server_digest == self.chunks {
            out.push(format!(
                "server per-chunk Content-Digest (all {} chunks)",
                self.chunks
            ));
        } else if self.chunks_with_server_digest > 0 {
            out.push(format!(
                "server per-chunk Content-Digest ({} of {} chunks)",
                self.chunks_with_server_digest, self.chunks
            ));
        }
        if self.server_whole_digest {
            out.push("server Repr-Digest of the whole file".to_string());
        }
        if let Some(c) = &self.server_checksum {
            out.push(format!("server Digest {c} of the whole file"));
        }
        if self.expected_sha256 {
            out.push("--expect-sha256".to_string());
        }
        if out.is_empty() {
            out.push(
                if self.local_hash {
                    "local SHA-256 only: nothing from the server to compare with"
                } else {
                    "nothing: verification was off"
                }
                .to_string(),
            );
        }
        out
    }

    /// A short human phrase: `verified against ...` or why it was not.
    pub fn describe(&self) -> String {
        if self.is_checked() {
            format!("verified against {}", self.sources().join(" and "))
        } else if self.local_hash {
            let partial = match self.chunks_with_server_digest {
                0 => String::new(),
                n => format!(" ({n} of {} chunks had a server digest)", self.chunks),
            };
            format!("NOT verified: the server sent no digest for the whole file{partial}")
        } else {
            "NOT verified: verification was off".to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_only_what_was_checked() {
        let none = Verification {
            chunks: 4,
            local_hash: true,
            ..Verification::default()
        };
        assert!(!none.is_server_checked() && !none.is_checked());
        assert!(
            none.describe().starts_with("NOT verified"),
            "{}",
            none.describe()
        );
        assert_eq!(
            none.sources(),
            ["local SHA-256 only: nothing from the server to compare with"]
        );

        let partial = Verification {
            chunks_with_server_digest: 3,
            ..none.clone()
        };
        assert!(!partial.is_server_checked());
        assert!(
            partial.describe().contains("3 of 4"),
            "{}",
            partial.describe()
        );

        let all = Verification {
            chunks_with_server_digest: 4,
            ..none.clone()
        };
        assert!(all.is_server_checked());
        assert_eq!(
            all.sources(),
            ["server per-chunk Content-Digest (all 4 chunks)"]
        );

        let whole = Verification {
            server_whole_digest: true,
            ..partial.clone()
        };
        assert!(whole.is_server_checked());
        assert_eq!(whole.sources().len(), 2);

        let user = Verification {
            expected_sha256: true,
            ..none
        };
        assert!(user.is_checked() && !user.is_server_checked());
        assert_eq!(user.describe(), "verified against --expect-sha256");

        let adler = Verification {
            server_checksum: Some("adler32:11e60398".into()),
            ..Verification::default()
        };
        assert!(adler.is_server_checked());
        assert_eq!(
            adler.describe(),
            "verified against server Digest adler32:11e60398 of the whole file"
        );
    }
}
