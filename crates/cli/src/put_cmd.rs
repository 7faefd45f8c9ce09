//! `xfer put`: upload one file in parallel, verified chunks; re-running resumes.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use xfer::crates::core::put::{PutConfig, Upload};
use xfer::{format_bps, HumanBytes};

use crate::client_args::{size_arg, ClientArgs, Protocol};
use crate::exit::UsageError;
use crate::progress_bar::Display;

#[derive(Debug, Args)]
pub struct PutArgs {
    /// The file to upload, or a directory: every file under it is uploaded under URL/.
    pub file: PathBuf,
    /// Where to: an http://, https:// or quic:// URL; for a file, one ending in `/` gets the
    /// file's name appended; for a directory, the URL of the directory it becomes.
    pub url: String,
    /// Files uploaded at once when uploading a directory. Their lanes come out of one
    /// budget (--lanes, else as many as --files): a small file costs a round trip for its
    /// check and one for its upload, so at 100 ms 8 at a time moved 31 files/s and 64 moved
    /// 98 (docs/results.md, issue 41).
    #[arg(long, default_value_t = 64)]
    pub files: usize,
    /// Chunk size: each chunk is one request, checked by the server on arrival.
    #[arg(long, value_parser = size_arg, default_value = "16MiB")]
    pub chunk_size: u64,
    /// Give every chunk --chunk-size bytes. By default the last 8 chunks' worth of a file of
    /// 16 chunks or more is cut into halves, quarters and eighths of a chunk, so that the
    /// lanes finish together.
    #[arg(long)]
    pub no_taper: bool,
    /// Lanes to run, overriding what --connections/--streams imply.
    #[arg(long)]
    pub lanes: Option<usize>,
    /// Attempts per chunk before giving up.
    #[arg(long, default_value_t = 8)]
    pub retries: u32,
    /// Print the final report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress bar, no summary line.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub rate: crate::rate_arg::RateArgs,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `SO_SNDBUF` of `xfer put`'s connections unless `--tcp-send-buffer` says otherwise; the same
/// as `xfer serve --tcp-send-buffer`'s default.
const UPLOAD_SEND_BUFFER: u64 = 32 << 20;

pub async fn run(args: PutArgs) -> anyhow::Result<ExitCode> {
    let tree = args.file.is_dir();
    let mut client_args = args.client.clone();
    let (default, http1_lanes) = if tree {
        (Protocol::Auto, args.lanes.unwrap_or(args.files))
    } else {
        let lanes = args.lanes.or(args.client.connections).unwrap_or(8);
        (Protocol::Http1, lanes)
    };
    let connections = crate::rate_arg::tcp_connections(&client_args, default, http1_lanes);
    args.rate.shape_windows(&mut client_args, connections);
    if tree {
        // Many files want many requests over few connections: HTTP/2 where the server
        // offers it, as for `xfer get URL/` (and as --help says).
        client_args.protocol = client_args
            .protocol
            .or(Some(crate::client_args::Protocol::Auto));
    }
    let mut client = client_args.to_config()?;
    if args.client.tcp_send_buffer.is_none() {
        // The sending side keeps a whole path's worth in flight, as `xfer serve` does for
        // downloads: autotuning stops at tcp_wmem's maximum (4 MiB on a stock kernel, about
        // 335 Mbit/s per connection at 100 ms).
        client.http.tcp.send_buffer = Some(UPLOAD_SEND_BUFFER);
    }
    let config = PutConfig {
        chunk_size: args.chunk_size,
        taper: !args.no_taper
            && args
                .client
                .switches()
                .is_on(xfer::crates::common::mechanisms::TAPER),
        lanes: args.lanes,
        max_attempts: args.retries.max(1),
        rate_limit: args.rate.limiter(),
        ..PutConfig::default()
    };
    if tree {
        return run_tree(&args, &client, config).await;
    }
    let url = target_url(&args.url, &args.file)?;
    let transport = xfer::transport_for(&url, &client).map_err(xfer::Error::from)?;
    let upload = Upload::new(transport.clone(), &args.file, &url, config);
    let display = Display::start(upload.progress(), args.quiet || args.json);
    let ctrl_c = crate::interrupt::ctrl_c();
    let progress = upload.progress();
    let result = upload.run_until(ctrl_c).await;
    transport.close().await;
    display.finish();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let e =
                anyhow::Error::from(e).context(format!("xfer put {} {url}", args.file.display()));
            if args.json {
                let doc = serde_json::json!({
                    "status": "failed",
                    "source": args.file.display().to_string(),
                    "url": url,
                    "error": crate::exit::describe(&e),
                    "exit_code": crate::exit::code_for(&e),
                    "progress": progress.snapshot(),
                });
                println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            }
            return Err(e);
        }
    };
    if args.json {
        let mut doc = serde_json::to_value(&report).context("serializing the report")?;
        args.rate.report(&mut doc);
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).context("serializing the report")?
        );
    } else if !args.quiet {
        let resumed = if report.resumed_bytes > 0 {
            format!(
                ", {} already on the server",
                HumanBytes(report.resumed_bytes)
            )
        } else {
            String::new()
        };
        eprintln!(
            "{} -> {}: {} in {:.2} s, {}{resumed}; server verified sha-256 {}",
            report.source,
            report.url,
            HumanBytes(report.size),
            report.seconds,
            format_bps(report.goodput_bps),
            report.sha256
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `xfer put DIR URL/`: every file under DIR, several at once; files the server already
/// holds identical are skipped.
async fn run_tree(
    args: &PutArgs,
    client: &xfer::ClientConfig,
    put: PutConfig,
) -> anyhow::Result<ExitCode> {
    use xfer::put_tree::{PutTreeConfig, TreeUpload};
    let root_url = if args.url.ends_with('/') {
        args.url.clone()
    } else {
        format!("{}/", args.url)
    };
    let transport = xfer::transport_for(&root_url, client).map_err(xfer::Error::from)?;
    let max_files = args.files.max(1);
    let config = PutTreeConfig {
        // One lane per file in flight unless --lanes says otherwise: the transport's default
        // of 8 would hold 64 files to 8 requests.
        put: PutConfig {
            lanes: put.lanes.or(Some(max_files)),
            ..put
        },
        max_files,
    };
    let result = TreeUpload::new(transport.clone(), &args.file, &root_url, config)
        .run()
        .await;
    transport.close().await;
    let report = result.with_context(|| format!("xfer put {} {root_url}", args.file.display()))?;
    // The worst failure decides: local problems over verification over the remote.
    let code = report
        .failed
        .iter()
        .map(|f| f.exit_code)
        .max_by_key(|c| match c {
            5 => 3,
            4 => 2,
            _ => 1,
        })
        .unwrap_or(0);
    if args.json {
        let mut doc = serde_json::to_value(&report).context("serializing the report")?;
        args.rate.report(&mut doc);
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).context("serializing the report")?
        );
    } else if !args.quiet {
        eprintln!(
            "{} -> {}: {} files ({} uploaded, {} already there), {} in {:.2} s, {}",
            report.source,
            report.url,
            report.files,
            report.uploaded,
            report.skipped,
            HumanBytes(report.bytes),
            report.seconds,
            format_bps(report.goodput_bps)
        );
    }
    for skipped in &report.not_files {
        eprintln!("xfer: not a regular file, left out: {skipped}");
    }
    for f in &report.failed {
        eprintln!("xfer: failed: {}: {}", f.path, f.error);
    }
    Ok(ExitCode::from(code))
}

/// `URL/` names a directory: the file keeps its name there.
fn target_url(url: &str, file: &std::path::Path) -> Result<String, UsageError> {
    if !url.ends_with('/') {
        return Ok(url.to_string());
    }
    let name = file.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        UsageError(format!(
            "{} has no usable file name; give the full URL",
            file.display()
        ))
    })?;
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    Ok(format!("{url}{encoded}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_url_gets_the_file_name() {
        let f = std::path::Path::new("/data/run 1/a%b.bin");
        assert_eq!(
            target_url("https://h/in/", f).ok().as_deref(),
            Some("https://h/in/a%25b.bin")
        );
        assert_eq!(
            target_url("https://h/in/x.bin", f).ok().as_deref(),
            Some("https://h/in/x.bin")
        );
    }
}
