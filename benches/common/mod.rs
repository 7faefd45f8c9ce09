//! Shared by the benches: where scratch files go, and quick criterion settings for a shared
//! two-core machine. Each bench uses part of this.
#![allow(dead_code)]

use std::time::Duration;

use criterion::Criterion;

/// A directory on tmpfs when there is one, so disks stay out of the measurement.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let made = if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("xfer-bench")
            .tempdir_in(shm)
    } else {
        tempfile::Builder::new().prefix("xfer-bench").tempdir()
    };
    match made {
        Ok(d) => d,
        Err(e) => panic!("cannot create a scratch directory: {e}"),
    }
}

/// Remove a downloaded file and whatever the engine left beside it.
pub fn remove_outputs(dest: &std::path::Path) {
    let _ = std::fs::remove_file(dest);
    if let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) {
        let name = name.to_string_lossy().into_owned();
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&name) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

/// Ten samples, short warm-up and measurement: enough to compare variants, short enough that
/// `cargo bench` stays within minutes on two shared cores.
pub fn quick() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .without_plots()
}
