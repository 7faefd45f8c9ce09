//! `xfer get URL/ DEST/`: fetch a whole directory tree.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use percent_encoding::percent_decode_str;
use xfer::tree::{Compare, FailureKind, TreeConfig, TreeDownload, TreeError, TreeReport};
use xfer::{ChecksumAlgorithm, GetConfig};

use crate::exit::{self, UsageError};
use crate::get_cmd::GetArgs;
use crate::lanes_arg::LanesArg;

/// `--tree-lanes auto` without bounds: from 8 lanes up to 128 (`xfer serve` admits 128
/// connections per client address; over HTTP/2 128 streams measured as fast as 256 at
/// 100 ms and faster at 200 ms), starting from the budget the protocol gets.
const TREE_AUTO: xfer::AdaptConfig = xfer::AdaptConfig {
    min_lanes: 8,
    max_lanes: 128,
    ..xfer::AdaptConfig::DEFAULT
};

/// `xfer get` of a tree: sync semantics.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// Tree: how a re-run decides a local file is up to date: `size`; `mtime` (size and
    /// modification time, the default); `checksum` (the local file hashed against the
    /// listing's SHA-256, the server's Repr-Digest sha-256 or its adler32; a file the server
    /// offers none for is fetched and named in the report).
    #[arg(long, value_enum, value_name = "HOW")]
    pub compare: Option<CompareArg>,
    /// Tree: remove local files and directories the listing no longer names. Only after a
    /// listing that completed and a run in which nothing failed; never the staging directory,
    /// never paths --include/--exclude leave out.
    #[arg(long)]
    pub delete: bool,
    /// Tree: list and compare, print what would be fetched, skipped (with the reason) and
    /// deleted, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Tree: go past failed files and directories (as a tree always does) and end with the
    /// list of failures and exit code 7 when there were any (unless the listing itself
    /// failed: 3).
    #[arg(long)]
    pub keep_going: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CompareArg {
    Size,
    Mtime,
    Checksum,
}

pub async fn run(args: GetArgs, get: GetConfig) -> anyhow::Result<ExitCode> {
    // Many small files want many requests in flight over few connections: HTTP/2 where the
    // server offers it (see `TreeConfig`).
    let mut client_args = args.client.clone();
    client_args.protocol = client_args
        .protocol
        .or(Some(crate::client_args::Protocol::Auto));
    let client = client_args.to_config()?;
    if args.expect_sha256.is_some() || args.sha256_file {
        return Err(UsageError(
            "--expect-sha256 and --sha256-file name one file; a tree is checked against its listing".into(),
        )
        .into());
    }
    let checksum = match args.checksum {
        None => false,
        Some(ChecksumAlgorithm::Sha256) => true,
        Some(other) => {
            return Err(UsageError(format!(
                "--checksum={other} names one file's checksum; a tree compares the SHA-256 of its manifest (--checksum or --checksum=sha256)"
            ))
            .into())
        }
    };
    let root_url = if args.url.ends_with('/') {
        args.url.clone()
    } else {
        format!("{}/", args.url)
    };
    let dest = match args.dest.as_ref().or(args.output.as_ref()) {
        Some(p) => p.clone(),
        None => default_dir(&root_url).ok_or_else(|| {
            UsageError(format!(
                "cannot name a directory after {root_url}; give a destination"
            ))
        })?,
    };
    let defaults = TreeConfig::default();
    let tree_lanes = args.tree_lanes.and_then(LanesArg::fixed);
    let mut adapt = args.tree_lanes.and_then(|l| l.adapt_config(TREE_AUTO));
    if let Some(window) = args.lanes_window {
        let Some(a) = adapt.as_mut() else {
            return Err(
                UsageError("--lanes-window applies to --tree-lanes auto only".into()).into(),
            );
        };
        a.min_window = window;
    }
    let config = TreeConfig {
        get,
        max_files: args.files.unwrap_or(defaults.max_files),
        lanes: tree_lanes.unwrap_or(defaults.lanes),
        http1_lanes: tree_lanes.unwrap_or(defaults.http1_lanes),
        adapt,
        compare: match args.sync.compare {
            _ if checksum => Compare::Checksum,
            Some(CompareArg::Size) => Compare::Size,
            Some(CompareArg::Checksum) => Compare::Checksum,
            Some(CompareArg::Mtime) | None => Compare::Mtime,
        },
        delete: args.sync.delete,
        dry_run: args.sync.dry_run,
        include: args.include.clone(),
        exclude: args.exclude.clone(),
        listing: xfer::tree::ListingLimits {
            max_entries: args
                .listing
                .max_listing_entries
                .unwrap_or(defaults.listing.max_entries),
            max_dirs: args
                .listing
                .max_listing_dirs
                .unwrap_or(defaults.listing.max_dirs),
            max_depth: args
                .listing
                .max_listing_depth
                .unwrap_or(defaults.listing.max_depth),
            max_time: args
                .listing
                .listing_timeout
                .unwrap_or(defaults.listing.max_time),
        },
        ..TreeConfig::default()
    };
    let transport = xfer::transport_for(&root_url, &client).map_err(xfer::Error::from)?;
    let tree = TreeDownload::new(transport.clone(), &root_url, &dest, config);
    let display = crate::tree_progress::start(tree.progress(), args.quiet || args.json);
    let ctrl_c = crate::interrupt::ctrl_c();
    let result = tree.run_until(ctrl_c).await;
    transport.close().await;
    display.finish();
    let (report, code) = match result {
        Ok(report) => {
            let code = match code_for(&report) {
                0 => 0,
                // The listing's own failure (named "") leaves nothing known to be in place.
                _ if args.sync.keep_going && !report.failed.iter().any(|f| f.path.is_empty()) => {
                    exit::PARTIAL
                }
                c => c,
            };
            (report, code)
        }
        Err(TreeError::Interrupted { report }) => (*report, exit::INTERRUPTED),
        Err(e) => {
            let code = match &e {
                TreeError::Config(_) | TreeError::Glob(_) => exit::USAGE,
                _ => exit::LOCAL,
            };
            let e = anyhow::Error::from(e).context(format!("xfer get {root_url}"));
            if args.json {
                print_json(&TreeReport::default(), "failed", Some(&e), code, &args.rate);
            }
            eprintln!("xfer: {}", exit::describe(&e));
            return Ok(ExitCode::from(code));
        }
    };
    let status = match code {
        0 => "ok",
        exit::INTERRUPTED => "interrupted",
        exit::PARTIAL => "partial",
        _ => "failed",
    };
    if args.json {
        print_json(&report, status, None, code, &args.rate);
    } else {
        // The plan is the output a dry run was asked for, even with --quiet.
        for p in &report.plan {
            println!("{}\t{}\t{}", p.action, p.path, p.reason);
        }
        if !args.quiet {
            for path in &report.deleted {
                eprintln!("deleted {path}");
            }
            eprintln!("{} -> {}: {}", report.url, report.dest, report.summary());
        }
    }
    if let Some(why) = &report.delete_skipped {
        eprintln!("xfer: --delete removed nothing: {why}");
    }
    if !report.not_compared.is_empty() {
        eprintln!(
            "xfer: {} files could not be compared by checksum (the server offers no Repr-Digest sha-256 and no adler32 digest) and were fetched",
            report.not_compared.len()
        );
    }
    if args.sync.keep_going && !report.failed.is_empty() {
        eprintln!("xfer: {} paths failed:", report.failed.len());
    }
    for f in &report.failed {
        let what = if f.path.is_empty() {
            "listing"
        } else {
            &f.path
        };
        eprintln!("xfer: failed: {what}: {}", f.error);
    }
    if code == exit::INTERRUPTED {
        eprintln!("xfer: interrupted; run the same command again to resume");
    }
    Ok(ExitCode::from(code))
}

