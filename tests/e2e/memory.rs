//! Finding 1: server memory under stalled HTTP/2 streams. A real `xfer serve` process faces
//! many connections whose streams the client never lets send (it opens the connection window
//! wide but never a stream's), while a normal client downloads a file. The server's peak RSS
//! stays under the bound docs/security.md states for its memory budget, the normal download
//! is byte-identical, and every stalled stream is reset after the stall timeout.
//!
//! ```text
//!   stalling client × CONNECTIONS ──h2c, STREAMS streams each, windows shut──►┐
//!                                                                             xfer serve (child)
//!   xfer get (child) ──h2c──────────────────── normal download ──────────────►┘  VmHWM read from /proc
//! ```

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::support::{
    free_port, rss_bound_kib, rss_kib, run_xfer, sha256_file, start_server, write_random_file,
    xfer_bin, BoxError, ChildGuard, TestResult, MIB,
};

/// Stalling connections and streams on each: 6 × 64 streams would hold about 290 MiB without
/// a budget (three 256 KiB blocks each).
const CONNECTIONS: usize = 6;
const STREAMS: u32 = 64;
/// The server's budget in this test, and its stall timeout.
const BUDGET_MIB: u64 = 32;
const STALL_SECS: u64 = 3;

const FRAME_DATA: u8 = 0x0;
const FRAME_HEADERS: u8 = 0x1;
const FRAME_RST_STREAM: u8 = 0x3;
const FRAME_SETTINGS: u8 = 0x4;
const FRAME_PING: u8 = 0x6;
const FRAME_GOAWAY: u8 = 0x7;
const FRAME_WINDOW_UPDATE: u8 = 0x8;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_ACK: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A GET in HPACK without the dynamic table or Huffman: indexed `:method GET` and
/// `:scheme http`, literal `:path` and `:authority` with indexed names.
fn get_headers(authority: &str, path: &str) -> Vec<u8> {
    let mut h = vec![0x82, 0x86];
    for (index, value) in [(4u8, path), (1u8, authority)] {
        assert!(value.len() < 127, "short values only");
        h.push(index);
        h.push(value.len() as u8);
        h.extend_from_slice(value.as_bytes());
    }
    h
}

/// What a stalling connection saw.
#[derive(Debug, Default)]
struct Seen {
    data_bytes: u64,
    reset: HashSet<u32>,
    goaway: bool,
}

/// One client that opens `STREAMS` streams for a large resource, lets the connection window
/// grow but never a stream's, answers SETTINGS and PING (so the connection itself is alive),
/// and reports each reset stream.
async fn stalling_connection(
    addr: SocketAddr,
    path: String,
    events: mpsc::UnboundedSender<(usize, u32, u8)>,
    id: usize,
) -> Result<Seen, BoxError> {
    let mut tcp = TcpStream::connect(addr).await?;
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(FRAME_SETTINGS, 0, 0, &[]));
    out.extend(frame(
        FRAME_WINDOW_UPDATE,
        0,
        0,
        &(1u32 << 30).to_be_bytes(),
    ));
    for i in 0..STREAMS {
        let headers = get_headers(&addr.to_string(), &path);
        out.extend(frame(
            FRAME_HEADERS,
            FLAG_END_STREAM | FLAG_END_HEADERS,
            1 + 2 * i,
            &headers,
        ));
    }
    tcp.write_all(&out).await?;
    let mut seen = Seen::default();
    let mut head = [0u8; 9];
    let mut payload = Vec::new();
    loop {
        if tcp.read_exact(&mut head).await.is_err() {
            return Ok(seen);
        }
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        payload.resize(len, 0);
        tcp.read_exact(&mut payload).await?;
        match kind {
            FRAME_DATA => seen.data_bytes += len as u64,
            FRAME_SETTINGS if flags & FLAG_ACK == 0 => {
                tcp.write_all(&frame(FRAME_SETTINGS, FLAG_ACK, 0, &[]))
                    .await?;
            }
            FRAME_PING if flags & FLAG_ACK == 0 => {
                tcp.write_all(&frame(FRAME_PING, FLAG_ACK, 0, &payload))
                    .await?;
            }
            FRAME_RST_STREAM => {
                seen.reset.insert(stream);
                let _ = events.send((id, stream, kind));
            }
            FRAME_GOAWAY => {
                seen.goaway = true;
                let _ = events.send((id, stream, kind));
            }
            FRAME_HEADERS => {
                let _ = events.send((id, stream, kind));
            }
            _ => {}
        }
    }
}

