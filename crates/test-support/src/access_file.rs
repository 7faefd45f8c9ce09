//! The access file a test server reads: written where the server's configuration expects it,
//! and the `[[token]]` entry most tests grant, so each test spells only what it checks.

use std::path::{Path, PathBuf};

/// Write `text` as `dir/access.toml` and return its path; a test cannot go on without it.
pub fn write_access_file(dir: &Path, text: &str) -> PathBuf {
    let file = dir.join("access.toml");
    std::fs::write(&file, text)
        .unwrap_or_else(|e| panic!("writing the access file {}: {e}", file.display()));
    file
}

/// One `[[token]]` entry: `token` held in clear, granting `access` (`read`, `create`,
/// `write`) under `prefix`.
pub fn token_entry(name: &str, token: &str, access: &str, prefix: &str) -> String {
    format!(
        "[[token]]\nname = \"{name}\"\ntoken = \"{token}\"\naccess = \"{access}\"\nprefix = \"{prefix}\"\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_one_toml_table() {
        assert_eq!(
            token_entry("up", "t", "write", "/in"),
            "[[token]]\nname = \"up\"\ntoken = \"t\"\naccess = \"write\"\nprefix = \"/in\"\n"
        );
    }
}
