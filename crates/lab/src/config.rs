//! What a lab emulates: the link in each direction ([`LinkConfig`]), the TCP/IP settings of the
//! two emulated hosts ([`HostProfile`]) and the lab as a whole ([`LabConfig`]).
//!
//! Values are checked once, by [`LabConfig::validate`] (which [`crate::Lab::start`] calls); an
//! error names the field, the value and the allowed range.

use std::time::Duration;

use crate::error::LabError;

/// Largest IP packet the emulated link carries (the MTU of both TUN devices), in bytes.
pub const LINK_MTU: u64 = 1500;

/// One direction of the emulated link. The defaults describe the design point of xfer: a
/// 1 Gbit/s path 100 ms long (BDP 12.5 MB), no loss, no jitter.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Bottleneck rate in bits per second of IP packets (no Ethernet framing). Default
    /// 1 Gbit/s. Allowed 8 kbit/s ..= 100 Gbit/s; the relay itself tops out well below the upper
    /// bound, so fast settings measure the relay, not the link.
    pub rate_bps: u64,
    /// Round-trip propagation delay; each direction delays packets by `rtt / 2` on top of
    /// queueing and serialization. Default 100 ms. Allowed 0 ..= 10 s. With an asymmetric
    /// [`LabConfig::client_to_server`] the path RTT is the sum of the two halves.
    pub rtt: Duration,
    /// Drop-tail bottleneck queue in bytes. `None` (default) means one bandwidth-delay product,
    /// `rate_bps * rtt / 8`, but at least two full packets (3000 bytes). Larger queues absorb
    /// bursts at the cost of bufferbloat (queueing delay up to `queue_bytes * 8 / rate_bps`).
    /// Allowed `LINK_MTU` ..= 4 GiB.
    pub queue_bytes: Option<u64>,
    /// Probability that a packet is lost on the wire after leaving the bottleneck, independent
    /// per packet. Default 0. Allowed 0.0 ..= 1.0.
    pub loss: f64,
    /// Extra one-way delay drawn uniformly from `0 ..= jitter` per packet; delivery times never
    /// go backwards, so jitter never reorders (a packet behind a delayed one is delayed too, so
    /// the mean extra delay exceeds `jitter / 2`). Default 0. Allowed 0 ..= 1 s.
    pub jitter: Duration,
    /// Seed of the loss and jitter random number generator, so runs are repeatable. Default 1.
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            rate_bps: 1_000_000_000,
            rtt: Duration::from_millis(100),
            queue_bytes: None,
            loss: 0.0,
            jitter: Duration::ZERO,
            seed: 1,
        }
    }
}

impl LinkConfig {
    /// A loss-free link of `rate_bps` and `rtt` with the default (one BDP) queue.
    pub fn new(rate_bps: u64, rtt: Duration) -> Self {
        Self {
            rate_bps,
            rtt,
            ..Self::default()
        }
    }

    /// The bottleneck queue in bytes actually used: the configured one or one BDP.
    pub fn effective_queue_bytes(&self) -> u64 {
        self.queue_bytes.unwrap_or_else(|| {
            let bdp = (self.rate_bps as u128 * self.rtt.as_nanos() / 8 / 1_000_000_000) as u64;
            bdp.max(2 * LINK_MTU)
        })
    }

    /// Checks every field against its documented range.
    pub fn validate(&self) -> Result<(), LabError> {
        if !(8_000..=100_000_000_000).contains(&self.rate_bps) {
            return Err(invalid(
                "rate_bps",
                self.rate_bps,
                "8000 ..= 100000000000 bits per second",
            ));
        }
        if self.rtt > Duration::from_secs(10) {
            return Err(invalid("rtt", format!("{:?}", self.rtt), "0 ..= 10 s"));
        }
        if let Some(q) = self.queue_bytes {
            if !(LINK_MTU..=4 << 30).contains(&q) {
                return Err(invalid("queue_bytes", q, "1500 ..= 4294967296 bytes"));
            }
        }
        if !(0.0..=1.0).contains(&self.loss) {
            return Err(invalid("loss", self.loss, "0.0 ..= 1.0"));
        }
        if self.jitter > Duration::from_secs(1) {
            return Err(invalid("jitter", format!("{:?}", self.jitter), "0 ..= 1 s"));
        }
        Ok(())
    }
}

