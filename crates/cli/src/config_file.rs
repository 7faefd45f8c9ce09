//! Configuration files for a subcommand (`xfer serve --config FILE`), derived from its clap
//! definition: every argument with a long flag has a key of the same name (the flag without
//! its dashes; a positional argument by its name), takes the same grammar, and is checked by
//! the same value parser. A flag added to the command is a key at once; nothing here names
//! one.
//!
//! The file becomes more arguments: its values are turned back into `--flag=value` and parsed
//! with the command line, so conflicts, requirements and types are clap's, once. Precedence:
//! command line, then environment variables, then the file, then the defaults.
//!
//! Refusals name the file, the line and the key: a typo in a production configuration must
//! stop the server, not be ignored.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use toml::Spanned;

use crate::exit::UsageError;

/// Arguments that steer how configuration is read, not what it says: they have no key.
const NOT_KEYS: &[&str] = &["config", "print_config", "mechanisms", "help", "version"];

/// What a value printed for a secret reads.
pub const REDACTED: &str = "<redacted>";

/// The config-file key of `arg`, or `None` when it has none.
pub fn key(arg: &Arg) -> Option<&str> {
    if NOT_KEYS.contains(&arg.get_id().as_str()) {
        return None;
    }
    match arg.get_long() {
        Some(long) => Some(long),
        None if arg.is_positional() => Some(arg.get_id().as_str()),
        None => None,
    }
}

/// Whether `arg` carries a secret (a token, a passphrase) that `--print-config` must not
/// show. A flag says so in its definition, through its value name. A path to a key file is
/// not a secret: the file is.
pub fn is_secret(arg: &Arg) -> bool {
    arg.get_value_names().is_some_and(|names| {
        names
            .iter()
            .any(|n| matches!(n.as_str(), "SECRET" | "TOKEN" | "PASSWORD" | "PASSPHRASE"))
    })
}

/// Whether `arg` is a switch (`--no-quic`): a boolean in a file.
fn is_switch(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse)
}

/// Whether `arg` may be given more than once (an array in a file).
fn is_list(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Append)
}

/// One key of a file, checked against its argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The argument's id.
    id: String,
    values: Vec<FileValue>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum FileValue {
    Switch(bool),
    Text(String),
}

/// A file's keys, each checked against `cmd` (which must be built).
#[derive(Debug, Clone, Default)]
pub struct FileValues {
    entries: Vec<Entry>,
}

impl FileValues {
    /// Reads `path` and checks every key and value against `cmd`'s arguments.
    pub fn read(path: &Path, cmd: &Command) -> Result<Self, UsageError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| UsageError(format!("reading config {}: {e}", path.display())))?;
        Self::parse(&text, path, cmd)
    }

    /// Checks `text` (the contents of `path`) against `cmd`'s arguments.
    pub fn parse(text: &str, path: &Path, cmd: &Command) -> Result<Self, UsageError> {
        let table: BTreeMap<Spanned<String>, Spanned<toml::Value>> = toml::from_str(text)
            .map_err(|e| UsageError(format!("config {}: {e}", path.display())))?;
        let mut entries = Vec::new();
        for (name, value) in table {
            let line = line_of(text, name.span().start);
            let at = |msg: String| {
                UsageError(format!(
                    "config {}:{line}: `{}`: {msg}",
                    path.display(),
                    name.get_ref()
                ))
            };
            let Some(arg) = cmd
                .get_arguments()
                .find(|a| key(a) == Some(name.get_ref().as_str()))
            else {
                return Err(at(format!(
                    "unknown key (xfer {} has no --{})",
                    cmd.get_name(),
                    name.get_ref()
                )));
            };
            let values = file_values(arg, value.get_ref()).map_err(at)?;
            for v in &values {
                if let FileValue::Text(s) = v {
                    check_value(cmd, arg, s).map_err(at)?;
                }
            }
            entries.push(Entry {
                id: arg.get_id().to_string(),
                values,
            });
        }
        Ok(Self { entries })
    }

    fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()
        .iter()
        .take(offset)
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

