//! [`Lab`]: the two namespaces, their TUN devices and the relay, set up together and torn down
//! together.

use std::fs::OpenOptions;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::thread::JoinHandle;

use crate::config::{LabConfig, LinkConfig};
use crate::error::LabError;
use crate::netns;
use crate::relay::stats::RelayStats;
use crate::relay::Relay;
use crate::sys::{signals, tun};

/// Name of the TUN device inside each namespace.
pub const DEVICE: &str = "xlab0";
/// Address of the server end (inside `<prefix>-srv`).
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Address of the client end (inside `<prefix>-cli`).
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const PREFIX_LEN: u8 = 24;

/// Settings read back from the namespaces after the profile was applied.
const RECORDED_SYSCTLS: &[&str] = &[
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.tcp_fastopen",
];

/// TCP/IP settings in force inside each namespace, read after the profile was applied:
/// congestion control, buffer limits, and the qdisc on the TUN device (key `qdisc`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettingsInForce {
    pub server: Vec<(String, String)>,
    pub client: Vec<(String, String)>,
    /// Profile keys that could not be applied inside the namespaces, with the reason (for
    /// example `net.core.rmem_max`, which recent kernels keep read-only outside the initial
    /// namespace). The lab never changes host-wide settings.
    pub skipped: Vec<(String, String)>,
}

impl SettingsInForce {
    /// The server-side value of `key` (settings are the same on both sides unless changed
    /// from outside).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.server
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Checks that this process can build a lab: root, `/dev/net/tun`, and `ip` from iproute2.
pub fn check_prerequisites() -> Result<(), LabError> {
    let euid = crate::sys::process::euid();
    if euid != 0 {
        return Err(LabError::NotRoot { euid });
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|source| LabError::TunUnavailable { source })?;
    netns::run("ip", &["-V"])?;
    Ok(())
}

/// Removes namespaces left by a lab with `prefix` (for example after `kill -9`), killing what
/// still runs inside them. Returns the names removed. Only the exact names a lab with this
/// prefix uses are touched.
pub fn cleanup(prefix: &str) -> Result<Vec<String>, LabError> {
    LabConfig {
        prefix: prefix.into(),
        ..LabConfig::default()
    }
    .validate()?;
    let mut removed = Vec::new();
    for name in namespace_names(prefix) {
        if netns::exists(&name) {
            netns::delete(&name)?;
            removed.push(name);
        }
    }
    Ok(removed)
}

fn namespace_names(prefix: &str) -> [String; 2] {
    [format!("{prefix}-srv"), format!("{prefix}-cli")]
}

/// A namespace this lab created; removed when dropped.
#[derive(Debug)]
struct OwnedNamespace {
    name: String,
    _signal: Option<signals::Registration>,
}

impl OwnedNamespace {
    fn create(name: &str, prefix: &str, on_signal: bool) -> Result<Self, LabError> {
        if netns::exists(name) {
            return Err(LabError::NamespaceExists {
                name: name.into(),
                prefix: prefix.into(),
            });
        }
        netns::add(name).map_err(|e| {
            if netns::exists(name) {
                // Lost a race with someone else creating it: theirs, not ours to remove.
                LabError::NamespaceExists {
                    name: name.into(),
                    prefix: prefix.into(),
                }
            } else {
                e
            }
        })?;
        Ok(Self {
            name: name.into(),
            _signal: on_signal.then(|| signals::register(&netns::path(name))),
        })
    }

    fn remove(&mut self) -> Result<(), LabError> {
        let name = std::mem::take(&mut self.name);
        if name.is_empty() {
            return Ok(());
        }
        netns::delete(&name)
    }
}

impl Drop for OwnedNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        if let Err(e) = self.remove() {
            tracing::error!(namespace = %name, error = %e, "cannot remove lab namespace");
        }
    }
}

