//! Whole transfers come out byte-identical: the destination's SHA-256 equals the source's and
//! the report's, over every transport, and once with a 256 MiB file over HTTP/1.1 + TLS.

use xfer::{Download, GetConfig};

use crate::support::{
    each_transport, sha256_file, write_random_file, Fixture, Proto, TestResult, MIB,
};

/// Fetch a generated file of `size` bytes in `chunk`-byte chunks and check every byte.
async fn fetch_identical(proto: Proto, size: u64, chunk: u64) -> TestResult {
    let fx = Fixture::start(proto).await?;
    let src = fx.root().join("data.bin");
    let expected = {
        let src = src.clone();
        tokio::task::spawn_blocking(move || write_random_file(&src, size, size ^ chunk)).await??
    };
    let dest = fx.out().join("data.bin");
    let transport = xfer::transport_for(&fx.url("/data.bin"), &fx.client)?;
    let config = GetConfig {
        chunk_size: chunk,
        ..GetConfig::default()
    };
    let report = Download::new(transport, fx.url("/data.bin"), &dest, config)
        .run()
        .await?;

    assert_eq!(report.size, size);
    assert_eq!(report.protocol, proto.report_name());
    assert_eq!(report.lanes.len(), proto.lanes(), "lanes in {report:?}");
    assert_eq!(
        report.chunks,
        xfer::ChunkPlan::tapered(size, chunk)?.chunk_count()
    );
    assert_eq!(report.resumed_bytes, 0);
    assert!(
        report.received_bytes >= size,
        "received {}",
        report.received_bytes
    );
    assert_eq!(report.digest_mismatches, 0);
    assert_eq!(
        report.sha256.as_deref(),
        Some(expected.as_str()),
        "report's sha256"
    );
    let actual = tokio::task::spawn_blocking(move || sha256_file(&dest)).await??;
    assert_eq!(actual, expected, "destination differs from the source");
    assert!(
        !fx.out().join("data.bin.part").exists()
            && !fx.out().join("data.bin.xfer-journal").exists(),
        "part file or journal left behind"
    );
    fx.shutdown().await;
    Ok(())
}

async fn identical_24mib(proto: Proto) -> TestResult {
    fetch_identical(proto, 24 * MIB + 4321, MIB).await
}

each_transport! {
    identical_24mib_in_1mib_chunks => identical_24mib;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identical_256mib_http1_tls_8_lanes() -> TestResult {
    fetch_identical(Proto::Http1Tls, 256 * MIB, 8 * MIB).await
}
