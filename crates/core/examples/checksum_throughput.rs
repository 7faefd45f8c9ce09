//! Throughput of the whole-file checksums a server computes while sending (adler32, MD5,
//! SHA-256), side by side over the same buffer in the same 256 KiB blocks the server sends.
//! Prints one line per round; compare ratios within a round (the machine may be shared).
//!
//! `cargo run --release -p xfer-core --example checksum_throughput [MiB] [rounds]`

use std::time::Instant;

use xfer_core::checksum::{ChecksumAlgorithm, Checksummer};

const BLOCK: usize = 256 << 10;

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let data: Vec<u8> = (0..(mib << 20) as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    for round in 0..rounds {
        let mut line = format!("round {round}:");
        for algorithm in ChecksumAlgorithm::ALL {
            let started = Instant::now();
            let mut c = Checksummer::new(algorithm);
            for block in data.chunks(BLOCK) {
                c.update(block);
            }
            std::hint::black_box(c.finish());
            let gbps = data.len() as f64 / started.elapsed().as_secs_f64() / 1e9;
            line.push_str(&format!(" {algorithm} {gbps:.2} GB/s"));
        }
        println!("{line}");
    }
}
