//! Round trips to first byte over TCP + TLS 1.3 through an emulated link (10 ms), as
//! `xfer get --json` reports them per lane: the lanes after the first connect once the first
//! answer has brought session tickets, so they send their first GET as TLS early data; on
//! the tuned profile (`net.ipv4.tcp_fastopen = 3` in both namespaces) the kernel holds a Fast
//! Open cookie from the first connection and the ClientHello rides in the SYN, which the
//! server takes (`TCP_INFO` says so). A lane then waits 1 round trip; 2 on a stock server
//! (no Fast Open), 3 with both turned off.
//!
//! Needs root, /dev/net/tun and iproute2. Without them the test prints why and passes, except
//! under CI=true, where it fails.

// Shared with the other lab tests; this one starts its own TLS server.
#[allow(dead_code)]
mod lab_support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use lab_support::{prerequisites, wait_for_listener, Server};
use xfer_lab::{cleanup, HostProfile, Lab, LabConfig, LinkConfig};

const PORT: u16 = 9451;
const SIZE: u64 = 16 << 20;

/// `xfer serve --self-signed` in the server namespace, certificate in `certs`.
fn serve_tls(
    lab: &Lab,
    dir: &std::path::Path,
    certs: &std::path::Path,
    addr: SocketAddr,
) -> Server {
    let child = lab
        .command_in_server(env!("CARGO_BIN_EXE_xfer"))
        .arg("serve")
        .arg(dir)
        .args(["--self-signed", "--no-quic", "--listen", &addr.to_string()])
        .arg("--cert-dir")
        .arg(certs)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting xfer serve: {e}"));
    let server = Server(child);
    wait_for_listener(lab, addr);
    server
}

/// The round trips of every lane after the first that reported some, from one
/// `xfer get --json -c 4 EXTRA` of the synthetic resource.
fn later_lanes(
    lab: &Lab,
    addr: SocketAddr,
    certs: &std::path::Path,
    out: &std::path::Path,
    extra: &[&str],
) -> Vec<serde_json::Value> {
    let url = format!("https://{addr}/.xfer/synthetic?size={SIZE}&seed=3");
    let o = lab
        .command_in_client(env!("CARGO_BIN_EXE_xfer"))
        .args(["get", &url, "-o"])
        .arg(out)
        .arg("--ca-cert")
        .arg(certs.join("cert.pem"))
        .args([
            "--overwrite",
            "--json",
            "--quiet",
            "-c",
            "4",
            "--chunk-size",
            "1MiB",
        ])
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("running xfer get: {e}"));
    assert!(
        o.status.success(),
        "xfer get {extra:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("xfer get {extra:?} printed no JSON report: {e}"));
    assert_eq!(report["size"].as_u64(), Some(SIZE));
    let lanes: Vec<serde_json::Value> = report["lanes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .skip(1)
        .filter_map(|l| l.get("round_trips").filter(|r| !r.is_null()).cloned())
        .collect();
    assert!(
        lanes.len() >= 2,
        "{extra:?}: later lanes reported {lanes:?}"
    );
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
fn later_connections_need_one_round_trip_with_fast_open_and_early_data() {
    if !prerequisites("TCP Fast Open and early data lab test") {
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
        let _server = serve_tls(&lab, dir.path(), &certs, addr);
        let out = dir.path().join("out.bin");

        // The first run leaves a Fast Open cookie in the client namespace's kernel.
        later_lanes(&lab, addr, &certs, &out, &[]);
        for rt in later_lanes(&lab, addr, &certs, &out, &[]) {
            assert_eq!(parts(&rt), (tcp, 0, 1, "early-data"), "{name}: {rt}");
        }
        for rt in later_lanes(
            &lab,
            addr,
            &certs,
            &out,
            &["--no-tcp-fastopen", "--no-early-data"],
        ) {
            assert_eq!(parts(&rt), (1, 1, 1, "resumed"), "{name}, both off: {rt}");
        }
    }
}
