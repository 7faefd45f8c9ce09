//! The writer: one thread that owns the part file and the journal (none for a transfer of one
//! chunk: there is nothing to resume between its chunks).
//!
//! Lanes send batches of received bytes with their offset; the writer puts them in place with
//! positional writes (`pwrite`), so lanes never wait on each other's file position and the
//! bounded channel in front of it is the only back-pressure. Sealing a chunk (after it is
//! verified) happens on the same thread, after every write that preceded it, which is what
//! makes the journal record trustworthy: a record is appended only once its chunk's bytes are
//! in the file. A record with the chunk's digest is appended at once (a resume re-hashes the
//! chunk, so a power loss that took its bytes costs only a re-fetch). One without (a chunk
//! left to the whole-file hash, `GetConfig::check_every_chunk`) waits for the next sync of the
//! part file: nothing could tell on resume that its bytes never reached the disk.
//!
//! End-game duplicates that win arrive as a buffered chunk in the seal message, together with
//! the attempts that lost; the losers' later writes are dropped, and their earlier ones are
//! overwritten by the buffer.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::digest::Sha256Digest;
use crate::journal::{ChunkRecord, JournalWriter};
use crate::kept::{Budget, Kept, Sealed};
use crate::plan::ChunkIndex;
use crate::schedule::AttemptId;

/// How often written data and journal records are flushed to stable storage when nothing
/// waits for it. A crash of the process loses nothing the writer has written (the page cache
/// keeps it); this bounds what a power loss can take, and on resume every journalled chunk
/// with a digest is re-checked anyway.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(2);

/// How long a sealed chunk without a digest of its own (the default when the server sends the
/// whole file's `Repr-Digest`) may wait for the sync that lets it be journalled. Such a chunk
/// is lost to a `kill -9` until then: with the two-second [`SYNC_INTERVAL`] a 512 MiB file
/// killed half-way fetched 97 % again. A sync costs what writing the bytes back costs anyway,
/// only sooner (docs/design.md, "Journal cadence", has the measurement).
pub const JOURNAL_INTERVAL: Duration = Duration::from_millis(250);

/// Bytes written since the last sync after which a sealed chunk without a digest is journalled
/// at once, whatever [`JOURNAL_INTERVAL`] says: on a fast link 250 ms is a lot of bytes.
pub const JOURNAL_BYTES: u64 = 32 << 20;

/// A message to the writer thread.
#[derive(Debug)]
pub enum WriteOp {
    /// Bytes of `attempt` starting at `offset`, in order.
    Data {
        attempt: AttemptId,
        offset: u64,
        data: Vec<Bytes>,
    },
    /// `chunk` is verified: write `buffered` (a winning duplicate's bytes) if any, after
    /// dropping the `losers`' writes, then journal it and hand it to the whole-file hasher
    /// (with its bytes, when the writer kept them all).
    Seal {
        record: ChunkRecord,
        losers: Vec<AttemptId>,
        buffered: Option<Vec<Bytes>>,
    },
    /// Sync if chunks wait for it to be journalled and the last sync is [`JOURNAL_INTERVAL`]
    /// old: sent on a timer, so that a transfer that stalls still journals what it has.
    Tick,
    /// Flush everything to stable storage, report, and stop.
    Finish(oneshot::Sender<Result<(), SinkError>>),
}

/// Where the writer puts bytes. A plain [`File`] in use; tests wrap it to fail on purpose
/// (a disk that fills up, a sync that fails) without needing a small filesystem.
pub trait PartFile: Send + 'static {
    /// Write all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;
    /// Flush written data to stable storage.
    fn sync_data(&self) -> std::io::Result<()>;
}

impl PartFile for File {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        FileExt::write_all_at(self, buf, offset)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        File::sync_data(self)
    }
}

/// A write or sync that failed; the transfer stops with it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{what} {path}: {message}")]
pub struct SinkError {
    pub what: &'static str,
    pub path: PathBuf,
    pub message: String,
}

/// Handle to the running writer.
pub struct Writer {
    pub tx: mpsc::Sender<WriteOp>,
    /// Fires with the error that stopped the thread, the moment it stops; closes without a
    /// value when the thread ends cleanly. Taken by whoever drives the transfer.
    pub failed: Option<oneshot::Receiver<SinkError>>,
    thread: Option<std::thread::JoinHandle<Result<(), SinkError>>>,
}

