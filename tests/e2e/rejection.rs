//! What must be refused is refused end to end: paths that climb out of the served directory
//! (plain and percent-encoded) and ranges outside the file get a permanent error, never bytes.

use xfer::crates::core::transport::RangeRequest;
use xfer::{Download, GetConfig, TransferError};

use crate::support::{each_transport, write_random_file, Fixture, Proto, TestResult};

/// Request paths that name `../secret.txt` (beside the served root) or `/etc/passwd`.
const ESCAPES: &[&str] = &[
    "/../secret.txt",
    "/%2e%2e/secret.txt",
    "/%2E%2E/secret.txt",
    "/..%2fsecret.txt",
    "/%2e%2e%2fsecret.txt",
    "/sub/../../secret.txt",
    "/sub/%2e%2e/%2e%2e/secret.txt",
    "/..%5csecret.txt",
    "/../../../../../../etc/passwd",
    "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
    "//etc/passwd",
    "/%2fetc%2fpasswd",
    "/public.bin%00.txt",
];

/// A 4xx from the server (so the server, not the client, is what refused), never retried.
fn assert_refused(what: &str, err: &TransferError) {
    assert!(
        !err.is_retryable(),
        "{what}: the error must be permanent, got {err}"
    );
    match err {
        TransferError::Status { status, .. } => {
            assert!((400..500).contains(status), "{what}: status {status}")
        }
        other => panic!("{what}: expected a 4xx status from the server, got {other}"),
    }
}

async fn traversal_refused(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    std::fs::write(
        fx.dir.path().join("secret.txt"),
        b"top secret, outside the root\n",
    )?;
    std::fs::create_dir(fx.root().join("sub"))?;
    write_random_file(&fx.root().join("public.bin"), 4096, 1)?;
    // The fixture is sound: a legitimate path is served.
    let ok = xfer::transport_for(&fx.url("/sub/../public.bin"), &fx.client)?
        .stat()
        .await;
    assert!(
        matches!(&ok, Ok(info) if info.size == 4096)
            || ok.as_ref().is_err_and(|e| !e.is_retryable()),
        "a dot segment inside the root: {ok:?}"
    );
    assert_eq!(
        xfer::transport_for(&fx.url("/public.bin"), &fx.client)?
            .stat()
            .await?
            .size,
        4096
    );

    for path in ESCAPES {
        let url = fx.url(path);
        let transport = xfer::transport_for(&url, &fx.client)?;
        match transport.stat().await {
            Ok(info) => panic!("{url}: stat succeeded ({} bytes): {info:?}", info.size),
            Err(e) => assert_refused(&url, &e),
        }
        // The whole engine gives up at once and writes nothing.
        let dest = fx.out().join("escaped");
        let result = Download::new(transport, &url, &dest, GetConfig::default())
            .run()
            .await;
        assert!(result.is_err(), "{url}: download succeeded");
        assert!(!dest.exists(), "{url}: destination written");
    }
    fx.shutdown().await;
    Ok(())
}

async fn bad_ranges_refused(proto: Proto) -> TestResult {
    let fx = Fixture::start(proto).await?;
    let size = 100_000u64;
    write_random_file(&fx.root().join("r.bin"), size, 2)?;
    let transport = xfer::transport_for(&fx.url("/r.bin"), &fx.client)?;
    let info = transport.stat().await?;
    assert_eq!(info.size, size);
    // The client believes in a larger file (as if it changed), so the requests go out and the
    // server must be the one to refuse.
    for range in [
        size..size + 10,
        size + 500..size + 1000,
        size - 10..size + 10,
    ] {
        let mut lane = transport.open_lane(0).await?;
        let req = RangeRequest {
            range: range.clone(),
            expected_size: size + 1000,
            want_digest: true,
            validator: None,
            whole: false,
        };
        let outcome = match lane.fetch(&req).await {
            Err(e) => Err(e),
            Ok(mut body) => {
                let mut got = 0u64;
                loop {
                    match body.next_data().await {
                        Ok(Some(b)) => got += b.len() as u64,
                        Ok(None) => break Ok(got),
                        Err(e) => break Err(e),
                    }
                }
            }
        };
        match outcome {
            Ok(got) => panic!("range {range:?} of a {size}-byte file answered with {got} bytes"),
            // The server refuses (416), or its answer shows the client the real size
            // (`Content-Range: bytes */size`); either way nothing is retried.
            Err(e) => assert!(
                !e.is_retryable()
                    && matches!(
                        e,
                        TransferError::Status { status: 416, .. }
                            | TransferError::RemoteChanged { .. }
                    ),
                "range {range:?}: failed for the wrong reason: {e}"
            ),
        }
    }
    fx.shutdown().await;
    Ok(())
}

each_transport! {
    traversal_is_refused => traversal_refused;
    out_of_bounds_ranges_are_refused => bad_ranges_refused;
}
