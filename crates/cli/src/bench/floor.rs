//! `xfer bench --floor`: what the unavoidable work of a transfer costs on one core of this
//! machine, so that xfer's own CPU per GiB can be read as a multiple of it (issue 38).
//!
//! Measured on the calling thread, each for a share of `--duration`, by that thread's CPU
//! time (not wall time: the figure must hold on a machine shared with other work):
//! - the TLS 1.3 suite an xfer client and server negotiate (found by an in-memory handshake of
//!   xfer's own configurations), sealing and opening 16 KiB records through the rustls crypto
//!   provider xfer uses, exactly as rustls's record layer calls it (sealing includes the copy
//!   of the plaintext into the record that rustls makes);
//! - ChaCha20-Poly1305 the same way, for reference;
//! - SHA-256 as the engine computes it (`Sha256Hasher`), adler32 as `Checksummer` does;
//! - a memory copy (`copy_from_slice`), standing for the one copy between kernel and user
//!   space that a socket read or write makes.
//!
//! Every pass works over a 32 MiB buffer, larger than the caches, as a transfer's data is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use rustls::crypto::cipher::OutboundPlainMessage;
use rustls::crypto::cipher::{AeadKey, InboundOpaqueMessage, Iv, OutboundChunks};
use rustls::{CipherSuite, ContentType, ProtocolVersion, SupportedCipherSuite, Tls13CipherSuite};
use serde::Serialize;
use xfer::crates::common::tls;
use xfer::crates::core::checksum::{ChecksumAlgorithm, Checksummer};
use xfer::crates::core::digest::{LaneSha256, Sha256Hasher};

/// The largest TLS record payload (RFC 8446 §5.1), what a bulk transfer's records carry.
const RECORD: usize = 16 * 1024;
const WORKING_SET: usize = 32 << 20;
/// Rows measured; `--duration` is shared among them.
pub const ROWS: u32 = 8;
const GIB: f64 = (1u64 << 30) as f64;

/// One primitive's rate on one core.
#[derive(Debug, Clone, Serialize)]
pub struct FloorRow {
    /// Stable key: `seal`, `open`, `chacha20_seal`, `chacha20_open`, `sha256`, `sha256_pair`,
    /// `adler32`, `copy`.
    pub key: &'static str,
    pub what: String,
    pub bytes: u64,
    pub cpu_seconds: f64,
    pub wall_seconds: f64,
    pub gib_per_cpu_second: f64,
    pub cpu_seconds_per_gib: f64,
}

/// The floor: each primitive's row, and the sums the CPU-per-byte script divides by.
#[derive(Debug, Clone, Serialize)]
pub struct FloorReport {
    /// The TLS 1.3 suite an xfer client and server negotiate, as rustls names it.
    pub negotiated_suite: String,
    pub rows: Vec<FloorRow>,
    /// Client of a download: open + copy (+ SHA-256 when verifying), CPU s/GiB.
    pub client_floor_no_verify: f64,
    pub client_floor_sha256: f64,
    /// Server of a download: seal + copy, CPU s/GiB.
    pub server_floor: f64,
}

impl FloorReport {
    fn per_gib(&self, key: &str) -> f64 {
        self.rows
            .iter()
            .find(|r| r.key == key)
            .map_or(f64::NAN, |r| r.cpu_seconds_per_gib)
    }

    pub fn text(&self) -> String {
        let mut out = format!(
            "floor on one core (thread CPU time), negotiated TLS suite {}\n",
            self.negotiated_suite
        );
        out.push_str(&format!(
            "{:<15} {:<48} {:>9} {:>10}\n",
            "key", "what", "GiB/s", "CPU s/GiB"
        ));
        for r in &self.rows {
            out.push_str(&format!(
                "{:<15} {:<48} {:>9.2} {:>10.3}\n",
                r.key, r.what, r.gib_per_cpu_second, r.cpu_seconds_per_gib
            ));
        }
        out.push_str(&format!(
            "client floor: {:.3} s/GiB without verification (open + copy), {:.3} with SHA-256\n\
             server floor: {:.3} s/GiB (seal + copy)\n",
            self.client_floor_no_verify, self.client_floor_sha256, self.server_floor
        ));
        out
    }
}

