//! The one error type of the lab: set-up failures, each naming the namespace, device, key or
//! command involved.

use std::io;

/// Why a lab could not be started, inspected or cleaned up.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Namespaces and TUN devices need CAP_SYS_ADMIN and CAP_NET_ADMIN in the initial namespace.
    #[error(
        "the lab needs root to create network namespaces and tun devices (effective uid is {euid}); \
         run as root or under sudo"
    )]
    NotRoot { euid: u32 },
    /// `/dev/net/tun` is missing or cannot be opened.
    #[error("/dev/net/tun is not usable (is the tun module loaded?)")]
    TunUnavailable {
        #[source]
        source: io::Error,
    },
    /// A helper program (`ip`, `tc`) could not be run at all.
    #[error("cannot run `{tool}` (install iproute2)")]
    ToolMissing {
        tool: &'static str,
        #[source]
        source: io::Error,
    },
    /// A namespace with the name the lab wants is already there; the lab never reuses one.
    #[error(
        "network namespace {name} already exists; another lab may be running with prefix \
         {prefix:?}, or a crashed one left it behind (remove it with xfer_lab::cleanup({prefix:?}) \
         or `ip netns del {name}`)"
    )]
    NamespaceExists { name: String, prefix: String },
    /// A set-up command ran but failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    CommandFailed {
        command: String,
        status: String,
        stderr: String,
    },
    /// A configuration value is outside its allowed range.
    #[error("invalid {field} = {value}: allowed {allowed}")]
    InvalidConfig {
        field: &'static str,
        value: String,
        allowed: &'static str,
    },
    /// Entering a namespace or working inside it failed.
    #[error("{op} in network namespace {namespace}")]
    Netns {
        op: String,
        namespace: String,
        #[source]
        source: io::Error,
    },
    /// Reading or writing a sysctl inside a namespace failed.
    #[error("sysctl {key} = {value:?} in network namespace {namespace}")]
    Sysctl {
        key: String,
        value: String,
        namespace: String,
        #[source]
        source: io::Error,
    },
    /// Creating or configuring a TUN device failed.
    #[error("tun device {device} in network namespace {namespace}: {op}")]
    Tun {
        device: String,
        namespace: String,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// A relay or helper thread could not be started.
    #[error("cannot start thread {name}")]
    Thread {
        name: String,
        #[source]
        source: io::Error,
    },
}
