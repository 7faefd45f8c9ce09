//! HTTP/2 under loss, through an emulated lossy link (100 Mbit/s, 20 ms, 0.5% random loss):
//! with the default layout the client sees the loss on its one connection (packets arriving
//! out of order) and spreads its lanes over `--h2-loss-connections` connections; with `-c 1`
//! given by hand, or `--h2-loss-connections 1`, it keeps one. The report's per-connection
//! `out_of_order_packets` is the signal and its `spread` says what was done and why; the
//! download verifies either way. With a path memory, the transfer keeps its verdict (lossy)
//! and the next one starts spread.
//!
//! Needs root, /dev/net/tun and iproute2. Without them the test prints why and passes, except
//! under CI=true, where it fails.

use crate::lab_support;

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::time::Duration;

use lab_support::{get_json, prerequisites, serve_plain};
use xfer_lab::{cleanup, Lab, LabConfig, LinkConfig};

const PORT: u16 = 9449;
const SIZE: u64 = 40 << 20;

/// `xfer get --protocol http2 --json EXTRA` of the synthetic file; the parsed report.
fn get(lab: &Lab, addr: SocketAddr, out: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let url = format!("http://{addr}/.xfer/synthetic?size={SIZE}&seed=7");
    let mut args: Vec<&OsStr> = vec![url.as_ref(), "-o".as_ref(), out.as_os_str()];
    // Many requests, so the client reads its loss signal often (it does per request).
    for a in ["--overwrite", "--protocol", "http2", "--chunk-size", "1MiB"] {
        args.push(a.as_ref());
    }
    args.extend(extra.iter().map(|a| OsStr::new(*a)));
    let report = get_json(lab, &args);
    let meta = std::fs::metadata(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    assert_eq!(meta.len(), SIZE, "{extra:?}");
    report
}

fn path_str(p: &std::path::Path) -> &str {
    p.to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8", p.display()))
}

/// Connections in the report and their out-of-order packets in all.
fn connections(report: &serde_json::Value) -> (usize, u64) {
    let conns = report["connections"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ooo = conns
        .iter()
        .filter_map(|c| c["out_of_order_packets"].as_u64())
        .sum();
    (conns.len(), ooo)
}

#[test]
fn http2_spreads_over_more_connections_once_loss_is_seen() {
    if !prerequisites("HTTP/2 loss lab test") {
        return;
    }
    let prefix = "xfertest-h2l";
    let _ = cleanup(prefix);
    let link = LinkConfig {
        loss: 0.005,
        ..LinkConfig::new(100_000_000, Duration::from_millis(20))
    };
    let lab = Lab::start(LabConfig::new(prefix, link)).unwrap_or_else(|e| panic!("lab: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let addr = SocketAddr::new(lab.server_addr(), PORT);
    let _server = serve_plain(&lab, dir.path(), addr);
    let out = dir.path().join("out.bin");

    let report = get(&lab, addr, &out, &["--no-path-memory"]);
    let (n, ooo) = connections(&report);
    assert!(ooo > 0, "0.5% loss but no out-of-order packet counted");
    assert_eq!(report["spread"]["cause"], "loss", "{}", report["spread"]);
    assert_eq!(report["spread"]["connections"], 8, "{}", report["spread"]);
    // Lanes move when their chunk ends, so one may still be on the first connection when a
    // late decision meets the end of the file: 8 at most, and more than one.
    assert!(
        (2..=8).contains(&n),
        "the default layout spreads over up to 8 connections under loss: {n}"
    );

    // The path memory: a transfer that saw loss says so, and the next HTTP/2 transfer to the
    // same server starts spread.
    let memory = dir.path().join("paths");
    let remember = ["--path-memory", path_str(&memory)];
    let (_, ooo) = connections(&get(&lab, addr, &out, &remember));
    assert!(ooo > 0);
    let kept = std::fs::read_to_string(&memory).unwrap_or_default();
    assert!(
        kept.lines()
            .any(|l| l.starts_with(&format!("{addr} ")) && l.ends_with(" lossy")),
        "the path memory holds {kept:?}"
    );
    let mut again = remember.to_vec();
    again.extend(["--h2-loss-connections", "3"]);
    let report = get(&lab, addr, &out, &again);
    assert_eq!(
        report["spread"]["cause"], "path_memory",
        "spread from the start over --h2-loss-connections: {}",
        report["spread"]
    );
    assert_eq!(report["spread"]["connections"], 3, "{}", report["spread"]);

    for pinned in [
        &["-c", "1", "--no-path-memory"][..],
        &["--h2-loss-connections", "1", "--no-path-memory"][..],
    ] {
        let report = get(&lab, addr, &out, pinned);
        let (n, ooo) = connections(&report);
        assert!(ooo > 0, "{pinned:?}");
        assert_eq!(n, 1, "{pinned:?} keeps one connection");
        assert!(report.get("spread").is_none(), "{pinned:?}: {report}");
    }
}
