//! What a scenario run produced: one [`RunRecord`] per run, one [`PointRecord`] per link
//! point, and their forms on disk (`results.json`, `results.csv`, `table.md`).

use std::fmt::Write as _;

use serde::Serialize;

use super::spec::Ratio;
use super::units::{format_loss, format_rate, format_size, trim_float};

/// One transfer at one link point.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// The name of a cell that overrides the base link (None for grid points).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell: Option<String>,
    /// A first transfer: fresh server, no saved path memory.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cold: bool,
    /// Mechanism settings (`NAME=on|off`) and the case they are compared against.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mechanisms: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// xfer: connections its report lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections_used: Option<u32>,
    /// Payload bytes the competing TCP flow received during the run, and their rate over the
    /// run's wall time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub competitor_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub competitor_bps: Option<f64>,
    pub profile: String,
    pub rtt_ms: f64,
    pub loss: f64,
    pub rate_bps: u64,
    pub queue_bytes: u64,
    /// The case name (unique within the scenario) and its parts.
    pub case: String,
    pub label: String,
    pub tool: String,
    pub protocol: Option<String>,
    pub connections: u32,
    pub streams: u32,
    pub matrix: Vec<(String, String)>,
    pub size: u64,
    pub repetition: u32,
    /// Finished, exit status 0, output as expected.
    pub ok: bool,
    /// Killed at the run's time limit.
    pub timed_out: bool,
    pub error: Option<String>,
    /// Payload bytes, seconds and goodput as the tool reported them (None when it failed).
    pub bytes: Option<u64>,
    pub seconds: Option<f64>,
    pub goodput_bps: Option<f64>,
    /// IP bytes the relay delivered server-to-client during the run, over its wall time: the
    /// only throughput figure for runs that timed out (headers included: about 3.5% above
    /// TCP goodput).
    pub wire_bps: f64,
    pub wall_seconds: f64,
    /// CPU seconds (user + system) of the client process and of the server process over the
    /// run.
    pub client_cpu_s: f64,
    pub server_cpu_s: Option<f64>,
    /// The relay's share of one core during the run.
    pub relay_cpu: f64,
    /// Relay wake-ups the host delayed during the run ([`crate::RelayStats::late_wakeups`]):
    /// packets were late then, never early.
    pub relay_late_wakeups: u64,
    /// Retransmissions the tool reports (iperf3: sender; xfer: its own sockets).
    pub retransmits: Option<u64>,
    /// Wire packets the emulated link dropped server-to-client (full queue, random loss):
    /// what the sender had to retransmit, whatever the tool.
    pub link_drops_queue: u64,
    pub link_drops_loss: u64,
    /// Wire packets that passed the queue server-to-client (the ones random loss is drawn
    /// on), so `link_drops_loss / link_packets` is the loss the link really applied.
    pub link_packets: u64,
    /// Mean smoothed RTT the transport measured, milliseconds.
    pub transport_rtt_ms: Option<f64>,
    /// xfer: round trips to each lane's first byte, lane 0 first (`3 3p 3p ...`, `p` for a
    /// connection made while lane 0's request learned the resource).
    pub round_trips: Option<String>,
    /// xfer `--lanes auto`: the lane counts it went through, the final and peak count, and
    /// the last reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lanes: Option<String>,
    /// Tree runs: how many files the tree holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    /// Tree runs with a large file: when it and the last small file were complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion: Option<super::tree::Completion>,
    /// The client command as run.
    pub command: String,
}

/// Ping through the idle link before the runs at a link point.
#[derive(Debug, Clone, Serialize)]
pub struct PingCheck {
    pub replies: usize,
    pub min_ms: f64,
    pub median_ms: f64,
    pub max_ms: f64,
}

