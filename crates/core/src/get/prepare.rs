//! Preparing the destination: resume from a matching journal or start over; and, at the end,
//! putting the verified file in place.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::disk_space::{available_bytes, MAX_DECLARED_SIZE};
use super::{GetConfig, GetError};
use crate::digest::Sha256Digest;
use crate::journal::{self, JournalHeader, JournalWriter};
use crate::nofollow;
use crate::plan::ChunkPlan;
use crate::schedule::ScheduleConfig;
use crate::transport::{FirstRequest, Opened, RemoteInfo, Transport};

/// [`Transport::open_first`], retried like a chunk when the failure is transient.
pub(super) async fn open_with_retries(
    transport: &dyn Transport,
    url: &str,
    first: FirstRequest,
    policy: &ScheduleConfig,
) -> Result<Opened, GetError> {
    let mut attempt = 0u32;
    loop {
        match transport.open_first(0, first).await {
            Ok(opened) => return Ok(opened),
            Err(e)
                if e.is_retryable()
                    && !e.is_refused()
                    && attempt + 1 < policy.max_attempts.min(4) =>
            {
                attempt += 1;
                let wait = policy
                    .backoff_initial
                    .saturating_mul(1 << attempt.min(6))
                    .min(policy.backoff_max);
                tracing::warn!(error = %e, ?wait, "first request failed; retrying");
                tokio::time::sleep(wait).await;
            }
            Err(source) => {
                return Err(GetError::Stat {
                    url: url.to_string(),
                    source,
                })
            }
        }
    }
}

/// Files and plan ready for the transfer.
pub(super) struct Prepared {
    pub plan: ChunkPlan,
    pub part: File,
    /// `None` for a fresh transfer of one chunk, which has nothing to resume.
    pub journal: Option<JournalWriter>,
    /// Chunks the journal claims are done, each to be re-checked by the whole-file hasher.
    pub claimed: Vec<journal::ChunkRecord>,
    pub resumed_bytes: u64,
}

/// Resume from a matching journal, or start over.
pub(super) fn prepare(
    info: &RemoteInfo,
    header: &JournalHeader,
    part_path: &Path,
    journal_path: &Path,
    cfg: &GetConfig,
) -> Result<Prepared, GetError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| staging_error(what, path, source)
    };
    if info.size > MAX_DECLARED_SIZE {
        return Err(GetError::ImplausibleSize {
            url: info.url.clone(),
            size: info.size,
        });
    }
    if info.accepts_ranges {
        if let Some(loaded) = journal::load(journal_path)? {
            // Not through a link: the part file is opened without following one below, and
            // a link here is refused there.
            let part_len = std::fs::symlink_metadata(part_path)
                .ok()
                .filter(|m| m.file_type().is_file())
                .map(|m| m.len());
            let reason = loaded.header.mismatch(header).or_else(|| match part_len {
                Some(len) if len == info.size => None,
                Some(len) => Some(format!(
                    "{} has {len} bytes, expected {}",
                    part_path.display(),
                    info.size
                )),
                None => Some(format!("{} is missing", part_path.display())),
            });
            match reason {
                None => {
                    let plan = ChunkPlan::with_taper(
                        info.size,
                        loaded.header.chunk_size,
                        loaded.header.tapered,
                    )?;
                    if loaded.header.chunk_size != cfg.chunk_size {
                        tracing::info!(
                            chunk_size = loaded.header.chunk_size,
                            "resuming with the journal's chunk size"
                        );
                    }
                    if loaded.ignored_lines > 0 {
                        tracing::warn!(lines = loaded.ignored_lines, journal = %journal_path.display(), "ignored damaged journal lines; those chunks are fetched again");
                    }
                    if header.etag.is_none() && header.last_modified.is_none() {
                        tracing::warn!("the server sends no ETag or Last-Modified: resuming trusts that the file is unchanged (the whole-file digest still checks it)");
                    }
                    let claimed: Vec<_> = loaded
                        .chunks
                        .iter()
                        .copied()
                        .filter(|r| {
                            r.chunk < plan.chunk_count()
                                && plan.range(r.chunk) == (r.offset..r.offset + r.len)
                        })
                        .collect();
                    let resumed_bytes = claimed.iter().map(|r| r.len).sum();
                    let kept = journal::LoadedJournal {
                        chunks: claimed.clone(),
                        ..loaded
                    };
                    let journal = JournalWriter::append_to(journal_path, &kept)?;
                    let part = nofollow::open_write(part_path).map_err(io("opening", part_path))?;
                    tracing::info!(chunks = claimed.len(), bytes = resumed_bytes, "resuming");
                    return Ok(Prepared {
                        plan,
                        part,
                        journal: Some(journal),
                        claimed,
                        resumed_bytes,
                    });
                }
                Some(reason) => {
                    tracing::warn!(%reason, journal = %journal_path.display(), "cannot resume: starting over");
                }
            }
        }
    }
    check_room(info, part_path)?;
    let plan = if info.accepts_ranges {
        ChunkPlan::with_taper(info.size, cfg.chunk_size, cfg.taper)?
    } else {
        ChunkPlan::whole(info.size)
    };
    let part = nofollow::create_fresh(part_path).map_err(io("creating", part_path))?;
    part.set_len(info.size).map_err(io("sizing", part_path))?;
    let header = JournalHeader {
        chunk_size: plan.chunk_size(),
        tapered: plan.is_tapered(),
        ..header.clone()
    };
    // A chunk is fetched whole or again, so a transfer of one chunk gains nothing from a
    // journal; skipping it saves a file, two syncs and an unlink per small file of a tree. A
    // stale journal of another transfer must not be found by the next run.
    let journal = if plan.chunk_count() > 1 {
        Some(JournalWriter::create(journal_path, &header)?)
    } else {
        nofollow::remove_if_present(journal_path)
            .map_err(io("removing the stale journal", journal_path))?;
        None
    };
    Ok(Prepared {
        plan,
        part,
        journal,
        claimed: Vec::new(),
        resumed_bytes: 0,
    })
}

