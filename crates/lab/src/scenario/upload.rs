//! `xfer lab upload`: uploads through an emulated link, side by side with the download of the
//! same file in the same run. Per repetition and HTTP version it runs, in the client
//! namespace, `xfer get` of a file the server holds, `xfer put` of that same file back to the
//! server, and once per repetition `curl -T` (one HTTP/1.1 stream); the ratio put/get is the
//! figure the upload path is judged by.
//!
//! Everything lives in `/dev/shm` (the served root, the source, the downloaded copy), so the
//! disks of a shared machine stay out of the figures. The server runs with `--allow-upload`
//! and an access file of its own; the token goes to the clients in a file, never on a
//! command line that is printed.

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::process::{die_with_parent, proc_cpu_time, stop, wait_with_deadline};
use super::report::median;
use super::runner::{load_average, wait_for_server};
use super::ScenarioError;
use crate::{HostProfile, Lab, LabConfig, LinkConfig};

/// What to measure.
#[derive(Debug, Clone)]
pub struct UploadBench {
    pub xfer_bin: PathBuf,
    /// Namespace prefix of the lab.
    pub prefix: String,
    /// Bottleneck rate, bit/s.
    pub rate_bps: u64,
    pub rtt: Duration,
    pub profile: HostProfile,
    /// Bytes of the file moved each way.
    pub size: u64,
    pub repetitions: u32,
    /// `http1`, `http2`: one get and one put for each.
    pub protocols: Vec<String>,
    /// Also `curl -T` once per repetition.
    pub curl: bool,
    /// Arguments added to every `xfer put` (e.g. `--lanes 16`).
    pub put_args: Vec<String>,
    /// Arguments added to every `xfer get`.
    pub get_args: Vec<String>,
    pub port: u16,
    /// Working directory; must be on a memory file system for honest figures.
    pub work_dir: PathBuf,
    /// Per-transfer limit.
    pub timeout: Duration,
    /// Upload a generated tree instead of one file: `xfer put DIR URL/` against `rclone copy`
    /// over WebDAV and a shell loop of `curl -T` (`upload_tree.rs`); `size` is then unused.
    pub tree: Option<super::tree::TreeShape>,
    /// `rclone copy --transfers N` in tree mode; 0 leaves rclone out.
    pub rclone_transfers: usize,
    /// Tree mode: each entry is one more `xfer put` case per protocol, with these arguments
    /// (after `put_args`); none: one case with `put_args` alone.
    pub put_cases: Vec<Vec<String>>,
}

/// One transfer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UploadRun {
    /// `get`, `put` or `curl -T`.
    pub case: String,
    pub protocol: String,
    pub repetition: u32,
    pub ok: bool,
    pub error: Option<String>,
    /// Wall time of the process.
    pub wall_seconds: f64,
    /// Goodput the tool reported (bit/s), else size over wall time.
    pub goodput_bps: Option<f64>,
    pub client_cpu_s: f64,
    pub server_cpu_s: Option<f64>,
    /// Load average before the transfer.
    pub load_before: String,
    pub command: String,
}

/// Everything measured, and how.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UploadReport {
    pub rate_bps: u64,
    pub rtt_ms: f64,
    pub profile: String,
    pub size: u64,
    /// Files of the tree in tree mode.
    pub files: Option<u64>,
    pub server_command: String,
    pub load_start: String,
    pub load_end: String,
    pub runs: Vec<UploadRun>,
}

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const TOKEN: &str = "lab-upload-token";

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ScenarioError {
    let path = path.to_path_buf();
    move |source| ScenarioError::Io { op, path, source }
}

/// A file of `size` pseudo-random bytes (incompressible, different in every MiB).
pub(super) fn write_source(path: &Path, size: u64) -> Result<(), ScenarioError> {
    let mut f = std::io::BufWriter::with_capacity(
        4 << 20,
        std::fs::File::create(path).map_err(io_err("creating", path))?,
    );
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut block = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for w in block.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            w.copy_from_slice(&state.to_le_bytes()[..w.len()]);
        }
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n]).map_err(io_err("writing", path))?;
        left -= n as u64;
    }
    f.flush().map_err(io_err("writing", path))
}