/// A running emulated link between two network namespaces.
///
/// The server side lives in namespace `<prefix>-srv` at [`SERVER_ADDR`], the client side in
/// `<prefix>-cli` at [`CLIENT_ADDR`]; each has one TUN device ([`DEVICE`]) and nothing else but
/// loopback, so traffic can only go to the other side. Dropping the lab stops the relay, kills
/// anything still running inside the namespaces and removes them.
pub struct Lab {
    config: LabConfig,
    relay: Option<Relay>,
    settings: SettingsInForce,
    server: OwnedNamespace,
    client: OwnedNamespace,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("server", &self.server.name)
            .field("client", &self.client.name)
            .field("config", &self.config)
            .finish()
    }
}

impl Lab {
    /// Creates the namespaces and devices, applies the host profile and starts the relay.
    /// Anything created before a failure is removed again.
    pub fn start(config: LabConfig) -> Result<Lab, LabError> {
        config.validate()?;
        check_prerequisites()?;
        let [srv_name, cli_name] = namespace_names(&config.prefix);
        let on_signal = config.cleanup_on_signal;
        let server = OwnedNamespace::create(&srv_name, &config.prefix, on_signal)?;
        let client = OwnedNamespace::create(&cli_name, &config.prefix, on_signal)?;

        let (server_tun, skipped) = setup_side(&srv_name, SERVER_ADDR, &config)?;
        let (client_tun, _) = setup_side(&cli_name, CLIENT_ADDR, &config)?;
        for (key, why) in &skipped {
            tracing::warn!(%key, %why, "profile setting not applied");
        }
        let settings = SettingsInForce {
            server: read_settings(&srv_name)?,
            client: read_settings(&cli_name)?,
            skipped,
        };
        tracing::info!(
            server = %srv_name,
            client = %cli_name,
            rate_bps = config.link.rate_bps,
            rtt = ?config.link.rtt,
            profile = %config.profile.name,
            "lab up"
        );
        let relay = Relay::start(
            server_tun,
            client_tun,
            &config.link,
            &config.client_to_server_link(),
            config.offload,
            config.realtime,
        )?;
        Ok(Lab {
            config,
            relay: Some(relay),
            settings,
            server,
            client,
        })
    }

    /// The configuration the lab runs with.
    pub fn config(&self) -> &LabConfig {
        &self.config
    }

    /// The server-to-client link.
    pub fn server_to_client(&self) -> &LinkConfig {
        &self.config.link
    }

    /// The server's address, reachable from the client namespace.
    pub fn server_addr(&self) -> IpAddr {
        IpAddr::V4(SERVER_ADDR)
    }

    /// The client's address, reachable from the server namespace.
    pub fn client_addr(&self) -> IpAddr {
        IpAddr::V4(CLIENT_ADDR)
    }

    /// Name of the server namespace (`<prefix>-srv`).
    pub fn server_namespace(&self) -> &str {
        &self.server.name
    }

    /// Name of the client namespace (`<prefix>-cli`).
    pub fn client_namespace(&self) -> &str {
        &self.client.name
    }

    /// TCP/IP settings read from the namespaces after the profile was applied.
    pub fn settings_in_force(&self) -> &SettingsInForce {
        &self.settings
    }

    /// `ip netns exec <prefix>-srv <program>`: add arguments and spawn as usual. Children are
    /// killed when the lab is dropped if they still run.
    pub fn command_in_server(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        exec_in(&self.server.name, program)
    }

    /// As [`Lab::command_in_server`], with a cgroup2 file system mounted on `/sys/fs/cgroup`
    /// first: `ip netns exec` remounts `/sys` without one, and `xfer serve` never mounts file
    /// systems itself, so its TCP resume (a BPF program linked to its cgroup) needs the lab,
    /// its operator here, to provide one. The mount lives in the command's own mount
    /// namespace and goes with it.
    pub fn command_in_server_with_cgroup2(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = exec_in(&self.server.name, "sh");
        cmd.args([
            "-c",
            "mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec \"$@\"",
            "sh",
        ])
        .arg(program);
        cmd
    }

