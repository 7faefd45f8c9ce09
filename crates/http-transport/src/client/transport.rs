//! [`HttpTransport`]: the [`Transport`] over HTTP/1.1 and HTTP/2, and the state its lanes share
//! (current URL, negotiated protocol, HTTP/2 connection slots, statistics).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use crate::client::req_body::ReqBody;
use http::{header, HeaderName, HeaderValue, Method, StatusCode};
use hyper::client::conn::http2;
use xfer_core::checksum::{Checksum, ChecksumAlgorithm};
use xfer_core::digest::{SHA256_KEY, WANT_REPR_DIGEST};
use xfer_core::layout::Lanes;
use xfer_core::transport::{
    BoxFuture, ConnectionStats, FirstRequest, Lane, ListRequest, ListResponse, Opened, RemoteInfo,
    Speculated, Transport,
};
use xfer_core::TransferError;

use crate::client::config::HttpClientConfig;
use crate::client::connect::{self, ConnectParams, Connection, Sender, Setup};
use crate::client::lane::{drain, read_small, Answer, HttpLane};
use crate::client::listing;
use crate::client::loss_spread::{startup, Episodes, LossSpread, EPISODES};
use crate::client::path_memory::{PathMemory, Verdict};
use crate::client::response::{
    content_length, declared_checksums, described, header_str, repr_digest,
};
use xfer_common::ranges::{parse_content_range, parse_unsatisfied_content_range};

use crate::client::stats::{ReceiveTotals, StatsRegistry};
use crate::client::target::{Origin, Security, Target};
use crate::config::HttpVersion;
use crate::tcp;

/// The protocol spoken with the transport's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    H1,
    H2,
}

/// A shared HTTP/2 connection to the transport's origin.
struct SharedSlot {
    origin: Origin,
    sender: http2::SendRequest<ReqBody>,
    generation: u64,
    setup: Setup,
}

/// Names one shared connection, so a lane that saw it stall can retire exactly that one and
/// not a replacement another lane already made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShareTicket {
    slot: usize,
    generation: u64,
}

/// What [`Inner::shared_sender`] found: a shared HTTP/2 handle (whether it was just made, and
/// which one it is), or, when ALPN chose HTTP/1.1, a connection for the asking lane alone.
pub(crate) enum SharedPick {
    H2(http2::SendRequest<ReqBody>, bool, ShareTicket, Setup),
    H1(Connection),
}

/// Run the receive-window cap over a pool's sockets (`cap`), and count their loss episodes
/// for the path memory, until the pool is gone.
#[cfg(target_os = "linux")]
async fn watch_sockets(pool: std::sync::Weak<Pool>, cap: bool) {
    let mut policy = super::window::WindowPolicy::default();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tick.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        // Episodes are round trips apart: a reading every 100 ms tells them apart.
        let memory = pool.memory.as_ref().filter(|_| n % 5 == 0);
        if !cap && memory.is_none() {
            continue;
        }
        let now = std::time::Instant::now();
        let totals = pool.stats.sample(cap.then_some(&mut policy), now);
        if let Some(memory) = memory {
            memory.observe(totals, now);
        }
    }
}

/// What this transfer finds on its path, for the next one (`path_memory.rs`).
struct LossMemory {
    store: PathMemory,
    peer: String,
    count: Mutex<LossCount>,
}

/// Loss episodes over all the transfer's connections, counted once the start-up is over.
#[derive(Default)]
struct LossCount {
    /// When the start-up ends, and the bytes received when the first was seen.
    from: Option<(std::time::Instant, u64)>,
    episodes: Episodes,
}

impl LossMemory {
    /// Feed one reading of the sockets; returns the bytes received so far.
    fn observe(&self, totals: ReceiveTotals, now: std::time::Instant) -> u64 {
        let (received, count, rtt) = (totals.received, totals.out_of_order, totals.min_rtt);
        let mut c = lock_ignoring_poison(&self.count);
        let Some((start, _)) = c.from else {
            if received > 0 {
                // Episodes count only after the start-up, from the first byte.
                c.from = Some((now + startup(rtt), received));
            }
            return received;
        };
        if now < start {
            // The count so far is the start-up's: growth after it is what counts.
            c.episodes.observe_baseline(count);
        } else if c.episodes.observe(count, rtt, now) {
            tracing::debug!(peer = %self.peer, episodes = c.episodes.count(), out_of_order_packets = count, "path memory: loss episode");
        }
        received
    }

