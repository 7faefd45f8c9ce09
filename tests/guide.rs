//! Every command of `docs/guide.md` runs, in order, as one shell script in a scratch
//! directory, with the `xfer` built next to this test first on `PATH`. A guide that drifts
//! from the program fails here.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `sh` blocks of a Markdown text, in order.
fn shell_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), l) => {
                block.push_str(l);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

fn bin_dir() -> PathBuf {
    // target/<profile>/deps/guide-<hash> -> target/<profile>
    let exe = std::env::current_exe().unwrap_or_default();
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn every_command_in_the_guide_runs() {
    let bin = bin_dir();
    assert!(
        bin.join("xfer").is_file(),
        "the xfer binary is missing in {}: run `cargo build -p xfer-cli` first",
        bin.display()
    );
    for program in ["davix-ls", "curl", "sha256sum", "timeout"] {
        if !have(program) {
            xfer_test_support::gate::absent(
                "the guide's commands",
                format!("{program} not found (scripts/test.sh installs it)"),
            );
            return;
        }
    }
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide.md"))
        .expect("docs/guide.md");
    let blocks = shell_blocks(&guide);
    assert!(
        blocks.len() >= 8,
        "the guide lost its commands: {}",
        blocks.len()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let script = format!(
        "set -euo pipefail\nexport PATH={}:$PATH\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{}",
        bin.display(),
        blocks.join("\n")
    );
    let out = Command::new("timeout")
        .args(["600", "bash", "-c", &script])
        .current_dir(dir.path())
        .output()
        .expect("running bash");
    assert!(
        out.status.success(),
        "the guide's commands failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn blocks_are_found() {
    let md = "text\n```sh\na\nb\n```\n```text\nno\n```\n```sh\nc\n```\n";
    assert_eq!(
        shell_blocks(md),
        vec!["a\nb\n".to_string(), "c\n".to_string()]
    );
}
