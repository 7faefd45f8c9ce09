//! Embedding xfer: fetch a whole directory tree, with a progress callback.
//!
//! ```sh
//! cargo run --example tree                      # self-contained: serves a tree on loopback
//! cargo run --example tree -- URL/ DEST/ [CA]   # a real server
//! ```

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer::tree::{TreeConfig, TreeDownload};
use xfer::{ClientConfig, ClientTlsOptions, HumanBytes};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tmp = tempfile::tempdir()?;
    let mut servers = None;
    let (url, dest, ca): (String, PathBuf, Option<PathBuf>) = match args.as_slice() {
        [url, dest] => (url.clone(), dest.into(), None),
        [url, dest, ca] => (url.clone(), dest.into(), Some(ca.into())),
        _ => {
            // No server given: a small run directory served from a temporary directory.
            let root = tmp.path().join("root");
            for (i, dir) in ["raw", "raw/day-1", "calib", "empty"].iter().enumerate() {
                std::fs::create_dir_all(root.join(dir))?;
                for f in 0..5 {
                    let size = (i + 1) * f * 40_000;
                    let bytes: Vec<u8> = (0..size).map(|b| (b * 7 + f) as u8).collect();
                    if *dir != "empty" {
                        std::fs::write(root.join(dir).join(format!("frame {f}.dat")), bytes)?;
                    }
                }
            }
            let tls = ServerTls::SelfSigned {
                dir: tmp.path().join("cert"),
                names: vec!["127.0.0.1".into()],
            };
            let mut cfg = ServeConfig::new(&root, tls);
            cfg.http.listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
            let s = Servers::start(cfg).await?;
            let url = format!("{}/", s.http_base());
            let ca = s.self_signed.as_ref().map(|c| c.cert_path.clone());
            servers = Some(s);
            (url, tmp.path().join("copy"), ca)
        }
    };

    let client = ClientConfig::default().with_tls(ClientTlsOptions {
        ca_certs: ca.into_iter().collect(),
        dangerous_insecure: false,
        client_identity: None,
    });
    let transport = xfer::transport_for(&url, &client)?;
    let tree = TreeDownload::new(transport.clone(), &url, &dest, TreeConfig::default());

    // The callback: here, a line every 200 ms; a GUI would redraw a bar instead.
    let progress = tree.progress();
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let s = progress.snapshot();
            eprintln!(
                "{}/{} files{}, {} of {}",
                s.files_done,
                s.files_total,
                if s.listing_done {
                    ""
                } else {
                    " (still listing)"
                },
                HumanBytes(s.bytes_done),
                HumanBytes(s.bytes_total)
            );
        }
    });
    let result = tree.run().await;
    // Closes the connections every file shared, telling the server.
    transport.close().await;
    let report = result?;
    ticker.abort();
    println!("{}", report.summary());
    for failed in &report.failed {
        println!("  failed: {} ({})", failed.path, failed.error);
    }
    if let Some(s) = servers {
        s.shutdown().await;
    }
    if report.failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{} files failed", report.failed.len()).into())
    }
}
