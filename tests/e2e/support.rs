//! Fixtures shared by the end-to-end cases: transports, in-process servers on loopback port 0,
//! generated files, hashing, the `xfer` binary and external programs (nginx, curl).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xfer::crates::common::FaultInjection;
use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer::{ClientConfig, ClientTlsOptions, HttpVersion, LaneLayout};

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub const MIB: u64 = 1 << 20;

/// The transports every end-to-end case runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/1.1 over TLS, 8 connections.
    Http1Tls,
    /// HTTP/2 over TLS (ALPN h2), 1 connection × 8 streams.
    Http2Tls,
    /// HTTP/2 with prior knowledge over plain TCP, 1 connection × 8 streams.
    H2c,
    /// xfer/1 over QUIC, 2 connections × 4 streams.
    Quic,
}

impl Proto {
    /// Lanes the client configuration gives.
    pub fn lanes(self) -> usize {
        8
    }

    /// What the report's `protocol` field says for this transport.
    pub fn report_name(self) -> &'static str {
        match self {
            Proto::Http1Tls => "http/1.1",
            Proto::Http2Tls => "h2",
            Proto::H2c => "h2c",
            Proto::Quic => "quic",
        }
    }

    fn tls(self) -> bool {
        self != Proto::H2c
    }
}

/// A server on loopback serving `root` (a fresh temporary directory), and a client set up to
/// trust it over one transport.
pub struct Fixture {
    pub proto: Proto,
    pub dir: tempfile::TempDir,
    pub servers: Servers,
    pub client: ClientConfig,
}

impl Fixture {
    pub async fn start(proto: Proto) -> Result<Self, BoxError> {
        Self::start_with_fault(proto, None).await
    }

    /// As [`Fixture::start`], with the servers' corruption hook armed.
    pub async fn start_with_fault(
        proto: Proto,
        fault: Option<Arc<FaultInjection>>,
    ) -> Result<Self, BoxError> {
        Self::start_with(proto, |cfg, _| cfg.dangerous_fault = fault).await
    }

    /// As [`Fixture::start`], letting `configure` adjust the servers' configuration; it also
    /// gets the fixture's temporary directory, for files the configuration names.
    pub async fn start_with(
        proto: Proto,
        configure: impl FnOnce(&mut ServeConfig, &Path),
    ) -> Result<Self, BoxError> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir(dir.path().join("root"))?;
        std::fs::create_dir(dir.path().join("out"))?;
        let tls = if proto.tls() {
            ServerTls::SelfSigned {
                dir: dir.path().join("cert"),
                names: vec!["127.0.0.1".into(), "localhost".into()],
            }
        } else {
            ServerTls::Plain
        };
        let mut cfg = ServeConfig::new(dir.path().join("root"), tls);
        cfg.http.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        cfg.quic = proto == Proto::Quic;
        // Its own UDP port 0, rather than the TCP port's number, which another process may hold.
        cfg.quic_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        // A test that stops its server while a killed client's request is in flight ends
        // without waiting out the default 30 s grace for it.
        cfg.http.shutdown_grace = Duration::from_secs(1);
        configure(&mut cfg, dir.path());
        let servers = Servers::start(cfg).await?;

        let mut client = ClientConfig::default();
        if let Some(ss) = &servers.self_signed {
            client = client.with_tls(ClientTlsOptions {
                client_identity: None,
                ca_certs: vec![ss.cert_path.clone()],
                dangerous_insecure: false,
            });
        }
        match proto {
            Proto::Http1Tls => {
                client.http.version = HttpVersion::Http1;
                client = client.with_lanes(layout(8, 1));
            }
            Proto::Http2Tls | Proto::H2c => {
                client.http.version = HttpVersion::Http2;
                client = client.with_lanes(layout(1, 8));
            }
            Proto::Quic => client = client.with_lanes(layout(2, 4)),
        }
        Ok(Self {
            proto,
            dir,
            servers,
            client,
        })
    }

    /// The served directory.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// A directory for downloads, outside the served one.
    pub fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The URL of `path` (starting with `/`, sent verbatim) over this fixture's transport.
    pub fn url(&self, path: &str) -> String {
        let base = match self.proto {
            Proto::Quic => self.servers.quic_base().unwrap_or_default(),
            _ => self.servers.http_base(),
        };
        format!("{base}{path}")
    }

    /// The CA file clients must trust, when the server runs TLS.
    pub fn ca_cert(&self) -> Option<PathBuf> {
        self.servers
            .self_signed
            .as_ref()
            .map(|s| s.cert_path.clone())
    }

    pub async fn shutdown(self) {
        self.servers.shutdown().await;
    }
}

