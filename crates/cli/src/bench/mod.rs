//! `xfer bench`: the load generator. Lanes download the servers' synthetic resource memory to
//! memory, back to back, for a fixed time, and the run is summed up as operations, volume,
//! goodput, per-lane spread, time to first byte and client CPU per GiB.
//!
//! It does not write files, read files on the server, or measure the server's CPU (run the
//! server as its own process and read its `/proc/PID/stat` for that, as
//! `scripts/bench-loopback.sh` does). `--floor` measures no server: what TLS, hashing and a
//! copy cost on one core, the yardstick for the CPU per GiB the runs report (`floor`).

mod cpu;
mod floor;
mod load;
mod report;
mod sizes;

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::time::Instant;
use xfer::crates::common::synthetic::{SyntheticSpec, MAX_SYNTHETIC_SIZE};
use xfer::crates::core::digest::{pairing_stats, PairingStats};
use xfer::{format_bps, HumanBytes};

use crate::client_args::{duration_arg, size_arg, ClientArgs};
use crate::exit::{UsageError, REMOTE};
use cpu::CpuTimes;
use load::{Plan, Target};
use report::{BenchReport, RunInfo, ServerLine};
use sizes::Spread;

/// How the deadline treats transfers in flight; shown by `xfer bench --help`.
const DEADLINE_NOTE: &str = "\
Each operation is one range request for bytes 0..N of the server's synthetic resource \
(/.xfer/synthetic, 1 PiB, --seed), N drawn per operation. The bytes are hashed when verifying \
and then dropped.

Deadline: at --duration after the load starts, transfers still running are cancelled. Bytes \
they received before the deadline count toward volume and goodput (goodput = bytes received \
within the window / window length), but they are not counted as completed operations; they \
are reported separately as cut_at_deadline. Connection set-up of lanes happens inside the \
window; the initial probe (HEAD) of each server happens before it.

Exit status: 0 when no operation failed, 3 when any did (after the report is printed).";

#[derive(Debug, Args)]
#[command(after_long_help = DEADLINE_NOTE)]
pub struct BenchArgs {
    /// Servers' base URLs (https://host:port, http://host:port, quic://host:port). Requests go
    /// to them round-robin.
    #[arg(required_unless_present = "floor", num_args = 1..)]
    pub urls: Vec<String>,
    /// Measure no server: print what the unavoidable work costs on one core of this machine
    /// (the negotiated TLS suite's seal and open, ChaCha20-Poly1305, SHA-256, adler32, a memory
    /// copy) in GiB/s and CPU seconds per GiB, each for a seventh of --duration.
    #[arg(long, conflicts_with = "urls")]
    pub floor: bool,
    /// Length of the measurement window (`10s`, `500ms`, `2m`; a bare number is seconds).
    /// Transfers still running at its end are cancelled: their bytes count toward volume and
    /// goodput, they do not count as completed operations (see cut_at_deadline).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg, default_value = "10s")]
    pub duration: Duration,
    /// Lanes doing downloads back to back. Default: the transport's lane count (HTTP/1.1:
    /// connections; HTTP/2 and QUIC: connections x streams).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Mean size of one operation; sizes are normally distributed around it, truncated at one
    /// byte (draws below are redrawn).
    #[arg(long, value_parser = size_arg, default_value = "64MiB")]
    pub mean_size: u64,
    /// Standard deviation of the operation size: a share of the mean (`20%`) or bytes
    /// (`4MiB`, `0` for fixed sizes).
    #[arg(long, value_parser = Spread::parse, default_value = "20%")]
    pub size_sd: Spread,
    /// Seed of the size sequence (each lane draws its own sequence from it) and of the
    /// synthetic bytes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Skip digests: no hashing, no Content-Digest asked for or checked.
    #[arg(long)]
    pub no_verify: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// No live progress line.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let window = args.duration;
    if window.is_zero() {
        return Err(UsageError("--duration must be longer than zero".into()).into());
    }
    if args.floor {
        return run_floor(window, args.json).await;
    }
    let client = args.client.to_config()?;
    if args.mean_size == 0 {
        return Err(UsageError("--mean-size must be at least one byte".into()).into());
    }
    if args.concurrency == Some(0) {
        return Err(UsageError("--concurrency must be at least 1".into()).into());
    }
    let spec = SyntheticSpec {
        size: MAX_SYNTHETIC_SIZE,
        seed: args.seed,
    };
    let mut targets = Vec::with_capacity(args.urls.len());
    for base in &args.urls {
        let base = base_url(base)?;
        let url = format!("{base}{}", spec.path_and_query());
        let transport = xfer::transport_for(&url, &client).map_err(xfer::Error::from)?;
        let info = transport
            .stat()
            .await
            .with_context(|| format!("probing {url}"))?;
        if !info.accepts_ranges {
            anyhow::bail!("{url} does not accept range requests; is it an xfer server?");
        }
        targets.push(Target {
            url: base,
            transport,
            info,
            requests: AtomicU64::new(0),
        });
    }
    let concurrency = args
        .concurrency
        .unwrap_or_else(|| targets[0].transport.default_lanes().max(1));
    let size_sd = args.size_sd.bytes(args.mean_size);

