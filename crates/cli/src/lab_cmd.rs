//! `xfer lab`: the link emulator and scenario runner. `run` executes a scenario file through
//! emulated links, `ping` starts one link and checks it (ping, iperf3, relay counters),
//! `cleanup` removes namespaces a killed run left behind. All of it needs root.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use xfer_lab::scenario::{self, units, RunOptions, Scenario};
use xfer_lab::{HostProfile, Lab, LabConfig, LinkConfig};

use crate::exit::UsageError;

#[derive(Debug, Args)]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Run a scenario file: every transfer at every link setting; write JSON, CSV, a
    /// Markdown table and SVG figures.
    Run(RunArgs),
    /// Start one emulated link, ping through it, run iperf3 if installed, print relay stats.
    Ping(PingArgs),
    /// Uploads through one link: `xfer put` beside `xfer get` of the same file, and
    /// `curl -T`.
    Upload(crate::lab_upload_cmd::UploadArgs),
    /// Remove the namespaces of a lab that was killed.
    Cleanup {
        /// Namespace prefix of the lab.
        #[arg(long, default_value = "xferlab")]
        prefix: String,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario file (TOML; see scenarios/ for examples).
    pub scenario: PathBuf,
    /// Output directory. Default: lab-results/<scenario name>.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// One repetition, a quarter of each size and duration: a smoke run.
    #[arg(long)]
    pub quick: bool,
    /// Namespace prefix (labs that run at the same time need different ones).
    #[arg(long, default_value = "xferlab")]
    pub prefix: String,
    /// Port of the xfer server inside the lab (a tree scenario's nginx takes the next one).
    #[arg(long, default_value_t = 8443)]
    pub port: u16,
    /// Only check and expand the scenario; print its cases.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct PingArgs {
    /// Round-trip time of the link.
    #[arg(long, default_value = "100ms")]
    pub rtt: String,
    /// Bottleneck rate.
    #[arg(long, default_value = "1G")]
    pub rate: String,
    /// Loss probability per packet (0.0001 = 0.01%).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Host profile: stock or tuned.
    #[arg(long, default_value = "tuned")]
    pub profile: String,
    /// iperf3 -R -P 8 run length in seconds (0: skip).
    #[arg(long, default_value_t = 5)]
    pub iperf_secs: u64,
    #[arg(long, default_value = "xferlab")]
    pub prefix: String,
}

pub async fn run(args: LabArgs) -> anyhow::Result<ExitCode> {
    // Everything below blocks on child processes: keep it off the async workers.
    tokio::task::spawn_blocking(move || match args.command {
        LabCommand::Run(a) => run_scenario(a),
        LabCommand::Ping(a) => ping(a),
        LabCommand::Upload(a) => crate::lab_upload_cmd::run(a),
        LabCommand::Cleanup { prefix } => {
            let removed = xfer_lab::cleanup(&prefix)?;
            if removed.is_empty() {
                eprintln!("nothing to remove for prefix {prefix}");
            }
            for name in removed {
                eprintln!("removed network namespace {name}");
            }
            Ok(ExitCode::SUCCESS)
        }
    })
    .await
    .context("the lab task panicked")?
}

