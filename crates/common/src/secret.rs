//! A secret (a bearer token) that never prints.

use std::fmt;

/// A bearer token as received. Its `Debug` never shows it, so it cannot reach a log by
/// accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// Whether this can travel as a bearer token in every protocol: 1 to 2048 visible ASCII
    /// characters without spaces (RFC 6750's `b64token`, loosely). Says what is wrong.
    pub fn check_bearer(&self) -> Result<(), &'static str> {
        if self.0.is_empty() || self.0.len() > 2048 {
            return Err("a token must be 1 to 2048 characters");
        }
        if !self.0.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("a token must be visible ASCII without spaces");
        }
        Ok(())
    }

    /// The token's text, for the codec that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

impl Secret {
    /// Read a token file: the first line, without surrounding whitespace. An empty file is
    /// an error, not an empty token.
    pub fn from_file(path: &std::path::Path) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let token = text.lines().next().unwrap_or("").trim();
        if token.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} holds no token", path.display()),
            ));
        }
        Ok(Self::new(token))
    }
}
