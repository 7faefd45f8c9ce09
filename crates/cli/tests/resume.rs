//! Kill `xfer get` mid-transfer (SIGKILL, and Ctrl-C as SIGINT), run the same command again,
//! and check that it resumes: what the first run verified is kept, at most one chunk per lane
//! is lost, and the file comes out byte-identical. The same for a tree: files already in place
//! are skipped, the rest fetched.
//!
//! To stop the first run at a known point without timing, the client reaches the server (in
//! this process, plain HTTP on loopback) through a relay that forwards only a fixed budget of
//! response bytes and then holds the connections open, sending nothing. The transfer stalls
//! there; the test waits until everything that arrived complete is journalled, kills the
//! process, lifts the budget and runs the command again.

use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer_test_support::signal::{self, Signal};
use xfer_test_support::{sha256_hex, write_random_file};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

const MIB: u64 = 1 << 20;
const SIZE: u64 = 128 * MIB + 12_345;
const CHUNK: u64 = 4 * MIB;
const LANES: u64 = 4;
/// Response bytes the relay lets through before the first run stalls.
const BUDGET: u64 = 42 * MIB;
/// Response heads, chunked-encoding framing and digest trailers the relay also counts.
const FRAMING_SLACK: u64 = 256 * 1024;

/// Server → client bytes allowed through the relay so far, shared by all its connections.
struct Gate {
    sent: AtomicU64,
    limit: watch::Sender<u64>,
    /// Bytes sent on connections accepted after [`Gate::open_fully`]: the second run's, without
    /// what the first run's dead connections still had buffered in the relay.
    sent_fresh: AtomicU64,
}

impl Gate {
    fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self {
            sent: AtomicU64::new(0),
            limit: watch::Sender::new(limit),
            sent_fresh: AtomicU64::new(0),
        })
    }

    /// Wait until up to `want` bytes may pass; returns how many.
    async fn take(&self, want: u64) -> u64 {
        let mut rx = self.limit.subscribe();
        loop {
            let limit = *rx.borrow_and_update();
            let cur = self.sent.load(Ordering::Acquire);
            if cur < limit {
                let n = want.min(limit - cur);
                if self
                    .sent
                    .compare_exchange(cur, cur + n, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return n;
                }
                continue;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Acquire)
    }

    fn is_open(&self) -> bool {
        *self.limit.borrow() == u64::MAX
    }

    fn open_fully(&self) {
        self.limit.send_replace(u64::MAX);
    }
}

/// A TCP relay on loopback to `upstream` whose server → client direction passes through `gate`.
async fn start_relay(upstream: SocketAddr, gate: Arc<Gate>) -> Result<SocketAddr, BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let gate = Arc::clone(&gate);
            let fresh = gate.is_open();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                    let _ = sw.shutdown().await;
                });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let mut off = 0;
                    while off < n {
                        let allowed = gate.take((n - off) as u64).await as usize;
                        if cw.write_all(&buf[off..off + allowed]).await.is_err() {
                            return;
                        }
                        off += allowed;
                        if fresh {
                            gate.sent_fresh.fetch_add(allowed as u64, Ordering::AcqRel);
                        }
                    }
                }
                let _ = cw.shutdown().await;
            });
        }
    });
    Ok(addr)
}

/// Verified chunks recorded in a journal (`c ...` lines).
fn journal_chunks(journal: &Path) -> usize {
    std::fs::read_to_string(journal)
        .map(|s| s.lines().filter(|l| l.starts_with("c ")).count())
        .unwrap_or(0)
}

