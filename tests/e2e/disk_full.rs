//! A disk that fills up during `xfer get`, on every transport: the command ends promptly with
//! exit code 5, keeps the part file and journal, and a re-run after space is freed resumes.
//! The disk has room for the file when the transfer starts (a size that cannot fit is refused
//! before anything is written, `hostile_server.rs`) and shrinks once the part file exists, as
//! if another writer took the space; a throttling proxy keeps the transfer from finishing
//! before that.
//!
//! The small disk is a tmpfs mounted for the test, which needs root (CI runs as root). Without
//! root the case is skipped with a message, except under `CI=true`, where it fails. The same
//! failure without root, through a part file that fails on purpose, is in
//! `crates/core/tests/download.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use xfer_test_support::fault_proxy::{Fault, FaultProxy};

use crate::support::{
    each_transport, json_report, u64_field, write_random_file, xfer_bin, BoxError, Fixture, Proto,
    TestResult, MIB,
};

/// A tmpfs mounted at a directory for the life of the value.
pub(crate) struct SmallDisk {
    pub dir: PathBuf,
}

impl SmallDisk {
    /// `None` (after saying why) when this machine cannot mount one and we are not in CI.
    pub fn mount(dir: &Path, size_mib: u64) -> Result<Option<Self>, BoxError> {
        std::fs::create_dir_all(dir)?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size_mib}m"),
                "xfer-test",
            ])
            .arg(dir)
            .output();
        let refused = match out {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
            Err(e) => Some(format!("cannot run mount: {e}")),
        };
        match refused {
            None => Ok(Some(Self {
                dir: dir.to_path_buf(),
            })),
            Some(why) => {
                xfer_test_support::gate::absent(
                    "the disk-full test",
                    format!("cannot mount a small tmpfs (needs root): {why}"),
                );
                Ok(None)
            }
        }
    }

    /// Change the space, as other writers taking it or freeing it would on a real disk.
    fn resize(dir: &Path, size_mib: u64) -> Result<(), BoxError> {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,size={size_mib}m")])
            .arg(dir)
            .status()?;
        if !st.success() {
            return Err(format!("remounting {} failed: {st}", dir.display()).into());
        }
        Ok(())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Something to do once, as soon as a path exists.
type OnCreated = (PathBuf, Box<dyn FnOnce() -> Result<(), BoxError> + Send>);

/// Run `xfer`, killing it if it outlives `limit`: the failure this guards against was a
/// process that kept running after its writer died.
async fn run_xfer_within(
    args: Vec<String>,
    limit: Duration,
    mut on_created: Option<OnCreated>,
) -> Result<Output, BoxError> {
    let bin = xfer_bin();
    let out = tokio::task::spawn_blocking(move || -> Result<Output, BoxError> {
        let mut child = Command::new(bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let deadline = Instant::now() + limit;
        while child.try_wait()?.is_none() {
            if on_created.as_ref().is_some_and(|(path, _)| path.exists()) {
                if let Some((_, action)) = on_created.take() {
                    action()?;
                }
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let out = child.wait_with_output()?;
                return Err(format!(
                    "xfer still running after {limit:?}; stderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(child.wait_with_output()?)
    })
    .await??;
    Ok(out)
}

async fn full_disk_exits_5_and_resumes(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    let size = 32 * MIB;
    let sha = write_random_file(&fx.root().join("big.bin"), size, 77)?;
    let Some(disk) = SmallDisk::mount(&fx.out().join("small"), 40)? else {
        return Ok(());
    };
    // Every connection paced, so the disk shrinks long before the transfer could end.
    let pace = vec![
        Fault::Throttle {
            bytes_per_sec: 4 * MIB
        };
        10_000
    ];
    let (proxy, scheme) = match proto {
        Proto::Quic => {
            let quic = fx.servers.quic_addr.ok_or("quic is not running")?;
            (FaultProxy::udp(quic, pace).await?, "quic")
        }
        Proto::H2c => (FaultProxy::tcp(fx.servers.http_addr, pace).await?, "http"),
        _ => (FaultProxy::tcp(fx.servers.http_addr, pace).await?, "https"),
    };
    let url = format!("{scheme}://127.0.0.1:{}/big.bin", proxy.addr().port());
    let dest = disk.dir.join("big.bin");
    let mut args = vec![
        "get".to_string(),
        url,
        "-o".into(),
        dest.display().to_string(),
        "--chunk-size".into(),
        "1MiB".into(),
        "--json".into(),
    ];
    if let Some(ca) = fx.ca_cert() {
        args.push("--ca-cert".into());
        args.push(ca.display().to_string());
    }
    // Generous: on a loaded machine a start-up takes seconds; a hang takes forever.
    let limit = Duration::from_secs(60);

    let part = disk.dir.join("big.bin.part");
    let dir = disk.dir.clone();
    let shrink: OnCreated = (part.clone(), Box::new(move || SmallDisk::resize(&dir, 12)));
    let out = run_xfer_within(args.clone(), limit, Some(shrink)).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{proto:?}: stderr: {stderr}");
    assert!(
        stderr.contains("No space left") || stderr.contains("space"),
        "{proto:?}: the message must say the disk is full: {stderr}"
    );
    assert!(!dest.exists(), "{proto:?}");
    let journal = disk.dir.join("big.bin.xfer-journal");
    assert!(
        part.exists() && journal.exists(),
        "{proto:?}: part file and journal kept"
    );

    SmallDisk::resize(&disk.dir, 64)?;
    let out = run_xfer_within(args, limit, None).await?;
    let report = json_report(&out)?;
    assert_eq!(out.status.code(), Some(0), "{proto:?}: {report}");
    assert!(
        u64_field(&report, "resumed_bytes")? >= MIB,
        "{proto:?}: the re-run must resume what was journalled: {report}"
    );
    assert_eq!(report["sha256"].as_str(), Some(sha.as_str()), "{proto:?}");
    assert_eq!(crate::support::sha256_file(&dest)?, sha);
    assert!(!journal.exists() && !part.exists(), "{proto:?}");
    drop(disk);
    fx.shutdown().await;
    Ok(())
}

each_transport! {
    full_disk => full_disk_exits_5_and_resumes;
}