/// 0 when every file is in place; else the code of the worst failure: local problems before
/// verification failures before remote ones (the first asks the user to act here).
fn code_for(report: &TreeReport) -> u8 {
    let has = |k| report.failed.iter().any(|f| f.kind == k);
    if report.failed.is_empty() {
        0
    } else if has(FailureKind::Local) {
        exit::LOCAL
    } else if has(FailureKind::Verify) {
        exit::VERIFY
    } else {
        exit::REMOTE
    }
}

fn print_json(
    report: &TreeReport,
    status: &str,
    error: Option<&anyhow::Error>,
    code: u8,
    rate: &crate::rate_arg::RateArgs,
) {
    let mut doc = match serde_json::to_value(report).context("serializing the report") {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(error = %e, "cannot serialize the tree report");
            return;
        }
    };
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("status".into(), status.into());
        obj.insert("exit_code".into(), code.into());
        if let Some(e) = error {
            obj.insert("error".into(), exit::describe(e).into());
        }
    }
    rate.report(&mut doc);
    match serde_json::to_string_pretty(&doc) {
        Ok(text) => println!("{text}"),
        Err(e) => tracing::warn!(error = %e, "cannot serialize the tree report"),
    }
}

/// The last path segment of a directory URL: `https://h/run-42/` gives `run-42`.
fn default_dir(url: &str) -> Option<PathBuf> {
    let path = url.split_once("://")?.1;
    let path = path.split(['?', '#']).next()?;
    let name = path.trim_end_matches('/').rsplit('/').next()?;
    let decoded = percent_decode_str(name).decode_utf8().ok()?;
    (path.trim_end_matches('/').contains('/')
        && !decoded.is_empty()
        && decoded != "."
        && decoded != ".."
        && !decoded.contains(['/', '\\', '\0']))
    .then(|| Path::new(decoded.as_ref()).to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_names() {
        assert_eq!(
            default_dir("https://h/data/run-42/"),
            Some(PathBuf::from("run-42"))
        );
        assert_eq!(
            default_dir("https://h/run%2042/"),
            Some(PathBuf::from("run 42"))
        );
        assert_eq!(default_dir("https://h/"), None);
        assert_eq!(default_dir("https://h/%2e%2e/"), None);
        assert_eq!(default_dir("https://h/a%2fb/"), None);
    }
}