fn layout(connections: usize, streams: usize) -> LaneLayout {
    LaneLayout {
        connections: Some(connections),
        streams_per_connection: Some(streams),
    }
}

/// Test files and their digests come from the shared generator, so every test binary writes
/// the same bytes for the same seed.
pub use xfer_test_support::{sha256_hex as sha256_file, write_random_file};

/// The `xfer` binary built next to this test (`cargo build -p xfer-cli` puts it there).
pub fn xfer_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/e2e-<hash> -> target/<profile>/xfer
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("xfer"))
        .unwrap_or_default();
    assert!(
        bin.is_file(),
        "the xfer binary is missing at {}: run `cargo build -p xfer-cli` (same profile) before \
         these tests",
        bin.display()
    );
    bin
}

/// Run `xfer` with `args` to completion, off the async runtime.
pub async fn run_xfer(args: Vec<String>) -> Result<Output, BoxError> {
    let bin = xfer_bin();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin).args(&args).stdin(Stdio::null()).output()
    })
    .await??;
    Ok(out)
}

/// `xfer get URL -o DEST` followed by `extra`.
pub fn get_args(url: &str, dest: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "get".to_string(),
        url.to_string(),
        "-o".into(),
        dest.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// The report `xfer get --json` printed.
pub fn json_report(out: &Output) -> Result<serde_json::Value, BoxError> {
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "xfer get printed no JSON report ({e}); status {:?}, stderr:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
        .into()
    })
}

pub fn u64_field(report: &serde_json::Value, name: &str) -> Result<u64, BoxError> {
    report[name]
        .as_u64()
        .ok_or_else(|| format!("report has no integer {name}: {report}").into())
}

/// A child process killed when the test ends, however it ends.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Peak (`VmHWM`) and current (`VmRSS`) resident memory of a process, KiB.
pub fn rss_kib(pid: u32) -> Result<(u64, u64), BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64, BoxError> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no {name} in /proc/{pid}/status").into())
    };
    Ok((field("VmHWM:")?, field("VmRSS:")?))
}

/// The bound docs/security.md states for an `xfer serve` process, KiB: its memory budget,
/// plus a fixed allowance (runtime, thread stacks, TLS and certificate state, digest cache)
/// and an allowance per open connection (TLS records, hyper/h2/quinn state).
pub fn rss_bound_kib(budget_mib: u64, connections: u64) -> u64 {
    const PROCESS_MIB: u64 = 64;
    const PER_CONNECTION_KIB: u64 = 256;
    (budget_mib + PROCESS_MIB) * 1024 + PER_CONNECTION_KIB * connections
}

/// Wait until a download running as `running` has received `bytes`, failing if it ends first
/// or has not got there within `limit`.
pub async fn wait_received<T>(
    progress: &xfer::Progress,
    running: &tokio::task::JoinHandle<T>,
    bytes: u64,
    limit: Duration,
) {
    let deadline = Instant::now() + limit;
    while progress.snapshot().received < bytes {
        assert!(Instant::now() < deadline, "the download never started");
        assert!(
            !running.is_finished(),
            "the download ended before the fault"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A loopback TCP port free at the time of asking.
pub fn free_port() -> Result<u16, BoxError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Start `cmd` (an `xfer serve ...`) with no input or output, and return once it accepts
/// connections at `addr`.
pub fn start_server(mut cmd: Command, addr: SocketAddr) -> Result<ChildGuard, BoxError> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    wait_listening(addr, &mut child, Duration::from_secs(30))?;
    Ok(ChildGuard(child))
}

/// Wait until something accepts TCP connections at `addr`, or the child exits, or `limit`.
pub fn wait_listening(
    addr: SocketAddr,
    child: &mut Child,
    limit: Duration,
) -> Result<(), BoxError> {
    let deadline = Instant::now() + limit;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            return Err(format!("server process exited early with {status}").into());
        }
        if Instant::now() > deadline {
            return Err(format!("nothing listening at {addr} after {limit:?}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The prerequisite gate, shared by every test binary.
pub use xfer_test_support::gate::require_program;

/// Run one async case over every transport: `each_transport!(name => path::to::case);` makes
/// `mod name` with one `#[tokio::test]` per transport calling `case(Proto::...)`.
macro_rules! each_transport {
    ($($name:ident => $case:path;)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::support::{Proto, TestResult};

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn http1_tls() -> TestResult {
                $case(Proto::Http1Tls).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn http2_tls() -> TestResult {
                $case(Proto::Http2Tls).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn h2c() -> TestResult {
                $case(Proto::H2c).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn quic() -> TestResult {
                $case(Proto::Quic).await
            }
        }
    )*};
}
pub(crate) use each_transport;