fn run_scenario(a: RunArgs) -> anyhow::Result<ExitCode> {
    let mut s = Scenario::load(&a.scenario).map_err(|e| UsageError(xfer::error_chain(&e)))?;
    if a.quick {
        s = s.quick();
    }
    eprintln!(
        "scenario {}: {} link point(s) ({} profile(s) x {} RTT(s) x {} loss rate(s), {} more) x {} case(s) x {} repetition(s) = {} runs",
        s.name,
        s.points.len(),
        s.profiles.len(),
        s.rtts.len(),
        s.losses.len(),
        s.points.len() - s.profiles.len() * s.rtts.len() * s.losses.len(),
        s.cases.len(),
        s.repetitions,
        s.run_count()
    );
    if a.dry_run {
        if let Some(t) = &s.tree {
            println!(
                "tree: {} files in {} directories, log-normal sizes (median {}, sigma {}, at most {}), seed {}",
                t.files,
                t.dirs,
                units::format_size(t.median),
                t.sigma,
                units::format_size(t.max),
                t.seed
            );
        }
        for p in s.points.iter().filter(|p| p.name.is_some()) {
            let link = p.link(s.rate_bps, s.queue_bytes);
            println!(
                "cell {}: {}, RTT {:?}, loss {}, queue {}, jitter {:?}{}{}",
                scenario::point_name(p, s.rate_bps),
                units::format_rate(link.rate_bps),
                link.rtt,
                link.loss,
                units::format_size(link.effective_queue_bytes()),
                link.jitter,
                if p.competitor {
                    ", one competing TCP flow"
                } else {
                    ""
                },
                p.size
                    .map(|n| format!(", size {}", units::format_size(n)))
                    .unwrap_or_default(),
            );
        }
        for c in &s.cases {
            let what = match &s.tree {
                Some(_) => "the tree".to_string(),
                None => units::format_size(c.size),
            };
            println!("{} ({what}, timeout {:?})", c.name, c.timeout);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().context("finding the xfer binary")?;
    let mut opts = RunOptions::new(exe);
    opts.prefix = a.prefix.clone();
    opts.port = a.port;
    opts.quick = a.quick;
    opts.command = std::iter::once("xfer".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("lab-results").join(&s.name));
    let results = scenario::run_scenario(&s, &opts)?;
    let files = scenario::write_outputs(&results, &out)?;
    println!("{}", results.markdown());
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    let failed = results.runs.iter().filter(|r| !r.ok).count();
    if failed > 0 {
        eprintln!(
            "{failed} of {} runs failed or timed out",
            results.runs.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn ping(a: PingArgs) -> anyhow::Result<ExitCode> {
    let rtt = units::parse_duration(&a.rtt)
        .ok_or_else(|| UsageError(format!("--rtt {}: not a duration such as 100ms", a.rtt)))?;
    let rate = units::parse_rate(&a.rate)
        .ok_or_else(|| UsageError(format!("--rate {}: not a rate such as 1G", a.rate)))?;
    let profile = match a.profile.as_str() {
        "stock" => HostProfile::stock(),
        "tuned" => HostProfile::tuned(),
        other => return Err(UsageError(format!("--profile {other}: stock or tuned")).into()),
    };
    let link = LinkConfig {
        loss: a.loss,
        ..LinkConfig::new(rate, rtt)
    };
    let lab = Lab::start(LabConfig {
        profile,
        ..LabConfig::new(a.prefix.clone(), link)
    })?;
    let server = lab.server_addr().to_string();
    eprintln!(
        "lab up: {} {} loss {}, queue {}, profile {}",
        units::format_rate(rate),
        a.rtt,
        units::format_loss(a.loss),
        units::format_size(lab.server_to_client().effective_queue_bytes()),
        lab.config().profile.name
    );
    for (k, v) in &lab.settings_in_force().server {
        eprintln!("  {k} = {v}");
    }
    for (k, why) in &lab.settings_in_force().skipped {
        eprintln!("  not applied: {k}: {why}");
    }
    match lab
        .command_in_client("ping")
        .args(["-c", "10", "-i", "0.2", &server])
        .output()
    {
        Ok(out) => {
            let times = scenario::ping_times_ms(&String::from_utf8_lossy(&out.stdout));
            match scenario::median(times.clone()) {
                Some(m) => println!(
                    "ping: {} replies, median {m:.2} ms, min {:.2}, max {:.2} (setting {:.2} ms)",
                    times.len(),
                    times.iter().copied().fold(f64::MAX, f64::min),
                    times.iter().copied().fold(f64::MIN, f64::max),
                    rtt.as_secs_f64() * 1e3
                ),
                None => println!("ping: no replies"),
            }
        }
        Err(e) => println!("ping: not run ({e})"),
    }
    if a.iperf_secs > 0 {
        match lab.command_in_server("iperf3").args(["-s", "-1"]).spawn() {
            Ok(mut srv) => {
                std::thread::sleep(Duration::from_millis(500));
                let before = lab.relay_stats();
                let out = lab
                    .command_in_client("iperf3")
                    .args([
                        "-c",
                        &server,
                        "-R",
                        "-P",
                        "8",
                        "-t",
                        &a.iperf_secs.to_string(),
                    ])
                    .output();
                let after = lab.relay_stats();
                match out {
                    Ok(o) => {
                        let text = String::from_utf8_lossy(&o.stdout);
                        for l in text
                            .lines()
                            .filter(|l| l.contains("SUM") || l.contains("receiver"))
                        {
                            println!("iperf3: {l}");
                        }
                        println!(
                            "relay CPU during iperf3: {:.0}% of a core",
                            after.cpu_fraction_since(&before) * 100.0
                        );
                    }
                    Err(e) => println!("iperf3: not run ({e})"),
                }
                let _ = srv.kill();
                let _ = srv.wait();
            }
            Err(e) => println!("iperf3: not run ({e})"),
        }
    }
    let stats = lab.shutdown()?;
    println!("relay: {stats:#?}");
    Ok(ExitCode::SUCCESS)
}
