//! `xfer put`: upload one file in parallel, verified chunks; re-running resumes.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use xfer::crates::core::put::{PutConfig, Upload};
use xfer::{format_bps, HumanBytes};

use crate::client_args::{size_arg, ClientArgs};
use crate::exit::UsageError;
use crate::progress_bar::Display;

#[derive(Debug, Args)]
pub struct PutArgs {
    /// The file to upload.
    pub file: PathBuf,
    /// Where to: an http:// or https:// URL; one ending in `/` gets the file's name appended.
    pub url: String,
    /// Chunk size: each chunk is one request, checked by the server on arrival.
    #[arg(long, value_parser = size_arg, default_value = "8MiB")]
    pub chunk_size: u64,
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
    pub client: ClientArgs,
}

pub async fn run(args: PutArgs) -> anyhow::Result<ExitCode> {
    let client = args.client.to_config()?;
    let url = target_url(&args.url, &args.file)?;
    let config = PutConfig {
        chunk_size: args.chunk_size,
        lanes: args.lanes,
        max_attempts: args.retries.max(1),
        ..PutConfig::default()
    };
    let transport = xfer::transport_for(&url, &client).map_err(xfer::Error::from)?;
    let upload = Upload::new(transport, &args.file, &url, config);
    let display = Display::start(upload.progress(), args.quiet || args.json);
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let progress = upload.progress();
    let result = upload.run_until(ctrl_c).await;
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
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("serializing the report")?
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
