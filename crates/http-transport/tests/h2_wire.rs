//! Proof on the wire that the HTTP/2 knobs reach the protocol: a relay between the client
//! transport (h2c) and the xfer server parses every HTTP/2 frame header in both directions and
//! records SETTINGS, DATA frame sizes and WINDOW_UPDATE frames.
//!
//! ```text
//!   HttpTransport ──h2c──► relay (frame scanner) ──h2c──► HttpServer (synthetic resource)
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::loopback::Loopback;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use xfer_core::transport::{RangeRequest, Transport};
use xfer_http::{Http2Config, HttpClientConfig, HttpTransport, HttpVersion};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const PREFACE_LEN: usize = 24;
const FRAME_DATA: u8 = 0x0;
const FRAME_SETTINGS: u8 = 0x4;
const FRAME_WINDOW_UPDATE: u8 = 0x8;
const FLAG_ACK: u8 = 0x1;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

/// What one direction of a connection carried.
#[derive(Debug, Default, Clone)]
struct WireLog {
    /// Each non-ACK SETTINGS frame, as (identifier, value) pairs.
    settings: Vec<Vec<(u16, u32)>>,
    /// Payload length of each DATA frame.
    data_frames: Vec<u32>,
    /// (stream id, increment) of each WINDOW_UPDATE frame.
    window_updates: Vec<(u32, u32)>,
}

impl WireLog {
    fn setting(&self, id: u16) -> Option<u64> {
        self.settings
            .first()
            .and_then(|s| s.iter().find(|(i, _)| *i == id).map(|(_, v)| u64::from(*v)))
    }

    fn data_bytes(&self) -> u64 {
        self.data_frames.iter().map(|&l| u64::from(l)).sum()
    }
}

/// Incremental HTTP/2 frame-header parser: keeps only SETTINGS and WINDOW_UPDATE payloads.
struct FrameScanner {
    preface_left: usize,
    header: [u8; 9],
    header_len: usize,
    payload_left: usize,
    kind: u8,
    flags: u8,
    stream: u32,
    keep: Vec<u8>,
}

impl FrameScanner {
    fn new(client_side: bool) -> Self {
        Self {
            preface_left: if client_side { PREFACE_LEN } else { 0 },
            header: [0; 9],
            header_len: 0,
            payload_left: 0,
            kind: 0,
            flags: 0,
            stream: 0,
            keep: Vec::new(),
        }
    }

