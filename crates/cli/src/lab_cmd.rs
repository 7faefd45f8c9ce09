//! `xfer lab`: the link emulator and scenario runner.

use std::process::ExitCode;

use clap::Args;

#[derive(Debug, Args)]
pub struct LabArgs {
    /// Scenario file.
    pub scenario: Option<std::path::PathBuf>,
}

pub async fn run(_args: LabArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("xfer lab is not available in this build")
}
