//! Command lines of the client tools and what their output says: `xfer get --json`,
//! `iperf3 -R -J`, `curl -w`, `aria2c`. Pure functions, so parsing is tested without a lab.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::spec::{Case, Protocol, Server, Tool};

/// Where a run's tools live and what they talk to.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub xfer_bin: PathBuf,
    pub server: Ipv4Addr,
    pub port: u16,
    /// The self-signed certificate `xfer serve` wrote.
    pub ca_cert: PathBuf,
    /// Output file of downloads (in `/dev/shm`), removed after each run.
    pub out_file: PathBuf,
    /// iperf3 run length.
    pub duration: Duration,
    /// Fetch [`source_file_name`] files instead of synthetic bytes.
    pub file_source: bool,
    /// nginx's TLS port in the server namespace, where it runs.
    pub nginx_port: u16,
}

/// The name of the served file of `size` bytes when the scenario's source is a file.
pub fn source_file_name(size: u64) -> String {
    format!("data-{size}.bin")
}

impl ToolContext {
    /// The URL of `size` bytes from `xfer serve` (`https://` or `quic://`): the synthetic
    /// resource, or the served file.
    pub fn url(&self, size: u64, quic: bool) -> String {
        let scheme = if quic { "quic" } else { "https" };
        if self.file_source {
            return format!(
                "{scheme}://{}:{}/{}",
                self.server,
                self.port,
                source_file_name(size)
            );
        }
        format!(
            "{scheme}://{}:{}/.xfer/synthetic?size={size}&seed=1",
            self.server, self.port
        )
    }

    /// The URL a curl or aria2c case fetches.
    fn peer_url(&self, case: &Case) -> String {
        match case.server {
            Server::Nginx => format!(
                "https://{}:{}/html/{}",
                self.server,
                self.nginx_port,
                source_file_name(case.size)
            ),
            Server::Xfer => self.url(case.size, false),
        }
    }
}

/// aria2c options of every run: overwrite what a previous run left, no preallocation, no
/// progress or summary output (its errors still go to stdout).
pub const ARIA2C_QUIET: [&str; 5] = [
    "--allow-overwrite=true",
    "--file-allocation=none",
    "--summary-interval=0",
    "--console-log-level=warn",
    "--download-result=hide",
];

/// Program and arguments for one case.
pub fn command_line(case: &Case, ctx: &ToolContext) -> (PathBuf, Vec<String>) {
    let s = |v: &str| v.to_string();
    let out = ctx.out_file.display().to_string();
    let ca = ctx.ca_cert.display().to_string();
    match case.tool {
        Tool::Xfer => {
            let quic = case.protocol == Some(Protocol::Quic);
            let mut a = vec![s("get"), ctx.url(case.size, quic), s("-o"), out];
            a.extend([
                s("--overwrite"),
                s("--json"),
                s("--quiet"),
                s("--ca-cert"),
                ca,
            ]);
            xfer_case_args(case, &mut a);
            (ctx.xfer_bin.clone(), a)
        }
        Tool::Iperf3 => {
            let secs = ctx.duration.as_secs().max(1).to_string();
            let mut a = vec![
                s("-c"),
                ctx.server.to_string(),
                s("-R"),
                s("-J"),
                s("-t"),
                secs,
            ];
            a.extend([s("-P"), case.connections.to_string()]);
            a.extend(case.args.iter().cloned());
            (PathBuf::from("iperf3"), a)
        }
        Tool::Curl => {
            let mut a = vec![s("-sS"), s("--cacert"), ca, s("-o"), out];
            a.extend([
                s("-w"),
                s("%{speed_download} %{size_download} %{time_total}"),
            ]);
            a.extend(case.args.iter().cloned());
            a.push(ctx.peer_url(case));
            (PathBuf::from("curl"), a)
        }
        Tool::Aria2c => {
            let n = case.connections.to_string();
            let dir = ctx.out_file.parent().unwrap_or(Path::new("/dev/shm"));
            let name = ctx
                .out_file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "xfer-lab-out".into());
            let mut a = vec![format!("-x{n}"), format!("-s{n}"), s("-k1M")];
            a.push(format!("--ca-certificate={ca}"));
            a.push(format!("--dir={}", dir.display()));
            a.push(format!("--out={name}"));
            a.extend(ARIA2C_QUIET.map(String::from));
            a.extend(case.args.iter().cloned());
            a.push(ctx.peer_url(case));
            (PathBuf::from("aria2c"), a)
        }
        // The spec admits rclone only in tree scenarios, whose command lines are tree.rs's.
        Tool::Rclone => (PathBuf::from("rclone"), Vec::new()),
    }
}

