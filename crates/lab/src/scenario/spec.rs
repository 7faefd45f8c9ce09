//! The scenario file: what link settings to emulate and which transfers to run over each, and
//! its expansion into link points (profile x RTT x loss) and cases (one command line each).
//!
//! ```toml
//! name = "h1-vs-h2"
//! profiles = ["tuned"]          # stock and/or tuned
//! repetitions = 1
//! size = "1GiB"                 # per download (xfer, curl, aria2c)
//! duration = "10s"              # per iperf3 run
//! timeout = "60s"               # per run; a run still going is killed and marked
//! server_args = []              # extra `xfer serve` flags, e.g. ["--congestion", "cubic"]
//! source = "synthetic"          # or "file": a file of `size` bytes in /dev/shm, served by
//!                               # xfer serve (and nginx for transfers with server = "nginx")
//!
//! [link]
//! rate = "1G"
//! rtt = ["110ms"]
//! loss = [0.0]                  # probabilities, 0.0001 = 0.01%
//! # queue = "12.5MB"            # default: one bandwidth-delay product
//! # extra = [{ profile = "stock", rtt = "100ms", loss = 0.0001 }]   # points outside the grid
//! # A cell of a one-factor-at-a-time matrix overrides the base link (see [`ExtraPointFile`]):
//! # extra = [{ name = "queue 0.25 BDP", rtt = "100ms", queue_bdp = 0.25 },
//! #          { name = "competitor", rtt = "100ms", competitor = true, size = "512MiB" }]
//!
//! # [tree]                      # optional: every transfer fetches one generated tree
//! # files = 2000                # (tree.rs has the fields); tools then xfer, aria2c, rclone
//!
//! [[transfer]]
//! tool = "xfer"                 # xfer | iperf3 | curl | aria2c | rclone (trees only)
//! protocol = "http2"            # xfer only: http1 | http2 | quic
//! connections = [1, 2, 4]       # a sweep; empty = the tool's default
//! streams = [8]
//! args = ["--h2-frame-size", "1MiB"]
//! matrix = { "--h2-stream-window" = ["64KiB", "16MiB"] }   # cross product of flag values
//! # server = "nginx"            # aria2c and curl only, with source = "file"
//! # cold = true                 # fresh server and no saved path memory for the client
//! # warm_up = true              # one unrecorded run first (implied by server mechanisms)
//! # mechanisms = ["window-cap=off"]   # `--mechanism` to get and/or serve, by the side
//! #                             # the registry gives; compared against the same transfer
//! #                             # without them (its baseline case)
//!
//! [[ratio]]                     # printed per link point in table.md: median goodput of
//! name = "HTTP/2 / HTTP/1.1"    # one case over another's, against an optional target
//! numerator = "xfer http2 c=1 K=8"
//! denominator = "xfer http1 c=8"
//! target = 0.97
//! ```
//!
//! An xfer transfer without `protocol` is xfer's default command (no `--protocol`, `-c` or
//! `--streams` unless given), named `xfer default`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::tree::{TreeFile, TreeShape};
use super::units::{parse_duration, parse_rate, parse_size};
use super::ScenarioError;
use crate::config::{HostProfile, LinkConfig};

/// A scenario file as written (strings for quantities), see the module docs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Short name, used for output files and in reports.
    pub name: String,
    /// What the scenario measures, copied into the results.
    #[serde(default)]
    pub description: String,
    /// Host profiles to run under: `stock`, `tuned`. Default `["tuned"]`.
    #[serde(default = "default_profiles")]
    pub profiles: Vec<String>,
    /// Times each case runs at each link point. Default 1.
    #[serde(default = "one")]
    pub repetitions: u32,
    /// Download size for xfer, curl and aria2c. Default `1GiB`.
    #[serde(default)]
    pub size: Option<String>,
    /// iperf3 run length. Default `10s`.
    #[serde(default)]
    pub duration: Option<String>,
    /// Per-run limit; a run still going is killed and marked timed out. Default `60s`.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Extra arguments for `xfer serve` (e.g. `["--congestion", "cubic"]`). Default none.
    #[serde(default)]
    pub server_args: Vec<String>,
    /// What single-file transfers fetch: `synthetic` (default; `xfer serve` generates the
    /// bytes) or `file` (a file of pseudo-random bytes in `/dev/shm`, written once).
    #[serde(default)]
    pub source: Option<String>,
    pub link: LinkFile,
    /// Ratios of two cases' goodput to print per link point.
    #[serde(default, rename = "ratio")]
    pub ratios: Vec<Ratio>,
    /// A directory tree every transfer fetches instead of one file (see `tree.rs`).
    #[serde(default)]
    pub tree: Option<TreeFile>,
    #[serde(rename = "transfer")]
    pub transfers: Vec<TransferFile>,
}

fn default_profiles() -> Vec<String> {
    vec!["tuned".into()]
}

fn one() -> u32 {
    1
}

/// The `[link]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkFile {
    /// Bottleneck rate, e.g. `1G`, `100Mbit`.
    pub rate: String,
    /// Round-trip times to run at, e.g. `["50ms", "100ms"]`.
    pub rtt: Vec<String>,
    /// Loss probabilities to run at. Default `[0.0]`.
    #[serde(default = "no_loss")]
    pub loss: Vec<f64>,
    /// Drop-tail queue size; default one bandwidth-delay product.
    #[serde(default)]
    pub queue: Option<String>,
    /// Link points run after the grid of profiles x RTTs x losses.
    #[serde(default)]
    pub extra: Vec<ExtraPointFile>,
}

