//! The crate's files form no import circle: no file reaches, through `crate::` paths, a file
//! that reaches it back. A circle makes every file in it a dependency of every other, so none
//! can be read, tested or moved alone; the request head, the status codes and the
//! configuration stay leaves that the deciding modules import, never the other way round.
//!
//! Between top-level modules, a module and its submodules (`upload.rs` and
//! `upload/resumable.rs`) count as one unit: an import of any of its files is an import of the
//! unit. The crate root counts like any file: a `crate::Name` that goes through one of its
//! re-exports depends on every module it re-exports from.
//!
//! Inside a unit the same holds file by file: a submodule reaches its parent through
//! `super::` (or `crate::`), the parent reaches a submodule through `child::` paths
//! (re-exports included); declaring `mod child;` is not a use. A parent that uses a child
//! which uses the parent back is a circle too: what both need belongs in a leaf beside them
//! (`access/grant.rs` holds what the policy and the token modules share; `upload/write.rs`,
//! `upload/refusal.rs` and `upload/whole.rs` what the parallel and resumable uploads do).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`upload::resumable`; the root is empty) to source text.
fn modules() -> BTreeMap<String, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path
                .strip_prefix(&src)
                .expect("under src")
                .with_extension("");
            let name = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("::");
            let name = if name == "lib" { String::new() } else { name };
            let text = std::fs::read_to_string(&path).expect("read a source file");
            out.insert(name, text);
        }
    }
    out
}

/// The source without `//` comments, whose paths are prose, not imports.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every full path a `crate::` reference in `code` names, groups (`crate::{a::B, c}`)
/// expanded.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(is_ident) {
            continue;
        }
        expand("", rest, &mut out);
    }
    out
}

/// Read one path (or brace group) at the start of `s`, prefixed by `prefix`.
fn expand(prefix: &str, s: &str, out: &mut Vec<String>) -> usize {
    let s_trim = s.trim_start();
    let skipped = s.len() - s_trim.len();
    if let Some(group) = s_trim.strip_prefix('{') {
        let mut used = 1;
        let mut inner = group;
        loop {
            let n = expand(prefix, inner, out);
            used += n;
            inner = &inner[n..];
            let t = inner.trim_start();
            used += inner.len() - t.len();
            inner = t;
            match inner.chars().next() {
                Some(',') => {
                    used += 1;
                    inner = &inner[1..];
                }
                Some('}') => return skipped + used + 1,
                _ => return skipped + used,
            }
        }
    }
    let len = s_trim.find(|c: char| !is_ident(c)).unwrap_or(s_trim.len());
    let name = &s_trim[..len];
    if name.is_empty() {
        return skipped;
    }
    let path = if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}::{name}")
    };
    let after = &s_trim[len..];
    if let Some(next) = after.strip_prefix("::") {
        return skipped + len + 2 + expand(&path, next, out);
    }
    out.push(path);
    skipped + len
}

/// The longest module `path` starts with; the root when none.
fn module_of(path: &str, names: &BTreeSet<String>) -> String {
    let segs: Vec<&str> = path.split("::").collect();
    (1..=segs.len())
        .rev()
        .map(|n| segs[..n].join("::"))
        .find(|m| names.contains(m))
        .unwrap_or_default()
}

/// The top-level module `module` belongs to (the root is its own).
fn unit(module: &str) -> String {
    module.split("::").next().unwrap_or_default().to_string()
}

fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let names: BTreeSet<String> = mods.keys().cloned().collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, text) in &mods {
        let code = code(text);
        let mut paths = crate_paths(&code);
        if name.is_empty() {
            // The root imports what it re-exports.
            for line in code.lines() {
                if let Some(rest) = line.trim().strip_prefix("pub use ") {
                    expand("", rest, &mut paths);
                }
            }
        }
        let from = unit(name);
        let to: Vec<String> = paths
            .iter()
            .map(|p| unit(&module_of(p, &names)))
            .filter(|u| *u != from)
            .collect();
        graph.entry(from).or_default().extend(to);
    }
    graph
}

