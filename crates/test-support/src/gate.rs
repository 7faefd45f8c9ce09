//! The one prerequisite gate of every test binary: a test whose capability (root, a network
//! namespace, a Debian tool, user xattrs) is truly absent prints why and passes; under
//! `CI=true` the same absence fails the test, so CI never reports a skipped test as green.

use std::fmt::Display;
use std::path::PathBuf;

/// Whether this run is CI's (`CI=true`), where nothing may be skipped.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Records that `test` cannot run here because of `why`: prints it and returns `false` for the
/// caller to return early; under `CI=true`, panics with the reason instead.
pub fn absent(test: &str, why: impl Display) -> bool {
    assert!(!under_ci(), "{test} cannot run under CI=true: {why}");
    eprintln!("skipping {test}: {why}");
    false
}

/// `true` when `check` passed; otherwise [`absent`] with its error.
pub fn available<E: Display>(test: &str, check: Result<(), E>) -> bool {
    match check {
        Ok(()) => true,
        Err(why) => absent(test, why),
    }
}

/// An external program: the first of `candidates` that exists, else `name` on `PATH`; `None`
/// (after [`absent`]) when neither is there. `package` is the Debian package that has it.
pub fn require_program(name: &str, candidates: &[&str], package: &str) -> Option<PathBuf> {
    let found = candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        });
    if found.is_none() {
        absent(
            name,
            format!("{name} not found (apt-get install {package})"),
        );
    }
    found
}

/// Whether this process runs as root; otherwise [`absent`] for `test`.
pub fn require_root(test: &str) -> bool {
    // /proc/self belongs to the process's effective user.
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    root || absent(test, "needs root")
}
