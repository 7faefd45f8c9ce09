//! Round trips to first byte over TCP + TLS 1.3 through an emulated link (10 ms), as
//! `xfer get --json` reports them per lane. The lanes after the first connect while the first
//! request is answered (before any session ticket exists, so their TLS handshakes are full);
//! on the tuned profile (`net.ipv4.tcp_fastopen = 3` in both namespaces) the kernel holds a
//! Fast Open cookie from an earlier run and every ClientHello rides in the SYN, which the
//! server takes (`TCP_INFO` says so): TCP costs 0 round trips there, 1 on a stock server or
//! with `--no-tcp-fastopen`. (TLS early data on later connections is tested on loopback in
//! the client suite: `early_data`.)
//!
//! Needs root, /dev/net/tun and iproute2. Without them the test prints why and passes, except
//! under CI=true, where it fails.

// Shared with the other lab tests; this one starts its own TLS server.
#[allow(dead_code)]
use crate::lab_support;

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use lab_support::{get_json, prerequisites, serve};
use xfer_lab::{cleanup, HostProfile, Lab, LabConfig, LinkConfig};

const PORT: u16 = 9451;
const SIZE: u64 = 16 << 20;

/// The round trips of every lane that reported some, first lane first, from one
/// `xfer get --json -c 4 EXTRA` of the synthetic resource.
fn lanes(
    lab: &Lab,
    addr: SocketAddr,
    certs: &Path,
    out: &Path,
    extra: &[&str],
) -> Vec<serde_json::Value> {
    let url = format!("https://{addr}/.xfer/synthetic?size={SIZE}&seed=3");
    let ca = certs.join("cert.pem");
    let mut args: Vec<&OsStr> = vec![url.as_ref(), "-o".as_ref(), out.as_os_str()];
    args.extend(["--ca-cert".as_ref(), ca.as_os_str()]);
    for a in ["--overwrite", "-c", "4", "--chunk-size", "1MiB"] {
        args.push(a.as_ref());
    }
    args.extend(extra.iter().map(|a| OsStr::new(*a)));
    let report = get_json(lab, &args);
    assert_eq!(report["size"].as_u64(), Some(SIZE));
    let lanes: Vec<serde_json::Value> = report["lanes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|l| l.get("round_trips").filter(|r| !r.is_null()).cloned())
        .collect();
    assert!(lanes.len() >= 3, "{extra:?}: lanes reported {lanes:?}");
    lanes
}

fn parts(rt: &serde_json::Value) -> (u64, u64, u64, &str) {
    (
        rt["tcp"].as_u64().unwrap_or(99),
        rt["handshake"].as_u64().unwrap_or(99),
        rt["requests"].as_u64().unwrap_or(99),
        rt["tls"].as_str().unwrap_or("?"),
    )
}

#[test]
fn fast_open_saves_the_tcp_round_trip_and_later_lanes_ask_before_the_first_answer() {
    if !prerequisites("TCP Fast Open lab test") {
        return;
    }
    for (profile, tcp) in [(HostProfile::tuned(), 0), (HostProfile::stock(), 1)] {
        let prefix = "xfertest-zr";
        let _ = cleanup(prefix);
        let name = profile.name.clone();
        let config = LabConfig {
            profile,
            ..LabConfig::new(
                prefix,
                LinkConfig::new(200_000_000, Duration::from_millis(10)),
            )
        };
        let lab = Lab::start(config).unwrap_or_else(|e| panic!("lab: {e}"));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let certs = dir.path().join("certs");
        let addr = SocketAddr::new(lab.server_addr(), PORT);
        let tls: [&OsStr; 4] = [
            "--self-signed".as_ref(),
            "--no-quic".as_ref(),
            "--cert-dir".as_ref(),
            certs.as_os_str(),
        ];
        let _server = serve(&lab, dir.path(), addr, &tls);
        let out = dir.path().join("out.bin");

        // The first run leaves a Fast Open cookie in the client namespace's kernel.
        lanes(&lab, addr, &certs, &out, &[]);
        for (i, rt) in lanes(&lab, addr, &certs, &out, &[]).iter().enumerate() {
            assert_eq!(parts(rt), (tcp, 1, 1, "full"), "{name}, lane {i}: {rt}");
            // Every lane asked for its chunk as soon as it was connected, the first answer
            // or not.
            assert_eq!(rt["preconnected"].as_bool(), Some(false), "{name}: {rt}");
        }
        for (i, rt) in lanes(&lab, addr, &certs, &out, &["--no-speculate"])
            .iter()
            .enumerate()
        {
            assert_eq!(parts(rt), (tcp, 1, 1, "full"), "{name}, lane {i}: {rt}");
            // Every lane but the first connected during the first request, and waited.
            assert_eq!(rt["preconnected"].as_bool(), Some(i > 0), "{name}: {rt}");
        }
        for rt in lanes(&lab, addr, &certs, &out, &["--no-tcp-fastopen"]) {
            assert_eq!(parts(&rt), (1, 1, 1, "full"), "{name}, no fast open: {rt}");
        }
    }
}