fn file_values(arg: &Arg, value: &toml::Value) -> Result<Vec<FileValue>, String> {
    if is_switch(arg) {
        return match value {
            toml::Value::Boolean(b) => Ok(vec![FileValue::Switch(*b)]),
            other => Err(format!("a switch: true or false, not {}", other.type_str())),
        };
    }
    match value {
        toml::Value::Array(items) if is_list(arg) => items
            .iter()
            .map(|v| scalar_text(v).map(FileValue::Text))
            .collect(),
        toml::Value::Array(_) => Err("takes one value, not an array".into()),
        other => Ok(vec![FileValue::Text(scalar_text(other)?)]),
    }
}

/// The command-line spelling of a TOML scalar: sizes and durations are strings in the flags'
/// grammar (`"64MiB"`, `"30s"`); a number is read as it would be on the command line.
fn scalar_text(value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(format!(
            "expected a string or a number, not {}",
            other.type_str()
        )),
    }
}

/// Runs the argument's own value parser, so a file accepts exactly what the flag accepts.
/// The argument is copied bare (parser and name, not its relations to other arguments) into a
/// command of its own.
fn check_value(cmd: &Command, arg: &Arg, text: &str) -> Result<(), String> {
    let bare = Arg::new(arg.get_id().clone())
        .long(arg.get_long().unwrap_or(arg.get_id().as_str()).to_string())
        .value_names(arg.get_value_names().unwrap_or_default().to_vec())
        .value_parser(arg.get_value_parser().clone())
        .action(ArgAction::Set);
    let mut value = OsString::from(format!("--{}=", bare.get_long().unwrap_or_default()));
    value.push(text);
    Command::new(cmd.get_name().to_string())
        .no_binary_name(true)
        .disable_help_flag(true)
        .arg(bare)
        .try_get_matches_from([value])
        .map(drop)
        .map_err(|e| clap_message(&e))
}

/// clap's message on one line, without its `error: ` prefix and usage hint.
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let joined = lines.join(" ");
    joined
        .strip_prefix("error: ")
        .unwrap_or(&joined)
        .to_string()
}

/// The arguments to parse: what the command line gave (as given), then the file's keys the
/// command line (or the environment) did not set and that do not conflict with what it did.
pub fn merged_args(cmd: &Command, given: &ArgMatches, file: &FileValues) -> Vec<OsString> {
    let mut flags = vec![OsString::from(cmd.get_name())];
    let mut positionals = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        let source = given.value_source(id);
        if key(arg).is_none() {
            // `--config` and `--print-config` still count for clap's requirements.
            if source == Some(ValueSource::CommandLine) {
                push_given(arg, given, &mut flags);
            }
            continue;
        }
        let out = if arg.is_positional() {
            &mut positionals
        } else {
            &mut flags
        };
        match source {
            Some(ValueSource::CommandLine) => push_given(arg, given, out),
            // The environment is read again by the final parse.
            Some(ValueSource::EnvVariable) => {}
            _ => {
                if let Some(entry) = file.get(id) {
                    if !conflicts_with_given(cmd, arg, given) {
                        push_file(arg, entry, out);
                    }
                }
            }
        }
    }
    if !positionals.is_empty() {
        flags.push("--".into());
        flags.extend(positionals);
    }
    flags
}

fn given_on_command_line(given: &ArgMatches, arg: &Arg) -> bool {
    given.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine)
}

/// A file key yields to a flag on the command line it conflicts with (`--plain` on the
/// command line beats `tls-cert` in the file), in either direction of the declaration.
fn conflicts_with_given(cmd: &Command, arg: &Arg, given: &ArgMatches) -> bool {
    cmd.get_arg_conflicts_with(arg)
        .into_iter()
        .any(|other| given_on_command_line(given, other))
        || cmd.get_arguments().any(|other| {
            given_on_command_line(given, other)
                && cmd
                    .get_arg_conflicts_with(other)
                    .iter()
                    .any(|c| c.get_id() == arg.get_id())
        })
}

fn flag_with_value(arg: &Arg, value: &OsStr) -> OsString {
    if arg.is_positional() {
        return value.to_os_string();
    }
    let mut s = OsString::from(format!("--{}=", arg.get_long().unwrap_or_default()));
    s.push(value);
    s
}

