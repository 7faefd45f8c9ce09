//! Network namespaces by name (the `ip netns` convention: a bind mount under `/run/netns`),
//! running code and commands inside them, and namespaced sysctls.
//!
//! Code runs inside a namespace on a thread of its own that calls `setns(CLONE_NEWNET)`: only
//! that thread moves, and sockets or TUN devices it creates stay in that namespace after it
//! ends.

use std::fs::File;
use std::path::PathBuf;
use std::process::Command;
use std::thread::JoinHandle;

use crate::error::LabError;

pub(crate) const NETNS_DIR: &str = "/run/netns";

pub(crate) fn path(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

pub(crate) fn exists(name: &str) -> bool {
    path(name).exists()
}

/// Runs a set-up command, turning a failure into [`LabError::CommandFailed`].
pub(crate) fn run(tool: &'static str, args: &[&str]) -> Result<String, LabError> {
    let out = Command::new(tool)
        .args(args)
        .output()
        .map_err(|source| LabError::ToolMissing { tool, source })?;
    if !out.status.success() {
        return Err(LabError::CommandFailed {
            command: format!("{tool} {}", args.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn add(name: &str) -> Result<(), LabError> {
    run("ip", &["netns", "add", name]).map(drop)
}

/// Kills what still runs inside the namespace (only processes the lab's user started there can
/// be inside) and removes it. A namespace that is already gone is not an error.
pub(crate) fn delete(name: &str) -> Result<(), LabError> {
    if !exists(name) {
        return Ok(());
    }
    if let Ok(pids) = run("ip", &["netns", "pids", name]) {
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // A pid that has exited meanwhile just yields ESRCH.
            let _ = crate::sys::process::kill(pid, rustix::process::Signal::KILL);
        }
    }
    match run("ip", &["netns", "del", name]) {
        Err(_) if !exists(name) => Ok(()),
        other => other.map(drop),
    }
}

/// Starts `f` on a new thread inside namespace `name`.
pub(crate) fn spawn_in<T, F>(
    name: &str,
    thread_name: String,
    f: F,
) -> Result<JoinHandle<Result<T, LabError>>, LabError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let file = File::open(path(name)).map_err(|source| LabError::Netns {
        op: "open namespace handle".into(),
        namespace: name.into(),
        source,
    })?;
    let ns = name.to_string();
    std::thread::Builder::new()
        .name(thread_name.clone())
        .spawn(move || {
            if let Err(source) = crate::sys::netns::enter_net_namespace(&file) {
                return Err(LabError::Netns {
                    op: "setns".into(),
                    namespace: ns,
                    source,
                });
            }
            drop(file);
            Ok(f())
        })
        .map_err(|source| LabError::Thread {
            name: thread_name,
            source,
        })
}

/// Runs `f` inside namespace `name` and waits for it.
pub(crate) fn run_in<T, F>(name: &str, f: F) -> Result<T, LabError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let handle = spawn_in(name, "lab-setns".into(), f)?;
    handle.join().unwrap_or_else(|_| {
        Err(LabError::Netns {
            op: "helper thread panicked".into(),
            namespace: name.into(),
            source: std::io::Error::other("panic"),
        })
    })
}

fn sysctl_path(key: &str) -> PathBuf {
    PathBuf::from("/proc/sys").join(key.replace('.', "/"))
}

/// Writes namespaced sysctls inside `ns`. Keys the namespace shows read-only (on recent kernels
/// `net.core.rmem_max` and `wmem_max` mirror the host's value in every other namespace) are
/// skipped and returned with the reason, rather than changed on the host.
pub(crate) fn write_sysctls(
    ns: &str,
    kv: &[(String, String)],
) -> Result<Vec<(String, String)>, LabError> {
    use std::os::unix::fs::PermissionsExt;
    let owned = kv.to_vec();
    let result = run_in(ns, move || {
        let mut skipped = Vec::new();
        for (key, value) in owned {
            let path = sysctl_path(&key);
            let read_only = std::fs::metadata(&path)
                .map(|m| m.permissions().mode() & 0o222 == 0)
                .unwrap_or(false);
            if read_only {
                let current = std::fs::read_to_string(&path).unwrap_or_default();
                skipped.push((
                    key,
                    format!(
                        "read-only inside a network namespace; the host's {} stays in force",
                        current.trim()
                    ),
                ));
                continue;
            }
            if let Err(source) = std::fs::write(&path, &value) {
                return Err((key, value, source));
            }
        }
        Ok(skipped)
    })?;
    result.map_err(|(key, value, source)| LabError::Sysctl {
        key,
        value,
        namespace: ns.into(),
        source,
    })
}

/// Reads namespaced sysctls inside `ns`; a key the namespace lacks reads as `unavailable`.
pub(crate) fn read_sysctls(ns: &str, keys: &[&str]) -> Result<Vec<(String, String)>, LabError> {
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    run_in(ns, move || {
        keys.into_iter()
            .map(|k| {
                let v = std::fs::read_to_string(sysctl_path(&k))
                    .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
                    .unwrap_or_else(|_| "unavailable".into());
                (k, v)
            })
            .collect()
    })
}
