//! What the tests that run `xfer serve` inside an emulated link share: the prerequisite check
//! (skip with the reason, never under CI=true), a guard that stops the server, and waiting
//! until it listens.

use std::ffi::OsStr;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use xfer_lab::Lab;

/// Whether a lab can be built here. Without one the test prints why and passes, except under
/// CI=true, where it fails with the reason.
pub fn prerequisites(test: &str) -> bool {
    xfer_test_support::gate::available(test, xfer_lab::check_prerequisites())
}

/// Kills `xfer serve` even when an assertion fails first.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `xfer serve DIR --plain --listen ADDR` in the server namespace and waits until it
/// listens; stopped when the guard drops.
pub fn serve_plain(lab: &Lab, dir: &Path, addr: SocketAddr) -> Server {
    serve(lab, dir, addr, &["--plain".as_ref()])
}

/// Starts `xfer serve DIR --listen ADDR ARGS` in the server namespace and waits until it
/// listens; stopped when the guard drops.
pub fn serve(lab: &Lab, dir: &Path, addr: SocketAddr, args: &[&OsStr]) -> Server {
    let child = lab
        .command_in_server(env!("CARGO_BIN_EXE_xfer"))
        .arg("serve")
        .arg(dir)
        .args(["--listen", &addr.to_string()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting xfer serve: {e}"));
    let server = Server(child);
    wait_for_listener(lab, addr);
    server
}

/// As [`serve`], with `RUST_LOG=filter`, the server's stderr written to `log`, and a cgroup2
/// file system mounted for TCP resume ([`Lab::command_in_server_with_cgroup2`]).
#[allow(dead_code)] // for the tests of TCP resume only
pub fn serve_logged_with_cgroup2(
    lab: &Lab,
    dir: &Path,
    addr: SocketAddr,
    args: &[&OsStr],
    log: &Path,
    filter: &str,
) -> Server {
    let mut cmd = lab.command_in_server_with_cgroup2(env!("CARGO_BIN_EXE_xfer"));
    let file =
        std::fs::File::create(log).unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
    let child = cmd
        .env("RUST_LOG", filter)
        .arg("serve")
        .arg(dir)
        .args(["--listen", &addr.to_string()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::from(file))
        .spawn()
        .unwrap_or_else(|e| panic!("starting xfer serve: {e}"));
    let server = Server(child);
    wait_for_listener(lab, addr);
    server
}

/// Runs `xfer get ARGS --json --quiet` in the client namespace, checks it succeeded, and
/// returns its report.
#[allow(dead_code)] // not every lab test downloads
pub fn get_json(lab: &Lab, args: &[&OsStr]) -> serde_json::Value {
    let o = lab
        .command_in_client(env!("CARGO_BIN_EXE_xfer"))
        .arg("get")
        .args(args)
        .args(["--json", "--quiet"])
        .output()
        .unwrap_or_else(|e| panic!("running xfer get: {e}"));
    assert!(
        o.status.success(),
        "xfer get {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("xfer get {args:?} printed no JSON report: {e}"))
}

/// Waits until something accepts TCP connections at `addr`, seen from the client namespace.
fn wait_for_listener(lab: &Lab, addr: SocketAddr) {
    for _ in 0..100 {
        let connected = lab
            .spawn_in_client(move || {
                TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
            })
            .ok()
            .and_then(|h| h.join().ok())
            .and_then(Result::ok)
            .unwrap_or(false);
        if connected {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("xfer serve never listened on {addr}");
}
