//! Load: many concurrent clients (mixed sizes, HTTP/1.1, HTTP/2 and QUIC at once) against one
//! `xfer serve` process. Every download ends byte-identical and the server's peak RSS stays
//! under the bound docs/security.md states for its memory budget. The full run (200 clients
//! and more) is `scripts/bench-load.sh`; this is its modest size for the test command.
//!
//! The clients run in this process, one transport (own connections) each; the server is a
//! child process so its resident memory is its own.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use xfer::{ClientConfig, ClientTlsOptions, Download, GetConfig, HttpVersion, LaneLayout};

use crate::support::{
    free_port, rss_bound_kib, rss_kib, sha256_file, start_server, write_random_file, xfer_bin,
    BoxError, ChildGuard, TestResult,
};

/// Clients at once, spread over the three transports.
const CLIENTS: usize = 200;
/// The server's memory budget: small, so the clients contend for it.
const BUDGET_MIB: u64 = 48;
/// File sizes the clients take turns with: a few blocks, not block-aligned, several chunks.
const SIZES: [u64; 4] = [48 << 10, 300 << 10, (1 << 20) + 7, 3 << 20];

#[derive(Debug, Clone, Copy)]
enum Transport {
    Http1,
    Http2,
    Quic,
}

fn spawn_server(root: &Path, cert_dir: &Path, addr: SocketAddr) -> Result<ChildGuard, BoxError> {
    let mut cmd = Command::new(xfer_bin());
    cmd.arg("serve")
        .arg(root)
        .args(["--self-signed", "--listen", &addr.to_string()])
        .arg("--cert-dir")
        .arg(cert_dir)
        .args(["--memory-budget", &format!("{BUDGET_MIB}MiB")])
        // Every client comes from 127.0.0.1: the per-address cap (128) is for the internet.
        .args(["--max-connections-per-address", "1024"]);
    start_server(cmd, addr)
}

fn client_for(transport: Transport, ca: &Path) -> ClientConfig {
    let mut client = ClientConfig::default().with_tls(ClientTlsOptions {
        ca_certs: vec![ca.to_path_buf()],
        dangerous_insecure: false,
        client_identity: None,
    });
    let (connections, streams) = match transport {
        Transport::Http1 => {
            client.http.version = HttpVersion::Http1;
            (2, 1)
        }
        Transport::Http2 => {
            client.http.version = HttpVersion::Http2;
            (1, 4)
        }
        Transport::Quic => (1, 4),
    };
    client.with_lanes(LaneLayout {
        connections: Some(connections),
        streams_per_connection: Some(streams),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_on_every_transport_get_identical_bytes_in_bounded_memory() -> TestResult
{
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let out = dir.path().join("out");
    let cert_dir = dir.path().join("cert");
    std::fs::create_dir(&root)?;
    std::fs::create_dir(&out)?;
    let mut expected = Vec::new();
    for (i, size) in SIZES.iter().enumerate() {
        expected.push(write_random_file(
            &root.join(format!("f{i}.bin")),
            *size,
            60 + i as u64,
        )?);
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let server = spawn_server(&root, &cert_dir, addr)?;
    let pid = server.0.id();
    let ca = cert_dir.join("cert.pem");

    let mut downloads = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let transport = [Transport::Http1, Transport::Http2, Transport::Quic][c % 3];
        let file = c % SIZES.len();
        let url = match transport {
            Transport::Quic => format!("quic://{addr}/f{file}.bin"),
            _ => format!("https://{addr}/f{file}.bin"),
        };
        let dest = out.join(format!("c{c}.bin"));
        let client = client_for(transport, &ca);
        let get = GetConfig {
            chunk_size: 1 << 20,
            ..GetConfig::default()
        };
        let download = Download::new(xfer::transport_for(&url, &client)?, &url, &dest, get);
        downloads.spawn(async move {
            let report = download.run().await;
            (c, transport, file, dest, report)
        });
    }
    let mut failed = Vec::new();
    let done = tokio::time::timeout(Duration::from_secs(400), async {
        while let Some(joined) = downloads.join_next().await {
            let (c, transport, file, dest, report) = joined?;
            match report {
                Ok(r) if r.size == SIZES[file] && sha256_file(&dest)? == expected[file] => {}
                Ok(r) => failed.push(format!("client {c} ({transport:?}): wrong bytes ({r:?})")),
                Err(e) => failed.push(format!("client {c} ({transport:?}): {e}")),
            }
        }
        Ok::<_, BoxError>(())
    })
    .await;
    done.map_err(|_| "the clients did not finish within 400 s")??;
    assert!(
        failed.is_empty(),
        "{} clients failed:\n{}",
        failed.len(),
        failed.join("\n")
    );

    let (peak, now) = rss_kib(pid)?;
    // HTTP/1.1 clients hold two connections, the others one each.
    let connections = (CLIENTS as u64).div_ceil(3) * 2 + (CLIENTS as u64) * 2 / 3;
    let bound = rss_bound_kib(BUDGET_MIB, connections);
    eprintln!(
        "server RSS with {CLIENTS} clients: peak {peak} KiB, {now} KiB after; bound {bound} KiB"
    );
    assert!(
        peak <= bound,
        "server peak RSS {peak} KiB exceeds the bound of {bound} KiB (budget {BUDGET_MIB} MiB)"
    );
    drop(server);
    Ok(())
}
