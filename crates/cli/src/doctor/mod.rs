//! `xfer doctor [URL]`: what limits this host on this path, and the settings that lift it.
//!
//! ```text
//!   host::host_facts ─┐
//!   probe::probe_path ├─> Facts ──analysis::analyse──> Verdict ──> text or --json, exit 0 / 6
//!   probe::measure ───┘
//! ```
//!
//! The probing touches the network and the host; the analysis is a pure function of what the
//! probes found (see `analysis.rs` for the model and its tests).

mod analysis;
mod facts;
mod host;
mod probe;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use serde::Serialize;
use xfer::{format_bps, HumanBytes};

use crate::client_args::{size_arg, ClientArgs};
use crate::exit::{self, UsageError};
use analysis::{Severity, Targets, Verdict};
use facts::Facts;
use probe::ProbeConfig;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// A URL on the far end of the path to check; an xfer server also gets a short
    /// memory-to-memory transfer from /.xfer/synthetic. Without a URL only this host is checked,
    /// at an assumed RTT.
    pub url: Option<String>,
    /// The rate one connection should reach, bits per second (`1G`, `500M`); repeat for more
    /// bandwidth-delay-product lines. Default 1G and 10G; the first is checked.
    #[arg(long, value_parser = rate_arg, value_name = "BPS")]
    pub rate: Vec<f64>,
    /// RTT to assume when no URL is given, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = analysis::ASSUMED_RTT_MS)]
    pub rtt: f64,
    /// Most bytes each measured transfer moves.
    #[arg(long, value_parser = size_arg, default_value = "32MiB", value_name = "SIZE")]
    pub max_bytes: u64,
    /// Most seconds each measured transfer may take.
    #[arg(long, value_name = "SECS", default_value_t = 8.0)]
    pub max_seconds: f64,
    /// Measure RTT and MTU only: no transfer.
    #[arg(long)]
    pub no_transfer: bool,
    /// Print all facts and findings as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `1G`, `500M`, `2.5G`, plain bits per second; decimal prefixes, as link rates are named.
fn rate_arg(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches("bit/s").trim_end_matches("bps");
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        Some((i, 'g' | 'G')) => (&t[..i], 1e9),
        Some((i, 't' | 'T')) => (&t[..i], 1e12),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s} is not a rate such as 1G or 500M"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("{s}: a rate must be positive"));
    }
    Ok(v * mult)
}

#[derive(Serialize)]
struct Output<'a> {
    facts: &'a Facts,
    verdict: &'a Verdict,
    limited: bool,
}

pub async fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let client = args.client.to_config()?;
    if !(args.rtt.is_finite() && args.rtt > 0.0) {
        return Err(UsageError(format!("--rtt {}: must be positive", args.rtt)).into());
    }
    let transfer_timeout = Duration::try_from_secs_f64(args.max_seconds).map_err(|_| {
        UsageError(format!(
            "--max-seconds {} is not a duration",
            args.max_seconds
        ))
    })?;
    let cfg = ProbeConfig {
        transfer_bytes: args.max_bytes.max(1),
        transfer_timeout,
        ..ProbeConfig::default()
    };
    let mut facts = Facts::default();
    let mut dest_ip = None;
    if let Some(url) = &args.url {
        let (scheme, host, port) = probe::split_url(url)
            .ok_or_else(|| UsageError(format!("{url}: not an http://, https:// or quic:// URL")))?;
        if !matches!(scheme.as_str(), "http" | "https" | "quic") {
            return Err(
                UsageError(format!("{url}: scheme {scheme} is not http, https or quic")).into(),
            );
        }
        let addr = probe::resolve(&host, port).await;
        dest_ip = addr.map(|a| a.ip());
        facts.path = Some(probe::probe_path(&host, addr, scheme != "quic", &cfg).await);
        if !args.no_transfer {
            facts.transfers = transfers(url, &scheme, &client, &cfg).await;
        }
    }
    facts.host = host::host_facts(dest_ip);
    let targets = Targets {
        rates_bps: if args.rate.is_empty() {
            analysis::DEFAULT_RATES_BPS.to_vec()
        } else {
            args.rate.clone()
        },
        assumed_rtt_ms: args.rtt,
    };
    let verdict = analysis::analyse(&facts, &targets);
    if args.json {
        let out = Output {
            facts: &facts,
            verdict: &verdict,
            limited: verdict.is_limited(),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("serializing the doctor's report")?
        );
    } else {
        print!("{}", render(&facts, &verdict));
    }
    Ok(if verdict.is_limited() {
        ExitCode::from(exit::LIMITED)
    } else {
        ExitCode::SUCCESS
    })
}

/// The protocols to measure: the server's synthetic resource over the URL's own protocol, plus
/// QUIC on the same port for https:// (xfer serve answers both). Another server gets no
/// transfer: a whole download of an unknown file could write gigabytes before the time bound.
async fn transfers(
    url: &str,
    scheme: &str,
    client: &xfer::ClientConfig,
    cfg: &ProbeConfig,
) -> Vec<facts::TransferFacts> {
    let mut out = Vec::new();
    let Some(synthetic) = probe::synthetic_url(url, cfg.transfer_bytes) else {
        return out;
    };
    let mut first = probe::measure(&synthetic, scheme, client, cfg).await;
    let is_xfer = first.error.is_none();
    if let Some(e) = &mut first.error {
        *e = format!("{e} (no measured transfer unless the server is xfer serve)");
    }
    out.push(first);
    if is_xfer && scheme == "https" {
        let quic = format!("quic{}", &synthetic["https".len()..]);
        out.push(probe::measure(&quic, "quic", client, cfg).await);
    }
    out
}