/// TCP/IP settings applied inside both namespaces, so the emulated hosts can be "as shipped" or
/// "tuned for long fat networks".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostProfile {
    /// Short name used in reports, e.g. `stock` or `tuned`.
    pub name: String,
    /// `(key, value)` pairs in `sysctl` dotted form, written inside each namespace. Only
    /// network-namespaced keys (`net.*`) are accepted, so a profile can never change the host.
    pub sysctls: Vec<(String, String)>,
    /// Root qdisc put on each TUN device (`tc qdisc replace ... root <qdisc>`), e.g. `fq` for
    /// pacing; `None` keeps the kernel default. Stands in for `net.core.default_qdisc`, which is
    /// not per-namespace.
    pub qdisc: Option<String>,
}

impl HostProfile {
    /// Kernel defaults: nothing is changed. What is in force is recorded at start
    /// ([`crate::Lab::settings_in_force`]).
    pub fn stock() -> Self {
        Self {
            name: "stock".into(),
            sysctls: Vec::new(),
            qdisc: None,
        }
    }

    /// Buffers raised for a 1 Gbit/s x 300 ms path (BDP 37.5 MB; 64 MiB leaves room for the
    /// receive-window overhead), fq pacing on the devices, and TCP Fast Open for servers too.
    pub fn tuned() -> Self {
        const MAX: &str = "67108864";
        let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
        Self {
            name: "tuned".into(),
            sysctls: vec![
                kv("net.core.rmem_max", MAX),
                kv("net.core.wmem_max", MAX),
                kv("net.ipv4.tcp_rmem", "4096 131072 67108864"),
                kv("net.ipv4.tcp_wmem", "4096 16384 67108864"),
                // Cached metrics from an earlier run would make runs depend on their order.
                kv("net.ipv4.tcp_no_metrics_save", "1"),
                // TCP Fast Open as client (0x1, the kernel default) and server (0x2).
                kv("net.ipv4.tcp_fastopen", "3"),
            ],
            qdisc: Some("fq".into()),
        }
    }

    fn validate(&self) -> Result<(), LabError> {
        for (key, value) in &self.sysctls {
            let ok_chars = key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-');
            if !key.starts_with("net.") || !ok_chars || key.contains("..") {
                return Err(invalid(
                    "profile.sysctls key",
                    key,
                    "a network-namespaced key such as net.ipv4.tcp_rmem",
                ));
            }
            if value.contains('\n') {
                return Err(invalid("profile.sysctls value", value, "a single line"));
            }
        }
        if let Some(q) = &self.qdisc {
            if q.is_empty() || !q.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(invalid("profile.qdisc", q, "a qdisc name such as fq"));
            }
        }
        Ok(())
    }
}

