//! `xfer completions` and `xfer man` produce scripts and pages that know every subcommand, and
//! the environment variables show in `--help`.

use std::process::Command;

fn xfer(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running xfer {args:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn completion_scripts_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let (ok, out, err) = xfer(&["completions", shell]);
        assert!(ok, "xfer completions {shell}: {err}");
        for sub in ["doctor", "get", "serve", "--ca-cert"] {
            assert!(out.contains(sub), "{shell} completion lacks {sub}");
        }
    }
}

#[test]
fn man_pages_cover_every_subcommand() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let path = dir.path().to_string_lossy().into_owned();
    let (ok, _, err) = xfer(&["man", &path]);
    assert!(ok, "xfer man: {err}");
    let top = std::fs::read_to_string(dir.path().join("xfer.1"))
        .unwrap_or_else(|e| panic!("xfer.1: {e}"));
    assert!(
        top.starts_with(".ie"),
        "not a roff page: {}",
        &top[..top.len().min(80)]
    );
    for sub in ["serve", "get", "doctor", "completions", "man"] {
        assert!(top.contains(sub), "xfer.1 does not mention {sub}");
        let page = dir.path().join(format!("xfer-{sub}.1"));
        assert!(page.exists(), "{} missing", page.display());
    }
    let get = std::fs::read_to_string(dir.path().join("xfer-get.1")).unwrap_or_default();
    assert!(
        get.contains("XFER_CA_CERT"),
        "xfer-get.1 does not document XFER_CA_CERT"
    );
}

#[test]
fn help_shows_the_environment_variables() {
    let (ok, out, err) = xfer(&["get", "--help"]);
    assert!(ok, "{err}");
    assert!(out.contains("XFER_CA_CERT"), "{out}");
    assert!(out.contains("XFER_PROTOCOL"), "{out}");
}
