//! Embedding xfer: serve a directory from inside another program, and stop it cleanly.
//!
//! ```sh
//! cargo run --example serve -- DIR    # serve DIR on 127.0.0.1, until Ctrl-C
//! cargo run --example serve           # serve a temporary directory, fetch from it, stop
//! ```

use std::net::{Ipv4Addr, SocketAddr};

use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer::{ClientConfig, ClientTlsOptions, Download, GetConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1);
    let tmp = tempfile::tempdir()?;
    let root = match &dir {
        Some(d) => d.into(),
        None => {
            let root = tmp.path().join("root");
            std::fs::create_dir_all(&root)?;
            std::fs::write(root.join("hello.txt"), b"served from inside a program\n")?;
            root
        }
    };
    let tls = ServerTls::SelfSigned {
        dir: tmp.path().join("cert"),
        names: vec!["127.0.0.1".into(), "localhost".into()],
    };
    let mut cfg = ServeConfig::new(&root, tls);
    // Port 0: the system picks one; `Servers` says which.
    cfg.http.listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let servers = Servers::start(cfg).await?;
    let ca = servers
        .self_signed
        .as_ref()
        .map(|c| c.cert_path.clone())
        .ok_or("no certificate was generated")?;
    println!("serving {} at {}", root.display(), servers.http_base());
    if let Some(quic) = servers.quic_base() {
        println!("       and {quic}");
    }

    if dir.is_some() {
        println!("clients trust it with --ca-cert {}", ca.display());
        tokio::signal::ctrl_c().await?;
    } else {
        // Fetch from ourselves over QUIC, to show the server works, then stop.
        let client = ClientConfig::default().with_tls(ClientTlsOptions {
            ca_certs: vec![ca],
            dangerous_insecure: false,
            client_identity: None,
        });
        let url = format!(
            "{}/hello.txt",
            servers.quic_base().unwrap_or_else(|| servers.http_base())
        );
        let dest = tmp.path().join("hello.txt");
        let get = GetConfig::default();
        let report = Download::new(xfer::transport_for(&url, &client)?, &url, &dest, get)
            .run()
            .await?;
        print!("{}: {}", report.summary(), std::fs::read_to_string(&dest)?);
    }
    // Stop accepting, let what is in flight finish, then return.
    servers.shutdown().await;
    Ok(())
}
