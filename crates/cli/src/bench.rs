//! `xfer bench`: the load generator.

use std::process::ExitCode;

use clap::Args;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Servers' base URLs.
    pub urls: Vec<String>,
}

pub async fn run(_args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("xfer bench is not available in this build")
}
