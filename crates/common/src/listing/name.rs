//! Names that come from a remote listing, checked before they touch a local path.
//!
//! A listing is untrusted input of the same kind as a tar member name: a hostile or broken
//! server can send `..`, absolute paths, `/` or `\` inside what should be one name, NUL, control
//! characters, or two names that differ only by case (one file on a case-insensitive
//! filesystem). [`RelPath::parse`] accepts only a relative path of plain segments; whatever it
//! returns can be joined under a destination directory without leaving it (symlinks already in
//! the destination are the writer's concern: it must open each component without following
//! links). [`CaseFold`] finds names that would collide on a case-insensitive filesystem.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Longest path accepted from a listing, in bytes (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest single segment accepted, in bytes (`NAME_MAX` of every common filesystem).
pub const MAX_SEGMENT_BYTES: usize = 255;
/// Deepest nesting accepted: deep enough for any real dataset, shallow enough that a hostile
/// listing cannot make the client recurse without end.
pub const MAX_DEPTH: usize = 64;

/// Characters of a quoted name shown in a message: enough to recognise an entry, short enough
/// that a 400 MB name costs a line of output, not 400 MB.
pub const EXCERPT_CHARS: usize = 64;

/// Why a name from a listing was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused name {name} from the listing: {reason}")]
pub struct NameError {
    /// The name as received, quoted and escaped by [`excerpt`]: at most [`EXCERPT_CHARS`]
    /// characters of it, so that neither a huge name nor a control character reaches a log.
    pub name: String,
    pub reason: &'static str,
}

/// `name` quoted for a message: its first [`EXCERPT_CHARS`] characters with control, format
/// and bidirectional characters escaped (`\u{202e}`), and the total length when cut.
pub fn excerpt(name: &str) -> String {
    let mut chars = name.char_indices();
    let cut = chars.nth(EXCERPT_CHARS).map(|(i, _)| i);
    match cut {
        None => format!("{name:?}"),
        Some(at) => format!("{:?}… ({} bytes)", &name[..at], name.len()),
    }
}

/// Bidirectional formatting characters (Unicode's `Bidi_Control`): they reorder how the rest
/// of a line is shown, so `evil\u{202e}txt.exe` reads as `evilexe.txt` in a terminal or a
/// file manager. C0 and C1 controls are refused separately, by `char::is_control`.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// A relative path of one or more plain segments, separated by `/`: no `.`, `..`, empty
/// segment, leading `/`, `\`, NUL, control or bidirectional formatting character, each segment at most
/// [`MAX_SEGMENT_BYTES`], the whole at most [`MAX_PATH_BYTES`] and [`MAX_DEPTH`] deep.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelPath(String);

impl RelPath {
    /// Check `name` (already percent-decoded) and keep it.
    pub fn parse(name: &str) -> Result<Self, NameError> {
        let err = |reason| NameError {
            name: excerpt(name),
            reason,
        };
        if name.is_empty() {
            return Err(err("empty name"));
        }
        if name.len() > MAX_PATH_BYTES {
            return Err(err("longer than 4096 bytes"));
        }
        if name.starts_with('/') {
            return Err(err("absolute path"));
        }
        if let Some(c) = name
            .chars()
            .find(|c| *c == '\\' || c.is_control() || is_bidi_control(*c))
        {
            return Err(err(if c == '\\' {
                "backslash in a name"
            } else if c == '\0' {
                "NUL in a name"
            } else if c.is_control() {
                "control character in a name"
            } else {
                "bidirectional formatting character in a name"
            }));
        }
        let mut depth = 0;
        for segment in name.split('/') {
            depth += 1;
            match segment {
                "" => return Err(err("empty path segment")),
                "." | ".." => return Err(err("`.` or `..` segment")),
                s if s.len() > MAX_SEGMENT_BYTES => {
                    return Err(err("segment longer than 255 bytes"))
                }
                _ => {}
            }
        }
        if depth > MAX_DEPTH {
            return Err(err("nested deeper than 64 directories"));
        }
        Ok(Self(name.to_string()))
    }

    /// One segment only: a name inside a directory, which must not contain `/`.
    pub fn parse_segment(name: &str) -> Result<Self, NameError> {
        if name.contains('/') {
            return Err(NameError {
                name: excerpt(name),
                reason: "`/` inside a single name",
            });
        }
        Self::parse(name)
    }