    /// `ip netns exec <prefix>-cli <program>`.
    pub fn command_in_client(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        exec_in(&self.client.name, program)
    }

    /// Runs `f` on a new thread inside the server namespace; sockets it creates belong to that
    /// namespace for their whole life, even when used from other threads.
    pub fn spawn_in_server<T, F>(&self, f: F) -> Result<JoinHandle<Result<T, LabError>>, LabError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        netns::spawn_in(&self.server.name, "lab-server".into(), f)
    }

    /// Runs `f` on a new thread inside the client namespace.
    pub fn spawn_in_client<T, F>(&self, f: F) -> Result<JoinHandle<Result<T, LabError>>, LabError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        netns::spawn_in(&self.client.name, "lab-client".into(), f)
    }

    /// Counters of both relay directions and the relay's CPU time so far.
    pub fn relay_stats(&self) -> RelayStats {
        self.relay.as_ref().map(Relay::stats).unwrap_or_default()
    }

    /// Stops the relay and removes the namespaces, reporting failures (dropping does the same
    /// but can only log them). Returns the final relay statistics.
    pub fn shutdown(mut self) -> Result<RelayStats, LabError> {
        let stats = self.stop_relay();
        self.server.remove()?;
        self.client.remove()?;
        Ok(stats)
    }

    fn stop_relay(&mut self) -> RelayStats {
        match self.relay.take() {
            Some(mut relay) => {
                relay.stop();
                relay.stats()
            }
            None => RelayStats::default(),
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // The relay holds the TUN descriptors; closing them first removes the devices, so they
        // cannot fall back into the initial namespace when their namespace goes away.
        self.stop_relay();
        // The namespaces are removed by their own Drop right after this.
    }
}

fn exec_in(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]).arg(program);
    cmd
}

/// Creates and configures the TUN device of one side; returns its descriptor and the profile
/// settings that had to be skipped.
fn setup_side(
    ns: &str,
    addr: Ipv4Addr,
    config: &LabConfig,
) -> Result<(std::os::fd::OwnedFd, Vec<(String, String)>), LabError> {
    let offload = config.offload;
    let fd = netns::run_in(ns, move || tun::open(DEVICE, offload))?.map_err(|(op, source)| {
        LabError::Tun {
            device: DEVICE.into(),
            namespace: ns.into(),
            op,
            source,
        }
    })?;
    let cidr = format!("{addr}/{PREFIX_LEN}");
    netns::run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
    netns::run("ip", &["-n", ns, "addr", "add", &cidr, "dev", DEVICE])?;
    netns::run(
        "ip",
        &["-n", ns, "link", "set", "dev", DEVICE, "mtu", "1500", "up"],
    )?;
    let mut skipped = netns::write_sysctls(ns, &config.profile.sysctls)?;
    if let Some(qdisc) = &config.profile.qdisc {
        let result = netns::run(
            "tc",
            &["-n", ns, "qdisc", "replace", "dev", DEVICE, "root", qdisc],
        );
        match result {
            // Kernels built without the qdisc: TCP still paces internally (BBR always does).
            Err(LabError::CommandFailed { stderr, .. }) if stderr.contains("unknown") => {
                skipped.push((
                    format!("qdisc {qdisc}"),
                    format!("not available in this kernel ({stderr})"),
                ));
            }
            other => {
                other?;
            }
        }
    }
    Ok((fd, skipped))
}

fn read_settings(ns: &str) -> Result<Vec<(String, String)>, LabError> {
    let mut settings = netns::read_sysctls(ns, RECORDED_SYSCTLS)?;
    let qdisc = netns::run("tc", &["-n", ns, "qdisc", "show", "dev", DEVICE])
        .ok()
        .and_then(|out| {
            out.lines()
                .find(|l| l.contains(" root"))
                .or_else(|| out.lines().next())
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .unwrap_or_else(|| "unknown".into());
    settings.push(("qdisc".into(), qdisc));
    Ok(settings)
}
