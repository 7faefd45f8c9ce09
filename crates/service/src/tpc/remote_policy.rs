//! Which remotes a third-party copy may reach. A `COPY` makes the server open connections
//! to an address of the caller's choosing, from inside the server's network: without a
//! policy, a caller with write scope could have the server fetch from an internal service
//! (a metadata endpoint, an admin port) and store the answer where it can read it, and a
//! caller with read scope could push to one.
//!
//! The decision is made on the address a connection actually goes to, after name
//! resolution, and again for every redirect (each new origin is a new connection); the
//! client resolves once and connects to the address that passed, so a name cannot answer
//! differently between the check and the connect.
//!
//! Refused by default: loopback, link-local, private (RFC 1918, `fc00::/7`, the shared
//! `100.64.0.0/10`), unspecified, multicast, broadcast and reserved addresses, and any
//! address of this host (`--tpc-allow` lifts them for named hosts or networks). An IPv6
//! address that carries an IPv4 one (mapped `::ffff:0:0/96`, NAT64 `64:ff9b::/96`, 6to4
//! `2002::/16`) is judged by the IPv4 address it reaches.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// What the caller is told when a remote is refused: nothing about why.
pub const NOT_ALLOWED: &str = "the remote is not allowed by the server's copy policy";

/// A network in CIDR form (`10.0.0.0/8`, `fd00::/8`); a bare address is a network of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// The network of `addr` with `prefix` bits; host bits are cleared.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, String> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("prefix /{prefix} is longer than {max} bits"));
        }
        let addr = match addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask32(prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask128(prefix))),
        };
        Ok(Self { addr, prefix })
    }

    /// Whether `ip` is inside; an IPv4 network never holds an IPv6 address and the other
    /// way round (mapped addresses are unwrapped before they are judged).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                u32::from(ip) & mask32(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                u128::from(ip) & mask128(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl FromStr for IpNet {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or network"))?;
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .map_err(|_| format!("{s:?} has no usable prefix length"))?,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        Self::new(addr, prefix)
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// One `--tpc-allow` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowance {
    /// A host name as it appears in the remote URL (any case, no trailing dot): every address
    /// it resolves to.
    Host(String),
    /// Every address in a network.
    Net(IpNet),
}

impl FromStr for Allowance {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(Self::Net(net));
        }
        if s.contains('/') || s.contains(':') {
            // Meant as a network or an address, and malformed: say so rather than take it
            // for a name that never matches.
            return s.parse::<IpNet>().map(Self::Net);
        }
        let name = s.trim_end_matches('.').to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(format!(
                "{s:?} is neither a host name nor an IP network (CIDR)"
            ));
        }
        Ok(Self::Host(name))
    }
}

impl fmt::Display for Allowance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Host(h) => f.write_str(h),
            Self::Net(n) => n.fmt(f),
        }
    }
}

/// Why an address was refused, for the server's log (never for the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Loopback, private, link-local, shared, unspecified, multicast, broadcast or reserved.
    Internal,
    /// An address of this host.
    OwnAddress,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Internal => "an internal, private or special-purpose address",
            Self::OwnAddress => "an address of this host",
        })
    }
}

/// The remotes third-party copy may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePolicy {
    /// Hosts and networks allowed whatever the defaults refuse (`--tpc-allow`).
    pub allow: Vec<Allowance>,
    /// Refuse the addresses of this host: any address a socket here can bind to (which
    /// covers the listen addresses, also when listening on `[::]`). Default on.
    pub refuse_own_addresses: bool,
}

impl Default for RemotePolicy {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            refuse_own_addresses: true,
        }
    }
}

impl RemotePolicy {
    /// The default policy with `allow` on top.
    pub fn allowing(allow: impl IntoIterator<Item = Allowance>) -> Self {
        Self {
            allow: allow.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Whether the remote named `host` in its URL may be reached at `ip`.
    pub fn check(&self, host: &str, ip: IpAddr) -> Result<(), Refused> {
        let ip = unwrap_v4(ip);
        let name = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_end_matches('.');
        let allowed = self.allow.iter().any(|a| match a {
            Allowance::Host(h) => h.eq_ignore_ascii_case(name),
            Allowance::Net(n) => n.contains(ip),
        });
        if allowed {
            return Ok(());
        }
        if is_internal(ip) {
            return Err(Refused::Internal);
        }
        if self.refuse_own_addresses && is_own_address(ip) {
            return Err(Refused::OwnAddress);
        }
        Ok(())
    }

    /// The check for a URL whose host is an IP literal, which needs no resolution and can be
    /// answered before the copy starts; `None` for a name.
    pub fn check_literal(&self, host: &str) -> Option<Result<(), Refused>> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let ip: IpAddr = bare.parse().ok()?;
        Some(self.check(host, ip))
    }
}

/// The IPv4 address an IPv6 one reaches, when it carries one (mapped, NAT64, 6to4).
fn unwrap_v4(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let bits = u128::from(v6);
    let nat64 = 0x0064_ff9b_u128 << 96;
    if bits >> 32 == nat64 >> 32 {
        return IpAddr::V4(Ipv4Addr::from(bits as u32));
    }
    if v6.segments()[0] == 0x2002 {
        return IpAddr::V4(Ipv4Addr::from((bits >> 80) as u32));
    }
    ip
}

/// Loopback, private, link-local, shared, unspecified, multicast, broadcast, reserved.
fn is_internal(ip: IpAddr) -> bool {
    const V4: &[(Ipv4Addr, u8)] = &[
        (Ipv4Addr::new(0, 0, 0, 0), 8),      // "this network", unspecified
        (Ipv4Addr::new(10, 0, 0, 0), 8),     // RFC 1918
        (Ipv4Addr::new(100, 64, 0, 0), 10),  // shared address space (carrier NAT)
        (Ipv4Addr::new(127, 0, 0, 0), 8),    // loopback
        (Ipv4Addr::new(169, 254, 0, 0), 16), // link-local (cloud metadata lives here)
        (Ipv4Addr::new(172, 16, 0, 0), 12),  // RFC 1918
        (Ipv4Addr::new(192, 0, 0, 0), 24),   // IETF protocol assignments
        (Ipv4Addr::new(192, 168, 0, 0), 16), // RFC 1918
        (Ipv4Addr::new(198, 18, 0, 0), 15),  // benchmarking
        (Ipv4Addr::new(224, 0, 0, 0), 4),    // multicast
        (Ipv4Addr::new(240, 0, 0, 0), 4),    // reserved, and broadcast
    ];
    const V6: &[(Ipv6Addr, u8)] = &[
        (Ipv6Addr::UNSPECIFIED, 128),
        (Ipv6Addr::LOCALHOST, 128),
        (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7), // unique local
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), // link-local
        (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10), // site-local (deprecated)
        (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8), // multicast
        (Ipv6Addr::new(0x0100, 0, 0, 0, 0, 0, 0, 0), 64), // discard-only
    ];
    let inside = |net: IpAddr, prefix: u8| IpNet::new(net, prefix).is_ok_and(|n| n.contains(ip));
    match ip {
        IpAddr::V4(_) => V4.iter().any(|&(a, p)| inside(IpAddr::V4(a), p)),
        IpAddr::V6(_) => V6.iter().any(|&(a, p)| inside(IpAddr::V6(a), p)),
    }
}

