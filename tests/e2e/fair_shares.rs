//! The zero-window abuse of issue 42, against the composed servers (one memory budget for
//! HTTP/1.1, HTTP/2 and QUIC): four HTTP/2 connections from 127.0.0.2 open 256 streams each on
//! a large file and never let the server send (a one-byte stream window), while a client on
//! 127.0.0.1 downloads 64 MiB over each protocol. The abuser reaches its address's share of
//! the budget and waits there; the download never waits for bytes the abuser holds.
//!
//! Times are printed, not asserted (the machines are shared): `unloaded` and `beside the
//! abuser` for each protocol, which docs/security.md quotes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpSocket;
use xfer::crates::common::MemoryBudget;
use xfer::GetConfig;

use crate::support::{
    each_transport, sha256_file, write_random_file, BoxError, Fixture, Proto, TestResult, MIB,
};

const ABUSIVE_CONNECTIONS: usize = 4;
const ABUSIVE_STREAMS: u32 = 256;
const SIZE: u64 = 64 * MIB;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The abusive bytes: the preface, a one-byte initial stream window, and `streams` GETs of
/// `path`, each ending its request.
fn abusive_requests(path: &str, streams: u32) -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE (0x4) = 1.
    out.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 1]));
    for i in 0..streams {
        // HPACK: :method GET, :scheme http, :path and :authority as literals of indexed names.
        let mut h = vec![0x82, 0x86];
        for (index, value) in [(4u8, path), (1u8, "x")] {
            h.push(index);
            h.push(value.len() as u8);
            h.extend_from_slice(value.as_bytes());
        }
        out.extend(frame(0x1, 0x1 | 0x4, 1 + 2 * i, &h));
    }
    out
}

/// Something kept open for the test's length: the abuser's connection.
type Held = Box<dyn std::any::Any + Send>;

/// One abusive connection from 127.0.0.2, over TLS (ALPN h2) when the fixture serves TLS.
async fn abuser(fx: &Fixture, to: SocketAddr, path: &str) -> Result<Held, BoxError> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from(([127, 0, 0, 2], 0)))?;
    let tcp = socket.connect(to).await?;
    let bytes = abusive_requests(path, ABUSIVE_STREAMS);
    let Some(ca) = fx.ca_cert() else {
        let mut tcp = tcp;
        tcp.write_all(&bytes).await?;
        return Ok(Box::new(tcp));
    };
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(&ca)?;
    for cert in rustls_pemfile_certs(&pem)? {
        roots.add(cert)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let mut stream = connector.connect(name, tcp).await?;
    stream.write_all(&bytes).await?;
    stream.flush().await?;
    Ok(Box::new(stream))
}

/// The certificates of a PEM file.
fn rustls_pemfile_certs(
    pem: &[u8],
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, BoxError> {
    use rustls::pki_types::pem::PemObject as _;
    let certs =
        rustls::pki_types::CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()?;
    Ok(certs)
}

async fn timed_download(fx: &Fixture, name: &str) -> Result<Duration, BoxError> {
    let dest = fx.out().join(name);
    let started = Instant::now();
    xfer::download(&fx.url("/f.bin"), &dest, &fx.client, GetConfig::default()).await?;
    let took = started.elapsed();
    std::fs::remove_file(&dest)?;
    Ok(took)
}

async fn abuse_beside_a_download(proto: Proto) -> TestResult {
    let budget = MemoryBudget::new(64 * MIB);
    let fx = Fixture::start_with(proto, |cfg, _| {
        cfg.http.memory_budget = budget.clone();
        // Far longer than the test: only the shares keep the download from waiting.
        cfg.http.stall_timeout = Duration::from_secs(600);
    })
    .await?;
    let expected = write_random_file(&fx.root().join("f.bin"), SIZE, 42)?;
    write_random_file(&fx.root().join("big.bin"), 256 * MIB, 43)?;

    let unloaded = timed_download(&fx, "unloaded").await?;

    let to: SocketAddr = fx
        .servers
        .http_base()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()?;
    let mut held = Vec::new();
    for _ in 0..ABUSIVE_CONNECTIONS {
        held.push(abuser(&fx, to, "/big.bin").await?);
    }
    // The abusive address at its ceiling: from here on its streams wait in their own line.
    let deadline = Instant::now() + Duration::from_secs(60);
    while budget.stats().ceiling_waits == 0 {
        assert!(
            Instant::now() < deadline,
            "{proto:?}: the abuser never reached its ceiling: {:?}",
            budget.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held_bytes = budget.in_use();

    let dest = fx.out().join("loaded");
    let started = Instant::now();
    xfer::download(&fx.url("/f.bin"), &dest, &fx.client, GetConfig::default()).await?;
    let loaded = started.elapsed();
    assert_eq!(sha256_file(&dest)?, expected, "{proto:?}");
    println!(
        "{proto:?}: 64 MiB unloaded {unloaded:?}, beside 4 x 256 never-read streams {loaded:?} ({:.2}x); the abuser held {} MiB of {}",
        loaded.as_secs_f64() / unloaded.as_secs_f64(),
        held_bytes >> 20,
        budget.limit() >> 20
    );
    assert!(
        held_bytes <= budget.limit() / 4 + (256 << 10),
        "{proto:?}: one address holds {held_bytes} of {} bytes",
        budget.limit()
    );
    let stats = budget.stats();
    assert_eq!(
        stats.shared_waits, 0,
        "{proto:?}: the download waited for bytes the abuser held: {stats:?}"
    );
    drop(held);
    fx.shutdown().await;
    Ok(())
}

each_transport! {
    abuse => abuse_beside_a_download;
}
