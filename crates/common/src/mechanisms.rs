//! Every speed mechanism of xfer in one registry, switched one way.
//!
//! A mechanism is something xfer does beyond plain HTTP or QUIC to go faster: a policy that
//! reads the kernel's view of a connection or the path and changes a socket, a window or a
//! request. Each is listed once in [`MECHANISMS`] with what it needs and touches, and each is
//! turned on or off the same way: `--mechanism NAME=on|off` on `xfer get` and `xfer serve`
//! ([`Switches`]). `--mechanisms` prints [`Switches::report`]; the table in `docs/tuning.md`
//! is [`markdown_table`].
//!
//! Safe defaults: a mechanism that needs privileges or changes kernel state beyond the
//! process's own sockets' buffers and options at creation (a BPF program, another socket's
//! congestion control after it is live) is off unless asked for.

use std::collections::BTreeMap;

/// Which end of a transfer runs a mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `xfer get` (and `xfer put` where it sends).
    Client,
    /// `xfer serve`.
    Server,
    /// Both; each end switches its own half.
    Both,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
            Side::Both => "both",
        }
    }

    /// Whether a mechanism of this side runs on `end` (a [`Side::Client`] or [`Side::Server`]).
    pub fn includes(self, end: Side) -> bool {
        self == Side::Both || self == end
    }
}

/// What must hold on the host before a mechanism can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Nothing.
    Nothing,
    /// `CAP_BPF` and `CAP_NET_ADMIN` (root), and a cgroup2 file system already mounted.
    BpfAndCgroup2,
    /// `bbr` in `net.ipv4.tcp_available_congestion_control`.
    BbrOffered,
}

impl Requirement {
    fn text(self) -> &'static str {
        match self {
            Requirement::Nothing => "none",
            Requirement::BpfAndCgroup2 => "CAP_BPF, CAP_NET_ADMIN, a mounted cgroup2",
            Requirement::BbrOffered => "bbr offered by the kernel",
        }
    }
}

/// One mechanism: what it is, what it needs and touches, and why it is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mechanism {
    /// The name `--mechanism NAME=on|off` takes.
    pub name: &'static str,
    pub side: Side,
    /// On unless turned off.
    pub default_on: bool,
    pub requires: Requirement,
    /// What it reads.
    pub reads: &'static str,
    /// What it changes.
    pub changes: &'static str,
    /// The commit that built it and the figure that kept it (`docs/results.md`).
    pub justification: &'static str,
}

pub const TCP_RESUME: &str = "tcp-resume";
pub const TCP_BBR: &str = "tcp-bbr";
pub const TCP_FASTOPEN: &str = "tcp-fastopen";
pub const EARLY_DATA: &str = "early-data";
pub const CAREFUL_RESUME: &str = "careful-resume";
pub const QUIC_LOSS_BOUND: &str = "quic-loss-bound";
pub const QUIC_ACK_FREQUENCY: &str = "quic-ack-frequency";
pub const WINDOW_CAP: &str = "window-cap";
pub const INITIAL_RECV_BUFFER: &str = "initial-recv-buffer";
pub const H2_LOSS_SPREAD: &str = "h2-loss-spread";
pub const PATH_MEMORY: &str = "path-memory";
pub const TAPER: &str = "taper";
pub const SPECULATE: &str = "speculate";
pub const REQUEST_AHEAD: &str = "request-ahead";
pub const ADAPTIVE_LANES: &str = "adaptive-lanes";