    /// Keep what the transfer found, if it found enough to say.
    fn settle(&self, stats: &StatsRegistry) {
        let now = std::time::Instant::now();
        #[cfg(target_os = "linux")]
        let totals = stats.sample(None, now);
        #[cfg(not(target_os = "linux"))]
        let totals = (stats, ReceiveTotals::default()).1;
        let received = self.observe(totals, now);
        let (from, episodes) = {
            let c = lock_ignoring_poison(&self.count);
            (c.from, c.episodes.count())
        };
        let Some((start, at_first_byte)) = from else {
            return;
        };
        let counted = now.saturating_duration_since(start);
        let bytes = received.saturating_sub(at_first_byte);
        let Some(verdict) = Verdict::of(episodes, EPISODES, counted, bytes) else {
            return;
        };
        match self
            .store
            .remember(&self.peer, verdict, std::time::SystemTime::now())
        {
            Ok(()) => {
                tracing::debug!(peer = %self.peer, ?verdict, episodes, bytes, "path memory kept")
            }
            Err(e) => tracing::debug!(peer = %self.peer, "path memory not kept: {e}"),
        }
    }
}

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What every transport made by [`HttpTransport::sibling`] shares with the one it came from:
/// the connections, so a tree of files pays one handshake per connection, not per file.
pub(crate) struct Pool {
    tls: Arc<rustls::ClientConfig>,
    mode: OnceLock<Mode>,
    slots: Vec<tokio::sync::Mutex<Option<SharedSlot>>>,
    generations: AtomicU64,
    /// HTTP/1.1 connections no lane holds, each between two requests: `stat`'s, and those of
    /// lanes that ended. The next lane opened adopts one instead of connecting.
    idle: Mutex<Vec<Connection>>,
    stats: StatsRegistry,
    /// HTTP/2: how many connections the lanes use, growing once loss is seen.
    spread: LossSpread,
    /// HTTP/1.1: pipelined requests the server dropped without announcing it.
    pipeline_losses: std::sync::atomic::AtomicU32,
    /// The sockets' watch (the receive-window cap, the path memory's loss count) runs
    /// (started with the first connection).
    watching: std::sync::atomic::AtomicBool,
    /// Where the path memory is kept and what this transfer found; `None` when not kept.
    memory: Option<LossMemory>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Some(m) = &self.memory {
            m.settle(&self.stats);
        }
    }
}

/// Pipelined requests lost (the server closed without `Connection: close`) before the lanes
/// stop pipelining to this server and send one request at a time.
const PIPELINE_LOSSES_TOLERATED: u32 = 3;

/// Idle HTTP/1.1 connections kept for reuse; more are closed.
const MAX_IDLE: usize = 256;

/// How long a parked HTTP/1.1 connection may take to become ready for its next request
/// before it is given up for a new one.
const PARKED_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Header fields sent to one origin besides those every request carries.
type ExtraFields = Arc<Vec<(HeaderName, HeaderValue)>>;

pub(crate) struct Inner {
    pub cfg: HttpClientConfig,
    pub user_agent: HeaderValue,
    /// `Authorization: Bearer ...` and the origin it belongs to: the one the user named. A
    /// redirect to another origin does not carry it.
    authorization: Option<(Origin, HeaderValue)>,
    /// [`HttpClientConfig::extra_headers`], for the same origin only.
    extra: Option<(Origin, ExtraFields)>,
    target: RwLock<Target>,
    pool: Arc<Pool>,
}

impl Inner {
    /// The configured extra header fields, when `target` is the origin they belong to.
    pub fn extra_headers_for(&self, target: &Target) -> &[(HeaderName, HeaderValue)] {
        match &self.extra {
            Some((origin, fields)) if *origin == target.origin => fields,
            _ => &[],
        }
    }

    /// The `Authorization` value for a request to `target`, if any.
    pub fn authorization_for(&self, target: &Target) -> Option<HeaderValue> {
        match &self.authorization {
            Some((origin, value)) if *origin == target.origin => Some(value.clone()),
            _ => None,
        }
    }

