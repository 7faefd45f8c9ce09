//! The docs quote the code, and a test keeps them honest: `docs/flags.md` must be what
//! `xfer flags --markdown` renders from the clap definitions, and every default in the
//! `field | flag | unit | default` tables of `docs/tuning.md` must equal the `Default` of the
//! struct its section names, as must a "Default X" in the help of the flag such a row names.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn docs(name: &str) -> (PathBuf, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    (path, text)
}

#[test]
fn flags_md_is_generated_from_the_clap_definitions() {
    let out = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(["flags", "--markdown"])
        .output()
        .expect("running xfer flags --markdown");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).expect("UTF-8 tables");
    let (path, committed) = docs("flags.md");
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or(
                committed.lines().count().min(generated.lines().count()),
                |i| i,
            );
        panic!(
            "{} differs from the flag definitions from line {}: regenerate it with \
             `cargo run -p xfer-cli -- flags --markdown > docs/flags.md`\n committed: {:?}\n generated: {:?}",
            path.display(),
            first + 1,
            committed.lines().nth(first).unwrap_or_default(),
            generated.lines().nth(first).unwrap_or_default(),
        );
    }
}

/// Every field of a `{:#?}` rendering, by dotted path (`schedule.max_attempts`), with
/// `Some(..)` looked through.
fn fields(debug: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut path: Vec<String> = Vec::new();
    for line in debug.lines().skip(1) {
        let line = line.trim().trim_end_matches(',');
        if line.starts_with(['}', ')', ']']) {
            path.pop();
            continue;
        }
        let (name, value) = match line.split_once(": ") {
            Some((n, v)) => (n.to_string(), v),
            None => (String::new(), line),
        };
        if value.ends_with(['{', '(', '[']) {
            path.push(name);
            continue;
        }
        let key: Vec<&str> = path
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(name.as_str()))
            .filter(|s| !s.is_empty())
            .collect();
        out.insert(key.join("."), value.to_string());
    }
    out
}

/// The structs `docs/tuning.md`'s sections document, as their defaults print.
fn code_defaults() -> BTreeMap<&'static str, BTreeMap<String, String>> {
    use xfer::crates::http::server::tcp_resume::TcpResumeConfig;
    use xfer::crates::quic::CarefulResume;
    [
        ("GetConfig", format!("{:#?}", xfer::GetConfig::default())),
        (
            "AdaptConfig",
            format!("{:#?}", xfer::AdaptConfig::default()),
        ),
        (
            "TreeConfig",
            format!("{:#?}", xfer::tree::TreeConfig::default()),
        ),
        ("TcpConfig", format!("{:#?}", xfer::TcpConfig::default())),
        (
            "Http2Config",
            format!("{:#?}", xfer::Http2Config::default()),
        ),
        (
            "HttpClientConfig",
            format!("{:#?}", xfer::HttpClientConfig::default()),
        ),
        ("QuicTuning", format!("{:#?}", xfer::QuicTuning::default())),
        ("CarefulResume", format!("{:#?}", CarefulResume::default())),
        (
            "TcpResumeConfig",
            format!("{:#?}", TcpResumeConfig::default()),
        ),
    ]
    .into_iter()
    .map(|(name, debug)| (name, fields(&debug)))
    .collect()
}

/// A documented default the test can compare: `on`, `16 MiB`, `100 ms`, `8`, `0.05`.
/// Prose (`kernel's`, `client: autotune; server: 32 MiB`) gives `None`.
#[derive(Debug, PartialEq)]
enum Value {
    Bool(bool),
    Bytes(u64),
    Time(Duration),
    Number(f64),
}

fn documented(cell: &str) -> Option<Value> {
    let t = cell.trim().trim_matches('`');
    match t {
        "on" => return Some(Value::Bool(true)),
        "off" => return Some(Value::Bool(false)),
        _ => {}
    }
    if let Ok(n) = t.parse::<f64>() {
        return Some(Value::Number(n));
    }
    let compact: String = t.chars().filter(|c| *c != ' ').collect();
    if compact.ends_with('B') {
        return xfer::parse_size(&compact).ok().map(Value::Bytes);
    }
    if compact.starts_with(|c: char| c.is_ascii_digit())
        && compact
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.')
    {
        return xfer::parse_duration(&compact).ok().map(Value::Time);
    }
    None
}

/// Whether the code's `{:?}` value equals the documented one.
fn matches(doc: &Value, code: &str) -> bool {
    match doc {
        // An optional feature is "off" when it is absent.
        Value::Bool(false) => code == "false" || code == "None",
        Value::Bool(true) => code == "true",
        Value::Bytes(n) => code.parse::<u64>().is_ok_and(|c| c == *n),
        Value::Time(d) => xfer::parse_duration(&code.replace('µ', "u")).is_ok_and(|c| c == *d),
        Value::Number(n) => code.parse::<f64>().is_ok_and(|c| c == *n),
    }
}

/// The first backticked word of a table cell.
fn ticked(cell: &str) -> Option<&str> {
    cell.split('`').nth(1)
}

