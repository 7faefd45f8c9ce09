//! A server that lies: it advertises ranges and ignores them, declares an absurd size, or
//! alters the bytes it sends without any digest to betray it. Each ends in a clear answer.

use xfer::{ClientConfig, GetConfig};
use xfer_test_support::random_bytes;

use crate::support::{sha256_file, TestResult};
use crate::tiny_server::{Misbehaviour, TinyServer};

/// Small chunks, so a few hundred KiB make many range requests.
fn small_chunks() -> GetConfig {
    GetConfig {
        chunk_size: 64 * 1024,
        ..GetConfig::default()
    }
}

/// `Accept-Ranges: bytes`, then 200 with the whole body for every range: one sequential
/// stream of the whole resource instead of a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertised_but_ignored_ranges_fall_back_to_one_stream() -> TestResult {
    let data = random_bytes(300_000, 4);
    let server = TinyServer::start(
        data.clone(),
        Misbehaviour {
            ignore_ranges: true,
            ..Misbehaviour::default()
        },
    )
    .await?;
    let dir = tempfile::tempdir()?;
    let dest = dir.path().join("whole.bin");
    let report = xfer::download(
        &server.url("/f"),
        &dest,
        &ClientConfig::default(),
        small_chunks(),
    )
    .await?;
    assert_eq!(std::fs::read(&dest)?, data);
    assert_eq!(report.chunks, 1, "{report:?}");
    assert!(!sha256_file(&dest)?.is_empty());
    Ok(())
}