/// Measure every primitive, each for about `budget` of CPU time.
pub fn measure(budget: Duration) -> anyhow::Result<FloorReport> {
    let suite = negotiated_suite()?;
    let data = filler(WORKING_SET);
    let mut rows = Vec::new();
    let name = format!("{:?}", suite.common.suite);
    rows.extend(aead_rows(suite, ["seal", "open"], &name, &data, budget)?);
    let chacha = chacha20()?;
    rows.extend(aead_rows(
        chacha,
        ["chacha20_seal", "chacha20_open"],
        "ChaCha20-Poly1305",
        &data,
        budget,
    )?);
    rows.push(row(
        "sha256",
        "SHA-256 (sha2, as the engine hashes)".into(),
        timed(budget, |clock| {
            clock.time(|| {
                let mut h = Sha256Hasher::new();
                for block in data.chunks(256 << 10) {
                    h.update(block);
                }
                std::hint::black_box(h.finish());
            });
            data.len() as u64
        }),
    ));
    // Not part of the floor, which counts one stream's SHA-256 as the floor does: two
    // lanes' chunks hashed together on one core, as the engine's lanes pair them.
    let (first, second) = data.split_at(data.len() / 2);
    let (first, second) = (
        Bytes::copy_from_slice(first),
        Bytes::copy_from_slice(second),
    );
    rows.push(row(
        "sha256_pair",
        "SHA-256, two streams on one core (not in the floor)".into(),
        timed(budget, |clock| {
            clock.time(|| {
                let (mut a, mut b) = (LaneSha256::new(), LaneSha256::new());
                for at in (0..first.len()).step_by(256 << 10) {
                    let end = (at + (256 << 10)).min(first.len());
                    a.update(first.slice(at..end));
                    b.update(second.slice(at..end.min(second.len())));
                }
                std::hint::black_box((a.finish(), b.finish()));
            });
            (first.len() + second.len()) as u64
        }),
    ));
    rows.push(row(
        "adler32",
        "adler32 (adler2)".into(),
        timed(budget, |clock| {
            clock.time(|| {
                let mut h = Checksummer::new(ChecksumAlgorithm::Adler32);
                for block in data.chunks(256 << 10) {
                    h.update(block);
                }
                std::hint::black_box(h.finish());
            });
            data.len() as u64
        }),
    ));
    let mut sink = vec![0u8; WORKING_SET];
    rows.push(row(
        "copy",
        "memory copy, 256 KiB blocks".into(),
        timed(budget, |clock| {
            clock.time(|| {
                for (to, from) in sink.chunks_mut(256 << 10).zip(data.chunks(256 << 10)) {
                    to.copy_from_slice(from);
                }
                std::hint::black_box(&mut sink);
            });
            data.len() as u64
        }),
    ));
    let mut report = FloorReport {
        negotiated_suite: name,
        rows,
        client_floor_no_verify: 0.0,
        client_floor_sha256: 0.0,
        server_floor: 0.0,
    };
    report.client_floor_no_verify = report.per_gib("open") + report.per_gib("copy");
    report.client_floor_sha256 = report.client_floor_no_verify + report.per_gib("sha256");
    report.server_floor = report.per_gib("seal") + report.per_gib("copy");
    Ok(report)
}

/// The TLS 1.3 suite an xfer client and an xfer server agree on, by a handshake in memory
/// between the configurations they build (the server's own self-signed certificate trusted
/// by the client).
pub fn negotiated_suite() -> anyhow::Result<&'static Tls13CipherSuite> {
    let dir = tempfile::tempdir().context("creating a directory for a test certificate")?;
    let cert = tls::self_signed(&["localhost".to_string()], dir.path())?;
    let server = tls::server_config(&cert.cert_path, &cert.key_path, &[b"http/1.1"])?;
    let client = tls::client_config(
        &tls::ClientTlsOptions {
            ca_certs: vec![cert.cert_path.clone()],
            ..Default::default()
        },
        &[b"http/1.1"],
    )?;
    let name = rustls::pki_types::ServerName::try_from("localhost")?;
    let mut c = rustls::ClientConnection::new(Arc::new(client), name)?;
    let mut s = rustls::ServerConnection::new(Arc::new(server))?;
    for _ in 0..16 {
        if !c.is_handshaking() && !s.is_handshaking() {
            break;
        }
        let mut wire = Vec::new();
        c.write_tls(&mut wire)?;
        s.read_tls(&mut wire.as_slice())?;
        s.process_new_packets()?;
        wire.clear();
        s.write_tls(&mut wire)?;
        c.read_tls(&mut wire.as_slice())?;
        c.process_new_packets()?;
    }
    match c.negotiated_cipher_suite() {
        Some(SupportedCipherSuite::Tls13(suite)) => Ok(suite),
        Some(other) => anyhow::bail!("the in-memory handshake negotiated {other:?}, not TLS 1.3"),
        None => anyhow::bail!("the in-memory handshake did not complete"),
    }
}

fn chacha20() -> anyhow::Result<&'static Tls13CipherSuite> {
    tls::provider()
        .cipher_suites
        .iter()
        .find_map(|s| match s {
            SupportedCipherSuite::Tls13(t)
                if t.common.suite == CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 =>
            {
                Some(*t)
            }
            _ => None,
        })
        .context("the TLS provider offers no TLS 1.3 ChaCha20-Poly1305")
}