/// `fields[name]`, or the one field whose dotted path ends in `.name`.
fn code_value<'a>(fields: &'a BTreeMap<String, String>, name: &str) -> Option<&'a String> {
    let suffix = format!(".{name}");
    fields.get(name).or_else(|| {
        let mut hits = fields.iter().filter(|(k, _)| k.ends_with(&suffix));
        match (hits.next(), hits.next()) {
            (Some((_, v)), None) => Some(v),
            _ => None,
        }
    })
}

/// The flag a tuning row names first (`--lanes N` gives `--lanes`), if any.
fn flag_of(cell: &str) -> Option<&str> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .find(|t| t.starts_with("--"))
        .and_then(|t| t.split([' ', '=']).next())
}

/// Each flag's help texts (one per command that has it), from the generated docs/flags.md.
fn flag_help() -> BTreeMap<String, Vec<String>> {
    let (_, text) = docs("flags.md");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let Some(flag) = cells[0].split('`').find(|t| t.starts_with("--")) else {
            continue;
        };
        if let Some(help) = cells.last() {
            out.entry(flag.to_string())
                .or_default()
                .push(help.to_string());
        }
    }
    out
}

#[test]
fn tuning_md_defaults_are_the_code_defaults() {
    let (path, text) = docs("tuning.md");
    let code = code_defaults();
    let mut section: Option<&str> = None;
    let mut checked = 0;
    let mut wrong = Vec::new();
    let mut rows_by_flag: BTreeMap<&str, Vec<(usize, &str, &str)>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            section = ticked(line).and_then(|s| code.keys().copied().find(|k| *k == s));
            continue;
        }
        let cells: Vec<&str> = line.split(" | ").collect();
        if !line.starts_with("| `") || cells.len() < 4 {
            continue;
        }
        let Some(mut owner) = section else { continue };
        // A row may name the struct its field lives in: `h2_loss_connections` (`HttpClientConfig`).
        if let Some(other) = cells[0].split('`').nth(3).filter(|s| code.contains_key(s)) {
            owner = code.keys().copied().find(|k| k == &other).unwrap_or(owner);
        }
        let names: Vec<&str> = cells[0].split(" / ").filter_map(ticked).collect();
        let defaults: Vec<&str> = cells[3].split(" / ").collect();
        if names.len() != defaults.len() {
            continue;
        }
        if let (Some(flag), [name]) = (flag_of(cells[1]), names.as_slice()) {
            rows_by_flag
                .entry(flag)
                .or_default()
                .push((i + 1, owner, *name));
        }
        for (name, default) in names.iter().zip(&defaults) {
            let Some(doc) = documented(default) else {
                continue;
            };
            checked += 1;
            match code_value(&code[owner], name) {
                Some(v) if matches(&doc, v) => {}
                Some(v) => wrong.push(format!(
                    "{}:{}: `{name}` documented as {default:?}, {owner}::default() has {v}",
                    path.display(),
                    i + 1
                )),
                None => wrong.push(format!(
                    "{}:{}: `{name}` is not a field of {owner}",
                    path.display(),
                    i + 1
                )),
            }
        }
    }
    // The help of a flag that only says its default in prose ("Default 16MiB.", because the
    // flag is optional and the struct decides) is compared through the row naming its field.
    let help = flag_help();
    let mut help_checked = 0;
    for (flag, rows) in &rows_by_flag {
        let [(line, owner, name)] = rows.as_slice() else {
            continue;
        };
        for text in help.get(*flag).into_iter().flatten() {
            let Some(said) = text
                .split("Default ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .map(|w| w.trim_end_matches(['.', ',', ';', ':', ')']))
            else {
                continue;
            };
            let Some(doc) = documented(said) else {
                continue;
            };
            help_checked += 1;
            match code_value(&code[owner], name) {
                Some(v) if matches(&doc, v) => {}
                other => wrong.push(format!(
                    "{flag}: its help says \"Default {said}\", {owner}::{name} (docs/tuning.md:{line}) has {other:?}"
                )),
            }
        }
    }
    eprintln!("{help_checked} defaults stated in flag help compared");
    assert!(
        help_checked >= 5,
        "only {help_checked} help defaults compared"
    );
    eprintln!("{checked} defaults of {} compared", path.display());
    assert!(
        wrong.is_empty(),
        "defaults in the docs differ from the code:\n{}",
        wrong.join("\n")
    );
    // The tables hold some 50 plain defaults; a parser that found few has stopped reading them.
    assert!(
        checked >= 40,
        "only {checked} defaults of docs/tuning.md were compared"
    );
}

#[test]
fn the_debug_reader_sees_nested_and_optional_fields() {
    let f = fields("A {\n    x: 3,\n    inner: B {\n        y: 250ms,\n    },\n    o: Some(\n        7,\n    ),\n    n: None,\n}");
    assert_eq!(f.get("x").map(String::as_str), Some("3"));
    assert_eq!(f.get("inner.y").map(String::as_str), Some("250ms"));
    assert_eq!(f.get("o").map(String::as_str), Some("7"));
    assert_eq!(f.get("n").map(String::as_str), Some("None"));
    assert_eq!(documented("16 MiB"), Some(Value::Bytes(16 << 20)));
    assert_eq!(
        documented("100 ms"),
        Some(Value::Time(Duration::from_millis(100)))
    );
    assert_eq!(documented("kernel's"), None);
}
