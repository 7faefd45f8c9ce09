//! `xfer serve --config FILE`: the file's keys are the flags, the command line beats the file
//! and the file beats the defaults, mistakes refuse to start with the file, line and key, and
//! `--print-config` prints a file that reads back to the same configuration.

use std::path::{Path, PathBuf};
use std::process::Command;

fn xfer(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running xfer {args:?}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path.to_string_lossy().into_owned()
}

/// The value line of `key` in a printed configuration.
fn line<'a>(printed: &'a str, key: &str) -> &'a str {
    printed
        .lines()
        .find(|l| l.starts_with(&format!("{key} =")))
        .unwrap_or_else(|| panic!("no `{key}` in\n{printed}"))
}

#[test]
fn command_line_beats_file_beats_default() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write(
        dir.path(),
        "serve.toml",
        r#"
dir = "/srv/data"
max-connections = 7
memory-budget = "1GiB"
stall-timeout = "90s"
no-quic = true
mirror = ["https://a.example", "https://b.example/"]
"#,
    );
    let (code, out, err) = xfer(&[
        "serve",
        "--config",
        &config,
        "--max-connections",
        "9",
        "--plain",
        "--print-config",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "max-connections"), "max-connections = 9");
    assert_eq!(line(&out, "memory-budget"), "memory-budget = \"1GiB\"");
    assert_eq!(line(&out, "stall-timeout"), "stall-timeout = \"90s\"");
    assert_eq!(line(&out, "no-quic"), "no-quic = true");
    assert_eq!(line(&out, "plain"), "plain = true");
    assert_eq!(line(&out, "dir"), "dir = \"/srv/data\"");
    assert_eq!(
        line(&out, "mirror"),
        "mirror = [\"https://a.example\", \"https://b.example/\"]"
    );
    // Untouched: the code's default.
    assert_eq!(line(&out, "shutdown-grace"), "shutdown-grace = \"30s\"");
}

/// Starts `xfer serve` with `text` as its config file and returns what it said, after
/// checking it refused to start (exit 2) naming the file and `line`.
fn refused(text: &str, line: usize) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write(dir.path(), "serve.toml", text);
    let (code, _, err) = xfer(&["serve", "/srv", "--config", &config]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{config}:{line}:")), "{err}");
    err
}

#[test]
fn unknown_key_refuses_with_file_line_and_key() {
    let err = refused("plain = true\n\n# a comment\nmax-conections = 3\n", 4);
    assert!(err.contains("`max-conections`: unknown key"), "{err}");
}

#[test]
fn bad_value_refuses_with_file_line_and_key() {
    let err = refused(
        "plain = true\nlisten = \"127.0.0.1:0\"\ntcp-send-buffer = \"3 parsecs\"\n",
        3,
    );
    assert!(
        err.contains("`tcp-send-buffer`") && err.contains("3 parsecs"),
        "{err}"
    );
    let err = refused("\nno-quic = \"yes\"\n", 2);
    assert!(
        err.contains("`no-quic`") && err.contains("true or false"),
        "{err}"
    );
}

#[test]
fn printed_config_reads_back_to_the_same_configuration() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write(
        dir.path(),
        "serve.toml",
        r#"
dir = "/srv/data"
self-signed = true
cert-name = ["dtn1.example.org", "10.0.0.5"]
checksums-on-send = "adler32,md5"
tpc-allow = ["10.1.0.0/16"]
careful-resume-lifetime = "2h"
"#,
    );
    let (code, first, err) = xfer(&[
        "serve",
        "--config",
        &config,
        "--listen",
        "127.0.0.1:9443",
        "--print-config",
    ]);
    assert_eq!(code, 0, "{err}");
    let printed = write(dir.path(), "printed.toml", &first);
    let (code, second, err) = xfer(&["serve", "--config", &printed, "--print-config"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        first, second,
        "the printed configuration does not read back"
    );
    assert_eq!(line(&first, "listen"), "listen = \"127.0.0.1:9443\"");
    assert_eq!(
        line(&first, "careful-resume-lifetime"),
        "careful-resume-lifetime = \"2h\""
    );
}

#[test]
fn the_example_in_operations_md_is_a_valid_config() {
    let doc = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md");
    let text = std::fs::read_to_string(&doc).expect("reading docs/operations.md");
    let example = text
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```toml example in docs/operations.md");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write(dir.path(), "serve.toml", example);
    let (code, out, err) = xfer(&["serve", "--config", &config, "--print-config"]);
    assert_eq!(code, 0, "the example does not load: {err}");
    assert_eq!(line(&out, "memory-budget"), "memory-budget = \"2GiB\"");
}

/// `--quic-max-datagram` caps the server's QUIC datagrams (by default each client's route
/// decides); a value QUIC cannot carry refuses to start.
#[test]
fn quic_max_datagram_is_taken_and_checked() {
    let (code, out, err) = xfer(&[
        "serve",
        "/srv",
        "--self-signed",
        "--quic-max-datagram",
        "1472",
        "--print-config",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "quic-max-datagram"), "quic-max-datagram = 1472");
    let (code, _, err) = xfer(&[
        "serve",
        "/srv",
        "--self-signed",
        "--listen",
        "127.0.0.1:0",
        "--quic-max-datagram",
        "1000",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("1000") && err.contains("1200 to 65527"),
        "{err}"
    );
}
