//! Each program under `examples/` runs to success with no arguments (each starts its own
//! server on loopback). `cargo test` builds them next to this test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn examples_dir() -> PathBuf {
    // target/<profile>/deps/examples-<hash> -> target/<profile>/examples
    let exe = std::env::current_exe().unwrap_or_default();
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("examples"))
        .unwrap_or_default()
}

fn run(name: &str) {
    let bin = examples_dir().join(name);
    assert!(bin.is_file(), "{} was not built", bin.display());
    let mut child = Command::new(&bin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the example");
    // A hang is a failure, not a stuck test run.
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("example {name} still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    assert!(
        out.status.success(),
        "example {name} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn fetch() {
    run("fetch");
}

#[test]
fn tree() {
    run("tree");
}

#[test]
fn upload() {
    run("upload");
}

#[test]
fn serve() {
    run("serve");
}