/// Every mechanism, servers' first.
pub const MECHANISMS: &[Mechanism] = &[
    Mechanism {
        name: TCP_RESUME,
        side: Side::Server,
        default_on: false,
        requires: Requirement::BpfAndCgroup2,
        reads: "TCP_INFO of sending connections, every 100 ms",
        changes: "loads a sock_ops BPF program into the process's cgroup; initial cwnd of a returning client's connections",
        justification: "bb24213; results.md \"TCP resume\": the second transfer skips slow start",
    },
    Mechanism {
        name: CAREFUL_RESUME,
        side: Side::Server,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "QUIC path state (BDP, min RTT) per client; TCP resume's paths when that is on",
        changes: "the congestion window a resumed QUIC connection jumps to",
        justification: "e4d518c; results.md \"Careful Resume (QUIC, 200 ms)\"",
    },
    Mechanism {
        name: TCP_BBR,
        side: Side::Both,
        default_on: true,
        requires: Requirement::BbrOffered,
        reads: "net.ipv4.tcp_available_congestion_control",
        changes: "TCP_CONGESTION of the process's new sockets, before they connect",
        justification: "72a547b; results.md \"Extra: the loss aim with cubic on every TCP sender\"",
    },
    Mechanism {
        name: TCP_FASTOPEN,
        side: Side::Both,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "the kernel's Fast Open cookie for the server",
        changes: "TCP_FASTOPEN(_CONNECT) on the process's TLS sockets",
        justification: "5725f4f; results.md \"Round trips to first byte over TCP\"",
    },
    Mechanism {
        name: EARLY_DATA,
        side: Side::Both,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "TLS 1.3 session tickets",
        changes: "a first GET/HEAD rides with the ClientHello; the server answers reads in it",
        justification: "f3d6bd1; results.md \"Round trips to first byte over TCP\"",
    },
    Mechanism {
        name: QUIC_LOSS_BOUND,
        side: Side::Both,
        // Off since issue 39's held-out matrix: at 1 % random loss it cut QUIC's goodput to
        // 0.40 of the unbounded sender's, and it gained goodput in no cell (it does cut queue
        // drops 6.5-fold at a quarter-BDP queue: docs/results.md, "Issue 39").
        default_on: false,
        requires: Requirement::Nothing,
        reads: "datagrams lost per round trip (the QUIC sender)",
        changes: "bounds BBR's window after a round trip losing over 2 %",
        justification: "eacc37b; results.md \"QUIC loss bound\"; off: \"Issue 39: the held-out matrix\"",
    },
    Mechanism {
        name: QUIC_ACK_FREQUENCY,
        side: Side::Both,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "nothing",
        changes: "asks the QUIC receiver to acknowledge every 10th packet (xfer's BBR sending); BBR keeps 20 datagrams in flight at least",
        justification: "4003f4d; results.md \"QUIC acknowledges every tenth packet\": loopback QUIC x 8 moves twice as much, 25-50 % less CPU per GiB; lab cells 0.98-1.05 x off",
    },
    Mechanism {
        name: WINDOW_CAP,
        side: Side::Client,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "TCP_INFO (RTT, bytes received) of the transfer's connections, every 20 ms",
        changes: "TCP_WINDOW_CLAMP of the process's own connections; twice a share while repairing",
        justification: "e76c51f, befac80; results.md \"Receive windows\": 3,500-13,000 instead of 119,000-152,000 retransmits per GiB",
    },
    Mechanism {
        name: INITIAL_RECV_BUFFER,
        side: Side::Client,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "net.core.rmem_max",
        changes: "SO_RCVBUF of new connections (16 MiB), then unlocked for autotuning",
        justification: "def94cb; results.md \"Receive-buffer head start\"",
    },
    Mechanism {
        name: H2_LOSS_SPREAD,
        side: Side::Client,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "tcpi_rcv_ooopack of the HTTP/2 connection",
        changes: "spreads HTTP/2 lanes over 8 connections once loss is seen",
        justification: "52751e7; results.md \"HTTP/2 under loss\": 0.98 of HTTP/1.1 x 8 at 0.01 % loss",
    },
    Mechanism {
        name: PATH_MEMORY,
        side: Side::Client,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "the path memory file (~/.cache/xfer/paths)",
        changes: "the path memory file; HTTP/2 starts spread to a lossy peer",
        justification: "64fc776; results.md \"HTTP/2 under loss: a path memory\": 911-916 vs 880-897 Mbit/s",
    },
    Mechanism {
        name: TAPER,
        side: Side::Client,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "the file's size",
        changes: "the last 8 chunks are cut into halves, quarters and eighths",
        justification: "3b529a1; results.md \"The tail\": +1.1 to +1.9 % at 50-200 ms",
    },
    Mechanism {
        name: SPECULATE,
        side: Side::Client,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "nothing",
        changes: "lanes request chunks before the size is known",
        justification: "1490c95; results.md \"Lanes that ask before the size is known\": ramp 0.80 s vs 0.97 s",
    },
    Mechanism {
        name: REQUEST_AHEAD,
        side: Side::Client,
        default_on: true,
        requires: Requirement::Nothing,
        reads: "the connection's flow-control windows",
        changes: "each lane sends its next request before its body ends",
        justification: "6707bcd; results.md \"HTTP/1.1 pipelining\": 764 to 812 Mbit/s at 200 ms",
    },
    Mechanism {
        name: ADAPTIVE_LANES,
        side: Side::Client,
        default_on: false,
        requires: Requirement::Nothing,
        reads: "goodput and tcpi_rcv_ooopack over windows of round trips",
        changes: "the number of lanes (as --lanes auto)",
        justification: "ef99416; results.md \"--lanes auto against the fixed 8, again\": 0.99-1.00 x fixed 8, so off",
    },
];