    pub fn target(&self) -> Target {
        self.target
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_target(&self, t: Target) {
        *self.target.write().unwrap_or_else(|p| p.into_inner()) = t;
    }

    pub fn mode(&self) -> Option<Mode> {
        self.pool.mode.get().copied()
    }

    /// Under `Auto` over TLS the first connection to the origin tells which protocol it speaks.
    pub fn learn_mode(&self, conn: &Connection) {
        if conn.origin == self.target().origin {
            let _ = self.pool.mode.set(match conn.sender {
                Sender::H1(_) => Mode::H1,
                Sender::H2(_) => Mode::H2,
            });
        }
    }

    pub fn params(&self) -> ConnectParams<'_> {
        ConnectParams {
            version: self.cfg.version,
            tcp: &self.cfg.tcp,
            http2: &self.cfg.http2,
            streams_per_connection: self.cfg.layout(Mode::H2).streams_per_connection,
            tls: &self.pool.tls,
            connect_timeout: self.cfg.connect_timeout,
            early_data: self.cfg.early_data_possible(),
            address_policy: self.cfg.address_policy.as_deref(),
        }
    }

    pub fn register(&self, index: usize, conn: &Connection) {
        self.pool.stats.register(index, conn.record.clone());
        // A fixed clamp the user set is theirs: the cap would move it.
        #[cfg(target_os = "linux")]
        {
            let cap = self.cfg.tcp.window_cap && self.cfg.tcp.window_clamp.is_none();
            if (cap || self.pool.memory.is_some())
                && !self
                    .pool
                    .watching
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(watch_sockets(Arc::downgrade(&self.pool), cap));
                }
            }
        }
    }

    /// The connection lane `lane` rides on: its own for HTTP/1.1, one of the M shared ones for
    /// HTTP/2.
    pub fn connection_index(&self, lane: usize) -> usize {
        match self.mode() {
            Some(Mode::H2) => self.h2_layout().connection_of(lane),
            _ => lane,
        }
    }

    /// HTTP/2 lanes over the connections in use now (see [`LossSpread`]).
    pub fn h2_layout(&self) -> Lanes {
        self.pool.spread.layout(self.cfg.layout(Mode::H2))
    }

    /// Reads the loss signal of the HTTP/2 connections in use (packets that arrived out of
    /// order) and spreads the lanes over more connections once it says so. Called when a lane
    /// asks for a connection, before it picks one.
    pub fn watch_loss(&self) {
        let spread = &self.pool.spread;
        if self.mode() != Some(Mode::H2) || !spread.armed() {
            return;
        }
        let (count, rtt) = self.pool.stats.loss_signal(0..spread.active());
        if spread.observe(count, rtt, std::time::Instant::now()) {
            tracing::info!(
                connections = spread.active(),
                out_of_order_packets = count,
                episodes = spread.episodes(),
                "HTTP/2: loss seen on the shared connection; spreading the lanes over more connections"
            );
        }
    }

    /// The shared HTTP/2 connection number `index`, connecting (again) when it is missing,
    /// closed, or to an origin the transport no longer targets. When ALPN picks HTTP/1.1 the
    /// new connection belongs to lane `lane` and is filed under its number.
    pub async fn shared_sender(
        &self,
        index: usize,
        lane: usize,
        early: bool,
    ) -> Result<SharedPick, TransferError> {
        let origin = self.target().origin;
        let slot_index = index % self.pool.slots.len();
        let mut slot = self.pool.slots[slot_index].lock().await;
        if let Some(s) = slot.as_ref() {
            if s.origin == origin && !s.sender.is_closed() {
                let ticket = ShareTicket {
                    slot: slot_index,
                    generation: s.generation,
                };
                return Ok(SharedPick::H2(
                    s.sender.clone(),
                    false,
                    ticket,
                    s.setup.clone(),
                ));
            }
        }
        *slot = None;
        let mut params = self.params();
        params.early_data &= early;
        let conn = connect::connect(&params, &origin).await?;
        self.learn_mode(&conn);
        match conn.sender {
            Sender::H2(ref s) => {
                self.register(slot_index, &conn);
                let sender = s.clone();
                let generation = self.pool.generations.fetch_add(1, Ordering::Relaxed);
                *slot = Some(SharedSlot {
                    origin,
                    sender: sender.clone(),
                    generation,
                    setup: conn.setup.clone(),
                });
                let ticket = ShareTicket {
                    slot: slot_index,
                    generation,
                };
                Ok(SharedPick::H2(sender, true, ticket, conn.setup))
            }
            Sender::H1(_) => {
                self.register(lane, &conn);
                Ok(SharedPick::H1(conn))
            }
        }
    }

    /// Stop handing out a shared connection that went silent: the next lane to ask connects
    /// afresh. Streams still on the old one finish or time out on their own; the connection
    /// closes when the last of them lets go.
    pub async fn retire_shared(&self, ticket: ShareTicket) {
        let mut slot = self.pool.slots[ticket.slot].lock().await;
        if slot
            .as_ref()
            .is_some_and(|s| s.generation == ticket.generation)
        {
            tracing::debug!(slot = ticket.slot, "retiring a stalled shared connection");
            *slot = None;
        }
    }

    /// A pipelined request got no answer though the server had not announced the end.
    pub fn note_pipeline_loss(&self) {
        let n = self.pool.pipeline_losses.fetch_add(1, Ordering::Relaxed) + 1;
        if n == PIPELINE_LOSSES_TOLERATED {
            tracing::warn!(peer = %self.target().origin.peer(), "the server drops pipelined requests; sending one request at a time on each connection");
        }
    }

    /// Whether the server mishandles pipelining.
    pub fn pipelining_suspect(&self) -> bool {
        self.pool.pipeline_losses.load(Ordering::Relaxed) >= PIPELINE_LOSSES_TOLERATED
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        self.pool.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep a live HTTP/1.1 connection to this origin for the next lane. Whether it sits
    /// between two requests is asked when it is taken: hyper says so only once it has seen the
    /// previous response to its end, which may be a moment after the lane let go.
    pub fn park(&self, conn: Connection) {
        if conn.origin == self.target().origin && !conn.sender.is_closed() {
            let mut idle = self.idle();
            idle.retain(|c| !c.sender.is_closed());
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
    }

    /// An idle HTTP/1.1 connection to this origin, if one is parked; one whose last response
    /// was dropped part-way never is (hyper closes it). A connection parked a moment ago may
    /// not be between two requests yet (hyper notices the end of the last response when its
    /// task next runs): it is waited for rather than passed over, so that requests one after
    /// another (a tree's existence checks and uploads) keep to the connections already open
    /// instead of each opening one more.
    pub(crate) async fn unpark(&self) -> Option<Connection> {
        let origin = self.target().origin;
        // One wait in all, however many parked connections fail to settle.
        let deadline = tokio::time::Instant::now() + PARKED_SETTLE;
        loop {
            let mut conn = {
                let mut idle = self.idle();
                idle.retain(|c| !c.sender.is_closed());
                let i = idle
                    .iter()
                    .rposition(|c| c.origin == origin && c.sender.is_idle())
                    .or_else(|| idle.iter().rposition(|c| c.origin == origin))?;
                idle.swap_remove(i)
            };
            if conn.sender.is_idle() {
                return Some(conn);
            }
            // Dropped (and closed) when it does not settle: a response still arriving on a
            // connection nobody holds will never be read.
            if let Ok(Ok(())) = tokio::time::timeout_at(deadline, conn.sender.ready()).await {
                return Some(conn);
            }
        }
    }

    /// A lane for one request of the transport's own (`stat`, `checksum`), on a parked
    /// HTTP/1.1 connection when there is one.
    pub(crate) async fn request_lane(self: &Arc<Self>) -> HttpLane {
        let mut lane = HttpLane::new(Arc::clone(self), 0);
        if self.mode() == Some(Mode::H1) {
            if let Some(conn) = self.unpark().await {
                lane.adopt(conn);
            }
        }
        lane
    }
}

/// A client for one `http://` or `https://` resource, over HTTP/1.1 (one connection per lane)
/// or HTTP/2 (M connections × K streams).
#[derive(Clone)]
pub struct HttpTransport {
    pub(crate) inner: Arc<Inner>,
    /// `Link: rel=duplicate` targets of the last `stat` answer.
    duplicates: Arc<Mutex<Vec<String>>>,
}

impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTransport")
            .field("url", &self.inner.target().to_string())
            .field("mode", &self.inner.mode())
            .finish_non_exhaustive()
    }
}

