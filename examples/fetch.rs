//! Embedding xfer: serve a directory and fetch a file from it, with live progress.
//!
//! ```sh
//! cargo run --release --example fetch                    # self-contained, on loopback
//! cargo run --release --example fetch -- URL DEST [CA]   # a real server
//! ```

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer::{ClientConfig, ClientTlsOptions, Download, GetConfig, HttpVersion, LaneLayout};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tmp = tempfile::tempdir()?;
    let mut servers = None;
    let (url, dest, ca) = match args.as_slice() {
        [url, dest] => (url.clone(), dest.into(), None),
        [url, dest, ca] => (url.clone(), dest.into(), Some(ca.into())),
        _ => {
            // No server given: serve 64 MiB from a temporary directory.
            let root = tmp.path().join("root");
            std::fs::create_dir_all(&root)?;
            let data: Vec<u8> = (0..64u32 << 20)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect();
            std::fs::write(root.join("sample.bin"), &data)?;
            let tls = ServerTls::SelfSigned {
                dir: tmp.path().join("cert"),
                names: vec!["127.0.0.1".into()],
            };
            let mut cfg = ServeConfig::new(&root, tls);
            cfg.http.listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
            let s = Servers::start(cfg).await?;
            let url = format!("{}/sample.bin", s.http_base());
            let ca = s.self_signed.as_ref().map(|c| c.cert_path.clone());
            servers = Some(s);
            (url, tmp.path().join("sample.bin"), ca)
        }
    };

    // Four HTTP/2 streams on one connection, 4 MiB chunks; every digest checked.
    let mut client = ClientConfig::default()
        .with_tls(ClientTlsOptions {
            client_identity: None,
            ca_certs: ca.into_iter().collect(),
            dangerous_insecure: false,
        })
        .with_lanes(LaneLayout {
            connections: Some(1),
            streams_per_connection: Some(4),
        });
    client.http.version = HttpVersion::Http2;
    let get = GetConfig {
        chunk_size: 4 << 20,
        overwrite: true,
        ..GetConfig::default()
    };

    let transport = xfer::transport_for(&url, &client)?;
    let download = Download::new(transport.clone(), &url, &dest, get);
    let progress = download.progress();
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let s = progress.snapshot();
            eprintln!(
                "{} of {} verified",
                xfer::HumanBytes(s.verified),
                xfer::HumanBytes(s.total)
            );
        }
    });
    let result = download.run().await;
    // Tell the server the connections are done (a QUIC server otherwise counts them open
    // until its idle timeout); HTTP's kernel does it anyway.
    transport.close().await;
    let report = result?;
    ticker.abort();
    println!("{}", report.summary());
    for lane in &report.lanes {
        println!(
            "  lane {} ({}): {} chunks, {}",
            lane.lane,
            lane.label,
            lane.chunks,
            xfer::format_bps(lane.throughput_bps)
        );
    }
    if let Some(s) = servers {
        s.shutdown().await;
    }
    Ok(())
}
