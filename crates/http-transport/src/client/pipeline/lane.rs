//! Lanes whose range requests are pipelined on one HTTP/1.1 connection: the request the engine
//! sends ahead goes out on the same connection while the current body is still arriving, so the
//! connection never idles a round trip between chunks and no second connection (with its own
//! slow start) is needed. Handles made by [`PipedLane::twin`] share the connection.

use std::sync::Arc;

use http::{header, HeaderName, HeaderValue};
use xfer_core::transport::{BoxFuture, Lane, RangeBody, RangeRequest, RemoteInfo, RoundTrips};
use xfer_core::TransferError;

use crate::client::connect::{self, Connection, Sender};
use crate::client::lane::{range_headers, HttpLane};
use crate::client::pipeline::body::{Framed, PipedBody};
use crate::client::pipeline::conn::{Claim, HeadError, Lost, PipeConn, Taken};
use crate::client::pipeline::wire::{self, Decoder};
use crate::client::response::{check_range_head, is_redirect, judge_speculative, Ctx};
use crate::client::target::Target;
use crate::client::transport::Inner;

/// The connection the handles of one lane share, or the hyper connection it will be made from.
struct SlotState {
    inner: Arc<Inner>,
    conn: Option<Arc<PipeConn>>,
    /// The lane's hyper connection, taken over once hyper has read its last response.
    pending: Option<Connection>,
    /// Whether `pending` has carried no request yet (it was opened ahead for this lane): its
    /// set-up then counts in the lane's first round trips.
    pending_fresh: bool,
}

impl Drop for SlotState {
    /// The lane's last handle is gone: its connection goes back to the idle pool for the next
    /// lane (the next file of a tree), as a hyper connection again, when it sits cleanly
    /// between two requests.
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            self.inner.park(pending);
        }
        let Some(conn) = self.conn.take().and_then(Arc::into_inner) else {
            return;
        };
        let (origin, setup, record) =
            (conn.origin.clone(), conn.setup.clone(), conn.record.clone());
        let Some(io) = conn.into_idle_stream() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.inner.clone();
        runtime.spawn(async move {
            let peer = origin.peer();
            match connect::rehandshake_http1(&inner.params(), &peer, io).await {
                Ok((sender, raw)) => inner.park(Connection {
                    origin,
                    sender,
                    raw,
                    record,
                    setup,
                }),
                Err(e) => tracing::debug!(%peer, error = %e, "could not keep the connection"),
            }
        });
    }
}

pub(crate) struct PipedLane {
    inner: Arc<Inner>,
    index: usize,
    slot: Arc<tokio::sync::Mutex<SlotState>>,
    /// When the handle was made: a connection ready after this was waited for.
    created: std::time::Instant,
    /// How this handle's first request reached its response head.
    first: Option<RoundTrips>,
}

impl PipedLane {
    /// A lane on `pending` (a hyper HTTP/1.1 connection, possibly still reading a body; `fresh`
    /// when it has carried no request), or on a connection of its own made when first needed.
    /// `created`: when the lane was made, for its round-trip count.
    pub fn new(
        inner: Arc<Inner>,
        index: usize,
        pending: Option<Connection>,
        fresh: bool,
        created: std::time::Instant,
    ) -> Self {
        Self {
            inner: inner.clone(),
            index,
            slot: Arc::new(tokio::sync::Mutex::new(SlotState {
                inner,
                conn: None,
                pending,
                pending_fresh: fresh,
            })),
            created,
            first: None,
        }
    }

