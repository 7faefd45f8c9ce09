//! SHA-256 throughput by buffer size: what hashing each received piece costs, from 16 KiB
//! (a TLS record / HTTP/2 frame) to 16 MiB (a whole default chunk at once).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use xfer::crates::core::digest::Sha256Hasher;

mod common;

fn sha256_by_chunk(c: &mut Criterion) {
    let mut group = c.benchmark_group("sha256_by_chunk");
    let data: Vec<u8> = (0..16u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    for kib in [16usize, 64, 256, 1024, 4096, 16384] {
        let len = kib << 10;
        group.throughput(Throughput::Bytes(len as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{kib}KiB")),
            &len,
            |b, &len| {
                b.iter(|| {
                    let mut h = Sha256Hasher::new();
                    h.update(&data[..len]);
                    std::hint::black_box(h.finish())
                });
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::quick();
    targets = sha256_by_chunk
}
criterion_main!(benches);