impl HttpTransport {
    /// A transport for `url` (`http://` or `https://`). Checks the configuration and builds the
    /// TLS settings; connects only when asked to `stat` or fetch.
    pub fn new(url: &str, cfg: HttpClientConfig) -> Result<Self, TransferError> {
        cfg.validate()
            .map_err(|e| TransferError::Config(e.to_string()))?;
        tcp::check_congestion(&cfg.tcp).map_err(|e| TransferError::Config(e.to_string()))?;
        let target = Target::parse(url).map_err(TransferError::Config)?;
        let alpn: &[&[u8]] = match cfg.version {
            HttpVersion::Http1 => &[b"http/1.1"],
            HttpVersion::Http2 => &[b"h2"],
            HttpVersion::Auto => &[b"h2", b"http/1.1"],
        };
        let mut tls = xfer_common::tls::client_config(&cfg.tls, alpn)
            .map_err(|e| TransferError::Config(e.to_string()))?;
        tls.enable_early_data = cfg.early_data_possible();
        let mode = OnceLock::new();
        match (cfg.version, target.origin.security) {
            (HttpVersion::Http1, _) | (HttpVersion::Auto, Security::Plain) => {
                let _ = mode.set(Mode::H1);
            }
            (HttpVersion::Http2, _) => {
                let _ = mode.set(Mode::H2);
            }
            (HttpVersion::Auto, Security::Tls) => {}
        }
        let user_agent = HeaderValue::from_str(&cfg.user_agent)
            .map_err(|_| TransferError::Config("invalid user_agent".into()))?;
        let authorization = match &cfg.token {
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                    .map_err(|_| TransferError::Config("the token is not visible ASCII".into()))?;
                // Kept out of HTTP/2's header compression table (HPACK never-index).
                value.set_sensitive(true);
                Some((target.origin.clone(), value))
            }
            None => None,
        };
        let extra = if cfg.extra_headers.is_empty() {
            None
        } else {
            let mut fields = Vec::with_capacity(cfg.extra_headers.len());
            for (name, value) in &cfg.extra_headers {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    TransferError::Config(format!("{name:?} is not a header field name"))
                })?;
                let mut value = HeaderValue::from_str(value.expose()).map_err(|_| {
                    TransferError::Config(format!("the value of {name} is not visible ASCII"))
                })?;
                value.set_sensitive(true);
                fields.push((name, value));
            }
            Some((target.origin.clone(), Arc::new(fields)))
        };
        let spread = LossSpread::new(cfg.layout(Mode::H2).connections, cfg.h2_loss_target());
        let memory = cfg.path_memory.clone().map(|file| LossMemory {
            store: PathMemory::new(file),
            peer: target.origin.peer(),
            count: Mutex::default(),
        });
        let h2_possible = cfg.version != HttpVersion::Http1;
        if let Some(m) = memory.as_ref().filter(|_| h2_possible && spread.armed()) {
            if let Some((Verdict::Lossy, age)) =
                m.store.recall(&m.peer, std::time::SystemTime::now())
            {
                spread.spread_now();
                tracing::info!(
                    peer = %m.peer,
                    connections = spread.active(),
                    minutes_ago = age.as_secs() / 60,
                    "HTTP/2: the last transfer to this peer lost packets; spreading the lanes over more connections from the start"
                );
            }
        }
        let slots = (0..spread.max_connections())
            .map(|_| tokio::sync::Mutex::new(None))
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                cfg,
                user_agent,
                authorization,
                extra,
                target: RwLock::new(target),
                pool: Arc::new(Pool {
                    tls: Arc::new(tls),
                    mode,
                    slots,
                    generations: AtomicU64::new(0),
                    idle: Mutex::new(Vec::new()),
                    stats: StatsRegistry::default(),
                    spread,
                    pipeline_losses: Default::default(),
                    watching: Default::default(),
                    memory,
                }),
            }),
            duplicates: Arc::default(),
        })
    }

    /// A transport for `url` on the same origin that shares this one's connections (HTTP/2
    /// streams on the same connections, HTTP/1.1 connections parked between requests).
    pub fn sibling(&self, url: &str) -> Result<Self, TransferError> {
        let target = Target::parse(url).map_err(TransferError::Config)?;
        let own = self.inner.target();
        if target.origin != own.origin {
            return Err(TransferError::Config(format!(
                "{url} is not on {}: it cannot share its connections",
                own.origin.peer()
            )));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                cfg: self.inner.cfg.clone(),
                user_agent: self.inner.user_agent.clone(),
                // Same origin (checked above): the token goes along.
                authorization: self.inner.authorization.clone(),
                extra: self.inner.extra.clone(),
                target: RwLock::new(target),
                pool: Arc::clone(&self.inner.pool),
            }),
            duplicates: Arc::default(),
        })
    }

    /// Keep the `Link: rel=duplicate` targets of an answer that described the resource.
    pub(crate) fn note_duplicates(&self, h: &http::HeaderMap) {
        let links = h
            .get_all(header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok());
        *self.duplicates.lock().unwrap_or_else(|p| p.into_inner()) =
            xfer_core::multi::link_duplicates(links);
    }

    /// The URL requests go to now (after `stat` followed redirects).
    pub fn url(&self) -> String {
        self.inner.target().to_string()
    }

    pub(crate) async fn stat_inner(&self) -> Result<RemoteInfo, TransferError> {
        let inner = &self.inner;
        let mut lane = inner.request_lane().await;
        let want_repr = [(
            HeaderName::from_static(WANT_REPR_DIGEST),
            HeaderValue::from_static(SHA256_KEY),
        )];
        let head = lane
            .request(Method::HEAD, inner.target(), &want_repr, "")
            .await?;
        let status = head.response.status();
        let head_len = content_length(head.response.headers());
        let info = match (status, head_len) {
            (s, Some(size)) if s.is_success() => {
                let h = head.response.headers();
                let accepts = header_str(h, header::ACCEPT_RANGES).map(|v| {
                    v.split(',')
                        .any(|unit| unit.trim().eq_ignore_ascii_case("bytes"))
                });
                self.note_duplicates(h);
                let mut info = RemoteInfo {
                    url: head.target.to_string(),
                    size,
                    etag: header_str(h, header::ETAG).map(str::to_string),
                    last_modified: header_str(h, header::LAST_MODIFIED).map(str::to_string),
                    accepts_ranges: accepts.unwrap_or(false),
                    sha256: repr_digest(h, &head.peer)?,
                };
                let target = head.target.clone();
                drain(head.response.into_body(), inner).await;
                if accepts.is_none() && size > 0 {
                    // No Accept-Ranges: ask for one byte to learn whether ranges work.
                    let probe = self.probe(&mut lane, target).await?;
                    info.accepts_ranges = probe.accepts_ranges && probe.size == size;
                }
                info
            }
            (s, _)
                if s.is_success()
                    || s == StatusCode::METHOD_NOT_ALLOWED
                    || s == StatusCode::NOT_IMPLEMENTED =>
            {
                tracing::debug!(url = %head.target, %status, "head gave no length; probing with a ranged get");
                let target = head.target.clone();
                drain(head.response.into_body(), inner).await;
                self.probe(&mut lane, target).await?
            }
            (s, _) => {
                let err = TransferError::Status {
                    peer: head.peer.clone(),
                    status: s.as_u16(),
                    what: format!("HEAD {}", head.target),
                };
                drain(head.response.into_body(), inner).await;
                return Err(err);
            }
        };
        if let Ok(t) = Target::parse(&info.url) {
            inner.set_target(t);
        }
        if let Some(conn) = lane.take_connection() {
            inner.park(conn);
        }
        Ok(info)
    }

    /// `HEAD` with `Want-Digest` (RFC 3230, what gfal2 sends and XRootD, dCache and xfer answer)
    /// and `Want-Repr-Digest` (RFC 9530): the server's checksum of the whole resource.
    async fn checksum_inner(
        &self,
        algorithm: ChecksumAlgorithm,
    ) -> Result<Option<Checksum>, TransferError> {
        let inner = &self.inner;
        let mut lane = inner.request_lane().await;
        let want = [
            (
                HeaderName::from_static("want-digest"),
                HeaderValue::from_static(algorithm.rfc3230_name()),
            ),
            (
                HeaderName::from_static(WANT_REPR_DIGEST),
                HeaderValue::from_str(&format!("{}=10", algorithm.rfc9530_key()))
                    .map_err(|e| TransferError::Config(e.to_string()))?,
            ),
        ];
        let head = lane
            .request(Method::HEAD, inner.target(), &want, "")
            .await?;
        let status = head.response.status();
        if !status.is_success() {
            let err = TransferError::Status {
                peer: head.peer.clone(),
                status: status.as_u16(),
                what: format!(
                    "HEAD {} (Want-Digest: {})",
                    head.target,
                    algorithm.rfc3230_name()
                ),
            };
            drain(head.response.into_body(), inner).await;
            return Err(err);
        }
        let found = declared_checksums(head.response.headers())
            .into_iter()
            .find(|c| c.algorithm == algorithm);
        drain(head.response.into_body(), inner).await;
        if let Some(conn) = lane.take_connection() {
            inner.park(conn);
        }
        Ok(found)
    }

    /// `GET` with `Range: bytes=0-0`: size from `Content-Range` (206) or `Content-Length` (200,
    /// no range support).
    async fn probe(
        &self,
        lane: &mut HttpLane,
        target: Target,
    ) -> Result<RemoteInfo, TransferError> {
        let headers = [
            (header::RANGE, HeaderValue::from_static("bytes=0-0")),
            (
                HeaderName::from_static(WANT_REPR_DIGEST),
                HeaderValue::from_static(SHA256_KEY),
            ),
        ];
        let Answer {
            response,
            target,
            peer,
            ..
        } = lane
            .request(Method::GET, target, &headers, " bytes=0-0")
            .await?;
        let url = target.to_string();
        let what = format!("GET {url} bytes=0-0");
        let h = response.headers();
        let unexpected = |message: String| TransferError::Unexpected {
            peer: peer.clone(),
            message: format!("{what}: {message}"),
        };
        let mut info = described(&url, h, &peer)?;
        match response.status() {
            StatusCode::PARTIAL_CONTENT => {
                let cr = header_str(h, header::CONTENT_RANGE)
                    .ok_or_else(|| unexpected("206 without content-range".into()))?;
                let (_, total) = parse_content_range(cr)
                    .ok_or_else(|| unexpected(format!("unreadable content-range {cr:?}")))?;
                info.size =
                    total.ok_or_else(|| unexpected("server does not tell the size".into()))?;
                read_small(response.into_body(), &self.inner, &peer, &what).await?;
            }
            StatusCode::OK => {
                // Ranges are ignored; the body is the whole resource, which we do not want here.
                // Dropping it closes an HTTP/1.1 connection, which the lane replaces.
                info.size = content_length(h)
                    .ok_or_else(|| unexpected("200 without content-length".into()))?;
                info.accepts_ranges = false;
            }
            StatusCode::RANGE_NOT_SATISFIABLE => {
                // Only an empty resource cannot satisfy bytes=0-0.
                let cr = header_str(h, header::CONTENT_RANGE);
                info.size = cr
                    .and_then(parse_unsatisfied_content_range)
                    .filter(|s| *s == 0)
                    .ok_or_else(|| unexpected(format!("416 with content-range {cr:?}")))?;
                drain(response.into_body(), &self.inner).await;
            }
            s => {
                drain(response.into_body(), &self.inner).await;
                return Err(TransferError::Status {
                    peer,
                    status: s.as_u16(),
                    what,
                });
            }
        }
        Ok(info)
    }

    pub(crate) async fn open(&self, index: usize) -> Result<Box<dyn Lane>, TransferError> {
        let inner = &self.inner;
        let mut lane = HttpLane::new(inner.clone(), index);
        if inner.mode().is_none() {
            // Auto over TLS before any connection: connect now so the lane knows whether it
            // shares an HTTP/2 connection or owns an HTTP/1.1 one.
            let slot = inner.h2_layout().connection_of(index);
            match inner.shared_sender(slot, index, false).await? {
                SharedPick::H2(..) => {}
                SharedPick::H1(conn) => lane.adopt(conn),
            }
        } else if inner.mode() == Some(Mode::H1) {
            if let Some(conn) = inner.unpark().await {
                lane.adopt(conn);
            }
        }
        Ok(Box::new(lane))
    }
}

