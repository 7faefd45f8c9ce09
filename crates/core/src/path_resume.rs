//! What the two "resume from the saved path" features share (QUIC's Careful Resume and the
//! HTTP server's TCP resume): the bounds of their knobs, so both accept the same values.

use std::time::Duration;

use crate::error::ConfigError;

/// The names one feature gives its knobs in error messages.
#[derive(Debug, Clone, Copy)]
pub struct ResumeFieldNames {
    pub lifetime: &'static str,
    pub max_jump: &'static str,
    pub max_paths: &'static str,
}

/// Check a saved path's lifetime (1 s to 7 days), the largest jump (64 KiB to 4 GiB) and the
/// number of peers remembered (1 to 1,000,000).
pub fn validate_resume_knobs(
    names: ResumeFieldNames,
    lifetime: Duration,
    max_jump: u64,
    max_paths: u64,
) -> Result<(), ConfigError> {
    if !(Duration::from_secs(1)..=Duration::from_secs(7 * 86_400)).contains(&lifetime) {
        return Err(ConfigError::new(
            names.lifetime,
            format!("{lifetime:?}"),
            "1 s to 7 days",
        ));
    }
    if !(64 << 10..=1 << 32).contains(&max_jump) {
        return Err(ConfigError::new(
            names.max_jump,
            max_jump,
            "64 KiB to 4 GiB",
        ));
    }
    if !(1..=1_000_000).contains(&max_paths) {
        return Err(ConfigError::new(names.max_paths, max_paths, "1 to 1000000"));
    }
    Ok(())
}
