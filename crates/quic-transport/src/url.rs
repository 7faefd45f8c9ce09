//! `quic://host[:port][/path][?query]` URLs.
//!
//! The port defaults to [`DEFAULT_PORT`] (8443, the port `xfer serve` listens on by default, TCP and UDP alike). The host is a DNS name, an IPv4 address or a
//! bracketed IPv6 address; it is also the TLS server name. The path and query are sent verbatim
//! (still percent-encoded) in the request; the server decodes them as the HTTP server does. A
//! fragment is dropped. User info is refused.

use crate::wire::DEFAULT_PORT;

/// The parts of a `quic://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicUrl {
    /// Host without brackets: `example.org`, `127.0.0.1`, `::1`.
    pub host: String,
    pub port: u16,
    /// Path with its query, at least `/`.
    pub path_and_query: String,
}

impl QuicUrl {
    /// Parse, returning a lowercase reason on failure.
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest = url
            .strip_prefix("quic://")
            .ok_or_else(|| "scheme must be quic://".to_string())?;
        let rest = rest.split('#').next().unwrap_or("");
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(split);
        if authority.contains('@') {
            return Err("user info is not supported".into());
        }
        let (host, port) = if let Some(after) = authority.strip_prefix('[') {
            let (host, after) = after
                .split_once(']')
                .ok_or_else(|| "unclosed '[' in host".to_string())?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| "junk after ']' in host".to_string())?,
                ),
            };
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!("{host:?} is not an ipv6 address"));
            }
            (host, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err("missing host".into());
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| format!("bad port {p:?}"))?,
        };
        let path_and_query = if tail.is_empty() {
            "/".to_string()
        } else if tail.starts_with('?') {
            format!("/{tail}")
        } else {
            tail.to_string()
        };
        Ok(Self {
            host: host.to_string(),
            port,
            path_and_query,
        })
    }

    /// `host:port` with IPv6 brackets, for messages and resolution.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_ports_and_paths() {
        let u = QuicUrl::parse("quic://example.org/a/b.bin?x=1#frag").expect("valid");
        assert_eq!(u.host, "example.org");
        assert_eq!(u.port, DEFAULT_PORT);
        assert_eq!(u.path_and_query, "/a/b.bin?x=1");
        let u = QuicUrl::parse("quic://127.0.0.1:9000").expect("valid");
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 9000));
        assert_eq!(u.path_and_query, "/");
        let u = QuicUrl::parse("quic://[::1]:4500/.xfer/synthetic?size=1G").expect("valid");
        assert_eq!(u.host, "::1");
        assert_eq!(u.authority(), "[::1]:4500");
        assert_eq!(u.path_and_query, "/.xfer/synthetic?size=1G");
        assert_eq!(
            QuicUrl::parse("quic://h?q").expect("valid").path_and_query,
            "/?q"
        );
    }

    #[test]
    fn refuses_bad_urls() {
        for bad in [
            "https://h/",
            "quic://",
            "quic://:4433/",
            "quic://h:0/",
            "quic://h:99999/",
            "quic://u@h/",
            "quic://[::1/",
            "quic://[nothex]/",
            "quic://[::1]x/",
        ] {
            assert!(QuicUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
