//! RFC 3230 `Want-Digest` answered with `Digest`, and RFC 9530 `Want-Repr-Digest` answered
//! with `Repr-Digest`: adler32 (what gfal2 and FTS check for the WLCG), MD5 and SHA-256, best
//! first as the client ranks them. SHA-256 comes from the digest cache when it knows the
//! resource; the others come from a small cache keyed like the SHA-256 one (path, inode,
//! size, mtime, ctime), so a file rewritten in place is hashed again. That cache is filled
//! while a whole file is sent (`ServiceConfig::checksums_on_send`) or, failing that, by
//! reading the whole resource on the blocking pool when a client asks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use xfer_common::resource::ContentKey;
use xfer_common::{DigestCache, Resource};
use xfer_core::checksum::{want_digest_preferences, Checksum, ChecksumAlgorithm, Checksummer};
use xfer_core::digest::Sha256Digest;

/// Checksums remembered at most; beyond, an arbitrary one is forgotten.
const CACHE_ENTRIES: usize = 4096;
/// Synthetic resources larger than this (bytes) get no checksum on request, as the digest
/// cache hashes none larger in the background.
const MAX_SYNTHETIC_SIZE: u64 = 1 << 30;
/// Bytes read at a time while computing.
const BLOCK: usize = 1 << 20;

/// adler32 and MD5 of resources, as computed.
#[derive(Debug, Clone, Default)]
pub struct ChecksumCache {
    entries: Arc<Mutex<HashMap<(ContentKey, ChecksumAlgorithm), Checksum>>>,
}

impl ChecksumCache {
    fn get(&self, key: &(ContentKey, ChecksumAlgorithm)) -> Option<Checksum> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    fn put(&self, key: (ContentKey, ChecksumAlgorithm), value: Checksum) {
        let mut m = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= CACHE_ENTRIES {
            if let Some(k) = m.keys().next().cloned() {
                m.remove(&k);
            }
        }
        m.insert(key, value);
    }
}

impl ChecksumCache {
    /// A checksum of the resource as it is now, if computed before.
    pub fn lookup(&self, resource: &Resource, algorithm: ChecksumAlgorithm) -> Option<Checksum> {
        self.get(&(resource.content_key(), algorithm))
    }

    /// Drop the checksums of the file at `canonical`, once its name no longer holds that
    /// content (a deletion, a rename away).
    pub(crate) fn forget_path(&self, canonical: &std::path::Path) {
        let mut m = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|(k, _), _| !matches!(k, ContentKey::File { path, .. } if path == canonical));
    }

    /// Remember a checksum of the resource, computed elsewhere (e.g. while sending it whole).
    pub(crate) fn record(&self, resource: &Resource, checksum: Checksum) {
        self.put((resource.content_key(), checksum.algorithm), checksum);
    }
}

/// The checksum answering `want` (the `Want-Digest` field values, which RFC 9110 §5.3 lets a
/// sender split over several lines), or `None` when it names nothing xfer computes. A
/// resource that cannot be read leaves it out.
pub(crate) async fn wanted_digest(
    cache: &ChecksumCache,
    digests: &DigestCache,
    resource: &Resource,
    want: &[String],
    sha256: Option<Sha256Digest>,
) -> Option<Checksum> {
    let algorithm = *want_digest_preferences(&want.join(",")).first()?;
    checksum_of(cache, digests, resource, algorithm, sha256).await
}

/// The `Repr-Digest` member to send besides a known SHA-256 for an RFC 9530
/// `Want-Repr-Digest` asking `want` (best first): the best-ranked adler32 or MD5 when it
/// outranks SHA-256 or SHA-256 is not known yet. SHA-256 itself is never computed here: it
/// comes from the background hasher, so a `HEAD` from xfer's own client never waits for it.
pub(crate) async fn repr_digest_extra(
    cache: &ChecksumCache,
    digests: &DigestCache,
    resource: &Resource,
    want: &[ChecksumAlgorithm],
    sha256: Option<Sha256Digest>,
) -> Option<Checksum> {
    let sha256_suffices = want.first() == Some(&ChecksumAlgorithm::Sha256) && sha256.is_some();
    if sha256_suffices {
        return None;
    }
    let algorithm = *want.iter().find(|a| **a != ChecksumAlgorithm::Sha256)?;
    checksum_of(cache, digests, resource, algorithm, sha256).await
}

/// One checksum of the resource: known, or computed on the blocking pool and remembered.
async fn checksum_of(
    cache: &ChecksumCache,
    digests: &DigestCache,
    resource: &Resource,
    algorithm: ChecksumAlgorithm,
    sha256: Option<Sha256Digest>,
) -> Option<Checksum> {
    if let (ChecksumAlgorithm::Sha256, Some(d)) = (algorithm, sha256) {
        return Checksum::from_bytes(ChecksumAlgorithm::Sha256, &d.0);
    }
    if let Some(c) = cache.lookup(resource, algorithm) {
        return Some(c);
    }
    if resource.synthetic_spec().is_some() && resource.size() > MAX_SYNTHETIC_SIZE {
        // `/.xfer/synthetic?size=1P` exists for throughput runs: hashing it would hold a
        // blocking thread for hours on one request.
        return None;
    }
    let r = resource.clone();
    let computed = tokio::task::spawn_blocking(move || compute(&r, algorithm))
        .await
        .ok()?;
    match computed {
        Ok(c) => {
            // A SHA-256 computed here is the representation's digest: `Repr-Digest` gets it
            // too, instead of the background hasher reading the file once more.
            if let Some(d) = c.as_sha256() {
                digests.insert(resource, d);
            }
            cache.record(resource, c.clone());
            Some(c)
        }
        Err(e) => {
            tracing::warn!(resource = %resource.describe(), error = %e, %algorithm, "cannot compute the checksum asked for");
            None
        }
    }
}

fn compute(resource: &Resource, algorithm: ChecksumAlgorithm) -> std::io::Result<Checksum> {
    let mut c = Checksummer::new(algorithm);
    let mut buf = vec![0u8; BLOCK];
    let size = resource.size();
    let mut off = 0u64;
    while off < size {
        let n = resource.read_at(off, &mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file shrank while it was read",
            ));
        }
        c.update(&buf[..n]);
        off += n as u64;
    }
    // A file rewritten while it was read would leave a checksum of neither version.
    resource.check_still_same()?;
    Ok(c.finish())
}
