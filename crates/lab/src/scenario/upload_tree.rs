//! `xfer lab upload --tree-files N`: uploads of a generated tree through the link, side by
//! side in the same run: `xfer put DIR URL/`, `rclone copy DIR :webdav:` to the same xfer
//! server (WebDAV `PUT` and `MKCOL`), and a shell loop of `curl -T`, one process per file as a
//! user would write it. Every case uploads into its own directory, which is then checked
//! against the tree (every file there with its size) and removed, so each starts from an
//! empty destination and none skips what another sent. Goodput is the tree's bytes over the
//! process's wall time for every tool alike (start, handshakes and the tail count).

use std::path::Path;
use std::process::Child;
use std::time::Instant;

use super::process::{proc_cpu_time, wait_with_deadline};
use super::runner::load_average;
use super::tree::TreeEntry;
use super::upload::{
    case_keys, link_line, median_goodput, runs_cell, spawn, UploadBench, UploadReport, UploadRun,
};
use super::ScenarioError;
use crate::Lab;

/// The bearer token goes to rclone in its environment, never on a printed command line.
const RCLONE_TOKEN_ENV: &str = "RCLONE_WEBDAV_BEARER_TOKEN";

pub(super) struct TreeUploadContext<'a> {
    pub lab: &'a Lab,
    pub bench: &'a UploadBench,
    pub server: &'a Child,
    /// The generated tree.
    pub source: &'a Path,
    pub entries: &'a [TreeEntry],
    /// The served root: uploads land under `www/in/`.
    pub www: &'a Path,
    /// `https://server:port`
    pub base: &'a str,
    pub ca: &'a str,
    pub token_file: &'a Path,
    pub curl_header: &'a Path,
}

/// One program run: what to start and under which case name.
struct Command {
    case: String,
    protocol: String,
    program: String,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    /// Directory under `www/in/` it uploads into.
    dest: String,
}

/// Every case once per repetition, repetition-major (a drift in the machine's load spreads
/// over all tools).
pub(super) fn run_cases(c: &TreeUploadContext<'_>) -> Result<Vec<UploadRun>, ScenarioError> {
    let b = c.bench;
    let list = b.work_dir.join("tree-files");
    let names: String = c.entries.iter().map(|e| format!("{}\n", e.path)).collect();
    std::fs::write(&list, names).map_err(|e| ScenarioError::io("writing", &list, e))?;
    let script = b.work_dir.join("curl-loop.sh");
    std::fs::write(&script, CURL_LOOP).map_err(|e| ScenarioError::io("writing", &script, e))?;
    let token = std::fs::read_to_string(c.token_file)
        .map_err(|e| ScenarioError::io("reading", c.token_file, e))?
        .trim()
        .to_string();
    let mut runs = Vec::new();
    for rep in 1..=b.repetitions {
        let mut commands = Vec::new();
        let plain = [Vec::new()];
        let cases = if b.put_cases.is_empty() {
            &plain[..]
        } else {
            &b.put_cases[..]
        };
        for (proto, (n, extra)) in b
            .protocols
            .iter()
            .flat_map(|p| cases.iter().enumerate().map(move |c| (p, c)))
        {
            let dest = format!("xfer-{proto}-{n}-{rep}");
            let mut args = vec![
                "put".into(),
                c.source.display().to_string(),
                format!("{}/in/{dest}/", c.base),
                "--json".into(),
                "--quiet".into(),
                "--token-file".into(),
                c.token_file.display().to_string(),
                "--ca-cert".into(),
                c.ca.into(),
            ];
            if proto != "default" {
                args.extend(["--protocol".into(), proto.clone()]);
            }
            args.extend(b.put_args.iter().cloned());
            args.extend(extra.iter().cloned());
            commands.push(Command {
                case: "xfer put".into(),
                protocol: if extra.is_empty() {
                    proto.clone()
                } else {
                    format!("{proto} {}", extra.join(" "))
                },
                program: b.xfer_bin.display().to_string(),
                args,
                env: Vec::new(),
                dest,
            });
        }
        if b.rclone_transfers > 0 {
            let dest = format!("rclone-{rep}");
            // rclone takes the remote's root as existing (its MKCOL of a subdirectory gets a
            // 409 otherwise), as a user's target directory would.
            let root = c.www.join("in").join(&dest);
            std::fs::create_dir_all(&root).map_err(|e| ScenarioError::io("creating", &root, e))?;
            commands.push(Command {
                case: format!("rclone copy --transfers {}", b.rclone_transfers),
                protocol: "webdav".into(),
                program: "rclone".into(),
                args: vec![
                    "copy".into(),
                    "--config".into(),
                    "/dev/null".into(),
                    "--transfers".into(),
                    b.rclone_transfers.to_string(),
                    "--webdav-url".into(),
                    format!("{}/in/{dest}/", c.base),
                    "--webdav-vendor".into(),
                    "other".into(),
                    "--ca-cert".into(),
                    c.ca.into(),
                    c.source.display().to_string(),
                    ":webdav:".into(),
                ],
                env: vec![(RCLONE_TOKEN_ENV, token.clone())],
                dest,
            });
        }
        if b.curl {
            let dest = format!("curl-{rep}");
            commands.push(Command {
                case: "curl -T loop".into(),
                protocol: "http1".into(),
                program: "sh".into(),
                args: vec![
                    script.display().to_string(),
                    c.source.display().to_string(),
                    list.display().to_string(),
                    c.ca.into(),
                    c.curl_header.display().to_string(),
                    format!("{}/in/{dest}", c.base),
                ],
                env: Vec::new(),
                dest,
            });
        }
        for cmd in commands {
            runs.push(run_one(c, rep, &cmd)?);
            let _ = std::fs::remove_dir_all(c.www.join("in").join(&cmd.dest));
        }
    }
    Ok(runs)
}

