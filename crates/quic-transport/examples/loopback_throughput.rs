//! Loopback throughput of the QUIC transport: a server and a client in one process, the
//! synthetic resource fetched in 8 MiB ranges over all lanes, with SHA-256 trailers checked.
//!
//! `cargo run --release -p xfer-quic --example loopback_throughput -- [size] [connections] [streams]`
//! e.g. `-- 1GiB 2 4`. A measurement aid, not a test: loopback has no loss and no delay.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Mutex;
use xfer_common::tls::{self, ClientTlsOptions};
use xfer_core::digest::Sha256Hasher;
use xfer_core::layout::LaneLayout;
use xfer_core::size::parse_size;
use xfer_core::transport::{RangeRequest, Transport};
use xfer_quic::{QuicClientConfig, QuicServer, QuicServerConfig, QuicTransport};

const CHUNK: u64 = 8 << 20;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size = parse_size(args.first().map_or("1GiB", String::as_str))?;
    let connections: usize = args.get(1).map_or(Ok(2), |s| s.parse())?;
    let streams: usize = args.get(2).map_or(Ok(4), |s| s.parse())?;

    let dir = tempfile::tempdir()?;
    let certs = tls::self_signed(&["127.0.0.1".to_string()], dir.path())?;
    let server_tls = tls::server_config(&certs.cert_path, &certs.key_path, &[])?;
    let server = QuicServer::bind(QuicServerConfig::new(
        dir.path().to_path_buf(),
        "127.0.0.1:0".parse()?,
        Arc::new(server_tls),
    ))
    .await?;
    let port = server.local_addr().port();
    tokio::spawn(server.serve(std::future::pending()));

    let url = format!("quic://127.0.0.1:{port}/.xfer/synthetic?size={size}&seed=1");
    let client = QuicTransport::new(
        &url,
        QuicClientConfig {
            tls: ClientTlsOptions {
                client_identity: None,
                ca_certs: vec![certs.cert_path.clone()],
                dangerous_insecure: false,
            },
            lanes: LaneLayout {
                connections: Some(connections),
                streams_per_connection: Some(streams),
            },
            ..QuicClientConfig::default()
        },
    )?;
    let client = Arc::new(client);
    let info = client.stat().await?;
    let next = Arc::new(Mutex::new(0u64));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for lane_index in 0..client.default_lanes() {
        let client = client.clone();
        let next = next.clone();
        let info = info.clone();
        tasks.push(tokio::spawn(async move {
            let mut lane = client.open_lane(lane_index).await?;
            let mut chunks = 0u64;
            loop {
                let start = {
                    let mut n = next.lock().await;
                    let s = *n;
                    *n = (s + CHUNK).min(info.size);
                    s
                };
                if start >= info.size {
                    return Ok::<_, xfer_core::TransferError>(chunks);
                }
                let req = RangeRequest {
                    range: start..(start + CHUNK).min(info.size),
                    expected_size: info.size,
                    want_digest: true,
                    validator: info.range_validator().map(str::to_string),
                    whole: false,
                };
                let mut body = lane.fetch(&req).await?;
                let mut hasher = Sha256Hasher::new();
                while let Some(b) = body.next_data().await? {
                    hasher.update(&b);
                }
                if Some(hasher.finish()) != body.trailer_digest() {
                    eprintln!("digest mismatch for {:?}", req.range);
                }
                chunks += 1;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} bytes in {secs:.2} s = {:.2} Gbit/s ({connections} connections x {streams} streams)",
        info.size,
        info.size as f64 * 8.0 / secs / 1e9
    );
    for s in client.connection_stats() {
        println!("{s:?}");
    }
    Ok(())
}
