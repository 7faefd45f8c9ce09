//! `--limit-rate` (issue 41) through the real binary on loopback: `xfer get` of a file (HTTP/1.1
//! and QUIC), `xfer put` of a file and of a tree and `xfer get` of a tree stay under
//! the cap, as far as the
//! burst and the pieces already read allow; `--json` reports the cap; a rate that could mean
//! bytes or bits is refused before anything is sent.
//!
//! Upper bounds only: a loaded machine may move the bytes slower than the cap, never faster.

use std::path::Path;

use crate::support::{
    json_report, run_xfer, sha256_file, u64_field, write_random_file, BoxError, Fixture, Proto,
    TestResult, MIB,
};

/// The cap the cases run at: 64 Mbit/s, 8 MB/s, so that a few MiB take about half a second.
const CAP: &str = "64Mbit";
const CAP_BYTES: f64 = 8e6;
/// The bucket's burst at that rate: 50 ms of it.
const BURST: f64 = 400e3;
/// The largest piece one lane may read before it is charged: a TLS record stream or an
/// HTTP/1.1 read buffer (hyper's is at most about 400 KiB), with room.
const PIECE: f64 = 512.0 * 1024.0;

fn tls_args(fx: &Fixture) -> Vec<String> {
    fx.ca_cert()
        .map(|ca| vec!["--ca-cert".to_string(), ca.display().to_string()])
        .unwrap_or_default()
}

/// `bytes` in `seconds` is not above the cap by more than the burst and `lanes` pieces.
fn assert_under_cap(what: &str, bytes: u64, seconds: f64, lanes: f64, report: &serde_json::Value) {
    let bound = CAP_BYTES * seconds + BURST + lanes * PIECE;
    assert!(
        (bytes as f64) <= bound,
        "{what}: {bytes} bytes in {seconds:.3} s is above the cap of {CAP_BYTES} B/s \
         (bound {bound:.0}): {report}"
    );
    assert_eq!(
        report["limit_rate_bytes_per_second"].as_u64(),
        Some(CAP_BYTES as u64),
        "{what}: --json names the cap: {report}"
    );
}

/// Run `xfer` with `args`, the cap, `--json` and the fixture's CA; the report of a success.
async fn run_capped(fx: &Fixture, mut args: Vec<String>) -> Result<serde_json::Value, BoxError> {
    args.extend(["--json".to_string(), "--limit-rate".into(), CAP.into()]);
    args.extend(tls_args(fx));
    let out = run_xfer(args).await?;
    let report = json_report(&out)?;
    assert!(out.status.success(), "{report}");
    Ok(report)
}

fn seconds(report: &serde_json::Value) -> Result<f64, BoxError> {
    report["seconds"]
        .as_f64()
        .ok_or_else(|| format!("report has no seconds: {report}").into())
}

async fn get_one_file(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    let sha = write_random_file(&fx.root().join("f.bin"), 4 * MIB, 41)?;
    let dest = fx.out().join("f.bin");
    let args = vec![
        "get".to_string(),
        fx.url("/f.bin"),
        "-o".into(),
        dest.display().to_string(),
        "--lanes".into(),
        "2".into(),
        "--chunk-size".into(),
        "1MiB".into(),
    ];
    let report = run_capped(&fx, args).await?;
    assert_eq!(sha256_file(&dest)?, sha);
    let received = u64_field(&report, "received_bytes")?;
    assert_under_cap("get", received, seconds(&report)?, 2.0, &report);
    fx.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_stays_under_the_cap_http1() -> TestResult {
    get_one_file(Proto::Http1Tls).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_stays_under_the_cap_quic() -> TestResult {
    get_one_file(Proto::Quic).await
}

/// `xfer put SRC URL` with the upload token, capped; the report.
async fn put_capped(fx: &Fixture, src: &Path, url: String) -> Result<serde_json::Value, BoxError> {
    let token = fx.dir.path().join("upload.token");
    std::fs::write(&token, "upload-token\n")?;
    let args = vec![
        "put".to_string(),
        src.display().to_string(),
        url,
        "--token-file".into(),
        token.display().to_string(),
        "--lanes".into(),
        "2".into(),
    ];
    run_capped(fx, args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_stays_under_the_cap() -> TestResult {
    let fx = Fixture::start_with(Proto::Http2Tls, crate::upload::configure).await?;
    let src = fx.dir.path().join("src.bin");
    let sha = write_random_file(&src, 4 * MIB, 42)?;
    let report = put_capped(&fx, &src, fx.url("/in/src.bin")).await?;
    assert_eq!(sha256_file(&fx.root().join("in/src.bin"))?, sha);
    // Bodies are charged before they are handed on: no piece rides above the burst.
    let sent = u64_field(&report, "sent_bytes")?;
    assert_under_cap("put", sent, seconds(&report)?, 0.0, &report);
    fx.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_put_stays_under_the_cap() -> TestResult {
    let fx = Fixture::start_with(Proto::Http2Tls, crate::upload::configure).await?;
    let src = fx.dir.path().join("src");
    let shas = tree(&src)?;
    let report = put_capped(&fx, &src, fx.url("/in/tree/")).await?;
    for (name, sha) in &shas {
        let stored = fx.root().join("in/tree").join(name);
        assert_eq!(&sha256_file(&stored)?, sha, "{name}");
    }
    let sent = u64_field(&report, "sent_bytes")?;
    assert_under_cap("tree put", sent, seconds(&report)?, 0.0, &report);
    fx.shutdown().await;
    Ok(())
}

/// Eight files of 512 KiB, half of them in a subdirectory; their names and digests.
fn tree(root: &Path) -> Result<Vec<(String, String)>, BoxError> {
    std::fs::create_dir_all(root.join("sub"))?;
    (0..8u64)
        .map(|i| {
            let name = if i % 2 == 0 {
                format!("f{i}.bin")
            } else {
                format!("sub/f{i}.bin")
            };
            let sha = write_random_file(&root.join(&name), MIB / 2, i)?;
            Ok((name, sha))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_get_stays_under_the_cap() -> TestResult {
    let fx = Fixture::start(Proto::Http2Tls).await?;
    let shas = tree(&fx.root().join("tree"))?;
    let dest = fx.out().join("tree");
    let args = vec![
        "get".to_string(),
        fx.url("/tree/"),
        dest.display().to_string(),
        "--tree-lanes".into(),
        "2".into(),
    ];
    let report = run_capped(&fx, args).await?;
    for (name, sha) in &shas {
        assert_eq!(&sha256_file(&dest.join(name))?, sha, "{name}");
    }
    let received = u64_field(&report, "received_bytes")?;
    assert_under_cap("tree get", received, seconds(&report)?, 2.0, &report);
    fx.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_or_zero_rate_is_refused() -> TestResult {
    for (rate, says) in [
        ("200M", "200Mbit"),
        ("200Mb", "ambiguous"),
        ("0", "no limit"),
        ("fast", "expected a number"),
    ] {
        let out = run_xfer(vec![
            "get".into(),
            "http://127.0.0.1:9/never".into(),
            "-o".into(),
            Path::new("/nonexistent/never").display().to_string(),
            "--limit-rate".into(),
            rate.into(),
        ])
        .await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{rate}: {stderr}");
        assert!(
            stderr.contains("--limit-rate") && stderr.contains(says),
            "{rate}: {stderr}"
        );
    }
    Ok(())
}
