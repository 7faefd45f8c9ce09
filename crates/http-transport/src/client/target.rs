//! Where requests go: an `http`/`https` URL split into the origin a connection serves and the
//! request target, plus resolution of redirect `Location` values against it.
//!
//! No percent-decoding or dot-segment games: the path is sent as the user (or the server's
//! `Location`) spelled it.

use std::fmt;

use http::uri::{Authority, PathAndQuery, Scheme, Uri};

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Security {
    Plain,
    Tls,
}

/// The scheme, host and port a connection serves: requests to the same origin may share one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Origin {
    pub security: Security,
    /// Host as written in the URL, without IPv6 brackets.
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// `host:port` as shown in errors and reports (IPv6 in brackets).
    pub fn peer(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    fn default_port(&self) -> u16 {
        match self.security {
            Security::Plain => 80,
            Security::Tls => 443,
        }
    }

    /// The `Host` header / `:authority` value (default ports omitted).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == self.default_port() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// A parsed request URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub origin: Origin,
    /// Path and query, starting with `/`.
    pub path: PathAndQuery,
}

impl Target {
    /// Parse an absolute `http://` or `https://` URL. Fragments are dropped; user info is
    /// refused (credentials in URLs leak into logs).
    pub fn parse(url: &str) -> Result<Self, String> {
        let without_fragment = url.split('#').next().unwrap_or(url);
        let uri: Uri = without_fragment
            .parse()
            .map_err(|e| format!("invalid url {url:?}: {e}"))?;
        let security = match uri.scheme() {
            Some(s) if *s == Scheme::HTTP => Security::Plain,
            Some(s) if *s == Scheme::HTTPS => Security::Tls,
            Some(s) => return Err(format!("unsupported scheme {s:?} in {url:?} (http, https)")),
            None => return Err(format!("url {url:?} has no scheme (http://, https://)")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("url {url:?} has no host"))?;
        if authority.as_str().contains('@') {
            return Err(format!(
                "url {url:?} carries user info, which is not supported"
            ));
        }
        let origin = origin_of(security, authority, url)?;
        let path = uri
            .path_and_query()
            .cloned()
            .filter(|p| p.as_str().starts_with('/'))
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        Ok(Self { origin, path })
    }

    /// Resolve a `Location` header value against this URL (RFC 9110 §10.2.2 allows relative
    /// references; RFC 3986 §5.2 says how they combine, which the `url` crate implements).
    pub fn join(&self, location: &str) -> Result<Self, String> {
        let base = url::Url::parse(&self.to_string())
            .map_err(|e| format!("cannot resolve a redirect against {self}: {e}"))?;
        let joined = base
            .join(location.trim())
            .map_err(|e| format!("invalid redirect target {location:?}: {e}"))?;
        if !matches!(joined.scheme(), "http" | "https") {
            return Err(format!("unsupported redirect target {location:?}"));
        }
        Self::parse(joined.as_str())
    }

    /// Whether following a redirect from `self` to `next` would drop TLS.
    pub fn is_downgrade_to(&self, next: &Target) -> bool {
        self.origin.security == Security::Tls && next.origin.security == Security::Plain
    }

    /// Absolute-form URI, as HTTP/2 requests carry it (`:scheme`, `:authority`, `:path`).
    pub fn absolute_uri(&self) -> Result<Uri, http::Error> {
        Uri::builder()
            .scheme(match self.origin.security {
                Security::Plain => Scheme::HTTP,
                Security::Tls => Scheme::HTTPS,
            })
            .authority(self.origin.authority())
            .path_and_query(self.path.clone())
            .build()
    }

    /// Origin-form URI, as HTTP/1.1 request lines carry it.
    pub fn origin_form_uri(&self) -> Uri {
        Uri::from(self.path.clone())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.origin.security {
            Security::Plain => "http",
            Security::Tls => "https",
        };
        write!(f, "{scheme}://{}{}", self.origin.authority(), self.path)
    }
}

fn origin_of(security: Security, authority: &Authority, url: &str) -> Result<Origin, String> {
    let host = authority.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(format!("url {url:?} has an empty host"));
    }
    let port = match authority.port_u16() {
        Some(p) => p,
        None if authority.as_str().ends_with(':') => {
            return Err(format!("url {url:?} has an empty port"))
        }
        None => match security {
            Security::Plain => 80,
            Security::Tls => 443,
        },
    };
    if port == 0 {
        return Err(format!("url {url:?} has port 0"));
    }
    Ok(Origin {
        security,
        host: host.to_ascii_lowercase(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(url: &str) -> Target {
        match Target::parse(url) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn parses_origins() {
        let a = t("https://Example.com/a/b?x=1#frag");
        assert_eq!(a.origin.host, "example.com");
        assert_eq!(a.origin.port, 443);
        assert_eq!(a.path.as_str(), "/a/b?x=1");
        assert_eq!(a.to_string(), "https://example.com/a/b?x=1");
        let b = t("http://[::1]:8080");
        assert_eq!(b.origin.host, "::1");
        assert_eq!(b.origin.peer(), "[::1]:8080");
        assert_eq!(b.origin.authority(), "[::1]:8080");
        assert_eq!(b.path.as_str(), "/");
        assert!(Target::parse("ftp://x/").is_err());
        assert!(Target::parse("http://u:p@x/").is_err());
        assert!(Target::parse("/relative").is_err());
        assert!(Target::parse("http://x:0/").is_err());
    }

    #[test]
    fn joins_locations() {
        let base = t("http://h:81/dir/file?q=1");
        assert_eq!(
            base.join("other").map(|x| x.to_string()),
            Ok("http://h:81/dir/other".into())
        );
        assert_eq!(
            base.join("/abs").map(|x| x.to_string()),
            Ok("http://h:81/abs".into())
        );
        assert_eq!(
            base.join("../up/x").map(|x| x.to_string()),
            Ok("http://h:81/up/x".into())
        );
        assert_eq!(
            base.join("?z").map(|x| x.to_string()),
            Ok("http://h:81/dir/file?z".into())
        );
        assert_eq!(
            base.join("//other:9/p").map(|x| x.to_string()),
            Ok("http://other:9/p".into())
        );
        assert_eq!(
            base.join("https://e.org/x").map(|x| x.to_string()),
            Ok("https://e.org/x".into())
        );
        assert!(base.join("gopher://x/").is_err());
        assert_eq!(
            base.join("a/./b/../c#frag").map(|x| x.to_string()),
            Ok("http://h:81/dir/a/c".into())
        );
        assert_eq!(
            base.join("").map(|x| x.to_string()),
            Ok("http://h:81/dir/file?q=1".into())
        );
    }

    #[test]
    fn a_redirect_from_https_to_http_is_a_downgrade() {
        let tls = t("https://h/a");
        assert!(tls.is_downgrade_to(&t("http://h/a")));
        assert!(!tls.is_downgrade_to(&t("https://other/b")));
        assert!(!t("http://h/a").is_downgrade_to(&tls));
    }
}
