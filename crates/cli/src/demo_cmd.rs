//! `xfer demo`: everything on loopback, no arguments needed. Generates a file, serves it with a
//! fresh self-signed certificate over HTTP/1.1, HTTP/2 and QUIC, fetches it with each, and
//! checks every copy against the original's SHA-256.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::Args;
use xfer::crates::common::synthetic;
use xfer::serve::{ServeConfig, ServerTls, Servers};
use xfer::{ClientConfig, ClientTlsOptions, GetConfig, HttpVersion, Sha256Digest};

use crate::client_args::size_arg;
use crate::progress_bar::Display;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Size of the generated file.
    #[arg(long, value_parser = size_arg, default_value = "256MiB")]
    pub size: u64,
    /// Keep the generated files in this directory instead of a temporary one.
    #[arg(long)]
    pub keep: Option<std::path::PathBuf>,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let tmp = tempfile::tempdir().context("creating a temporary directory")?;
    let base = args
        .keep
        .clone()
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let served = base.join("served");
    let fetched = base.join("fetched");
    for d in [&served, &fetched] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let source = served.join("data.bin");
    eprintln!(
        "generating {} of test data in {}",
        xfer::HumanBytes(args.size),
        source.display()
    );
    let want = generate(&source, args.size)?;

    let mut cfg = ServeConfig::new(
        &served,
        ServerTls::SelfSigned {
            dir: base.join("cert"),
            names: vec!["127.0.0.1".into(), "localhost".into()],
        },
    );
    cfg.http.listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let servers = Servers::start(cfg).await.context("starting the servers")?;
    let ca = servers
        .self_signed
        .as_ref()
        .map(|s| s.cert_path.clone())
        .context("no certificate was generated")?;
    let client = ClientConfig::default().with_tls(ClientTlsOptions {
        client_identity: None,
        ca_certs: vec![ca],
        dangerous_insecure: false,
    });
    eprintln!(
        "serving {} at {} and {}",
        served.display(),
        servers.http_base(),
        servers.quic_base().unwrap_or_default()
    );

    let mut runs: Vec<(&str, String, ClientConfig)> = Vec::new();
    let mut h1 = client.clone();
    h1.http.version = HttpVersion::Http1;
    runs.push((
        "HTTP/1.1, 8 connections",
        format!("{}/data.bin", servers.http_base()),
        h1,
    ));
    let mut h2 = client.clone();
    h2.http.version = HttpVersion::Http2;
    runs.push((
        "HTTP/2, 1 connection x 8 streams",
        format!("{}/data.bin", servers.http_base()),
        h2,
    ));
    if let Some(q) = servers.quic_base() {
        runs.push((
            "QUIC, 2 connections x 4 streams",
            format!("{q}/data.bin"),
            client.clone(),
        ));
    }

    let mut failed = false;
    for (i, (name, url, client)) in runs.into_iter().enumerate() {
        let dest = fetched.join(format!("data-{i}.bin"));
        let transport = xfer::transport_for(&url, &client)?;
        let download = xfer::Download::new(
            transport.clone(),
            &url,
            &dest,
            GetConfig {
                overwrite: true,
                ..GetConfig::default()
            },
        );
        let display = Display::start(download.progress(), false);
        let result = download.run().await;
        transport.close().await;
        let report = result.with_context(|| format!("fetching {url}"))?;
        display.finish();
        let ok = report.sha256.as_deref() == Some(want.to_hex().as_str());
        failed |= !ok;
        println!(
            "{name:<34} {}  [{}]",
            report.summary(),
            if ok { "identical" } else { "MISMATCH" }
        );
        let _ = std::fs::remove_file(&dest);
    }
    servers.shutdown().await;
    if failed {
        bail!("a fetched copy differs from the original");
    }
    println!("original sha256 {want}: every copy verified chunk by chunk and whole");
    Ok(ExitCode::SUCCESS)
}

/// Write `size` pseudo-random bytes to `path`; returns their SHA-256.
fn generate(path: &std::path::Path, size: u64) -> anyhow::Result<Sha256Digest> {
    let mut f = std::io::BufWriter::with_capacity(
        1 << 20,
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    let mut hasher = xfer::crates::core::digest::Sha256Hasher::new();
    let mut buf = vec![0u8; 4 << 20];
    let mut off = 0u64;
    while off < size {
        let n = usize::try_from(size - off)
            .unwrap_or(buf.len())
            .min(buf.len());
        synthetic::fill(1, off, &mut buf[..n]);
        hasher.update(&buf[..n]);
        f.write_all(&buf[..n])
            .with_context(|| format!("writing {}", path.display()))?;
        off += n as u64;
    }
    f.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(hasher.finish())
}
