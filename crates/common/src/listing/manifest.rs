//! xfer's native listing: a recursive manifest streamed as one JSON object per line.
//!
//! ```text
//! {"xfer_manifest":1}
//! {"path":"a/b.bin","type":"file","size":1234,"mtime_ns":1700000000123456789,"etag":"\"…\"","sha256":"<hex>"}
//! {"path":"a/empty","type":"dir"}
//! {"end":{"entries":2}}
//! ```
//!
//! The first line names the format version; the last one counts the entries, so a listing cut
//! short by a dropped connection is an error ([`ListingError::Truncated`]) rather than a tree
//! with files missing. Paths are relative to the listed directory, `/`-separated, never `.`
//! or `..`; a directory appears before anything inside it; `sha256` is present only when the
//! server already knows the whole-file digest. Unknown fields are ignored, so servers may add
//! some without a version change. Specified for clients in `docs/listing.md`.

use std::io::{BufRead, Read, Write};

use serde::{Deserialize, Serialize};
use xfer_core::digest::Sha256Digest;

use super::{
    from_unix_nanos, unix_nanos, EntryKind, ListingEntry, ListingError, RelPath, MAX_RECORD_BYTES,
};

const FORMAT: &str = "xfer manifest";
/// The manifest format version this reader and writer speak.
pub const MANIFEST_VERSION: u32 = 1;
/// Media type of a manifest response.
pub const MANIFEST_MEDIA_TYPE: &str = "application/x-xfer-manifest+jsonl";

#[derive(Serialize, Deserialize)]
struct Header {
    xfer_manifest: u32,
}

#[derive(Serialize, Deserialize)]
struct End {
    end: EndBody,
}

#[derive(Serialize, Deserialize)]
struct EndBody {
    entries: u64,
}

#[derive(Serialize, Deserialize)]
struct Line {
    path: String,
    #[serde(rename = "type")]
    kind: EntryKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mtime_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sha256: Option<Sha256Digest>,
}

/// Read a manifest, calling `on_entry` for each entry; fails if the end record is missing or
/// its count disagrees.
pub fn read_manifest<R: BufRead>(
    mut input: R,
    mut on_entry: impl FnMut(ListingEntry) -> Result<(), ListingError>,
) -> Result<u64, ListingError> {
    let mut line = Vec::new();
    if !next_line(&mut input, &mut line)? {
        return Err(ListingError::Truncated { format: FORMAT });
    }
    let header: Header = serde_json::from_slice(&line)
        .map_err(|e| ListingError::malformed(FORMAT, format!("first line: {e}")))?;
    if header.xfer_manifest != MANIFEST_VERSION {
        return Err(ListingError::malformed(
            FORMAT,
            format!("version {} (this reader speaks 1)", header.xfer_manifest),
        ));
    }
    let mut count = 0u64;
    while next_line(&mut input, &mut line)? {
        if line.starts_with(b"{\"end\"") {
            let end: End = serde_json::from_slice(&line)
                .map_err(|e| ListingError::malformed(FORMAT, format!("end record: {e}")))?;
            if end.end.entries != count {
                return Err(ListingError::malformed(
                    FORMAT,
                    format!(
                        "end record counts {} entries, {count} were sent",
                        end.end.entries
                    ),
                ));
            }
            let mut rest = Vec::new();
            if next_line(&mut input, &mut rest)? {
                return Err(ListingError::malformed(FORMAT, "data after the end record"));
            }
            return Ok(count);
        }
        let raw: Line = serde_json::from_slice(&line)
            .map_err(|e| ListingError::malformed(FORMAT, format!("entry {}: {e}", count + 1)))?;
        let path = RelPath::parse(&raw.path)?;
        count += 1;
        on_entry(ListingEntry {
            path,
            kind: raw.kind,
            size: if raw.kind == EntryKind::File {
                raw.size
            } else {
                None
            },
            modified: raw.mtime_ns.map(from_unix_nanos),
            etag: raw.etag,
            sha256: raw.sha256,
        })?;
    }
    Err(ListingError::Truncated { format: FORMAT })
}

/// Read one `\n`-terminated line of at most [`MAX_RECORD_BYTES`] into `line` (without the
/// newline); `false` at the end of input. Blank lines are skipped.
fn next_line<R: BufRead>(input: &mut R, line: &mut Vec<u8>) -> Result<bool, ListingError> {
    loop {
        line.clear();
        let n = input
            .by_ref()
            .take(MAX_RECORD_BYTES as u64 + 1)
            .read_until(b'\n', line)?;
        if n == 0 {
            return Ok(false);
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        } else if n > MAX_RECORD_BYTES {
            return Err(ListingError::RecordTooLong { format: FORMAT });
        }
        if !line.iter().all(u8::is_ascii_whitespace) {
            return Ok(true);
        }
    }
}

