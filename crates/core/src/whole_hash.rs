//! The whole-file SHA-256 (and the checksum `--checksum` asks for, unless it is adler32 on a
//! fresh transfer: the lanes compute that per chunk, see [`crate::chunk_adler`]), computed
//! during the transfer.
//!
//! SHA-256 must see the bytes in order, but chunks complete out of order. Rather than hold
//! every out-of-order chunk in memory (up to the whole file when one early chunk is slow), the
//! writer keeps written bytes only within a budget ([`crate::kept`]) and hands a sealed chunk's
//! bytes over with its seal; a chunk it could not keep is read back from the part file as soon
//! as the verified prefix reaches it. Those reads come from the page cache, which still holds
//! bytes written moments ago: one memory copy per byte, not a disk read, and no pass over the
//! finished file. Memory: the budget, and one 1 MiB read buffer, whatever the file size.
//!
//! On resume the same mechanism re-reads the chunks the journal claims (from disk this time,
//! once) and checks each against its journalled digest: a chunk whose bytes do not match (a
//! power loss tore it) is reported and fetched again.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use crate::checksum::{Checksum, ChecksumAlgorithm, Checksummer};
use crate::digest::{Sha256Digest, Sha256Hasher};
use crate::kept::{KeptChunk, Sealed};
use crate::plan::{ChunkIndex, ChunkPlan};

const READ_BUFFER: usize = 1 << 20;

/// What the hasher reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashEvent {
    /// A journalled chunk's bytes on disk do not match its recorded digest.
    ChunkInvalid { chunk: ChunkIndex },
    /// All chunks hashed, in order: the SHA-256, and the other checksum when one was asked.
    Done(Sha256Digest, Option<Checksum>, HashSources),
    /// Reading the part file failed.
    Failed { path: PathBuf, message: String },
}

/// Where the hashed bytes came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HashSources {
    /// Bytes the writer kept and handed over.
    pub from_memory: u64,
    /// Bytes read back from the part file (chunks not kept, and chunks claimed on resume).
    pub read_back: u64,
}

/// A chunk ready to be hashed once the prefix before it is.
enum Ready {
    /// Claimed by the journal on resume: read back, and checked against its digest if any.
    Claimed(Option<Sha256Digest>),
    /// Sealed in this run, with its bytes if the writer kept them.
    Sealed(Option<KeptChunk>),
}

/// What the hasher hashes, besides the sealed chunks it is sent.
pub struct HashJob {
    pub plan: ChunkPlan,
    /// A checksum computed over the same bytes in the same pass.
    pub also: Option<ChecksumAlgorithm>,
    /// The part file, open for reading back, and its path (for errors).
    pub part: File,
    pub part_path: PathBuf,
    /// Chunks resumed from a journal, with the digest their bytes must have.
    pub claimed: Vec<(ChunkIndex, Option<Sha256Digest>)>,
    /// When given, nothing is hashed and no kept bytes are held while it is false: the caller
    /// sets it before the seal of the first chunk that needs the whole-file hash, and the
    /// hasher then starts from the first chunk, reading back what it let go. Never set, the
    /// thread ends when the writer does, without a digest.
    pub wanted: Option<Arc<AtomicBool>>,
}

