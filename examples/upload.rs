//! Embedding xfer: upload a file in parallel, verified chunks.
//!
//! ```sh
//! cargo run --example upload                          # self-contained: a server on loopback
//! cargo run --example upload -- FILE URL TOKEN [CA]   # a real server
//! ```

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use xfer::crates::common::secret::Secret;
use xfer::crates::core::put::{PutConfig, Upload};
use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer::{ClientConfig, ClientTlsOptions, HumanBytes};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tmp = tempfile::tempdir()?;
    let mut servers = None;
    let (file, url, token, ca): (PathBuf, String, String, Option<PathBuf>) = match args.as_slice() {
        [file, url, token] => (file.into(), url.clone(), token.clone(), None),
        [file, url, token, ca] => (file.into(), url.clone(), token.clone(), Some(ca.into())),
        _ => {
            // No server given: one that lets the token "demo" write under /incoming.
            let root = tmp.path().join("root");
            std::fs::create_dir_all(&root)?;
            let access = tmp.path().join("access.toml");
            std::fs::write(
                &access,
                "[[token]]\nname = \"demo\"\ntoken = \"demo\"\naccess = \"write\"\nprefix = \"/incoming\"\n",
            )?;
            let tls = ServerTls::SelfSigned {
                dir: tmp.path().join("cert"),
                names: vec!["127.0.0.1".into()],
            };
            let mut cfg = ServeConfig::new(&root, tls);
            cfg.http.listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
            cfg.access_file = Some(access);
            cfg.uploads = Some(Default::default());
            let s = Servers::start(cfg).await?;
            let url = format!("{}/incoming/sample.bin", s.http_base());
            let ca = s.self_signed.as_ref().map(|c| c.cert_path.clone());
            servers = Some(s);
            let file = tmp.path().join("sample.bin");
            let data: Vec<u8> = (0..40u32 << 20).map(|i| (i >> 5) as u8).collect();
            std::fs::write(&file, data)?;
            (file, url, "demo".to_string(), ca)
        }
    };

    let client = ClientConfig::default()
        .with_tls(ClientTlsOptions {
            ca_certs: ca.into_iter().collect(),
            dangerous_insecure: false,
            client_identity: None,
        })
        .with_token(Secret::new(token));
    let transport = xfer::transport_for(&url, &client)?;
    // 4 MiB chunks over the transport's lanes; each is checked by the server on arrival.
    let config = PutConfig {
        chunk_size: 4 << 20,
        ..PutConfig::default()
    };
    let result = Upload::new(transport.clone(), &file, &url, config)
        .run()
        .await;
    transport.close().await;
    let report = result?;
    println!(
        "{} -> {}: {} in {:.2} s, {}; the server checked sha-256 {}",
        report.source,
        report.url,
        HumanBytes(report.size),
        report.seconds,
        xfer::format_bps(report.goodput_bps),
        report.sha256
    );
    if let Some(s) = servers {
        s.shutdown().await;
    }
    Ok(())
}
