//! Staging files nobody will finish: a server killed outright (no grace period, a crash,
//! the OOM killer) leaves `.xfer-upload.*` files (plain `PUT`s, pulls of third-party copies,
//! parallel uploads with their `.ranges` record) that no request will name again, and the
//! in-memory sweeper knows only uploads of the running process. This walk removes any
//! staging file under the root untouched for longer than the upload expiry: at start-up and
//! once per expiry period after. A live upload or copy writes its file, so its modification
//! time stays fresh; a parallel upload idle for longer than the expiry is expired anyway.

use std::path::Path;
use std::time::{Duration, SystemTime};

use xfer_common::paths::STAGING_PREFIX;

/// Remove staging files under `root` last modified more than `expiry` ago. Symlinks are not
/// followed. Returns how many were removed.
pub fn remove_stale_staging(root: &Path, expiry: Duration) -> usize {
    let Some(cutoff) = SystemTime::now().checked_sub(expiry) else {
        return 0;
    };
    let mut removed = 0;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                dirs.push(path);
                continue;
            }
            let stale = kind.is_file()
                && entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(STAGING_PREFIX)
                && entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t < cutoff);
            if stale {
                match std::fs::remove_file(&path) {
                    Ok(()) => {
                        removed += 1;
                        tracing::info!(path = %path.display(), "removed a staging file left by an earlier server");
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot remove a stale staging file")
                    }
                }
            }
        }
    }
    removed
}

/// Walk `root` now (off the runtime) and once every `expiry` after, until the runtime stops.
pub fn spawn_stale_staging_sweeper(root: std::path::PathBuf, expiry: Duration) {
    let period = expiry.max(Duration::from_secs(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            let r = root.clone();
            let _ = tokio::task::spawn_blocking(move || remove_stale_staging(&r, expiry)).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_staging_files_go() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).expect("mkdir");
        let old = SystemTime::now() - Duration::from_secs(7200);
        let make = |name: &str, when: Option<SystemTime>| {
            let p = sub.join(name);
            let f = std::fs::File::create(&p).expect("create");
            if let Some(t) = when {
                f.set_modified(t).expect("set mtime");
            }
            p
        };
        let gone = [
            make(".xfer-upload.abc.f.bin", Some(old)),
            make(".xfer-upload.abc.f.bin.ranges", Some(old)),
        ];
        let kept = [
            make(".xfer-upload.def.g.bin", None),
            make("f.bin", Some(old)),
        ];
        assert_eq!(
            remove_stale_staging(dir.path(), Duration::from_secs(3600)),
            2
        );
        assert!(gone.iter().all(|p| !p.exists()));
        assert!(kept.iter().all(|p| p.exists()));
    }
}