    fn feed(&mut self, mut buf: &[u8], log: &mut WireLog) {
        while !buf.is_empty() {
            if self.preface_left > 0 {
                let n = self.preface_left.min(buf.len());
                self.preface_left -= n;
                buf = &buf[n..];
                continue;
            }
            if self.header_len < 9 {
                let n = (9 - self.header_len).min(buf.len());
                self.header[self.header_len..self.header_len + n].copy_from_slice(&buf[..n]);
                self.header_len += n;
                buf = &buf[n..];
                if self.header_len == 9 {
                    let h = self.header;
                    self.payload_left =
                        (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
                    self.kind = h[3];
                    self.flags = h[4];
                    self.stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    self.keep.clear();
                    if self.kind == FRAME_DATA {
                        log.data_frames.push(self.payload_left as u32);
                    }
                    if self.payload_left == 0 {
                        self.frame_done(log);
                    }
                }
                continue;
            }
            let n = self.payload_left.min(buf.len());
            if matches!(self.kind, FRAME_SETTINGS | FRAME_WINDOW_UPDATE) {
                self.keep.extend_from_slice(&buf[..n]);
            }
            self.payload_left -= n;
            buf = &buf[n..];
            if self.payload_left == 0 {
                self.frame_done(log);
            }
        }
    }

    fn frame_done(&mut self, log: &mut WireLog) {
        match self.kind {
            FRAME_SETTINGS if self.flags & FLAG_ACK == 0 => {
                let pairs = self
                    .keep
                    .chunks_exact(6)
                    .map(|c| {
                        (
                            u16::from_be_bytes([c[0], c[1]]),
                            u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                        )
                    })
                    .collect();
                log.settings.push(pairs);
            }
            FRAME_WINDOW_UPDATE if self.keep.len() == 4 => {
                let inc =
                    u32::from_be_bytes([self.keep[0], self.keep[1], self.keep[2], self.keep[3]])
                        & 0x7fff_ffff;
                log.window_updates.push((self.stream, inc));
            }
            _ => {}
        }
        self.header_len = 0;
    }
}

#[derive(Default)]
struct Logs {
    from_client: WireLog,
    from_server: WireLog,
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut scanner: FrameScanner,
    logs: Arc<Mutex<Logs>>,
    client_side: bool,
) {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Ok(mut l) = logs.lock() {
            let log = if client_side {
                &mut l.from_client
            } else {
                &mut l.from_server
            };
            scanner.feed(&buf[..n], log);
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Accept one client connection and relay it to `upstream`, logging frames.
async fn start_relay(
    upstream: SocketAddr,
) -> Result<(SocketAddr, Arc<Mutex<Logs>>), Box<dyn std::error::Error + Send + Sync>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let logs = Arc::new(Mutex::new(Logs::default()));
    let l = logs.clone();
    tokio::spawn(async move {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        let Ok(server) = TcpStream::connect(upstream).await else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (cr, cw) = client.into_split();
        let (sr, sw) = server.into_split();
        tokio::spawn(pump(cr, sw, FrameScanner::new(true), l.clone(), true));
        tokio::spawn(pump(sr, cw, FrameScanner::new(false), l, false));
    });
    Ok((addr, logs))
}

struct Server {
    server: Loopback,
    _root: tempfile::TempDir,
}

async fn start_server(
    h2: &Http2Config,
) -> Result<Server, Box<dyn std::error::Error + Send + Sync>> {
    let root = tempfile::tempdir()?;
    let mut cfg = crate::loopback::config(root.path());
    cfg.http2 = h2.clone();
    Ok(Server {
        server: Loopback::start(cfg).await?,
        _root: root,
    })
}

/// Fetch `size` bytes of the synthetic resource through the relay with `h2` on both ends and
/// return what each side sent.
async fn transfer(
    h2: Http2Config,
    size: u64,
) -> Result<Logs, Box<dyn std::error::Error + Send + Sync>> {
    let server = start_server(&h2).await?;
    let (relay, logs) = start_relay(server.server.addr).await?;
    let url = format!("http://{relay}/.xfer/synthetic?size={size}&seed=7");
    let t = HttpTransport::new(
        &url,
        HttpClientConfig {
            version: HttpVersion::Http2,
            http2: h2,
            ..HttpClientConfig::default()
        },
    )?;
    let info = t.stat().await?;
    assert_eq!(info.size, size);
    let mut lane = t.open_lane(0).await?;
    let req = RangeRequest {
        range: 0..size,
        expected_size: size,
        want_digest: false,
        validator: info.range_validator().map(str::to_string),
        whole: false,
    };
    let mut body = lane.fetch(&req).await?;
    let mut got = 0u64;
    while let Some(b) = body.next_data().await? {
        got += b.len() as u64;
    }
    assert_eq!(got, size);
    drop(body);
    drop(lane);
    drop(t);
    let logs = logs.lock().map_err(|_| "relay log poisoned")?;
    Ok(Logs {
        from_client: logs.from_client.clone(),
        from_server: logs.from_server.clone(),
    })
}

const MIB: u64 = 1 << 20;

#[tokio::test]
async fn client_settings_and_frame_sizes_follow_config() -> TestResult {
    let cfg = Http2Config::default();
    let logs = transfer(cfg.clone(), 8 * MIB).await?;
    let c = &logs.from_client;
    // (a) The client's SETTINGS advertise the configured frame size and stream window.
    assert_eq!(c.setting(SETTINGS_MAX_FRAME_SIZE), Some(cfg.max_frame_size));
    assert_eq!(
        c.setting(SETTINGS_INITIAL_WINDOW_SIZE),
        Some(cfg.stream_window)
    );
    // ... and the connection window is raised to the configured size right away.
    let conn_raise: u64 = c
        .window_updates
        .iter()
        .take_while(|(stream, _)| *stream == 0)
        .map(|(_, inc)| u64::from(*inc))
        .next()
        .unwrap_or(0);
    assert_eq!(conn_raise + 65_535, cfg.connection_window);
    // (b) With 1 MiB frames allowed, the server sends DATA frames beyond 16 KiB.
    let s = &logs.from_server;
    assert!(s.data_bytes() >= 8 * MIB);
    let big = s.data_frames.iter().filter(|&&l| l > 16 * 1024).count();
    assert!(
        big > 0,
        "no DATA frame above 16 KiB: {:?}",
        &s.data_frames[..s.data_frames.len().min(20)]
    );
    assert!(s
        .data_frames
        .iter()
        .all(|&l| u64::from(l) <= cfg.max_frame_size));
    Ok(())
}

#[tokio::test]
async fn spec_default_settings_keep_frames_at_16k() -> TestResult {
    let cfg = Http2Config::hyper_defaults();
    let logs = transfer(cfg.clone(), 2 * MIB).await?;
    let c = &logs.from_client;
    // The spec defaults may be left out of SETTINGS; if present they must be the defaults.
    assert!(matches!(
        c.setting(SETTINGS_MAX_FRAME_SIZE),
        None | Some(16_384)
    ));
    assert!(matches!(
        c.setting(SETTINGS_INITIAL_WINDOW_SIZE),
        None | Some(65_535)
    ));
    let s = &logs.from_server;
    assert!(s.data_bytes() >= 2 * MIB);
    assert!(s.data_frames.iter().all(|&l| l <= 16_384));
    Ok(())
}

/// (c) Large windows cut flow-control chatter: WINDOW_UPDATE frames per MiB received drop at
/// least tenfold against the spec-default 64 KiB windows for the same 64 MiB transfer.
#[tokio::test]
async fn large_windows_cut_window_updates_tenfold() -> TestResult {
    let size = 64 * MIB;
    let tuned = transfer(Http2Config::default(), size).await?;
    let spec = transfer(Http2Config::hyper_defaults(), size).await?;
    let per_mib = |l: &Logs| {
        l.from_client.window_updates.len() as f64 / (l.from_server.data_bytes() as f64 / MIB as f64)
    };
    let (t, s) = (per_mib(&tuned), per_mib(&spec));
    eprintln!(
        "window updates per MiB: tuned {t:.3} ({} frames), spec defaults {s:.3} ({} frames)",
        tuned.from_client.window_updates.len(),
        spec.from_client.window_updates.len()
    );
    assert!(
        spec.from_client.window_updates.len() > 100,
        "spec defaults must need many updates"
    );
    assert!(s >= 10.0 * t, "tuned {t:.3}/MiB vs spec {s:.3}/MiB");
    Ok(())
}
