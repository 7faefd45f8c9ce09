//! Engine overhead per chunk, with no network: 256 MiB from in-memory lanes (`MemTransport`,
//! 8 lanes) written to a file on tmpfs, by chunk size, digests checked or not. The difference
//! between verify on and off is the hashing; what remains is scheduling, copying and writing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use xfer::crates::core::mem_transport::MemTransport;
use xfer::{Download, GetConfig};

mod common;

const SIZE: usize = 256 << 20;
const LANES: usize = 8;

fn engine_mem(c: &mut Criterion) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => panic!("runtime: {e}"),
    };
    let data: Vec<u8> = (0..SIZE as u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
        .collect();
    // Cloning `Bytes` shares the buffer, so each iteration's transport costs nothing to build.
    let data = bytes::Bytes::from(data);
    let dir = common::scratch_dir();
    let mut group = c.benchmark_group("engine_mem");
    group.throughput(Throughput::Bytes(SIZE as u64));
    for chunk_mib in [1u64, 16] {
        for verify in [true, false] {
            let name = format!(
                "get_256mib_{chunk_mib}mib_chunks_{}",
                if verify { "digest" } else { "nodigest" }
            );
            group.bench_function(BenchmarkId::from_parameter(&name), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for i in 0..iters {
                        let dest = dir.path().join(format!("{name}-{i}"));
                        let transport = Arc::new(MemTransport::new(data.clone(), LANES));
                        let config = GetConfig {
                            chunk_size: chunk_mib << 20,
                            verify,
                            overwrite: true,
                            ..GetConfig::default()
                        };
                        let started = Instant::now();
                        let result = runtime
                            .block_on(Download::new(transport, "mem://bench", &dest, config).run());
                        total += started.elapsed();
                        if let Err(e) = result {
                            panic!("{name}: {e}");
                        }
                        common::remove_outputs(&dest);
                    }
                    total
                });
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::quick();
    targets = engine_mem
}
criterion_main!(benches);