/// The registry entry called `name`.
pub fn find(name: &str) -> Option<&'static Mechanism> {
    MECHANISMS.iter().find(|m| m.name == name)
}

/// One `--mechanism NAME=on|off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    pub on: bool,
}

impl std::str::FromStr for Setting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, value) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected NAME=on or NAME=off"))?;
        let m = find(name.trim()).ok_or_else(|| {
            let names: Vec<&str> = MECHANISMS.iter().map(|m| m.name).collect();
            format!("no mechanism {name:?}; known: {}", names.join(", "))
        })?;
        let on = match value.trim() {
            "on" => true,
            "off" => false,
            other => return Err(format!("{name}={other}: expected on or off")),
        };
        Ok(Setting { name: m.name, on })
    }
}

/// What was asked of each mechanism; the rest keep their defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Switches {
    asked: BTreeMap<&'static str, bool>,
}

/// Whether a mechanism runs, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    pub on: bool,
    pub why: String,
}

impl Switches {
    /// From settings in order: a later one for the same name wins.
    pub fn new(settings: impl IntoIterator<Item = Setting>) -> Self {
        Self {
            asked: settings.into_iter().map(|s| (s.name, s.on)).collect(),
        }
    }

    /// Turn `name` off, whatever a setting asked (for the older `--no-*` flags).
    pub fn turn_off(&mut self, name: &'static str) {
        self.asked.insert(name, false);
    }

    /// Turn `name` on, whatever a setting asked (for `--lanes auto`).
    pub fn turn_on(&mut self, name: &'static str) {
        self.asked.insert(name, true);
    }