/// One entry of `link.extra`: a point outside the grid, or a cell that overrides the base
/// link in one or more factors (rate, queue, jitter, a competing flow).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraPointFile {
    /// `stock` or `tuned`; default the scenario's first profile.
    #[serde(default)]
    pub profile: Option<String>,
    pub rtt: String,
    #[serde(default)]
    pub loss: f64,
    /// The cell's name in tables; default derived from its settings.
    #[serde(default)]
    pub name: Option<String>,
    /// Bottleneck rate of this cell; default `link.rate`.
    #[serde(default)]
    pub rate: Option<String>,
    /// Drop-tail queue in bandwidth-delay products of this cell (0.25, 4); default
    /// `link.queue`, else one BDP.
    #[serde(default)]
    pub queue_bdp: Option<f64>,
    /// Per-packet extra one-way delay `U(0, jitter)` (never reorders); default none.
    #[serde(default)]
    pub jitter: Option<String>,
    /// One bulk TCP flow server-to-client across the same bottleneck, started before the
    /// cell's first transfer and kept running through all of them.
    #[serde(default)]
    pub competitor: bool,
    /// The competitor's congestion control (e.g. `cubic`); default the namespace's.
    #[serde(default)]
    pub competitor_congestion: Option<String>,
    /// Download size of every transfer in this cell (a slower link moves less).
    #[serde(default)]
    pub size: Option<String>,
    /// Run limit of every transfer in this cell (where cubic peers crawl).
    #[serde(default)]
    pub timeout: Option<String>,
}

/// A `[[ratio]]`: median goodput of `numerator` over that of `denominator` (case names), at
/// every link point, judged against `target` when one is given.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Ratio {
    pub name: String,
    pub numerator: String,
    pub denominator: String,
    #[serde(default)]
    pub target: Option<f64>,
}

/// One emulated link and host setting: a profile, an RTT and a loss probability, and for a
/// cell of `link.extra` what it overrides.
#[derive(Debug, Clone)]
pub struct LinkPoint {
    pub profile: HostProfile,
    pub rtt: Duration,
    pub loss: f64,
    /// The cell's name in tables; None for grid points (named by profile, RTT and loss).
    pub name: Option<String>,
    /// Overrides of the scenario's rate and queue.
    pub rate_bps: Option<u64>,
    pub queue_bytes: Option<u64>,
    pub jitter: Duration,
    /// Run one competing bulk TCP flow through the cell, with this congestion control when
    /// given.
    pub competitor: bool,
    pub competitor_congestion: Option<String>,
    /// Overrides of every case's size and run limit in this cell.
    pub size: Option<u64>,
    pub timeout: Option<Duration>,
}

impl LinkPoint {
    fn grid(profile: HostProfile, rtt: Duration, loss: f64) -> LinkPoint {
        LinkPoint {
            profile,
            rtt,
            loss,
            name: None,
            rate_bps: None,
            queue_bytes: None,
            jitter: Duration::ZERO,
            competitor: false,
            competitor_congestion: None,
            size: None,
            timeout: None,
        }
    }

    /// The link of this point in a scenario of `rate_bps` and `queue_bytes`.
    pub fn link(&self, rate_bps: u64, queue_bytes: Option<u64>) -> LinkConfig {
        LinkConfig {
            rate_bps: self.rate_bps.unwrap_or(rate_bps),
            rtt: self.rtt,
            loss: self.loss,
            queue_bytes: self.queue_bytes.or(queue_bytes),
            jitter: self.jitter,
            ..LinkConfig::default()
        }
    }

    /// A case's download size and run limit at this point.
    pub fn size_and_timeout(&self, case: &Case) -> (u64, Duration) {
        (
            self.size.unwrap_or(case.size),
            self.timeout.unwrap_or(case.timeout),
        )
    }
}

fn no_loss() -> Vec<f64> {
    vec![0.0]
}

/// One `[[transfer]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferFile {
    pub tool: Tool,
    /// Name in tables and plots; default derived from tool and protocol.
    #[serde(default)]
    pub label: Option<String>,
    /// xfer only: `http1`, `http2` or `quic`. Default `http1`.
    #[serde(default)]
    pub protocol: Option<String>,
    /// Parallel connections to sweep (xfer `-c`, iperf3 `-P`, aria2c `-x`/`-s`).
    #[serde(default)]
    pub connections: Vec<u32>,
    /// Streams per connection to sweep (xfer HTTP/2 and QUIC `--streams`).
    #[serde(default)]
    pub streams: Vec<u32>,
    /// Extra arguments passed as they are.
    #[serde(default)]
    pub args: Vec<String>,
    /// Flag -> values; every combination becomes its own case (`--flag value`).
    #[serde(default)]
    pub matrix: BTreeMap<String, Vec<String>>,
    /// Download size for this transfer only.
    #[serde(default)]
    pub size: Option<String>,
    /// Run limit for this transfer only.
    #[serde(default)]
    pub timeout: Option<String>,
    /// aria2c and curl: `xfer` (default) or `nginx` (needs `source = "file"`).
    #[serde(default)]
    pub server: Option<String>,
    /// Extra `xfer serve` arguments while this transfer runs (after the scenario's
    /// `server_args`); the server is restarted whenever they differ from the running one's.
    #[serde(default)]
    pub server_args: Vec<String>,
    /// Restart `xfer serve` before this transfer, so it starts without state that earlier
    /// transfers left in the server (e.g. saved QUIC path state).
    #[serde(default)]
    pub fresh_server: bool,
    /// A first transfer as a user meets it: a fresh server and a client without saved path
    /// memory (its file is deleted before the run).
    #[serde(default)]
    pub cold: bool,
    /// xfer only: `NAME=on|off` settings of the mechanism registry, passed as `--mechanism`
    /// to `xfer get`, `xfer serve` or both, by the mechanism's side.
    #[serde(default)]
    pub mechanisms: Vec<String>,
    /// Run the transfer once unrecorded before each measured run, so it meets a server
    /// that has served it before (implied for mechanisms that need a server of their own).
    #[serde(default)]
    pub warm_up: bool,
    /// Run only in these cells (names of `link.extra` entries, or of grid points as tables
    /// print them); default every point.
    #[serde(default)]
    pub cells: Vec<String>,
}

/// Which server a single-file case fetches from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Server {
    Xfer,
    Nginx,
}

