//! Hold one emulated link open for a script: start the lab, print `ready <server-ns>
//! <client-ns>` on stdout, keep the relay running until stdin closes (or a line `stop`
//! arrives), then remove the namespaces. `scripts/bench-tpc.sh` runs two xfer servers and
//! gfal-copy across it this way.
//!
//! ```text
//! sudo cargo run --release -p xfer-lab --example lab_hold -- \
//!     [--prefix xferhold] [--rate-mbit 1000] [--rtt-ms 100] [--profile tuned|stock] \
//!     [--loss-percent 0.01]
//! ```
//!
//! Needs root, iproute2 and /dev/net/tun.

use std::io::BufRead as _;
use std::time::Duration;

use xfer_lab::{HostProfile, Lab, LabConfig, LinkConfig};

fn main() -> std::process::ExitCode {
    let mut prefix = "xferhold".to_string();
    let mut rate_mbit = 1000u64;
    let mut rtt_ms = 100u64;
    let mut loss_percent = 0f64;
    let mut profile = HostProfile::tuned();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else {
            eprintln!("{flag} needs a value");
            return std::process::ExitCode::from(2);
        };
        let parsed = match flag.as_str() {
            "--prefix" => {
                prefix = value;
                Ok(())
            }
            "--rate-mbit" => value
                .parse()
                .map(|v| rate_mbit = v)
                .map_err(|e| e.to_string()),
            "--rtt-ms" => value.parse().map(|v| rtt_ms = v).map_err(|e| e.to_string()),
            "--loss-percent" => match value.parse::<f64>() {
                Ok(v) if (0.0..=100.0).contains(&v) => {
                    loss_percent = v;
                    Ok(())
                }
                Ok(v) => Err(format!("{v} is not a percentage")),
                Err(e) => Err(e.to_string()),
            },
            "--profile" => match value.as_str() {
                "tuned" => {
                    profile = HostProfile::tuned();
                    Ok(())
                }
                "stock" => {
                    profile = HostProfile::stock();
                    Ok(())
                }
                other => Err(format!("unknown profile {other}")),
            },
            other => Err(format!("unknown flag {other}")),
        };
        if let Err(e) = parsed {
            eprintln!("{flag}: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    let config = LabConfig {
        profile,
        ..LabConfig::new(
            prefix,
            LinkConfig {
                loss: loss_percent / 100.0,
                ..LinkConfig::new(rate_mbit * 1_000_000, Duration::from_millis(rtt_ms))
            },
        )
    };
    let lab = match Lab::start(config) {
        Ok(lab) => lab,
        Err(e) => {
            eprintln!("cannot start the lab: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!(
        "ready {} {}",
        lab.server_namespace(),
        lab.client_namespace()
    );
    for line in std::io::stdin().lock().lines() {
        match line {
            Ok(l) if l.trim() == "stop" => break,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    match lab.shutdown() {
        Ok(stats) => {
            eprintln!("relay: {stats:?}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lab shutdown: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