    let start = Instant::now();
    let cpu_start = CpuTimes::now();
    let hashed_before = pairing_stats();
    let plan = Arc::new(Plan {
        targets,
        deadline: start + window,
        verify: !args.no_verify,
        mean_size: args.mean_size,
        size_sd,
        seed: args.seed,
        next_op: AtomicU64::new(0),
        live_bytes: AtomicU64::new(0),
        live_ops: AtomicU64::new(0),
        live_errors: AtomicU64::new(0),
    });
    let live = LiveLine::start(plan.clone(), start, window, args.quiet);
    let lanes: Vec<_> = (0..concurrency)
        .map(|i| tokio::spawn(load::run_lane(plan.clone(), i)))
        .collect();
    let mut tallies = Vec::with_capacity(lanes.len());
    for (i, handle) in lanes.into_iter().enumerate() {
        tallies.push(
            handle
                .await
                .with_context(|| format!("bench lane {i} stopped abnormally"))?,
        );
    }
    let cpu = CpuTimes::now().since(&cpu_start);
    let hashed = pairing_stats();
    live.finish();
    for t in &plan.targets {
        t.transport.close().await;
    }

    let servers = plan
        .targets
        .iter()
        .map(|t| ServerLine {
            url: t.url.clone(),
            protocol: t.transport.protocol(),
            requests: t.requests.load(Ordering::Relaxed),
        })
        .collect();
    let report = BenchReport::build(
        RunInfo {
            servers,
            concurrency,
            verify: plan.verify,
            mean_size: args.mean_size,
            size_sd,
            seed: args.seed,
            window,
            cpu,
            sha256_bytes: PairingStats {
                paired_bytes: hashed.paired_bytes - hashed_before.paired_bytes,
                alone_bytes: hashed.alone_bytes - hashed_before.alone_bytes,
            },
        },
        tallies,
    );
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("serializing the report")?
        );
    } else {
        print!("{}", report.text());
    }
    if report.errors > 0 {
        eprintln!("xfer bench: {} operations failed", report.errors);
        return Ok(ExitCode::from(REMOTE));
    }
    Ok(ExitCode::SUCCESS)
}

/// `xfer bench --floor`, on a blocking thread: the measurement is CPU-bound by design.
async fn run_floor(window: Duration, json: bool) -> anyhow::Result<ExitCode> {
    let per_row = window / floor::ROWS;
    let report = tokio::task::spawn_blocking(move || floor::measure(per_row))
        .await
        .context("the floor measurement stopped abnormally")??;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("serializing the floor")?
        );
    } else {
        print!("{}", report.text());
    }
    Ok(ExitCode::SUCCESS)
}

/// `scheme://authority` from a base URL, refusing URLs with a path: the bench picks the path.
fn base_url(url: &str) -> anyhow::Result<String> {
    let trimmed = url.trim_end_matches('/');
    let Some((scheme, rest)) = trimmed.split_once("://") else {
        return Err(UsageError(format!(
            "{url:?} is not a base URL like https://host:port or quic://host:port"
        ))
        .into());
    };
    if rest.is_empty() || rest.contains(['/', '?', '#']) {
        return Err(UsageError(format!(
            "{url:?}: give the server's base URL (scheme://host:port) without a path; \
             xfer bench requests the synthetic resource itself"
        ))
        .into());
    }
    Ok(format!("{scheme}://{rest}"))
}

/// The live progress line on stderr: elapsed time, operations, volume, goodput so far.
/// Hidden when stderr is not a terminal or with `--quiet`.
struct LiveLine {
    bar: ProgressBar,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl LiveLine {
    fn start(plan: Arc<Plan>, start: Instant, window: Duration, quiet: bool) -> Self {
        let visible = !quiet && std::io::stderr().is_terminal();
        if !visible {
            return Self {
                bar: ProgressBar::hidden(),
                task: None,
            };
        }
        let total_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let bar =
            ProgressBar::with_draw_target(Some(total_ms), ProgressDrawTarget::stderr_with_hz(4));
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{bar:20}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let shown = bar.clone();
        let task = tokio::spawn(async move {
            loop {
                let elapsed = start.elapsed();
                let bytes = plan.live_bytes.load(Ordering::Relaxed);
                let secs = elapsed.as_secs_f64().max(1e-3);
                shown.set_position(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
                shown.set_message(format!(
                    "{:.0}/{:.0} s  {} ops  {}  {}  {} errors",
                    elapsed.as_secs_f64().min(window.as_secs_f64()),
                    window.as_secs_f64(),
                    plan.live_ops.load(Ordering::Relaxed),
                    HumanBytes(bytes),
                    format_bps(bytes as f64 * 8.0 / secs),
                    plan.live_errors.load(Ordering::Relaxed),
                ));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Self {
            bar,
            task: Some(task),
        }
    }

    fn finish(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_lose_trailing_slashes_and_refuse_paths() {
        assert_eq!(
            base_url("https://h:1/").ok().as_deref(),
            Some("https://h:1")
        );
        assert_eq!(
            base_url("quic://[::1]:4433").ok().as_deref(),
            Some("quic://[::1]:4433")
        );
        assert!(base_url("https://h:1/data.bin").is_err());
        assert!(base_url("h:1").is_err());
        assert!(base_url("https://").is_err());
    }
}