/// One emulated link and host setting.
#[derive(Debug, Clone, Serialize)]
pub struct PointRecord {
    /// The name of a cell that overrides the base link (None for grid points).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell: Option<String>,
    pub jitter_ms: f64,
    /// A competing bulk TCP flow ran through the point, with this congestion control.
    pub competitor: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub competitor_congestion: Option<String>,
    pub profile: String,
    pub rtt_ms: f64,
    pub loss: f64,
    pub rate_bps: u64,
    pub queue_bytes: u64,
    pub ping: Option<PingCheck>,
    /// Settings read back from the server namespace (congestion control, buffers, qdisc).
    pub settings: Vec<(String, String)>,
    /// Profile entries the kernel did not accept, with the reason.
    pub skipped: Vec<(String, String)>,
    /// What the server printed (for runs that fail to start it).
    pub server_command: String,
}

/// The machine the scenario ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub kernel: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub load_before: String,
    pub load_after: String,
}

/// Everything a scenario run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub scenario: String,
    pub description: String,
    pub command: String,
    pub quick: bool,
    pub started_utc: String,
    pub finished_utc: String,
    /// The scenario's ratios, computed per link point in `table.md`.
    pub ratios: Vec<Ratio>,
    pub machine: Machine,
    pub points: Vec<PointRecord>,
    pub runs: Vec<RunRecord>,
}

/// `tuned 100ms 0.01%`.
pub fn point_key(profile: &str, rtt_ms: f64, loss: f64) -> String {
    format!("{profile} {}ms {}", trim_float(rtt_ms), format_loss(loss))
}

impl RunRecord {
    pub fn point_key(&self) -> String {
        self.cell
            .clone()
            .unwrap_or_else(|| point_key(&self.profile, self.rtt_ms, self.loss))
    }

    /// The connections the run used: as the tool reported, else as configured.
    pub fn connections_in_use(&self) -> u32 {
        self.connections_used.unwrap_or(self.connections).max(1)
    }
}

impl PointRecord {
    /// The point's name in tables: its cell name, else profile, RTT and loss.
    pub fn key(&self) -> String {
        self.cell
            .clone()
            .unwrap_or_else(|| point_key(&self.profile, self.rtt_ms, self.loss))
    }
}

/// Median of the values (None for none).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The throughput figure of a run for summaries: the tool's goodput, else (timed out) the
/// relay's wire rate.
pub fn run_bps(r: &RunRecord) -> Option<f64> {
    if r.ok {
        r.goodput_bps
    } else if r.timed_out {
        Some(r.wire_bps)
    } else {
        None
    }
}

impl Results {
    /// Cases in the order they first ran.
    pub fn cases(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in &self.runs {
            if !v.contains(&r.case) {
                v.push(r.case.clone());
            }
        }
        v
    }

    /// Link points in the order they ran.
    pub fn point_keys(&self) -> Vec<String> {
        self.points.iter().map(PointRecord::key).collect()
    }

    /// Median goodput in Mbit/s of a case at a point, with a marker: `T` some runs timed out
    /// (their wire rate is used), `✗` some failed.
    pub fn cell(&self, case: &str, point: &str) -> Option<(f64, &'static str)> {
        let runs: Vec<&RunRecord> = self
            .runs
            .iter()
            .filter(|r| r.case == case && r.point_key() == point)
            .collect();
        if runs.is_empty() {
            return None;
        }
        let mark = if runs.iter().any(|r| r.timed_out) {
            " T"
        } else if runs.iter().any(|r| !r.ok) {
            " ✗"
        } else {
            ""
        };
        let m = median(runs.iter().filter_map(|r| run_bps(r)).collect())?;
        Some((m / 1e6, mark))
    }

    /// A ratio's value at a point: the median goodputs of its two cases divided, None where
    /// either has no figure. Timed-out runs count with their wire rate, as in the table.
    pub fn ratio(&self, r: &Ratio, point: &str) -> Option<f64> {
        let (num, _) = self.cell(&r.numerator, point)?;
        let (den, _) = self.cell(&r.denominator, point)?;
        (den > 0.0).then(|| num / den)
    }

