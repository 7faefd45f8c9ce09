//! The client's knobs: protocol, lane counts, timeouts, TLS trust.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use xfer_common::secret::Secret;
use xfer_common::tls::ClientTlsOptions;
use xfer_core::layout::{LaneLayout, Lanes};

use crate::config::{ConfigError, Http2Config, HttpVersion, TcpConfig};

/// Which addresses connections may go to: asked with every address a name resolves to,
/// before connecting, for the URL's origin and every origin a redirect points at. The client
/// connects to exactly the addresses that passed, so a name that resolves differently a
/// moment later changes nothing. A server's third-party copies use one to keep away from
/// internal addresses.
pub trait AddressPolicy: Send + Sync + fmt::Debug {
    /// `Err(why)`: no connection to `addr`, which `host` resolved to; `why` is for the log
    /// and the error's detail.
    fn check(&self, host: &str, addr: SocketAddr) -> Result<(), String>;

    /// Told of each TCP connection made to `addr` (which passed [`AddressPolicy::check`]).
    /// What it returns is kept with the connection's socket and dropped when the socket
    /// closes, so a policy can tell which connections are open now (a third-party copy's
    /// `RemoteConnections`). Default: nothing kept.
    fn connected(&self, addr: SocketAddr) -> Option<ConnectionWatch> {
        let _ = addr;
        None
    }
}

/// What an [`AddressPolicy`] keeps with a connection's socket: dropped when it closes.
pub type ConnectionWatch = Box<dyn fmt::Debug + Send + Sync>;

/// How the HTTP client connects and how many lanes it offers.
#[derive(Debug, Clone)]
pub struct HttpClientConfig {
    /// Protocol to speak. Default [`HttpVersion::Http1`]: on long lossy paths several TCP
    /// connections, each with its own congestion window, recover from loss faster than the
    /// one connection HTTP/2 shares among its streams. [`HttpVersion::Auto`] lets ALPN decide
    /// over TLS (plain TCP is then HTTP/1.1).
    pub version: HttpVersion,
    /// Lanes as M connections × K streams. HTTP/1.1: one lane per connection, K ignored,
    /// default M = 8 (on a lossy long path several independent congestion windows recover
    /// faster than one; each costs a handshake and a socket buffer), 1 to 1024. HTTP/2:
    /// default 1 × 8, M 1 to 256, K 1 to 1024.
    pub lanes: LaneLayout,
    /// HTTP/2 settings.
    pub http2: Http2Config,
    /// HTTP/2 with the default number of connections (`lanes.connections` not set): once the
    /// connection in use has seen loss twice (packets arriving after a hole, at least four
    /// round trips apart), later requests spread the lanes evenly over this many connections,
    /// each with its own receive buffer and loss recovery. 1 turns it off; a `connections`
    /// given by hand is kept as it is. Default 8 (1 to 256), one per lane of the default
    /// layout: measured at 1 Gbit/s, 100 ms, 0.01% loss, 8 came level with HTTP/1.1 x 8
    /// where 4 stayed 5-7 % behind (docs/results.md, "HTTP/2 under loss").
    pub h2_loss_connections: usize,
    /// A file where the client remembers, per peer (`host:port`), whether its last transfer
    /// there lost packets, for a day. HTTP/2 with the default number of connections then
    /// starts spread over [`Self::h2_loss_connections`] instead of finding the loss again on
    /// one connection. A transfer's verdict is lossy when it saw two loss episodes or more
    /// after its start-up, one every 5 s or more often; clean when not, over at least 5 s
    /// after its start-up and 256 MiB; a shorter one leaves the last verdict standing.
    /// Default none (nothing kept); `xfer` keeps `$XDG_CACHE_HOME/xfer/paths`.
    pub path_memory: Option<std::path::PathBuf>,
    /// Socket options for every connection (client defaults: autotuned buffers, `bbr`).
    pub tcp: TcpConfig,
    /// Which CAs to trust for `https://`.
    pub tls: ClientTlsOptions,
    /// TLS 1.3 early data (0-RTT): a connection that resumes a session whose ticket allows it
    /// sends its first request with the ClientHello, one round trip sooner. Only reads (`GET`,
    /// `HEAD`) go early, since early data can be replayed; other requests on such a connection
    /// wait for its handshake. Not used with [`HttpVersion::Auto`] (the request would be
    /// written before ALPN picks the protocol). Default on.
    pub early_data: bool,
    /// Deadline for TCP connect plus TLS handshake, per attempt. Default 10 s; must be
    /// 1 ms to 10 min.
    pub connect_timeout: Duration,
    /// A request that receives no byte for this long fails with a timeout (waiting for the
    /// response head, or between body reads). Default 30 s: far above any RTT, short enough
    /// that a stalled connection is replaced quickly. 1 ms to 1 h.
    pub idle_timeout: Duration,
    /// Redirects followed per request before giving up (0 to 50). Default 10.
    pub max_redirects: usize,
    /// `User-Agent` header value. Default `xfer/<version>`.
    pub user_agent: String,
    /// Bearer token sent as `Authorization` to the origin of the URL given (never to another
    /// origin a redirect points at). Default none.
    pub token: Option<Secret>,
    /// More header fields for every request to the origin of the URL given (never to another
    /// origin a redirect points at), e.g. what a third-party copy was asked to pass on. Values
    /// are treated as secrets: kept out of logs and of HTTP/2 header compression. Default none.
    pub extra_headers: Vec<(String, Secret)>,
    /// Addresses connections may go to. Default none: any.
    pub address_policy: Option<Arc<dyn AddressPolicy>>,
}