/// Run the comparison; transfers that fail are recorded, not errors.
pub fn run_upload_bench(b: &UploadBench) -> Result<UploadReport, ScenarioError> {
    let www = b.work_dir.join("www");
    let cert_dir = b.work_dir.join("cert");
    for d in [&www, &cert_dir] {
        std::fs::create_dir_all(d).map_err(io_err("creating a directory", d))?;
    }
    let _ = std::fs::remove_file(cert_dir.join("cert.pem"));
    let access = b.work_dir.join("access.toml");
    std::fs::write(
        &access,
        format!(
            "[[token]]\nname = \"lab\"\ntoken = \"{TOKEN}\"\naccess = \"write\"\nprefix = \"/\"\n"
        ),
    )
    .map_err(io_err("writing", &access))?;
    let token_file = b.work_dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).map_err(io_err("writing", &token_file))?;
    let curl_header = b.work_dir.join("curl-auth");
    std::fs::write(&curl_header, format!("Authorization: Bearer {TOKEN}\n"))
        .map_err(io_err("writing", &curl_header))?;
    let source = www.join("src.bin");
    let tree_source = b.work_dir.join("tree");
    let tree_entries = match &b.tree {
        Some(shape) => Some(shape.generate(&tree_source)?),
        None => {
            write_source(&source, b.size)?;
            None
        }
    };
    let got = b.work_dir.join("got.bin");

    let lab = Lab::start(LabConfig {
        profile: b.profile.clone(),
        ..LabConfig::new(&b.prefix, LinkConfig::new(b.rate_bps, b.rtt))
    })?;
    let listen = format!("{SERVER}:{}", b.port);
    let serve_args: Vec<String> = vec![
        "serve".into(),
        www.display().to_string(),
        "--self-signed".into(),
        "--cert-dir".into(),
        cert_dir.display().to_string(),
        "--cert-name".into(),
        SERVER.to_string(),
        "--listen".into(),
        listen,
        "--allow-upload".into(),
        "--access".into(),
        access.display().to_string(),
    ];
    let server_command = format!("{} {}", b.xfer_bin.display(), serve_args.join(" "));
    let serve_log = b.work_dir.join("serve.log");
    let mut cmd = lab.command_in_server(&b.xfer_bin);
    cmd.args(&serve_args);
    let mut server = spawn(cmd, &serve_log, None)?;
    wait_for_server(&serve_log, &cert_dir.join("cert.pem"), &mut server)?;
    let ca = cert_dir.join("cert.pem").display().to_string();
    let base = format!("https://{SERVER}:{}", b.port);
    let load_start = load_average();
    let mut runs = Vec::new();
    if let Some(entries) = &tree_entries {
        let ctx = super::upload_tree::TreeUploadContext {
            lab: &lab,
            bench: b,
            server: &server,
            source: &tree_source,
            entries,
            www: &www,
            base: &base,
            ca: &ca,
            token_file: &token_file,
            curl_header: &curl_header,
        };
        runs = super::upload_tree::run_cases(&ctx)?;
    }
    let single = if tree_entries.is_some() {
        0
    } else {
        b.repetitions
    };
    for rep in 1..=single {
        for proto in &b.protocols {
            let mut get = vec![
                "get".into(),
                format!("{base}/src.bin"),
                "-o".into(),
                got.display().to_string(),
                "--overwrite".into(),
                "--json".into(),
                "--quiet".into(),
                "--ca-cert".into(),
                ca.clone(),
                "--protocol".into(),
                proto.clone(),
            ];
            get.extend(b.get_args.iter().cloned());
            runs.push(run_one(
                &lab,
                b,
                "get",
                proto,
                rep,
                &b.xfer_bin,
                get,
                &server,
            )?);
            let _ = std::fs::remove_file(&got);
            let mut put = vec![
                "put".into(),
                source.display().to_string(),
                format!("{base}/in/put.bin"),
                "--json".into(),
                "--quiet".into(),
                "--token-file".into(),
                token_file.display().to_string(),
                "--ca-cert".into(),
                ca.clone(),
                "--protocol".into(),
                proto.clone(),
            ];
            put.extend(b.put_args.iter().cloned());
            runs.push(run_one(
                &lab,
                b,
                "put",
                proto,
                rep,
                &b.xfer_bin,
                put,
                &server,
            )?);
            let _ = std::fs::remove_file(www.join("in/put.bin"));
        }
        if b.curl {
            let curl = vec![
                "-sS".into(),
                "--http1.1".into(),
                "--cacert".into(),
                ca.clone(),
                "-H".into(),
                format!("@{}", curl_header.display()),
                "-T".into(),
                source.display().to_string(),
                "-o".into(),
                "/dev/null".into(),
                "-w".into(),
                "%{http_code} %{speed_upload}".into(),
                format!("{base}/in/curl.bin"),
            ];
            let curl_bin = PathBuf::from("curl");
            runs.push(run_one(
                &lab, b, "curl -T", "http1", rep, &curl_bin, curl, &server,
            )?);
            let _ = std::fs::remove_file(www.join("in/curl.bin"));
        }
    }
    let load_end = load_average();
    stop(&mut server, Duration::from_secs(2));
    lab.shutdown()?;
    let _ = std::fs::remove_file(&source);
    let _ = std::fs::remove_dir_all(&tree_source);
    Ok(UploadReport {
        rate_bps: b.rate_bps,
        rtt_ms: b.rtt.as_secs_f64() * 1e3,
        profile: b.profile.name.clone(),
        size: tree_entries
            .as_ref()
            .map_or(b.size, |e| e.iter().map(|e| e.size).sum()),
        files: tree_entries.as_ref().map(|e| e.len() as u64),
        server_command,
        load_start,
        load_end,
        runs,
    })
}