fn push_given(arg: &Arg, given: &ArgMatches, out: &mut Vec<OsString>) {
    let id = arg.get_id().as_str();
    let raw: Vec<&OsStr> = given
        .try_get_raw(id)
        .ok()
        .flatten()
        .map(|v| v.collect())
        .unwrap_or_default();
    match arg.get_action() {
        ArgAction::SetTrue | ArgAction::SetFalse => {
            // A switch's value is what giving it stores: true for SetTrue, false for SetFalse.
            let set = raw.first().is_some_and(|v| *v == "true");
            if set == matches!(arg.get_action(), ArgAction::SetTrue) {
                out.push(format!("--{}", arg.get_long().unwrap_or_default()).into());
            }
        }
        ArgAction::Count => {
            for _ in 0..given.get_count(id) {
                out.push(format!("--{}", arg.get_long().unwrap_or_default()).into());
            }
        }
        _ => out.extend(raw.into_iter().map(|v| flag_with_value(arg, v))),
    }
}

fn push_file(arg: &Arg, entry: &Entry, out: &mut Vec<OsString>) {
    for v in &entry.values {
        match v {
            FileValue::Switch(on) => {
                if *on == matches!(arg.get_action(), ArgAction::SetTrue) {
                    out.push(format!("--{}", arg.get_long().unwrap_or_default()).into());
                }
            }
            FileValue::Text(s) => out.push(flag_with_value(arg, OsStr::new(s))),
        }
    }
}

/// Reads `--config` (when given) and parses the command line and the file together.
pub fn effective_matches(
    cmd: &Command,
    given: &ArgMatches,
    config: Option<&Path>,
) -> anyhow::Result<ArgMatches> {
    let file = match config {
        Some(path) => FileValues::read(path, cmd)?,
        None => FileValues::default(),
    };
    let args = merged_args(cmd, given, &file);
    cmd.clone().try_get_matches_from(args).map_err(|e| {
        let from = config.map(PathBuf::from);
        match from {
            Some(p) => UsageError(format!(
                "{} (the command line and config {} together)",
                clap_message(&e),
                p.display()
            ))
            .into(),
            None => UsageError(clap_message(&e)).into(),
        }
    })
}

/// The effective configuration as a TOML file `--config` reads back: every key with its help
/// as a comment, unset ones commented out, secrets redacted.
pub fn render(cmd: &Command, effective: &ArgMatches) -> String {
    let mut out = format!(
        "# xfer {} configuration: the command line, the config file and the defaults together.\n",
        cmd.get_name()
    );
    for arg in cmd.get_arguments() {
        let Some(key) = key(arg) else { continue };
        let id = arg.get_id().as_str();
        out.push('\n');
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        for line in wrap(&help, 88) {
            let _ = writeln!(out, "# {line}");
        }
        let raw: Vec<String> = effective
            .try_get_raw(id)
            .ok()
            .flatten()
            .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let value = if is_switch(arg) {
            Some(toml::Value::Boolean(
                raw.first().is_some_and(|v| v == "true"),
            ))
        } else if raw.is_empty() && !is_list(arg) {
            None
        } else if is_secret(arg) {
            Some(toml::Value::String(REDACTED.into()))
        } else if is_list(arg) {
            Some(toml::Value::Array(raw.iter().map(|s| typed(s)).collect()))
        } else {
            raw.first().map(|s| typed(s))
        };
        match value {
            Some(v) => {
                let _ = writeln!(out, "{key} = {v}");
            }
            None => {
                let _ = writeln!(out, "# {key} =");
            }
        }
    }
    out
}

/// `text` in lines of at most `width` characters where words allow.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for paragraph in text.lines() {
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            if !line.is_empty() && line.len() + 1 + word.len() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        lines.push(line);
    }
    lines
}

