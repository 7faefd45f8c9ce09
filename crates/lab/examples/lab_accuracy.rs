//! Measures how faithfully the emulator reproduces its settings: ping RTT against the set RTT,
//! `iperf3 -P 8` throughput against the set rate, and the relay's CPU use meanwhile.
//!
//! ```text
//! sudo cargo run --release -p xfer-lab --example lab_accuracy -- \
//!     [--rate-mbit 1000] [--rtt-ms 100] [--secs 20] [--streams 8] [--omit 0] \
//!     [--profile tuned|stock] [--no-offload] [--no-realtime] [--upload] [--cc cubic|bbr|reno]
//! ```
//!
//! Needs root, iproute2, ping and iperf3 (`apt-get install -y iperf3 iputils-ping`).

use std::process::{Child, Stdio};
use std::time::Duration;

use xfer_lab::{HostProfile, Lab, LabConfig, LinkConfig};

struct Args {
    rate_mbit: u64,
    rtt_ms: u64,
    secs: u64,
    streams: u32,
    omit: u64,
    profile: HostProfile,
    offload: bool,
    upload: bool,
    cc: Option<String>,
    realtime: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        rate_mbit: 1000,
        rtt_ms: 100,
        secs: 20,
        streams: 8,
        omit: 0,
        profile: HostProfile::tuned(),
        offload: true,
        upload: false,
        cc: None,
        realtime: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--rate-mbit" => a.rate_mbit = num(value()?)?,
            "--rtt-ms" => a.rtt_ms = num(value()?)?,
            "--secs" => a.secs = num(value()?)?,
            "--streams" => a.streams = num(value()?)? as u32,
            "--omit" => a.omit = num(value()?)?,
            "--profile" => {
                a.profile = match value()?.as_str() {
                    "tuned" => HostProfile::tuned(),
                    "stock" => HostProfile::stock(),
                    other => return Err(format!("unknown profile {other}")),
                }
            }
            "--no-offload" => a.offload = false,
            "--no-realtime" => a.realtime = false,
            "--upload" => a.upload = true,
            "--cc" => a.cc = Some(value()?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// Per-reply times, and ping's own summary (min, avg, max), which has more digits than the
/// per-reply times above 100 ms.
fn ping_times(lab: &Lab) -> Result<(Vec<f64>, Option<[f64; 3]>), String> {
    let out = lab
        .command_in_client("ping")
        .args(["-n", "-c", "10", "-i", "0.2"])
        .arg(lab.server_addr().to_string())
        .output()
        .map_err(|e| format!("ping: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let times = text
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    let summary = text
        .lines()
        .find(|l| l.starts_with("rtt "))
        .and_then(|l| l.split(" = ").nth(1))
        .map(|v| {
            v.split(['/', ' '])
                .filter_map(|x| x.parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .and_then(|v| Some([*v.first()?, *v.get(1)?, *v.get(2)?]));
    Ok((times, summary))
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let rate = args.rate_mbit * 1_000_000;
    let rtt = Duration::from_millis(args.rtt_ms);
    let prefix = "xfer-accuracy";
    let _ = xfer_lab::cleanup(prefix);
    let lab = Lab::start(LabConfig {
        profile: args.profile.clone(),
        offload: args.offload,
        realtime: args.realtime,
        ..LabConfig::new(prefix, LinkConfig::new(rate, rtt))
    })?;
    println!(
        "link: {} Mbit/s, rtt {} ms, queue {} bytes (1 BDP), profile {}, offload {}, realtime {}",
        args.rate_mbit,
        args.rtt_ms,
        lab.server_to_client().effective_queue_bytes(),
        args.profile.name,
        args.offload,
        args.realtime
    );
    for (key, why) in &lab.settings_in_force().skipped {
        println!("not applied: {key}: {why}");
    }
    println!("in force: {:?}", lab.settings_in_force().server);

    let (times, summary) = ping_times(&lab)?;
    let set = args.rtt_ms as f64;
    let Some([min, avg, max]) = summary else {
        return Err("ping printed no summary".into());
    };
    println!(
        "ping -c 10 -i 0.2: {} replies, min {min:.3} / avg {avg:.3} / max {max:.3} ms vs {set} ms \
         (avg off by {:+.3} ms = {:+.2}%, worst {:+.3} ms; tolerance {:.3} ms)",
        times.len(),
        avg - set,
        (avg - set) / set * 100.0,
        if (max - set).abs() > (min - set).abs() {
            max - set
        } else {
            min - set
        },
        (set * 0.02).max(1.0)
    );

    let server = KillOnDrop(
        lab.command_in_server("iperf3")
            .args(["-s", "-1", "-B"])
            .arg(lab.server_addr().to_string())
            .stdout(Stdio::null())
            .spawn()?,
    );
    std::thread::sleep(Duration::from_millis(500));
    let before = lab.relay_stats();
    let mut client = lab.command_in_client("iperf3");
    client
        .args(["-c", &lab.server_addr().to_string(), "-J"])
        .args(["-P", &args.streams.to_string()])
        .args(["-t", &args.secs.to_string()])
        .args(["-O", &args.omit.to_string()]);
    if !args.upload {
        client.arg("-R");
    }
    if let Some(cc) = &args.cc {
        client.args(["-C", cc]);
    }
    let out = client.output()?;
    let after = lab.relay_stats();
    drop(server);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "iperf3 output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    if let Some(err) = report.get("error") {
        return Err(format!("iperf3: {err}").into());
    }
    let bps = report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or("iperf3 report lacks end.sum_received.bits_per_second")?;
    let retrans = report["end"]["sum_sent"]["retransmits"]
        .as_u64()
        .unwrap_or(0);
    let cc = report["end"]["sender_tcp_congestion"]
        .as_str()
        .unwrap_or("?")
        .to_string();
    println!(
        "iperf3 -P {} -t {}{} ({}, {cc}): {:.1} Mbit/s = {:.1}% of the rate \
         (payload ceiling with 1448-byte segments: 96.5%); {} retransmits",
        args.streams,
        args.secs,
        if args.omit > 0 {
            format!(" -O {}", args.omit)
        } else {
            String::new()
        },
        if args.upload {
            "client to server"
        } else {
            "server to client"
        },
        bps / 1e6,
        bps / rate as f64 * 100.0,
        retrans
    );
    let data = if args.upload {
        after.client_to_server
    } else {
        after.server_to_client
    };
    let d0 = if args.upload {
        before.client_to_server
    } else {
        before.server_to_client
    };
    let wall = (after.elapsed - before.elapsed).as_secs_f64();
    println!(
        "relay: {:.1}% of one core ({:?} CPU over {:.1} s); data direction: {:.1} Mbit/s on \
         the wire, {} reads, {} writes, {} queue drops, {} relay drops",
        after.cpu_fraction_since(&before) * 100.0,
        after.cpu_time - before.cpu_time,
        wall,
        (data.bytes_forwarded - d0.bytes_forwarded) as f64 * 8.0 / wall / 1e6,
        data.reads - d0.reads,
        data.writes - d0.writes,
        data.packets_dropped_queue - d0.packets_dropped_queue,
        data.packets_dropped_relay - d0.packets_dropped_relay,
    );
    lab.shutdown()?;
    Ok(())
}