pub(super) fn spawn(
    mut cmd: Command,
    stderr: &Path,
    stdout: Option<&Path>,
) -> Result<Child, ScenarioError> {
    let err = std::fs::File::create(stderr).map_err(io_err("creating", stderr))?;
    cmd.stderr(err).stdin(Stdio::null());
    match stdout {
        Some(p) => {
            cmd.stdout(std::fs::File::create(p).map_err(io_err("creating", p))?);
        }
        None => {
            cmd.stdout(Stdio::null());
        }
    }
    die_with_parent(&mut cmd);
    cmd.spawn().map_err(|source| ScenarioError::Spawn {
        program: "a lab process",
        source,
    })
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    lab: &Lab,
    b: &UploadBench,
    case: &str,
    protocol: &str,
    repetition: u32,
    program: &Path,
    args: Vec<String>,
    server: &Child,
) -> Result<UploadRun, ScenarioError> {
    let out = b.work_dir.join("client.out");
    let err = b.work_dir.join("client.err");
    let command = format!("{} {}", program.display(), args.join(" "));
    let load_before = load_average();
    let server_before = proc_cpu_time(server.id());
    let mut cmd = lab.command_in_client(program);
    cmd.args(&args);
    let started = Instant::now();
    let child = spawn(cmd, &err, Some(&out))?;
    let finished = wait_with_deadline(child.id(), started, b.timeout)
        .map_err(io_err("waiting for", program))?;
    drop(child);
    let server_cpu_s = match (server_before, proc_cpu_time(server.id())) {
        (Some(a), Some(z)) => Some(z.saturating_sub(a).as_secs_f64()),
        _ => None,
    };
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let wall = finished.wall.as_secs_f64();
    let (goodput_bps, error) = if finished.timed_out {
        (None, Some(format!("timed out after {:?}", b.timeout)))
    } else if finished.code != Some(0) {
        (None, Some(format!("{case} failed: {}", stderr.trim())))
    } else {
        parse_goodput(case, &stdout, b.size, wall)
    };
    Ok(UploadRun {
        case: case.into(),
        protocol: protocol.into(),
        repetition,
        ok: error.is_none(),
        error,
        wall_seconds: wall,
        goodput_bps,
        client_cpu_s: finished.cpu.as_secs_f64(),
        server_cpu_s,
        load_before,
        command,
    })
}

