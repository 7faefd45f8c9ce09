//! RFC 3230 `Want-Digest` answered with `Digest`: adler32 (what gfal2 and FTS check for the
//! WLCG), MD5 and SHA-256, best first as the client ranks them. SHA-256 comes from the
//! digest cache when it knows the resource; the others are computed from the whole resource
//! on the blocking pool and kept in a small cache keyed like the SHA-256 one, so a file
//! rewritten in place is hashed again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use xfer_common::resource::ContentKey;
use xfer_common::{DigestCache, Resource};
use xfer_core::checksum::{want_digest_preferences, Checksum, ChecksumAlgorithm, Checksummer};
use xfer_core::digest::Sha256Digest;

/// Checksums remembered at most; beyond, an arbitrary one is forgotten.
const CACHE_ENTRIES: usize = 4096;
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

/// The `Digest` field value answering `want` (the `Want-Digest` field values), or `None`
/// when it names nothing xfer computes. A resource that cannot be read leaves the field out.
pub(crate) async fn digest_field(
    cache: &ChecksumCache,
    digests: &DigestCache,
    resource: &Resource,
    want: &[String],
    sha256: Option<Sha256Digest>,
) -> Option<String> {
    let algorithm = want
        .iter()
        .flat_map(|v| want_digest_preferences(v))
        .next()?;
    if let (ChecksumAlgorithm::Sha256, Some(d)) = (algorithm, sha256) {
        return Checksum::from_bytes(ChecksumAlgorithm::Sha256, &d.0)
            .map(|c| c.to_rfc3230_member());
    }
    let key = (resource.content_key(), algorithm);
    if let Some(c) = cache.get(&key) {
        return Some(c.to_rfc3230_member());
    }
    let r = resource.clone();
    let computed = tokio::task::spawn_blocking(move || compute(&r, algorithm))
        .await
        .ok()?;
    match computed {
        Ok(c) => {
            // A SHA-256 computed here is the representation's digest: `Repr-Digest` gets it
            // too, instead of the background hasher reading the file once more.
            if algorithm == ChecksumAlgorithm::Sha256 {
                if let Ok(bytes) = <[u8; 32]>::try_from(c.as_bytes()) {
                    digests.insert(resource, Sha256Digest(bytes));
                }
            }
            cache.put(key, c.clone());
            Some(c.to_rfc3230_member())
        }
        Err(e) => {
            tracing::warn!(error = %e, %algorithm, "cannot compute the checksum asked for");
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
    Ok(c.finish())
}