/// The program a transfer runs in the client namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// `xfer get` (this very binary).
    Xfer,
    /// `iperf3 -R` against `iperf3 -s` in the server namespace: memory to memory, no TLS.
    Iperf3,
    /// `curl` fetching the same synthetic file from `xfer serve`.
    Curl,
    /// `aria2c` with `-x N -s N -k 1M` from `xfer serve`; in a tree scenario `aria2c -i URLS
    /// -j N` from nginx.
    Aria2c,
    /// `rclone copy --transfers N` from an HTTP remote (nginx autoindex); tree scenarios only.
    Rclone,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Xfer => "xfer",
            Tool::Iperf3 => "iperf3",
            Tool::Curl => "curl",
            Tool::Aria2c => "aria2c",
            Tool::Rclone => "rclone",
        }
    }
}

/// xfer's transport for a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http1,
    Http2,
    Quic,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "http1",
            Protocol::Http2 => "http2",
            Protocol::Quic => "quic",
        }
    }

    /// xfer's default connections and streams per connection (see docs/tuning.md), so reports
    /// can state the parallelism a run really had.
    pub fn default_parallelism(self) -> (u32, u32) {
        match self {
            Protocol::Http1 => (8, 1),
            Protocol::Http2 => (1, 8),
            Protocol::Quic => (2, 4),
        }
    }
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub profiles: Vec<HostProfile>,
    pub repetitions: u32,
    pub rate_bps: u64,
    pub rtts: Vec<Duration>,
    pub losses: Vec<f64>,
    /// Every link point in run order: the grid, then `link.extra`.
    pub points: Vec<LinkPoint>,
    pub queue_bytes: Option<u64>,
    /// Single-file transfers fetch a file in `/dev/shm` rather than synthetic bytes.
    pub file_source: bool,
    pub ratios: Vec<Ratio>,
    pub duration: Duration,
    pub server_args: Vec<String>,
    /// Set when every transfer fetches a directory tree.
    pub tree: Option<TreeShape>,
    pub cases: Vec<Case>,
}

