//! A server that lies: it advertises ranges and ignores them, declares an absurd size, or
//! alters the bytes it sends without any digest to betray it. Each ends in a clear answer.

use xfer::{ClientConfig, GetConfig};
use xfer_test_support::random_bytes;

use crate::support::{get_args, run_xfer, sha256_file, TestResult};
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

/// A server that declares 1 EiB for a small file: `xfer get` refuses before writing anything
/// (no destination, part file or journal), with exit code 5 and a message naming the sizes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exabyte_declared_size_is_refused_before_writing() -> TestResult {
    let server = TinyServer::start(
        random_bytes(1000, 5),
        Misbehaviour {
            declared_size: Some(1 << 60),
            ..Misbehaviour::default()
        },
    )
    .await?;
    let dir = tempfile::tempdir()?;
    let dest = dir.path().join("huge.bin");
    let out = run_xfer(get_args(&server.url("/huge.bin"), &dest, &["--quiet"])).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(
        stderr.contains("1152921504606846976") && stderr.contains("free"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())?.collect();
    assert!(left.is_empty(), "files written: {left:?}");

    // Beyond any filesystem: refused by size alone.
    let absurd = TinyServer::start(
        random_bytes(1000, 5),
        Misbehaviour {
            declared_size: Some(1 << 63),
            ..Misbehaviour::default()
        },
    )
    .await?;
    let err = xfer::download(
        &absurd.url("/f"),
        &dest,
        &ClientConfig::default(),
        GetConfig::default(),
    )
    .await
    .err()
    .ok_or("a declared 8 EiB was accepted")?;
    assert!(
        matches!(
            err,
            xfer::Error::Get(xfer::GetError::ImplausibleSize { .. })
        ),
        "{err:?}"
    );
    assert!(std::fs::read_dir(dir.path())?.next().is_none());
    Ok(())
}
