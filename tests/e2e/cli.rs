//! The `xfer` binary's failures end to end: exit codes and messages, and that a failed run
//! leaves the destination alone.

use crate::support::{run_xfer, write_random_file, Fixture, Proto, TestResult};

fn args(fx: &Fixture, path: &str, dest: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        "get".to_string(),
        fx.url(path),
        "-o".to_string(),
        dest.display().to_string(),
        "--quiet".to_string(),
    ];
    if let Some(ca) = fx.ca_cert() {
        a.push("--ca-cert".into());
        a.push(ca.display().to_string());
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_file_exits_3_naming_url_and_status() -> TestResult {
    let fx = Fixture::start(Proto::Http1Tls).await?;
    let dest = fx.out().join("nothing");
    let out = run_xfer(args(&fx, "/no-such-file.bin", &dest, &[])).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
    assert!(
        stderr.contains(&fx.url("/no-such-file.bin")),
        "message must name the URL: {stderr}"
    );
    assert!(
        stderr.contains("404"),
        "message must name the status: {stderr}"
    );
    assert!(!dest.exists());
    fx.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_destination_exits_5_untouched() -> TestResult {
    let fx = Fixture::start(Proto::Http2Tls).await?;
    write_random_file(&fx.root().join("a.bin"), 300_000, 3)?;
    let dest = fx.out().join("a.bin");
    std::fs::write(&dest, b"precious local data")?;
    let out = run_xfer(args(&fx, "/a.bin", &dest, &[])).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "stderr: {stderr}");
    assert!(stderr.contains("exists"), "{stderr}");
    assert_eq!(std::fs::read(&dest)?, b"precious local data");
    assert!(!fx.out().join("a.bin.part").exists());
    fx.shutdown().await;
    Ok(())
}

/// A SHA-256 (hex) that differs from `real` in its last digit.
fn another_digest(real: &str) -> String {
    let last = if real.ends_with('0') { "1" } else { "0" };
    format!("{}{last}", &real[..real.len() - 1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_expected_sha256_exits_4_without_dest() -> TestResult {
    let fx = Fixture::start(Proto::Quic).await?;
    let real = write_random_file(&fx.root().join("b.bin"), 3_000_000, 4)?;
    let wrong = another_digest(&real);
    let dest = fx.out().join("b.bin");
    let out = run_xfer(args(
        &fx,
        "/b.bin",
        &dest,
        &["--expect-sha256", &wrong, "--chunk-size", "1MiB"],
    ))
    .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "stderr: {stderr}");
    assert!(
        stderr.contains(&wrong),
        "message must show the expected digest: {stderr}"
    );
    assert!(!dest.exists(), "destination written despite the mismatch");
    fx.shutdown().await;
    Ok(())
}

/// A server that has hashed a file declares its digest in its first answer. One other than the
/// expected digest stops the command before any byte is written, with the exit code of a
/// mismatch found after the transfer (which a server that has not hashed the file yet gives).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_digest_other_than_the_expected_one_exits_4_before_writing() -> TestResult {
    let fx = Fixture::start(Proto::Http1Tls).await?;
    let real = write_random_file(&fx.root().join("c.bin"), 3_000_000, 5)?;
    let wrong = another_digest(&real);
    let mut declared = false;
    // The first request starts the server's background hash; a few more find it done.
    for attempt in 0..50 {
        let dest = fx.out().join(format!("c-{attempt}.bin"));
        let out = run_xfer(args(&fx, "/c.bin", &dest, &["--expect-sha256", &wrong])).await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "stderr: {stderr}");
        assert!(
            stderr.contains(&wrong),
            "expected digest not shown: {stderr}"
        );
        assert!(!dest.exists(), "destination written despite the mismatch");
        if stderr.contains("declares SHA-256") {
            assert!(
                stderr.contains(&real),
                "declared digest not shown: {stderr}"
            );
            let part = fx.out().join(format!("c-{attempt}.bin.part"));
            assert!(
                !part.exists(),
                "bytes written although the server said what it holds"
            );
            declared = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(declared, "the server never declared the file's digest");
    fx.shutdown().await;
    Ok(())
}

/// A link planted at `<dest>.part` or `<dest>.xfer-journal`: exit 5 naming it, the link's
/// target unchanged, no destination, and the link still a link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_at_a_staging_name_exits_5_untouched() -> TestResult {
    let fx = Fixture::start(Proto::Http1Tls).await?;
    write_random_file(&fx.root().join("a.bin"), 3 << 20, 4)?;
    let target = fx.out().join("precious");
    for suffix in [".part", ".xfer-journal"] {
        std::fs::write(&target, b"precious local data")?;
        let dest = fx.out().join("a.bin");
        let link = fx.out().join(format!("a.bin{suffix}"));
        std::os::unix::fs::symlink(&target, &link)?;
        let out = run_xfer(args(&fx, "/a.bin", &dest, &["--chunk-size", "1MiB"])).await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{suffix}: {stderr}");
        assert!(stderr.contains("symbolic link"), "{suffix}: {stderr}");
        assert!(
            stderr.contains(&format!("a.bin{suffix}")),
            "{suffix}: {stderr}"
        );
        assert_eq!(std::fs::read(&target)?, b"precious local data", "{suffix}");
        assert!(std::fs::symlink_metadata(&link)?.file_type().is_symlink());
        assert!(std::fs::symlink_metadata(&dest).is_err(), "{suffix}");
        std::fs::remove_file(&link)?;
    }
    fx.shutdown().await;
    Ok(())
}