/// Lift the relay's budget, run `cmd` (with `--json`) to its end, and return its report; the
/// run must succeed.
async fn rerun_with_gate_open(
    gate: &Gate,
    mut cmd: Command,
) -> Result<serde_json::Value, BoxError> {
    gate.open_fully();
    let out: Output = tokio::task::spawn_blocking(move || cmd.output()).await??;
    assert!(
        out.status.success(),
        "the resumed run failed: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The child is killed when the test ends, however it ends.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Setup {
    dir: tempfile::TempDir,
    servers: Servers,
    gate: Arc<Gate>,
    url: String,
    expected: String,
}

impl Setup {
    async fn start() -> Result<Self, BoxError> {
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("root");
        std::fs::create_dir(&root)?;
        let expected = {
            let path = root.join("big.bin");
            tokio::task::spawn_blocking(move || write_random_file(&path, SIZE, 0x1234_5678))
                .await??
        };
        let mut cfg = ServeConfig::new(&root, ServerTls::Plain);
        cfg.http.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        cfg.quic = false;
        let servers = Servers::start(cfg).await?;
        let gate = Gate::new(BUDGET);
        let relay = start_relay(servers.http_addr, Arc::clone(&gate)).await?;
        Ok(Self {
            url: format!("http://{relay}/big.bin"),
            dir,
            servers,
            gate,
            expected,
        })
    }

    fn dest(&self) -> PathBuf {
        self.dir.path().join("big.bin")
    }

    fn part(&self) -> PathBuf {
        self.dir.path().join("big.bin.part")
    }

    fn journal(&self) -> PathBuf {
        self.dir.path().join("big.bin.xfer-journal")
    }

    fn command(&self, json: bool) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer"));
        cmd.args(["get", &self.url, "-o"])
            .arg(self.dest())
            .args(["--protocol", "http1", "-c", &LANES.to_string()])
            .args(["--chunk-size", "4MiB", "--quiet"])
            .stdin(Stdio::null());
        if json {
            cmd.arg("--json");
        }
        cmd
    }

    /// Start the first run and wait until it has stalled on the relay's budget with every
    /// chunk that arrived complete journalled.
    async fn run_until_stalled(&self) -> Result<ChildGuard, BoxError> {
        let mut child = ChildGuard(
            self.command(false)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?,
        );
        // Generous: a loaded machine can be slow, and a correct run always gets there.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.0.try_wait()? {
                let mut err = String::new();
                if let Some(mut e) = child.0.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!("xfer get ended before the stall: {status}\n{err}").into());
            }
            let journalled = journal_chunks(&self.journal()) as u64 * CHUNK;
            // Once the budget is spent no more bytes arrive; chunks that were complete get
            // journalled; at most one partial chunk per lane stays unjournalled.
            if self.gate.sent() >= BUDGET && journalled + LANES * CHUNK + FRAMING_SLACK >= BUDGET {
                return Ok(child);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "stalled with {} bytes through the relay but only {} chunks journalled",
                    self.gate.sent(),
                    journal_chunks(&self.journal())
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// After the first run is gone: the destination is not there, the part file and journal
    /// are; returns the journalled byte count.
    fn check_interrupted_state(&self) -> Result<u64, BoxError> {
        assert!(!self.dest().exists(), "destination exists after the kill");
        assert!(self.part().exists(), "part file missing after the kill");
        assert!(self.journal().exists(), "journal missing after the kill");
        let journalled = journal_chunks(&self.journal()) as u64 * CHUNK;
        assert!(journalled > 0, "nothing was journalled before the kill");
        assert!(
            journalled < SIZE,
            "everything was journalled: nothing to resume"
        );
        // Bytes the first run received but did not keep: the chunks in flight, at most one
        // per lane. (The relay's count includes response heads and framing: the slack.)
        let first_run = self.gate.sent();
        assert!(
            first_run <= journalled + LANES * CHUNK + FRAMING_SLACK,
            "the first run received {first_run} bytes but journalled only {journalled}: \
             more than lanes x chunk size ({LANES} x {CHUNK}) lost"
        );
        Ok(journalled)
    }

    /// Run the same command again with the relay open; check the resume and the file.
    async fn resume_and_check(&self, journalled: u64) -> TestResult {
        let report = rerun_with_gate_open(&self.gate, self.command(true)).await?;
        let field = |name: &str| {
            report[name]
                .as_u64()
                .ok_or_else(|| format!("no {name} in {report}"))
        };
        let (resumed, received) = (field("resumed_bytes")?, field("received_bytes")?);
        assert_eq!(
            resumed, journalled,
            "the resumed run must keep every journalled chunk"
        );
        let missing = SIZE - resumed;
        assert!(
            received >= missing,
            "received {received} < missing {missing}"
        );
        // Only what was missing crosses the wire again (plus end-game duplicates, at most one
        // chunk per other lane), not the whole file.
        assert!(
            received <= missing + (LANES - 1) * CHUNK,
            "received {received} bytes for {missing} missing"
        );
        // The same bound on the wire, counted by the relay rather than reported by the client:
        // it includes duplicates cancelled in flight, which the client never counts.
        let through_relay = self.gate.sent_fresh.load(Ordering::Acquire);
        assert!(
            (missing..=missing + (LANES - 1) * CHUNK + FRAMING_SLACK).contains(&through_relay),
            "the relay carried {through_relay} bytes for {missing} missing ({received} received)"
        );
        assert_eq!(report["sha256"].as_str(), Some(self.expected.as_str()));
        let dest = self.dest();
        let actual = tokio::task::spawn_blocking(move || sha256_hex(&dest)).await??;
        assert_eq!(
            actual, self.expected,
            "resumed file differs from the source"
        );
        assert!(!self.part().exists() && !self.journal().exists());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_transfer_then_resume() -> TestResult {
    let setup = Setup::start().await?;
    let mut child = setup.run_until_stalled().await?;
    child.0.kill()?;
    let status = child.0.wait()?;
    assert!(!status.success());
    let journalled = setup.check_interrupted_state()?;
    setup.resume_and_check(journalled).await?;
    setup.servers.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ctrl_c_exits_130_then_resume() -> TestResult {
    let setup = Setup::start().await?;
    let mut child = setup.run_until_stalled().await?;
    signal::send(child.0.id(), Signal::INT)?;
    let status = tokio::task::spawn_blocking(move || {
        let status = child.0.wait();
        (child, status)
    })
    .await?
    .1?;
    assert_eq!(status.code(), Some(130), "Ctrl-C must exit with 130");
    let journalled = setup.check_interrupted_state()?;
    setup.resume_and_check(journalled).await?;
    setup.servers.shutdown().await;
    Ok(())
}

/// Files of the killed-tree test: 40 small ones in two directories and one of six chunks.
fn tree_files() -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = (0..40u64)
        .map(|i| (format!("d{}/f{i:02}.bin", i % 2), 256 * 1024 + 1000 * i))
        .collect();
    files.push(("big.bin".into(), 6 * CHUNK));
    files
}

/// A tree, SIGKILLed mid-way: the same command then fetches only what was missing (files not
/// in place, the big file's chunks not journalled) and skips every file the first run put in
/// place, and the tree comes out identical. The first run is stalled by the relay's budget,
/// as above, so the point of the kill is fixed by bytes, not by time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_tree_then_rerun_fetches_only_what_is_missing() -> TestResult {
    const TREE_BUDGET: u64 = 12 * MIB;
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let files = tree_files();
    for (i, (name, size)) in files.iter().enumerate() {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap_or(&root))?;
        write_random_file(&path, *size, 0x7700 + i as u64)?;
    }
    let total: u64 = files.iter().map(|(_, s)| s).sum();
    let mut cfg = ServeConfig::new(&root, ServerTls::Plain);
    cfg.http.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.quic = false;
    let servers = Servers::start(cfg).await?;
    let gate = Gate::new(TREE_BUDGET);
    let relay = start_relay(servers.http_addr, Arc::clone(&gate)).await?;
    let dest = dir.path().join("got");
    let command = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer"));
        cmd.args(["get", &format!("http://{relay}/")])
            .arg(&dest)
            .args(["--protocol", "http1", "--tree-lanes", &LANES.to_string()])
            .args(["--chunk-size", "4MiB", "--quiet"])
            .stdin(Stdio::null());
        if json {
            cmd.arg("--json");
        }
        cmd
    };
    // In place: at its final name with the server's size and mtime (what a re-run trusts).
    let in_place = |name: &str, size: u64| -> bool {
        let (Ok(got), Ok(want)) = (
            std::fs::metadata(dest.join(name)),
            std::fs::metadata(root.join(name)),
        ) else {
            return false;
        };
        got.len() == size && got.modified().ok() == want.modified().ok()
    };
    let big_journal = dest.join("big.bin.xfer-journal");
    let done_bytes = || {
        files
            .iter()
            .filter(|(n, s)| in_place(n, *s))
            .map(|(_, s)| s)
            .sum::<u64>()
            + journal_chunks(&big_journal) as u64 * CHUNK
    };

    let mut child = ChildGuard(command(false).stdout(Stdio::null()).spawn()?);
    let deadline = Instant::now() + Duration::from_secs(60);
    // Every lane holds at most one chunk or one small file that is not yet in place.
    while !(gate.sent() >= TREE_BUDGET
        && done_bytes() + LANES * CHUNK + FRAMING_SLACK >= TREE_BUDGET)
    {
        if let Some(status) = child.0.try_wait()? {
            return Err(format!("xfer get ended before the stall: {status}").into());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "stalled with {} bytes through the relay but {} bytes done",
                gate.sent(),
                done_bytes()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.0.kill()?;
    child.0.wait()?;
    let placed: Vec<&(String, u64)> = files.iter().filter(|(n, s)| in_place(n, *s)).collect();
    let placed_bytes: u64 = placed.iter().map(|(_, s)| s).sum();
    let journalled = journal_chunks(&big_journal) as u64 * CHUNK;
    assert!(
        placed_bytes + journalled > 0,
        "nothing was kept before the kill"
    );
    assert!(
        placed.len() < files.len(),
        "everything arrived: nothing to resume"
    );

    let report = rerun_with_gate_open(&gate, command(true)).await?;
    let field = |name: &str| {
        report[name]
            .as_u64()
            .ok_or_else(|| format!("no {name} in {report}"))
    };
    assert_eq!(field("skipped")?, placed.len() as u64, "{report}");
    assert_eq!(
        field("fetched")?,
        (files.len() - placed.len()) as u64,
        "{report}"
    );
    assert_eq!(field("resumed_bytes")?, journalled, "{report}");
    // Only what was missing crossed the wire again: no file in place, no journalled chunk
    // (end-game duplicates of the big file: at most one chunk per other lane).
    let missing = total - placed_bytes - journalled;
    let through_relay = gate.sent_fresh.load(Ordering::Acquire);
    assert!(
        (missing..=missing + (LANES - 1) * CHUNK + FRAMING_SLACK).contains(&through_relay),
        "the relay carried {through_relay} bytes for {missing} missing"
    );
    for (name, _) in &files {
        assert_eq!(
            sha256_hex(&dest.join(name))?,
            sha256_hex(&root.join(name))?,
            "{name} differs"
        );
    }
    servers.shutdown().await;
    Ok(())
}
