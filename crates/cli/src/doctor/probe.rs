//! Measures the path to a URL: TCP connect times, the kernel's RTT and path MTU on a connected
//! socket, and one short bounded transfer per protocol (memory to memory against an xfer
//! server's synthetic resource, written to a temporary file and dropped).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use xfer::{ClientConfig, Download, GetConfig};

use super::facts::{PathFacts, TransferFacts};

/// Bounds of the probes.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    /// TCP connects to time.
    pub connects: usize,
    /// Bytes the measured transfer moves at most.
    pub transfer_bytes: u64,
    /// Time the measured transfer may take at most.
    pub transfer_timeout: Duration,
    pub connect_timeout: Duration,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            connects: 5,
            transfer_bytes: 32 << 20,
            transfer_timeout: Duration::from_secs(8),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Host, port and scheme of a URL, without a URL parser: `scheme://host[:port]/...`.
pub fn split_url(url: &str) -> Option<(String, String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let default_port = match scheme {
        "http" => 80,
        _ => 443,
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, tail) = v6.split_once(']')?;
        let port = match tail.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => default_port,
        };
        (h.to_string(), port)
    } else if let Some((h, p)) = authority.rsplit_once(':') {
        (h.to_string(), p.parse().ok()?)
    } else {
        (authority.to_string(), default_port)
    };
    (!host.is_empty()).then(|| (scheme.to_string(), host, port))
}

/// The same server's synthetic resource: `scheme://authority/.xfer/synthetic?size=N`.
pub fn synthetic_url(url: &str, bytes: u64) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    Some(format!(
        "{scheme}://{authority}/.xfer/synthetic?size={bytes}"
    ))
}

pub async fn resolve(host: &str, port: u16) -> Option<SocketAddr> {
    tokio::net::lookup_host((host, port)).await.ok()?.next()
}

/// Connect times, RTT and path MTU over TCP. A quic:// URL gets no TCP probes.
pub async fn probe_path(
    host: &str,
    addr: Option<SocketAddr>,
    tcp: bool,
    cfg: &ProbeConfig,
) -> PathFacts {
    let mut facts = PathFacts {
        host: host.to_string(),
        addr: addr.map(|a| a.to_string()),
        ..PathFacts::default()
    };
    let Some(addr) = addr.filter(|_| tcp) else {
        return facts;
    };
    for _ in 0..cfg.connects {
        let started = Instant::now();
        let conn =
            tokio::time::timeout(cfg.connect_timeout, tokio::net::TcpStream::connect(addr)).await;
        let elapsed = started.elapsed();
        match conn {
            Ok(Ok(stream)) => {
                facts.connect_ms.push(elapsed.as_secs_f64() * 1000.0);
                if let Some(info) = xfer::crates::http::tcp::tcp_info(&stream) {
                    facts.tcp_rtt_ms = Some(info.rtt_us as f64 / 1000.0);
                }
                facts.path_mtu = ip_mtu(&stream).or(facts.path_mtu);
            }
            Ok(Err(e)) => tracing::info!(%addr, error = %e, "probe connect failed"),
            Err(_) => tracing::info!(%addr, "probe connect timed out"),
        }
    }
    facts
}

/// `IP_MTU` / `IPV6_MTU` of a connected socket.
fn ip_mtu(stream: &tokio::net::TcpStream) -> Option<u32> {
    let v6 = stream.peer_addr().ok()?.is_ipv6();
    xfer::crates::common::path_mtu::route_mtu(stream, v6)
}

/// One bounded download of `url` into a temporary file, with the connection statistics.
pub async fn measure(
    url: &str,
    label: &str,
    client: &ClientConfig,
    cfg: &ProbeConfig,
) -> TransferFacts {
    let mut facts = TransferFacts {
        url: url.to_string(),
        protocol: label.to_string(),
        ..TransferFacts::default()
    };
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            facts.error = Some(format!("temporary directory: {e}"));
            return facts;
        }
    };
    let transport = match xfer::transport_for(url, client) {
        Ok(t) => t,
        Err(e) => {
            facts.error = Some(e.to_string());
            return facts;
        }
    };
    let config = GetConfig {
        chunk_size: (cfg.transfer_bytes / 8).max(1 << 20),
        ..GetConfig::default()
    };
    let download = Download::new(transport, url, dir.path().join("probe"), config);
    let run = tokio::time::timeout(
        cfg.transfer_timeout,
        download.run_until(std::future::pending::<()>()),
    );
    match run.await {
        Ok(Ok(report)) => {
            facts.protocol = format!("{label} ({})", report.protocol);
            facts.bytes = report.received_bytes;
            facts.seconds = report.seconds;
            facts.goodput_bps = report.goodput_bps;
            facts.lanes = report.lanes.len();
            facts.connections = report.connections;
        }
        Ok(Err(e)) => facts.error = Some(e.to_string()),
        Err(_) => {
            facts.error = Some(format!(
                "did not finish within {} s",
                cfg.transfer_timeout.as_secs()
            ))
        }
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split() {
        assert_eq!(
            split_url("http://10.0.0.2:8443/a/b?x"),
            Some(("http".into(), "10.0.0.2".into(), 8443))
        );
        assert_eq!(
            split_url("https://[::1]/f"),
            Some(("https".into(), "::1".into(), 443))
        );
        assert_eq!(
            split_url("quic://h"),
            Some(("quic".into(), "h".into(), 443))
        );
        assert_eq!(split_url("nonsense"), None);
        assert_eq!(
            synthetic_url("https://h:1/x/y?z", 5).as_deref(),
            Some("https://h:1/.xfer/synthetic?size=5")
        );
    }
}
