//! `xfer`: parallel, verified, resumable bulk transfer over HTTP/1.1, HTTP/2 and QUIC.
//!
//! This binary only turns arguments into configuration and reports results; the work is done
//! by the `xfer` library.

#![deny(unsafe_code)]

mod bench;
mod client_args;
mod completions_cmd;
mod config_file;
mod demo_cmd;
mod doctor;
mod exit;
mod flags_doc;
mod get_cmd;
mod interrupt;
mod lab_cmd;
mod lab_upload_cmd;
mod lanes_arg;
mod monitoring_args;
mod progress_bar;
mod put_cmd;
mod rate_arg;
mod serve_cmd;
#[allow(unsafe_code)]
mod sys;
mod tree_cmd;
mod tree_progress;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches as _, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "xfer",
    version,
    about = "Move big files fast over long fat networks: parallel, verified, resumable."
)]
struct Cli {
    /// More logging (-v: info, -vv: debug). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve a directory over HTTP/1.1, HTTP/2 and QUIC (uploads and copies with --allow-upload).
    Serve(serve_cmd::ServeArgs),
    /// Fetch a URL in parallel chunks, verify it, resume if interrupted.
    Get(get_cmd::GetArgs),
    /// Upload a file in parallel chunks the server verifies; re-running resumes.
    Put(put_cmd::PutArgs),
    /// Serve a generated file on loopback and fetch it: a self-contained tour.
    Demo(demo_cmd::DemoArgs),
    /// Load-test servers: many concurrent memory-to-memory downloads for a fixed duration.
    Bench(bench::BenchArgs),
    /// Emulate a long-RTT link in network namespaces and compare protocols across it.
    Lab(lab_cmd::LabArgs),
    /// Check what limits this host on a path: buffers, congestion control, MTU; advise sysctls.
    Doctor(doctor::DoctorArgs),
    /// Print a shell completion script (bash, zsh, fish) on stdout.
    Completions(completions_cmd::CompletionsArgs),
    /// Write man pages (xfer.1 and one per subcommand) into a directory.
    Man(completions_cmd::ManArgs),
    /// Print the flag tables of docs/flags.md, generated from these definitions.
    #[command(hide = true)]
    Flags(flags_doc::FlagsArgs),
}

fn main() -> ExitCode {
    // Kept untyped too: `xfer serve` tells flags given from defaults to merge its config file.
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.format(&mut Cli::command()).exit(),
    };
    let log_format = match &cli.command {
        Command::Serve(a) => serve_cmd::log_format(a, matches.subcommand_matches("serve")),
        _ => monitoring_args::LogFormat::Text,
    };
    init_tracing(cli.verbose, log_format);
    // The server keeps its blocks in its memory budget's own pool and hands pages back after
    // bursts on purpose; the client commands receive into buffers glibc would keep trimming.
    if !matches!(cli.command, Command::Serve(_)) {
        sys::keep_freed_heap();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("xfer: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(a) => {
                let serve = matches
                    .subcommand_matches("serve")
                    .cloned()
                    .unwrap_or_default();
                serve_cmd::run(a, &serve).await
            }
            Command::Get(a) => get_cmd::run(a).await,
            Command::Put(a) => put_cmd::run(a).await,
            Command::Demo(a) => demo_cmd::run(a).await,
            Command::Bench(a) => bench::run(a).await,
            Command::Lab(a) => lab_cmd::run(a).await,
            Command::Doctor(a) => doctor::run(a).await,
            Command::Completions(a) => completions_cmd::run_completions(a, Cli::command()),
            Command::Man(a) => completions_cmd::run_man(a, Cli::command()),
            Command::Flags(a) => flags_doc::run(a, Cli::command()),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xfer: {}", exit::describe(&e));
            ExitCode::from(exit::code_for(&e))
        }
    }
}

fn init_tracing(verbose: u8, format: monitoring_args::LogFormat) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour only for a person at a terminal: escape codes in a log file or a CI transcript
    // are noise, and NO_COLOR (no-color.org) turns them off everywhere.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        monitoring_args::LogFormat::Text => builder.with_ansi(ansi).try_init(),
        // JSON for a collector: never escape codes, and one line per event.
        monitoring_args::LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}
