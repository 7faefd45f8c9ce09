//! `xfer completions SHELL` and `xfer man DIR`: shell completion scripts and man pages, both
//! generated from the same clap definition the binary parses with, so they never drift from
//! the real flags.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use clap_complete::Shell as CompleteShell;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl From<Shell> for CompleteShell {
    fn from(s: Shell) -> Self {
        match s {
            Shell::Bash => CompleteShell::Bash,
            Shell::Zsh => CompleteShell::Zsh,
            Shell::Fish => CompleteShell::Fish,
        }
    }
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write a completion script for (printed on stdout).
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write xfer.1 and one xfer-<subcommand>.1 per subcommand into.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
}

pub fn run_completions(args: CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<ExitCode> {
    let name = cmd.get_name().to_string();
    clap_complete::generate(
        CompleteShell::from(args.shell),
        &mut cmd,
        name,
        &mut std::io::stdout(),
    );
    Ok(ExitCode::SUCCESS)
}

pub fn run_man(args: ManArgs, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let written = write_pages(&args.dir, cmd)?;
    for p in written {
        eprintln!("{}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the top page and one page per subcommand (named `xfer-get.1`, as git does).
fn write_pages(dir: &Path, cmd: clap::Command) -> anyhow::Result<Vec<PathBuf>> {
    // Subcommand pages need their parent's name in the title and the synopsis.
    let mut cmd = cmd;
    cmd.build();
    let mut written = vec![write_page(dir, &cmd, "xfer")?];
    for sub in cmd
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
    {
        let name = format!("xfer-{}", sub.get_name());
        let sub = sub.clone().name(name.clone());
        written.push(write_page(dir, &sub, &name)?);
    }
    Ok(written)
}

fn write_page(dir: &Path, cmd: &clap::Command, name: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut out)
        .with_context(|| format!("rendering {}", path.display()))?;
    std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
