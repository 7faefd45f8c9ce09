//! A small HTTP/1.1 server over raw TCP that misbehaves on request: it ignores ranges while
//! advertising them, declares a size it does not have, alters one byte of every range, and
//! never sends digests. xfer's own server does none of this, and nginx only the last. It
//! can also stand in for a storage whose token stops working mid-transfer, or a redirector,
//! and it keeps every request head it received.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::BoxError;

/// How the server misbehaves.
#[derive(Debug, Clone, Default)]
pub struct Misbehaviour {
    /// Answer every GET with 200 and the whole body, while HEAD says `Accept-Ranges: bytes`.
    pub ignore_ranges: bool,
    /// The size HEAD declares instead of the real one.
    pub declared_size: Option<u64>,
    /// XOR the first byte of every body with 0x01.
    pub flip_first_byte: bool,
    /// A `Digest` field value (`adler32=…`) to send with every HEAD, right or wrong.
    pub digest: Option<String>,
    /// Once this many body bytes were served, answer every request with this status, as a
    /// storage does when the token it was given expires (`(0, 401)`: from the start).
    pub refuse_after: Option<(u64, u16)>,
    /// Answer every request with `307` to this base URL plus the request's path.
    pub redirect_to: Option<String>,
    /// Hold every body until this has a permit, so that a client stays connected until the
    /// test lets it go.
    pub hold_bodies: Option<Arc<tokio::sync::Semaphore>>,
}

/// A running server; stops when dropped.
pub struct TinyServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    served: Arc<AtomicU64>,
    heads: Arc<Mutex<Vec<String>>>,
}

/// What every connection of a server shares.
struct Shared {
    data: Vec<u8>,
    how: Misbehaviour,
    served: Arc<AtomicU64>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl TinyServer {
    /// Serve `data` at every path.
    pub async fn start(data: Vec<u8>, how: Misbehaviour) -> Result<Self, BoxError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let served = Arc::new(AtomicU64::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::new(Shared {
            data,
            how,
            served: Arc::clone(&served),
            heads: Arc::clone(&heads),
        });
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                conns.spawn(serve_connection(stream, shared.clone()));
            }
        });
        Ok(Self {
            addr,
            task,
            served,
            heads,
        })
    }

    /// Every request head received so far, as sent.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("heads lock").clone()
    }

    /// Body bytes handed to clients so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for TinyServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let (data, how, served) = (&shared.data, &shared.how, &shared.served);
    let mut buf = Vec::new();
    loop {
        let Some(end) = find_head_end(&buf) else {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.len() > 64 * 1024 {
                return;
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        shared.heads.lock().expect("heads lock").push(head.clone());
        let method = head.split(' ').next().unwrap_or_default().to_string();
        let refused = how
            .refuse_after
            .filter(|(after, _)| served.load(Ordering::Relaxed) >= *after)
            .map(|(_, status)| format!("{status} Refused"));
        if let Some(answer) = refused.or_else(|| {
            how.redirect_to.as_ref().map(|base| {
                let path = head.split(' ').nth(1).unwrap_or("/");
                format!("307 Temporary Redirect\r\nLocation: {base}{path}")
            })
        }) {
            let reply = format!("HTTP/1.1 {answer}\r\nContent-Length: 0\r\n\r\n");
            if stream.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
            continue;
        }
        let range = head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("range")
                .then(|| parse_range(value.trim(), data.len() as u64))
                .flatten()
        });
        let size = data.len() as u64;
        let declared = how.declared_size.unwrap_or(size);
        let common =
            "Accept-Ranges: bytes\r\nETag: \"v1\"\r\nLast-Modified: Mon, 02 Jan 2006 15:04:05 GMT\r\n";
        let (status, extra, body) = match (method.as_str(), range) {
            ("HEAD", _) => {
                let digest = how
                    .digest
                    .as_ref()
                    .map(|d| format!("Digest: {d}\r\n"))
                    .unwrap_or_default();
                (
                    "200 OK",
                    format!("Content-Length: {declared}\r\n{digest}"),
                    None,
                )
            }
            ("GET", Some((start, end))) if !how.ignore_ranges => (
                "206 Partial Content",
                format!(
                    "Content-Length: {}\r\nContent-Range: bytes {start}-{}/{declared}\r\n",
                    end - start,
                    end - 1
                ),
                Some(&data[start as usize..end as usize]),
            ),
            ("GET", _) => (
                "200 OK",
                format!("Content-Length: {size}\r\n"),
                Some(&data[..]),
            ),
            _ => (
                "405 Method Not Allowed",
                "Content-Length: 0\r\n".into(),
                None,
            ),
        };
        let head = format!("HTTP/1.1 {status}\r\n{common}{extra}\r\n");
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        if let Some(body) = body {
            if let Some(gate) = &how.hold_bodies {
                let _ = gate.acquire().await;
            }
            let mut body = body.to_vec();
            if how.flip_first_byte {
                if let Some(b) = body.first_mut() {
                    *b ^= 0x01;
                }
            }
            if stream.write_all(&body).await.is_err() {
                return;
            }
            served.fetch_add(body.len() as u64, Ordering::Relaxed);
        }
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// `bytes=a-b` or `bytes=a-` within `size`, as a half-open range.
fn parse_range(value: &str, size: u64) -> Option<(u64, u64)> {
    let spec = value.strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let start: u64 = a.parse().ok()?;
    let end = if b.is_empty() {
        size
    } else {
        b.parse::<u64>().ok()?.checked_add(1)?.min(size)
    };
    (start < end).then_some((start, end))
}
