//! `xfer doctor` without the lab: exit codes, the JSON shape, and a measured transfer from an
//! `xfer serve` on loopback.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn xfer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running xfer {args:?}: {e}"))
}

fn json(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn host_only_run_exits_0_or_6_as_its_findings_say() {
    let out = xfer(&["doctor", "--json", "--rtt", "100"]);
    let v = json(&out);
    assert_eq!(v["verdict"]["rtt_source"], "assumed");
    assert_eq!(v["verdict"]["rtt_ms"], 100.0);
    let limited = v["limited"].as_bool().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(out.status.code(), Some(if limited { 6 } else { 0 }), "{v}");
    assert_eq!(v["verdict"]["bdp"][0]["bytes"], 12_500_000u64);
}

#[test]
fn bad_urls_and_rates_are_usage_errors() {
    assert_eq!(xfer(&["doctor", "ftp://h/x"]).status.code(), Some(2));
    assert_eq!(xfer(&["doctor", "no-scheme"]).status.code(), Some(2));
    assert_eq!(xfer(&["doctor", "--rate", "fast"]).status.code(), Some(2));
}

#[test]
fn loopback_server_gets_probed_and_measured() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("free port: {e}"));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let child = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .arg("serve")
        .arg(dir.path())
        .args(["--plain", "--listen", &addr.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting xfer serve: {e}"));
    let _server = Server(child);
    let up = (0..100).any(|_| {
        let ok = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok();
        if !ok {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    });
    assert!(up, "xfer serve never listened on {addr}");

    let out = xfer(&[
        "doctor",
        &format!("http://{addr}/"),
        "--json",
        "--max-bytes",
        "4MiB",
    ]);
    let v = json(&out);
    assert_eq!(v["verdict"]["rtt_source"], "measured", "{v}");
    assert_eq!(
        v["facts"]["path"]["connect_ms"].as_array().map(Vec::len),
        Some(5)
    );
    let t = &v["facts"]["transfers"][0];
    assert!(t["error"].is_null(), "{t}");
    assert!(t["bytes"].as_u64().unwrap_or(0) >= 4 << 20, "{t}");
    assert!(t["goodput_bps"].as_f64().unwrap_or(0.0) > 0.0, "{t}");
    let conn = &t["connections"][0];
    assert!(conn["rtt_us"].is_u64(), "{conn}");
    assert!(conn["recv_buffer"].is_u64(), "{conn}");
}