/// The tail of an `xfer get` command line: `--protocol` when the scenario names one (so a
/// transfer without one runs xfer's default command), `-c`, `--streams` where the case sets
/// them, then its arguments.
pub fn xfer_case_args(case: &Case, a: &mut Vec<String>) {
    let protocol = match case.protocol {
        Some(Protocol::Http2) => Some("http2"),
        Some(Protocol::Http1) | None => Some("http1"),
        Some(Protocol::Quic) => None,
    };
    if let Some(p) = protocol.filter(|_| case.explicit_protocol) {
        a.extend(["--protocol".to_string(), p.to_string()]);
    }
    if case.explicit_connections {
        a.extend(["-c".to_string(), case.connections.to_string()]);
    }
    if case.explicit_streams {
        a.extend(["--streams".to_string(), case.streams.to_string()]);
    }
    a.extend(case.args.iter().cloned());
}

/// What a tool reported about one transfer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Payload bytes moved.
    pub bytes: Option<u64>,
    /// The tool's own transfer time (else the process's wall time).
    pub seconds: Option<f64>,
    pub goodput_bps: Option<f64>,
    /// Retransmitted segments/packets, where the tool reports them (iperf3: the sender's;
    /// xfer: its own sockets', i.e. the receiving side's).
    pub retransmits: Option<u64>,
    /// Mean smoothed RTT the transport measured, milliseconds.
    pub rtt_ms: Option<f64>,
    /// xfer: round trips to each lane's first byte, lane 0 first (`3 3p 3p ...`, `p` for a
    /// connection made while lane 0's request learned the resource).
    pub round_trips: Option<String>,
    /// xfer `--lanes auto`: the counts it went through and why it stopped, as its summary
    /// line says (`lanes auto 2..64: 8→12→18 (more lanes did not raise goodput)`).
    pub lanes: Option<String>,
    /// xfer: the connections its report lists (loss can spread HTTP/2 over more).
    pub connections_used: Option<u32>,
    pub error: Option<String>,
}

/// An xfer report's lane-count path, `8→12→18 @18 (reason)`; `None` for a fixed count.
fn adaptive_lanes(report: &serde_json::Value) -> Option<String> {
    let a = report.get("adaptive_lanes")?;
    let mut path: Vec<String> = vec![a["initial_lanes"].as_u64()?.to_string()];
    let decisions = a["decisions"].as_array()?;
    for d in decisions {
        if d["action"]["kind"] != "hold" {
            path.push(d["lanes"].as_u64()?.to_string());
        }
    }
    let last = decisions
        .iter()
        .rev()
        .find(|d| d["action"]["kind"] != "hold")
        .or(decisions.last())
        .and_then(|d| d["reason"].as_str())
        .unwrap_or("none");
    Some(format!(
        "{} final {} peak {} ({last})",
        path.join("→"),
        a["final_lanes"].as_u64()?,
        a["peak_lanes"].as_u64()?
    ))
}

/// The lanes' `round_trips` of an xfer report, as `3 3p 3p`; `None` from an xfer that does
/// not count them.
fn round_trips(report: &serde_json::Value) -> Option<String> {
    let lanes = report["lanes"].as_array()?;
    let counts: Vec<String> = lanes
        .iter()
        .filter_map(|l| {
            let rt = &l["round_trips"];
            let total = ["tcp", "handshake", "requests"]
                .iter()
                .map(|k| rt[*k].as_u64())
                .sum::<Option<u64>>()?;
            let mark = if rt["preconnected"].as_bool() == Some(true) {
                "p"
            } else {
                ""
            };
            Some(format!("{total}{mark}"))
        })
        .collect();
    (!counts.is_empty()).then(|| counts.join(" "))
}