/// The code of a file before its inline test module, whose `super::` is the file itself.
fn code_outside_tests(text: &str) -> String {
    let code = code(text);
    match code.find("#[cfg(test)]") {
        Some(at) => code[..at].to_string(),
        None => code,
    }
}

/// Every path `code` names relative to its own module: `super::` (resolved against `parent`)
/// and `child::` for the submodules it declares, as full module paths.
fn relative_paths(module: &str, code: &str, children: &[String]) -> Vec<String> {
    let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("super::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "super::".len()..];
        if before.is_some_and(is_ident) {
            continue;
        }
        expand(parent, rest, &mut out);
    }
    for child in children {
        let short = child.rsplit("::").next().unwrap_or(child);
        let needle = format!("{short}::");
        let mut rest = code;
        while let Some(at) = rest.find(&needle) {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + needle.len()..];
            // `x::child::` and `crate::child::` are paths from elsewhere, already counted.
            if before.is_some_and(|c| is_ident(c) || c == ':') {
                continue;
            }
            out.push(child.clone());
        }
    }
    out
}

/// File-by-file edges inside each unit: submodule to parent and parent to submodule.
fn unit_edges() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let names: BTreeSet<String> = mods.keys().cloned().collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, text) in mods.iter().filter(|(n, _)| !n.is_empty()) {
        let code = code_outside_tests(text);
        let children: Vec<String> = names
            .iter()
            .filter(|c| {
                c.strip_prefix(name.as_str())
                    .and_then(|r| r.strip_prefix("::"))
                    .is_some_and(|r| !r.contains("::"))
            })
            .cloned()
            .collect();
        let mut paths = relative_paths(name, &code, &children);
        paths.extend(crate_paths(&code));
        let to: Vec<String> = paths
            .iter()
            .map(|p| module_of(p, &names))
            .filter(|m| m != name && unit(m) == unit(name) && !m.is_empty())
            .collect();
        graph.entry(name.clone()).or_default().extend(to);
    }
    graph
}

/// A circle through `start`, if any, as the files in order.
fn circle_from(start: &str, graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, trail)) = stack.pop() {
        for next in graph.get(&at).into_iter().flatten() {
            if next == start {
                let mut circle = trail.clone();
                circle.push(start.to_string());
                return Some(circle);
            }
            if seen.insert(next.clone()) {
                let mut t = trail.clone();
                t.push(next.clone());
                stack.push((next.clone(), t));
            }
        }
    }
    None
}

fn shown(m: &str) -> &str {
    if m.is_empty() {
        "lib"
    } else {
        m
    }
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let graph = edges();
    assert!(
        graph
            .get("respond")
            .is_some_and(|to| to.contains("request")),
        "the scan finds no imports: {graph:?}"
    );
    let circles: Vec<String> = graph
        .keys()
        .filter_map(|m| circle_from(m, &graph))
        .map(|c| c.iter().map(|m| shown(m)).collect::<Vec<_>>().join(" -> "))
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn no_submodule_imports_a_parent_that_imports_it_back() {
    let graph = unit_edges();
    assert!(
        graph
            .get("access::issuers")
            .is_some_and(|to| to.contains("access::grant")),
        "the scan finds no relative imports: {graph:?}"
    );
    // One circle is found from each of its files: name each from its smallest file.
    let circles: BTreeSet<String> = graph
        .keys()
        .filter_map(|m| circle_from(m, &graph))
        .map(|mut c| {
            c.pop();
            let first = (0..c.len()).min_by_key(|&i| &c[i]).unwrap_or(0);
            c.rotate_left(first);
            c.push(c[0].clone());
            c.join(" -> ")
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles inside a unit:\n{circles:#?}"
    );
}

#[test]
fn the_scan_sees_grouped_and_inline_paths() {
    let out = crate_paths(&code(
        "use crate::{a::B, c::{d, e::F}};\nlet x = crate::g::h(1); // crate::comment::x\nnotcrate::y",
    ));
    assert_eq!(out, ["a::B", "c::d", "c::e::F", "g::h"]);
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["a".to_string()])),
    ]
    .into();
    assert_eq!(
        circle_from("a", &graph),
        Some(vec!["a".to_string(), "b".to_string(), "a".to_string()])
    );
}