/// Hash `job`'s file in order as the writer seals its chunks (`sealed`), reporting on `events`.
pub fn spawn(
    job: HashJob,
    sealed: mpsc::Receiver<Sealed>,
    events: tokio::sync::mpsc::UnboundedSender<HashEvent>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let HashJob {
        plan,
        also,
        part,
        part_path,
        claimed,
        wanted,
    } = job;
    std::thread::Builder::new()
        .name("xfer-hash".into())
        .spawn(move || {
            let mut ready: BTreeMap<ChunkIndex, Ready> = BTreeMap::new();
            for (c, d) in claimed {
                // A claim without a digest (written without verification) cannot be re-checked.
                ready.insert(c, Ready::Claimed(d));
            }
            let mut whole = (Sha256Hasher::new(), also.map(Checksummer::new));
            let mut sources = HashSources::default();
            let mut next: ChunkIndex = 0;
            let mut buf = vec![0u8; READ_BUFFER];
            let count = plan.chunk_count();
            loop {
                let idle = wanted.as_ref().is_some_and(|w| !w.load(Ordering::Acquire));
                while next < count && !idle {
                    let expected = match ready.remove(&next) {
                        None => break,
                        Some(Ready::Sealed(Some(kept))) => {
                            for piece in kept.pieces() {
                                whole.0.update(piece);
                                if let Some(c) = whole.1.as_mut() {
                                    c.update(piece);
                                }
                            }
                            sources.from_memory += kept.len();
                            next += 1;
                            continue;
                        }
                        Some(Ready::Sealed(None)) => None,
                        Some(Ready::Claimed(d)) => d,
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
                    sources.read_back += range.end - range.start;
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
                        sources,
                    ));
                    return;
                }
                match sealed.recv() {
                    // Not wanted (yet): the kept bytes go back to the writer's budget.
                    Ok(s) if wanted.as_ref().is_some_and(|w| !w.load(Ordering::Acquire)) => {
                        ready.insert(s.chunk, Ready::Sealed(None));
                    }
                    Ok(s) => {
                        ready.insert(s.chunk, Ready::Sealed(s.bytes));
                    }
                    // The transfer ended without completing.
                    Err(_) => return,
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use bytes::Bytes;

    use super::*;
    use crate::kept::{Budget, Kept};

    const CHUNK: u64 = 64 << 10;

    fn sealed_from(kept: &mut Kept, plan: &ChunkPlan, chunk: ChunkIndex) -> Sealed {
        let r = plan.range(chunk);
        Sealed {
            chunk,
            bytes: kept.take(r),
        }
    }

    #[test]
    fn kept_chunks_are_hashed_from_memory_and_the_rest_read_back_in_order() {
        let plan = ChunkPlan::new(3 * CHUNK, CHUNK).unwrap();
        let data: Vec<u8> = (0..3 * CHUNK).map(|i| (i * 7 % 251) as u8).collect();
        // The part file holds chunk 0 as sent, but not chunks 1 and 2: hashing them from the
        // file would give another digest.
        let mut part = tempfile::NamedTempFile::new().unwrap();
        part.write_all(&data[..CHUNK as usize]).unwrap();
        part.write_all(&vec![0u8; 2 * CHUNK as usize]).unwrap();
        let budget = Budget::new(2 * CHUNK);
        let mut kept = Kept::new(budget.clone());
        for c in [2u32, 1] {
            let r = plan.range(c);
            let (a, b) = (r.start as usize, r.end as usize);
            let mid = (a + b) / 2;
            kept.wrote(r.start, &Bytes::copy_from_slice(&data[a..mid]));
            kept.wrote(mid as u64, &Bytes::copy_from_slice(&data[mid..b]));
        }
        // Chunks 2 and 1 are sealed first; while the hasher holds them, chunk 0 is over the
        // budget and is read back.
        let first: Vec<Sealed> = [2u32, 1]
            .iter()
            .map(|&c| sealed_from(&mut kept, &plan, c))
            .collect();
        kept.wrote(0, &Bytes::copy_from_slice(&data[..CHUNK as usize]));

        let (tx, rx) = mpsc::channel();
        let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
        let file = File::open(part.path()).unwrap();
        let job = HashJob {
            plan,
            also: Some(ChecksumAlgorithm::Adler32),
            part: file,
            part_path: part.path().to_path_buf(),
            claimed: Vec::new(),
            wanted: None,
        };
        let thread = spawn(job, rx, events_tx).unwrap();
        for s in first {
            tx.send(s).unwrap();
        }
        tx.send(sealed_from(&mut kept, &plan, 0)).unwrap();
        thread.join().unwrap();
        let Some(HashEvent::Done(sha, adler, sources)) = events.try_recv().ok() else {
            panic!("no digest");
        };
        assert_eq!(sha, Sha256Digest::of(&data));
        let mut want = Checksummer::new(ChecksumAlgorithm::Adler32);
        want.update(&data);
        assert_eq!(adler, Some(want.finish()));
        assert_eq!(
            sources,
            HashSources {
                from_memory: 2 * CHUNK,
                read_back: CHUNK
            }
        );
        assert_eq!(budget.used(), 0, "hashed chunks let go of their budget");
    }
}