fn spawn_server(root: &Path, addr: SocketAddr) -> Result<ChildGuard, BoxError> {
    let mut cmd = Command::new(xfer_bin());
    cmd.arg("serve")
        .arg(root)
        .args(["--plain", "--listen", &addr.to_string()])
        .args(["--memory-budget", &format!("{BUDGET_MIB}MiB")])
        .args(["--stall-timeout", &format!("{STALL_SECS}s")]);
    start_server(cmd, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_http2_streams_stay_within_the_memory_budget() -> TestResult {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root)?;
    let size = 16 * MIB;
    let expected = write_random_file(&root.join("normal.bin"), size, 41)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let server = spawn_server(&root, addr)?;
    let pid = server.0.id();
    let (baseline, _) = rss_kib(pid)?;

    let (tx, mut events) = mpsc::unbounded_channel();
    let mut stallers = Vec::new();
    for id in 0..CONNECTIONS {
        let path = "/.xfer/synthetic?size=1G&seed=7".to_string();
        stallers.push(tokio::spawn(stalling_connection(
            addr,
            path,
            tx.clone(),
            id,
        )));
    }
    drop(tx);
    // Every stalled stream has its response head: the server is holding its blocks now.
    let total = CONNECTIONS * STREAMS as usize;
    let mut heads = HashSet::new();
    let mut resets = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while heads.len() < total {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some((id, stream, kind))) = tokio::time::timeout(left, events.recv()).await else {
            return Err(format!("only {} of {total} stalled streams answered", heads.len()).into());
        };
        match kind {
            FRAME_HEADERS => heads.insert((id, stream)),
            FRAME_RST_STREAM => resets.insert((id, stream)),
            _ => return Err(format!("connection {id} was sent GOAWAY").into()),
        };
    }

    // Meanwhile a normal client downloads, over the same protocol.
    let dest = dir.path().join("normal.copy");
    let url = format!("http://{addr}/normal.bin");
    let out = run_xfer(vec![
        "get".into(),
        url,
        "-o".into(),
        dest.display().to_string(),
        "--protocol".into(),
        "http2".into(),
    ])
    .await?;
    assert!(
        out.status.success(),
        "the normal download failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sha256_file(&dest)?, expected, "normal download differs");

    let (peak, now) = rss_kib(pid)?;
    eprintln!("server RSS with {total} stalled streams: peak {peak} KiB, now {now} KiB");

    // Every stalled stream is reset within a few stall timeouts.
    let deadline = Instant::now() + Duration::from_secs(STALL_SECS * 10);
    while resets.len() < total {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some((id, stream, kind))) = tokio::time::timeout(left, events.recv()).await else {
            return Err(format!(
                "only {} of {total} stalled streams were reset within {:?}",
                resets.len(),
                Duration::from_secs(STALL_SECS * 10)
            )
            .into());
        };
        if kind == FRAME_RST_STREAM {
            resets.insert((id, stream));
        }
    }

    let (peak, now) = rss_kib(pid)?;
    // The stalling connections and the normal client's one.
    let bound = rss_bound_kib(BUDGET_MIB, CONNECTIONS as u64 + 1);
    eprintln!(
        "server RSS: {baseline} KiB at start, peak {peak} KiB, {now} KiB after the resets; bound {bound} KiB"
    );
    assert!(
        peak <= bound,
        "server peak RSS {peak} KiB exceeds the bound of {bound} KiB (budget {BUDGET_MIB} MiB)"
    );
    for s in stallers {
        s.abort();
    }
    drop(server);
    Ok(())
}
