//! Runs a [`Scenario`]: for every profile x RTT x loss it starts a [`Lab`], checks the link
//! with ping, starts `xfer serve` (and `iperf3 -s` when needed) in the server namespace, runs
//! every case in the client namespace (repetition-major, so slow drifts spread over all
//! cases), and records goodput, CPU times, retransmits and link drops.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::competitor::Competitor;
use super::process::{die_with_parent, proc_cpu_time, stop, wait_with_deadline};
use super::report::{Machine, PingCheck, PointRecord, Results, RunRecord};
use super::spec::{point_name, Case, LinkPoint, Scenario, Server, Tool};
use super::tools::{command_line, parse_outcome, source_file_name, ToolContext};
use super::tree::{self, TreeContext};
use super::ScenarioError;
use crate::{Lab, LabConfig, LinkConfig, SERVER_ADDR};

/// How to run a scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The `xfer` binary run in both namespaces (`xfer serve`, `xfer get`).
    pub xfer_bin: PathBuf,
    /// Namespace prefix; labs run one after another under it.
    pub prefix: String,
    /// Directory for the certificate, served directory and tool logs; removed afterwards.
    pub work_dir: PathBuf,
    /// Where downloads go (memory-backed: `/dev/shm`); deleted after each run.
    pub out_file: PathBuf,
    /// The served directory of a scenario with `source = "file"` (memory-backed: `/dev/shm`);
    /// removed afterwards.
    pub source_dir: PathBuf,
    /// TCP/UDP port of `xfer serve`.
    pub port: u16,
    /// Print one line per run on stderr.
    pub progress: bool,
    /// Recorded in the results: the command that made them.
    pub command: String,
    pub quick: bool,
}

impl RunOptions {
    /// Defaults for `xfer_bin`: prefix `xferlab`, work dir under the temp dir, output in
    /// `/dev/shm`, port 8443, progress on.
    pub fn new(xfer_bin: PathBuf) -> RunOptions {
        let pid = std::process::id();
        RunOptions {
            xfer_bin,
            prefix: "xferlab".into(),
            work_dir: std::env::temp_dir().join(format!("xfer-lab-{pid}")),
            out_file: PathBuf::from(format!("/dev/shm/xfer-lab-out-{pid}")),
            source_dir: PathBuf::from(format!("/dev/shm/xfer-lab-src-{pid}")),
            port: 8443,
            progress: true,
            command: String::new(),
            quick: false,
        }
    }
}

/// Runs every case at every link point. Failing transfers are recorded, not fatal; a lab or
/// server that cannot start is.
pub fn run_scenario(s: &Scenario, opts: &RunOptions) -> Result<Results, ScenarioError> {
    crate::check_prerequisites()?;
    let tools_needed: Vec<Tool> = s.cases.iter().map(|c| c.tool).collect();
    for (tool, program) in [
        (Tool::Iperf3, "iperf3"),
        (Tool::Curl, "curl"),
        (Tool::Aria2c, "aria2c"),
        (Tool::Rclone, "rclone"),
    ] {
        if tools_needed.contains(&tool) && !installed(program) {
            return Err(ScenarioError::ToolMissing { program });
        }
    }
    if needs_nginx(s) && !runs("nginx", "-v") {
        return Err(ScenarioError::ToolMissing { program: "nginx" });
    }
    std::fs::create_dir_all(&opts.work_dir).map_err(|source| ScenarioError::Io {
        op: "creating the work directory",
        path: opts.work_dir.clone(),
        source,
    })?;
    let tree = match &s.tree {
        Some(shape) => Some(prepare_tree(shape, opts)?),
        None => None,
    };
    if s.file_source {
        if let Err(e) = prepare_source_files(s, opts) {
            let _ = std::fs::remove_dir_all(&opts.source_dir);
            return Err(e);
        }
    }
    let started_utc = utc_now();
    let load_before = load_average();
    let mut points = Vec::new();
    let mut runs = Vec::new();
    let total = s.run_count();
    let result = (|| {
        for p in &s.points {
            let link: LinkConfig = p.link(s.rate_bps, s.queue_bytes);
            let config = LabConfig {
                profile: p.profile.clone(),
                ..LabConfig::new(opts.prefix.clone(), link)
            };
            let (point, mut point_runs) =
                run_point(s, p, &config, opts, tree.as_ref(), runs.len(), total)?;
            points.push(point);
            runs.append(&mut point_runs);
        }
        Ok::<(), ScenarioError>(())
    })();
    let _ = std::fs::remove_dir_all(&opts.work_dir);
    if s.file_source {
        let _ = std::fs::remove_dir_all(&opts.source_dir);
    }
    if let Some(t) = &tree {
        t.clear_dest();
    }
    result?;
    Ok(Results {
        scenario: s.name.clone(),
        description: s.description.clone(),
        command: opts.command.clone(),
        quick: opts.quick,
        started_utc,
        finished_utc: utc_now(),
        ratios: s.ratios.clone(),
        machine: Machine {
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model: cpu_model(),
            load_before,
            load_after: load_average(),
        },
        points,
        runs,
    })
}

