//! Interop with nginx: a stock server that supports ranges and ETags but sends no digests.
//!
//! nginx runs as a child process (`daemon off; master_process off;`) with a temporary prefix,
//! config and document root, listening on a loopback port. When the binary is missing the
//! tests skip with a message, except under `CI=true`, where a missing nginx fails them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xfer_core::layout::LaneLayout;
use xfer_core::transport::{RangeRequest, Transport};
use xfer_core::TransferError;
use xfer_http::{HttpClientConfig, HttpTransport, HttpVersion};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The nginx binary, or `None` to skip. Under CI a missing nginx is a failure.
fn require_nginx() -> Option<PathBuf> {
    xfer_test_support::gate::require_program(
        "nginx",
        &["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"],
        "nginx-light",
    )
}

struct Nginx {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    fn www(&self) -> PathBuf {
        self.dir.path().join("www")
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// Start nginx serving a fresh temporary directory; `h2c` makes the port speak HTTP/2 with
    /// prior knowledge instead of HTTP/1.1.
    fn start(bin: &Path, h2c: bool) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let dir = tempfile::tempdir()?;
        let www = dir.path().join("www");
        std::fs::create_dir(&www)?;
        for sub in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            std::fs::create_dir(dir.path().join(sub))?;
        }
        let mut last_err = String::new();
        // A port picked by binding to 0 may be taken again before nginx binds it; try a few.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let p = dir.path().display();
            let listen_opts = if h2c { " http2" } else { "" };
            let conf = format!(
                "daemon off;\nmaster_process off;\nworker_processes 1;\npid {p}/nginx.pid;\n\
                 error_log {p}/error.log info;\nevents {{ worker_connections 128; }}\n\
                 http {{\n  access_log off;\n  sendfile on;\n\
                 client_body_temp_path {p}/client_body;\n  proxy_temp_path {p}/proxy;\n\
                 fastcgi_temp_path {p}/fastcgi;\n  uwsgi_temp_path {p}/uwsgi;\n\
                 scgi_temp_path {p}/scgi;\n\
                 server {{\n    listen {addr}{listen_opts};\n    root {p}/www;\n  }}\n}}\n"
            );
            let conf_path = dir.path().join("nginx.conf");
            std::fs::write(&conf_path, conf)?;
            let mut child = Command::new(bin)
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(&conf_path)
                .arg("-e")
                .arg(dir.path().join("error.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?;
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if std::net::TcpStream::connect(addr).is_ok() {
                    return Ok(Self { child, addr, dir });
                }
                if let Some(status) = child.try_wait()? {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        use std::io::Read as _;
                        let _ = e.read_to_string(&mut err);
                    }
                    last_err = format!("nginx exited with {status}: {err}");
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_err = "nginx did not start listening within 10 s".into();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Err(last_err.into())
    }
}

fn pattern(len: usize) -> Vec<u8> {
    xfer_test_support::random_bytes(len, 31)
}

async fn stat_and_ranges(h2c: bool) -> TestResult {
    let Some(bin) = require_nginx() else {
        return Ok(());
    };
    let nginx = Nginx::start(&bin, h2c)?;
    let data = pattern(5_000_017);
    std::fs::write(nginx.www().join("data.bin"), &data)?;
    let cfg = if h2c {
        HttpClientConfig {
            version: HttpVersion::Http2,
            lanes: LaneLayout {
                connections: None,
                streams_per_connection: Some(4),
            },
            ..HttpClientConfig::default()
        }
    } else {
        HttpClientConfig {
            version: HttpVersion::Http1,
            lanes: LaneLayout {
                connections: Some(4),
                streams_per_connection: None,
            },
            ..HttpClientConfig::default()
        }
    };
    let t = HttpTransport::new(&format!("http://{}/data.bin", nginx.addr), cfg.clone())?;
    let info = t
        .stat()
        .await
        .map_err(|e| format!("{e}; nginx log:\n{}", nginx.error_log()))?;
    assert_eq!(info.size, data.len() as u64);
    assert!(info.accepts_ranges);
    assert!(
        info.range_validator().is_some(),
        "nginx sends a strong etag"
    );
    assert!(info.last_modified.is_some());
    assert_eq!(info.sha256, None, "nginx sends no repr-digest");
    assert_eq!(t.default_lanes(), 4);

    let mut lanes = Vec::new();
    for i in 0..4 {
        lanes.push(t.open_lane(i).await?);
    }
    let size = info.size;
    let cuts = [0, 1, size / 3, size - 1, size];
    let jobs = lanes.iter_mut().enumerate().map(|(i, lane)| {
        let req = RangeRequest {
            range: cuts[i]..cuts[i + 1],
            expected_size: size,
            // nginx ignores the digest request; the transport must cope without a trailer.
            want_digest: true,
            validator: info.range_validator().map(str::to_string),
            whole: false,
        };
        async move {
            let mut body = lane.fetch(&req).await?;
            let mut got = Vec::new();
            while let Some(b) = body.next_data().await? {
                got.extend_from_slice(&b);
            }
            let digest = body.trailer_digest();
            drop(body);
            Ok::<_, TransferError>((req.range, got, digest))
        }
    });
    for r in futures_util::future::join_all(jobs).await {
        let (range, got, digest) = r?;
        assert!(
            got == data[range.start as usize..range.end as usize],
            "{range:?}"
        );
        assert_eq!(digest, None);
    }

    // A changed file (new mtime and size, so a new etag) is caught by If-Range.
    std::fs::write(nginx.www().join("data.bin"), pattern(100))?;
    let mut lane = t.open_lane(0).await?;
    let req = RangeRequest {
        range: 0..10,
        expected_size: size,
        want_digest: false,
        validator: info.range_validator().map(str::to_string),
        whole: false,
    };
    match lane.fetch(&req).await {
        Err(TransferError::RemoteChanged { .. }) => {}
        Err(e) => return Err(format!("expected RemoteChanged, got {e}").into()),
        Ok(_) => return Err("a changed file was served as the old range".into()),
    }
    let missing = HttpTransport::new(&format!("http://{}/nope.bin", nginx.addr), cfg)?;
    assert!(matches!(
        missing.stat().await,
        Err(TransferError::Status { status: 404, .. })
    ));
    Ok(())
}

#[tokio::test]
async fn nginx_http1_stat_and_ranges() -> TestResult {
    stat_and_ranges(false).await
}

#[tokio::test]
async fn nginx_h2c_stat_and_ranges() -> TestResult {
    stat_and_ranges(true).await
}