/// Refuse a size the destination's filesystem cannot hold, before anything is created.
fn check_room(info: &RemoteInfo, part_path: &Path) -> Result<(), GetError> {
    let dir = part_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let available = available_bytes(dir).map_err(|source| GetError::Io {
        what: "asking the free space of",
        path: dir.to_path_buf(),
        source,
    })?;
    match available {
        Some(available) if info.size > available => Err(GetError::NoRoom {
            path: part_path.to_path_buf(),
            size: info.size,
            available,
        }),
        _ => Ok(()),
    }
}

/// Make the verified part file the destination, durably, and remove the journal if one was
/// kept.
pub(super) fn finalize(
    part: &Path,
    dest: &Path,
    journal_path: Option<&Path>,
) -> Result<(), GetError> {
    // rename(2) moves a link as it is: the name written must still be the regular file
    // written through it, not one planted since.
    match std::fs::symlink_metadata(part) {
        Ok(m) if m.file_type().is_file() => {}
        Ok(_) => {
            return Err(GetError::StagingLink {
                path: part.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(GetError::Io {
                what: "checking before renaming",
                path: part.to_path_buf(),
                source,
            })
        }
    }
    std::fs::rename(part, dest).map_err(|source| GetError::Io {
        what: "renaming to its final name",
        path: part.to_path_buf(),
        source,
    })?;
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The rename is durable once the directory is.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    if let Some(journal_path) = journal_path {
        if let Err(e) = std::fs::remove_file(journal_path) {
            tracing::warn!(journal = %journal_path.display(), error = %e, "could not remove the journal");
        }
    }
    Ok(())
}

/// An I/O error on a staging file; a link found at its name says so.
pub(super) fn staging_error(what: &'static str, path: PathBuf, source: std::io::Error) -> GetError {
    if nofollow::is_link(&source) {
        GetError::StagingLink { path }
    } else {
        GetError::Io { what, path, source }
    }
}

/// `<dest>.sha256` in `sha256sum -c` format.
pub(super) fn write_sha256_file(dest: &Path, digest: Sha256Digest) -> Result<(), GetError> {
    let path = journal::with_suffix(dest, ".sha256");
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let line = format!("{}  {name}\n", digest.to_hex());
    nofollow::create_fresh(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|source| staging_error("writing", path, source))
}
