//! The report says exactly what a file was checked against: xfer's own server vouches for
//! every chunk; a server without digests vouches for nothing, and the report, the human line
//! and `--json` say so; `--require-digest` turns that into a failure that keeps the part file.

use xfer::GetConfig;
use xfer_test_support::random_bytes;

use crate::support::{
    each_transport, get_args, json_report, run_xfer, write_random_file, Fixture, Proto, TestResult,
    MIB,
};
use crate::tiny_server::{Misbehaviour, TinyServer};

async fn own_server_vouches_for_every_chunk(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    write_random_file(&fx.root().join("f.bin"), 5 * MIB + 3, 9)?;
    // Every chunk checked against the server's digest of it, whatever the first answer
    // carried: a fresh server's `Repr-Digest` may already be ready when lane 0's request
    // arrives just after the other lanes' speculative ones, and then the whole-file digest
    // alone would check the chunks.
    let get = GetConfig {
        chunk_size: MIB,
        check_every_chunk: true,
        ..GetConfig::default()
    };
    let n = u64::from(xfer::ChunkPlan::tapered(5 * MIB + 3, MIB)?.chunk_count());
    let report = xfer::download(&fx.url("/f.bin"), fx.out().join("f"), &fx.client, get).await?;
    let v = &report.verification;
    assert_eq!(v.chunks, n);
    assert_eq!(v.chunks_with_server_digest, n, "{v:?}");
    assert!(v.is_server_checked());
    assert!(
        report.verified_against[0].contains(&format!("all {n} chunks")),
        "{:?}",
        report.verified_against
    );
    fx.shutdown().await;
    Ok(())
}

/// A resource with per-chunk digests and no whole-file one (the synthetic resource never has
/// one): `whole_sha256` off checks every chunk against the server's and computes nothing more.
async fn chunk_digests_make_the_whole_file_pass_optional(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    let size = 5 * MIB + 3;
    let url = fx.url(&format!("/.xfer/synthetic?size={size}&seed=4"));
    let n = u64::from(xfer::ChunkPlan::tapered(size, MIB)?.chunk_count());
    let skip = GetConfig {
        chunk_size: MIB,
        whole_sha256: false,
        ..GetConfig::default()
    };
    let report = xfer::download(&url, fx.out().join("skip"), &fx.client, skip.clone()).await?;
    assert_eq!(report.sha256, None);
    assert_eq!(report.verification.chunks_with_server_digest, n);
    assert!(report.verification.is_server_checked());
    let mut want = vec![0u8; usize::try_from(size)?];
    xfer::crates::common::synthetic::fill(4, 0, &mut want);
    assert_eq!(std::fs::read(fx.out().join("skip"))?, want);
    // The default computes it, for the report.
    let whole = GetConfig {
        whole_sha256: true,
        ..skip
    };
    let report = xfer::download(&url, fx.out().join("whole"), &fx.client, whole).await?;
    assert_eq!(
        report.sha256,
        Some(xfer::Sha256Digest::of(&want).to_hex()),
        "{:?}",
        report.verified_against
    );
    fx.shutdown().await;
    Ok(())
}

each_transport! {
    own_server => own_server_vouches_for_every_chunk;
    whole_file_pass_optional => chunk_digests_make_the_whole_file_pass_optional;
}

/// `xfer get --json` in 64 KiB chunks, so a few hundred KiB make several range requests.
fn json_get(url: &str, dest: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let mut args = get_args(url, dest, &["--chunk-size", "64KiB", "--json"]);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Finding 4: nginx-like, no digests at all. The file is right, but nothing vouched for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_digests_is_not_claimed_as_verification() -> TestResult {
    let data = random_bytes(300_000, 8);
    let server = TinyServer::start(data.clone(), Misbehaviour::default()).await?;
    let dir = tempfile::tempdir()?;
    let dest = dir.path().join("plain.bin");
    let out = run_xfer(json_get(&server.url("/plain.bin"), &dest, &[])).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(std::fs::read(&dest)?, data);
    let report = json_report(&out)?;
    assert_eq!(report["verification"]["chunks_with_server_digest"], 0);
    assert_eq!(report["verification"]["server_whole_digest"], false);
    let against = report["verified_against"].to_string();
    assert!(!against.contains("Content-Digest"), "{against}");
    assert!(against.contains("local SHA-256 only"), "{against}");
    assert!(stderr.contains("NOT verified"), "{stderr}");
    Ok(())
}

/// One byte altered in every range and no digest to betray it: without `--require-digest`
/// the wrong file lands (the limit is inherent) but is not called verified; with it, the
/// transfer fails with exit code 4, nothing under the final name, the part file kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn altered_bytes_without_digests_fail_require_digest() -> TestResult {
    let data = random_bytes(300_000, 9);
    let server = TinyServer::start(
        data.clone(),
        Misbehaviour {
            flip_first_byte: true,
            ..Misbehaviour::default()
        },
    )
    .await?;
    let dir = tempfile::tempdir()?;

    let lax = dir.path().join("lax.bin");
    let out = run_xfer(json_get(&server.url("/f"), &lax, &[])).await?;
    assert_eq!(out.status.code(), Some(0));
    assert_ne!(
        std::fs::read(&lax)?,
        data,
        "the server's alteration reached the file"
    );
    let report = json_report(&out)?;
    assert_eq!(report["verification"]["chunks_with_server_digest"], 0);
    assert!(String::from_utf8_lossy(&out.stderr).contains("NOT verified"));

    let strict = dir.path().join("strict.bin");
    let out = run_xfer(json_get(&server.url("/f"), &strict, &["--require-digest"])).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        !strict.exists(),
        "a file nothing vouched for got its final name"
    );
    assert!(
        dir.path().join("strict.bin.part").exists(),
        "the part file was not kept"
    );
    let report = json_report(&out)?;
    assert_eq!(report["status"], "failed");
    assert_eq!(report["exit_code"], 4);
    assert!(stderr.contains("--require-digest"), "{stderr}");
    Ok(())
}

/// With nothing but per-chunk digests able to vouch for the file, the first chunk that comes
/// without one settles it: `--require-digest` refuses then, not after fetching every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_digest_refuses_at_the_first_unvouched_chunk() -> TestResult {
    let data = random_bytes(16 << 20, 10);
    let server = TinyServer::start(data.clone(), Misbehaviour::default()).await?;
    let dir = tempfile::tempdir()?;
    let dest = dir.path().join("strict.bin");
    let out = run_xfer(json_get(&server.url("/f"), &dest, &["--require-digest"])).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("no digest for chunk"), "{stderr}");
    assert!(!dest.exists());
    // 256 chunks of 64 KiB; what lanes had in flight when the first one landed may finish.
    let served = server.served();
    assert!(
        served < data.len() as u64 / 4,
        "{served} of {} bytes fetched before refusing",
        data.len()
    );
    Ok(())
}