/// One command line to run at every link point: a transfer entry with one value picked from
/// each of its sweeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// Unique within the scenario, e.g. `xfer http2 c=1 K=8 --h2-frame-size=16KiB`.
    pub name: String,
    /// The transfer's label (the series in plots).
    pub label: String,
    pub tool: Tool,
    pub protocol: Option<Protocol>,
    /// Whether the scenario named the protocol (tree cases pass `--protocol` only then, so
    /// a transfer without one runs xfer's default command).
    pub explicit_protocol: bool,
    /// Connections actually used (the tool's default when not swept).
    pub connections: u32,
    /// Streams per connection actually used (1 for tools without streams).
    pub streams: u32,
    /// Whether `connections` / `streams` were given (then passed on the command line).
    pub explicit_connections: bool,
    pub explicit_streams: bool,
    /// Extra arguments, the transfer's `args` then the matrix flags.
    pub args: Vec<String>,
    /// The server of a single-file case.
    pub server: Server,
    /// Matrix flags and the values of this case, for tables.
    pub matrix: Vec<(String, String)>,
    pub size: u64,
    pub timeout: Duration,
    /// Extra `xfer serve` arguments for this case.
    pub server_args: Vec<String>,
    /// Restart the server before this case.
    pub fresh_server: bool,
    /// Restart the server and delete the client's path memory before this case.
    pub cold: bool,
    /// Mechanism settings (`NAME=on|off`) of this case; already in `args` / `server_args`.
    pub mechanisms: Vec<String>,
    /// The case this one's mechanism settings are compared against: the same transfer
    /// without them.
    pub baseline: Option<String>,
    /// Run the case once unrecorded before the measured run: a case whose mechanisms need
    /// a server of their own would otherwise meet it fresh, unlike the warm baseline.
    pub warm_up: bool,
    /// The points this case runs at, by name; empty for all.
    pub cells: Vec<String>,
}

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            op: "reading the scenario",
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ScenarioError::Parse { source, .. } => ScenarioError::Parse {
                path: path.display().to_string(),
                source,
            },
            other => other,
        })
    }

    /// Parses and validates scenario text.
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        let file: ScenarioFile = toml::from_str(text).map_err(|source| ScenarioError::Parse {
            path: "<text>".into(),
            source: Box::new(source),
        })?;
        Self::from_file(file)
    }

    /// Validates a parsed file: every field checked, every sweep expanded.
    pub fn from_file(f: ScenarioFile) -> Result<Scenario, ScenarioError> {
        let name_ok = !f.name.is_empty()
            && f.name.len() <= 64
            && f.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
        if !name_ok {
            return Err(invalid("name", &f.name, "1-64 of [A-Za-z0-9._-]"));
        }
        let mut profiles = Vec::new();
        for p in &f.profiles {
            profiles.push(profile_field("profiles", p)?);
        }
        if profiles.is_empty() {
            return Err(invalid("profiles", "[]", "at least one of stock, tuned"));
        }
        if !(1..=100).contains(&f.repetitions) {
            return Err(invalid("repetitions", f.repetitions, "1 ..= 100"));
        }
        let size = size_field("size", f.size.as_deref(), 1 << 30)?;
        let duration = duration_field("duration", f.duration.as_deref(), 10.0)?;
        let timeout = duration_field("timeout", f.timeout.as_deref(), 60.0)?;
        let rate_bps = parse_rate(&f.link.rate)
            .ok_or_else(|| invalid("link.rate", &f.link.rate, "a rate such as 1G or 100Mbit"))?;
        let mut rtts = Vec::new();
        for r in &f.link.rtt {
            rtts.push(
                parse_duration(r)
                    .ok_or_else(|| invalid("link.rtt", r, "durations such as 100ms"))?,
            );
        }
        if rtts.is_empty() {
            return Err(invalid("link.rtt", "[]", "at least one round-trip time"));
        }
        if f.link.loss.is_empty() {
            return Err(invalid(
                "link.loss",
                "[]",
                "at least one loss rate (0.0 for none)",
            ));
        }
        let queue_bytes = match &f.link.queue {
            None => None,
            Some(q) => Some(
                parse_size(q).ok_or_else(|| invalid("link.queue", q, "a size such as 12.5MB"))?,
            ),
        };
        // The lab checks the ranges (rate, RTT, loss, queue) with its own messages.
        for rtt in &rtts {
            LinkConfig {
                rate_bps,
                rtt: *rtt,
                queue_bytes,
                ..LinkConfig::default()
            }
            .validate()
            .map_err(|e| ScenarioError::InvalidLink(e.to_string()))?;
        }
        for loss in &f.link.loss {
            LinkConfig {
                rate_bps,
                rtt: rtts[0],
                loss: *loss,
                queue_bytes,
                ..LinkConfig::default()
            }
            .validate()
            .map_err(|e| ScenarioError::InvalidLink(e.to_string()))?;
        }
        let mut points = Vec::new();
        for profile in &profiles {
            for &rtt in &rtts {
                for &loss in &f.link.loss {
                    points.push(LinkPoint::grid(profile.clone(), rtt, loss));
                }
            }
        }
        for (i, e) in f.link.extra.iter().enumerate() {
            let point = extra_point(i, e, &profiles[0], rate_bps, queue_bytes, timeout)?;
            let key = |p: &LinkPoint| {
                (
                    p.profile.name.clone(),
                    p.link(rate_bps, queue_bytes),
                    p.competitor,
                )
            };
            let duplicate = points.iter().any(|p| key(p) == key(&point));
            let same_name = points
                .iter()
                .any(|p| point_name(p, rate_bps) == point_name(&point, rate_bps));
            if duplicate || same_name {
                return Err(invalid_owned(
                    format!("link.extra[{i}]"),
                    point_name(&point, rate_bps),
                    "a point not already in the grid, under a name of its own",
                ));
            }
            points.push(point);
        }
        if f.transfers.is_empty() {
            return Err(invalid("transfer", "[]", "at least one [[transfer]]"));
        }
        let tree = f.tree.as_ref().map(TreeFile::validate).transpose()?;
        let file_source = match f.source.as_deref() {
            None | Some("synthetic") => false,
            Some("file") if tree.is_none() => true,
            Some(other) => {
                return Err(invalid(
                    "source",
                    other,
                    "synthetic, or file (not with [tree])",
                ))
            }
        };
        let mut cases = Vec::new();
        for (i, t) in f.transfers.iter().enumerate() {
            expand(i, t, size, timeout, tree.is_some(), file_source, &mut cases)?;
        }
        for (i, c) in cases.iter().enumerate() {
            if cases[..i].iter().any(|d| d.name == c.name) {
                return Err(invalid(
                    "transfer",
                    &c.name,
                    "distinct cases (give one of the duplicates a label)",
                ));
            }
        }
        for (i, c) in cases.iter().enumerate() {
            let Some(b) = &c.baseline else { continue };
            if !cases
                .iter()
                .any(|d| &d.name == b && d.mechanisms.is_empty())
            {
                return Err(invalid_owned(
                    format!("transfer (case {i}, {})", c.name),
                    b,
                    "a mechanism case whose baseline (the same transfer without mechanisms) is in the scenario",
                ));
            }
        }
        let point_names: Vec<String> = points.iter().map(|p| point_name(p, rate_bps)).collect();
        for (i, t) in f.transfers.iter().enumerate() {
            if let Some(c) = t.cells.iter().find(|c| !point_names.contains(c)) {
                return Err(invalid_owned(
                    format!("transfer[{i}].cells"),
                    c,
                    &format!("names of points: {}", point_names.join(", ")),
                ));
            }
        }
        for (i, r) in f.ratios.iter().enumerate() {
            for (part, case) in [("numerator", &r.numerator), ("denominator", &r.denominator)] {
                if !cases.iter().any(|c| &c.name == case) {
                    return Err(invalid_owned(
                        format!("ratio[{i}].{part}"),
                        case,
                        "the name of a case (see --dry-run)",
                    ));
                }
            }
            if r.target.is_some_and(|t| !(t.is_finite() && t > 0.0)) {
                return Err(invalid_owned(
                    format!("ratio[{i}].target"),
                    r.target.unwrap_or_default(),
                    "a positive number",
                ));
            }
        }
        Ok(Scenario {
            name: f.name,
            description: f.description,
            profiles,
            repetitions: f.repetitions,
            rate_bps,
            rtts,
            losses: f.link.loss,
            points,
            queue_bytes,
            file_source,
            ratios: f.ratios,
            duration,
            server_args: f.server_args,
            tree,
            cases,
        })
    }

    /// The `--quick` variant: one repetition, a quarter of each size and duration (at least
    /// 8 MiB and 3 s), timeouts halved (at least 20 s), cells' overrides alike.
    pub fn quick(mut self) -> Scenario {
        self.repetitions = 1;
        self.duration = (self.duration / 4).max(Duration::from_secs(3));
        for c in &mut self.cases {
            c.size = (c.size / 4).max(8 << 20);
            c.timeout = (c.timeout / 2).max(Duration::from_secs(20));
        }
        for p in &mut self.points {
            p.size = p.size.map(|n| (n / 4).max(8 << 20));
            p.timeout = p.timeout.map(|t| (t / 2).max(Duration::from_secs(20)));
        }
        self
    }

    /// Number of runs the scenario makes.
    pub fn run_count(&self) -> usize {
        let per_rep: usize = self
            .points
            .iter()
            .map(|p| self.cases.iter().filter(|c| self.runs_at(c, p)).count())
            .sum();
        per_rep * self.repetitions as usize
    }

    /// Whether `case` runs at point `p` (its `cells`, when it names any).
    pub fn runs_at(&self, case: &Case, p: &LinkPoint) -> bool {
        case.cells.is_empty() || case.cells.contains(&point_name(p, self.rate_bps))
    }
}

fn profile_field(field: &str, name: &str) -> Result<HostProfile, ScenarioError> {
    match name {
        "stock" => Ok(HostProfile::stock()),
        "tuned" => Ok(HostProfile::tuned()),
        other => Err(invalid(field, other, "stock, tuned")),
    }
}