    /// The ratios table: one row per ratio, one column per link point, `✔`/`✘` against
    /// the target; empty without ratios.
    fn ratios_markdown(&self, points: &[String]) -> String {
        let mut s = String::new();
        if self.ratios.is_empty() {
            return s;
        }
        let _ = writeln!(
            s,
            "\nRatios of median goodput in the same run; ✔ meets the target, ✘ misses it, ✗ no figure.\n"
        );
        let _ = writeln!(s, "| ratio | target | {} |", points.join(" | "));
        let _ = writeln!(s, "|---|---:|{}", "---:|".repeat(points.len()));
        for r in &self.ratios {
            let cells: Vec<String> = points
                .iter()
                .map(|p| match (self.ratio(r, p), r.target) {
                    (Some(v), Some(t)) if v >= t => format!("{v:.2} ✔"),
                    (Some(v), Some(_)) => format!("{v:.2} ✘"),
                    (Some(v), None) => format!("{v:.2}"),
                    (None, _) => "✗".into(),
                })
                .collect();
            let target = r.target.map(|t| format!("≥ {t}")).unwrap_or_default();
            let _ = writeln!(s, "| {} | {target} | {} |", r.name, cells.join(" | "));
        }
        s
    }

    /// Markdown: a side-by-side table (cases x link points, median goodput), the ratios,
    /// then one detailed table per link point.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let points = self.point_keys();
        let cases = self.cases();
        let rate = self.points.first().map(|p| p.rate_bps).unwrap_or(0);
        let _ = writeln!(
            s,
            "Goodput in Mbit/s (median over repetitions) at {}; T = timed out (wire rate), ✗ = failed.\n",
            format_rate(rate)
        );
        let _ = writeln!(s, "| case | {} |", points.join(" | "));
        let _ = writeln!(s, "|---|{}", "---:|".repeat(points.len()));
        for c in &cases {
            let cells: Vec<String> = points
                .iter()
                .map(|p| match self.cell(c, p) {
                    Some((v, mark)) => format!("{v:.0}{mark}"),
                    None => "✗".into(),
                })
                .collect();
            let _ = writeln!(s, "| {c} | {} |", cells.join(" | "));
        }
        s.push_str(&self.ratios_markdown(&points));
        s.push_str(&super::held_out::held_out_markdown(self, &points));
        s.push_str(&super::held_out::fairness_markdown(self));
        for p in &self.points {
            let key = p.key();
            let mut extra = String::new();
            if p.jitter_ms > 0.0 {
                extra.push_str(&format!(", jitter {} ms", trim_float(p.jitter_ms)));
            }
            if p.competitor {
                extra.push_str(", one competing TCP flow");
                if let Some(cc) = &p.competitor_congestion {
                    extra.push_str(&format!(" ({cc})"));
                }
            }
            let _ = writeln!(
                s,
                "\n#### {key} (rate {}, RTT {} ms, loss {}, queue {}{extra})\n",
                format_rate(p.rate_bps),
                trim_float(p.rtt_ms),
                format_loss(p.loss),
                format_size(p.queue_bytes)
            );
            if let Some(ping) = &p.ping {
                let _ = writeln!(
                    s,
                    "ping through the idle link: median {:.2} ms (min {:.2}, max {:.2}, {} replies); congestion control {}, tcp_rmem {}\n",
                    ping.median_ms,
                    ping.min_ms,
                    ping.max_ms,
                    ping.replies,
                    setting(&p.settings, "net.ipv4.tcp_congestion_control"),
                    setting(&p.settings, "net.ipv4.tcp_rmem"),
                );
            }
            s.push_str(&self.link_check(p, &key));
            let _ = writeln!(
                s,
                "| case | goodput Mbit/s | of rate | s | client CPU s | server CPU s | relay CPU | retrans | link drops q/loss |"
            );
            let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
            for r in self.runs.iter().filter(|r| r.point_key() == key) {
                let bps = run_bps(r);
                let good = match (bps, r.ok, r.timed_out) {
                    (Some(b), true, _) => format!("{:.0}", b / 1e6),
                    (Some(b), _, true) => format!("{:.0} T", b / 1e6),
                    _ => format!(
                        "✗ {}",
                        r.error.as_deref().unwrap_or("failed").replace('|', "/")
                    ),
                };
                let frac = bps
                    .map(|b| format!("{:.1}%", b / r.rate_bps as f64 * 100.0))
                    .unwrap_or_default();
                let rep = if self.runs.iter().any(|o| o.repetition > 1) {
                    format!(" #{}", r.repetition)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    s,
                    "| {}{rep} | {good} | {frac} | {} | {:.1} | {} | {:.0}%{} | {} | {}/{} |",
                    r.case,
                    r.seconds
                        .map(|v| format!("{v:.1}"))
                        .unwrap_or_else(|| format!("{:.1}", r.wall_seconds)),
                    r.client_cpu_s,
                    r.server_cpu_s
                        .map(|v| format!("{v:.1}"))
                        .unwrap_or_else(|| "-".into()),
                    r.relay_cpu * 100.0,
                    match r.relay_late_wakeups {
                        0 => String::new(),
                        n => format!(", {n} late"),
                    },
                    r.retransmits
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| "-".into()),
                    r.link_drops_queue,
                    r.link_drops_loss,
                );
            }
            s.push_str(&tree_table(
                self.runs.iter().filter(|r| r.point_key() == key),
            ));
        }
        s
    }

    /// What the link did at a point, over all its runs: the random loss it applied against
    /// the setting, and the highest wire rate of any run against the rate (the emulator's
    /// accuracy, measured in the same run as the figures).
    fn link_check(&self, p: &PointRecord, key: &str) -> String {
        let runs: Vec<&RunRecord> = self.runs.iter().filter(|r| r.point_key() == key).collect();
        let packets: u64 = runs.iter().map(|r| r.link_packets).sum();
        let lost: u64 = runs.iter().map(|r| r.link_drops_loss).sum();
        let top = runs.iter().map(|r| r.wire_bps).fold(0.0, f64::max);
        let mut s = String::new();
        if packets > 0 {
            // One standard deviation of the count expected at the set probability.
            let sigma = (packets as f64 * p.loss * (1.0 - p.loss)).sqrt();
            let _ = write!(
                s,
                "link: random loss {lost} of {packets} wire packets = {:.4}% (set {}, expected {:.0} ± {sigma:.0}); ",
                lost as f64 / packets as f64 * 100.0,
                format_loss(p.loss),
                packets as f64 * p.loss,
            );
        }
        let _ = writeln!(
            s,
            "highest wire rate of a run {:.0} Mbit/s = {:.1}% of the rate\n",
            top / 1e6,
            top / p.rate_bps.max(1) as f64 * 100.0
        );
        s
    }

    /// CSV, one line per run, with a header.
    pub fn csv(&self) -> String {
        let mut s = String::from(
            "profile,rtt_ms,loss,rate_bps,queue_bytes,case,label,tool,protocol,connections,streams,matrix,size,repetition,ok,timed_out,error,bytes,seconds,goodput_bps,wire_bps,wall_seconds,client_cpu_s,server_cpu_s,relay_cpu,relay_late_wakeups,retransmits,link_drops_queue,link_drops_loss,link_packets,transport_rtt_ms,command,cell,cold,mechanisms,connections_used,competitor_bytes,competitor_bps\n",
        );
        let opt = |v: Option<String>| v.unwrap_or_default();
        for r in &self.runs {
            let matrix: Vec<String> = r.matrix.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let fields = [
                r.profile.clone(),
                trim_float(r.rtt_ms),
                r.loss.to_string(),
                r.rate_bps.to_string(),
                r.queue_bytes.to_string(),
                r.case.clone(),
                r.label.clone(),
                r.tool.clone(),
                opt(r.protocol.clone()),
                r.connections.to_string(),
                r.streams.to_string(),
                matrix.join(" "),
                r.size.to_string(),
                r.repetition.to_string(),
                r.ok.to_string(),
                r.timed_out.to_string(),
                opt(r.error.clone()),
                opt(r.bytes.map(|v| v.to_string())),
                opt(r.seconds.map(|v| format!("{v:.3}"))),
                opt(r.goodput_bps.map(|v| format!("{v:.0}"))),
                format!("{:.0}", r.wire_bps),
                format!("{:.3}", r.wall_seconds),
                format!("{:.3}", r.client_cpu_s),
                opt(r.server_cpu_s.map(|v| format!("{v:.3}"))),
                format!("{:.4}", r.relay_cpu),
                r.relay_late_wakeups.to_string(),
                opt(r.retransmits.map(|v| v.to_string())),
                r.link_drops_queue.to_string(),
                r.link_drops_loss.to_string(),
                r.link_packets.to_string(),
                opt(r.transport_rtt_ms.map(|v| format!("{v:.2}"))),
                r.command.clone(),
                r.point_key(),
                r.cold.to_string(),
                r.mechanisms.join(" "),
                opt(r.connections_used.map(|v| v.to_string())),
                opt(r.competitor_bytes.map(|v| v.to_string())),
                opt(r.competitor_bps.map(|v| format!("{v:.0}"))),
            ];
            let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
            s.push_str(&line.join(","));
            s.push('\n');
        }
        s
    }
}