fn render(facts: &Facts, v: &Verdict) -> String {
    let mut s = String::new();
    let h = &facts.host;
    let range = |r: Option<[u64; 3]>| {
        r.map_or("?".to_string(), |r| {
            format!("{} {} {}", r[0], r[1], HumanBytes(r[2]))
        })
    };
    let bytes = |b: Option<u64>| b.map_or("?".to_string(), |b| HumanBytes(b).to_string());
    s.push_str("host\n");
    s.push_str(&format!(
        "  tcp_rmem {} | tcp_wmem {} | rmem_max {} | wmem_max {}\n",
        range(h.tcp_rmem),
        range(h.tcp_wmem),
        bytes(h.rmem_max),
        bytes(h.wmem_max)
    ));
    s.push_str(&format!(
        "  congestion {} (available: {}; allowed: {}) | qdisc {}\n",
        h.congestion_default.as_deref().unwrap_or("?"),
        h.congestion_available.join(" "),
        h.congestion_allowed.join(" "),
        h.default_qdisc.as_deref().unwrap_or("?")
    ));
    s.push_str(&format!(
        "  route via {} mtu {} | may force buffers (root/CAP_NET_ADMIN): {}\n",
        h.route_dev.as_deref().unwrap_or("?"),
        h.route_mtu.map_or("?".into(), |m| m.to_string()),
        if h.can_force_buffers { "yes" } else { "no" }
    ));
    s.push_str(&format!(
        "  receive buffer a connection starts with: {}\n",
        h.recv_head_start.map_or_else(
            || "tcp_rmem's default (no head start: this kernel cannot unlock a set buffer)".into(),
            |b| format!("{} (head start, then autotuning)", HumanBytes(b)),
        )
    ));
    s.push_str(&format!(
        "  tcp_fastopen {}\n",
        match h.tcp_fastopen {
            None => "?".to_string(),
            Some(v) => format!(
                "{v} (client {}, server {})",
                if v & 1 != 0 { "on" } else { "off" },
                if v & 2 != 0 { "on" } else { "off" }
            ),
        }
    ));
    if let Some(p) = &facts.path {
        s.push_str(&format!(
            "path to {} ({})\n",
            p.host,
            p.addr.as_deref().unwrap_or("unresolved")
        ));
        let ms: Vec<String> = p.connect_ms.iter().map(|m| format!("{m:.1}")).collect();
        s.push_str(&format!(
            "  connect ms [{}] | kernel rtt {} | path mtu {}\n",
            ms.join(" "),
            p.tcp_rtt_ms.map_or("?".into(), |r| format!("{r:.1} ms")),
            p.path_mtu.map_or("?".into(), |m| m.to_string())
        ));
    }
    for t in &facts.transfers {
        match &t.error {
            Some(e) => s.push_str(&format!("transfer {}: failed: {e}\n", t.protocol)),
            None => {
                s.push_str(&format!(
                    "transfer {}: {} in {:.2} s, {}, {} lanes\n",
                    t.protocol,
                    HumanBytes(t.bytes),
                    t.seconds,
                    format_bps(t.goodput_bps),
                    t.lanes
                ));
                for c in &t.connections {
                    let opt = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
                    s.push_str(&format!(
                        "  conn {} {}: rtt {} us, cwnd {}, retransmits {}, sndbuf {}, rcvbuf {}\n",
                        c.index,
                        c.congestion.as_deref().unwrap_or("?"),
                        opt(c.rtt_us),
                        bytes(c.cwnd_bytes),
                        opt(c.retransmits),
                        bytes(c.send_buffer),
                        bytes(c.recv_buffer)
                    ));
                }
            }
        }
    }
    s.push_str(&format!(
        "verdict (RTT {:.1} ms, {})\n",
        v.rtt_ms, v.rtt_source
    ));
    for b in &v.bdp {
        s.push_str(&format!(
            "  bandwidth-delay product at {} ({}): {}\n",
            format_bps(b.rate_bps),
            b.source,
            HumanBytes(b.bytes)
        ));
    }
    if v.findings.is_empty() {
        s.push_str("  nothing on this host limits the path\n");
    }
    for f in &v.findings {
        let tag = match f.severity {
            Severity::Limit => "LIMIT",
            Severity::Advice => "advice",
        };
        s.push_str(&format!("  {tag}: {}\n", f.message));
    }
    s.push_str(&format!("  plan: {}\n", v.plan));
    if !v.sysctl_lines.is_empty() {
        s.push_str("to lift the limits now (as root):\n");
        for l in &v.sysctl_lines {
            s.push_str(&format!("  {l}\n"));
        }
        s.push_str("and to keep them across reboots:\n");
        for l in v.sysctl_d.lines() {
            s.push_str(&format!("  {l}\n"));
        }
    }
    for f in v.findings.iter().flat_map(|f| f.fix.iter()) {
        if !f.starts_with("sysctl ") {
            s.push_str(&format!("  also: {f}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(rate_arg("1G"), Ok(1e9));
        assert_eq!(rate_arg("500M"), Ok(5e8));
        assert_eq!(rate_arg("2.5Gbit/s"), Ok(2.5e9));
        assert_eq!(rate_arg("1000"), Ok(1000.0));
        assert!(rate_arg("fast").is_err());
        assert!(rate_arg("-1G").is_err());
    }
}