/// Validates one `link.extra` entry.
fn extra_point(
    i: usize,
    e: &ExtraPointFile,
    first_profile: &HostProfile,
    rate_bps: u64,
    queue_bytes: Option<u64>,
    default_timeout: Duration,
) -> Result<LinkPoint, ScenarioError> {
    let field = |name: &str| format!("link.extra[{i}].{name}");
    let rtt =
        parse_duration(&e.rtt).ok_or_else(|| invalid_owned(field("rtt"), &e.rtt, "a duration"))?;
    let profile = match &e.profile {
        Some(p) => profile_field(&field("profile"), p)?,
        None => first_profile.clone(),
    };
    let rate = match &e.rate {
        Some(r) => Some(
            parse_rate(r)
                .ok_or_else(|| invalid_owned(field("rate"), r, "a rate such as 100Mbit"))?,
        ),
        None => None,
    };
    let queue = match e.queue_bdp {
        Some(q) if q.is_finite() && (0.01..=64.0).contains(&q) => {
            let bdp = rate.unwrap_or(rate_bps) as f64 * rtt.as_secs_f64() / 8.0;
            Some(((bdp * q) as u64).max(2 * crate::config::LINK_MTU))
        }
        Some(q) => return Err(invalid_owned(field("queue_bdp"), q, "0.01 ..= 64")),
        None => None,
    };
    let jitter = match &e.jitter {
        Some(j) => parse_duration(j)
            .ok_or_else(|| invalid_owned(field("jitter"), j, "a duration such as 5ms"))?,
        None => Duration::ZERO,
    };
    let size = match &e.size {
        Some(_) => Some(size_field(&field("size"), e.size.as_deref(), 0)?),
        None => None,
    };
    let timeout = match &e.timeout {
        Some(_) => Some(duration_field(
            &field("timeout"),
            e.timeout.as_deref(),
            default_timeout.as_secs_f64(),
        )?),
        None => None,
    };
    if let Some(cc) = &e.competitor_congestion {
        let ok = e.competitor
            && (1..=15).contains(&cc.len())
            && cc.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(invalid_owned(
                field("competitor_congestion"),
                cc,
                "a congestion control name such as cubic, with competitor = true",
            ));
        }
    }
    if let Some(n) = &e.name {
        let ok = !n.trim().is_empty() && n.len() <= 40 && !n.contains(['|', '\n', ',']);
        if !ok {
            return Err(invalid_owned(
                field("name"),
                n,
                "1-40 characters without | or ,",
            ));
        }
    }
    let point = LinkPoint {
        profile,
        rtt,
        loss: e.loss,
        name: e.name.clone(),
        rate_bps: rate,
        queue_bytes: queue,
        jitter,
        competitor: e.competitor,
        competitor_congestion: e.competitor_congestion.clone(),
        size,
        timeout,
    };
    point
        .link(rate_bps, queue_bytes)
        .validate()
        .map_err(|err| ScenarioError::InvalidLink(format!("link.extra[{i}]: {err}")))?;
    Ok(point)
}

/// A point's name in tables: its own, else profile, RTT and loss, then what it overrides
/// (`tuned 100ms 0% 100Mbit q=3MB jitter=5ms +tcp`).
pub fn point_name(p: &LinkPoint, scenario_rate_bps: u64) -> String {
    if let Some(n) = &p.name {
        return n.clone();
    }
    let mut key = super::report::point_key(&p.profile.name, p.rtt.as_secs_f64() * 1e3, p.loss);
    if let Some(r) = p.rate_bps.filter(|&r| r != scenario_rate_bps) {
        key.push(' ');
        key.push_str(&super::units::format_rate(r));
    }
    if let Some(q) = p.queue_bytes {
        key.push_str(&format!(" q={}", super::units::format_size(q)));
    }
    if !p.jitter.is_zero() {
        key.push_str(&format!(
            " jitter={}ms",
            super::units::trim_float(p.jitter.as_secs_f64() * 1e3)
        ));
    }
    if p.competitor {
        key.push_str(" +tcp");
    }
    key
}

