//! Issuers' signing keys: found through OpenID discovery, fetched over HTTPS by a
//! [`HttpsGet`] the composition provides (the core opens no sockets), cached per issuer.
//!
//! Keys are used for [`KeyTimes::refresh`] before being fetched again, and keep working
//! through an issuer outage until [`KeyTimes::expiry`]. A `kid` the cache does not hold
//! triggers a fetch at most once per [`KeyTimes::unknown_kid_interval`] per issuer, so forged
//! tokens cannot make the server hammer an issuer. Each issuer has its own lock: callers of
//! one issuer wait (at most [`KeyTimes::fetch_timeout`]) for its fetch, nobody else does.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::grant::TokenError;
use super::jwt::{parse_jwks, PublicKey};

/// Largest discovery document or JWKS read from an issuer.
pub const MAX_KEY_DOCUMENT: usize = 1 << 20;

/// `GET url` over HTTPS, verifying the server's certificate against `ca_file` (PEM) when
/// given, else the system's roots; at most `limit` body bytes, within `timeout`.
pub trait HttpsGet: Send + Sync + fmt::Debug {
    fn get<'a>(
        &'a self,
        url: &'a str,
        ca_file: Option<&'a std::path::Path>,
        limit: usize,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send + 'a>>;
}

/// How long keys live in the cache.
#[derive(Debug, Clone, Copy)]
pub struct KeyTimes {
    pub refresh: Duration,
    pub expiry: Duration,
    pub unknown_kid_interval: Duration,
    pub fetch_timeout: Duration,
}

impl Default for KeyTimes {
    /// Refresh every 10 minutes (scitokens-cpp's update interval too); keep keys a day
    /// through an outage (scitokens-cpp keeps them 4 days; a day is long enough to ride
    /// out an issuer's bad night and short enough that a key withdrawn while the issuer
    /// was unreachable stops working soon); one unknown-`kid` fetch a minute; 5 s per
    /// request to an issuer.
    fn default() -> Self {
        Self {
            refresh: Duration::from_secs(600),
            expiry: Duration::from_secs(24 * 3600),
            unknown_kid_interval: Duration::from_secs(60),
            fetch_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, Default)]
struct IssuerKeys {
    keys: HashMap<String, PublicKey>,
    fetched: Option<Instant>,
    last_attempt: Option<Instant>,
}

/// Keys by issuer; kept across access-file reloads.
#[derive(Debug)]
pub struct KeyCache {
    source: Option<Arc<dyn HttpsGet>>,
    times: KeyTimes,
    issuers: Mutex<HashMap<String, Arc<tokio::sync::Mutex<IssuerKeys>>>>,
}

impl KeyCache {
    pub fn new(source: Option<Arc<dyn HttpsGet>>, times: KeyTimes) -> Self {
        Self {
            source,
            times,
            issuers: Mutex::default(),
        }
    }

    fn entry(&self, issuer: &str) -> Arc<tokio::sync::Mutex<IssuerKeys>> {
        let mut map = self
            .issuers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(map.entry(issuer.to_string()).or_default())
    }

    /// The key `kid` of `issuer`, fetching the issuer's keys when they are due or when the
    /// `kid` is new and the issuer was not asked recently.
    pub async fn key(
        &self,
        issuer: &str,
        ca_file: Option<&PathBuf>,
        kid: &str,
    ) -> Result<PublicKey, TokenError> {
        let entry = self.entry(issuer);
        let mut state = entry.lock().await;
        let now = Instant::now();
        let age = state.fetched.map(|t| now.duration_since(t));
        let due = age.is_none_or(|a| a >= self.times.refresh);
        let unknown = !state.keys.contains_key(kid);
        let recently_tried = state
            .last_attempt
            .is_some_and(|t| now.duration_since(t) < self.times.unknown_kid_interval);
        if (due || unknown) && !recently_tried {
            state.last_attempt = Some(now);
            match self.fetch(issuer, ca_file).await {
                Ok(keys) => {
                    state.keys = keys;
                    state.fetched = Some(Instant::now());
                }
                Err(e) => {
                    tracing::warn!(%issuer, error = %e, "issuer keys not fetched; cached keys stay in use until they expire")
                }
            }
        }
        let expired = state
            .fetched
            .is_none_or(|t| Instant::now().duration_since(t) >= self.times.expiry);
        if expired {
            return Err(TokenError::KeysUnavailable);
        }
        state.keys.get(kid).cloned().ok_or(TokenError::UnknownKey)
    }

    async fn fetch(
        &self,
        issuer: &str,
        ca_file: Option<&PathBuf>,
    ) -> Result<HashMap<String, PublicKey>, String> {
        let Some(source) = &self.source else {
            return Err("this server fetches no issuer keys".into());
        };
        let get = |url: String| async move {
            let t = self.times.fetch_timeout;
            match tokio::time::timeout(
                t,
                source.get(&url, ca_file.map(PathBuf::as_path), MAX_KEY_DOCUMENT, t),
            )
            .await
            {
                Ok(r) => r.map_err(|e| format!("{url}: {e}")),
                Err(_) => Err(format!("{url}: no answer within {t:?}")),
            }
        };
        #[derive(Deserialize)]
        struct Discovery {
            jwks_uri: String,
        }
        let discovery_url = format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        );
        let body = get(discovery_url.clone()).await?;
        let discovery: Discovery =
            serde_json::from_slice(&body).map_err(|e| format!("{discovery_url}: {e}"))?;
        if !discovery.jwks_uri.starts_with("https://") {
            return Err(format!("{discovery_url}: jwks_uri is not https"));
        }
        let body = get(discovery.jwks_uri.clone()).await?;
        let keys = parse_jwks(&body).map_err(|e| format!("{}: {e}", discovery.jwks_uri))?;
        tracing::info!(%issuer, keys = keys.len(), "issuer keys fetched");
        Ok(keys.into_iter().collect())
    }
}