impl Transport for HttpTransport {
    fn stat(&self) -> BoxFuture<'_, Result<RemoteInfo, TransferError>> {
        Box::pin(self.stat_inner())
    }

    fn open_lane(&self, index: usize) -> BoxFuture<'_, Result<Box<dyn Lane>, TransferError>> {
        Box::pin(self.open(index))
    }

    fn checksum(
        &self,
        algorithm: ChecksumAlgorithm,
    ) -> BoxFuture<'_, Result<Option<Checksum>, TransferError>> {
        Box::pin(self.checksum_inner(algorithm))
    }

    fn open_first(
        &self,
        index: usize,
        first: FirstRequest,
    ) -> BoxFuture<'_, Result<Opened, TransferError>> {
        Box::pin(self.open_with_first_range(index, first))
    }

    fn open_speculative(
        &self,
        index: usize,
        range: std::ops::Range<u64>,
        want_digest: bool,
    ) -> BoxFuture<'_, Result<Speculated, TransferError>> {
        Box::pin(self.open_speculative_range(index, range, want_digest))
    }

    fn connection_stats(&self) -> Vec<ConnectionStats> {
        self.inner.pool.stats.collect()
    }

    fn spread_report(&self) -> Option<xfer_core::progress::SpreadReport> {
        self.inner.pool.spread.report()
    }

    fn protocol(&self) -> String {
        match (self.inner.mode(), self.inner.target().origin.security) {
            (Some(Mode::H1), _) => "http/1.1".into(),
            (Some(Mode::H2), Security::Tls) => "h2".into(),
            (Some(Mode::H2), Security::Plain) => "h2c".into(),
            (None, _) => "https (h2 or http/1.1, not yet negotiated)".into(),
        }
    }

    fn request_ahead(&self) -> Option<bool> {
        match self.inner.mode() {
            Some(Mode::H2) => {
                let h2 = &self.inner.cfg.http2;
                // The layout in use: once loss spreads the lanes, each connection's window is
                // shared by fewer of them.
                let lanes = self.inner.h2_layout().streams_per_connection as u64;
                // An adaptive window keeps the connection's no larger than a stream's.
                let room =
                    !h2.adaptive_window && h2.connection_window >= 2 * lanes * h2.stream_window;
                room.then_some(true)
            }
            // Pipelined on the lane's own connection (see `pipeline`).
            Some(Mode::H1) => Some(true),
            None => Some(false),
        }
    }

    fn default_lanes(&self) -> usize {
        let mode = self.inner.mode().unwrap_or(Mode::H1);
        self.inner.cfg.layout(mode).count()
    }

    fn list<'a>(
        &'a self,
        dir_url: &'a str,
        request: ListRequest,
    ) -> BoxFuture<'a, Result<ListResponse, TransferError>> {
        Box::pin(listing::list(&self.inner, dir_url, request))
    }

    fn sibling(&self, url: &str) -> Result<Arc<dyn Transport>, TransferError> {
        Ok(Arc::new(HttpTransport::sibling(self, url)?))
    }

    fn duplicates(&self) -> Vec<String> {
        self.duplicates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use xfer_core::transport::Transport;

    use super::*;
    use crate::config::HttpVersion;

    #[test]
    fn http2_requests_ahead_once_loss_has_spread_its_lanes() -> Result<(), TransferError> {
        let cfg = HttpClientConfig {
            version: HttpVersion::Http2,
            ..HttpClientConfig::default()
        };
        let t = HttpTransport::new("https://localhost:1/file", cfg)?;
        // 8 lanes on one connection: next bodies could take its whole 64 MiB window.
        assert_eq!(t.request_ahead(), None);
        let (t0, rtt) = (Instant::now(), Some(Duration::from_millis(100)));
        let spread = &t.inner.pool.spread;
        let after_startup = t0 + super::startup(rtt);
        assert!(!spread.observe(0, rtt, t0));
        assert!(!spread.observe(1, rtt, after_startup));
        assert!(spread.observe(2, rtt, after_startup + Duration::from_secs(1)));
        // One lane per connection now: its window holds two streams' worth.
        assert_eq!(t.inner.h2_layout().streams_per_connection, 1);
        assert_eq!(t.request_ahead(), Some(true));
        Ok(())
    }

    #[test]
    fn http2_starts_spread_when_the_last_transfer_to_the_peer_lost_packets(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("paths");
        let now = std::time::SystemTime::now();
        PathMemory::new(file.clone()).remember("localhost:1", Verdict::Lossy, now)?;
        PathMemory::new(file.clone()).remember("localhost:2", Verdict::Clean, now)?;
        let make = |url: &str, version, connections| {
            HttpTransport::new(
                url,
                HttpClientConfig {
                    version,
                    path_memory: Some(file.clone()),
                    lanes: xfer_core::layout::LaneLayout {
                        connections,
                        streams_per_connection: None,
                    },
                    ..HttpClientConfig::default()
                },
            )
        };
        let spread = make("https://localhost:1/f", HttpVersion::Http2, None)?;
        assert_eq!(spread.inner.h2_layout(), Lanes::new(8, 1));
        let clean = make("https://localhost:2/f", HttpVersion::Http2, None)?;
        assert_eq!(clean.inner.h2_layout(), Lanes::new(1, 8));
        let unknown = make("https://localhost:3/f", HttpVersion::Http2, None)?;
        assert_eq!(unknown.inner.h2_layout(), Lanes::new(1, 8));
        // Connections given by hand are kept.
        let by_hand = make("https://localhost:1/f", HttpVersion::Http2, Some(2))?;
        assert_eq!(by_hand.inner.h2_layout(), Lanes::new(2, 8));
        Ok(())
    }
}
