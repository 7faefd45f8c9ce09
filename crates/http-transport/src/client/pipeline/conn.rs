//! One pipelined HTTP/1.1 connection: requests are written as they come, each numbered; answers
//! are read strictly in that order, the next head only once the body before it has ended.
//!
//! `turn` holds the number of the response to be read next, or [`BROKEN`] once the stream can no
//! longer be trusted to line up with the requests (a body abandoned part-way, a framing error,
//! the server closing): every request still waiting then learns it was lost, never by polling.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, ReadHalf, WriteHalf};
use tokio::sync::{watch, Mutex, OwnedMutexGuard};
use xfer_core::TransferError;

use crate::client::connect::{Io, RawIo, Setup};
use crate::client::pipeline::wire::{self, ResponseHead};
use crate::client::stats::SocketRecord;
use crate::client::target::Origin;

/// `turn` once the connection is out of step.
const BROKEN: u64 = u64::MAX;
/// Bytes asked of the socket per read: fewer wake-ups per byte at high rates.
const READ_CHUNK: usize = 1 << 20;

/// Why a request got no answer. Such a request never reached the server's handler as far as we
/// know (or the answer was lost with the connection): a `GET` may be sent again elsewhere.
#[derive(Debug)]
pub(crate) struct Lost(pub String);

/// A hyper connection's stream, taken over, with what the connection knew of itself.
pub(crate) struct Taken {
    pub raw: RawIo,
    pub setup: Setup,
    pub record: Arc<std::sync::Mutex<SocketRecord>>,
}

pub(crate) struct Reader {
    half: ReadHalf<Box<dyn Io>>,
    pub buf: BytesMut,
}

impl Reader {
    /// Read more bytes into the buffer; `Ok(0)` at the end of the stream.
    pub async fn fill(&mut self) -> std::io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
        self.half.read_buf(&mut self.buf).await
    }
}

struct Writer {
    half: WriteHalf<Box<dyn Io>>,
    /// The number the next request gets.
    next: u64,
}

pub(crate) struct PipeConn {
    pub origin: Origin,
    pub peer: String,
    /// What setting the connection up cost, and whether that counts for the lane's first
    /// request here (the connection carried no request before).
    pub setup: Setup,
    pub made_here: bool,
    /// The socket's statistics, kept for a hyper connection made again over the stream.
    pub record: Arc<std::sync::Mutex<SocketRecord>>,
    writer: Mutex<Writer>,
    reader: Arc<Mutex<Reader>>,
    turn: watch::Sender<u64>,
    /// No new request may go out: the server announced the end, or the stream is broken.
    closing: AtomicBool,
    /// Responses read to their end.
    answered: AtomicU64,
    /// The server said its last answer was the last (`Connection: close`, HTTP/1.0).
    announced: AtomicBool,
}

impl PipeConn {
    pub fn new(origin: Origin, taken: Taken, made_here: bool) -> Self {
        let peer = origin.peer();
        let Taken { raw, setup, record } = taken;
        let (read, write) = tokio::io::split(raw.io);
        let mut buf = BytesMut::with_capacity(READ_CHUNK.max(raw.read_buf.len()));
        buf.extend_from_slice(&raw.read_buf);
        Self {
            origin,
            peer,
            setup,
            made_here,
            record,
            writer: Mutex::new(Writer {
                half: write,
                next: 0,
            }),
            reader: Arc::new(Mutex::new(Reader { half: read, buf })),
            turn: watch::Sender::new(0),
            closing: AtomicBool::new(false),
            answered: AtomicU64::new(0),
            announced: AtomicBool::new(false),
        }
    }

    /// Open to new requests.
    pub fn usable(&self) -> bool {
        !self.closing.load(Ordering::Acquire) && *self.turn.borrow() != BROKEN
    }

    /// Whether a request that got no answer here may blame the connection: it had answered
    /// before, or other requests were ahead of it.
    pub fn has_history(&self, seq: u64) -> bool {
        seq > 0 || self.answered.load(Ordering::Relaxed) > 0
    }

    /// The stream no longer lines up with the requests: fail every request still waiting.
    pub fn break_off(&self, why: &str) {
        self.closing.store(true, Ordering::Release);
        if self.turn.send_replace(BROKEN) != BROKEN {
            tracing::debug!(peer = %self.peer, why, "pipelined connection given up");
        }
    }

    /// Write one request head; its number says when its answer comes. With `serial`, wait
    /// until every earlier answer has been read (a server that mishandles pipelining).
    pub async fn send(&self, head: &[u8], serial: bool, idle: Duration) -> Result<u64, Lost> {
        let mut w = self.writer.lock().await;
        if !self.usable() {
            return Err(Lost("the connection closed before the request".into()));
        }
        let seq = w.next;
        if serial {
            self.wait_turn(seq).await?;
        }
        w.next += 1;
        let write = async {
            w.half.write_all(head).await?;
            w.half.flush().await
        };
        match tokio::time::timeout(idle, write).await {
            Ok(Ok(())) => Ok(seq),
            Ok(Err(e)) => {
                self.break_off("write failed");
                Err(Lost(format!("sending the request: {e}")))
            }
            Err(_) => {
                self.break_off("write timed out");
                Err(Lost(format!("sending the request took over {idle:?}")))
            }
        }
    }