impl Default for HttpClientConfig {
    fn default() -> Self {
        Self {
            version: HttpVersion::Http1,
            lanes: LaneLayout::default(),
            http2: Http2Config::default(),
            h2_loss_connections: 8,
            path_memory: None,
            tcp: TcpConfig::default(),
            tls: ClientTlsOptions::default(),
            early_data: true,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_redirects: 10,
            user_agent: concat!("xfer/", env!("CARGO_PKG_VERSION")).to_string(),
            token: None,
            extra_headers: Vec::new(),
            address_policy: None,
        }
    }
}

impl HttpClientConfig {
    /// Whether any request may go as TLS early data: asked for, and the protocol known
    /// before the handshake ends.
    pub(crate) fn early_data_possible(&self) -> bool {
        self.early_data && self.version != HttpVersion::Auto
    }

    /// Connections HTTP/2 may spread over once loss is seen: [`Self::h2_loss_connections`]
    /// with the default layout, else the layout's own (no spreading).
    pub(crate) fn h2_loss_target(&self) -> usize {
        use crate::client::transport::Mode;
        let configured = self.layout(Mode::H2).connections;
        match self.lanes.connections {
            None => configured.max(self.h2_loss_connections),
            Some(_) => configured,
        }
    }

    /// The layout for the protocol in use, defaults filled in.
    pub(crate) fn layout(&self, mode: crate::client::transport::Mode) -> Lanes {
        use crate::client::transport::Mode;
        match mode {
            Mode::H1 => Lanes::new(self.lanes.connections.unwrap_or(8), 1),
            Mode::H2 => self.lanes.resolve(Lanes::new(1, 8)),
        }
    }

    /// Reject values the client cannot work with, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let max_connections = if self.version == HttpVersion::Http2 {
            256
        } else {
            1024
        };
        self.lanes.validate(
            max_connections,
            1024,
            "1 to 1024 (HTTP/1.1) or 1 to 256 (HTTP/2)",
            "1 to 1024",
        )?;
        self.http2.validate()?;
        if !(1..=256).contains(&self.h2_loss_connections) {
            return Err(ConfigError::new(
                "h2_loss_connections",
                self.h2_loss_connections,
                "1 to 256",
            ));
        }
        if let Some(Err(why)) = self.token.as_ref().map(Secret::check_bearer) {
            return Err(ConfigError::new("token", "(not shown)", why));
        }
        for (name, value) in &self.extra_headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err()
                || http::HeaderValue::from_str(value.expose()).is_err()
            {
                return Err(ConfigError::new(
                    "extra_headers",
                    name,
                    "header field names and visible-ASCII values",
                ));
            }
        }
        self.tcp.validate()?;
        if !(Duration::from_millis(1)..=Duration::from_secs(600)).contains(&self.connect_timeout) {
            return Err(ConfigError::new(
                "connect_timeout",
                format!("{:?}", self.connect_timeout),
                "1 ms to 10 min",
            ));
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(3600)).contains(&self.idle_timeout) {
            return Err(ConfigError::new(
                "idle_timeout",
                format!("{:?}", self.idle_timeout),
                "1 ms to 1 h",
            ));
        }
        if self.max_redirects > 50 {
            return Err(ConfigError::new(
                "max_redirects",
                self.max_redirects,
                "0 to 50",
            ));
        }
        if self.user_agent.is_empty() || http::HeaderValue::from_str(&self.user_agent).is_err() {
            return Err(ConfigError::new(
                "user_agent",
                format!("{:?}", self.user_agent),
                "a non-empty header value (visible ASCII)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_values_are_named() {
        assert_eq!(HttpClientConfig::default().validate(), Ok(()));
        let bad = HttpClientConfig {
            lanes: LaneLayout {
                connections: Some(0),
                streams_per_connection: None,
            },
            ..HttpClientConfig::default()
        };
        assert_eq!(bad.validate().map_err(|e| e.field), Err("connections"));
        let bad = HttpClientConfig {
            idle_timeout: Duration::ZERO,
            ..HttpClientConfig::default()
        };
        assert_eq!(bad.validate().map_err(|e| e.field), Err("idle_timeout"));
        let bad = HttpClientConfig {
            user_agent: "a\nb".into(),
            ..HttpClientConfig::default()
        };
        assert_eq!(bad.validate().map_err(|e| e.field), Err("user_agent"));
    }
}