/// Parses a finished process's output. `exit_ok` is whether it exited with 0; `wall` is its
/// wall time, used for tools that report no time of their own.
pub fn parse_outcome(case: &Case, stdout: &str, stderr: &str, exit_ok: bool, wall: f64) -> Outcome {
    let fail = |why: String| Outcome {
        error: Some(why),
        ..Outcome::default()
    };
    let last_stderr = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string();
    match case.tool {
        Tool::Xfer => {
            if !exit_ok {
                return fail(format!("xfer get failed: {last_stderr}"));
            }
            let v: serde_json::Value = match serde_json::from_str(stdout) {
                Ok(v) => v,
                Err(e) => return fail(format!("xfer get printed no JSON report ({e})")),
            };
            let conns = v["connections"].as_array().cloned().unwrap_or_default();
            let retrans: Vec<u64> = conns
                .iter()
                .filter_map(|c| c["retransmits"].as_u64())
                .collect();
            let rtts: Vec<f64> = conns
                .iter()
                .filter_map(|c| c["rtt_us"].as_f64())
                .map(|us| us / 1000.0)
                .collect();
            Outcome {
                bytes: v["received_bytes"].as_u64().or_else(|| v["size"].as_u64()),
                seconds: v["seconds"].as_f64(),
                goodput_bps: v["goodput_bps"].as_f64(),
                retransmits: (!retrans.is_empty()).then(|| retrans.iter().sum()),
                rtt_ms: (!rtts.is_empty()).then(|| rtts.iter().sum::<f64>() / rtts.len() as f64),
                round_trips: round_trips(&v),
                lanes: adaptive_lanes(&v),
                connections_used: (!conns.is_empty()).then_some(conns.len() as u32),
                error: None,
            }
        }
        Tool::Iperf3 => {
            let v: serde_json::Value = match serde_json::from_str(stdout) {
                Ok(v) => v,
                Err(e) => return fail(format!("iperf3 printed no JSON ({e}): {last_stderr}")),
            };
            if let Some(err) = v["error"].as_str() {
                return fail(format!("iperf3: {err}"));
            }
            let recv = &v["end"]["sum_received"];
            let streams = v["end"]["streams"].as_array().cloned().unwrap_or_default();
            let rtts: Vec<f64> = streams
                .iter()
                .filter_map(|s| s["sender"]["mean_rtt"].as_f64())
                .map(|us| us / 1000.0)
                .collect();
            Outcome {
                bytes: recv["bytes"].as_u64(),
                seconds: recv["seconds"].as_f64(),
                goodput_bps: recv["bits_per_second"].as_f64(),
                retransmits: v["end"]["sum_sent"]["retransmits"].as_u64(),
                rtt_ms: (!rtts.is_empty()).then(|| rtts.iter().sum::<f64>() / rtts.len() as f64),
                error: (!exit_ok).then(|| format!("iperf3 failed: {last_stderr}")),
                ..Outcome::default()
            }
        }
        Tool::Curl => {
            if !exit_ok {
                return fail(format!("curl failed: {last_stderr}"));
            }
            let mut it = stdout.split_whitespace().map(|f| f.parse::<f64>().ok());
            let (speed, size, time) = (
                it.next().flatten(),
                it.next().flatten(),
                it.next().flatten(),
            );
            match (speed, size) {
                (Some(speed), Some(size)) if size as u64 == case.size => Outcome {
                    bytes: Some(size as u64),
                    seconds: time,
                    goodput_bps: Some(speed * 8.0),
                    ..Outcome::default()
                },
                _ => fail(format!("curl: unexpected summary {stdout:?}")),
            }
        }
        Tool::Aria2c => {
            if !exit_ok {
                // aria2c reports errors on stdout.
                let last_stdout = stdout
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                return fail(format!(
                    "aria2c failed: {} {last_stderr}",
                    last_stdout.trim()
                ));
            }
            Outcome {
                bytes: Some(case.size),
                seconds: Some(wall),
                goodput_bps: (wall > 0.0).then(|| case.size as f64 * 8.0 / wall),
                ..Outcome::default()
            }
        }
        Tool::Rclone => fail("rclone runs only in tree scenarios".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::spec::Scenario;

    fn cases() -> Vec<Case> {
        Scenario::from_toml(
            r#"
            name = "t"
            size = "16MiB"
            [link]
            rate = "100M"
            rtt = ["20ms"]
            [[transfer]]
            tool = "xfer"
            protocol = "quic"
            streams = [2]
            [[transfer]]
            tool = "iperf3"
            connections = [8]
            [[transfer]]
            tool = "curl"
            [[transfer]]
            tool = "aria2c"
            "#,
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .cases
    }

    fn ctx() -> ToolContext {
        ToolContext {
            xfer_bin: "/bin/xfer".into(),
            server: Ipv4Addr::new(10, 77, 0, 1),
            port: 8443,
            ca_cert: "/tmp/c/cert.pem".into(),
            out_file: "/dev/shm/o".into(),
            duration: Duration::from_secs(5),
            file_source: false,
            nginx_port: 8444,
        }
    }

    #[test]
    fn file_source_urls_and_the_default_command() {
        let s = Scenario::from_toml(
            r#"
            name = "t"
            size = "16MiB"
            source = "file"
            [link]
            rate = "100M"
            rtt = ["20ms"]
            [[transfer]]
            tool = "xfer"
            [[transfer]]
            tool = "aria2c"
            server = "nginx"
            [[transfer]]
            tool = "curl"
            "#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let ctx = ToolContext {
            file_source: true,
            ..ctx()
        };
        let (_, a) = command_line(&s.cases[0], &ctx);
        assert_eq!(a[1], "https://10.77.0.1:8443/data-16777216.bin");
        for flag in ["--protocol", "-c", "--streams"] {
            assert!(!a.contains(&flag.to_string()), "{a:?}");
        }
        let (_, a) = command_line(&s.cases[1], &ctx);
        assert_eq!(
            a.last().map(String::as_str),
            Some("https://10.77.0.1:8444/html/data-16777216.bin")
        );
        let (_, a) = command_line(&s.cases[2], &ctx);
        assert_eq!(
            a.last().map(String::as_str),
            Some("https://10.77.0.1:8443/data-16777216.bin")
        );
    }

    #[test]
    fn command_lines() {
        let c = cases();
        let (p, a) = command_line(&c[0], &ctx());
        assert_eq!(p, PathBuf::from("/bin/xfer"));
        assert_eq!(
            a[1],
            "quic://10.77.0.1:8443/.xfer/synthetic?size=16777216&seed=1"
        );
        assert!(a.windows(2).any(|w| w == ["--streams", "2"]));
        assert!(!a.contains(&"-c".to_string()), "{a:?}");
        let (_, a) = command_line(&c[1], &ctx());
        assert_eq!(a.join(" "), "-c 10.77.0.1 -R -J -t 5 -P 8");
        let (_, a) = command_line(&c[3], &ctx());
        assert!(a.contains(&"-x16".to_string()) && a.contains(&"--out=o".to_string()));
    }

    #[test]
    fn outputs() {
        let c = cases();
        let xfer = r#"{"received_bytes": 16777216, "seconds": 2.0, "goodput_bps": 67108864.0,
            "connections": [{"retransmits": 3, "rtt_us": 21000}, {"retransmits": 1, "rtt_us": 23000}],
            "lanes": [{"round_trips": {"tcp": 1, "handshake": 1, "requests": 1, "preconnected": false}},
                      {"round_trips": {"tcp": 1, "handshake": 1, "requests": 1, "preconnected": true}},
                      {"round_trips": null}]}"#;
        let o = parse_outcome(&c[0], xfer, "", true, 2.5);
        assert_eq!(o.round_trips.as_deref(), Some("3 3p"));
        assert_eq!(o.bytes, Some(16 << 20));
        assert_eq!(o.retransmits, Some(4));
        assert_eq!(o.rtt_ms, Some(22.0));
        assert_eq!(o.lanes, None, "a fixed count");
        let auto = r#"{"received_bytes": 1, "adaptive_lanes": {"initial_lanes": 8, "final_lanes": 12,
            "peak_lanes": 18, "decisions": [
              {"action": {"kind": "add", "lanes": 4}, "lanes": 12, "reason": "baseline"},
              {"action": {"kind": "add", "lanes": 6}, "lanes": 18, "reason": "goodput_rose"},
              {"action": {"kind": "retire", "lanes": 6}, "lanes": 12, "reason": "no_gain"},
              {"action": {"kind": "hold"}, "lanes": 12, "reason": "holding"}]}}"#;
        let o = parse_outcome(&c[0], auto, "", true, 2.5);
        assert_eq!(
            o.lanes.as_deref(),
            Some("8→12→18→12 final 12 peak 18 (no_gain)")
        );
        assert!(parse_outcome(&c[0], "", "xfer: boom\n", false, 1.0)
            .error
            .is_some_and(|e| e.contains("boom")));
        let iperf = r#"{"end": {"sum_received": {"bytes": 1000, "seconds": 5.0, "bits_per_second": 1600.0},
            "sum_sent": {"retransmits": 7}, "streams": [{"sender": {"mean_rtt": 20500}}]}}"#;
        let o = parse_outcome(&c[1], iperf, "", true, 5.1);
        assert_eq!(
            (o.goodput_bps, o.retransmits, o.rtt_ms),
            (Some(1600.0), Some(7), Some(20.5))
        );
        let e = parse_outcome(&c[1], r#"{"error": "unable to connect"}"#, "", false, 0.1);
        assert!(e.error.is_some_and(|e| e.contains("unable")));
        let o = parse_outcome(&c[2], "2097152.000 16777216 8.0", "", true, 8.1);
        assert_eq!(o.goodput_bps, Some(2097152.0 * 8.0));
        let short = parse_outcome(&c[2], "2097152.000 100 8.0", "", true, 8.1);
        assert!(short.error.is_some());
        let o = parse_outcome(&c[3], "", "", true, 4.0);
        assert_eq!(o.goodput_bps, Some((16u64 << 20) as f64 * 8.0 / 4.0));
    }
}