/// Whether `ip` belongs to this host: a socket can be bound to it only then (a host with
/// `ip_nonlocal_bind` set would count every address as its own and refuse everything not
/// allowed by name or network). Asked at each connection, so addresses added later count.
fn is_own_address(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind((ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    fn pure() -> RemotePolicy {
        RemotePolicy {
            refuse_own_addresses: false,
            ..RemotePolicy::default()
        }
    }

    #[test]
    fn internal_addresses_are_refused_by_default() {
        let p = pure();
        for a in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.254",
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fe80::1",
            "fd00::1",
            "fc00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:0001::1",
        ] {
            assert_eq!(p.check("h", ip(a)), Err(Refused::Internal), "{a}");
        }
        for a in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "192.169.0.1",
            "2001:4860::8888",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(p.check("h", ip(a)), Ok(()), "{a}");
        }
    }

    #[test]
    fn allowances_by_network_and_by_name() {
        let p = RemotePolicy {
            allow: vec![
                "127.0.0.0/8".parse().expect("net"),
                "fd00::/8".parse().expect("net"),
                "Storage.Example.ORG.".parse().expect("host"),
                "10.0.0.7".parse().expect("address"),
            ],
            refuse_own_addresses: false,
        };
        assert_eq!(p.check("x", ip("127.0.0.1")), Ok(()));
        assert_eq!(p.check("x", ip("::ffff:127.0.0.2")), Ok(()));
        assert_eq!(p.check("x", ip("fd12::1")), Ok(()));
        assert_eq!(p.check("x", ip("10.0.0.7")), Ok(()));
        assert_eq!(p.check("x", ip("10.0.0.8")), Err(Refused::Internal));
        assert_eq!(p.check("x", ip("::1")), Err(Refused::Internal));
        assert_eq!(p.check("storage.example.org", ip("10.9.9.9")), Ok(()));
        assert_eq!(p.check("STORAGE.example.org.", ip("10.9.9.9")), Ok(()));
        assert_eq!(
            p.check("other.example.org", ip("10.9.9.9")),
            Err(Refused::Internal)
        );
    }

    #[test]
    fn allowances_parse_or_name_the_problem() {
        assert_eq!(
            "10.1.2.3/8".parse::<Allowance>(),
            Ok(Allowance::Net(IpNet::new(ip("10.0.0.0"), 8).expect("net")))
        );
        assert_eq!(
            "[::1]".parse::<Allowance>().map(|a| a.to_string()),
            Ok("::1/128".to_string())
        );
        for bad in [
            "10.0.0.0/33",
            "::1/129",
            "10.0.0/8",
            "a b",
            "",
            "-x.org",
            "x..org",
        ] {
            assert!(bad.parse::<Allowance>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "0.0.0.0/0"
                .parse::<IpNet>()
                .map(|n| n.contains(ip("8.8.8.8"))),
            Ok(true)
        );
    }

    #[test]
    fn literals_are_judged_before_any_lookup() {
        let p = pure();
        assert_eq!(p.check_literal("127.0.0.1"), Some(Err(Refused::Internal)));
        assert_eq!(p.check_literal("[::1]"), Some(Err(Refused::Internal)));
        assert_eq!(p.check_literal("example.org"), None);
    }

    #[test]
    fn this_hosts_addresses_are_refused() {
        // Loopback is always this host's; allowed as a network, the own-address rule does
        // not take it back.
        let own = RemotePolicy::default();
        assert!(is_own_address(ip("127.0.0.1")));
        assert!(!is_own_address(ip("192.0.2.1")), "TEST-NET-1 is nobody's");
        let allowed = RemotePolicy::allowing(["127.0.0.0/8".parse().expect("net")]);
        assert_eq!(allowed.check("h", ip("127.0.0.1")), Ok(()));
        assert_eq!(own.check("h", ip("192.0.2.1")), Ok(()));
    }
}