/// `sh curl-loop.sh SRC LIST CA HEADER URL`: one `curl -T` per file, in order, as a user's
/// loop would; stops at the first answer that is not 201 or 204.
const CURL_LOOP: &str = r#"set -eu
src=$1; list=$2; ca=$3; header=$4; url=$5
while IFS= read -r f; do
  code=$(curl -sS --http1.1 --cacert "$ca" -H "@$header" -T "$src/$f" -o /dev/null -w '%{http_code}' "$url/$f")
  case $code in 201|204) ;; *) echo "$f: HTTP $code" >&2; exit 1;; esac
done < "$list"
"#;

fn run_one(
    c: &TreeUploadContext<'_>,
    repetition: u32,
    cmd: &Command,
) -> Result<UploadRun, ScenarioError> {
    let b = c.bench;
    let out = b.work_dir.join("client.out");
    let err = b.work_dir.join("client.err");
    let command = format!("{} {}", cmd.program, cmd.args.join(" "));
    let load_before = load_average();
    let server_before = proc_cpu_time(c.server.id());
    let mut proc = c.lab.command_in_client(&cmd.program);
    proc.args(&cmd.args);
    for (k, v) in &cmd.env {
        proc.env(k, v);
    }
    let started = Instant::now();
    let child = spawn(proc, &err, Some(&out))?;
    let finished = wait_with_deadline(child.id(), started, b.timeout)
        .map_err(|e| ScenarioError::io("waiting for", Path::new(&cmd.program), e))?;
    drop(child);
    let server_cpu_s = match (server_before, proc_cpu_time(c.server.id())) {
        (Some(a), Some(z)) => Some(z.saturating_sub(a).as_secs_f64()),
        _ => None,
    };
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let wall = finished.wall.as_secs_f64();
    let error = if finished.timed_out {
        Some(format!("timed out after {:?}", b.timeout))
    } else if finished.code != Some(0) {
        Some(format!("{} failed: {}", cmd.case, tail(&stderr)))
    } else {
        check_uploaded(&c.www.join("in").join(&cmd.dest), c.entries).err()
    };
    let bytes: u64 = c.entries.iter().map(|e| e.size).sum();
    let run = UploadRun {
        case: cmd.case.clone(),
        protocol: cmd.protocol.clone(),
        repetition,
        ok: error.is_none(),
        goodput_bps: error.is_none().then(|| bytes as f64 * 8.0 / wall),
        error,
        wall_seconds: wall,
        client_cpu_s: finished.cpu.as_secs_f64(),
        server_cpu_s,
        load_before,
        command,
    };
    Ok(run)
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.trim().lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// Every file of the tree under `dest` with its size, else what is missing or differs.
fn check_uploaded(dest: &Path, entries: &[TreeEntry]) -> Result<(), String> {
    let mut bad = Vec::new();
    for e in entries {
        match std::fs::metadata(dest.join(&e.path)) {
            Ok(m) if m.is_file() && m.len() == e.size => {}
            Ok(m) => bad.push(format!("{} ({} bytes, not {})", e.path, m.len(), e.size)),
            Err(_) => bad.push(format!("{} (missing)", e.path)),
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = bad.iter().take(3).map(String::as_str).collect();
    Err(format!(
        "{} of {} files not on the server as sent: {}",
        bad.len(),
        entries.len(),
        shown.join(", ")
    ))
}

/// The tree table: median goodput and files per second per case, and xfer's put over each
/// other tool, per repetition's medians.
pub(super) fn summary(r: &UploadReport) -> String {
    let files = r.files.unwrap_or(0);
    let mut s = format!(
        "tree of {files} files, {}\n\n| case | protocol | median Mbit/s | files/s | runs, Mbit/s |\n|---|---|---:|---:|---|\n",
        link_line(r)
    );
    let keys = case_keys(r);
    let med = |case: &str, proto: &str| median_goodput(r, case, proto);
    for (case, proto) in &keys {
        let m = med(case, proto);
        let files_per_s = m.map(|bps| files as f64 / (r.size as f64 * 8.0 / bps));
        s += &format!(
            "| {case} | {proto} | {} | {} | {} |\n",
            m.map_or("-".into(), |m| format!("{:.0}", m / 1e6)),
            files_per_s.map_or("-".into(), |f| format!("{f:.0}")),
            runs_cell(r, case, proto)
        );
    }
    let others: Vec<&(String, String)> = keys.iter().filter(|(c, _)| c != "xfer put").collect();
    s += "\n| xfer put | over | ratio (medians) |\n|---|---|---:|\n";
    for (case, proto) in keys.iter().filter(|(c, _)| c == "xfer put") {
        for (oc, op) in &others {
            let ratio = match (med(case, proto), med(oc, op)) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "-".into(),
            };
            s += &format!("| {proto} | {oc} | {ratio} |\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_is_checked_file_by_file() {
        let dir = std::env::temp_dir().join(format!("xfer-upload-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("d")).expect("creating the test directory");
        std::fs::write(dir.join("d/a"), b"abc").expect("writing a");
        let entries = |b_size| {
            vec![
                TreeEntry {
                    path: "d/a".into(),
                    size: 3,
                },
                TreeEntry {
                    path: "d/b".into(),
                    size: b_size,
                },
            ]
        };
        let e = check_uploaded(&dir, &entries(2)).expect_err("d/b is missing");
        assert!(e.contains("1 of 2") && e.contains("d/b (missing)"), "{e}");
        std::fs::write(dir.join("d/b"), b"x").expect("writing b");
        let e = check_uploaded(&dir, &entries(2)).expect_err("d/b is short");
        assert!(e.contains("d/b (1 bytes, not 2)"), "{e}");
        assert_eq!(check_uploaded(&dir, &entries(1)), Ok(()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
