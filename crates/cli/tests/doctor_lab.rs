//! `xfer doctor` across an emulated 100 ms link: on stock hosts (the kernel's 4 MiB `tcp_wmem`
//! cap) it must report the send-buffer cap and the sysctl line that lifts it; on tuned hosts
//! (64 MiB buffers) it must not.
//!
//! Needs root, /dev/net/tun and iproute2. Without them the test prints why and passes, except
//! under CI=true, where it fails.

use crate::lab_support;

use std::net::SocketAddr;
use std::time::Duration;

use lab_support::{prerequisites, serve_plain};
use xfer_lab::{cleanup, HostProfile, Lab, LabConfig, LinkConfig};

const PORT: u16 = 9447;

/// Runs `xfer doctor --json` in the client namespace of a lab with `profile` and returns the
/// exit code and the parsed report.
fn doctor_in_lab(prefix: &str, profile: HostProfile) -> (Option<i32>, serde_json::Value) {
    let _ = cleanup(prefix);
    let mut config = LabConfig::new(
        prefix,
        LinkConfig::new(100_000_000, Duration::from_millis(100)),
    );
    config.profile = profile;
    let lab = Lab::start(config).unwrap_or_else(|e| panic!("lab {prefix}: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let addr = SocketAddr::new(lab.server_addr(), PORT);
    let _server = serve_plain(&lab, dir.path(), addr);

    let url = format!("http://{addr}/");
    // The human report too, for `--nocapture` readers and docs/doctor.md.
    if let Ok(text) = lab
        .command_in_client(env!("CARGO_BIN_EXE_xfer"))
        .args(["doctor", &url, "--max-bytes", "4MiB", "--max-seconds", "15"])
        .output()
    {
        eprintln!(
            "$ xfer doctor {url} --max-bytes 4MiB  # {} profile\n{}",
            lab.config().profile.name,
            String::from_utf8_lossy(&text.stdout)
        );
    }
    let out = lab
        .command_in_client(env!("CARGO_BIN_EXE_xfer"))
        .args([
            "doctor",
            &url,
            "--json",
            "--max-bytes",
            "4MiB",
            "--max-seconds",
            "15",
        ])
        .output()
        .unwrap_or_else(|e| panic!("running xfer doctor: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "doctor output is not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

fn finding<'a>(report: &'a serde_json::Value, id: &str) -> Option<&'a serde_json::Value> {
    report["verdict"]["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|x| x["id"] == id))
}

#[test]
fn doctor_reports_the_buffer_cap_of_stock_hosts_and_not_of_tuned_ones() {
    if !prerequisites("doctor lab test") {
        return;
    }
    let (code, stock) = doctor_in_lab("xfertest-doc-s", HostProfile::stock());
    let rtt = stock["verdict"]["rtt_ms"].as_f64().unwrap_or(0.0);
    assert_eq!(stock["verdict"]["rtt_source"], "measured", "{stock}");
    assert!(
        (95.0..200.0).contains(&rtt),
        "RTT {rtt} ms over a 100 ms link"
    );
    let transfer = &stock["facts"]["transfers"][0];
    assert!(transfer["error"].is_null(), "{transfer}");
    assert!(
        transfer["connections"]
            .as_array()
            .is_some_and(|c| !c.is_empty()),
        "no connection statistics: {transfer}"
    );
    let wmem = stock["facts"]["host"]["tcp_wmem"][2].as_u64().unwrap_or(0);
    let cap = finding(&stock, "send_buffer_cap");
    if wmem < 12_500_000 {
        let cap =
            cap.unwrap_or_else(|| panic!("no send-buffer cap with tcp_wmem max {wmem}: {stock}"));
        let fix = cap["fix"][0].as_str().unwrap_or("");
        assert!(
            fix.starts_with("sysctl -w net.ipv4.tcp_wmem=") && fix.ends_with(" 33554432\""),
            "{fix}"
        );
        let lines = stock["verdict"]["sysctl_lines"].to_string();
        assert!(lines.contains("net.ipv4.tcp_wmem"), "{lines}");
        assert!(stock["verdict"]["sysctl_d"]
            .as_str()
            .is_some_and(|s| s.contains("net.ipv4.tcp_wmem = ")));
        assert_eq!(code, Some(6), "a limited path exits 6");
        assert_eq!(stock["limited"], true);
    } else {
        eprintln!("this kernel's stock tcp_wmem max is {wmem}: no send cap to find");
    }

    let (_, tuned) = doctor_in_lab("xfertest-doc-t", HostProfile::tuned());
    assert_eq!(
        tuned["facts"]["host"]["tcp_wmem"][2], 67108864u64,
        "{tuned}"
    );
    for id in ["send_buffer_cap", "recv_buffer_cap"] {
        assert!(
            finding(&tuned, id).is_none(),
            "tuned host reports {id}: {tuned}"
        );
    }
    assert!(
        !tuned["verdict"]["sysctl_lines"]
            .to_string()
            .contains("tcp_wmem"),
        "{tuned}"
    );
}
