//! `xfer get`: fetch one URL to a file, or a directory URL (ending in `/`, or with
//! `--recursive`) to a directory (`tree_cmd`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use xfer::tree::TreeConfig;
use xfer::{ChecksumAlgorithm, Download, GetConfig, ProgressSnapshot, Sha256Digest};

use crate::client_args::{duration_arg, size_arg, ClientArgs, Protocol};
use crate::exit::UsageError;
use crate::lanes_arg::{lanes_arg, LanesArg};
use crate::progress_bar::Display;
use xfer::crates::common::mechanisms::{self, Switches};

/// `xfer get` of a tree: the caps on its listing.
#[derive(Debug, Args)]
pub struct ListingArgs {
    /// Tree: stop the listing (exit 3, files already listed still fetched) once it names more
    /// than N entries. Default 10000000.
    #[arg(long, value_name = "N")]
    pub max_listing_entries: Option<u64>,
    /// Tree: stop the listing once it names more than N directories. Default 100000.
    #[arg(long, value_name = "N")]
    pub max_listing_dirs: Option<u64>,
    /// Tree: stop the listing at a name more than N levels below the URL (1-64). Default 64.
    #[arg(long, value_name = "N")]
    pub max_listing_depth: Option<usize>,
    /// Tree: stop the listing once this much time went to waiting for the server's listing
    /// answers (time paused while files wait for lanes does not count). Default 1h.
    #[arg(long, value_parser = duration_arg, value_name = "DURATION")]
    pub listing_timeout: Option<std::time::Duration>,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// What to fetch: http://, https:// or quic:// URL. A URL ending in `/` is a directory:
    /// its whole tree is fetched.
    #[arg(
        required_unless_present = "mechanisms",
        default_value = "",
        hide_default_value = true
    )]
    pub url: String,
    /// More sources of the same file (mirrors, other data-transfer nodes), then where to write
    /// it (a file, or for a tree a directory). Default: the last path segment of the URL, in
    /// the current directory. Every source must hold the same file (same size and whole-file
    /// digest); one that does not is dropped with a warning.
    #[arg(value_name = "URL... DEST")]
    pub rest: Vec<String>,
    /// Where to write it: the last of REST unless that is a URL.
    #[arg(skip)]
    pub dest: Option<PathBuf>,
    /// Ignore `Link: <...>; rel=duplicate` in the server's answer (RFC 6249): by default the
    /// copies it names are fetched from too, once they show they hold the same file.
    #[arg(long)]
    pub no_duplicates: bool,
    /// Where to write it, as DEST.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Fetch the directory tree at URL even without a trailing `/`.
    #[arg(short, long)]
    pub recursive: bool,
    /// Tree: fetch only paths matching this glob (repeatable). `*` stays within one
    /// directory, `**` crosses them; a glob without `/` matches a name at any depth.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Tree: skip paths matching this glob, and everything below a matching directory
    /// (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Compare whole-file checksums with the server's. One file: ask the server for its
    /// ALG (adler32, md5 or sha256; `Want-Digest`, as gfal2 does), compute the same over the
    /// bytes received and fail (exit 4, part file kept) unless they match. A tree: skip a
    /// local file only if its checksum matches the server's (`--compare checksum`; sha256
    /// only). ALG defaults to sha256.
    #[arg(
        long,
        value_name = "ALG",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "sha256",
        value_parser = checksum_arg
    )]
    pub checksum: Option<ChecksumAlgorithm>,
    /// Tree: files in flight at once. Default 256.
    #[arg(long)]
    pub files: Option<usize>,
    /// Tree: requests in flight over all files (connections for HTTP/1.1, streams for
    /// HTTP/2 and QUIC); a file no bigger than a chunk takes one, a bigger one up to --lanes.
    /// Default 256 streams, or 64 connections when the server speaks only HTTP/1.1. `auto`
    /// (bounds 8-128) or `auto:MIN-MAX` adapts it to measured goodput and loss, starting
    /// from that default.
    #[arg(long, value_parser = lanes_arg, value_name = "N|auto|auto:MIN-MAX")]
    pub tree_lanes: Option<LanesArg>,
    /// Tree: caps on the listing. Boxed: `Command::Get` stays near the other commands' size.
    #[command(flatten)]
    pub listing: Box<ListingArgs>,
    /// Tree: how a re-run compares, deletes, plans and goes past failures.
    #[command(flatten)]
    pub sync: Box<crate::tree_cmd::SyncArgs>,
    /// Chunk size: the unit of scheduling, verification and resume.
    #[arg(long, value_parser = size_arg, default_value = "16MiB")]
    pub chunk_size: u64,
    /// Give every chunk --chunk-size bytes. By default the last 8 chunks' worth of a file of
    /// 16 chunks or more is cut into halves, quarters and eighths of a chunk, so that the
    /// lanes finish together.
    #[arg(long)]
    pub no_taper: bool,
    /// Lanes after the first wait for the first answer (which tells the size) before asking
    /// for their first chunk. By default lane i asks for chunk i as soon as its connection is
    /// up, a round trip sooner; a file too small for a lane costs it a 416.
    #[arg(long)]
    pub no_speculate: bool,
    /// Lanes to run: a number (overriding what --connections/--streams imply), or `auto`
    /// to choose the count from measured goodput and loss and keep adjusting it, within 2-64
    /// or the bounds of `auto:MIN-MAX`. Default: the layout's count (8); auto is not the default
    /// yet, as its probes cost more than they gained on the paths measured (docs/results.md).
    /// A tree takes a number only (lanes per big file).
    #[arg(long, value_parser = lanes_arg, value_name = "N|auto|auto:MIN-MAX")]
    pub lanes: Option<LanesArg>,
    /// Shortest measurement window of `--lanes auto` (a window also spans at least 8 round
    /// trips). Default 1s; shorter reacts sooner and measures more noise.
    #[arg(long, value_parser = duration_arg, value_name = "DURATION")]
    pub lanes_window: Option<std::time::Duration>,
    /// The whole file's SHA-256 must be this (64 hex digits).
    #[arg(long, value_name = "HEX")]
    pub expect_sha256: Option<String>,
    /// Also write <output>.sha256 in sha256sum format.
    #[arg(long)]
    pub sha256_file: bool,
    /// Skip the whole-file SHA-256 when the server sends a digest with every chunk: each
    /// chunk's check already covers its bytes, and the whole-file pass runs on one core,
    /// which bounds one file at that core's hash rate. The report then has no sha256. It
    /// still runs if a chunk comes without a digest, and with --sha256-file or
    /// --expect-sha256.
    #[arg(long)]
    pub no_whole_sha256: bool,
    /// Memory for the whole-file hash: chunks completed out of order are hashed from bytes
    /// kept in memory, up to this much, rather than read back from the part file. 0 reads
    /// every chunk back, which also checks the file as written.
    #[arg(long, value_parser = size_arg, value_name = "SIZE", default_value = "256MiB")]
    pub hash_memory: u64,
    /// Hash each chunk as it arrives and compare it with the server's digest of it, even when
    /// the server's digest of the whole file (Repr-Digest) checks every byte at the end.
    /// Damage is then found and fetched again chunk by chunk; without it, a whole-file
    /// mismatch fetches the file once more with every chunk checked. Costs one more SHA-256
    /// pass per byte here (and on a server that has not hashed those ranges before).
    #[arg(long, conflicts_with = "no_verify")]
    pub check_every_chunk: bool,
    /// Skip every digest: no hashing, nothing checked. Only to measure raw transport speed.
    #[arg(long, conflicts_with = "require_digest")]
    pub no_verify: bool,
    /// Fail (exit code 4, the part file kept, nothing under the final name) unless every byte
    /// was checked against a digest from the server (per chunk or whole file) or
    /// --expect-sha256.
    #[arg(long)]
    pub require_digest: bool,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub overwrite: bool,
    /// Attempts per chunk before giving up.
    #[arg(long, default_value_t = 8)]
    pub retries: u32,
    /// Send each lane's next request before its current body ends (`on`) or only after
    /// (`off`). Default: on for HTTP/1.1 (pipelined on the lane's own connection); on for
    /// HTTP/2 and QUIC (another stream) when the connection window holds two stream windows
    /// per lane sharing it (QUIC's default does; for HTTP/2 raise --h2-connection-window, or
    /// let loss spread its lanes over more connections), never below that.
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    pub request_ahead: Option<bool>,
    /// Print every client-side speed mechanism, whether it runs here and why (after the
    /// --mechanism settings given), and exit.
    #[arg(long)]
    pub mechanisms: bool,
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

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("{other:?}: expected on or off")),
    }
}

