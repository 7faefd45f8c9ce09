//! `xfer lab upload`: `xfer put` beside `xfer get` of the same file (and `curl -T`) through one
//! emulated link, in the same run (`crates/lab/src/scenario/upload.rs`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use xfer_lab::scenario::units;
use xfer_lab::scenario::upload::{run_upload_bench, summary, UploadBench};
use xfer_lab::HostProfile;

use crate::exit::UsageError;

#[derive(Debug, Args)]
pub struct UploadArgs {
    /// Round-trip time of the link.
    #[arg(long, default_value = "100ms")]
    pub rtt: String,
    /// Bottleneck rate.
    #[arg(long, default_value = "1G")]
    pub rate: String,
    /// Size of the file moved each way.
    #[arg(long, default_value = "2GiB")]
    pub size: String,
    #[arg(long, default_value_t = 2)]
    pub repetitions: u32,
    /// HTTP versions to measure, comma-separated: http1, http2 (with --tree-files also
    /// `default`, `xfer put` without --protocol; the default there).
    #[arg(long)]
    pub protocols: Option<String>,
    /// Upload a generated tree of this many files (log-normal sizes as the tree scenarios',
    /// median --tree-median) with `xfer put DIR URL/`, against `rclone copy` over WebDAV to
    /// the same server and a shell loop of `curl -T`, instead of one file.
    #[arg(long)]
    pub tree_files: Option<u32>,
    /// Median file size of --tree-files.
    #[arg(long, default_value = "240KiB")]
    pub tree_median: String,
    /// `rclone copy --transfers N` with --tree-files; 0 leaves rclone out.
    #[arg(long, default_value_t = 32)]
    pub rclone_transfers: usize,
    /// With --tree-files: one more `xfer put` case per protocol with these arguments,
    /// space-separated (repeatable; `""` is the command as it is), e.g.
    /// `--put-case "" --put-case "--files 64"`.
    #[arg(long = "put-case", allow_hyphen_values = true)]
    pub put_cases: Vec<String>,
    /// Skip `curl -T`.
    #[arg(long)]
    pub no_curl: bool,
    /// Host profile: stock or tuned.
    #[arg(long, default_value = "tuned")]
    pub profile: String,
    /// Extra argument for every `xfer put` (repeatable), e.g. `--put-arg=--lanes=16`.
    #[arg(long = "put-arg", allow_hyphen_values = true)]
    pub put_args: Vec<String>,
    /// Extra argument for every `xfer get` (repeatable).
    #[arg(long = "get-arg", allow_hyphen_values = true)]
    pub get_args: Vec<String>,
    /// Per-transfer limit.
    #[arg(long, default_value = "300s")]
    pub timeout: String,
    #[arg(long, default_value = "xferlab")]
    pub prefix: String,
    #[arg(long, default_value_t = 8443)]
    pub port: u16,
    /// Write results.json and table.md here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(a: UploadArgs) -> anyhow::Result<ExitCode> {
    let bad = |what: &str, v: &str| UsageError(format!("--{what} {v}: not understood"));
    let rtt = units::parse_duration(&a.rtt).ok_or_else(|| bad("rtt", &a.rtt))?;
    let rate_bps = units::parse_rate(&a.rate).ok_or_else(|| bad("rate", &a.rate))?;
    let size = units::parse_size(&a.size).ok_or_else(|| bad("size", &a.size))?;
    let timeout = units::parse_duration(&a.timeout).ok_or_else(|| bad("timeout", &a.timeout))?;
    let profile = match a.profile.as_str() {
        "stock" => HostProfile::stock(),
        "tuned" => HostProfile::tuned(),
        other => return Err(UsageError(format!("--profile {other}: stock or tuned")).into()),
    };
    let tree = match a.tree_files {
        None => None,
        Some(files) => Some(
            xfer_lab::scenario::TreeFile {
                files: Some(files),
                median: Some(a.tree_median.clone()),
                sigma: None,
                max: None,
                dirs: None,
                seed: None,
                large: None,
            }
            .validate()
            .map_err(|e| UsageError(format!("--tree-files/--tree-median: {e}")))?,
        ),
    };
    let default_protocols = if tree.is_some() {
        "default"
    } else {
        "http1,http2"
    };
    let protocols: Vec<String> = a
        .protocols
        .as_deref()
        .unwrap_or(default_protocols)
        .split(',')
        .map(|p| p.trim().to_string())
        .collect();
    let known = |p: &str| matches!(p, "http1" | "http2") || (tree.is_some() && p == "default");
    if let Some(p) = protocols.iter().find(|p| !known(p)) {
        return Err(UsageError(format!(
            "--protocols: {p} is not http1 or http2 (or default, with --tree-files)"
        ))
        .into());
    }
    let bench = UploadBench {
        xfer_bin: std::env::current_exe().context("finding the xfer binary")?,
        prefix: a.prefix.clone(),
        rate_bps,
        rtt,
        profile,
        size,
        repetitions: a.repetitions.max(1),
        protocols,
        curl: !a.no_curl,
        put_args: a.put_args.clone(),
        get_args: a.get_args.clone(),
        port: a.port,
        work_dir: PathBuf::from(format!("/dev/shm/xfer-lab-upload-{}", a.prefix)),
        timeout,
        tree,
        rclone_transfers: a.rclone_transfers,
        put_cases: a
            .put_cases
            .iter()
            .map(|c| c.split_whitespace().map(String::from).collect())
            .collect(),
    };
    std::fs::create_dir_all(&bench.work_dir)
        .with_context(|| format!("creating {}", bench.work_dir.display()))?;
    let report = run_upload_bench(&bench);
    let _ = std::fs::remove_dir_all(&bench.work_dir);
    let report = report?;
    for r in &report.runs {
        eprintln!(
            "{} {} #{}: {} (wall {:.1} s, client cpu {:.1} s, server cpu {}, load {})",
            r.case,
            r.protocol,
            r.repetition,
            match (r.ok, r.goodput_bps) {
                (true, Some(g)) => format!("{:.0} Mbit/s", g / 1e6),
                _ => format!("failed: {}", r.error.as_deref().unwrap_or("?")),
            },
            r.wall_seconds,
            r.client_cpu_s,
            r.server_cpu_s.map_or("?".into(), |s| format!("{s:.1} s")),
            r.load_before
        );
    }
    let table = summary(&report);
    println!("{table}");
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        std::fs::write(
            out.join("results.json"),
            serde_json::to_string_pretty(&report)?,
        )?;
        std::fs::write(out.join("table.md"), &table)?;
        eprintln!("wrote {}", out.display());
    }
    Ok(ExitCode::SUCCESS)
}