fn setting<'a>(settings: &'a [(String, String)], key: &str) -> &'a str {
    settings
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or("?")
}

fn csv_field(f: &str) -> String {
    if f.contains([',', '"', '\n']) {
        format!("\"{}\"", f.replace('"', "\"\""))
    } else {
        f.to_string()
    }
}

/// Tree runs at one point: files per second over the whole command (what bounds a tree of
/// small files is round trips, not bytes), and, with a large file in the tree, when it and
/// the last small file were complete. Empty when the runs are not of a tree.
fn tree_table<'a>(runs: impl Iterator<Item = &'a RunRecord>) -> String {
    let runs: Vec<&RunRecord> = runs.filter(|r| r.files.is_some()).collect();
    if runs.is_empty() {
        return String::new();
    }
    let secs = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
    let mut s = String::from(
        "\n| case | files | files/s | large file complete s | last small file complete s |\n|---|---:|---:|---:|---:|\n",
    );
    for r in runs {
        let files = r.files.unwrap_or(0);
        let per_s = match (r.ok, r.seconds.or(Some(r.wall_seconds))) {
            (true, Some(t)) if t > 0.0 => format!("{:.0}", files as f64 / t),
            _ => "-".into(),
        };
        let c = r.completion.unwrap_or_default();
        let _ = writeln!(
            s,
            "| {} | {files} | {per_s} | {} | {} |",
            r.case,
            secs(c.large_s),
            secs(c.last_small_s)
        );
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn record(case: &str, rtt_ms: f64, bps: Option<f64>, timed_out: bool) -> RunRecord {
        RunRecord {
            cell: None,
            cold: false,
            mechanisms: vec![],
            baseline: None,
            connections_used: None,
            competitor_bytes: None,
            competitor_bps: None,
            profile: "tuned".into(),
            rtt_ms,
            loss: 0.0,
            rate_bps: 1_000_000_000,
            queue_bytes: 12_500_000,
            case: case.into(),
            label: case.split(" c=").next().unwrap_or(case).into(),
            tool: "xfer".into(),
            protocol: Some("http1".into()),
            connections: case
                .split("c=")
                .nth(1)
                .and_then(|c| c.split(' ').next())
                .and_then(|c| c.parse().ok())
                .unwrap_or(1),
            streams: 1,
            matrix: vec![],
            size: 1 << 30,
            repetition: 1,
            ok: bps.is_some() && !timed_out,
            timed_out,
            error: None,
            bytes: bps.map(|_| 1 << 30),
            seconds: Some(9.0),
            goodput_bps: if timed_out { None } else { bps },
            wire_bps: bps.unwrap_or(0.0),
            wall_seconds: 9.5,
            client_cpu_s: 3.0,
            server_cpu_s: Some(2.0),
            relay_cpu: 0.2,
            relay_late_wakeups: 0,
            retransmits: Some(0),
            files: None,
            completion: None,
            link_drops_queue: 5,
            link_drops_loss: 0,
            link_packets: 1000,
            transport_rtt_ms: Some(100.5),
            round_trips: None,
            lanes: None,
            command: "xfer get \"x,y\"".into(),
        }
    }

    pub(crate) fn results(runs: Vec<RunRecord>) -> Results {
        let mut points = Vec::new();
        for r in &runs {
            if !points.iter().any(|p: &PointRecord| p.rtt_ms == r.rtt_ms) {
                points.push(PointRecord {
                    cell: None,
                    jitter_ms: 0.0,
                    competitor: false,
                    competitor_congestion: None,
                    profile: r.profile.clone(),
                    rtt_ms: r.rtt_ms,
                    loss: r.loss,
                    rate_bps: r.rate_bps,
                    queue_bytes: r.queue_bytes,
                    ping: None,
                    settings: vec![],
                    skipped: vec![],
                    server_command: String::new(),
                });
            }
        }
        Results {
            scenario: "t".into(),
            description: String::new(),
            command: String::new(),
            quick: false,
            started_utc: String::new(),
            finished_utc: String::new(),
            ratios: vec![],
            machine: Machine {
                kernel: String::new(),
                cpus: 2,
                cpu_model: String::new(),
                load_before: String::new(),
                load_after: String::new(),
            },
            points,
            runs,
        }
    }

    #[test]
    fn table_and_csv() {
        let res = results(vec![
            record("xfer http1 c=8", 100.0, Some(9.3e8), false),
            record("xfer http1 c=1", 100.0, Some(3.0e8), true),
            record("xfer http1 c=8", 50.0, None, false),
        ]);
        let md = res.markdown();
        assert!(md.contains("| xfer http1 c=8 | 930 | ✗ |"), "{md}");
        assert!(md.contains("| xfer http1 c=1 | 300 T | ✗ |"), "{md}");
        assert!(!md.contains("Ratios"), "{md}");
        assert!(
            md.contains("link: random loss 0 of 2000 wire packets = 0.0000% (set 0%, expected 0 ± 0); highest wire rate of a run 930 Mbit/s = 93.0% of the rate"),
            "{md}"
        );
        let csv = res.csv();
        assert_eq!(csv.lines().count(), 4);
        assert!(csv.contains("\"xfer get \"\"x,y\"\"\""), "{csv}");
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![1.0, 2.0]), Some(1.5));
    }

    #[test]
    fn ratios_per_point_against_their_targets() {
        let mut res = results(vec![
            record("xfer http1 c=8", 100.0, Some(9.0e8), false),
            record("iperf3 c=8", 100.0, Some(9.5e8), false),
            record("xfer http1 c=8", 50.0, Some(9.6e8), false),
            record("iperf3 c=8", 50.0, Some(9.0e8), false),
            record("xfer http1 c=1", 50.0, None, false),
        ]);
        let ratio = |name: &str, num: &str, target| Ratio {
            name: name.into(),
            numerator: num.into(),
            denominator: "iperf3 c=8".into(),
            target,
        };
        res.ratios = vec![
            ratio("h1 / iperf3", "xfer http1 c=8", Some(1.0)),
            ratio("one / iperf3", "xfer http1 c=1", None),
        ];
        let md = res.markdown();
        assert!(
            md.contains("| h1 / iperf3 | ≥ 1 | 0.95 ✘ | 1.07 ✔ |"),
            "{md}"
        );
        assert!(md.contains("| one / iperf3 |  | ✗ | ✗ |"), "{md}");
        let p = res.point_keys();
        let v = res.ratio(&res.ratios[0], &p[1]).unwrap_or_default();
        assert!((v - 9.6 / 9.0).abs() < 1e-9, "{v}");
    }

    #[test]
    fn tree_table_reports_files_per_second_and_completion() {
        let mut r = record("xfer default", 100.0, Some(8e8), false);
        assert_eq!(tree_table([&r].into_iter()), "", "not a tree run");
        r.files = Some(20_000);
        r.seconds = Some(8.0);
        r.completion = Some(crate::scenario::tree::Completion {
            large_s: Some(7.5),
            last_small_s: None,
        });
        let t = tree_table([&r].into_iter());
        assert!(
            t.contains("| xfer default | 20000 | 2500 | 7.5 | - |"),
            "{t}"
        );
    }
}
