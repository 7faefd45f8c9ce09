//! `xfer lab run` with a `[tree]`: a small tree of many files through a real emulated link,
//! fetched by xfer's default command and over QUIC from `xfer serve`, and by the peers
//! (`aria2c -i -j`, `rclone copy` from an HTTP remote) from nginx in the server namespace.
//! Checks that every run brought the whole tree (the runner compares every file's size),
//! and that the relay never beat its rate.
//!
//! Needs root, /dev/net/tun, iproute2, nginx, aria2c and rclone. Without them the test prints
//! why and passes, except under CI=true, where it fails.

use std::process::Command;

const RATE_BPS: f64 = 100e6;

fn prerequisites() -> bool {
    let mut missing = xfer_lab::check_prerequisites().err().map(|e| e.to_string());
    for (tool, flag, package) in [
        ("nginx", "-v", "nginx-light"),
        ("aria2c", "--version", "aria2"),
        ("rclone", "--version", "rclone"),
    ] {
        if missing.is_none() && Command::new(tool).arg(flag).output().is_err() {
            missing = Some(format!("`{tool}` is not installed (Debian: {package})"));
        }
    }
    match missing {
        None => true,
        Some(why) => xfer_test_support::gate::absent("the lab tree test", why),
    }
}

const SCENARIO: &str = r#"
name = "ci-tree"
profiles = ["tuned"]
timeout = "60s"

[link]
rate = "100M"
rtt = ["20ms"]

[tree]
files = 60
median = "48KiB"
sigma = 1.0
max = "2MiB"
dirs = 4

[[transfer]]
tool = "xfer"

[[transfer]]
tool = "xfer"
protocol = "quic"

[[transfer]]
tool = "aria2c"
connections = [8]

[[transfer]]
tool = "rclone"
connections = [8]
"#;

#[test]
fn tree_scenario_runs_xfer_and_the_peers_through_the_emulator() {
    if !prerequisites() {
        return;
    }
    let prefix = "xfertest-tree";
    let _ = xfer_lab::cleanup(prefix);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let file = dir.path().join("tree.toml");
    std::fs::write(&file, SCENARIO).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let out_dir = dir.path().join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(["lab", "run"])
        .arg(&file)
        .arg("--out")
        .arg(&out_dir)
        .args(["--prefix", prefix, "--port", "9543"])
        .output()
        .unwrap_or_else(|e| panic!("running xfer lab: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "xfer lab run failed: {stderr}");
    assert!(stderr.contains("== tree: 60 files"), "{stderr}");

    let json = std::fs::read_to_string(out_dir.join("results.json"))
        .unwrap_or_else(|e| panic!("results.json: {e}; stderr: {stderr}"));
    let v: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("results.json: {e}"));
    let runs = v["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("no runs in {json}"));
    let cases: Vec<&str> = runs
        .iter()
        .map(|r| r["case"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        cases,
        ["xfer default", "xfer quic c=2", "aria2c c=8", "rclone c=8"],
        "{json}"
    );
    let tree_bytes = runs[0]["size"].as_u64().unwrap_or(0);
    assert!(tree_bytes > 60 * 1024, "tree of {tree_bytes} bytes");
    for r in runs {
        let case = r["case"].as_str().unwrap_or("?");
        assert_eq!(r["ok"], true, "{case} failed: {}", r["error"]);
        assert_eq!(r["size"].as_u64(), Some(tree_bytes), "{case}");
        assert_eq!(
            r["bytes"].as_u64(),
            Some(tree_bytes),
            "{case}: not the whole tree"
        );
        let wire = r["wire_bps"].as_f64().unwrap_or(f64::MAX);
        assert!(
            wire <= 1.02 * RATE_BPS,
            "{case}: the relay delivered {wire} bit/s through a {RATE_BPS} bit/s link"
        );
        assert!(
            r["server_cpu_s"].as_f64().is_some(),
            "{case}: no server CPU"
        );
        let command = r["command"].as_str().unwrap_or("");
        let program = case.split(' ').next().unwrap_or("");
        assert!(command.contains(program), "{case}: ran {command}");
    }
    assert!(
        !std::path::Path::new("/run/netns")
            .join(format!("{prefix}-srv"))
            .exists(),
        "the lab's namespaces are left behind"
    );
}