impl GetArgs {
    /// The mechanisms asked for, with --no-taper and --no-speculate folded in.
    fn switches(&self) -> Switches {
        let mut sw = self.client.switches().turn_off_flagged(&[
            (self.no_taper, mechanisms::TAPER),
            (self.no_speculate, mechanisms::SPECULATE),
            (self.request_ahead == Some(false), mechanisms::REQUEST_AHEAD),
        ]);
        match self.lanes {
            Some(LanesArg::Auto { .. }) => sw.turn_on(mechanisms::ADAPTIVE_LANES),
            Some(LanesArg::Fixed(_)) => sw.turn_off(mechanisms::ADAPTIVE_LANES),
            None => {}
        }
        sw
    }

    /// `--request-ahead`, or off when the mechanism is.
    fn request_ahead(&self, sw: &Switches) -> Option<bool> {
        if sw.is_on(mechanisms::REQUEST_AHEAD) {
            self.request_ahead
        } else {
            Some(false)
        }
    }
}

pub async fn run(mut args: GetArgs) -> anyhow::Result<ExitCode> {
    let sw = args.switches();
    if args.mechanisms {
        print!("{}", sw.report(mechanisms::Side::Client));
        return Ok(ExitCode::SUCCESS);
    }
    let tree_url = args.recursive
        || args
            .url
            .split(['?', '#'])
            .next()
            .is_some_and(|p| p.ends_with('/'));
    if let Some(limit) = args.rate.limit_rate {
        // What the engine runs under a cap (`GetConfig::rate_limit`): a tree its HTTP/1.1
        // lane budget, one file its fixed lanes or the cap's share of the layout's.
        let (default, http1_lanes) = if tree_url {
            let lanes = args.tree_lanes.and_then(LanesArg::fixed);
            (
                Protocol::Auto,
                lanes.unwrap_or(TreeConfig::default().http1_lanes),
            )
        } else {
            let lanes = args.lanes.and_then(LanesArg::fixed);
            let layout = args.client.connections.unwrap_or(8);
            (
                Protocol::Http1,
                lanes.unwrap_or(limit.download_lanes(layout)),
            )
        };
        let connections = crate::rate_arg::tcp_connections(&args.client, default, http1_lanes);
        args.rate.shape_windows(&mut args.client, connections);
    }
    let mut mirrors = std::mem::take(&mut args.rest);
    if mirrors.last().is_some_and(|d| !d.contains("://")) {
        args.dest = mirrors.pop().map(PathBuf::from);
    }
    if args.dest.is_some() && args.output.is_some() {
        return Err(UsageError("give DEST or -o, not both".into()).into());
    }
    if let Some(bad) = mirrors.iter().find(|m| !m.contains("://")) {
        return Err(UsageError(format!(
            "{bad:?}: only the last argument may be a file name"
        ))
        .into());
    }
    if tree_url {
        if matches!(args.lanes, Some(LanesArg::Auto { .. })) {
            return Err(UsageError(
                "--lanes auto is for one file; a tree takes --lanes N (lanes per big file) and --tree-lanes".into(),
            )
            .into());
        }
        let mut get = GetConfig {
            chunk_size: args.chunk_size,
            taper: sw.is_on(mechanisms::TAPER),
            lanes: args.lanes.and_then(LanesArg::fixed),
            verify: !args.no_verify,
            check_every_chunk: args.check_every_chunk,
            request_ahead: args.request_ahead(&sw),
            hash_memory: args.hash_memory,
            rate_limit: args.rate.limiter(),
            ..GetConfig::default()
        };
        get.schedule.max_attempts = args.retries.max(1);
        if !mirrors.is_empty() {
            return Err(UsageError("a tree is fetched from one URL".into()).into());
        }
        return crate::tree_cmd::run(args, get).await;
    }
    let client = args.client.to_config()?;
    let expect_sha256 = args
        .expect_sha256
        .as_deref()
        .map(Sha256Digest::from_hex)
        .transpose()
        .map_err(|e| UsageError(format!("--expect-sha256: {e}")))?;
    let dest = match args.output.as_ref().or(args.dest.as_ref()) {
        Some(p) => p.clone(),
        None => default_output(&args.url)
            .ok_or_else(|| UsageError(format!("cannot name a file after {}; pass -o", args.url)))?,
    };
    let lanes = args.lanes.or_else(|| {
        sw.is_on(mechanisms::ADAPTIVE_LANES)
            .then_some(LanesArg::Auto { bounds: None })
    });
    let mut config = GetConfig {
        chunk_size: args.chunk_size,
        taper: sw.is_on(mechanisms::TAPER),
        speculate: sw.is_on(mechanisms::SPECULATE),
        lanes: lanes.and_then(LanesArg::fixed),
        adapt: lanes.and_then(|l| l.adapt_config(xfer::AdaptConfig::default())),
        verify: !args.no_verify,
        check_every_chunk: args.check_every_chunk,
        expect_sha256,
        require_digest: args.require_digest,
        write_sha256_file: args.sha256_file,
        whole_sha256: !args.no_whole_sha256,
        overwrite: args.overwrite,
        checksum: args.checksum,
        request_ahead: args.request_ahead(&sw),
        hash_memory: args.hash_memory,
        rate_limit: args.rate.limiter(),
        ..GetConfig::default()
    };
    config.schedule.max_attempts = args.retries.max(1);
    if let Some(window) = args.lanes_window {
        let Some(a) = config.adapt.as_mut() else {
            return Err(UsageError("--lanes-window applies to --lanes auto only".into()).into());
        };
        a.min_window = window;
        a.validate().map_err(|e| UsageError(e.to_string()))?;
    }
    let urls: Vec<&str> = std::iter::once(args.url.as_str())
        .chain(mirrors.iter().map(String::as_str))
        .collect();
    if urls.len() > xfer::MAX_SOURCES {
        return Err(UsageError(format!("at most {} sources", xfer::MAX_SOURCES)).into());
    }
    let transport = Arc::new(
        xfer::sources_transport(&urls, &client, config.expect_sha256, !args.no_duplicates)
            .map_err(xfer::Error::from)?,
    );
    let download = Download::new(transport.clone(), &args.url, &dest, config);
    let display = Display::start(download.progress(), args.quiet || args.json);
    let ctrl_c = crate::interrupt::ctrl_c();
    let progress = download.progress();
    let result = download.run_until(ctrl_c).await;
    xfer::Transport::close(&*transport).await;
    display.finish();
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            let e =
                anyhow::Error::from(xfer::Error::from(e)).context(format!("xfer get {}", args.url));
            if args.json {
                print_failure(&args.url, &dest, &e, progress.snapshot());
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
        eprintln!("{} -> {}: {}", report.url, report.dest, report.summary());
        if let Some(startup) = report.startup() {
            eprintln!("{startup}");
        }
        if let Some(a) = &report.adaptive_lanes {
            eprintln!("{}", a.summary());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The `--json` answer when the transfer fails: what went wrong, the exit code it gives, and
/// how far the transfer got (a re-run resumes from there), so scripts need not parse stderr.
fn print_failure(url: &str, dest: &std::path::Path, e: &anyhow::Error, progress: ProgressSnapshot) {
    let report = serde_json::json!({
        "status": "failed",
        "url": url,
        "dest": dest.display().to_string(),
        "error": crate::exit::describe(e),
        "exit_code": crate::exit::code_for(e),
        "progress": progress,
    });
    match serde_json::to_string_pretty(&report) {
        Ok(text) => println!("{text}"),
        Err(err) => tracing::warn!(error = %err, "cannot serialize the failure report"),
    }
}

fn checksum_arg(s: &str) -> Result<ChecksumAlgorithm, String> {
    ChecksumAlgorithm::parse_user(s).map_err(|e| e.to_string())
}

/// The URL's last path segment, without query, if it makes a plain file name.
fn default_output(url: &str) -> Option<PathBuf> {
    let path = url.split_once("://")?.1;
    let path = path.split(['?', '#']).next()?;
    let name = path.rsplit('/').next()?;
    (!name.is_empty() && name != "." && name != ".." && path.contains('/'))
        .then(|| PathBuf::from(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names() {
        assert_eq!(
            default_output("https://h/a/b.bin?x=1"),
            Some(PathBuf::from("b.bin"))
        );
        assert_eq!(default_output("https://h/"), None);
        assert_eq!(default_output("https://h"), None);
        assert_eq!(default_output("https://h/a/.."), None);
    }
}