/// xfer's JSON report, or curl's `%{http_code} %{speed_upload}` (bytes/s).
fn parse_goodput(case: &str, stdout: &str, size: u64, wall: f64) -> (Option<f64>, Option<String>) {
    if case == "curl -T" {
        let mut it = stdout.split_whitespace();
        let code = it.next().unwrap_or("");
        if code != "201" && code != "204" {
            return (None, Some(format!("curl -T answered {code}")));
        }
        let bps = it
            .next()
            .and_then(|s| s.parse::<f64>().ok())
            .map(|b| b * 8.0);
        return (bps.or(Some(size as f64 * 8.0 / wall)), None);
    }
    match serde_json::from_str::<serde_json::Value>(stdout) {
        Ok(v) => (
            v["goodput_bps"].as_f64().or(Some(size as f64 * 8.0 / wall)),
            None,
        ),
        Err(e) => (None, Some(format!("{case} printed no JSON report ({e})"))),
    }
}

/// The Markdown summary: median goodput per case and protocol, and put/get per repetition
/// (tree mode: files per second and the ratios of xfer's put to the others).
pub fn summary(r: &UploadReport) -> String {
    if r.files.is_some() {
        return super::upload_tree::summary(r);
    }
    let mut s = format!(
        "{}\n\n| case | protocol | median Mbit/s | runs |\n|---|---|---|---|\n",
        link_line(r)
    );
    let keys = case_keys(r);
    let med = |case: &str, proto: &str| median_goodput(r, case, proto);
    for (case, proto) in &keys {
        s += &format!(
            "| {case} | {proto} | {} | {} |\n",
            med(case, proto).map_or("-".into(), |m| format!("{:.0}", m / 1e6)),
            runs_cell(r, case, proto)
        );
    }
    s += "\n| protocol | put / get (median) | put / curl -T (median) |\n|---|---|---|\n";
    let protos: Vec<&String> = keys
        .iter()
        .filter(|(c, _)| c == "put")
        .map(|(_, p)| p)
        .collect();
    for p in protos {
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        s += &format!(
            "| {p} | {} | {} |\n",
            ratio(med("put", p), med("get", p)),
            ratio(med("put", p), med("curl -T", "http1"))
        );
    }
    s
}

/// What moved over which link, and the load: the first line of a summary.
pub(super) fn link_line(r: &UploadReport) -> String {
    format!(
        "{} over {:.0} Mbit/s, {:.0} ms ({}), load {} -> {}",
        human(r.size),
        r.rate_bps as f64 / 1e6,
        r.rtt_ms,
        r.profile,
        r.load_start,
        r.load_end
    )
}

/// The (case, protocol) pairs of a report, in the order they first ran.
pub(super) fn case_keys(r: &UploadReport) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for run in &r.runs {
        let k = (run.case.clone(), run.protocol.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// Median goodput (bit/s) of the runs of one case that succeeded.
pub(super) fn median_goodput(r: &UploadReport, case: &str, proto: &str) -> Option<f64> {
    median(
        r.runs
            .iter()
            .filter(|x| x.case == case && x.protocol == proto && x.ok)
            .filter_map(|x| x.goodput_bps)
            .collect(),
    )
}

/// Every run of one case, Mbit/s or `failed`, comma-separated.
pub(super) fn runs_cell(r: &UploadReport, case: &str, proto: &str) -> String {
    let all: Vec<String> = r
        .runs
        .iter()
        .filter(|x| x.case == case && x.protocol == proto)
        .map(|x| match x.goodput_bps {
            Some(g) if x.ok => format!("{:.0}", g / 1e6),
            _ => "failed".into(),
        })
        .collect();
    all.join(", ")
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes % (1 << 30) == 0 {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goodput_from_each_tool() {
        assert_eq!(
            parse_goodput("curl -T", "201 12500000", 100, 1.0),
            (Some(100_000_000.0), None)
        );
        assert!(parse_goodput("curl -T", "401 0", 100, 1.0).1.is_some());
        assert_eq!(
            parse_goodput("put", r#"{"goodput_bps": 5e8}"#, 100, 1.0),
            (Some(5e8), None)
        );
        assert!(parse_goodput("get", "not json", 100, 1.0).1.is_some());
    }
}