fn expand(
    index: usize,
    t: &TransferFile,
    default_size: u64,
    default_timeout: Duration,
    tree: bool,
    file_source: bool,
    out: &mut Vec<Case>,
) -> Result<(), ScenarioError> {
    let field = |name: &str| format!("transfer[{index}].{name}");
    match (tree, t.tool) {
        (true, Tool::Iperf3 | Tool::Curl) => {
            return Err(invalid_owned(
                field("tool"),
                t.tool.name(),
                "xfer, aria2c or rclone in a [tree] scenario",
            ))
        }
        (false, Tool::Rclone) => {
            return Err(invalid_owned(
                field("tool"),
                t.tool.name(),
                "rclone only in a [tree] scenario",
            ))
        }
        _ => {}
    }
    let protocol = match (t.tool, t.protocol.as_deref()) {
        (Tool::Xfer, None | Some("http1")) => Some(Protocol::Http1),
        (Tool::Xfer, Some("http2")) => Some(Protocol::Http2),
        (Tool::Xfer, Some("quic")) => Some(Protocol::Quic),
        (Tool::Xfer, Some(other)) => {
            return Err(invalid_owned(
                field("protocol"),
                other,
                "http1, http2, quic",
            ))
        }
        (_, None) => None,
        (_, Some(p)) => {
            return Err(invalid_owned(
                field("protocol"),
                p,
                "only for tool = \"xfer\"",
            ))
        }
    };
    let streams_allowed = matches!(protocol, Some(Protocol::Http2 | Protocol::Quic));
    if !t.streams.is_empty() && !streams_allowed {
        return Err(invalid_owned(
            field("streams"),
            format!("{:?}", t.streams),
            "only for xfer with protocol http2 or quic",
        ));
    }
    for &n in t.connections.iter().chain(&t.streams) {
        if !(1..=256).contains(&n) {
            return Err(invalid_owned(field("connections/streams"), n, "1 ..= 256"));
        }
    }
    // `-x` (one file) stops at 16; `-j` (files at once, trees) does not.
    if t.tool == Tool::Aria2c && !tree && t.connections.iter().any(|&n| n > 16) {
        return Err(invalid_owned(
            field("connections"),
            format!("{:?}", t.connections),
            "1 ..= 16 (aria2c's limit)",
        ));
    }
    if t.tool == Tool::Curl && !t.connections.is_empty() {
        return Err(invalid_owned(
            field("connections"),
            format!("{:?}", t.connections),
            "nothing: curl uses one connection",
        ));
    }
    for (flag, values) in &t.matrix {
        if !flag.starts_with('-') || values.is_empty() {
            return Err(invalid_owned(
                field("matrix"),
                flag,
                "a flag starting with - and at least one value",
            ));
        }
    }
    let server = match (t.server.as_deref(), t.tool) {
        (None | Some("xfer"), _) => Server::Xfer,
        (Some("nginx"), Tool::Aria2c | Tool::Curl) if file_source => Server::Nginx,
        (Some(other), _) => {
            return Err(invalid_owned(
                field("server"),
                other,
                "xfer, or nginx for aria2c and curl with source = \"file\"",
            ))
        }
    };
    let size = size_field(&field("size"), t.size.as_deref(), default_size)?;
    let timeout = match &t.timeout {
        None => default_timeout,
        Some(_) => duration_field(&field("timeout"), t.timeout.as_deref(), 60.0)?,
    };
    let (default_conns, default_streams) = match (t.tool, protocol) {
        (Tool::Xfer, Some(p)) => p.default_parallelism(),
        // The issue's peers: `aria2c -j 32`, `rclone --transfers 32`.
        (Tool::Aria2c | Tool::Rclone, _) if tree => (32, 1),
        (Tool::Aria2c, _) => (16, 1),
        _ => (1, 1),
    };
    // xfer without a protocol is its default command, named as such.
    let default_command = t.tool == Tool::Xfer && t.protocol.is_none();
    let mut base_label = match protocol {
        _ if default_command => "xfer default".to_string(),
        Some(p) => format!("xfer {}", p.name()),
        None if server == Server::Nginx => format!("{} nginx", t.tool.name()),
        None => t.tool.name().to_string(),
    };
    if t.cold {
        base_label.push_str(", cold");
    }
    let switches = mechanism_switches(index, t)?;
    let label = t.label.clone().unwrap_or_else(|| {
        let mut l = base_label.clone();
        for m in &switches.settings {
            l.push_str(&format!(", {}", m.replace('=', " ")));
        }
        l
    });
    let mut args_head = t.args.clone();
    args_head.extend(switches.client_args);
    let mut server_args = t.server_args.clone();
    server_args.extend(switches.server_args);
    let conns: Vec<Option<u32>> = if t.connections.is_empty() {
        vec![None]
    } else {
        t.connections.iter().copied().map(Some).collect()
    };
    let streams: Vec<Option<u32>> = if t.streams.is_empty() {
        vec![None]
    } else {
        t.streams.iter().copied().map(Some).collect()
    };
    let mut combos: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (flag, values) in &t.matrix {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((flag.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    for c in &conns {
        for s in &streams {
            for combo in &combos {
                let connections = c.unwrap_or(default_conns);
                let streams = s.unwrap_or(default_streams);
                let mut suffix = String::new();
                if t.tool != Tool::Curl && !(default_command && c.is_none()) {
                    suffix.push_str(&format!(" c={connections}"));
                }
                // A tree's streams in flight are its lanes (`--tree-lanes`), not K.
                if streams_allowed && !(tree && s.is_none()) {
                    suffix.push_str(&format!(" K={streams}"));
                }
                for (flag, v) in combo {
                    suffix.push_str(&format!(" {}={v}", flag.trim_start_matches('-')));
                }
                let name = format!("{label}{suffix}");
                let baseline =
                    (!switches.settings.is_empty()).then(|| format!("{base_label}{suffix}"));
                let mut args = args_head.clone();
                for (flag, v) in combo {
                    args.push(flag.clone());
                    args.push(v.clone());
                }
                out.push(Case {
                    name,
                    label: label.clone(),
                    tool: t.tool,
                    protocol,
                    explicit_protocol: t.protocol.is_some(),
                    connections,
                    streams,
                    explicit_connections: c.is_some(),
                    explicit_streams: s.is_some(),
                    args,
                    server,
                    matrix: combo.clone(),
                    size,
                    timeout,
                    server_args: server_args.clone(),
                    fresh_server: t.fresh_server,
                    cold: t.cold,
                    mechanisms: switches.settings.clone(),
                    baseline,
                    warm_up: t.warm_up || (switches.needs_server && !t.cold),
                    cells: t.cells.clone(),
                });
            }
        }
    }
    Ok(())
}

/// A transfer's `mechanisms`, split by the side that switches them.
struct MechanismSwitches {
    /// `NAME=on|off` as the registry spells the name.
    settings: Vec<String>,
    client_args: Vec<String>,
    server_args: Vec<String>,
    /// Some setting is the server's: the case needs a server instance of its own.
    needs_server: bool,
}

fn mechanism_switches(index: usize, t: &TransferFile) -> Result<MechanismSwitches, ScenarioError> {
    use xfer_common::mechanisms::{find, Setting, Side};
    let mut out = MechanismSwitches {
        settings: Vec::new(),
        client_args: Vec::new(),
        server_args: Vec::new(),
        needs_server: false,
    };
    let field = format!("transfer[{index}].mechanisms");
    if !t.mechanisms.is_empty() && t.tool != Tool::Xfer {
        return Err(invalid_owned(
            field,
            t.mechanisms.join(" "),
            "only for tool = \"xfer\"",
        ));
    }
    for m in &t.mechanisms {
        let setting: Setting = m
            .parse()
            .map_err(|why: String| invalid_owned(field.clone(), m, &why))?;
        let text = format!("{}={}", setting.name, if setting.on { "on" } else { "off" });
        if out
            .settings
            .iter()
            .any(|s| s.split('=').next() == Some(setting.name))
        {
            return Err(invalid_owned(field, m, "each mechanism once"));
        }
        let side = find(setting.name).map_or(Side::Both, |m| m.side);
        if side.includes(Side::Client) {
            out.client_args
                .extend(["--mechanism".to_string(), text.clone()]);
        }
        if side.includes(Side::Server) {
            out.server_args
                .extend(["--mechanism".to_string(), text.clone()]);
            out.needs_server = true;
        }
        out.settings.push(text);
    }
    Ok(out)
}

fn size_field(field: &str, v: Option<&str>, default: u64) -> Result<u64, ScenarioError> {
    let Some(v) = v else { return Ok(default) };
    match parse_size(v) {
        Some(n) if (1 << 20..=1 << 40).contains(&n) => Ok(n),
        _ => Err(invalid_owned(field.into(), v, "a size from 1MiB to 1TiB")),
    }
}

fn duration_field(
    field: &str,
    v: Option<&str>,
    default_secs: f64,
) -> Result<Duration, ScenarioError> {
    let Some(v) = v else {
        return Ok(Duration::from_secs_f64(default_secs));
    };
    match parse_duration(v) {
        Some(d) if (Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&d) => Ok(d),
        _ => Err(invalid_owned(field.into(), v, "a duration from 1s to 1h")),
    }
}

pub(super) fn invalid(field: &str, value: impl ToString, allowed: &str) -> ScenarioError {
    invalid_owned(field.into(), value, allowed)
}

fn invalid_owned(field: String, value: impl ToString, allowed: &str) -> ScenarioError {
    ScenarioError::Invalid {
        field,
        value: value.to_string(),
        allowed: allowed.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        name = "t"
        profiles = ["stock", "tuned"]
        repetitions = 2
        size = "64MiB"
        [link]
        rate = "1G"
        rtt = ["50ms", "100ms"]
        loss = [0.0, 0.0001]
        [[transfer]]
        tool = "xfer"
        protocol = "http2"
        connections = [1, 2]
        matrix = { "--h2-frame-size" = ["16KiB", "1MiB"] }
        [[transfer]]
        tool = "iperf3"
        connections = [1, 8]
        [[transfer]]
        tool = "curl"
    "#;

    #[test]
    fn sweeps_expand_into_cases() {
        let s = Scenario::from_toml(EXAMPLE).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = s.cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "xfer http2 c=1 K=8 h2-frame-size=16KiB",
                "xfer http2 c=1 K=8 h2-frame-size=1MiB",
                "xfer http2 c=2 K=8 h2-frame-size=16KiB",
                "xfer http2 c=2 K=8 h2-frame-size=1MiB",
                "iperf3 c=1",
                "iperf3 c=8",
                "curl",
            ]
        );
        assert_eq!(s.cases[1].args, ["--h2-frame-size", "1MiB"]);
        assert_eq!(s.cases[0].size, 64 << 20);
        assert_eq!(s.run_count(), 2 * 2 * 2 * 7 * 2);
        let q = s.quick();
        assert_eq!(q.repetitions, 1);
        assert_eq!(q.cases[0].size, 16 << 20);
    }

    #[test]
    fn bad_fields_are_named() {
        let bad = EXAMPLE.replace("\"stock\", ", "\"fast\", ");
        let e = Scenario::from_toml(&bad)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("profiles") && e.contains("fast"), "{e}");
        let bad = EXAMPLE.replace("loss = [0.0, 0.0001]", "loss = [2.0]");
        let e = Scenario::from_toml(&bad)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("loss"), "{e}");
        let bad = EXAMPLE.replace("tool = \"curl\"", "tool = \"curl\"\nconnections = [4]");
        let e = Scenario::from_toml(&bad)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("transfer[2].connections"), "{e}");
        let bad = EXAMPLE.replace("repetitions = 2", "repetitions = 2\nbogus = 1");
        assert!(matches!(
            Scenario::from_toml(&bad),
            Err(ScenarioError::Parse { .. })
        ));
    }

    #[test]
    fn extra_points_ratios_file_source_and_the_default_command() {
        let text = r#"
            name = "m"
            profiles = ["stock", "tuned"]
            source = "file"
            [link]
            rate = "1G"
            rtt = ["50ms", "100ms"]
            extra = [{ profile = "stock", rtt = "100ms", loss = 0.0001 }]
            [[transfer]]
            tool = "xfer"
            [[transfer]]
            tool = "aria2c"
            server = "nginx"
            [[transfer]]
            tool = "iperf3"
            connections = [8]
            [[ratio]]
            name = "default / iperf3"
            numerator = "xfer default"
            denominator = "iperf3 c=8"
            target = 1.0
        "#;
        let s = Scenario::from_toml(text).unwrap_or_else(|e| panic!("{e}"));
        let points: Vec<(String, u128, f64)> = s
            .points
            .iter()
            .map(|p| (p.profile.name.clone(), p.rtt.as_millis(), p.loss))
            .collect();
        assert_eq!(
            points,
            [
                ("stock".to_string(), 50, 0.0),
                ("stock".to_string(), 100, 0.0),
                ("tuned".to_string(), 50, 0.0),
                ("tuned".to_string(), 100, 0.0),
                ("stock".to_string(), 100, 0.0001),
            ]
        );
        assert_eq!(s.run_count(), 5 * 3);
        assert!(s.file_source);
        let names: Vec<&str> = s.cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["xfer default", "aria2c nginx c=16", "iperf3 c=8"]);
        assert!(!s.cases[0].explicit_protocol && !s.cases[0].explicit_connections);
        assert_eq!(s.cases[1].server, Server::Nginx);
        assert_eq!(s.ratios[0].target, Some(1.0));

        let err = |t: String| {
            Scenario::from_toml(&t)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let e = err(text.replace("denominator = \"iperf3 c=8\"", "denominator = \"iperf3\""));
        assert!(
            e.contains("ratio[0].denominator") && e.contains("iperf3"),
            "{e}"
        );
        let e = err(text.replace("loss = 0.0001 }", "loss = 0.0 }"));
        assert!(e.contains("link.extra[0]"), "{e}");
        let e = err(text.replace("profile = \"stock\", rtt", "profile = \"fast\", rtt"));
        assert!(e.contains("link.extra[0].profile"), "{e}");
        let e = err(text.replace("source = \"file\"\n", ""));
        assert!(e.contains("transfer[1].server"), "{e}");
        let e = err(text.replace("source = \"file\"", "source = \"disk\""));
        assert!(e.contains("source") && e.contains("disk"), "{e}");
        let e = err(text.replace("target = 1.0", "target = -1.0"));
        assert!(e.contains("ratio[0].target"), "{e}");
    }

    #[test]
    fn cells_override_the_base_link_and_mechanisms_find_their_side() {
        let text = r#"
            name = "h"
            size = "512MiB"
            [link]
            rate = "1G"
            rtt = ["100ms"]
            extra = [
                { name = "queue 0.25 BDP", rtt = "100ms", queue_bdp = 0.25 },
                { name = "100 Mbit/s", rtt = "100ms", rate = "100M", size = "64MiB" },
                { name = "competitor", rtt = "100ms", competitor = true, competitor_congestion = "cubic", timeout = "30s" },
                { rtt = "100ms", jitter = "5ms" },
            ]
            [[transfer]]
            tool = "xfer"
            cold = true
            [[transfer]]
            tool = "xfer"
            [[transfer]]
            tool = "xfer"
            mechanisms = ["window-cap=off"]
            [[transfer]]
            tool = "xfer"
            mechanisms = ["tcp-bbr=off"]
            [[transfer]]
            tool = "xfer"
            mechanisms = ["tcp-resume=on"]
            [[transfer]]
            tool = "xfer"
            protocol = "quic"
            warm_up = true
            [[transfer]]
            tool = "xfer"
            protocol = "http2"
            cells = ["competitor"]
        "#;
        let s = Scenario::from_toml(text).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<String> = s.points.iter().map(|p| point_name(p, s.rate_bps)).collect();
        assert_eq!(
            names,
            [
                "tuned 100ms 0%",
                "queue 0.25 BDP",
                "100 Mbit/s",
                "competitor",
                "tuned 100ms 0% jitter=5ms"
            ]
        );
        let q = s.points[1].link(s.rate_bps, s.queue_bytes);
        assert_eq!(q.queue_bytes, Some(12_500_000 / 4));
        let slow = &s.points[2];
        assert_eq!(slow.link(s.rate_bps, s.queue_bytes).rate_bps, 100_000_000);
        assert_eq!(slow.size_and_timeout(&s.cases[0]).0, 64 << 20);
        assert_eq!(s.points[0].size_and_timeout(&s.cases[0]).0, 512 << 20);
        assert!(s.points[3].competitor);
        assert_eq!(s.points[3].competitor_congestion.as_deref(), Some("cubic"));
        assert_eq!(
            s.points[3].size_and_timeout(&s.cases[0]).1,
            Duration::from_secs(30)
        );
        assert_eq!(s.points[4].jitter, Duration::from_millis(5));
        let quick = s.clone().quick();
        assert_eq!(quick.points[2].size, Some(16 << 20));

        let names: Vec<&str> = s.cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "xfer default, cold",
                "xfer default",
                "xfer default, window-cap off",
                "xfer default, tcp-bbr off",
                "xfer default, tcp-resume on",
                "xfer quic c=2 K=4",
                "xfer http2 c=1 K=8",
            ]
        );
        let c = &s.cases;
        assert!(c[0].cold && !c[0].warm_up && c[0].baseline.is_none());
        // A client mechanism goes to get only; one of both ends to both, with a warm-up
        // since its server is its own; a server one to serve only.
        assert_eq!(c[2].args, ["--mechanism", "window-cap=off"]);
        assert!(c[2].server_args.is_empty() && !c[2].warm_up);
        assert_eq!(c[2].baseline.as_deref(), Some("xfer default"));
        assert_eq!(c[3].args, ["--mechanism", "tcp-bbr=off"]);
        assert_eq!(c[3].server_args, ["--mechanism", "tcp-bbr=off"]);
        assert!(c[3].warm_up);
        assert!(c[4].args.is_empty());
        assert_eq!(c[4].server_args, ["--mechanism", "tcp-resume=on"]);
        assert!(c[5].warm_up);
        assert_eq!(s.run_count(), 5 * 6 + 1);
        assert!(s.runs_at(&c[6], &s.points[3]) && !s.runs_at(&c[6], &s.points[0]));

        let err = |t: String| {
            Scenario::from_toml(&t)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let e = err(text.replace("cells = [\"competitor\"]", "cells = [\"nowhere\"]"));
        assert!(
            e.contains("transfer[6].cells") && e.contains("nowhere"),
            "{e}"
        );
        let e = err(text.replace("window-cap=off", "window-cap=maybe"));
        assert!(e.contains("transfer[2].mechanisms"), "{e}");
        let e = err(text.replace("window-cap=off", "no-such=off"));
        assert!(e.contains("no mechanism"), "{e}");
        let e = err(text.replace("competitor = true, ", ""));
        assert!(e.contains("link.extra[2].competitor_congestion"), "{e}");
        let e = err(text.replace("queue_bdp = 0.25", "queue_bdp = 0.0"));
        assert!(e.contains("link.extra[0].queue_bdp"), "{e}");
        let e = err(text.replace("jitter = \"5ms\"", "jitter = \"2s\""));
        assert!(e.contains("link.extra[3]") && e.contains("jitter"), "{e}");
        let e = err(text.replace("rate = \"100M\"", "rate = \"fast\""));
        assert!(e.contains("link.extra[1].rate"), "{e}");
        // The same cell twice, or a cell named like another.
        let e = err(text.replace(
            "{ rtt = \"100ms\", jitter = \"5ms\" }",
            "{ rtt = \"100ms\" }",
        ));
        assert!(e.contains("link.extra[3]"), "{e}");
        let e = err(text.replace("name = \"competitor\"", "name = \"100 Mbit/s\""));
        assert!(e.contains("link.extra[2]"), "{e}");
        // A mechanism case needs its baseline.
        let e = err(text.replace(
            "[[transfer]]\n            tool = \"xfer\"\n            [[transfer]]",
            "[[transfer]]",
        ));
        assert!(e.contains("baseline"), "{e}");
        let e = err(text.replace(
            "protocol = \"quic\"",
            "protocol = \"quic\"\n            mechanisms = [\"taper=off\"]\n            [[transfer]]\n            tool = \"iperf3\"\n            mechanisms = [\"taper=off\"]",
        ));
        assert!(e.contains("only for tool"), "{e}");
    }
}