    /// `self/child`, checked again as a whole (depth and length limits).
    pub fn join(&self, child: &RelPath) -> Result<RelPath, NameError> {
        RelPath::parse(&format!("{}/{}", self.0, child.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The segments, in order.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last segment.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The path below `root`, built segment by segment (never through `Path::join` of the
    /// whole string, which an absolute name would replace).
    pub fn under(&self, root: &Path) -> PathBuf {
        let mut p = root.to_path_buf();
        for s in self.segments() {
            p.push(s);
        }
        p
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Remembers the case-folded form of every name seen, to refuse a second name that only
/// differs by case: on a case-insensitive destination (macOS, Windows shares, some NAS) both
/// would be written to one file, one silently replacing the other.
#[derive(Debug, Default)]
pub struct CaseFold {
    seen: HashMap<String, RelPath>,
}

impl CaseFold {
    pub fn new() -> Self {
        Self::default()
    }

    /// Record `path`; if another path already recorded folds to the same name, return it.
    pub fn insert(&mut self, path: &RelPath) -> Result<(), RelPath> {
        let key = path.as_str().to_lowercase();
        match self.seen.get(&key) {
            Some(other) if other != path => Err(other.clone()),
            Some(_) => Ok(()),
            None => {
                self.seen.insert(key, path.clone());
                Ok(())
            }
        }
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass() {
        for ok in [
            "a",
            "a b.bin",
            "run-42/frames.h5",
            "100%.txt",
            "ünïcødé/π",
            ".hidden",
            "a..b",
        ] {
            let p = RelPath::parse(ok).expect(ok);
            assert_eq!(p.as_str(), ok);
        }
    }

    #[test]
    fn hostile_names_are_refused() {
        let long_segment = "x".repeat(256);
        let deep = vec!["d"; 65].join("/");
        let long_path = vec!["y".repeat(200); 21].join("/");
        for bad in [
            "",
            "..",
            "../etc/passwd",
            "a/../../b",
            "./a",
            "a/./b",
            "/etc/passwd",
            "a//b",
            "a/",
            "a\\..\\b",
            "C:\\x",
            "a\0b",
            "a\nb",
            "a\x1b[31m",
            "a\u{85}b",
            "evil\u{202e}txt.exe",
            "a\u{202a}b",
            "a\u{2066}b",
            "a\u{2069}b",
            "a\u{200e}b",
            "a\u{200f}b",
            "a\u{061c}b",
            long_segment.as_str(),
            deep.as_str(),
            long_path.as_str(),
        ] {
            assert!(RelPath::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn refusals_quote_a_short_escaped_excerpt() {
        let huge = format!("\u{202e}{}", "n".repeat(1_000_000));
        let e = RelPath::parse(&huge).expect_err("too long and bidi");
        let shown = e.to_string();
        assert!(shown.len() < 200, "{} bytes shown", shown.len());
        assert!(shown.contains("\\u{202e}nnn"), "{shown}");
        assert!(shown.contains("1000003 bytes"), "{shown}");
        assert!(!shown.contains('\u{202e}'));
        let e = RelPath::parse("a\u{2067}b").expect_err("bidi");
        assert!(e.to_string().contains("bidirectional"), "{e}");
        assert_eq!(excerpt("short"), "\"short\"");
    }

    #[test]
    fn a_segment_has_no_slash() {
        assert!(RelPath::parse_segment("a/b").is_err());
        assert!(RelPath::parse_segment("ab").is_ok());
    }

    #[test]
    fn under_stays_under() {
        let root = Path::new("/dest");
        let p = RelPath::parse("a/b c/d").expect("valid");
        assert_eq!(p.under(root), Path::new("/dest/a/b c/d"));
        assert!(p.under(root).starts_with(root));
        assert_eq!(p.file_name(), "d");
    }

    #[test]
    fn join_rechecks_limits() {
        let mut p = RelPath::parse("d").expect("valid");
        let d = RelPath::parse("d").expect("valid");
        for _ in 0..63 {
            p = p.join(&d).expect("within depth");
        }
        assert!(p.join(&d).is_err());
    }

    #[test]
    fn case_collisions_are_found() {
        let mut fold = CaseFold::new();
        let a = RelPath::parse("Data/File.bin").expect("valid");
        let b = RelPath::parse("data/file.BIN").expect("valid");
        assert!(fold.insert(&a).is_ok());
        assert!(
            fold.insert(&a).is_ok(),
            "the same name twice is no collision"
        );
        assert_eq!(fold.insert(&b), Err(a));
    }
}
