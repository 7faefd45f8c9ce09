//! A small HTTP/1.1 server over raw TCP that misbehaves on request: it ignores ranges while
//! advertising them, declares a size it does not have, alters one byte of every range, and
//! never sends digests. xfer's own server does none of this, and nginx only the last.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
}

/// A running server; stops when dropped.
pub struct TinyServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    served: Arc<AtomicU64>,
}

impl TinyServer {
    /// Serve `data` at every path.
    pub async fn start(data: Vec<u8>, how: Misbehaviour) -> Result<Self, BoxError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let served = Arc::new(AtomicU64::new(0));
        let shared = Arc::new((data, how, Arc::clone(&served)));
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                conns.spawn(serve_connection(stream, shared.clone()));
            }
        });
        Ok(Self { addr, task, served })
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

async fn serve_connection(
    mut stream: TcpStream,
    shared: Arc<(Vec<u8>, Misbehaviour, Arc<AtomicU64>)>,
) {
    let (data, how, served) = (&shared.0, &shared.1, &shared.2);
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
        let method = head.split(' ').next().unwrap_or_default().to_string();
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
