//! The scenario runner behind `xfer lab run`: a TOML file names a link (rate, RTTs, loss
//! rates, queue), host profiles and transfers (xfer over HTTP/1.1, HTTP/2 or QUIC with any of
//! its flags, and iperf3, curl, aria2c as reference points; or, with a `[tree]`, one
//! generated directory tree fetched by xfer, aria2c and rclone); the runner emulates every
//! combination with a [`crate::Lab`], runs `xfer serve` in the server namespace and each
//! client in the client namespace, and records goodput, client and server CPU time,
//! retransmits and link drops. Results go to JSON, CSV, a Markdown table and SVG figures.
//!
//! What it does not do: build or find the xfer binary (the caller passes it), install the
//! peer tools, run transfers in parallel with each other, or judge the numbers.
//!
//! ```text
//!  Scenario::load(toml) ──> run_scenario ──> Results ──> write_outputs(dir)
//!                            per point: Lab::start, ping, xfer serve [+ iperf3 -s]
//!                            per case:  client in the client namespace, wait4 rusage,
//!                                       /proc/<server>/stat, relay stats before/after
//! ```
//!
//! Key types: [`Scenario`], [`Case`], [`RunOptions`], [`Results`], [`RunRecord`].

mod competitor;
mod held_out;
mod nginx;
mod plot;
mod process;
mod report;
mod runner;
mod spec;
mod tools;
mod tree;
pub mod units;
pub mod upload;
mod upload_tree;

use std::path::{Path, PathBuf};

pub use competitor::Competitor;
pub use held_out::{held_out_rows, HeldOutRow, Verdict};
pub use plot::draw_all;
pub use report::{median, run_bps, Machine, PingCheck, PointRecord, Results, RunRecord};
pub use runner::{ping_times_ms, run_scenario, RunOptions};
pub use spec::{
    point_name, Case, ExtraPointFile, LinkFile, LinkPoint, Protocol, Ratio, Scenario, ScenarioFile,
    Server, Tool, TransferFile,
};
pub use tree::{TreeEntry, TreeFile, TreeShape};

use crate::LabError;

/// Why a scenario could not be loaded or run. Transfers that fail are not errors: they are
/// recorded in the results.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot parse scenario {path}")]
    Parse {
        path: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("invalid scenario field {field} = {value}: allowed {allowed}")]
    Invalid {
        field: String,
        value: String,
        allowed: String,
    },
    #[error("invalid link in scenario: {0}")]
    InvalidLink(String),
    #[error("the scenario uses {program}, which is not installed (Debian: apt-get install iperf3 curl aria2 nginx rclone)")]
    ToolMissing { program: &'static str },
    #[error(transparent)]
    Lab(#[from] LabError),
    #[error("cannot start {program}")]
    Spawn {
        program: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the competing TCP flow failed: {reason}")]
    Competitor { reason: String },
    #[error("the server did not start: {reason}")]
    ServerStart { reason: String },
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot draw {path}: {reason}")]
    Plot { path: PathBuf, reason: String },
}

impl ScenarioError {
    /// A failed file operation, with what was done and to which path.
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        ScenarioError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Writes `results.json`, `results.csv`, `table.md` and the SVG figures into `dir` (created
/// if missing); returns the files written.
pub fn write_outputs(results: &Results, dir: &Path) -> Result<Vec<PathBuf>, ScenarioError> {
    std::fs::create_dir_all(dir).map_err(|source| ScenarioError::Io {
        op: "creating the output directory",
        path: dir.to_path_buf(),
        source,
    })?;
    let json = serde_json::to_string_pretty(results).map_err(|e| ScenarioError::Io {
        op: "serializing results for",
        path: dir.join("results.json"),
        source: std::io::Error::other(e),
    })?;
    let mut written = Vec::new();
    for (name, text) in [
        ("results.json", json),
        ("results.csv", results.csv()),
        ("table.md", results.markdown()),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|source| ScenarioError::Io {
            op: "writing",
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    written.extend(draw_all(results, dir)?);
    Ok(written)
}