impl Writer {
    /// Start the writer thread. `queue` bounds the messages in flight (each about one batch);
    /// `sealed` receives each chunk after it is journalled (or, without a journal, sealed),
    /// with the chunk's bytes when it kept them within `keep` ([`crate::kept`]).
    pub fn start(
        part: Box<dyn PartFile>,
        part_path: PathBuf,
        journal: Option<JournalWriter>,
        queue: usize,
        sealed: std_mpsc::Sender<Sealed>,
        keep: Budget,
    ) -> Result<Self, SinkError> {
        let (tx, rx) = mpsc::channel(queue.max(1));
        let (failed_tx, failed_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("xfer-writer".into())
            .spawn(move || {
                let mut w = WriterThread {
                    part,
                    part_path,
                    journal,
                    revoked: HashSet::new(),
                    sealed,
                    kept: Kept::new(keep),
                    dirty: false,
                    dirty_bytes: 0,
                    last_sync: Instant::now(),
                    unsynced: Vec::new(),
                };
                let result = w.run(rx);
                if let Err(e) = &result {
                    // Keep what is already written (a full disk still syncs what it took),
                    // so that a re-run resumes it.
                    if let Err(also) = w.sync() {
                        tracing::debug!(error = %also, "sync after the writer's failure");
                    }
                    tracing::error!(error = %e, "writer stopped");
                    let _ = failed_tx.send(e.clone());
                }
                result
            })
            .map_err(|e| SinkError {
                what: "starting the writer thread for",
                path: PathBuf::new(),
                message: e.to_string(),
            })?;
        Ok(Self {
            tx,
            failed: Some(failed_rx),
            thread: Some(thread),
        })
    }

    /// Flush to stable storage, then stop the thread.
    pub async fn finish(mut self) -> Result<(), SinkError> {
        let (tx, rx) = oneshot::channel();
        let sent = self.tx.send(WriteOp::Finish(tx)).await.is_ok();
        let synced = if sent { rx.await.ok() } else { None };
        let ended = match self.thread.take() {
            Some(t) => tokio::task::spawn_blocking(move || t.join()).await.ok(),
            None => None,
        };
        match (synced, ended) {
            (Some(r), _) => r,
            // It stopped before the finish message: with the error it stopped on.
            (None, Some(Ok(Err(e)))) => Err(e),
            _ => Err(SinkError {
                what: "writer thread ended before syncing",
                path: PathBuf::new(),
                message: "it panicked or was never started".into(),
            }),
        }
    }
}

struct WriterThread {
    part: Box<dyn PartFile>,
    part_path: PathBuf,
    journal: Option<JournalWriter>,
    revoked: HashSet<AttemptId>,
    sealed: std_mpsc::Sender<Sealed>,
    kept: Kept,
    dirty: bool,
    /// Bytes written since the last sync.
    dirty_bytes: u64,
    last_sync: Instant,
    /// Records without a digest, of sealed chunks whose bytes are not yet synced.
    unsynced: Vec<ChunkRecord>,
}

impl WriterThread {
    fn run(&mut self, mut rx: mpsc::Receiver<WriteOp>) -> Result<(), SinkError> {
        while let Some(op) = rx.blocking_recv() {
            match op {
                WriteOp::Data {
                    attempt,
                    offset,
                    data,
                } => {
                    if !self.revoked.contains(&attempt) {
                        self.write(offset, &data)?;
                    }
                }
                WriteOp::Seal {
                    record,
                    losers,
                    buffered,
                } => {
                    self.revoked.extend(losers);
                    if let Some(data) = buffered {
                        self.write(record.offset, &data)?;
                    }
                    if let Some(j) = self.journal.as_mut() {
                        if record.sha256.is_some() {
                            j.record(&record)
                                .map_err(|e| err(j.path(), "journalling chunk for", e))?;
                        } else {
                            self.unsynced.push(record);
                        }
                    }
                    let bytes = self.kept.take(record.offset..record.offset + record.len);
                    // The hasher may have stopped (verification off or finished); not an error.
                    let _ = self.sealed.send(Sealed {
                        chunk: record.chunk,
                        bytes,
                    });
                    if self.sync_due() {
                        self.sync()?;
                    }
                }
                WriteOp::Tick => {
                    if !self.unsynced.is_empty() && self.last_sync.elapsed() >= JOURNAL_INTERVAL {
                        self.sync()?;
                    }
                }
                WriteOp::Finish(reply) => {
                    let r = self.sync();
                    let _ = reply.send(r.clone());
                    return r;
                }
            }
        }
        Ok(())
    }

