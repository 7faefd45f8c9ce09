//! The resume journal: `<dest>.xfer-journal`, beside the destination, or where
//! [`crate::get::Download::with_staging`] puts it (a tree's staging directory). Opened without
//! following a link ([`crate::nofollow`]).
//!
//! A text file, so a person can read it: a magic line, one JSON line naming the remote (URL,
//! size, validators) and the chunk size, then one line per verified chunk:
//!
//! ```text
//! xfer-journal 1
//! {"url":"https://host/f","size":1073741824,"etag":"\"5f-40000000\"","last_modified":null,"chunk_size":16777216}
//! c 0 0 16777216 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 1a2b3c4d
//! ```
//!
//! Each chunk line ends with a check value (the first 8 hex digits of the SHA-256 of the rest of
//! the line), so a line torn by a crash or edited by hand is recognised and ignored: that chunk
//! is fetched again. Records are appended with one `write(2)` each, after the chunk's bytes are
//! written to the part file; the engine re-reads every journalled chunk while computing the
//! whole-file hash on resume and fetches again any whose bytes no longer match, so a record
//! that reached the disk before its data (a power loss) costs a re-fetch, never a wrong file.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::Sha256Digest;
use crate::plan::ChunkIndex;

const MAGIC: &str = "xfer-journal 1";

/// Which remote resource a journal belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalHeader {
    pub url: String,
    pub size: u64,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub chunk_size: u64,
    /// The plan's tail is cut smaller ([`crate::plan::ChunkPlan::tapered`]). Absent, so
    /// `false`, in journals written before tapering, which resume with the uniform plan they
    /// were written with.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tapered: bool,
    /// The whole file's SHA-256 (hex) as the server (or every source) declared it, when it
    /// did: the same digest is the same file, whatever URL or server it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl JournalHeader {
    /// Why a journal written for `self` cannot be resumed against `now`, if it cannot.
    pub fn mismatch(&self, now: &JournalHeader) -> Option<String> {
        if let (Some(was), Some(is)) = (&self.sha256, &now.sha256) {
            // A declared digest says more than URLs and validators, which differ between
            // sources of one file.
            return if was != is {
                Some(format!("its SHA-256 was {was} and is now {is}"))
            } else if self.size != now.size {
                Some(format!("size was {} and is now {}", self.size, now.size))
            } else {
                None
            };
        }
        if self.url != now.url {
            return Some(format!("it was written for {}", self.url));
        }
        if self.size != now.size {
            return Some(format!("size was {} and is now {}", self.size, now.size));
        }
        if self.etag.is_some() && now.etag.is_some() && self.etag != now.etag {
            return Some(format!(
                "ETag was {} and is now {}",
                self.etag.as_deref().unwrap_or(""),
                now.etag.as_deref().unwrap_or("")
            ));
        }
        if self.last_modified.is_some()
            && now.last_modified.is_some()
            && self.last_modified != now.last_modified
        {
            return Some(format!(
                "Last-Modified was {} and is now {}",
                self.last_modified.as_deref().unwrap_or(""),
                now.last_modified.as_deref().unwrap_or("")
            ));
        }
        if self.etag.is_some() != now.etag.is_some() {
            return Some("the server's ETag appeared or disappeared".to_string());
        }
        None
    }
}

/// One verified chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRecord {
    pub chunk: ChunkIndex,
    pub offset: u64,
    pub len: u64,
    /// `None` when the transfer ran without digests.
    pub sha256: Option<Sha256Digest>,
    /// The server's own digest of the chunk matched (written as a trailing `s`; records
    /// without it, including those of older journals, make no such claim).
    pub server_checked: bool,
}

impl ChunkRecord {
    fn body(&self) -> String {
        let digest = self.sha256.map_or_else(|| "-".to_string(), |d| d.to_hex());
        let server = if self.server_checked { " s" } else { "" };
        format!(
            "c {} {} {} {digest}{server}",
            self.chunk, self.offset, self.len
        )
    }

    fn line(&self) -> String {
        let body = self.body();
        let check = &Sha256Digest::of(body.as_bytes()).to_hex()[..8];
        format!("{body} {check}\n")
    }

    fn parse(line: &str) -> Option<Self> {
        let (body, check) = line.trim_end().rsplit_once(' ')?;
        if Sha256Digest::of(body.as_bytes()).to_hex().get(..8) != Some(check) {
            return None;
        }
        let mut f = body.split(' ');
        if f.next()? != "c" {
            return None;
        }
        let rec = Self {
            chunk: f.next()?.parse().ok()?,
            offset: f.next()?.parse().ok()?,
            len: f.next()?.parse().ok()?,
            sha256: match f.next()? {
                "-" => None,
                hex => Some(Sha256Digest::from_hex(hex).ok()?),
            },
            server_checked: false,
        };
        match (f.next(), f.next()) {
            (None, _) => Some(rec),
            (Some("s"), None) => Some(Self {
                server_checked: true,
                ..rec
            }),
            _ => None,
        }
    }
}

