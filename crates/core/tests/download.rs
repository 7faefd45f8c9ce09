//! The download driver end to end over the in-memory transport: real files, journal, writer
//! and hasher threads; no sockets.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use xfer_core::get::{Download, GetConfig, GetError};
use xfer_core::journal;
use xfer_core::mem_transport::{MemFault, MemTransport};
use xfer_core::plan::{ChunkPlan, MIN_CHUNK_SIZE};
use xfer_core::Sha256Digest;

const CHUNK: u64 = MIN_CHUNK_SIZE * 4; // 256 KiB

fn data(len: usize, seed: u8) -> Vec<u8> {
    let mut x = u64::from(seed) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Exact request counts need the end game off: on a shared machine, any lane can look slow.
fn exact() -> GetConfig {
    let mut c = config();
    c.schedule.endgame = false;
    c
}

fn config() -> GetConfig {
    GetConfig {
        chunk_size: CHUNK,
        write_batch: 100_000,
        schedule: xfer_core::schedule::ScheduleConfig {
            backoff_initial: Duration::from_millis(5),
            ..Default::default()
        },
        ..GetConfig::default()
    }
}

async fn get(
    t: &Arc<MemTransport>,
    dest: &Path,
    cfg: GetConfig,
) -> Result<xfer_core::Report, GetError> {
    Download::new(t.clone(), "mem://resource", dest, cfg)
        .run()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_identical_bytes_and_reports() {
    let d = data(20 * CHUNK as usize + 777, 1);
    let t = Arc::new(MemTransport::new(d.clone(), 4));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out.bin");
    let cfg = GetConfig {
        write_sha256_file: true,
        ..exact()
    };
    let r = get(&t, &dest, cfg).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    let want = Sha256Digest::of(&d).to_hex();
    assert_eq!(r.sha256.as_deref(), Some(want.as_str()));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.bin.sha256")).unwrap(),
        format!("{want}  out.bin\n")
    );
    assert!(r.verified_against.iter().any(|s| s.contains("Repr-Digest")));
    assert_eq!(r.lanes.len(), 4);
    // 20 chunks and a bit: big enough for the last 8 chunks' worth to be cut smaller.
    let plan = ChunkPlan::tapered(d.len() as u64, CHUNK).unwrap();
    assert!(plan.is_tapered());
    assert_eq!(r.chunks, plan.chunk_count());
    assert_eq!(
        r.lanes.iter().map(|l| l.chunks).sum::<u64>(),
        u64::from(plan.chunk_count())
    );
    assert_eq!(r.received_bytes, d.len() as u64);
    assert!(!journal::journal_path(&dest).exists());
    assert!(!journal::part_path(&dest).exists());
}

/// Every chunk hashed as it arrives: a damaged one is found at once and fetched again alone.
fn every_chunk(c: GetConfig) -> GetConfig {
    GetConfig {
        check_every_chunk: true,
        ..c
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_chunk_is_refetched_alone() {
    let d = data(8 * CHUNK as usize, 2);
    let t = Arc::new(MemTransport::new(d.clone(), 3));
    t.inject(3 * CHUNK, MemFault::Corrupt, 1);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let r = get(&t, &dest, every_chunk(exact())).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(r.digest_mismatches, 1);
    assert_eq!(r.verification.chunks_with_server_digest, 8);
    let reqs = t.requests();
    assert_eq!(reqs.iter().filter(|r| r.start == 3 * CHUNK).count(), 2);
    assert_eq!(
        reqs.len(),
        9,
        "only the corrupt chunk is fetched twice: {reqs:?}"
    );
}

/// With the server's digest of the whole file, chunks are not hashed one by one and the
/// server is not asked for their digests: the whole-file hash checks every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_file_digest_checks_the_chunks_without_hashing_each() {
    let d = data(8 * CHUNK as usize, 21);
    let t = Arc::new(MemTransport::new(d.clone(), 3));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let r = get(&t, &dest, exact()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(t.requests().len(), 8);
    // Only the first request, sent before the whole-file digest was known, asked for its
    // chunk's digest.
    assert!(r.verification.chunks_with_server_digest <= 1, "{r:?}");
    assert!(r.verification.server_whole_digest);
    assert!(r.verification.is_server_checked());
    assert_eq!(
        r.sha256.as_deref(),
        Some(Sha256Digest::of(&d).to_hex().as_str())
    );
}

/// Damage that only the whole-file hash could see starts the file over once, with every
/// chunk checked: the damaged chunk is then found and fetched again, and the file is right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_file_mismatch_starts_over_with_every_chunk_checked() {
    let d = data(8 * CHUNK as usize, 22);
    let t = Arc::new(MemTransport::new(d.clone(), 3));
    // Once in the first pass, once more in the second.
    t.inject(3 * CHUNK, MemFault::Corrupt, 2);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let r = get(&t, &dest, exact()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(r.digest_mismatches, 1, "the second pass caught it by chunk");
    assert_eq!(r.verification.chunks_with_server_digest, 8);
    let reqs = t.requests();
    assert_eq!(reqs.len(), 8 + 9, "{reqs:?}");
    assert_eq!(reqs.iter().filter(|r| r.start == 3 * CHUNK).count(), 3);
    assert!(!journal::journal_path(&dest).exists());

    // Bytes that are wrong every time: the second pass fails on that chunk, keeping the rest.
    let t = Arc::new(MemTransport::new(d.clone(), 3));
    t.inject(5 * CHUNK, MemFault::Corrupt, 100);
    let dest = dir.path().join("g");
    let err = get(&t, &dest, exact()).await.unwrap_err();
    assert!(
        matches!(
            &err,
            GetError::Schedule {
                failure: xfer_core::schedule::ScheduleFailure::TooManyAttempts { chunk: 5, .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("server digest"), "{err}");
    assert!(!dest.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_errors_and_truncation_are_retried() {
    let d = data(6 * CHUNK as usize, 3);
    let t = Arc::new(MemTransport::new(d.clone(), 2));
    // Chunk 2: lane 1's speculative request for chunk 1 would take a fault there.
    t.inject(2 * CHUNK, MemFault::Fail { retryable: true }, 2);
    t.inject(4 * CHUNK, MemFault::Truncate, 1);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let r = get(&t, &dest, config()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(r.retries, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_error_fails_fast_keeping_progress_then_resume_fetches_only_the_rest() {
    let d = data(12 * CHUNK as usize, 4);
    let t = Arc::new(MemTransport::new(d.clone(), 1));
    t.inject(7 * CHUNK, MemFault::Fail { retryable: false }, 1);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    // One request at a time: with the next request sent ahead, chunk 7's refusal would end
    // the transfer while chunk 6 still streams.
    let one_at_a_time = GetConfig {
        request_ahead: Some(false),
        ..config()
    };
    let err = get(&t, &dest, one_at_a_time).await.unwrap_err();
    assert!(matches!(err, GetError::Chunk { chunk: 7, .. }), "{err}");
    assert!(err.to_string().contains("chunk 7"), "{err}");
    assert!(!dest.exists());
    assert!(journal::journal_path(&dest).exists());
    let before = t.requests().len();
    let r = get(&t, &dest, config()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    // One lane, in order: chunks 0..7 were verified before the failure.
    assert_eq!(r.resumed_bytes, 7 * CHUNK);
    assert_eq!(r.received_bytes, 5 * CHUNK);
    assert_eq!(t.requests().len() - before, 5);
}

/// A resume rebuilds the plan its journal was written with, tapered or not, whatever the
/// second run asks for: otherwise the records of the tail would no longer match its chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_keeps_the_plan_its_journal_was_written_with() {
    let d = data(20 * CHUNK as usize, 14);
    let size = d.len() as u64;
    for (first_tapered, stop_at) in [(false, 18 * CHUNK), (true, 18 * CHUNK + CHUNK / 2)] {
        let first_plan = ChunkPlan::with_taper(size, CHUNK, first_tapered).unwrap();
        assert_eq!(first_plan.is_tapered(), first_tapered);
        let refused = (0..first_plan.chunk_count())
            .find(|&i| first_plan.range(i).start == stop_at)
            .expect("a chunk starts there");
        let t = Arc::new(MemTransport::new(d.clone(), 1));
        t.inject(stop_at, MemFault::Fail { retryable: false }, 1);
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("f");
        let first = GetConfig {
            taper: first_tapered,
            request_ahead: Some(false),
            ..config()
        };
        let err = get(&t, &dest, first).await.unwrap_err();
        assert!(
            matches!(err, GetError::Chunk { chunk, .. } if chunk == refused),
            "{err}"
        );
        let before = t.requests().len();
        let second = GetConfig {
            taper: !first_tapered,
            ..config()
        };
        let r = get(&t, &dest, second).await.unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), d);
        assert_eq!(
            r.resumed_bytes, stop_at,
            "first run tapered: {first_tapered}"
        );
        assert_eq!(r.received_bytes, size - stop_at);
        assert_eq!(r.chunks, first_plan.chunk_count());
        assert_eq!(
            t.requests().len() - before,
            (first_plan.chunk_count() - refused) as usize
        );
    }
}

/// Lanes after the first ask for their chunk before the size is known, and those bodies are
/// used: no chunk is asked for twice. A lane whose chunk lies past the end asks again for
/// whatever it is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_lanes_ask_for_their_first_chunk_before_the_size_is_known() {
    for (chunks, speculate, speculated) in [(8, true, 3), (2, true, 1), (8, false, 0)] {
        let d = data(chunks * CHUNK as usize - 100, 15);
        let t = Arc::new(MemTransport::new(d.clone(), 4));
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("f");
        let cfg = GetConfig {
            speculate,
            ..exact()
        };
        let r = get(&t, &dest, cfg).await.unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), d);
        let what = format!("{chunks} chunks, speculate {speculate}");
        assert_eq!(t.speculated(), speculated, "{what}");
        let reqs = t.requests();
        assert_eq!(reqs.len(), chunks, "{what}: {reqs:?}");
        assert_eq!(r.retries, 0, "{what}");
    }
}

/// A speculative request that fails costs no retry: its lane asks again once the engine
/// knows what to ask. A resume never speculates, as its chunks left are not the first ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_speculative_request_is_asked_again_and_a_resume_does_not_speculate() {
    let d = data(8 * CHUNK as usize, 16);
    let dir = tempfile::tempdir().unwrap();

    // Chunk 1's first request is lane 1's speculative one; refusing it (not retryable, which
    // would end a download asked the usual way) only makes lane 1 ask again.
    let t = Arc::new(MemTransport::new(d.clone(), 4));
    t.inject(CHUNK, MemFault::Fail { retryable: false }, 1);
    let dest = dir.path().join("f");
    let r = get(&t, &dest, exact()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(r.retries, 0);
    let asked = t.requests().iter().filter(|r| r.start == CHUNK).count();
    assert_eq!(asked, 2, "chunk 1 asked {asked} times");

    // A download ended by a chunk the server refuses leaves a journal; its resume asks
    // nothing speculatively.
    let t = Arc::new(MemTransport::new(d.clone(), 4));
    t.inject(6 * CHUNK, MemFault::Fail { retryable: false }, 1);
    let dest = dir.path().join("g");
    let err = get(&t, &dest, exact()).await.unwrap_err();
    assert!(matches!(err, GetError::Chunk { chunk: 6, .. }), "{err}");
    assert!(journal::journal_path(&dest).exists());
    let speculated = t.speculated();
    assert!(speculated > 0);
    get(&t, &dest, exact()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(t.speculated(), speculated, "a resume asked speculatively");
}

/// A speculative answer that describes another resource than the first answer did (the
/// file was replaced in between) is dropped, and its chunk asked for again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speculative_answer_about_another_resource_is_dropped() {
    use xfer_core::transport::{BoxFuture, Lane, RemoteInfo, Speculated, Transport};
    use xfer_core::TransferError;

    /// Describes the resource with another ETag in its speculative answers only.
    struct Replaced(MemTransport);
    impl Transport for Replaced {
        fn stat(&self) -> BoxFuture<'_, Result<RemoteInfo, TransferError>> {
            self.0.stat()
        }
        fn open_lane(&self, index: usize) -> BoxFuture<'_, Result<Box<dyn Lane>, TransferError>> {
            self.0.open_lane(index)
        }
        fn open_speculative(
            &self,
            index: usize,
            range: std::ops::Range<u64>,
            want_digest: bool,
        ) -> BoxFuture<'_, Result<Speculated, TransferError>> {
            Box::pin(async move {
                let mut s = self.0.open_speculative(index, range, want_digest).await?;
                if let Some((info, _)) = s.answer.as_mut() {
                    info.etag = Some("\"replaced\"".into());
                }
                Ok(s)
            })
        }
        fn protocol(&self) -> String {
            self.0.protocol()
        }
        fn default_lanes(&self) -> usize {
            self.0.default_lanes()
        }
    }

    let d = data(6 * CHUNK as usize, 17);
    let t = Arc::new(Replaced(MemTransport::new(d.clone(), 3)));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let r = Download::new(t.clone(), "mem://resource", &dest, exact())
        .run()
        .await
        .unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(t.0.speculated(), 2);
    let reqs = t.0.requests();
    for chunk in [CHUNK, 2 * CHUNK] {
        assert_eq!(
            reqs.iter().filter(|r| r.start == chunk).count(),
            2,
            "{reqs:?}"
        );
    }
    assert_eq!(reqs.len(), 8, "{reqs:?}");
    assert_eq!(r.retries, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_remote_starts_over() {
    let d = data(6 * CHUNK as usize, 5);
    // No declared digest: the validators say whether it changed. (With one, equal digests
    // are the same bytes and resume whatever the ETag: `journal` tests.)
    let t = Arc::new(MemTransport::new(d.clone(), 1).without_digests());
    t.inject(3 * CHUNK, MemFault::Fail { retryable: false }, 1);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    get(&t, &dest, config()).await.unwrap_err();
    t.set_etag("\"mem-2\"");
    let r = get(&t, &dest, config()).await.unwrap();
    assert_eq!(r.resumed_bytes, 0);
    assert_eq!(r.received_bytes, d.len() as u64);
    assert_eq!(std::fs::read(&dest).unwrap(), d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_part_file_is_caught_on_resume() {
    let d = data(6 * CHUNK as usize, 6);
    let t = Arc::new(MemTransport::new(d.clone(), 1));
    t.inject(4 * CHUNK, MemFault::Fail { retryable: false }, 1);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    // One request at a time, so chunks 0..4 are all in the journal when chunk 4 is refused
    // (sent ahead, the refusal could end the transfer while chunk 3 still streams).
    let one_at_a_time = GetConfig {
        request_ahead: Some(false),
        ..config()
    };
    get(&t, &dest, every_chunk(one_at_a_time.clone()))
        .await
        .unwrap_err();
    // Simulate a damaged block in a chunk the journal claims.
    let part = journal::part_path(&dest);
    let mut bytes = std::fs::read(&part).unwrap();
    bytes[(CHUNK + 10) as usize] ^= 1;
    std::fs::write(&part, bytes).unwrap();
    let r = get(&t, &dest, every_chunk(config())).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(r.resumed_bytes, 3 * CHUNK);
    assert_eq!(r.received_bytes, 3 * CHUNK);

    // Chunks left to the whole-file hash have no digest of their own in the journal: the
    // damage is found at the end, and the file is fetched again with every chunk checked.
    let dest = dir.path().join("g");
    t.inject(4 * CHUNK, MemFault::Fail { retryable: false }, 1);
    get(&t, &dest, one_at_a_time).await.unwrap_err();
    let part = journal::part_path(&dest);
    let mut bytes = std::fs::read(&part).unwrap();
    bytes[(CHUNK + 10) as usize] ^= 1;
    std::fs::write(&part, bytes).unwrap();
    let r = get(&t, &dest, config()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    // The rest after the journalled chunks, then all six again.
    assert!(r.received_bytes > 6 * CHUNK, "{r:?}");
    assert_eq!(r.resumed_bytes, 0);
    assert_eq!(r.verification.chunks_with_server_digest, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_journal_is_refused_and_existing_destination_kept() {
    let d = data(2 * CHUNK as usize, 7);
    let t = Arc::new(MemTransport::new(d, 1));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    std::fs::write(journal::journal_path(&dest), b"something else\n").unwrap();
    let err = get(&t, &dest, config()).await.unwrap_err();
    assert!(matches!(err, GetError::Journal(_)), "{err}");
    std::fs::write(&dest, b"precious").unwrap();
    let err = get(&t, &dest, config()).await.unwrap_err();
    assert!(matches!(err, GetError::DestinationExists { .. }));
    assert_eq!(std::fs::read(&dest).unwrap(), b"precious");
    // Not even --overwrite replaces something that is not a regular file.
    let cfg = GetConfig {
        overwrite: true,
        ..config()
    };
    let err = get(&t, dir.path(), cfg.clone()).await.unwrap_err();
    assert!(matches!(err, GetError::DestinationNotAFile { .. }), "{err}");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&dest, &link).unwrap();
    let err = get(&t, &link, cfg).await.unwrap_err();
    assert!(matches!(err, GetError::DestinationNotAFile { .. }), "{err}");
    assert_eq!(std::fs::read(&dest).unwrap(), b"precious");
}

/// The download failed on `--expect-sha256` and left no destination.
fn assert_refused_by_expected_digest(result: Result<xfer_core::Report, GetError>, dest: &Path) {
    let Err(err) = result else {
        panic!("the download succeeded despite a wrong --expect-sha256");
    };
    assert!(
        matches!(
            err,
            GetError::WholeDigestMismatch {
                source_of_expected: "--expect-sha256",
                ..
            }
        ),
        "{err}"
    );
    assert!(!dest.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_expected_digest_never_produces_the_file() {
    let d = data(3 * CHUNK as usize, 8);
    let t = Arc::new(MemTransport::new(d, 2));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let cfg = GetConfig {
        expect_sha256: Some(Sha256Digest::of(b"other")),
        ..config()
    };
    assert_refused_by_expected_digest(get(&t, &dest, cfg).await, &dest);
}

/// A file of one chunk is hashed once, by its lane, and keeps no journal (nothing to resume
/// between chunks); that digest is still checked against every expectation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_one_chunk_is_checked_without_journal_or_second_pass() {
    let d = data(CHUNK as usize - 5, 12);
    let t = Arc::new(MemTransport::new(d.clone(), 2));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    // A journal of an earlier, different transfer is not left for the next run to find.
    let other = journal::JournalHeader {
        url: "mem://other".into(),
        size: 10 * CHUNK,
        etag: None,
        last_modified: None,
        chunk_size: CHUNK,
        tapered: true,
        sha256: None,
    };
    journal::JournalWriter::create(&journal::journal_path(&dest), &other).unwrap();
    let wrong = GetConfig {
        expect_sha256: Some(Sha256Digest::of(b"other")),
        ..config()
    };
    assert_refused_by_expected_digest(get(&t, &dest, wrong).await, &dest);
    assert!(!journal::journal_path(&dest).exists());
    assert_eq!(std::fs::read(journal::part_path(&dest)).unwrap(), d);

    let right = GetConfig {
        expect_sha256: Some(Sha256Digest::of(&d)),
        ..config()
    };
    let r = get(&t, &dest, right).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(r.chunks, 1);
    assert_eq!(r.sha256, Some(Sha256Digest::of(&d).to_hex()));
    assert!(r.verification.expected_sha256);
    assert!(r.verification.server_whole_digest);
    assert!(!journal::journal_path(&dest).exists());
    assert!(!journal::part_path(&dest).exists());
    // However many lanes were opened, one carried the file.
    assert!(r.summary().contains(", 1 lane over "), "{}", r.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_without_ranges_or_digests_still_works() {
    let d = data(5 * CHUNK as usize + 3, 9);
    let t = Arc::new(
        MemTransport::new(d.clone(), 8)
            .without_ranges()
            .without_digests(),
    );
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let r = get(&t, &dest, config()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(r.lanes.len(), 1);
    assert_eq!(t.requests(), vec![0..d.len() as u64]);
    assert_eq!(r.sha256, Some(Sha256Digest::of(&d).to_hex()));
}

#[tokio::test]
async fn lanes_on_one_thread_hash_their_chunks_in_pairs() {
    use xfer_core::digest::{pairs_help, thread_pairing_stats};
    if !pairs_help() {
        eprintln!("skipped: this CPU has no SHA extensions, so lanes hash alone");
        return;
    }
    // The test's runtime runs every lane on this thread: while one lane's piece waits to be
    // hashed, the next lane's piece arrives and the two are hashed together.
    let d = data(16 * CHUNK as usize, 5);
    // Without the whole file's digest every chunk is checked against the server's.
    let t = Arc::new(MemTransport::new(d.clone(), 4).without_repr_digest());
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("paired");
    let before = thread_pairing_stats();
    get(&t, &dest, exact()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    let after = thread_pairing_stats();
    let (paired, alone) = (
        after.paired_bytes - before.paired_bytes,
        after.alone_bytes - before.alone_bytes,
    );
    // Each chunk is hashed once by its lane (the whole-file pass runs on its own thread);
    // bytes that straddle pieces go through a partial block and are not counted.
    assert!(
        paired + alone <= d.len() as u64 && paired + alone >= d.len() as u64 * 9 / 10,
        "{paired} + {alone} of {}",
        d.len()
    );
    assert!(
        paired >= d.len() as u64 / 2,
        "only {paired} of {} bytes hashed in pairs ({alone} alone)",
        d.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_checked_by_the_server_need_no_whole_file_pass_unless_asked() {
    let d = data(12 * CHUNK as usize + 5, 11);
    let t = Arc::new(MemTransport::new(d.clone(), 4).without_repr_digest());
    let dir = tempfile::tempdir().unwrap();
    let skip = GetConfig {
        whole_sha256: false,
        ..exact()
    };
    // Every chunk came with its digest: the file is verified, and no whole-file SHA-256 was
    // computed for the report.
    let dest = dir.path().join("skipped");
    let r = get(&t, &dest, skip.clone()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(r.sha256, None);
    assert!(
        r.verified_against
            .iter()
            .any(|s| s.contains("per-chunk") && s.contains("all")),
        "{:?}",
        r.verified_against
    );
    // The default still computes it.
    let dest = dir.path().join("default");
    let r = get(&t, &dest, exact()).await.unwrap();
    assert_eq!(r.sha256, Some(Sha256Digest::of(&d).to_hex()));
    // One chunk without a digest (the fifth): the pass starts from the first chunk, reading
    // back what it had let go, and the report has the whole file's digest.
    t.inject(4 * CHUNK, MemFault::NoDigest, 1);
    let dest = dir.path().join("mixed");
    let r = get(&t, &dest, skip.clone()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(r.sha256, Some(Sha256Digest::of(&d).to_hex()));
    // So does the last chunk without one, after every other chunk was sealed unhashed.
    let plan = ChunkPlan::tapered(d.len() as u64, CHUNK).unwrap();
    let last = plan.range(plan.chunk_count() - 1).start;
    t.inject(last, MemFault::NoDigest, 1);
    let dest = dir.path().join("last");
    let r = get(&t, &dest, skip.clone()).await.unwrap();
    assert_eq!(r.sha256, Some(Sha256Digest::of(&d).to_hex()));
    // And anything that needs the whole file's digest: the sha256 file.
    let dest = dir.path().join("file");
    let cfg = GetConfig {
        write_sha256_file: true,
        ..skip
    };
    let r = get(&t, &dest, cfg).await.unwrap();
    assert_eq!(r.sha256, Some(Sha256Digest::of(&d).to_hex()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_off_skips_hashing() {
    let d = data(4 * CHUNK as usize, 10);
    let t = Arc::new(MemTransport::new(d.clone(), 2));
    t.inject(0, MemFault::Corrupt, 1);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let r = get(
        &t,
        &dest,
        GetConfig {
            verify: false,
            ..config()
        },
    )
    .await
    .unwrap();
    // Nothing checks, so the corruption goes through: this is what "off" means.
    assert_ne!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(r.sha256, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_lane_is_overtaken_at_the_end() {
    let d = data(16 * CHUNK as usize, 11);
    let t = Arc::new(MemTransport::new(d.clone(), 4));
    // Lane 0 delivers 64 KiB per 200 ms: its first chunk alone would take 0.8 s. The others
    // take 2 ms per 64 KiB, so the transfer lasts long enough for every lane to get a chunk.
    t.slow_lane(0, Duration::from_millis(200));
    for lane in 1..4 {
        t.slow_lane(lane, Duration::from_millis(2));
    }
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let r = get(&t, &dest, config()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert!(r.duplicates >= 1, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interruption_keeps_the_journal_for_resume() {
    let d = data(32 * CHUNK as usize, 12);
    let t = Arc::new(MemTransport::new(d.clone(), 2));
    t.slow_lane(0, Duration::from_millis(2));
    t.slow_lane(1, Duration::from_millis(2));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let dl = Download::new(t.clone(), "mem://resource", &dest, config());
    let progress = dl.progress();
    // Interrupt once a few chunks are verified, as Ctrl-C would.
    let ctrl_c = async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while progress.snapshot().verified < 4 * CHUNK {
            assert!(
                tokio::time::Instant::now() < deadline,
                "four chunks never verified: {:?}",
                progress.snapshot()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let err = dl.run_until(ctrl_c).await.unwrap_err();
    assert!(matches!(err, GetError::Interrupted));
    let loaded = journal::load(&journal::journal_path(&dest))
        .unwrap()
        .unwrap();
    assert!(
        !loaded.chunks.is_empty(),
        "{}",
        std::fs::read_to_string(journal::journal_path(&dest)).unwrap()
    );
    let r = get(&t, &dest, config()).await.unwrap();
    assert_eq!(r.resumed_bytes, loaded.chunks.len() as u64 * CHUNK);
    assert_eq!(std::fs::read(&dest).unwrap(), d);
}

#[test]
fn download_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let t = Arc::new(MemTransport::new(vec![0u8; 10], 1));
    let f = Download::new(t, "x", "/nonexistent/x", GetConfig::default()).run();
    assert_send(&f);
}

/// A part file on a disk that fills up after `room` bytes, or whose syncs fail.
struct FailingDisk {
    file: std::fs::File,
    room: std::sync::atomic::AtomicU64,
    sync_fails: bool,
}

impl xfer_core::sink::PartFile for FailingDisk {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        let n = buf.len() as u64;
        let left = self.room.load(Ordering::SeqCst);
        if n > left {
            self.room.store(0, Ordering::SeqCst);
            return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
        }
        self.room.store(left - n, Ordering::SeqCst);
        std::os::unix::fs::FileExt::write_all_at(&self.file, buf, offset)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        if self.sync_fails {
            return Err(std::io::Error::other("simulated I/O error on sync"));
        }
        self.file.sync_data()
    }
}

fn failing_disk(
    room: u64,
    sync_fails: bool,
) -> impl FnMut(std::fs::File) -> Box<dyn xfer_core::sink::PartFile> + Send {
    move |file| {
        Box::new(FailingDisk {
            file,
            room: room.into(),
            sync_fails,
        })
    }
}

/// A part file whose disk changes one byte of what is written at `offset` (bad memory or a
/// broken filesystem): the write succeeds, the file differs.
struct GarblingDisk {
    file: std::fs::File,
    offset: u64,
}

impl xfer_core::sink::PartFile for GarblingDisk {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let mut buf = buf.to_vec();
        if let Some(b) = self
            .offset
            .checked_sub(offset)
            .and_then(|i| buf.get_mut(usize::try_from(i).ok()?))
        {
            *b ^= 0x40;
        }
        std::os::unix::fs::FileExt::write_all_at(&self.file, &buf, offset)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
}

/// With no memory for the whole-file hash, every chunk is read back from the part file: the
/// whole-file digest is then that of the file as written, and a disk that garbles a write is
/// caught even though every chunk matched its digest on arrival.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_every_chunk_back_catches_a_disk_that_garbles_a_write() {
    let d = data(6 * CHUNK as usize, 23);
    let t = Arc::new(MemTransport::new(d.clone(), 3));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let cfg = GetConfig {
        hash_memory: 0,
        expect_sha256: Some(Sha256Digest::of(&d)),
        ..exact()
    };
    let dl = Download::new(t.clone(), "mem://resource", &dest, cfg).wrap_part_file(
        |file| -> Box<dyn xfer_core::sink::PartFile> {
            Box::new(GarblingDisk {
                file,
                offset: 4 * CHUNK + 17,
            })
        },
    );
    assert_refused_by_expected_digest(dl.run().await, &dest);
}

/// The hang this guards against was a driver that never heard of the writer's death; a
/// generous bound turns such a hang into a failure instead of a stuck CI job.
const NO_HANG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_ends_the_transfer_and_a_rerun_resumes() {
    let d = data(40 * CHUNK as usize, 21);
    let t = Arc::new(MemTransport::new(d.clone(), 4));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let dl = Download::new(t.clone(), "mem://resource", &dest, exact())
        .wrap_part_file(failing_disk(10 * CHUNK, false));
    let err = tokio::time::timeout(NO_HANG, dl.run())
        .await
        .expect("the download must end when the disk is full")
        .unwrap_err();
    assert!(matches!(err, GetError::Write(_)), "{err}");
    assert!(err.to_string().contains("writing"), "{err}");
    assert!(!dest.exists());
    assert!(journal::part_path(&dest).exists());
    let loaded = journal::load(&journal::journal_path(&dest))
        .unwrap()
        .unwrap();

    // Space freed: the same download resumes from what was journalled.
    let r = get(&t, &dest, exact()).await.unwrap();
    assert_eq!(r.resumed_bytes, loaded.chunks.len() as u64 * CHUNK);
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert!(!journal::journal_path(&dest).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_sync_ends_the_transfer_keeping_the_part_file() {
    let d = data(8 * CHUNK as usize, 22);
    let t = Arc::new(MemTransport::new(d.clone(), 2));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let dl = Download::new(t.clone(), "mem://resource", &dest, exact())
        .wrap_part_file(failing_disk(u64::MAX, true));
    let err = tokio::time::timeout(NO_HANG, dl.run())
        .await
        .expect("the download must end when syncing fails")
        .unwrap_err();
    assert!(matches!(err, GetError::Write(_)), "{err}");
    assert!(err.to_string().contains("syncing"), "{err}");
    assert!(!dest.exists());
    assert!(journal::part_path(&dest).exists());
    get(&t, &dest, exact()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
}

/// Info given up front replaces `stat`; wrong info is caught by the ranges, never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_remote_info_skips_stat_and_is_checked() {
    use xfer_core::transport::RemoteInfo;
    let d = data(3 * CHUNK as usize + 5, 4);
    let t = Arc::new(MemTransport::new(d.clone(), 2));
    t.set_etag("\"v1\"");
    let dir = tempfile::tempdir().unwrap();
    let info = |size: u64, etag: &str| RemoteInfo {
        url: "mem://resource".into(),
        size,
        etag: Some(etag.into()),
        last_modified: None,
        accepts_ranges: true,
        sha256: None,
    };
    let dest = dir.path().join("ok.bin");
    Download::new(t.clone(), "mem://resource", &dest, exact())
        .with_known_remote(info(d.len() as u64, "\"v1\""))
        .run()
        .await
        .unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);

    for (size, etag) in [(d.len() as u64 - 1, "\"v1\""), (d.len() as u64, "\"v0\"")] {
        let dest = dir.path().join("stale.bin");
        let err = Download::new(t.clone(), "mem://resource", &dest, exact())
            .with_known_remote(info(size, etag))
            .run()
            .await
            .err()
            .map(|e| format!("{e:#?}"))
            .unwrap_or_default();
        assert!(err.contains("RemoteChanged"), "{size} {etag}: {err}");
        assert!(!dest.exists());
    }
}

/// `--checksum adler32`: the server's adler32 is checked against the bytes written; a wrong
/// one keeps the part file and never produces the destination, a server without one fails
/// before any byte is fetched, and a right one is named in the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_checksum_is_verified() {
    use xfer_core::checksum::{ChecksumAlgorithm, Checksummer};
    let d = data(3 * CHUNK as usize + 5, 12);
    let adler = Checksummer::of(ChecksumAlgorithm::Adler32, &d);
    let md5 = Checksummer::of(ChecksumAlgorithm::Md5, &d);
    let cfg = |alg| GetConfig {
        checksum: Some(alg),
        ..config()
    };
    let dir = tempfile::tempdir().unwrap();

    let good = Arc::new(MemTransport::new(d.clone(), 2).with_checksum(adler.clone()));
    let dest = dir.path().join("good");
    let report = get(&good, &dest, cfg(ChecksumAlgorithm::Adler32))
        .await
        .unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(
        report.verification.server_checksum.as_deref(),
        Some(adler.to_string().as_str())
    );

    let wrong = Checksummer::of(ChecksumAlgorithm::Md5, b"something else");
    let bad = Arc::new(MemTransport::new(d.clone(), 2).with_checksum(wrong));
    let dest = dir.path().join("bad");
    let err = get(&bad, &dest, cfg(ChecksumAlgorithm::Md5))
        .await
        .unwrap_err();
    match &err {
        GetError::ChecksumMismatch { actual, part, .. } => {
            assert_eq!(actual, &md5);
            assert_eq!(std::fs::read(part).unwrap(), d, "the part file is kept");
        }
        other => panic!("expected a checksum mismatch, got {other}"),
    }
    assert!(!dest.exists());

    // Asked for md5, the server only knows adler32: nothing is fetched.
    let dest = dir.path().join("none");
    let err = get(&good, &dest, cfg(ChecksumAlgorithm::Md5))
        .await
        .unwrap_err();
    assert!(matches!(err, GetError::NoServerChecksum { .. }), "{err}");
    assert!(!dest.exists());
    assert!(!journal::part_path(&dest).exists());
}

/// adler32 is combined from the chunks' values the lanes computed, in whatever order the
/// chunks completed: exact with many lanes, with a chunk corrupted and fetched again, with
/// verification off (no SHA-256 pass at all), and on a resume (whose journalled chunks go
/// through the in-order pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adler32_combined_from_chunks_matches_the_servers() {
    use xfer_core::checksum::{ChecksumAlgorithm, Checksummer};
    let d = data(23 * CHUNK as usize + 777, 38);
    let adler = Checksummer::of(ChecksumAlgorithm::Adler32, &d);
    let cfg = |verify| GetConfig {
        checksum: Some(ChecksumAlgorithm::Adler32),
        verify,
        ..config()
    };
    let dir = tempfile::tempdir().unwrap();
    for (name, verify, per_chunk_digests) in [
        ("sha", true, true),
        ("no-repr", true, false),
        ("no-verify", false, true),
    ] {
        let t = MemTransport::new(d.clone(), 4).with_checksum(adler.clone());
        let t = Arc::new(if per_chunk_digests {
            t
        } else {
            t.without_digests()
        });
        if per_chunk_digests && verify {
            // Caught by the chunk's digest or the whole file's, and fetched again: the value
            // kept for the chunk is the good copy's.
            t.inject(5 * CHUNK, MemFault::Corrupt, 1);
        }
        let dest = dir.path().join(name);
        let report = get(&t, &dest, cfg(verify)).await.unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), d, "{name}");
        assert_eq!(
            report.verification.server_checksum.as_deref(),
            Some(adler.to_string().as_str()),
            "{name}"
        );
        assert_eq!(report.verification.local_hash, verify, "{name}");
    }

    // A resume: the journalled chunks are read back in order, the rest combined with them.
    let t = Arc::new(MemTransport::new(d.clone(), 1).with_checksum(adler.clone()));
    t.inject(9 * CHUNK, MemFault::Fail { retryable: false }, 1);
    let dest = dir.path().join("resumed");
    let one_at_a_time = GetConfig {
        request_ahead: Some(false),
        ..cfg(true)
    };
    get(&t, &dest, one_at_a_time).await.unwrap_err();
    assert!(journal::journal_path(&dest).exists());
    let r = get(&t, &dest, cfg(true)).await.unwrap();
    assert_eq!(r.resumed_bytes, 9 * CHUNK);
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(
        r.verification.server_checksum.as_deref(),
        Some(adler.to_string().as_str())
    );
}

/// A chunk damaged on its way that nothing else checks is caught by the combined adler32:
/// the error names the file, keeps the part file, and no destination appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_chunk_fails_the_combined_adler32_naming_the_file() {
    use xfer_core::checksum::{ChecksumAlgorithm, Checksummer};
    let d = data(9 * CHUNK as usize + 3, 39);
    let adler = Checksummer::of(ChecksumAlgorithm::Adler32, &d);
    let dir = tempfile::tempdir().unwrap();
    for (name, verify) in [("verified.bin", true), ("unverified.bin", false)] {
        let t = Arc::new(
            MemTransport::new(d.clone(), 3)
                .with_checksum(adler.clone())
                .without_digests(),
        );
        t.inject(4 * CHUNK, MemFault::Corrupt, 1);
        let dest = dir.path().join(name);
        let cfg = GetConfig {
            checksum: Some(ChecksumAlgorithm::Adler32),
            verify,
            ..config()
        };
        let err = get(&t, &dest, cfg).await.unwrap_err();
        match &err {
            GetError::ChecksumMismatch {
                path,
                part,
                actual,
                expected,
            } => {
                assert_eq!(path, &dest);
                assert_eq!(expected, &adler);
                let on_disk = std::fs::read(part).unwrap();
                assert_ne!(on_disk, d, "the damaged bytes are what was written");
                assert_eq!(
                    actual,
                    &Checksummer::of(ChecksumAlgorithm::Adler32, &on_disk),
                    "the combined value is that of the bytes written"
                );
            }
            other => panic!("{name}: expected a checksum mismatch, got {other}"),
        }
        assert!(err.to_string().contains(name), "{err}");
        assert!(!dest.exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_lanes_add_and_retire_lanes_mid_transfer_and_say_why() {
    use xfer_core::adapt::{Action, AdaptConfig};
    // Every lane is slow (a piece per 10 ms): more lanes, more goodput, so the controller
    // adds lanes while chunks are in flight; whatever it decides, the bytes must be exact.
    let d = data(192 * CHUNK as usize + 12_345, 7);
    let t = Arc::new(MemTransport::new(d.clone(), 4));
    for lane in 0..64 {
        t.slow_lane(lane, Duration::from_millis(10));
    }
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out.bin");
    let adapt = AdaptConfig {
        min_lanes: 2,
        max_lanes: 16,
        initial_lanes: 4,
        min_window: Duration::from_millis(200),
        window_rtts: 1,
        warmup_rtts: 1,
        settle_rtts: 1,
        ..AdaptConfig::default()
    };
    let cfg = GetConfig {
        adapt: Some(adapt),
        ..config()
    };
    let r = get(&t, &dest, cfg).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    let a = r
        .adaptive_lanes
        .expect("the report says what the controller chose");
    assert_eq!((a.min_lanes, a.max_lanes, a.initial_lanes), (2, 16, 4));
    // The first window ends 0.4 s in, with well over a second of work left at 4 lanes.
    let first = a.decisions.first().expect("at least one decision");
    assert!(matches!(first.action, Action::Add(2)), "{a:#?}");
    let added: usize = a
        .decisions
        .iter()
        .map(|d| match d.action {
            Action::Add(n) => n,
            _ => 0,
        })
        .sum();
    assert_eq!(r.lanes.len(), 4 + added, "a lane report per lane started");
    assert!(a.decisions.iter().all(|d| (2..=16).contains(&d.lanes)));
    assert!((2..=16).contains(&a.final_lanes));
    assert!(a.peak_lanes >= a.final_lanes);
    assert!(
        a.summary().starts_with("lanes auto 2..16: 4→6"),
        "{}",
        a.summary()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_bounds_that_admit_no_count_are_refused() {
    use xfer_core::adapt::AdaptConfig;
    let t = Arc::new(MemTransport::new(data(1000, 1), 4));
    let dir = tempfile::tempdir().unwrap();
    let cfg = GetConfig {
        adapt: Some(AdaptConfig {
            min_lanes: 8,
            max_lanes: 4,
            ..AdaptConfig::default()
        }),
        ..config()
    };
    let e = get(&t, &dir.path().join("x"), cfg).await.unwrap_err();
    assert!(e.to_string().contains("exceed"), "{e}");
}

/// A link planted at `<dest>.part` or `<dest>.xfer-journal`, fresh or on a resume, is refused
/// by name: the link's target keeps its bytes, the destination is not created, and no link
/// becomes the final name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_at_a_staging_name_is_never_written_through() {
    let d = data(6 * CHUNK as usize + 5, 11);
    let t = Arc::new(MemTransport::new(d.clone(), 2));
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious");
    let planted = |link: &Path| {
        std::fs::write(&target, b"precious bytes").unwrap();
        std::os::unix::fs::symlink(&target, link).unwrap();
    };
    let untouched = |link: &Path, dest: &Path| {
        assert_eq!(std::fs::read(&target).unwrap(), b"precious bytes");
        assert!(std::fs::symlink_metadata(link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::symlink_metadata(dest).is_err(), "{dest:?} created");
    };

    // Fresh downloads: the part file, then the journal.
    let dest = dir.path().join("a.bin");
    let part = journal::part_path(&dest);
    planted(&part);
    let err = get(&t, &dest, config()).await.unwrap_err();
    assert!(
        matches!(&err, GetError::StagingLink { path } if *path == part),
        "{err}"
    );
    assert!(err.to_string().contains("symbolic link"), "{err}");
    untouched(&part, &dest);

    let dest = dir.path().join("b.bin");
    let jpath = journal::journal_path(&dest);
    planted(&jpath);
    let err = get(&t, &dest, config()).await.unwrap_err();
    assert!(
        matches!(
            &err,
            GetError::Journal(journal::JournalError::Symlink { .. })
        ),
        "{err}"
    );
    untouched(&jpath, &dest);

    // A resume: a real journal, and a link where its part file was.
    let dest = dir.path().join("c.bin");
    t.inject(3 * CHUNK, MemFault::Fail { retryable: false }, 1);
    let one_at_a_time = GetConfig {
        request_ahead: Some(false),
        lanes: Some(1),
        ..config()
    };
    get(&t, &dest, one_at_a_time).await.unwrap_err();
    assert!(journal::journal_path(&dest).exists());
    let part = journal::part_path(&dest);
    std::fs::remove_file(&part).unwrap();
    planted(&part);
    let err = get(&t, &dest, config()).await.unwrap_err();
    assert!(matches!(&err, GetError::StagingLink { .. }), "{err}");
    untouched(&part, &dest);

    // Once the link is gone the same command completes.
    std::fs::remove_file(&part).unwrap();
    get(&t, &dest, config()).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), d);
}

/// `with_staging` keeps the part file and journal where it says, and nothing beside the
/// destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_elsewhere_leaves_nothing_beside_the_destination() {
    let d = data(5 * CHUNK as usize + 3, 12);
    let t = Arc::new(MemTransport::new(d.clone(), 1));
    t.inject(2 * CHUNK, MemFault::Fail { retryable: false }, 1);
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("stage");
    std::fs::create_dir(&stage).unwrap();
    let dest = dir.path().join("f");
    let staging = xfer_core::get::Staging {
        part: stage.join("s.part"),
        journal: stage.join("s.xfer-journal"),
    };
    let one_at_a_time = GetConfig {
        request_ahead: Some(false),
        ..config()
    };
    let run =
        |cfg| Download::new(t.clone(), "mem://resource", &dest, cfg).with_staging(staging.clone());
    run(one_at_a_time).run().await.unwrap_err();
    assert!(staging.part.exists() && staging.journal.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only stage/"
    );
    let r = run(config()).run().await.unwrap();
    assert_eq!(r.resumed_bytes, 2 * CHUNK);
    assert_eq!(std::fs::read(&dest).unwrap(), d);
    assert_eq!(std::fs::read_dir(&stage).unwrap().count(), 0);
}
