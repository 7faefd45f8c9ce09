//! `xfer serve` with its defaults, run as root, changes no kernel state it was not asked to:
//! it holds no BPF program, link or map, adds no mount, and every connection it serves keeps
//! the congestion control it was accepted with while a download runs. With
//! `--mechanism tcp-resume=on` the program is there, so the check can see one. And
//! `--mechanisms` on both ends lists every mechanism of the registry.
//!
//! Needs root (as an operator would run a server on port 443) and `ss` (iproute2). Without
//! them the test prints why and passes, except under CI=true, where it fails.

use std::io::Read as _;
use std::process::Command;
use std::time::{Duration, Instant};

use xfer::crates::common::mechanisms::{Side, MECHANISMS};

use crate::serve_signal::{get, start_serve_with};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn gate(test: &str) -> bool {
    xfer_test_support::gate::require_root(test)
        && xfer_test_support::gate::require_program("ss", &[], "iproute2").is_some()
}

/// What the open descriptors of `pid` are that belong to BPF (`anon_inode:bpf-prog`,
/// `bpf-link`, `bpf-map`).
fn bpf_fds(pid: u32) -> Vec<String> {
    let dir = format!("/proc/{pid}/fd");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {dir}: {e}"));
    entries
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .filter(|t| t.contains("bpf"))
        .collect()
}

/// Mount points of a `mountinfo` (field 5), sorted.
fn mounts(mountinfo: &str) -> Vec<String> {
    // Other tests of this binary add network namespaces meanwhile (`ip netns add` bind-mounts
    // them under /run/netns): those are not the server's doing. Everything else counts.
    let mut v: Vec<String> = mountinfo
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4).map(String::from))
        .filter(|point| !point.starts_with("/run/netns/"))
        .collect();
    v.sort();
    v
}

/// The congestion control names `ss` shows for established TCP connections from `port`.
fn served_congestion(port: u16) -> Vec<String> {
    let out = Command::new("ss")
        .args(["-tinH", "state", "established"])
        .arg(format!("( sport = :{port} )"))
        .output()
        .expect("ss runs");
    let offered = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default();
    let names: Vec<&str> = offered.split_whitespace().chain(["reno"]).collect();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| names.contains(w))
        .map(String::from)
        .collect()
}

#[test]
fn serve_with_defaults_loads_no_bpf_mounts_nothing_and_keeps_congestion() -> TestResult {
    if !gate("safe defaults test") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let before = mounts(&std::fs::read_to_string("/proc/self/mountinfo")?);
    let (server, addr, lines) = start_serve_with(dir.path(), &["--plain"], " at http://")?;
    let pid = server.0.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    let running = loop {
        let line = lines.recv_timeout(deadline.saturating_duration_since(Instant::now()))?;
        if let Some(names) = line.strip_prefix("mechanisms on: ") {
            break names.to_string();
        }
    };
    assert!(
        !running.split(", ").any(|n| n == "tcp-resume"),
        "tcp-resume runs by default: {running}"
    );
    let port: u16 = addr.rsplit(':').next().ok_or("no port")?.parse()?;

    // A download the test holds open: read a little, look at the server's sockets, read on.
    let size = 256u64 << 20;
    let (mut body, length) = get(&addr, &format!("/.xfer/synthetic?size={size}&seed=3"))?;
    assert_eq!(length, size);
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0u64;
    let mut seen = Vec::new();
    while read < size {
        let n = body.read(&mut buf)?;
        assert!(n > 0, "the body ended at {read} of {size} bytes");
        read += n as u64;
        if seen.len() < 16 && read % (16 << 20) < n as u64 {
            seen.extend(served_congestion(port));
        }
    }
    assert!(!seen.is_empty(), "ss showed no served connection");
    // The server's choice at accept (tcp-bbr): bbr where the kernel offers it, else the
    // kernel's default; never changed while the connection lives.
    let proc = |key: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{key}")).unwrap_or_default()
    };
    let expected = if proc("tcp_available_congestion_control")
        .split_whitespace()
        .any(|c| c == "bbr")
    {
        "bbr".to_string()
    } else {
        proc("tcp_congestion_control").trim().to_string()
    };
    assert!(
        seen.iter().all(|c| *c == expected),
        "a served connection's congestion control was not {expected} throughout: {seen:?}"
    );

    assert_eq!(
        bpf_fds(pid),
        Vec::<String>::new(),
        "xfer serve with defaults holds BPF objects"
    );
    let after = mounts(&std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?);
    assert_eq!(before, after, "xfer serve with defaults changed the mounts");
    drop(server);

    // The opt-in: where this host allows it, the program is linked, and the check above sees it.
    let listing = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .args(["serve", "--mechanisms", "--mechanism", "tcp-resume=on"])
        .output()?;
    let listing = String::from_utf8(listing.stdout)?;
    let line = listing
        .lines()
        .find(|l| l.starts_with("tcp-resume"))
        .ok_or("no tcp-resume line")?;
    if !line.contains("on: requested") {
        eprintln!("tcp-resume cannot run here, so its program is not checked: {line}");
        return Ok(());
    }
    let (server, _addr, lines) = start_serve_with(
        dir.path(),
        &["--plain", "--mechanism", "tcp-resume=on"],
        " at http://",
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let announced = loop {
        let line = lines.recv_timeout(deadline.saturating_duration_since(Instant::now()))?;
        if line.starts_with("mechanisms on: ") {
            break line;
        }
    };
    assert!(announced.contains("tcp-resume"), "{announced}");
    let fds = bpf_fds(server.0.id());
    assert!(
        fds.iter()
            .any(|f| f.contains("bpf-link") || f.contains("bpf-prog")),
        "tcp-resume=on but no BPF program or link among {fds:?}"
    );
    let after = mounts(&std::fs::read_to_string(format!(
        "/proc/{}/mountinfo",
        server.0.id()
    ))?);
    assert_eq!(before, after, "tcp-resume=on changed the mounts");
    Ok(())
}

#[test]
fn both_ends_list_every_mechanism() -> TestResult {
    let list = |cmd: &str| -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        let o = Command::new(env!("CARGO_BIN_EXE_xfer"))
            .args([cmd, "--mechanisms"])
            .output()?;
        assert!(o.status.success(), "xfer {cmd} --mechanisms failed");
        Ok(String::from_utf8(o.stdout)?)
    };
    let (client, server) = (list("get")?, list("serve")?);
    for m in MECHANISMS {
        for (end, out) in [(Side::Client, &client), (Side::Server, &server)] {
            let line = out
                .lines()
                .find(|l| l.split_whitespace().next() == Some(m.name));
            if m.side.includes(end) {
                let line =
                    line.unwrap_or_else(|| panic!("{end:?} does not list {}:\n{out}", m.name));
                assert!(line.contains(" on: ") || line.contains(" off: "), "{line}");
            } else {
                assert!(line.is_none(), "{end:?} lists {}, which is not its", m.name);
            }
        }
    }
    assert!(
        server.contains("tcp-resume           off: not requested"),
        "{server}"
    );
    Ok(())
}
