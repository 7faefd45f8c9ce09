//! `xfer serve`'s monitoring flags: metrics, access log, log format (docs/monitoring.md).

use std::net::SocketAddr;

use clap::{Args, ValueEnum};
use xfer::crates::service::AccessLogTarget;

#[derive(Debug, Clone, Args)]
pub struct MonitoringArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics (plain HTTP, its own port; e.g.
    /// 127.0.0.1:9464). Default off.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Write one JSON line per finished request or third-party copy to FILE (appended), or
    /// to standard output with `-`. Default off.
    #[arg(long, value_name = "FILE|-")]
    pub access_log: Option<AccessLogTarget>,
    /// Format of the diagnostic log on standard error.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How diagnostic log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// For people: one line per event, coloured only at a terminal.
    Text,
    /// One JSON object per event, for a log collector.
    Json,
}

impl MonitoringArgs {
    /// Put the flags into the server's configuration.
    pub fn apply(&self, cfg: &mut xfer::serve::ServeConfig) {
        cfg.metrics_listen = self.metrics_listen;
        cfg.access_log = self.access_log.clone();
    }
}