    /// Another handle on the same connection.
    pub fn share(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            index: self.index,
            slot: self.slot.clone(),
            created: std::time::Instant::now(),
            first: None,
        }
    }

    /// The lane's connection: the open one, the hyper one taken over, or a new one.
    async fn connection(&self, fresh: bool) -> Result<Arc<PipeConn>, TransferError> {
        let origin = self.inner.target().origin;
        let idle = self.inner.cfg.idle_timeout;
        let mut slot = self.slot.lock().await;
        if !fresh {
            if let Some(c) = slot
                .conn
                .as_ref()
                .filter(|c| c.origin == origin && c.usable())
            {
                return Ok(c.clone());
            }
        }
        slot.conn = None;
        if let Some(pending) = slot.pending.take().filter(|p| p.origin == origin) {
            if let Some(taken) = take_over(pending, idle).await {
                let fresh = slot.pending_fresh;
                let conn = Arc::new(PipeConn::new(origin.clone(), taken, fresh));
                slot.conn = Some(conn.clone());
                return Ok(conn);
            }
        }
        tracing::debug!(lane = self.index, "pipelined lane: new connection");
        let made = connect::connect(&self.inner.params(), &origin).await?;
        if !matches!(made.sender, Sender::H1(_)) {
            return Err(TransferError::Protocol {
                peer: origin.peer(),
                message: "the server now speaks HTTP/2 where it spoke HTTP/1.1".into(),
            });
        }
        self.inner.register(self.index, &made);
        let taken = take_over(made, idle)
            .await
            .ok_or_else(|| TransferError::Protocol {
                peer: origin.peer(),
                message: "a new HTTP/1.1 connection closed before its first request".into(),
            })?;
        let conn = Arc::new(PipeConn::new(origin.clone(), taken, true));
        slot.conn = Some(conn.clone());
        Ok(conn)
    }

    /// The request head of a range request to `target`.
    fn head(
        &self,
        target: &Target,
        fields: &[(HeaderName, HeaderValue)],
    ) -> Result<Vec<u8>, TransferError> {
        let host = HeaderValue::from_str(&target.origin.authority()).map_err(|_| {
            TransferError::Config(format!("host of {target} cannot be sent in a header"))
        })?;
        let mut all: Vec<(HeaderName, HeaderValue)> = Vec::with_capacity(fields.len() + 6);
        all.push((header::HOST, host));
        all.push((header::USER_AGENT, self.inner.user_agent.clone()));
        // Ranges address the stored bytes; a compressed answer would address something else.
        all.push((
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        ));
        if let Some(auth) = self.inner.authorization_for(target) {
            all.push((header::AUTHORIZATION, auth));
        }
        all.extend(self.inner.extra_headers_for(target).iter().cloned());
        all.extend(fields.iter().cloned());
        Ok(wire::request_head(
            &target.origin_form_uri().to_string(),
            &all,
        ))
    }

    pub(crate) async fn fetch_range(
        &mut self,
        req: &RangeRequest,
    ) -> Result<Box<dyn RangeBody + 'static>, TransferError> {
        let target = self.inner.target();
        if req.range.is_empty() || req.range.end > req.expected_size {
            return Err(TransferError::Config(format!(
                "invalid range {}..{} of {} bytes for {target}",
                req.range.start, req.range.end, req.expected_size
            )));
        }
        let (fields, suffix) = range_headers(req)?;
        let what = format!("GET {target}{suffix}");
        let (conn, resp, framed) = self.exchange(&target, &fields, &what).await?;
        self.judge(conn, resp, framed, req, &target, what).await
    }

    /// Send a request with `fields` to `target` on the lane's connection and wait for its
    /// answer's head; a pipelined request the server lost goes again on a fresh connection.
    async fn exchange(
        &mut self,
        target: &Target,
        fields: &[(HeaderName, HeaderValue)],
        what: &str,
    ) -> Result<(Arc<PipeConn>, wire::ResponseHead, Framed), TransferError> {
        let head = self.head(target, fields)?;
        let idle = self.inner.cfg.idle_timeout;
        let mut fresh = false;
        loop {
            let conn = self.connection(fresh).await?;
            let serial = self.inner.pipelining_suspect();
            let claim = Claim::new(&conn);
            let (seq, answer) = match conn.send(&head, serial, idle).await {
                Ok(seq) => (seq, conn.answer(seq, idle).await),
                Err(lost) => (0, Err(HeadError::Lost(lost))),
            };
            claim.release();
            match answer {
                Ok((resp, reader)) => {
                    if self.first.is_none() {
                        self.first = Some(match &conn.setup {
                            setup if conn.made_here && seq == 0 => setup.request(self.created, 1),
                            _ => RoundTrips {
                                requests: 1,
                                ..RoundTrips::default()
                            },
                        });
                    }
                    let framed = Framed {
                        reader,
                        decoder: Decoder::new(wire::BodyEnd::Length(0)),
                        seq,
                        keep_alive: false,
                    };
                    return Ok((conn, resp, framed));
                }
                Err(HeadError::Lost(Lost(why))) if !fresh && conn.has_history(seq) => {
                    if !conn.announced_close() {
                        self.inner.note_pipeline_loss();
                    }
                    tracing::debug!(peer = %conn.peer, %why, "pipelined request lost; sending it again on a fresh connection");
                    fresh = true;
                }
                Err(HeadError::Timeout) if seq > 0 => {
                    // Silence after the answers before it: a server that discards what follows
                    // a request in its buffer never answers a pipelined one. It counts against
                    // pipelining to this server; once more on a fresh connection.
                    self.inner.note_pipeline_loss();
                    if fresh {
                        return Err(HeadError::Timeout.into_transfer(&conn.peer, what, idle));
                    }
                    tracing::debug!(peer = %conn.peer, "no answer to a pipelined request; sending it again on a fresh connection");
                    fresh = true;
                }
                Err(e) => return Err(e.into_transfer(&conn.peer, what, idle)),
            }
        }
    }

    /// [`xfer_core::transport::Transport::open_speculative`] on a connection of the lane's own:
    /// `guess` asks for a chunk before the size is known. Its body is read by this code, not
    /// hyper's, so the request the lane sends ahead of that body's end goes out on the same
    /// connection at once, instead of waiting for hyper to read the first body to its end (a
    /// round trip idle on every lane at the first chunk's end, and under `--limit-rate` a
    /// window's reading more). Only a `206` for exactly those bytes (or their part up to the end)
    /// is kept, with the resource as it describes it; anything else gives the connection up and
    /// leaves the lane to ask again once the engine knows what to ask.
    pub(crate) async fn fetch_speculative(
        &mut self,
        guess: &RangeRequest,
    ) -> Result<Option<(RemoteInfo, RangeRequest, Box<dyn RangeBody>)>, TransferError> {
        let target = self.inner.target();
        let (fields, suffix) = range_headers(guess)?;
        let what = format!("GET {target}{suffix}");
        let (conn, resp, framed) = self.exchange(&target, &fields, &what).await?;
        let url = target.to_string();
        let peer = conn.peer.clone();
        let ctx = Ctx {
            peer: &peer,
            url: &url,
            what: &what,
        };
        let judged = judge_speculative(resp.status, &resp.headers, guess, &ctx);
        let (Ok((info, req, len)), Ok(framing)) = (judged, wire::framing(&resp)) else {
            // Its body is not read: the connection is given up, and the lane's next request
            // opens another.
            drop(framed);
            conn.break_off("speculative answer without the chunk asked for");
            return Ok(None);
        };
        let framed = Framed {
            decoder: Decoder::new(framing.body),
            keep_alive: framing.keep_alive,
            ..framed
        };
        let idle = self.inner.cfg.idle_timeout;
        let body = PipedBody::new(conn, framed, what, len, idle);
        Ok(Some((info, req, Box::new(body))))
    }

    /// Decide what a response head means for `req`: its body, an error, or (a redirect) the
    /// request followed without pipelining.
    async fn judge(
        &mut self,
        conn: Arc<PipeConn>,
        resp: wire::ResponseHead,
        framed: Framed,
        req: &RangeRequest,
        target: &Target,
        what: String,
    ) -> Result<Box<dyn RangeBody + 'static>, TransferError> {
        let peer = conn.peer.clone();
        let framing = match wire::framing(&resp) {
            Ok(f) => f,
            Err(m) => {
                drop(framed);
                conn.break_off("unreadable framing");
                return Err(TransferError::Protocol {
                    peer,
                    message: format!("{what}: {m}"),
                });
            }
        };
        if is_redirect(resp.status) {
            // Rare once the first request has found the resource's final URL; hyper's lane
            // follows redirects, so this one request goes that way.
            drop(framed);
            conn.break_off("redirected");
            tracing::debug!(%peer, status = %resp.status, "pipelined request redirected; following it on a plain lane");
            let mut plain = HttpLane::new(self.inner.clone(), self.index);
            let body = plain.fetch_range(req).await?;
            return Ok(Box::new(body));
        }
        let url = target.to_string();
        let ctx = Ctx {
            peer: &peer,
            url: &url,
            what: &what,
        };
        match check_range_head(resp.status, &resp.headers, req, &ctx) {
            Ok(len) => {
                let framed = Framed {
                    decoder: Decoder::new(framing.body),
                    keep_alive: framing.keep_alive,
                    ..framed
                };
                let idle = self.inner.cfg.idle_timeout;
                Ok(Box::new(PipedBody::new(conn, framed, what, len, idle)))
            }
            Err(e) => {
                // An error's body is not read: the answers behind it are sent again on a
                // fresh connection.
                drop(framed);
                conn.break_off("error answer");
                Err(e)
            }
        }
    }
}

