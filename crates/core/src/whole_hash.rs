//! The whole-file SHA-256 (and the checksum `--checksum` asks for), computed during the
//! transfer.
//!
//! SHA-256 must see the bytes in order, but chunks complete out of order. Rather than hold
//! out-of-order chunks in memory (up to the whole file when one early chunk is slow), a thread
//! reads each verified chunk back from the part file as soon as the verified prefix reaches
//! it. Those reads come from the page cache, which still holds bytes written moments ago, so
//! this costs one memory copy per byte, not a disk read, and no pass over the finished file.
//! Memory: one 1 MiB read buffer, whatever the file size.
//!
//! On resume the same mechanism re-reads the chunks the journal claims (from disk this time,
//! once) and checks each against its journalled digest: a chunk whose bytes do not match (a
//! power loss tore it) is reported and fetched again.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc;

use crate::checksum::{Checksum, ChecksumAlgorithm, Checksummer};
use crate::digest::{Sha256Digest, Sha256Hasher};
use crate::plan::{ChunkIndex, ChunkPlan};

const READ_BUFFER: usize = 1 << 20;

/// What the hasher reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashEvent {
    /// A journalled chunk's bytes on disk do not match its recorded digest.
    ChunkInvalid { chunk: ChunkIndex },
    /// All chunks hashed, in order: the SHA-256, and the other checksum when one was asked.
    Done(Sha256Digest, Option<Checksum>),
    /// Reading the part file failed.
    Failed { path: PathBuf, message: String },
}

/// Inputs: sealed chunk indices (from the writer). Claimed chunks (resumed from a journal) are
/// given up front with the digest their bytes must have. `also` is a checksum computed over
/// the same bytes in the same pass.
pub fn spawn(
    plan: ChunkPlan,
    also: Option<ChecksumAlgorithm>,
    part: File,
    part_path: PathBuf,
    claimed: Vec<(ChunkIndex, Option<Sha256Digest>)>,
    sealed: mpsc::Receiver<ChunkIndex>,
    events: tokio::sync::mpsc::UnboundedSender<HashEvent>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("xfer-hash".into())
        .spawn(move || {
            let mut ready: BTreeMap<ChunkIndex, Option<Sha256Digest>> = BTreeMap::new();
            for (c, d) in claimed {
                // A claim without a digest (written without verification) cannot be re-checked.
                ready.insert(c, d);
            }
            let mut whole = (Sha256Hasher::new(), also.map(Checksummer::new));
            let mut next: ChunkIndex = 0;
            let mut buf = vec![0u8; READ_BUFFER];
            let count = plan.chunk_count();
            loop {
                while next < count {
                    let Some(expected) = ready.remove(&next) else {
                        break;
                    };
                    let range = plan.range(next);
                    let mut chunk_hash = expected.map(|_| Sha256Hasher::new());
                    let mut snapshot = whole.clone();
                    let mut off = range.start;
                    while off < range.end {
                        let n = usize::try_from(range.end - off)
                            .unwrap_or(READ_BUFFER)
                            .min(READ_BUFFER);
                        if let Err(e) = part.read_exact_at(&mut buf[..n], off) {
                            let _ = events.send(HashEvent::Failed {
                                path: part_path.clone(),
                                message: format!("reading back {}..{}: {e}", off, off + n as u64),
                            });
                            return;
                        }
                        snapshot.0.update(&buf[..n]);
                        if let Some(c) = snapshot.1.as_mut() {
                            c.update(&buf[..n]);
                        }
                        if let Some(h) = chunk_hash.as_mut() {
                            h.update(&buf[..n]);
                        }
                        off += n as u64;
                    }
                    if let (Some(h), Some(want)) = (chunk_hash, expected) {
                        if h.finish() != want {
                            // Not hashed into the whole: wait until it is fetched and sealed again.
                            let _ = events.send(HashEvent::ChunkInvalid { chunk: next });
                            continue;
                        }
                    }
                    whole = snapshot;
                    next += 1;
                }
                if next >= count {
                    let (sha256, other) = whole;
                    let _ = events.send(HashEvent::Done(
                        sha256.finish(),
                        other.map(Checksummer::finish),
                    ));
                    return;
                }
                match sealed.recv() {
                    Ok(c) => {
                        ready.insert(c, None);
                    }
                    // The transfer ended without completing.
                    Err(_) => return,
                }
            }
        })
}