/// Everything [`crate::Lab::start`] needs.
#[derive(Debug, Clone, PartialEq)]
pub struct LabConfig {
    /// Names the namespaces `<prefix>-srv` and `<prefix>-cli`. Default `xferlab`. Labs that run
    /// at the same time need distinct prefixes. Allowed: 1 ..= 32 of `[A-Za-z0-9_-]`.
    pub prefix: String,
    /// The link from the server to the client (the download direction), and also from the
    /// client to the server unless `client_to_server` is set.
    pub link: LinkConfig,
    /// The client-to-server direction when it differs (asymmetric links). Default `None`: the
    /// same as `link`, with its own random stream.
    pub client_to_server: Option<LinkConfig>,
    /// Host settings applied in both namespaces. Default [`HostProfile::stock`].
    pub profile: HostProfile,
    /// Let the kernel hand the relay TCP segmentation-offload super-packets (up to 64 KiB)
    /// instead of MTU packets. Default true: about 40x fewer packets through the relay, with
    /// rate, queue and loss still applied per MTU-sized wire packet (see docs/lab.md). False
    /// gives a plain one-packet-per-read relay, which is simpler but needs far more CPU above a
    /// few hundred Mbit/s.
    pub offload: bool,
    /// Run the relay thread with a low real-time priority (SCHED_FIFO 10), so its timer
    /// wake-ups are not delayed behind other work on a busy machine. Default true. The relay
    /// sleeps between packets and the kernel throttles real-time threads that never sleep, so
    /// the rest of the machine keeps running; false keeps normal scheduling (timing then
    /// degrades with load).
    pub realtime: bool,
    /// Remove the namespaces when the process gets SIGINT or SIGTERM (the previous handler, if
    /// any, still runs afterwards; with none the process then dies as it would have). Default
    /// true. Turn off in programs that handle these signals and keep running.
    pub cleanup_on_signal: bool,
}

impl Default for LabConfig {
    fn default() -> Self {
        Self {
            prefix: "xferlab".into(),
            link: LinkConfig::default(),
            client_to_server: None,
            profile: HostProfile::stock(),
            offload: true,
            realtime: true,
            cleanup_on_signal: true,
        }
    }
}

impl LabConfig {
    /// A lab with `prefix` and the same `link` both ways, stock hosts.
    pub fn new(prefix: impl Into<String>, link: LinkConfig) -> Self {
        Self {
            prefix: prefix.into(),
            link,
            ..Self::default()
        }
    }

    /// Checks the prefix, both links and the profile.
    pub fn validate(&self) -> Result<(), LabError> {
        let p = &self.prefix;
        if p.is_empty()
            || p.len() > 32
            || !p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(invalid("prefix", p, "1 ..= 32 characters of [A-Za-z0-9_-]"));
        }
        self.link.validate()?;
        if let Some(c2s) = &self.client_to_server {
            c2s.validate()?;
        }
        self.profile.validate()
    }

    /// The link configuration of the client-to-server direction.
    pub fn client_to_server_link(&self) -> LinkConfig {
        self.client_to_server.clone().unwrap_or_else(|| LinkConfig {
            // An independent stream, so both directions do not lose the same packet numbers.
            seed: self.link.seed ^ 0x9e37_79b9_7f4a_7c15,
            ..self.link.clone()
        })
    }
}

fn invalid(field: &'static str, value: impl ToString, allowed: &'static str) -> LabError {
    LabError::InvalidConfig {
        field,
        value: value.to_string(),
        allowed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_queue_is_one_bdp() {
        let l = LinkConfig::new(1_000_000_000, Duration::from_millis(100));
        assert_eq!(l.effective_queue_bytes(), 12_500_000);
        let tiny = LinkConfig::new(8_000, Duration::ZERO);
        assert_eq!(tiny.effective_queue_bytes(), 3000);
    }

    #[test]
    fn bad_values_name_the_field() {
        let mut c = LabConfig::default();
        c.link.loss = 1.5;
        let e = c
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("loss = 1.5"), "{e}");
        let c = LabConfig {
            prefix: "a b".into(),
            ..LabConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(LabError::InvalidConfig {
                field: "prefix",
                ..
            })
        ));
        let mut c = LabConfig::default();
        c.profile.sysctls.push(("kernel.panic".into(), "1".into()));
        assert!(matches!(
            c.validate(),
            Err(LabError::InvalidConfig {
                field: "profile.sysctls key",
                ..
            })
        ));
        assert!(LabConfig {
            profile: HostProfile::tuned(),
            ..LabConfig::default()
        }
        .validate()
        .is_ok());
    }
}