    /// Turn off each name whose flag is set (`--no-taper` and the like).
    pub fn turn_off_flagged(mut self, flags: &[(bool, &'static str)]) -> Self {
        for (_, name) in flags.iter().filter(|(set, _)| *set) {
            self.turn_off(name);
        }
        self
    }

    /// Whether `name` is asked for, or on by default. Unknown names are off.
    pub fn is_on(&self, name: &str) -> bool {
        match self.asked.get(name) {
            Some(on) => *on,
            None => find(name).is_some_and(|m| m.default_on),
        }
    }

    /// What `m` would do in this process on this host.
    pub fn activity(
        &self,
        m: &Mechanism,
        host: &dyn Fn(Requirement) -> Result<(), String>,
    ) -> Activity {
        let asked = self.asked.get(m.name).copied();
        let off = |why: String| Activity { on: false, why };
        match asked {
            Some(false) => return off("turned off (NAME=off, or a --no-* flag)".into()),
            None if !m.default_on => {
                return off(format!("not requested (--mechanism {}=on)", m.name))
            }
            _ => {}
        }
        if let Err(why) = host(m.requires) {
            return off(why);
        }
        Activity {
            on: true,
            why: if asked.is_some() {
                "requested"
            } else {
                "default"
            }
            .into(),
        }
    }

    /// The registry for one end (`Side::Client` or `Side::Server`), one line per mechanism
    /// with what runs here and why, as `--mechanisms` prints it.
    pub fn report(&self, end: Side) -> String {
        let mut out = String::new();
        for m in MECHANISMS.iter().filter(|m| m.side.includes(end)) {
            let a = self.activity(m, &host_allows);
            let state = if a.on { "on" } else { "off" };
            out.push_str(&format!(
                "{:<20} {state}: {}\n    needs: {}; reads: {}; changes: {}\n    why: {}\n",
                m.name,
                a.why,
                m.requires.text(),
                m.reads,
                m.changes,
                m.justification
            ));
        }
        out
    }
}

/// Whether this host meets `r`, or why not.
pub fn host_allows(r: Requirement) -> Result<(), String> {
    match r {
        Requirement::Nothing => Ok(()),
        Requirement::BpfAndCgroup2 => {
            let caps = effective_caps()?;
            // CAP_SYS_ADMIN (21) stands for CAP_BPF before Linux 5.8.
            let bpf = caps & (1 << 39) != 0 || caps & (1 << 21) != 0;
            if !bpf || caps & (1 << 12) == 0 {
                return Err("needs CAP_BPF and CAP_NET_ADMIN (root)".into());
            }
            let mounts = std::fs::read_to_string("/proc/self/mountinfo")
                .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
            if cgroup2_mount(&mounts).is_none() {
                return Err(
                    "no cgroup2 file system is mounted here (xfer never mounts one)".into(),
                );
            }
            Ok(())
        }
        Requirement::BbrOffered => bbr_offered(),
    }
}

fn bbr_offered() -> Result<(), String> {
    let path = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let offered = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    if offered.split_whitespace().any(|n| n == "bbr") {
        Ok(())
    } else {
        Err(format!(
            "the kernel offers no bbr ({path}: {})",
            offered.trim()
        ))
    }
}

/// The process's effective capabilities (`CapEff` of `/proc/self/status`).
fn effective_caps() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("reading /proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| "no CapEff line in /proc/self/status".into())
}

/// Where a cgroup2 file system is mounted, from `/proc/self/mountinfo`: the mount point
/// (field 5) of a line whose file system type (after ` - `) is `cgroup2`. Octal escapes in
/// the mount point (`\040` for a space) are decoded.
pub fn cgroup2_mount(mountinfo: &str) -> Option<std::path::PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let point = left.split_whitespace().nth(4)?;
        Some(std::path::PathBuf::from(unescape(point)))
    })
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The registry as the Markdown table of `docs/tuning.md`.
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| mechanism | side | default | needs | reads | changes | why (commit; figure) |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for m in MECHANISMS {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} |\n",
            m.name,
            m.side.name(),
            if m.default_on { "on" } else { "off" },
            m.requires.text(),
            m.reads,
            m.changes,
            m.justification
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str =
        "<!-- mechanisms table: generated from crates/common/src/mechanisms.rs -->\n";
    const END: &str = "<!-- end of mechanisms table -->";

    #[test]
    fn names_are_unique_and_settings_parse() {
        for (i, m) in MECHANISMS.iter().enumerate() {
            assert!(
                MECHANISMS[i + 1..].iter().all(|o| o.name != m.name),
                "{} twice",
                m.name
            );
        }
        let s: Setting = "tcp-resume=on".parse().expect("valid setting");
        assert_eq!((s.name, s.on), (TCP_RESUME, true));
        assert!("tcp-resume".parse::<Setting>().is_err());
        assert!("tcp-resume=yes".parse::<Setting>().is_err());
        assert!("nope=on"
            .parse::<Setting>()
            .is_err_and(|e| e.contains("taper")));
    }

    #[test]
    fn privileged_and_kernel_changing_mechanisms_are_off_unless_asked() {
        for m in MECHANISMS {
            if m.requires == Requirement::BpfAndCgroup2 {
                assert!(!m.default_on, "{} is on by default", m.name);
            }
        }
        let host_ok = |_: Requirement| Ok(());
        let none = Switches::default();
        let tr = find(TCP_RESUME).expect("registered");
        let a = none.activity(tr, &host_ok);
        assert!(!a.on && a.why.contains("not requested"), "{a:?}");
        let asked = Switches::new(["tcp-resume=on".parse().expect("valid")]);
        assert!(asked.is_on(TCP_RESUME));
        assert_eq!(asked.activity(tr, &host_ok).why, "requested");
        let no_caps = |_: Requirement| Err::<(), _>("needs CAP_BPF".to_string());
        let a = asked.activity(tr, &no_caps);
        assert_eq!((a.on, a.why.as_str()), (false, "needs CAP_BPF"));
        let mut off = Switches::default();
        off.turn_off(TAPER);
        assert!(!off.is_on(TAPER) && none.is_on(TAPER));
    }

    #[test]
    fn finds_the_cgroup2_mount() {
        let mi = "22 1 0:21 / /sys rw - sysfs sysfs rw\n\
                  30 22 0:26 / /sys/fs/cgroup/uni\\040fied rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(mi),
            Some(std::path::PathBuf::from("/sys/fs/cgroup/uni fied"))
        );
        assert_eq!(
            cgroup2_mount("22 1 0:21 / /sys rw - sysfs sysfs rw\n"),
            None
        );
    }

    /// The table in docs/tuning.md is this registry's; `XFER_BLESS=1` rewrites it.
    #[test]
    fn the_docs_table_is_the_registry() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/tuning.md");
        let doc = std::fs::read_to_string(&path).expect("docs/tuning.md is readable");
        let start = doc
            .find(BEGIN)
            .expect("docs/tuning.md has the table's start marker")
            + BEGIN.len();
        let end = start
            + doc[start..]
                .find(END)
                .expect("docs/tuning.md has the end marker");
        let table = markdown_table();
        if std::env::var_os("XFER_BLESS").is_some() {
            let new = format!("{}{table}{}", &doc[..start], &doc[end..]);
            std::fs::write(&path, new).expect("rewriting docs/tuning.md");
            return;
        }
        assert_eq!(
            doc[start..end],
            table,
            "docs/tuning.md's mechanism table differs from the registry; rerun with XFER_BLESS=1"
        );
    }
}