    /// After a seal: chunks waiting to be journalled go soon, by time or by bytes; data of
    /// chunks already journalled every [`SYNC_INTERVAL`].
    fn sync_due(&self) -> bool {
        let since = self.last_sync.elapsed();
        if self.unsynced.is_empty() {
            since >= SYNC_INTERVAL
        } else {
            since >= JOURNAL_INTERVAL || self.dirty_bytes >= JOURNAL_BYTES
        }
    }

    fn write(&mut self, mut offset: u64, data: &[Bytes]) -> Result<(), SinkError> {
        for b in data {
            self.part.write_all_at(b, offset).map_err(|e| SinkError {
                what: "writing",
                path: self.part_path.clone(),
                message: format!("at offset {offset}: {e}"),
            })?;
            self.kept.wrote(offset, b);
            offset += b.len() as u64;
            self.dirty_bytes += b.len() as u64;
        }
        self.dirty = true;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), SinkError> {
        if self.dirty {
            self.part.sync_data().map_err(|e| SinkError {
                what: "syncing",
                path: self.part_path.clone(),
                message: e.to_string(),
            })?;
            self.dirty = false;
            self.dirty_bytes = 0;
        }
        if let Some(j) = self.journal.as_mut() {
            for record in self.unsynced.drain(..) {
                j.record(&record)
                    .map_err(|e| err(j.path(), "journalling chunk for", e))?;
            }
            j.sync().map_err(|e| err(j.path(), "syncing", e))?;
        }
        self.last_sync = Instant::now();
        Ok(())
    }
}

fn err(path: &std::path::Path, what: &'static str, e: impl std::fmt::Display) -> SinkError {
    SinkError {
        what,
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// A digest for a journal record, when verification is on.
pub fn record(
    chunk: ChunkIndex,
    range: std::ops::Range<u64>,
    sha256: Option<Sha256Digest>,
    server_checked: bool,
) -> ChunkRecord {
    ChunkRecord {
        chunk,
        offset: range.start,
        len: range.end - range.start,
        sha256,
        server_checked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{self, JournalHeader};

    /// A chunk with its own digest is journalled as soon as it is sealed (a resume re-hashes
    /// it); one without waits until its bytes are synced.
    #[tokio::test]
    async fn records_without_a_digest_wait_for_the_sync() {
        let dir = tempfile::tempdir().expect("temp dir");
        let part_path = dir.path().join("f.part");
        let journal_path = dir.path().join("f.xfer-journal");
        let header = JournalHeader {
            url: "mem://f".into(),
            size: 8,
            etag: None,
            last_modified: None,
            chunk_size: 4,
            tapered: false,
            sha256: None,
        };
        let journal = JournalWriter::create(&journal_path, &header).expect("journal");
        let part = File::create(&part_path).expect("part file");
        let (sealed_tx, sealed_rx) = std_mpsc::channel();
        let writer = Writer::start(
            Box::new(part),
            part_path.clone(),
            Some(journal),
            4,
            sealed_tx,
            Budget::new(0),
        )
        .expect("writer");
        let digest = Sha256Digest::of(b"abcd");
        for (chunk, bytes, sha256) in [(0, b"abcd", Some(digest)), (1, b"efgh", None)] {
            let offset = u64::from(chunk) * 4;
            let data = WriteOp::Data {
                attempt: u64::from(chunk),
                offset,
                data: vec![Bytes::from_static(bytes)],
            };
            let seal = WriteOp::Seal {
                record: record(chunk, offset..offset + 4, sha256, false),
                losers: Vec::new(),
                buffered: None,
            };
            writer.tx.send(data).await.expect("writer runs");
            writer.tx.send(seal).await.expect("writer runs");
        }
        // Both seals handled: the hasher has them.
        for _ in 0..2 {
            sealed_rx.recv().expect("sealed");
        }
        let chunks = |p: &std::path::Path| -> Vec<ChunkIndex> {
            let loaded = journal::load(p)
                .expect("journal loads")
                .expect("journal exists");
            loaded.chunks.iter().map(|r| r.chunk).collect()
        };
        assert_eq!(chunks(&journal_path), [0]);
        writer.finish().await.expect("synced");
        assert_eq!(chunks(&journal_path), [0, 1]);
        assert_eq!(std::fs::read(&part_path).expect("part"), b"abcdefgh");
    }
}
