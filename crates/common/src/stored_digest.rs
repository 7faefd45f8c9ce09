//! A file's SHA-256 kept with the file itself, in the extended attribute
//! [`ATTRIBUTE`] (`user.xfer.sha256`), so that `Repr-Digest` outlives the in-memory
//! [`crate::DigestCache`] (4,096 entries by default, and empty after a restart). A client
//! re-running a tree upload asks for it file by file; without it, every file past the
//! cache's capacity would look unknown and be sent again.
//!
//! The server writes the attribute when it stores a file whose digest it has just computed
//! (an upload, a third-party pull), on the open descriptor of the staging file, after the
//! last write and before the rename into place: setting an attribute moves the inode's change
//! time, which is part of a served file's ETag, so it must happen before anyone can open the
//! file under its name. Files already in place are never marked (a reader's transfer would
//! see its ETag change under it).
//!
//! The value records the size and modification time the digest was computed for:
//! `v1 <hex sha-256> <size> <mtime in ns>`. A file written behind the server's back gets a
//! new mtime (or size) and the record is ignored; the digest is then computed in the
//! background as for any file. A writer that puts back both the size and the old mtime is not
//! caught (the change time cannot be recorded: writing the record changes it). A filesystem
//! without user extended attributes (or a file the server may not write) keeps no record, and
//! the server falls back to computing.
//!
//! The attribute is input like any other file content: it is read into a small fixed buffer,
//! parsed strictly, and ignored when it does not parse.

use std::fs::File;
use std::io;
use std::path::Path;

use xfer_core::Sha256Digest;

use crate::resource::FileStamp;

/// The extended attribute holding the record.
pub const ATTRIBUTE: &str = "user.xfer.sha256";

/// Longest record read; a longer value is not one of ours.
const MAX_RECORD: usize = 160;

/// What a record says: the file's SHA-256 when it had this size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredDigest {
    pub sha256: Sha256Digest,
    pub size: u64,
    pub mtime_ns: i128,
}

impl StoredDigest {
    fn encode(&self) -> String {
        format!(
            "v1 {} {} {}",
            self.sha256.to_hex(),
            self.size,
            self.mtime_ns
        )
    }

    fn decode(raw: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(raw).ok()?;
        let mut fields = text.split(' ');
        if fields.next()? != "v1" {
            return None;
        }
        let sha256 = Sha256Digest::from_hex(fields.next()?).ok()?;
        let size = fields.next()?.parse().ok()?;
        let mtime_ns = fields.next()?.parse().ok()?;
        if fields.next().is_some() {
            return None;
        }
        Some(Self {
            sha256,
            size,
            mtime_ns,
        })
    }
}

/// Record `sha256` as the digest of `file` as it is now (its size and mtime from `fstat`).
/// Call it after the last write. Failure only costs a later recomputation, so it is logged
/// (`path` names the file) and not returned.
pub fn keep(file: &File, sha256: Sha256Digest, path: &Path) {
    let outcome = file.metadata().and_then(|meta| {
        let stamp = FileStamp::of(&meta);
        let record = StoredDigest {
            sha256,
            size: stamp.size,
            mtime_ns: stamp.mtime_ns,
        };
        rustix::fs::fsetxattr(
            file,
            ATTRIBUTE,
            record.encode().as_bytes(),
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(io::Error::from)
    });
    if let Err(e) = outcome {
        tracing::debug!(file = %path.display(), error = %e, "no stored digest kept; it will be computed when asked for");
    }
}

/// The record on `file`, whatever it describes.
pub fn read(file: &File) -> Option<StoredDigest> {
    let mut buf = [0u8; MAX_RECORD];
    // ENODATA (none), ENOTSUP (no xattrs here), ERANGE (too long to be ours): no record.
    let n = rustix::fs::fgetxattr(file, ATTRIBUTE, &mut buf[..]).ok()?;
    StoredDigest::decode(buf.get(..n)?)
}

/// The recorded SHA-256 of `file`, when the record was made for this `size` and `mtime_ns`
/// (the values a [`crate::Resource`] saw when it opened the file).
pub fn recall(file: &File, size: u64, mtime_ns: i128) -> Option<Sha256Digest> {
    read(file)
        .filter(|r| r.size == size && r.mtime_ns == mtime_ns)
        .map(|r| r.sha256)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::time::{Duration, SystemTime};

    use super::*;

    /// Whether the filesystem under `dir` takes user extended attributes; tmpfs before
    /// Linux 6.6 and some overlay set-ups do not.
    fn xattrs_work(dir: &Path) -> bool {
        let probe = dir.join("probe");
        let Ok(f) = File::create(&probe) else {
            return false;
        };
        rustix::fs::fsetxattr(&f, "user.xfer.probe", b"1", rustix::fs::XattrFlags::empty()).is_ok()
    }

    #[test]
    fn records_round_trip_and_foreign_values_are_ignored() {
        let r = StoredDigest {
            sha256: Sha256Digest::of(b"abc"),
            size: 3,
            mtime_ns: 1_700_000_000_123_456_789,
        };
        assert_eq!(StoredDigest::decode(r.encode().as_bytes()), Some(r));
        for bad in [
            &b""[..],
            b"v2 00 3 4",
            b"v1 nothex 3 4",
            b"v1 ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad 3",
            b"v1 ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad 3 4 5",
            b"v1 ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad -3 4",
            b"\xff\xfe",
        ] {
            assert_eq!(StoredDigest::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_record_holds_until_the_file_is_written_behind_its_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        if !xattrs_work(dir.path()) {
            eprintln!(
                "skipping: no user extended attributes under {}",
                dir.path().display()
            );
            return;
        }
        let path = dir.path().join("f");
        let mut f = File::create(&path).expect("create");
        f.write_all(b"hello").expect("write");
        let digest = Sha256Digest::of(b"hello");
        keep(&f, digest, &path);
        let stamp = |f: &File| FileStamp::of(&f.metadata().expect("stat"));
        let s = stamp(&f);
        assert_eq!(recall(&f, s.size, s.mtime_ns), Some(digest));

        // Same size, another mtime: a rewrite the record did not see.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        f.set_modified(SystemTime::now() + Duration::from_secs(5))
            .expect("set mtime");
        let s = stamp(&f);
        assert!(read(&f).is_some(), "the record itself is still there");
        assert_eq!(recall(&f, s.size, s.mtime_ns), None);

        // Another size, mtime put back: still ignored.
        keep(&f, digest, &path);
        let before = stamp(&f);
        std::fs::write(&path, b"hello, world").expect("rewrite");
        f.set_modified(
            SystemTime::UNIX_EPOCH
                + Duration::from_nanos(u64::try_from(before.mtime_ns).expect("mtime")),
        )
        .expect("put the mtime back");
        let s = stamp(&f);
        assert_eq!(s.mtime_ns, before.mtime_ns);
        assert_eq!(recall(&f, s.size, s.mtime_ns), None);
    }
}
