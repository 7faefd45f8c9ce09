//! The end of a download: the whole-file check and the report.

use std::path::Path;
use std::time::Instant;

use super::{GetConfig, GetError};
use crate::adapt::AdaptReport;
use crate::checksum::Checksum;
use crate::digest::Sha256Digest;
use crate::plan::ChunkPlan;
use crate::progress::{LaneReport, Progress, Report};
use crate::transport::{RemoteInfo, Transport};
use crate::verification::Verification;

/// Compare the whole-file digest with every expectation; what matched, for the report (the
/// per-chunk counts are the caller's to fill in).
pub(super) fn check_whole(
    cfg: &GetConfig,
    info: &RemoteInfo,
    whole_digest: Option<Sha256Digest>,
    dest: &Path,
    part_path: &Path,
) -> Result<Verification, GetError> {
    let mut verification = Verification {
        local_hash: whole_digest.is_some(),
        ..Verification::default()
    };
    let Some(actual) = whole_digest else {
        return Ok(verification);
    };
    for (expected, source_of_expected) in [
        (cfg.expect_sha256, "--expect-sha256"),
        (info.sha256, "the server's Repr-Digest"),
    ] {
        if let Some(expected) = expected {
            if expected != actual {
                return Err(GetError::WholeDigestMismatch {
                    path: dest.to_path_buf(),
                    part: part_path.to_path_buf(),
                    actual,
                    expected,
                    source_of_expected,
                });
            }
        }
    }
    verification.expected_sha256 = cfg.expect_sha256.is_some();
    verification.server_whole_digest = info.sha256.is_some();
    Ok(verification)
}

/// Compare the checksum computed over the file with the one the server sent for `--checksum`;
/// what matched, for the report.
pub(super) fn check_checksum(
    expected: Option<&Checksum>,
    actual: Option<Checksum>,
    dest: &Path,
    part_path: &Path,
) -> Result<Option<String>, GetError> {
    let Some(expected) = expected else {
        return Ok(None);
    };
    let Some(actual) = actual else {
        return Err(GetError::Config(format!(
            "{}: the whole-file {} was not computed",
            dest.display(),
            expected.algorithm
        )));
    };
    if &actual != expected {
        return Err(GetError::ChecksumMismatch {
            path: dest.to_path_buf(),
            part: part_path.to_path_buf(),
            actual,
            expected: expected.clone(),
        });
    }
    Ok(Some(actual.to_string()))
}

/// Warn when nothing from the server vouched for the file; with `require_digest`, refuse it
/// unless the server or `--expect-sha256` did.
pub(super) fn require_evidence(
    cfg: &GetConfig,
    verification: &Verification,
    dest: &Path,
    part_path: &Path,
) -> Result<(), GetError> {
    if cfg.require_digest && !verification.is_checked() {
        return Err(GetError::Unverified {
            path: dest.to_path_buf(),
            part: part_path.to_path_buf(),
            what: verification.describe(),
        });
    }
    if cfg.verify && !verification.is_checked() {
        tracing::warn!(
            dest = %dest.display(),
            "{}; the bytes are as received, which a faulty or hostile server could have altered (--require-digest refuses this)",
            verification.describe()
        );
    }
    Ok(())
}

/// What the report is made of.
pub(super) struct Finished<'a> {
    pub info: &'a RemoteInfo,
    pub dest: &'a Path,
    pub transport: &'a dyn Transport,
    pub plan: &'a ChunkPlan,
    pub progress: &'a Progress,
    pub started: Instant,
    pub whole_digest: Option<Sha256Digest>,
    pub verification: Verification,
    pub adaptive_lanes: Option<AdaptReport>,
}

pub(super) fn report(f: Finished<'_>) -> Report {
    let snap = f.progress.snapshot();
    let seconds = f.started.elapsed().as_secs_f64();
    let new_bytes = f.info.size - snap.resumed.min(f.info.size);
    Report {
        url: f.info.url.clone(),
        dest: f.dest.display().to_string(),
        protocol: f.transport.protocol(),
        size: f.info.size,
        chunk_size: f.plan.chunk_size(),
        chunks: f.plan.chunk_count(),
        resumed_bytes: snap.resumed,
        received_bytes: snap.received,
        seconds,
        goodput_bps: if seconds > 0.0 {
            new_bytes as f64 * 8.0 / seconds
        } else {
            0.0
        },
        lanes: snap
            .lanes
            .iter()
            .map(|l| LaneReport {
                lane: l.lane,
                label: l.label.clone(),
                bytes: l.bytes,
                chunks: l.chunks,
                busy_seconds: l.busy.as_secs_f64(),
                throughput_bps: if l.busy.is_zero() {
                    0.0
                } else {
                    l.bytes as f64 * 8.0 / l.busy.as_secs_f64()
                },
                retries: l.retries,
                round_trips: l.round_trips,
            })
            .collect(),
        retries: snap.retries,
        digest_mismatches: snap.digest_mismatches,
        duplicates: snap.duplicates,
        sha256: f.whole_digest.map(|d| d.to_hex()),
        verified_against: f.verification.sources(),
        verification: f.verification,
        connections: f.transport.connection_stats(),
        sources: f.transport.source_reports(),
        adaptive_lanes: f.adaptive_lanes,
        spread: f.transport.spread_report(),
        last_modified: f.info.last_modified.clone(),
    }
}