/// Servers of one link point; stopped on drop.
struct Servers {
    xfer: Child,
    iperf3: Option<Child>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        stop(&mut self.xfer, Duration::from_secs(3));
        if let Some(i) = &mut self.iperf3 {
            stop(i, Duration::from_secs(1));
        }
    }
}

fn run_point(
    s: &Scenario,
    p: &LinkPoint,
    config: &LabConfig,
    opts: &RunOptions,
    tree: Option<&TreeContext>,
    done_before: usize,
    total: usize,
) -> Result<(PointRecord, Vec<RunRecord>), ScenarioError> {
    let lab = Lab::start(config.clone())?;
    // Every point starts a fresh server; its first xfer run meets it with a fresh client too
    // (no path remembered from another point's link), so that run is a cold start on both
    // ends, and later runs at the point are warm.
    let _ = std::fs::remove_file(path_memory(opts));
    let link = config.link.clone();
    let rtt_ms = link.rtt.as_secs_f64() * 1e3;
    let key = point_name(p, s.rate_bps);
    // Grid points keep their profile/RTT/loss key; cells with overrides carry their name.
    let cell = (key != super::report::point_key(&config.profile.name, rtt_ms, link.loss))
        .then(|| key.clone());
    let ping = ping_check(&lab);
    if opts.progress {
        match &ping {
            Some(p) => eprintln!("== {key}: ping median {:.2} ms", p.median_ms),
            None => eprintln!("== {key}: (no ping)"),
        }
    }
    let serve_dir = if s.file_source {
        opts.source_dir.clone()
    } else {
        opts.work_dir.join("www")
    };
    let cert_dir = opts.work_dir.join("cert");
    for d in [&serve_dir, &cert_dir] {
        std::fs::create_dir_all(d).map_err(|source| ScenarioError::Io {
            op: "creating a directory",
            path: d.clone(),
            source,
        })?;
    }
    let _ = std::fs::remove_file(cert_dir.join("cert.pem"));
    let listen = format!("{SERVER_ADDR}:{}", opts.port);
    let serve_args: Vec<String> = [
        "serve".into(),
        serve_dir.display().to_string(),
        "--self-signed".into(),
        "--cert-dir".into(),
        cert_dir.display().to_string(),
        "--cert-name".into(),
        SERVER_ADDR.to_string(),
        "--listen".into(),
        listen.clone(),
    ]
    .into_iter()
    .chain(s.server_args.iter().cloned())
    .collect();
    let server_command = format!("{} {}", opts.xfer_bin.display(), serve_args.join(" "));
    let serve_log = opts.work_dir.join("serve.log");
    let start_xfer = |extra: &[String]| {
        let mut cmd = if serve_args
            .iter()
            .chain(extra)
            .any(|a| a.contains("tcp-resume=on"))
        {
            lab.command_in_server_with_cgroup2(&opts.xfer_bin)
        } else {
            lab.command_in_server(&opts.xfer_bin)
        };
        cmd.args(&serve_args).args(extra);
        let mut xfer = spawn_logged(cmd, None, &serve_log, "xfer serve")?;
        wait_for_server(&serve_log, &cert_dir.join("cert.pem"), &mut xfer)?;
        Ok::<_, ScenarioError>(xfer)
    };
    let mut servers = Servers {
        xfer: start_xfer(&[])?,
        iperf3: None,
    };
    let mut server_extra: &[String] = &[];
    if s.cases.iter().any(|c| c.tool == Tool::Iperf3) {
        let mut cmd = lab.command_in_server("iperf3");
        cmd.args(["-s", "-B", &SERVER_ADDR.to_string()]);
        let log = opts.work_dir.join("iperf3-server.log");
        servers.iperf3 = Some(spawn_logged(cmd, None, &log, "iperf3 -s")?);
        // iperf3 prints nothing useful to wait on; it listens well within this.
        std::thread::sleep(Duration::from_millis(500));
    }
    let nginx_port = opts.port.wrapping_add(1);
    let nginx = if needs_nginx(s) {
        let root = match tree {
            Some(_) => serve_dir.join("tree"),
            None => serve_dir.clone(),
        };
        Some(super::nginx::start(
            lab.command_in_server("nginx"),
            &super::nginx::dir_under(&opts.work_dir),
            &root,
            &cert_dir,
            &format!("{SERVER_ADDR}:{nginx_port}"),
        )?)
    } else {
        None
    };
    let ctx = ToolContext {
        xfer_bin: opts.xfer_bin.clone(),
        server: SERVER_ADDR,
        port: opts.port,
        ca_cert: cert_dir.join("cert.pem"),
        out_file: opts.out_file.clone(),
        duration: s.duration,
        file_source: s.file_source,
        nginx_port,
    };
    // A fresh competing flow for every run, settled before the run starts: one long-lived
    // flow is beaten down by each transfer in turn (a cubic flow against eight BBR ones can
    // end in back-to-back timeouts) and would meet later runs weaker than earlier ones.
    let new_competitor = || -> Result<Option<Competitor>, ScenarioError> {
        if !p.competitor {
            return Ok(None);
        }
        let c = Competitor::start(
            &lab,
            opts.port.wrapping_add(2),
            p.competitor_congestion.as_deref(),
        )?;
        warm_up_competitor(&c, link.rtt);
        Ok(Some(c))
    };
    let mut competitor_congestion = None;
    let mut records = Vec::new();
    for rep in 1..=s.repetitions {
        for listed in s.cases.iter().filter(|c| s.runs_at(c, p)) {
            let (size, timeout) = p.size_and_timeout(listed);
            let case = &Case {
                size,
                timeout,
                ..listed.clone()
            };
            if case.fresh_server || case.cold || case.server_args.as_slice() != server_extra {
                stop(&mut servers.xfer, Duration::from_secs(3));
                servers.xfer = start_xfer(&case.server_args)?;
                server_extra = &listed.server_args;
            }
            if case.cold {
                let _ = std::fs::remove_file(path_memory(opts));
            }
            let server_pid = match case.tool {
                Tool::Iperf3 => servers.iperf3.as_ref().map(|c| c.id()),
                Tool::Aria2c | Tool::Rclone if tree.is_some() => nginx.as_ref().map(|n| n.pid()),
                _ if case.server == Server::Nginx => nginx.as_ref().map(|n| n.pid()),
                _ => Some(servers.xfer.id()),
            };
            let mut run = |lab: &Lab| -> Result<RunRecord, ScenarioError> {
                let competitor = new_competitor()?;
                let r = run_case(
                    lab,
                    case,
                    &ctx,
                    tree,
                    opts,
                    server_pid,
                    rep,
                    competitor.as_ref(),
                )?;
                if let Some(c) = competitor {
                    if !c.running() {
                        return Err(ScenarioError::Competitor {
                            reason: format!("the flow stopped during {} at {key}", case.name),
                        });
                    }
                    competitor_congestion = c.congestion().map(String::from);
                }
                Ok(r)
            };
            if case.warm_up {
                let w = run(&lab)?;
                if opts.progress {
                    eprintln!(
                        "  {key} | {} #{rep}: warm-up {}",
                        case.name,
                        if w.ok { "done" } else { "failed" }
                    );
                }
            }
            let mut r = run(&lab)?;
            r.cell = cell.clone();
            if opts.progress {
                let what = match (r.ok, r.timed_out, r.goodput_bps) {
                    (true, _, Some(g)) => format!(
                        "{:.0} Mbit/s in {:.1} s",
                        g / 1e6,
                        r.seconds.unwrap_or(r.wall_seconds)
                    ),
                    (_, true, _) => format!(
                        "timed out after {:.0} s (wire {:.0} Mbit/s)",
                        r.wall_seconds,
                        r.wire_bps / 1e6
                    ),
                    _ => format!("failed: {}", r.error.as_deref().unwrap_or("?")),
                };
                eprintln!(
                    "[{}/{total}] {key} | {} #{rep}: {what}; cpu client {:.1} s server {}",
                    done_before + records.len() + 1,
                    case.name,
                    r.client_cpu_s,
                    r.server_cpu_s
                        .map(|v| format!("{v:.1} s"))
                        .unwrap_or_else(|| "?".into())
                );
            }
            records.push(r);
            if let Ok(Some(status)) = servers.xfer.try_wait() {
                let log = std::fs::read_to_string(&serve_log).unwrap_or_default();
                return Err(ScenarioError::ServerStart {
                    reason: format!(
                        "xfer serve exited during the runs ({status}): {}",
                        log.trim()
                    ),
                });
            }
        }
    }
    drop(nginx);
    drop(servers);
    let settings = lab.settings_in_force().clone();
    lab.shutdown()?;
    Ok((
        PointRecord {
            cell,
            jitter_ms: link.jitter.as_secs_f64() * 1e3,
            competitor: p.competitor,
            competitor_congestion,
            profile: config.profile.name.clone(),
            rtt_ms,
            loss: link.loss,
            rate_bps: link.rate_bps,
            queue_bytes: link.effective_queue_bytes(),
            ping,
            settings: settings.server,
            skipped: settings.skipped,
            server_command,
        },
        records,
    ))
}

