//! The tree journal, `<dest>/.xfer-staging/tree-journal` (`staging`): one line per file
//! fetched and verified, so a re-run knows which files are complete without fetching or
//! hashing them again. It is opened without following a link.
//!
//! ```text
//! xfer-tree-journal 1
//! {"path":"a/b.bin","size":1234,"mtime_ns":1700000000123456789,"sha256":"<hex>"}
//! ```
//!
//! Lines are appended with one `write(2)` each; a torn or unreadable line is ignored (that file
//! is checked against the listing again). Files cut short keep their own journal in the staging
//! directory, which resumes their chunks.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use xfer_core::nofollow;
use xfer_core::Sha256Digest;

const MAGIC: &str = "xfer-tree-journal 1";

/// One completed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub path: String,
    pub size: u64,
    /// The modification time given to the local file, nanoseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_ns: Option<u64>,
    /// The server's entity tag, when the listing had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The whole file's SHA-256, when it was computed (every verified download).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<Sha256Digest>,
}

/// The records of earlier runs, and the file new ones are appended to.
#[derive(Debug)]
pub struct TreeJournal {
    path: PathBuf,
    records: HashMap<String, FileRecord>,
    /// Opened at the first record: a run that completes no file writes no journal.
    out: Option<File>,
}

/// The journal cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TreeJournalError {
    #[error("{path} is not an xfer tree journal; move it away or pass another destination")]
    Foreign { path: PathBuf },
    #[error("{path} is a symbolic link; xfer never reads or writes its tree journal through a link: remove it and run again")]
    Symlink { path: PathBuf },
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl TreeJournal {
    /// Load `path` if it exists; it is created at the first record.
    pub fn open(path: &Path) -> Result<Self, TreeJournalError> {
        let io = |what: &'static str| {
            let path = path.to_path_buf();
            move |source: io::Error| {
                if nofollow::is_link(&source) {
                    TreeJournalError::Symlink { path }
                } else {
                    TreeJournalError::Io { what, path, source }
                }
            }
        };
        let mut records = HashMap::new();
        match nofollow::open_read(path) {
            Ok(f) => {
                let mut lines = BufReader::new(f).lines();
                match lines.next() {
                    Some(Ok(first)) if first == MAGIC => {}
                    None => {}
                    _ => {
                        return Err(TreeJournalError::Foreign {
                            path: path.to_path_buf(),
                        })
                    }
                }
                let mut ignored = 0usize;
                for line in lines {
                    match serde_json::from_str::<FileRecord>(&line.map_err(io("reading"))?) {
                        Ok(r) => {
                            records.insert(r.path.clone(), r);
                        }
                        Err(_) => ignored += 1,
                    }
                }
                if ignored > 0 {
                    tracing::warn!(journal = %path.display(), lines = ignored, "ignored unreadable tree journal lines; those files are checked again");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("opening")(e)),
        }
        Ok(Self {
            path: path.to_path_buf(),
            records,
            out: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn record(&self, path: &str) -> Option<&FileRecord> {
        self.records.get(path)
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The journal opened for appending, never through a link, with its first line written
    /// when it is new.
    fn open_for_append(&self) -> Result<File, TreeJournalError> {
        let path = &self.path;
        let mut out = nofollow::open_append(path).map_err(|source| {
            if nofollow::is_link(&source) {
                TreeJournalError::Symlink { path: path.clone() }
            } else {
                TreeJournalError::Io {
                    what: "opening",
                    path: path.clone(),
                    source,
                }
            }
        })?;
        if out.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
            out.write_all(format!("{MAGIC}\n").as_bytes())
                .map_err(|source| TreeJournalError::Io {
                    what: "writing",
                    path: path.clone(),
                    source,
                })?;
        }
        Ok(out)
    }

    /// Append `record` (one write, so a crash leaves whole lines or a torn last one).
    pub fn append(&mut self, record: FileRecord) -> Result<(), TreeJournalError> {
        let mut line = serde_json::to_vec(&record).map_err(|e| TreeJournalError::Io {
            what: "encoding a record for",
            path: self.path.clone(),
            source: e.into(),
        })?;
        line.push(b'\n');
        let out = match &mut self.out {
            Some(out) => out,
            None => self.out.insert(self.open_for_append()?),
        };
        out.write_all(&line)
            .map_err(|source| TreeJournalError::Io {
                what: "appending to",
                path: self.path.clone(),
                source,
            })?;
        self.records.insert(record.path.clone(), record);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_reopen_and_torn_lines_are_ignored(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("t.xfer-tree-journal");
        let rec = FileRecord {
            path: "a/b c.bin".into(),
            size: 5,
            mtime_ns: Some(1_700_000_000_000_000_001),
            etag: Some("\"e\"".into()),
            sha256: Some(Sha256Digest::of(b"hello")),
        };
        {
            let mut j = TreeJournal::open(&path)?;
            assert!(j.is_empty());
            j.append(rec.clone())?;
        }
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(b"{\"path\":\"torn")?;
        let j = TreeJournal::open(&path)?;
        assert_eq!(j.len(), 1);
        assert_eq!(j.record("a/b c.bin"), Some(&rec));
        std::fs::write(&path, "something else\n")?;
        assert!(matches!(
            TreeJournal::open(&path),
            Err(TreeJournalError::Foreign { .. })
        ));
        let target = tmp.path().join("target");
        std::fs::write(&target, b"precious")?;
        std::fs::remove_file(&path)?;
        std::os::unix::fs::symlink(&target, &path)?;
        assert!(matches!(
            TreeJournal::open(&path),
            Err(TreeJournalError::Symlink { .. })
        ));
        assert_eq!(std::fs::read(&target)?, b"precious");
        Ok(())
    }
}
