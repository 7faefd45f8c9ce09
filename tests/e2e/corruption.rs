//! A server that corrupts one range on the wire (after computing its digest) is caught by the
//! per-chunk digest check, and only that chunk is fetched again.

use std::sync::Arc;

use xfer::crates::common::FaultInjection;
use xfer::{Download, GetConfig};

use crate::support::{
    each_transport, sha256_file, write_random_file, Fixture, Proto, TestResult, MIB,
};

async fn corrupted_chunk_refetched_once(proto: Proto) -> TestResult {
    let size = 8 * MIB + 777;
    let chunk = MIB;
    // Inside a chunk, not at its edge.
    let offset = 5 * chunk + 12_345;
    let fault = Arc::new(FaultInjection::new(Some(offset), 1));
    let fx = Fixture::start_with_fault(proto, Some(Arc::clone(&fault))).await?;
    let src = fx.root().join("f.bin");
    let expected = {
        let src = src.clone();
        tokio::task::spawn_blocking(move || write_random_file(&src, size, 7)).await??
    };
    let dest = fx.out().join("f.bin");
    let mut config = GetConfig {
        chunk_size: chunk,
        ..GetConfig::default()
    };
    // Every chunk hashed as it arrives, so the damage is found by its chunk. Without this the
    // path depends on a race: when the server's background hasher already knows the file's
    // Repr-Digest at the first answer, chunks go unhashed, the whole-file hash finds the
    // damage, and the file is fetched again with every chunk checked (the engine's tests
    // cover that path). No end-game duplicates, so the byte count below is exact.
    config.check_every_chunk = true;
    config.schedule.endgame = false;
    let url = fx.url("/f.bin");
    let report = Download::new(xfer::transport_for(&url, &fx.client)?, &url, &dest, config)
        .run()
        .await?;

    assert_eq!(fault.times_used(), 1, "the server corrupted no response");
    assert_eq!(report.digest_mismatches, 1, "{report:?}");
    let plan = xfer::ChunkPlan::tapered(size, chunk)?;
    let corrupted = (0..plan.chunk_count())
        .map(|i| plan.range(i))
        .find(|r| r.contains(&offset))
        .ok_or("offset outside the plan")?;
    assert_eq!(
        report.received_bytes,
        size + (corrupted.end - corrupted.start),
        "only the corrupted chunk may be fetched twice"
    );
    assert_eq!(report.duplicates, 0);
    assert_eq!(report.sha256.as_deref(), Some(expected.as_str()));
    let actual = tokio::task::spawn_blocking(move || sha256_file(&dest)).await??;
    assert_eq!(actual, expected, "destination differs from the source");
    fx.shutdown().await;
    Ok(())
}

each_transport! {
    corrupted_range_refetched => corrupted_chunk_refetched_once;
}