#[allow(clippy::too_many_arguments)]
fn run_case(
    lab: &Lab,
    case: &Case,
    ctx: &ToolContext,
    tree: Option<&TreeContext>,
    opts: &RunOptions,
    server_pid: Option<u32>,
    repetition: u32,
    competitor: Option<&Competitor>,
) -> Result<RunRecord, ScenarioError> {
    remove_outputs(&opts.out_file);
    if let Some(t) = tree {
        t.clear_dest();
    }
    let (program, args) = match tree {
        Some(t) => tree::command_line(case, ctx, t),
        None => command_line(case, ctx),
    };
    let command = format!("{} {}", program.display(), shell_join(&args));
    let stdout_path = opts.work_dir.join("client.out");
    let stderr_path = opts.work_dir.join("client.err");
    let mut cmd = lab.command_in_client(&program);
    cmd.args(&args);
    // xfer's path memory: one per link point, shared by its runs as a long-running client's
    // transfers share one, and not carried over from an earlier point or run.
    cmd.env("XFER_PATH_MEMORY", path_memory(opts));
    if case.cold {
        // Whatever else a client may keep under its home or cache directory starts empty too.
        let home = opts.work_dir.join("cold-home");
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(home.join(".cache"))
            .map_err(|source| ScenarioError::io("creating", &home, source))?;
        cmd.env("HOME", &home)
            .env("XDG_CACHE_HOME", home.join(".cache"));
    }
    let relay_before = lab.relay_stats();
    let competitor_before = competitor.map(Competitor::received);
    let server_cpu_before = server_pid.and_then(proc_cpu_time);
    let started = Instant::now();
    let child = spawn_logged(cmd, Some(&stdout_path), &stderr_path, case.tool.name())?;
    let watch = tree.and_then(|t| tree::CompletionWatch::start(t, started));
    // iperf3 runs for its duration plus connection set-up; give it the same slack.
    let limit = match case.tool {
        Tool::Iperf3 => ctx.duration + Duration::from_secs(15),
        _ => case.timeout,
    };
    let finished =
        wait_with_deadline(child.id(), started, limit).map_err(|source| ScenarioError::Io {
            op: "waiting for a client",
            path: program.clone(),
            source,
        })?;
    drop(child);
    let completion = watch.map(tree::CompletionWatch::finish);
    let relay_after = lab.relay_stats();
    let competitor_bytes = competitor
        .map(Competitor::received)
        .zip(competitor_before)
        .map(|(after, before)| after.saturating_sub(before));
    let server_cpu = match (server_cpu_before, server_pid.and_then(proc_cpu_time)) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64()),
        _ => None,
    };
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let wall = finished.wall.as_secs_f64();
    let exit_ok = finished.code == Some(0);
    let mut outcome = match tree {
        Some(t) => tree::outcome(case, t, &stderr, &stdout, exit_ok, wall),
        None => parse_outcome(case, &stdout, &stderr, exit_ok, wall),
    };
    remove_outputs(&opts.out_file);
    if let Some(t) = tree {
        t.clear_dest();
    }
    if finished.timed_out {
        outcome.error = Some(format!("timed out after {:.0} s", limit.as_secs_f64()));
    }
    let s2c_before = relay_before.server_to_client;
    let s2c = relay_after.server_to_client;
    let link = lab.server_to_client();
    Ok(RunRecord {
        cell: None,
        cold: case.cold,
        mechanisms: case.mechanisms.clone(),
        baseline: case.baseline.clone(),
        connections_used: outcome.connections_used,
        competitor_bytes,
        competitor_bps: competitor_bytes.map(|b| b as f64 * 8.0 / wall.max(1e-9)),
        profile: lab.config().profile.name.clone(),
        rtt_ms: link.rtt.as_secs_f64() * 1e3,
        loss: link.loss,
        rate_bps: link.rate_bps,
        queue_bytes: link.effective_queue_bytes(),
        case: case.name.clone(),
        label: case.label.clone(),
        tool: case.tool.name().into(),
        protocol: case.protocol.map(|p| p.name().to_string()),
        connections: case.connections,
        streams: case.streams,
        matrix: case.matrix.clone(),
        size: tree.map_or(case.size, TreeContext::total_bytes),
        repetition,
        ok: outcome.error.is_none(),
        timed_out: finished.timed_out,
        error: outcome.error,
        bytes: outcome.bytes,
        seconds: outcome.seconds,
        goodput_bps: outcome.goodput_bps,
        wire_bps: (s2c.bytes_forwarded - s2c_before.bytes_forwarded) as f64 * 8.0 / wall.max(1e-9),
        wall_seconds: wall,
        client_cpu_s: finished.cpu.as_secs_f64(),
        server_cpu_s: server_cpu,
        relay_cpu: relay_after.cpu_fraction_since(&relay_before),
        relay_late_wakeups: relay_after.late_wakeups - relay_before.late_wakeups,
        retransmits: outcome.retransmits,
        link_drops_queue: s2c.packets_dropped_queue - s2c_before.packets_dropped_queue,
        link_drops_loss: s2c.packets_dropped_loss - s2c_before.packets_dropped_loss,
        link_packets: (s2c.packets_in - s2c.packets_dropped_queue)
            - (s2c_before.packets_in - s2c_before.packets_dropped_queue),
        transport_rtt_ms: outcome.rtt_ms,
        round_trips: outcome.round_trips.clone(),
        lanes: outcome.lanes.clone(),
        files: tree.map(|t| t.entries.len() as u64),
        completion,
        command,
    })
}

