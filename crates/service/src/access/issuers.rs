//! `[[issuer]]` entries of the access file, and what a verified token's claims grant
//! (WLCG Common JWT Profile v1, SciTokens 2.0).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Map, Value};
use xfer_common::paths::sanitize_relative;

use super::grant::{Grant, Level, TokenError};

/// Clock difference tolerated on `exp`, `nbf` and `iat`.
pub const LEEWAY_SECS: i64 = 60;

/// The audience every WLCG resource server accepts.
pub const WLCG_ANY_AUDIENCE: &str = "https://wlcg.cern.ch/jwt/v1/any";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IssuerEntry {
    url: String,
    base_path: String,
    audiences: Vec<String>,
    #[serde(default)]
    restricted_paths: Vec<String>,
    #[serde(default)]
    group: Vec<GroupEntry>,
    ca_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupEntry {
    name: String,
    access: Level,
    path: String,
}

/// An issuer this server trusts, and the area its tokens may cover.
#[derive(Debug, Clone)]
pub struct Issuer {
    pub url: String,
    base: PathBuf,
    audiences: Vec<String>,
    restricted: Vec<PathBuf>,
    groups: Vec<(String, Grant)>,
    pub ca_file: Option<PathBuf>,
}

fn clean(path: &str, what: &str) -> Result<PathBuf, String> {
    if !path.starts_with('/') {
        return Err(format!("{what} {path:?} does not start with /"));
    }
    sanitize_relative(path).map_err(|e| format!("{what} {path:?} is not a clean path: {e}"))
}

impl IssuerEntry {
    pub(super) fn check(self) -> Result<Issuer, String> {
        let url = self.url;
        let host = url
            .strip_prefix("https://")
            .ok_or_else(|| format!("url {url:?} is not https"))?;
        if host.is_empty() || host.starts_with('/') || url.contains(['?', '#', ' ']) {
            return Err(format!("url {url:?} names no host"));
        }
        if self.audiences.is_empty() || self.audiences.iter().any(String::is_empty) {
            return Err("audiences lists no audience (or an empty one)".into());
        }
        let base = clean(&self.base_path, "base_path")?;
        let restricted = self
            .restricted_paths
            .iter()
            .map(|p| clean(p, "restricted path").map(|p| base.join(p)))
            .collect::<Result<_, _>>()?;
        let groups = self
            .group
            .into_iter()
            .map(|g| {
                let prefix = base.join(clean(&g.path, "group path")?);
                Ok((
                    g.name,
                    Grant {
                        level: g.access,
                        prefix,
                    },
                ))
            })
            .collect::<Result<_, String>>()?;
        if let Some(ca) = &self.ca_file {
            std::fs::metadata(ca).map_err(|e| format!("ca_file {}: {e}", ca.display()))?;
        }
        Ok(Issuer {
            url,
            base,
            audiences: self.audiences,
            restricted,
            groups,
            ca_file: self.ca_file,
        })
    }
}

/// Who a verified token names, for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub subject: String,
    pub jti: Option<String>,
}

