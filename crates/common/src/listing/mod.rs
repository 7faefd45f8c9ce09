//! Directory listings, read as untrusted input and written as output.
//!
//! Three formats, one entry type ([`ListingEntry`]):
//! - [`propfind`]: WebDAV `PROPFIND` multistatus (RFC 4918), `Depth: 1`, the properties
//!   `resourcetype`, `getcontentlength`, `getlastmodified`, `getetag`; what davix, gfal2,
//!   rclone's webdav backend and every WebDAV server speak.
//! - [`autoindex`]: nginx's `autoindex_format json`.
//! - [`html`]: a plain HTML index for browsers (written).
//! - [`html_index`]: the HTML index pages of nginx, Apache, Python's `http.server` and
//!   `rclone serve http` (read: their links).
//! - [`manifest`]: xfer's own streamed, recursive manifest (one JSON object per line, with an
//!   end record so a truncated listing is never taken for a complete one).
//!
//! Readers take a `BufRead` and hand each entry to a callback as soon as it is parsed, so a
//! listing of a million entries is never held in memory and transfers can start before it
//! ends. Every name goes through [`name::RelPath::parse`] before it is returned.
//!
//! ```text
//!   response body ─► BufRead ─► propfind / autoindex / manifest reader ─► RelPath check
//!                                                                      └─► on_entry(ListingEntry)
//! ```

pub mod autoindex;
pub mod html;
pub mod html_index;
pub mod limit;
pub mod manifest;
pub mod name;
pub mod propfind;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use xfer_core::digest::Sha256Digest;

pub use name::{excerpt, CaseFold, NameError, RelPath};

/// Largest single record (one XML event, one JSON line or object) a reader accepts. Real
/// entries are well under 1 KiB; the cap keeps a hostile listing from growing one buffer
/// without bound. Enforced while the record arrives ([`limit::RecordLimit`]), not after.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// Longest reason a [`ListingError::Malformed`] carries, in characters.
const MAX_REASON_CHARS: usize = 200;

/// A file or a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    #[serde(rename = "dir")]
    Directory,
}

/// One name in a listing, relative to the listed directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingEntry {
    pub path: RelPath,
    pub kind: EntryKind,
    /// Bytes, for files, when the listing says.
    pub size: Option<u64>,
    /// Last modification, when the listing says (whole seconds in HTTP-date formats).
    pub modified: Option<SystemTime>,
    /// Entity tag verbatim, quotes included, when the listing says.
    pub etag: Option<String>,
    /// Whole-file SHA-256, when the server already knows it (xfer's manifest only).
    pub sha256: Option<Sha256Digest>,
}

impl ListingEntry {
    pub fn is_dir(&self) -> bool {
        self.kind == EntryKind::Directory
    }
}

/// Why a listing could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ListingError {
    #[error("malformed {format} listing: {reason}")]
    Malformed {
        format: &'static str,
        reason: String,
    },
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("{format} listing has a record longer than {MAX_RECORD_BYTES} bytes")]
    RecordTooLong { format: &'static str },
    #[error("{format} listing is longer than {limit} bytes")]
    PageTooLarge { format: &'static str, limit: u64 },
    #[error("{format} listing ended before its end record: truncated")]
    Truncated { format: &'static str },
    #[error("cannot read the listing")]
    Io(#[from] std::io::Error),
    /// The callback refused an entry; its reason is kept as text.
    #[error("listing consumer stopped: {0}")]
    Stopped(String),
}

impl ListingError {
    /// A parser's reason may quote what it read (serde_json names an unexpected string,
    /// quick-xml a mismatched tag): only the first [`MAX_REASON_CHARS`] characters are kept,
    /// control and bidirectional characters escaped.
    fn malformed(format: &'static str, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        let mut kept = String::with_capacity(reason.len().min(MAX_REASON_CHARS + 8));
        for (i, c) in reason.chars().enumerate() {
            if i == MAX_REASON_CHARS {
                kept.push('…');
                break;
            }
            if c.is_control() || name::is_bidi_control(c) {
                kept.extend(c.escape_unicode());
            } else {
                kept.push(c);
            }
        }
        Self::Malformed {
            format,
            reason: kept,
        }
    }
}

/// Seconds since the epoch with nanoseconds, as the manifest writes times.
pub(crate) fn unix_nanos(t: SystemTime) -> Option<u128> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_nanos())
}

pub(crate) fn from_unix_nanos(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}
