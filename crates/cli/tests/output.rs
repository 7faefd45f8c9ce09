//! What `xfer` writes for people and for machines when its output is not a terminal.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Logs written to a pipe carry no colour escape codes: they end up in files and CI logs.
#[test]
fn logs_to_a_pipe_have_no_escape_codes() {
    // A port nobody listens on: `xfer get` logs a warning for each retry of its first request.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("free port: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(["get", &format!("http://127.0.0.1:{port}/x")])
        .arg("-o")
        .arg(dir.path().join("x"))
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting xfer get: {e}"));
    let stderr = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(60));
    let _ = child.kill();
    let _ = child.wait();
    let line = first.unwrap_or_else(|e| panic!("xfer get wrote nothing to stderr: {e}"));
    assert!(!line.contains('\x1b'), "escape codes on a pipe: {line:?}");
}

/// `--json` answers on stdout also when the transfer fails: scripts read one document either way.
#[test]
fn json_reports_a_failed_transfer() {
    use std::io::{Read, Write};
    // A server that answers 404 to everything.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("local addr: {e}"));
    std::thread::spawn(move || {
        // A thread per connection: the client opens its other lanes while the first request
        // is answered, and those connections stay idle until it learns the resource.
        for mut conn in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let _ = conn.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n",
                    );
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let out = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(["get", "--json", &format!("http://{addr}/missing.bin")])
        .arg("-o")
        .arg(dir.path().join("missing.bin"))
        .output()
        .unwrap_or_else(|e| panic!("running xfer get: {e}"));
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out:?}"));
    assert_eq!(report["status"], "failed");
    assert_eq!(report["exit_code"], 3);
    assert!(
        report["error"].as_str().is_some_and(|e| e.contains("404")),
        "{report}"
    );
    assert_eq!(report["progress"]["verified"], 0);
    assert!(!dir.path().join("missing.bin").exists());
}
