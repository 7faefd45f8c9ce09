//! `--include` / `--exclude`: which listed paths a tree transfer keeps.

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// Globs matched against the whole path relative to the listed directory (`a/b/c.h5`).
/// `*` does not cross `/`; `**` does. A path is kept when it matches some include (or there
/// are none) and no exclude. Directories are matched too, so `--exclude 'tmp'` prunes `tmp/`
/// and everything under it. An exclude ending in `/` names directories only, as in
/// `.gitignore`: `--exclude 'tmp/'` prunes every directory `tmp` and what is below it, but not
/// a file `tmp`; the trailing `/` alone does not anchor it (`a/tmp/` does).
#[derive(Debug, Clone)]
pub struct PathFilter {
    include: Option<GlobSet>,
    exclude: GlobSet,
    /// Excludes written with a trailing `/`: they match directories only.
    exclude_dirs: GlobSet,
}

/// A glob that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("invalid glob {pattern:?}: {reason}")]
pub struct GlobError {
    pub pattern: String,
    pub reason: String,
}

impl PathFilter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self, GlobError> {
        let include = if include.is_empty() {
            None
        } else {
            Some(build(include)?)
        };
        let (dirs, any): (Vec<String>, Vec<String>) =
            exclude.iter().cloned().partition(|p| p.ends_with('/'));
        Ok(Self {
            include,
            exclude: build(&any)?,
            exclude_dirs: build(&dirs)?,
        })
    }

    /// Whether a file at `path` is fetched.
    pub fn keeps_file(&self, path: &str) -> bool {
        !self.excluded(path, false) && self.include.as_ref().is_none_or(|i| i.is_match(path))
    }

    /// Whether the entry at `path` (a directory when `is_dir`) or one of its parent
    /// directories is excluded: nothing below it is fetched or created.
    pub fn excluded(&self, path: &str, is_dir: bool) -> bool {
        let dir_excluded = |p: &str| self.exclude.is_match(p) || self.exclude_dirs.is_match(p);
        path.match_indices('/')
            .any(|(i, _)| dir_excluded(&path[..i]))
            || if is_dir {
                dir_excluded(path)
            } else {
                self.exclude.is_match(path)
            }
    }
}

fn build(patterns: &[String]) -> Result<GlobSet, GlobError> {
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        set.add(compile(p)?);
    }
    set.build().map_err(|e| GlobError {
        pattern: patterns.join(" "),
        reason: e.to_string(),
    })
}

fn compile(pattern: &str) -> Result<Glob, GlobError> {
    // A trailing `/` says "directory" (the caller keeps those apart); it does not anchor.
    let body = pattern.strip_suffix('/').unwrap_or(pattern);
    // A pattern without `/` names a file anywhere, as rsync and rclone read it.
    let anchored = if body.contains('/') {
        body.trim_start_matches('/').to_string()
    } else {
        format!("**/{body}")
    };
    GlobBuilder::new(&anchored)
        .literal_separator(true)
        .build()
        .map_err(|e| GlobError {
            pattern: pattern.to_string(),
            reason: e.kind().to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(include: &[&str], exclude: &[&str]) -> PathFilter {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        PathFilter::new(&s(include), &s(exclude)).expect("valid globs")
    }

    #[test]
    fn includes_and_excludes() {
        let f = filter(&["*.h5"], &["tmp"]);
        assert!(f.keeps_file("a.h5"));
        assert!(f.keeps_file("run/1/a.h5"));
        assert!(!f.keeps_file("a.txt"));
        assert!(!f.keeps_file("tmp/a.h5"), "excluded directory prunes");
        assert!(!f.keeps_file("x/tmp/a.h5"));
        let anchored = filter(&["run/*.bin"], &[]);
        assert!(anchored.keeps_file("run/a.bin"));
        assert!(!anchored.keeps_file("run/sub/a.bin"), "* stops at /");
        assert!(filter(&[], &[]).keeps_file("anything/at/all"));
    }

    #[test]
    fn a_trailing_slash_excludes_directories_only() {
        let f = filter(&[], &["tmp/", "a/keep/"]);
        assert!(f.excluded("tmp", true));
        assert!(f.excluded("x/tmp", true), "unanchored, as in .gitignore");
        assert!(!f.excluded("tmp", false), "a file named tmp stays");
        assert!(!f.keeps_file("tmp/a.bin"));
        assert!(!f.keeps_file("x/tmp/deep/a.bin"));
        assert!(f.keeps_file("tmp"));
        assert!(f.keeps_file("tmpx/a.bin"));
        assert!(f.excluded("a/keep", true));
        assert!(!f.excluded("b/a/keep", true), "a `/` inside anchors");
        assert!(!f.keeps_file("a/keep/f"));
        assert!(f.keeps_file("b/a/keep/f"));
    }

    #[test]
    fn bad_globs_are_named() {
        let err = PathFilter::new(&["a[".to_string()], &[])
            .err()
            .map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains("a["));
    }
}