/// The client's path memory file: one per scenario run (see `run_case`).
fn path_memory(opts: &RunOptions) -> PathBuf {
    opts.work_dir.join("path-memory")
}

/// Lets the competing flow leave slow start and fill the queue before the first transfer
/// meets it: a few seconds, and at least 20 round trips.
fn warm_up_competitor(c: &Competitor, rtt: Duration) {
    let until = Instant::now() + (rtt * 20).max(Duration::from_secs(3));
    while Instant::now() < until && c.running() {
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(super) fn spawn_logged(
    mut cmd: Command,
    stdout: Option<&Path>,
    stderr: &Path,
    what: &'static str,
) -> Result<Child, ScenarioError> {
    let file = |p: &Path| {
        File::create(p).map_err(|source| ScenarioError::Io {
            op: "creating a log file",
            path: p.to_path_buf(),
            source,
        })
    };
    cmd.stdin(Stdio::null());
    cmd.stdout(match stdout {
        Some(p) => Stdio::from(file(p)?),
        None => Stdio::null(),
    });
    cmd.stderr(Stdio::from(file(stderr)?));
    die_with_parent(&mut cmd);
    cmd.spawn().map_err(|source| ScenarioError::Spawn {
        program: what,
        source,
    })
}

/// Waits until `xfer serve` says it serves and its certificate exists.
pub(super) fn wait_for_server(
    log: &Path,
    cert: &Path,
    server: &mut Child,
) -> Result<(), ScenarioError> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("serving") && cert.exists() {
            return Ok(());
        }
        if let Ok(Some(status)) = server.try_wait() {
            return Err(ScenarioError::ServerStart {
                reason: format!("xfer serve exited ({status}): {}", text.trim()),
            });
        }
        if Instant::now() > until {
            return Err(ScenarioError::ServerStart {
                reason: format!("xfer serve not ready after 20 s: {}", text.trim()),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `ping -c 6 -i 0.2` from the client to the server through the idle link; None without ping.
fn ping_check(lab: &Lab) -> Option<PingCheck> {
    let out = lab
        .command_in_client("ping")
        .args(["-c", "6", "-i", "0.2", "-W", "5", &SERVER_ADDR.to_string()])
        .output()
        .ok()?;
    let times = ping_times_ms(&String::from_utf8_lossy(&out.stdout));
    let median = super::report::median(times.clone())?;
    Some(PingCheck {
        replies: times.len(),
        min_ms: times.iter().copied().fold(f64::MAX, f64::min),
        median_ms: median,
        max_ms: times.iter().copied().fold(f64::MIN, f64::max),
    })
}

/// Per-reply times (`time=20.3 ms`) in ping output.
pub fn ping_times_ms(out: &str) -> Vec<f64> {
    out.lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next())
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// Deletes the download and what tools leave beside it (`.aria2` control files, journals).
fn remove_outputs(out_file: &Path) {
    let _ = std::fs::remove_file(out_file);
    let (Some(dir), Some(name)) = (out_file.parent(), out_file.file_name()) else {
        return;
    };
    let name = name.to_string_lossy().into_owned();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&name) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Whether the scenario needs nginx in the server namespace: the peers of a tree, or a
/// single-file case served by it.
fn needs_nginx(s: &Scenario) -> bool {
    match s.tree {
        Some(_) => s.cases.iter().any(tree::needs_nginx),
        None => s.cases.iter().any(|c| c.server == Server::Nginx),
    }
}

/// Writes one file of pseudo-random bytes per distinct case size into the source directory.
fn prepare_source_files(s: &Scenario, opts: &RunOptions) -> Result<(), ScenarioError> {
    std::fs::create_dir_all(&opts.source_dir)
        .map_err(|source| ScenarioError::io("creating", &opts.source_dir, source))?;
    let started = Instant::now();
    let mut sizes: Vec<u64> = s
        .points
        .iter()
        .flat_map(|p| s.cases.iter().map(|c| p.size_and_timeout(c).0))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    for size in sizes {
        super::upload::write_source(&opts.source_dir.join(source_file_name(size)), size)?;
    }
    if opts.progress {
        eprintln!(
            "== source files in {} written in {:.1} s",
            opts.source_dir.display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Generates the scenario's tree under the served directory and aria2c's input for it.
fn prepare_tree(
    shape: &super::tree::TreeShape,
    opts: &RunOptions,
) -> Result<TreeContext, ScenarioError> {
    let root = opts.work_dir.join("www").join("tree");
    let started = Instant::now();
    let entries = shape.generate(&root)?;
    let mut dest = opts.out_file.clone().into_os_string();
    dest.push(".tree");
    let t = TreeContext {
        entries,
        nginx_port: opts.port.wrapping_add(1),
        dest: dest.into(),
        aria2c_input: opts.work_dir.join("aria2c-urls.txt"),
    };
    t.write_aria2c_input(&SERVER_ADDR.to_string())?;
    if opts.progress {
        eprintln!(
            "== tree: {} files, {} bytes, generated in {:.1} s",
            t.entries.len(),
            t.total_bytes(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(t)
}

fn installed(program: &str) -> bool {
    runs(program, "--version")
}

/// Whether `program flag` can be started (nginx knows `-v`, not `--version`).
fn runs(program: &str, flag: &str) -> bool {
    Command::new(program)
        .arg(flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Arguments joined for display, quoted where a shell would need it.
pub fn shell_join(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub(super) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_utc(secs)
}

/// Seconds since the epoch as a UTC date and time (civil-from-days, proleptic Gregorian).
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(1_795_310_126), "2026-11-22T01:15:26Z");
        assert_eq!(
            shell_join(&[
                "get".into(),
                "https://h/x?size=1&seed=1".into(),
                "%{a} b".into()
            ]),
            "get 'https://h/x?size=1&seed=1' '%{a} b'"
        );
        assert_eq!(
            ping_times_ms("64 bytes from 10.77.0.1: icmp_seq=1 ttl=64 time=20.2 ms\nrtt min"),
            [20.2]
        );
    }
}
