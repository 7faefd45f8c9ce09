//! The Debian package as a site installs it: built by `scripts/package.sh`, installed with
//! `dpkg -i`, the unit's own `ExecStart` run as the unit's user with the packaged
//! configuration, a file fetched from it, and the package removed and purged with the data
//! left as it was (docs/operations.md, "Install").

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{require_program, sha256_file, write_random_file, xfer_bin, TestResult};
use xfer_test_support::{gate, BoxError};

const UNIT: &str = "/usr/lib/systemd/system/xfer-serve.service";
const DATA: &str = "/srv/xfer";

/// Root, dpkg and cargo-deb, or a reason to skip (never under `CI=true`).
fn prerequisites() -> Option<()> {
    const TEST: &str = "the package test";
    if !gate::require_root(TEST) {
        return None;
    }
    require_program("dpkg", &[], "dpkg")?;
    require_program("setpriv", &[], "util-linux")?;
    let cargo_deb = Command::new("cargo")
        .args(["deb", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !cargo_deb {
        gate::absent(
            TEST,
            "cargo-deb is not installed (scripts/test.sh installs it)",
        );
        return None;
    }
    if installed() {
        // Not ours to replace: this machine runs xfer from its package.
        gate::absent(
            TEST,
            "the xfer package is installed here and would be replaced",
        );
        return None;
    }
    Some(())
}

fn installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", "xfer"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ok installed"))
}

fn run(cmd: &mut Command) -> Result<String, BoxError> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed with {}:\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One key of the unit's `[Service]` section, as systemd reads it (last assignment wins).
fn unit_value(unit: &str, key: &str) -> Option<String> {
    unit.lines()
        .rev()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().to_owned())
}

/// Purges the package and stops the server whatever way the test ends, and removes what the
/// test put in the data directory (never anything else there).
struct Cleanup {
    server: Option<Child>,
    test_file: PathBuf,
    data_was_there: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if installed() {
            let _ = Command::new("dpkg").args(["-P", "xfer"]).output();
        }
        let _ = fs::remove_file(&self.test_file);
        if !self.data_was_there {
            let _ = fs::remove_dir(DATA);
        }
    }
}

/// Polls for the server's port with a deadline, failing early if the process exits.
fn wait_listening(child: &mut Child, port: u16) -> TestResult {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if std::net::TcpStream::connect_timeout(
            &([127, 0, 0, 1], port).into(),
            Duration::from_millis(200),
        )
        .is_ok()
        {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            return Err(format!("the unit's ExecStart exited with {status}").into());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("nothing listening on port {port} after 20 s").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_deb_installs_serves_and_uninstalls_leaving_the_data() -> TestResult {
    if prerequisites().is_none() {
        return Ok(());
    }
    let bin = xfer_bin();
    // target/debug/xfer -> target: the binary the suite already built is the one packaged.
    let target = bin
        .parent()
        .and_then(Path::parent)
        .ok_or("the xfer binary has no target directory")?
        .to_path_buf();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    run(Command::new(repo.join("scripts/package.sh"))
        .args(["--profile", "dev", "--deb-only", "--no-build"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(repo))?;
    let deb = fs::read_dir(target.join("packages"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .max_by_key(|p| fs::metadata(p).and_then(|m| m.modified()).ok())
        .ok_or("scripts/package.sh made no .deb")?;

    if let Some(lintian) = require_program("lintian", &[], "lintian") {
        // Errors fail the test; warnings (e.g. a first upload that closes no bug) do not.
        let report = Command::new(lintian).arg(&deb).output()?;
        let text = String::from_utf8_lossy(&report.stdout);
        let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("E:")).collect();
        assert!(
            errors.is_empty(),
            "lintian reports errors:\n{}",
            errors.join("\n")
        );
    }

    let mut cleanup = Cleanup {
        server: None,
        test_file: Path::new(DATA).join("package-test.bin"),
        data_was_there: Path::new(DATA).exists(),
    };
    run(Command::new("dpkg").arg("-i").arg(&deb))?;
    assert!(installed(), "dpkg -i did not leave xfer installed");
    for path in [
        "/usr/bin/xfer",
        "/etc/xfer/serve.toml",
        UNIT,
        "/usr/share/man/man1/xfer-serve.1.gz",
    ] {
        assert!(
            Path::new(path).exists(),
            "the package did not install {path}"
        );
    }

    if let Some(analyze) = require_program("systemd-analyze", &[], "systemd") {
        run(Command::new(analyze).args(["verify", UNIT]))?;
    }

    // The unit as systemd would run it: its user, its exact command line.
    let unit = fs::read_to_string(UNIT)?;
    let exec = unit_value(&unit, "ExecStart").ok_or("the unit has no ExecStart")?;
    let user = unit_value(&unit, "User").ok_or("the unit names no User")?;
    assert_eq!(user, "xfer", "the unit runs as its own user");
    let words: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(
        words.first().copied(),
        Some("/usr/bin/xfer"),
        "ExecStart runs the packaged binary"
    );

    let hash = write_random_file(&cleanup.test_file, 3 << 20, 37)?;
    run(Command::new("chown")
        .args(["xfer:xfer"])
        .arg(&cleanup.test_file))?;
    // setpriv execs the command as the user (as systemd does), so the server itself gets the
    // signals sent to this child.
    let server = Command::new("setpriv")
        .args(["--reuid", &user, "--regid", &user, "--init-groups", "--"])
        .args(&words)
        .current_dir("/")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let server = cleanup.server.insert(server);
    wait_listening(server, 8443)?;

    let dest = tempfile::tempdir()?;
    let out_file = dest.path().join("got.bin");
    let got = Command::new(&bin)
        .args(["get", "https://localhost:8443/package-test.bin", "-o"])
        .arg(&out_file)
        .args(["--ca-cert", "/var/lib/xfer/cert/cert.pem", "--quiet"])
        .output()?;
    assert!(
        got.status.success(),
        "xfer get from the packaged server failed: {}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert_eq!(sha256_file(&out_file)?, hash, "the fetched file differs");

    if let Some(mut child) = cleanup.server.take() {
        // SIGTERM as systemd stops it; the server drains and exits 0.
        let pid = i32::try_from(child.id())?;
        // SAFETY: kill with a pid we own and a valid signal has no memory effects.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = child.wait()?;
        assert!(
            status.success(),
            "the server did not stop cleanly on SIGTERM: {status}"
        );
    }

    run(Command::new("dpkg").args(["-r", "xfer"]))?;
    assert!(
        !Path::new("/usr/bin/xfer").exists(),
        "dpkg -r left the binary"
    );
    assert_eq!(
        sha256_file(&cleanup.test_file)?,
        hash,
        "removing the package touched the data"
    );
    run(Command::new("dpkg").args(["-P", "xfer"]))?;
    assert_eq!(
        sha256_file(&cleanup.test_file)?,
        hash,
        "purging the package touched the data"
    );
    assert!(
        Command::new("getent")
            .args(["passwd", "xfer"])
            .output()?
            .stdout
            .is_empty(),
        "purging left the service's user"
    );
    Ok(())
}