/// A value as TOML: a plain integer stays one; everything else is a string in the flag's
/// grammar (which reads integers too, so either round-trips).
fn typed(s: &str) -> toml::Value {
    match s.parse::<i64>() {
        Ok(i) if i.to_string() == s => toml::Value::Integer(i),
        _ => toml::Value::String(s.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    #[command(name = "demo")]
    struct Demo {
        dir: Option<PathBuf>,
        #[arg(long, default_value_t = 8)]
        lanes: u32,
        #[arg(long, value_parser = crate::client_args::size_arg, default_value = "1MiB")]
        buffer: u64,
        #[arg(long)]
        no_quic: bool,
        #[arg(long)]
        mirror: Vec<String>,
        #[arg(long, value_name = "SECRET")]
        password: Option<String>,
        #[arg(long, conflicts_with = "tls")]
        plain: bool,
        #[arg(long)]
        tls: bool,
        #[arg(long)]
        config: Option<PathBuf>,
    }

    fn cmd() -> Command {
        let mut c = <Demo as clap::CommandFactory>::command();
        c.build();
        c
    }

    fn effective(cli: &[&str], file: &str) -> Result<ArgMatches, String> {
        let cmd = cmd();
        let given = cmd
            .clone()
            .try_get_matches_from(cli)
            .map_err(|e| e.to_string())?;
        let file = FileValues::parse(file, Path::new("demo.toml"), &cmd).map_err(|e| e.0)?;
        cmd.clone()
            .try_get_matches_from(merged_args(&cmd, &given, &file))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn command_line_beats_file_beats_default() {
        let m = effective(
            &["demo", "--lanes", "3"],
            "lanes = 5\nbuffer = \"2MiB\"\nno-quic = true\nmirror = [\"a\", \"b\"]\ndir = \"/srv\"\n",
        )
        .expect("merges");
        assert_eq!(m.get_one::<u32>("lanes"), Some(&3));
        assert_eq!(m.get_one::<u64>("buffer"), Some(&(2 << 20)));
        assert!(m.get_flag("no_quic"));
        let mirrors: Vec<_> = m.get_many::<String>("mirror").expect("mirrors").collect();
        assert_eq!(mirrors, ["a", "b"]);
        assert_eq!(m.get_one::<PathBuf>("dir"), Some(&PathBuf::from("/srv")));
    }

    #[test]
    fn a_flag_on_the_command_line_beats_a_conflicting_key() {
        let m = effective(&["demo", "--plain"], "tls = true\n").expect("file key yields");
        assert!(m.get_flag("plain"));
        assert!(!m.get_flag("tls"));
        // Within the file, a conflict is refused as on the command line.
        assert!(effective(&["demo"], "tls = true\nplain = true\n").is_err());
    }

    #[test]
    fn lists_on_the_command_line_replace_the_file_list() {
        let m = effective(&["demo", "--mirror", "c"], "mirror = [\"a\", \"b\"]\n").expect("ok");
        let mirrors: Vec<_> = m.get_many::<String>("mirror").expect("mirrors").collect();
        assert_eq!(mirrors, ["c"]);
    }

    #[test]
    fn refusals_name_file_line_and_key() {
        let cmd = cmd();
        let parse = |t: &str| FileValues::parse(t, Path::new("demo.toml"), &cmd).map(drop);
        let e = parse("lanes = 2\n\nlanse = 3\n").expect_err("unknown key");
        assert!(
            e.0.contains("demo.toml:3") && e.0.contains("`lanse`"),
            "{}",
            e.0
        );
        let e = parse("\nbuffer = \"12 parsecs\"\n").expect_err("bad size");
        assert!(
            e.0.contains("demo.toml:2") && e.0.contains("`buffer`"),
            "{}",
            e.0
        );
        assert!(e.0.contains("12 parsecs"), "{}", e.0);
        let e = parse("no-quic = \"yes\"\n").expect_err("not a boolean");
        assert!(e.0.contains("true or false"), "{}", e.0);
        let e = parse("lanes = [1, 2]\n").expect_err("not a list");
        assert!(e.0.contains("one value"), "{}", e.0);
        let e = parse("config = \"other.toml\"\n").expect_err("no nesting");
        assert!(e.0.contains("unknown key"), "{}", e.0);
        let e = parse("lanes = \n").expect_err("syntax");
        assert!(
            e.0.contains("demo.toml") && e.0.contains("line 1"),
            "{}",
            e.0
        );
    }

    #[test]
    fn printed_config_reads_back_the_same() {
        let m = effective(
            &["demo", "--password", "hunter2", "--mirror", "x y"],
            "lanes = 5\nbuffer = \"3MiB\"\n",
        )
        .expect("merges");
        let printed = render(&cmd(), &m);
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("password = \"<redacted>\""), "{printed}");
        assert!(printed.contains("# dir =\n"), "{printed}");
        let again = effective(&["demo"], &printed).expect("reads back");
        let reprinted = render(&cmd(), &again);
        assert_eq!(printed, reprinted);
    }
}
