//! Reads this host's network settings from procfs and `ip route`. Inside a network namespace
//! (`ip netns exec`, `xfer lab`) these are the namespace's own values.

use std::net::IpAddr;
use std::process::Command;

use super::facts::HostFacts;

fn sysctl(key: &str) -> Option<String> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn triple(key: &str) -> Option<[u64; 3]> {
    let v: Vec<u64> = sysctl(key)?
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    v.try_into().ok()
}

fn words(key: &str) -> Vec<String> {
    sysctl(key)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Everything but the route; see [`route`].
pub fn host_facts(dest: Option<IpAddr>) -> HostFacts {
    let (route_dev, route_mtu) = route(dest);
    HostFacts {
        tcp_rmem: triple("net.ipv4.tcp_rmem"),
        tcp_wmem: triple("net.ipv4.tcp_wmem"),
        rmem_max: sysctl("net.core.rmem_max").and_then(|s| s.parse().ok()),
        wmem_max: sysctl("net.core.wmem_max").and_then(|s| s.parse().ok()),
        tcp_adv_win_scale: sysctl("net.ipv4.tcp_adv_win_scale").and_then(|s| s.parse().ok()),
        congestion_default: sysctl("net.ipv4.tcp_congestion_control"),
        congestion_available: words("net.ipv4.tcp_available_congestion_control"),
        congestion_allowed: words("net.ipv4.tcp_allowed_congestion_control"),
        default_qdisc: sysctl("net.core.default_qdisc"),
        route_dev,
        route_mtu,
        can_force_buffers: can_force_buffers(),
        tcp_fastopen: sysctl("net.ipv4.tcp_fastopen").and_then(|s| s.parse().ok()),
        recv_head_start: xfer::crates::http::tcp::recv_head_start(&xfer::TcpConfig::default()),
    }
}

/// Root, or `CAP_NET_ADMIN` (bit 12) in the effective set.
fn can_force_buffers() -> bool {
    if crate::sys::is_root() {
        return true;
    }
    const CAP_NET_ADMIN: u32 = 12;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_NET_ADMIN) != 0)
}

/// The interface and MTU of the route to `dest` (the default route without one), from
/// `ip route get`; the MTU is the route's own when set, else the interface's.
fn route(dest: Option<IpAddr>) -> (Option<String>, Option<u32>) {
    let target = dest.map_or_else(|| "1.1.1.1".to_string(), |a| a.to_string());
    let out = Command::new("ip").args(["route", "get", &target]).output();
    let Ok(out) = out else {
        return (None, None);
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let (dev, mtu) = parse_route(&text);
    let mtu = mtu.or_else(|| {
        let dev = dev.as_deref()?;
        std::fs::read_to_string(format!("/sys/class/net/{dev}/mtu"))
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    (dev, mtu)
}

/// `dev` and `mtu` from one `ip route get` line.
fn parse_route(text: &str) -> (Option<String>, Option<u32>) {
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let after = |key: &str| {
        tokens
            .windows(2)
            .find(|w| w[0] == key)
            .map(|w| w[1].to_string())
    };
    let mtu = after("mtu").and_then(|m| m.parse().ok()).or_else(|| {
        // `mtu lock 1400`
        tokens
            .windows(3)
            .find(|w| w[0] == "mtu" && w[1] == "lock")
            .and_then(|w| w[2].parse().ok())
    });
    (after("dev"), mtu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_lines() {
        assert_eq!(
            parse_route("10.0.0.2 dev tun0 src 10.0.0.1 uid 0 \n    cache mtu 1400 \n"),
            (Some("tun0".into()), Some(1400))
        );
        assert_eq!(
            parse_route("1.1.1.1 via 192.168.1.1 dev eth0 src 192.168.1.5 uid 1000"),
            (Some("eth0".into()), None)
        );
        assert_eq!(
            parse_route("10.0.0.2 dev wg0 src 10.0.0.1 mtu lock 1380"),
            (Some("wg0".into()), Some(1380))
        );
        assert_eq!(parse_route(""), (None, None));
    }
}