    async fn wait_turn(&self, seq: u64) -> Result<(), Lost> {
        let mut rx = self.turn.subscribe();
        let turn = rx
            .wait_for(|t| *t == seq || *t == BROKEN)
            .await
            .map(|t| *t)
            .unwrap_or(BROKEN);
        if turn == BROKEN {
            return Err(Lost(
                "the connection ended before the answers ahead of it".into(),
            ));
        }
        Ok(())
    }

    /// Wait for the answer to request `seq` and read its head (skipping interim `1xx`). The
    /// returned guard is the read side: the body holds it until it ends.
    pub async fn answer(
        &self,
        seq: u64,
        idle: Duration,
    ) -> Result<(ResponseHead, OwnedMutexGuard<Reader>), HeadError> {
        self.wait_turn(seq).await.map_err(HeadError::Lost)?;
        let mut r = self.reader.clone().lock_owned().await;
        loop {
            match wire::parse_head(&r.buf) {
                Ok(Some((head, used))) => {
                    r.buf.advance(used);
                    if head.status.is_informational() {
                        continue;
                    }
                    return Ok((head, r));
                }
                Ok(None) => {}
                Err(message) => {
                    self.break_off("unreadable response head");
                    return Err(HeadError::Bad(message));
                }
            }
            let got_some = !r.buf.is_empty();
            match tokio::time::timeout(idle, r.fill()).await {
                Ok(Ok(0)) => {
                    self.break_off("closed by the server");
                    return Err(if got_some {
                        HeadError::Bad("connection closed inside a response head".into())
                    } else {
                        HeadError::Lost(Lost("the server closed the connection".into()))
                    });
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    self.break_off("read failed");
                    return Err(if got_some {
                        HeadError::Bad(format!("reading the response head: {e}"))
                    } else {
                        HeadError::Lost(Lost(format!("reading the response: {e}")))
                    });
                }
                Err(_) => {
                    self.break_off("no response head");
                    return Err(HeadError::Timeout);
                }
            }
        }
    }

    /// Response `seq` was read to its end: the next one may be read, unless the server said
    /// this was the last.
    pub fn finished(&self, seq: u64, keep_alive: bool) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        if keep_alive {
            self.turn.send_replace(seq + 1);
        } else {
            self.announced.store(true, Ordering::Release);
            self.closing.store(true, Ordering::Release);
            self.turn.send_replace(BROKEN);
        }
    }

    /// The stream, when the connection sits between two requests with nothing unread: every
    /// request answered to its end and no byte past the last answer.
    pub fn into_idle_stream(self) -> Option<Box<dyn Io>> {
        if !self.usable() {
            return None;
        }
        let writer = self.writer.into_inner();
        if *self.turn.borrow() != writer.next {
            return None;
        }
        let reader = Arc::try_unwrap(self.reader).ok()?.into_inner();
        if !reader.buf.is_empty() {
            return None;
        }
        Some(reader.half.unsplit(writer.half))
    }

    /// Whether the server ended the connection as HTTP allows (the requests behind are lost
    /// through no fault of pipelining).
    pub fn announced_close(&self) -> bool {
        self.announced.load(Ordering::Acquire)
    }
}

/// Why no response head was read.
#[derive(Debug)]
pub(crate) enum HeadError {
    Lost(Lost),
    Bad(String),
    Timeout,
}

impl HeadError {
    pub fn into_transfer(self, peer: &str, what: &str, idle: Duration) -> TransferError {
        match self {
            Self::Lost(Lost(m)) => TransferError::Protocol {
                peer: peer.to_string(),
                message: format!("{what}: no answer: {m}"),
            },
            Self::Bad(m) => TransferError::Protocol {
                peer: peer.to_string(),
                message: format!("{what}: {m}"),
            },
            Self::Timeout => TransferError::Timeout {
                peer: peer.to_string(),
                what: format!("{what}: waiting for the response head"),
                after: idle,
            },
        }
    }
}

/// A request written and not yet answered: if the future waiting for its answer is dropped,
/// the answer would be read as the next request's, so the connection is given up.
pub(crate) struct Claim<'a> {
    conn: &'a PipeConn,
    armed: bool,
}

impl<'a> Claim<'a> {
    pub fn new(conn: &'a PipeConn) -> Self {
        Self { conn, armed: true }
    }

    pub fn release(mut self) {
        self.armed = false;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.conn.break_off("a pipelined request was abandoned");
        }
    }
}