/// Writes a manifest one entry at a time.
pub struct ManifestWriter<W: Write> {
    out: W,
    count: u64,
}

impl<W: Write> ManifestWriter<W> {
    pub fn new(mut out: W) -> std::io::Result<Self> {
        serde_json::to_writer(
            &mut out,
            &Header {
                xfer_manifest: MANIFEST_VERSION,
            },
        )?;
        out.write_all(b"\n")?;
        Ok(Self { out, count: 0 })
    }

    pub fn write_entry(&mut self, entry: &ListingEntry) -> std::io::Result<()> {
        let line = Line {
            path: entry.path.as_str().to_string(),
            kind: entry.kind,
            size: entry.size,
            mtime_ns: entry
                .modified
                .and_then(unix_nanos)
                .and_then(|ns| u64::try_from(ns).ok()),
            etag: entry.etag.clone(),
            sha256: entry.sha256,
        };
        serde_json::to_writer(&mut self.out, &line)?;
        self.out.write_all(b"\n")?;
        self.count += 1;
        Ok(())
    }

    /// Write the end record and return the writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        serde_json::to_writer(
            &mut self.out,
            &End {
                end: EndBody {
                    entries: self.count,
                },
            },
        )?;
        self.out.write_all(b"\n")?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn read(body: &[u8]) -> Result<Vec<ListingEntry>, ListingError> {
        let mut out = Vec::new();
        read_manifest(body, |e| {
            out.push(e);
            Ok(())
        })?;
        Ok(out)
    }

    fn sample() -> Vec<ListingEntry> {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        vec![
            ListingEntry {
                path: RelPath::parse("a").expect("valid"),
                kind: EntryKind::Directory,
                size: None,
                modified: Some(t),
                etag: None,
                sha256: None,
            },
            ListingEntry {
                path: RelPath::parse("a/b c%.bin").expect("valid"),
                kind: EntryKind::File,
                size: Some(42),
                modified: Some(t),
                etag: Some("\"x\"".into()),
                sha256: Some(Sha256Digest::of(b"hello")),
            },
            ListingEntry {
                path: RelPath::parse("empty").expect("valid"),
                kind: EntryKind::File,
                size: Some(0),
                modified: None,
                etag: None,
                sha256: None,
            },
        ]
    }

    fn written(entries: &[ListingEntry]) -> Vec<u8> {
        let mut w = ManifestWriter::new(Vec::new()).expect("vec");
        for e in entries {
            w.write_entry(e).expect("vec");
        }
        w.finish().expect("vec")
    }

    #[test]
    fn round_trip() {
        let entries = sample();
        assert_eq!(read(&written(&entries)).expect("valid"), entries);
    }

    #[test]
    fn truncation_is_an_error_anywhere() {
        let body = written(&sample());
        let text = String::from_utf8(body.clone()).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        for keep in 0..lines.len() {
            let cut = lines[..keep].join("\n");
            assert!(read(cut.as_bytes()).is_err(), "{keep} lines accepted");
        }
        assert!(read(&body).is_ok());
    }

    #[test]
    fn hostile_manifests_are_refused() {
        let header = "{\"xfer_manifest\":1}\n";
        for entry in [
            r#"{"path":"../x","type":"file"}"#,
            r#"{"path":"/etc/passwd","type":"file"}"#,
            r#"{"path":"a\\b","type":"file"}"#,
            r#"{"path":"a\u0000b","type":"file"}"#,
            r#"{"path":"a//b","type":"file"}"#,
            r#"{"path":"a","type":"symlink"}"#,
            r#"{"path":"a","type":"file","size":-3}"#,
        ] {
            let body = format!("{header}{entry}\n{{\"end\":{{\"entries\":1}}}}\n");
            assert!(read(body.as_bytes()).is_err(), "{entry} accepted");
        }
        let wrong_count = format!("{header}{{\"end\":{{\"entries\":5}}}}\n");
        assert!(read(wrong_count.as_bytes()).is_err());
        assert!(read(b"{\"xfer_manifest\":2}\n{\"end\":{\"entries\":0}}\n").is_err());
        let long = format!("{header}{}\n", "x".repeat(MAX_RECORD_BYTES + 10));
        assert!(matches!(
            read(long.as_bytes()),
            Err(ListingError::RecordTooLong { .. })
        ));
        let after_end = format!(
            "{header}{{\"end\":{{\"entries\":0}}}}\n{{\"path\":\"a\",\"type\":\"file\"}}\n"
        );
        assert!(read(after_end.as_bytes()).is_err());
    }
}