impl Issuer {
    /// Check the claims of a token whose signature verified, and turn its scopes (or, when
    /// it carries none, its groups) into grants under this issuer's base path.
    pub fn grants(
        &self,
        claims: &Map<String, Value>,
        now: SystemTime,
    ) -> Result<(Subject, Vec<Grant>), TokenError> {
        let now = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let time = |name: &str| match claims.get(name) {
            None => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or(TokenError::Malformed),
        };
        match time("exp")? {
            Some(exp) if exp.saturating_add(LEEWAY_SECS) >= now => {}
            Some(_) => return Err(TokenError::Expired),
            None => return Err(TokenError::MissingClaim),
        }
        if time("nbf")?.is_some_and(|nbf| nbf.saturating_sub(LEEWAY_SECS) > now) {
            return Err(TokenError::NotYetValid);
        }
        if time("iat")?.is_some_and(|iat| iat.saturating_sub(LEEWAY_SECS) > now) {
            return Err(TokenError::NotYetValid);
        }
        let audience_ok = match claims.get("aud") {
            Some(Value::String(a)) => self.audiences.contains(a),
            Some(Value::Array(list)) => list
                .iter()
                .filter_map(Value::as_str)
                .any(|a| self.audiences.iter().any(|ok| ok == a)),
            _ => false,
        };
        if !audience_ok {
            return Err(TokenError::Audience);
        }
        let subject = match claims.get("sub") {
            Some(Value::String(s)) if !s.is_empty() => printable(s),
            _ => return Err(TokenError::MissingClaim),
        };
        let jti = claims.get("jti").and_then(Value::as_str).map(printable);
        let scitoken = match (claims.get("wlcg.ver"), claims.get("ver")) {
            (Some(Value::String(v)), _) if v.split('.').next() == Some("1") => false,
            (None, Some(Value::String(v))) if v == "scitoken:2.0" => true,
            _ => return Err(TokenError::Version),
        };
        let scope = match claims.get("scope") {
            None => "",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(TokenError::Malformed),
        };
        let mut grants = Vec::new();
        for item in scope.split(' ').filter(|s| !s.is_empty()) {
            let (name, path) = item.split_once(':').unwrap_or((item, ""));
            let level = match (scitoken, name) {
                (false, "storage.read") | (true, "read") => Level::Read,
                (false, "storage.create") => Level::Create,
                (false, "storage.modify") | (true, "write") => Level::Modify,
                // Compute, openid and other scopes say nothing about storage.
                _ => continue,
            };
            if path.is_empty() {
                return Err(TokenError::ScopeWithoutPath);
            }
            let rel = clean(path, "scope").map_err(|_| TokenError::ScopePath)?;
            grants.push(Grant {
                level,
                prefix: self.base.join(rel),
            });
        }
        if grants.is_empty() && !scitoken {
            let groups: Vec<&str> = match claims.get("wlcg.groups") {
                Some(Value::Array(g)) => g.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            grants = self
                .groups
                .iter()
                .filter(|(name, _)| groups.contains(&name.as_str()))
                .map(|(_, g)| g.clone())
                .collect();
        }
        let grants = self.restrict(grants);
        Ok((Subject { subject, jti }, grants))
    }

    /// With restricted paths configured, a grant keeps only its part inside one of them.
    fn restrict(&self, grants: Vec<Grant>) -> Vec<Grant> {
        if self.restricted.is_empty() {
            return grants;
        }
        let inside = |a: &Path, b: &Path| a.starts_with(b);
        grants
            .into_iter()
            .flat_map(|g| {
                self.restricted
                    .iter()
                    .filter_map(|r| {
                        if inside(&g.prefix, r) {
                            Some(g.clone())
                        } else if inside(r, &g.prefix) {
                            Some(Grant {
                                level: g.level,
                                prefix: r.clone(),
                            })
                        } else {
                            None
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// A claim as logs may show it: bounded, no control characters.
fn printable(s: &str) -> String {
    s.chars()
        .take(128)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer(restricted: &[&str]) -> Issuer {
        let text = format!(
            "url = 'https://i.test'\nbase_path = '/atlas'\naudiences = ['h']\nrestricted_paths = {restricted:?}\n"
        );
        toml::from_str::<IssuerEntry>(&text)
            .expect("entry parses")
            .check()
            .expect("entry is valid")
    }

    fn prefixes(issuer: &Issuer, scope: &str) -> Vec<(Level, PathBuf)> {
        let claims = serde_json::json!({"iss": "https://i.test", "sub": "s", "aud": "h",
            "exp": i64::MAX / 2, "wlcg.ver": "1.0", "scope": scope});
        let (_, grants) = issuer
            .grants(claims.as_object().expect("object"), SystemTime::now())
            .expect("valid claims");
        grants.into_iter().map(|g| (g.level, g.prefix)).collect()
    }

    #[test]
    fn restricted_paths_narrow_grants_and_drop_the_rest() {
        let i = issuer(&["/data", "/mc/2024"]);
        assert_eq!(
            prefixes(
                &i,
                "storage.read:/ storage.modify:/data/run1 storage.create:/other"
            ),
            vec![
                (Level::Read, PathBuf::from("atlas/data")),
                (Level::Read, PathBuf::from("atlas/mc/2024")),
                (Level::Modify, PathBuf::from("atlas/data/run1")),
            ]
        );
        assert_eq!(
            prefixes(&issuer(&[]), "storage.read:/ storage.create:/x"),
            vec![
                (Level::Read, PathBuf::from("atlas")),
                (Level::Create, PathBuf::from("atlas/x"))
            ]
        );
    }
}