/// Seal and open rows for one suite, with a fixed key: the rate does not depend on it.
fn aead_rows(
    suite: &'static Tls13CipherSuite,
    [seal_key, open_key]: [&'static str; 2],
    name: &str,
    data: &[u8],
    budget: Duration,
) -> anyhow::Result<Vec<FloorRow>> {
    let alg = suite.aead_alg;
    // rustls builds a key of another length only inside its key schedule; every suite the
    // providers negotiate by default (AES-256-GCM, ChaCha20-Poly1305) has 32-byte keys.
    anyhow::ensure!(
        alg.key_len() == 32,
        "{name}: keys of {} bytes cannot be built outside rustls's key schedule",
        alg.key_len()
    );
    let key = || AeadKey::from([0x5a; 32]);
    let iv = || Iv::new([0xa5; 12]);
    let mut seal = alg.encrypter(key(), iv());
    let mut open = alg.decrypter(key(), iv());
    let mut seq = 0u64;
    let sealing = timed(budget, |clock| {
        clock.time(|| {
            for record in data.chunks(RECORD) {
                let sealed = seal.encrypt(plain(record), seq);
                seq += 1;
                std::hint::black_box(sealed.ok());
            }
        });
        data.len() as u64
    });
    // Opening works in place, so each pass first seals a fresh set of records, untimed.
    let mut records: Vec<Vec<u8>> = Vec::new();
    let mut failed = None;
    let opening = timed(budget, |clock| {
        records.clear();
        let first_seq = seq;
        for record in data.chunks(RECORD) {
            if let Ok(sealed) = seal.encrypt(plain(record), seq) {
                records.push(sealed.payload.as_ref().to_vec());
            }
            seq += 1;
        }
        clock.time(|| {
            for (i, record) in records.iter_mut().enumerate() {
                let msg = InboundOpaqueMessage::new(
                    ContentType::ApplicationData,
                    ProtocolVersion::TLSv1_2,
                    record,
                );
                if let Err(e) = open.decrypt(msg, first_seq + i as u64) {
                    failed.get_or_insert(e);
                }
            }
        });
        (records.len() * RECORD) as u64
    });
    if let Some(e) = failed {
        anyhow::bail!("{name}: opening a record sealed with the same key failed: {e}");
    }
    Ok(vec![
        row(seal_key, format!("{name} seal, 16 KiB records"), sealing),
        row(open_key, format!("{name} open, 16 KiB records"), opening),
    ])
}

fn plain(record: &[u8]) -> OutboundPlainMessage<'_> {
    OutboundPlainMessage {
        typ: ContentType::ApplicationData,
        version: ProtocolVersion::TLSv1_2,
        payload: OutboundChunks::Single(record),
    }
}

struct Timing {
    bytes: u64,
    cpu: Duration,
    wall: Duration,
}

fn row(key: &'static str, what: String, t: Timing) -> FloorRow {
    let gib = t.bytes as f64 / GIB;
    let cpu = t.cpu.as_secs_f64().max(1e-9);
    FloorRow {
        key,
        what,
        bytes: t.bytes,
        cpu_seconds: cpu,
        wall_seconds: t.wall.as_secs_f64(),
        gib_per_cpu_second: gib / cpu,
        cpu_seconds_per_gib: cpu / gib.max(1e-12),
    }
}

/// Accumulates the CPU and wall time of the sections it times.
#[derive(Default)]
struct Clock {
    cpu: Duration,
    wall: Duration,
}

impl Clock {
    fn time<R>(&mut self, section: impl FnOnce() -> R) -> R {
        let (c0, w0) = (thread_cpu(), Instant::now());
        let out = section();
        self.cpu += thread_cpu().saturating_sub(c0);
        self.wall += w0.elapsed();
        out
    }
}

/// Run `pass` (which times its measured part on the clock it is given and returns the bytes
/// that part processed) once to warm up, then until `budget` of this thread's CPU time has
/// gone into the timed parts.
fn timed(budget: Duration, mut pass: impl FnMut(&mut Clock) -> u64) -> Timing {
    pass(&mut Clock::default());
    let mut clock = Clock::default();
    let mut bytes = 0;
    while clock.cpu < budget {
        bytes += pass(&mut clock);
    }
    Timing {
        bytes,
        cpu: clock.cpu,
        wall: clock.wall,
    }
}

/// This thread's CPU time (user and system).
fn thread_cpu() -> Duration {
    crate::sys::thread_cpu_time()
}

/// Bytes that are not all alike, so no primitive meets a special case.
fn filler(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xfer_negotiates_a_tls13_suite_the_floor_can_measure() {
        let suite = negotiated_suite().expect("in-memory handshake");
        assert_eq!(suite.aead_alg.key_len(), 32, "{:?}", suite.common.suite);
    }

    #[test]
    fn every_row_measures_at_least_one_pass_and_is_printed() {
        // Keys, order and the floors' sums are checked on the command's JSON
        // (crates/cli/tests/bench.rs).
        let report = measure(Duration::from_millis(1)).expect("floor");
        let text = report.text();
        assert_eq!(
            report.rows.len(),
            ROWS as usize,
            "--duration is shared by ROWS rows"
        );
        for r in &report.rows {
            assert!(r.bytes >= WORKING_SET as u64, "{r:?}");
            assert!(r.cpu_seconds_per_gib > 0.0, "{r:?}");
            assert!(text.contains(r.key), "{r:?} not in {text}");
        }
        assert!(text.contains(&report.negotiated_suite));
    }
}