/// The stream of a hyper HTTP/1.1 connection, once hyper has read its last response (within
/// `wait`); `None` when the connection ended instead.
async fn take_over(conn: Connection, wait: std::time::Duration) -> Option<Taken> {
    let Connection {
        sender,
        raw,
        origin,
        setup,
        record,
    } = conn;
    let raw = raw?;
    drop(sender);
    match tokio::time::timeout(wait, raw).await {
        Ok(Ok(raw)) => Some(Taken { raw, setup, record }),
        Ok(Err(_)) => {
            tracing::debug!(peer = %origin.peer(), "the connection ended before it could be pipelined");
            None
        }
        Err(_) => {
            tracing::debug!(peer = %origin.peer(), ?wait, "the connection stayed busy; pipelining on a new one");
            None
        }
    }
}

impl Lane for PipedLane {
    fn fetch<'a>(
        &'a mut self,
        req: &'a RangeRequest,
    ) -> BoxFuture<'a, Result<Box<dyn RangeBody + 'a>, TransferError>> {
        Box::pin(async move {
            let body = self.fetch_range(req).await?;
            Ok(body as Box<dyn RangeBody + 'a>)
        })
    }

    fn label(&self) -> String {
        format!("conn {}", self.index)
    }

    fn connection(&self) -> usize {
        self.index
    }

    fn first_round_trips(&self) -> Option<RoundTrips> {
        self.first
    }

    fn twin(&mut self) -> Option<Box<dyn Lane>> {
        Some(Box::new(self.share()))
    }
}
