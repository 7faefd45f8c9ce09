//! Keeps each crate's `unsafe` inside its `sys` module: a test of the crate calls
//! [`unsafe_outside_sys`] on its own manifest directory and asserts the list is empty.
//! A fenced crate's system calls are then reviewed in one file, whatever else changes.

use std::path::Path;

/// What opens unsafe code; a line is checked with its `//` comment cut off.
const OPENERS: [&str; 4] = ["unsafe {", "unsafe fn", "unsafe impl", "unsafe extern"];

/// `file:line: text` of every line under `crate_root`'s `src/` and `tests/` that opens unsafe
/// code outside a file `sys.rs` or a directory `sys/`.
pub fn unsafe_outside_sys(crate_root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for dir in ["src", "tests"] {
        let dir = crate_root.join(dir);
        if dir.is_dir() {
            walk(&dir, &mut found);
        }
    }
    found
}

/// Panics, naming each line, when `crate_root` has unsafe code outside its `sys` module.
pub fn assert_unsafe_only_in_sys(crate_root: &Path) {
    let found = unsafe_outside_sys(crate_root);
    assert!(
        found.is_empty(),
        "unsafe outside sys:\n{}",
        found.join("\n")
    );
}

fn walk(dir: &Path, found: &mut Vec<String>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read source dir {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
            .path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "sys.rs" || name == "sys" {
            continue;
        }
        if path.is_dir() {
            walk(&path, found);
        } else if name.ends_with(".rs") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if OPENERS.iter().any(|w| code.contains(w)) {
                    found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_unsafe_outside_sys_and_not_inside() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("src/sys")).expect("mkdir");
        let block = ["unsafe", " { f() }"].concat();
        std::fs::write(dir.path().join("src/sys.rs"), &block).expect("write sys.rs");
        std::fs::write(dir.path().join("src/sys/x.rs"), &block).expect("write sys/x.rs");
        std::fs::write(dir.path().join("src/ok.rs"), format!("// {block}\n")).expect("write");
        assert!(unsafe_outside_sys(dir.path()).is_empty());
        std::fs::write(
            dir.path().join("src/bad.rs"),
            format!("fn g() {{\n{block}\n}}\n"),
        )
        .expect("write bad.rs");
        let found = unsafe_outside_sys(dir.path());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("bad.rs:2:"), "{found:?}");
    }
}