/// A journal that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot access journal {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not an xfer journal ({reason}); remove it or choose another destination")]
    Foreign { path: PathBuf, reason: String },
    #[error("{path} is a symbolic link; xfer never reads or writes a journal through a link (its target is left alone): remove it and run again")]
    Symlink { path: PathBuf },
}

impl JournalError {
    fn io(path: &Path, source: io::Error) -> Self {
        if crate::nofollow::is_link(&source) {
            Self::Symlink {
                path: path.to_path_buf(),
            }
        } else {
            Self::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}

/// What an existing journal held.
#[derive(Debug, Clone)]
pub struct LoadedJournal {
    pub header: JournalHeader,
    /// Verified chunks, in the order recorded (a chunk may appear once only; repeats ignored).
    pub chunks: Vec<ChunkRecord>,
    /// Lines that failed their check (torn or altered) and were ignored.
    pub ignored_lines: usize,
}

/// The journal file path for a destination: `<dest>.xfer-journal`.
pub fn journal_path(dest: &Path) -> PathBuf {
    with_suffix(dest, ".xfer-journal")
}

/// The part file path for a destination: `<dest>.part`.
pub fn part_path(dest: &Path) -> PathBuf {
    with_suffix(dest, ".part")
}

pub(crate) fn with_suffix(dest: &Path, suffix: &str) -> PathBuf {
    let mut s = dest.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Read the journal at `path`, if there is one.
pub fn load(path: &Path) -> Result<Option<LoadedJournal>, JournalError> {
    let io_err = |source| JournalError::io(path, source);
    let file = match crate::nofollow::open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(e)),
    };
    let foreign = |reason: &str| JournalError::Foreign {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let mut lines = BufReader::new(file).lines();
    match lines.next() {
        Some(Ok(l)) if l == MAGIC => {}
        Some(Ok(_)) => return Err(foreign("first line is not the journal magic")),
        Some(Err(e)) if e.kind() == io::ErrorKind::InvalidData => return Err(foreign("not text")),
        Some(Err(e)) => return Err(io_err(e)),
        None => return Err(foreign("empty file")),
    }
    let header: JournalHeader = match lines.next() {
        Some(Ok(l)) => {
            serde_json::from_str(&l).map_err(|e| foreign(&format!("bad header: {e}")))?
        }
        Some(Err(e)) => return Err(io_err(e)),
        None => return Err(foreign("no header line")),
    };
    let mut chunks = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut ignored_lines = 0;
    for line in lines {
        let line = match line {
            Ok(l) => l,
            // A torn tail can cut a UTF-8 sequence; everything before it stands.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                ignored_lines += 1;
                break;
            }
            Err(e) => return Err(io_err(e)),
        };
        match ChunkRecord::parse(&line) {
            Some(r)
                if r.len > 0
                    && r.offset
                        .checked_add(r.len)
                        .is_some_and(|end| end <= header.size) =>
            {
                if seen.insert(r.chunk) {
                    chunks.push(r);
                }
            }
            _ => ignored_lines += 1,
        }
    }
    Ok(Some(LoadedJournal {
        header,
        chunks,
        ignored_lines,
    }))
}

/// An open journal, appending chunk records.
#[derive(Debug)]
pub struct JournalWriter {
    path: PathBuf,
    file: File,
}

impl JournalWriter {
    /// Start a new journal at `path` (replacing a file there, refusing a link), durably.
    pub fn create(path: &Path, header: &JournalHeader) -> Result<Self, JournalError> {
        let io_err = |source| JournalError::io(path, source);
        let mut file = crate::nofollow::create_fresh(path).map_err(io_err)?;
        let json = serde_json::to_string(header).map_err(|e| io_err(io::Error::other(e)))?;
        file.write_all(format!("{MAGIC}\n{json}\n").as_bytes())
            .map_err(io_err)?;
        file.sync_data().map_err(io_err)?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Reopen an existing journal for appending; a torn last line is cut off first.
    pub fn append_to(path: &Path, loaded: &LoadedJournal) -> Result<Self, JournalError> {
        // Rewriting is simplest and bounded (one line per chunk): it drops torn and ignored lines.
        let mut w = Self::create(path, &loaded.header)?;
        for r in &loaded.chunks {
            w.record(r)?;
        }
        w.sync()?;
        Ok(w)
    }

    /// Append one record with a single write.
    pub fn record(&mut self, rec: &ChunkRecord) -> Result<(), JournalError> {
        self.file
            .write_all(rec.line().as_bytes())
            .map_err(|source| JournalError::Io {
                path: self.path.clone(),
                source,
            })
    }

    pub fn sync(&mut self) -> Result<(), JournalError> {
        self.file.sync_data().map_err(|source| JournalError::Io {
            path: self.path.clone(),
            source,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> JournalHeader {
        JournalHeader {
            url: "https://example.test/f".into(),
            size: 100 << 20,
            etag: Some("\"abc\"".into()),
            last_modified: None,
            chunk_size: 16 << 20,
            tapered: true,
            sha256: None,
        }
    }

    #[test]
    fn a_declared_digest_names_the_file() {
        let was = JournalHeader {
            sha256: Some("ab".repeat(32)),
            ..header()
        };
        let other_source = JournalHeader {
            url: "https://mirror.test/f".into(),
            etag: Some("\"def\"".into()),
            ..was.clone()
        };
        assert_eq!(was.mismatch(&other_source), None);
        let changed = JournalHeader {
            sha256: Some("cd".repeat(32)),
            ..was.clone()
        };
        assert!(was
            .mismatch(&changed)
            .is_some_and(|m| m.contains("SHA-256")));
        // Without a digest on both sides, the URL and validators decide as before.
        assert!(header().mismatch(&other_source).is_some());
    }

    fn rec(i: u32) -> ChunkRecord {
        ChunkRecord {
            chunk: i,
            offset: u64::from(i) * (16 << 20),
            len: 16 << 20,
            sha256: (i != 2).then(|| Sha256Digest::of(&i.to_le_bytes())),
            server_checked: i % 2 == 1,
        }
    }

    #[test]
    fn server_checked_is_kept_and_old_records_make_no_claim() {
        for i in 0..4 {
            assert_eq!(ChunkRecord::parse(&rec(i).line()), Some(rec(i)));
        }
        assert!(rec(1).line().contains(" s "), "{}", rec(1).line());
        // A record as journals wrote them before the flag existed.
        let old = ChunkRecord {
            server_checked: false,
            ..rec(1)
        };
        assert_eq!(ChunkRecord::parse(&old.line()), Some(old));
        // Anything else after the digest is a damaged line.
        let body = format!("{} x", rec(0).body());
        let check = &Sha256Digest::of(body.as_bytes()).to_hex()[..8];
        assert_eq!(ChunkRecord::parse(&format!("{body} {check}\n")), None);
    }

    #[test]
    fn round_trip_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j");
        let mut w = JournalWriter::create(&p, &header()).unwrap();
        w.record(&rec(0)).unwrap();
        w.record(&rec(2)).unwrap();
        w.record(&rec(2)).unwrap();
        drop(w);
        // A crash mid-append leaves half a line.
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&rec(3).line().as_bytes()[..20]).unwrap();
        let j = load(&p).unwrap().unwrap();
        assert_eq!(j.header, header());
        assert_eq!(j.chunks, vec![rec(0), rec(2)]);
        assert_eq!(j.ignored_lines, 1);
        let w = JournalWriter::append_to(&p, &j).unwrap();
        drop(w);
        let j2 = load(&p).unwrap().unwrap();
        assert_eq!(j2.chunks, vec![rec(0), rec(2)]);
        assert_eq!(j2.ignored_lines, 0);
    }

    #[test]
    fn a_journal_from_before_the_taper_has_equal_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j");
        let old = "{\"url\":\"https://example.test/f\",\"size\":104857600,\"etag\":\"\\\"abc\\\"\",\"last_modified\":null,\"chunk_size\":16777216}";
        std::fs::write(&p, format!("{MAGIC}\n{old}\n{}", rec(0).line())).unwrap();
        let j = load(&p).unwrap().unwrap();
        assert_eq!(
            j.header,
            JournalHeader {
                tapered: false,
                ..header()
            }
        );
        assert_eq!(j.chunks, vec![rec(0)]);
        // And an untapered header is written the old way.
        let w = JournalWriter::create(&p, &j.header).unwrap();
        drop(w);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(!text.contains("tapered"), "{text}");
    }

    #[test]
    fn altered_records_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j");
        let mut w = JournalWriter::create(&p, &header()).unwrap();
        w.record(&rec(1)).unwrap();
        drop(w);
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replace(" 1 16777216 ", " 1 16777217 ");
        std::fs::write(&p, text).unwrap();
        let j = load(&p).unwrap().unwrap();
        assert!(j.chunks.is_empty());
        assert_eq!(j.ignored_lines, 1);
    }

    #[test]
    fn foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j");
        assert!(load(&p).unwrap().is_none());
        std::fs::write(&p, b"hello\n").unwrap();
        assert!(matches!(load(&p), Err(JournalError::Foreign { .. })));
        std::fs::write(&p, [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(load(&p), Err(JournalError::Foreign { .. })));
        std::fs::write(&p, format!("{MAGIC}\nnot json\n")).unwrap();
        assert!(matches!(load(&p), Err(JournalError::Foreign { .. })));
    }

    #[test]
    fn header_mismatch_reasons() {
        let a = header();
        assert_eq!(a.mismatch(&a), None);
        let mut b = a.clone();
        b.size += 1;
        assert!(a.mismatch(&b).unwrap().contains("size"));
        let mut c = a.clone();
        c.etag = Some("\"def\"".into());
        assert!(a.mismatch(&c).unwrap().contains("ETag"));
    }

    #[test]
    fn paths() {
        assert_eq!(
            part_path(Path::new("/d/f.bin")),
            PathBuf::from("/d/f.bin.part")
        );
        assert_eq!(
            journal_path(Path::new("f")),
            PathBuf::from("f.xfer-journal")
        );
    }
}
