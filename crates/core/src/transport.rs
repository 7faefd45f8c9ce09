//! The interface every transport (HTTP/1.1, HTTP/2, QUIC, in-memory test lanes) implements.
//!
//! A transport knows how to *stat* one remote resource and how to open *lanes*: independent
//! request channels (an HTTP/1.1 connection, an HTTP/2 or QUIC stream slot on a shared
//! connection). The engine drives lanes; a lane serves one range request at a time.
//!
//! ```text
//!   engine ──stat()──────────────► Transport ──► RemoteInfo (size, validators, digests)
//!   engine ──checksum(alg)───────► Transport ──► the server's adler32/MD5/SHA-256, if any
//!   engine ──open_first(0, len)──► Transport ──► Opened: RemoteInfo, lane 0, and the body of
//!                                                bytes 0..len (the first range doubles as stat)
//!   engine ──open_speculative(i)─► Transport ──► Speculated: lane i, and the body of the
//!                                                range it asked for before the size was known
//!   engine ──open_lane(i)────────► Transport ──► Box<dyn Lane>
//!   tree   ──list(dir, format)───► Transport ──► ListResponse (media type, pulled body)
//!   tree   ──sibling(url)────────► Transport ──► a Transport for another resource that
//!                                                shares this one's connections
//!   lane   ──fetch(RangeRequest)─► Box<dyn RangeBody> ──next_data()*──► Bytes … None
//!                                                     └─trailer_digest() after the end
//! ```

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::digest::Sha256Digest;
use crate::error::TransferError;

/// A boxed, sendable future: the trait methods below return these so transports can be used as
/// trait objects (`Box<dyn Transport>`) chosen at run time.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the engine knows about the remote resource before fetching it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteInfo {
    /// The resource's address after redirects; lanes fetch from here.
    pub url: String,
    /// Total size in bytes.
    pub size: u64,
    /// Strong or weak entity tag, verbatim (with quotes), when the server sent one.
    pub etag: Option<String>,
    /// `Last-Modified` verbatim (HTTP date) or the QUIC protocol's mtime, when known.
    pub last_modified: Option<String>,
    /// Whether byte-range requests are honoured. When false the engine falls back to one
    /// sequential stream of the whole resource.
    pub accepts_ranges: bool,
    /// The server's SHA-256 of the whole resource (`Repr-Digest`), when it sent one.
    pub sha256: Option<Sha256Digest>,
}

impl RemoteInfo {
    /// The validator to send with `If-Range` (HTTP) or its QUIC equivalent: a strong ETag when
    /// there is one, else nothing (a weak ETag or a date cannot guard a range, RFC 9110 §13.1.5).
    pub fn range_validator(&self) -> Option<&str> {
        self.etag.as_deref().filter(|e| !e.starts_with("W/"))
    }
}

/// One request for bytes `range` of the resource the transport was built for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRequest {
    /// Half-open byte range within `[0, size)`. An empty range is never requested.
    pub range: Range<u64>,
    /// The resource size the engine planned with; a response that reports another size means
    /// the remote changed.
    pub expected_size: u64,
    /// Ask the peer for a digest of the bytes it sends (HTTP: `Want-Content-Digest: sha-256`,
    /// answered by a `Content-Digest` trailer).
    pub want_digest: bool,
    /// Validator the response must match (see [`RemoteInfo::range_validator`]).
    pub validator: Option<String>,
    /// Whether to ask for the whole resource without a `Range` header (servers without range
    /// support); `range` is then `0..size`.
    pub whole: bool,
}

/// The body of one range response, pulled by the engine.
pub trait RangeBody: Send {
    /// The next piece of the body, `Ok(None)` at its end. A body that ends before the requested
    /// length must return [`TransferError::Truncated`], never a short `Ok(None)`.
    fn next_data(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, TransferError>>;

    /// The SHA-256 the peer sent for the bytes of this response (HTTP `Content-Digest` trailer),
    /// available once [`RangeBody::next_data`] has returned `Ok(None)`.
    fn trailer_digest(&self) -> Option<Sha256Digest>;
}

/// What the engine asks of the first request, which also learns the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstRequest {
    /// Ask for bytes `0..len` (the first chunk); fewer come back when the resource is smaller.
    pub len: u64,
    /// Ask for a digest of those bytes, as [`RangeRequest::want_digest`].
    pub want_digest: bool,
}

/// The answer to [`Transport::open_first`]: the resource, the lane that asked, and the body
/// of the first range when the answer carried one.
pub struct Opened {
    pub info: RemoteInfo,
    pub lane: Box<dyn Lane>,
    pub first: Option<FirstBody>,
}

/// A response body that arrived with the resource's description, for the lane that asked to
/// read as its first chunk.
pub struct FirstBody {
    /// The bytes it carries: `0..min(len, size)`, or `0..size` when `whole`.
    pub range: Range<u64>,
    /// The server ignored the range and sends the whole resource.
    pub whole: bool,
    pub body: Box<dyn RangeBody>,
}

/// What [`Transport::open_speculative`] brings back: the lane, and, when the answer carried
/// the bytes asked for, the resource as that answer described it with their body.
pub struct Speculated {
    pub lane: Box<dyn Lane>,
    pub answer: Option<(RemoteInfo, FirstBody)>,
}

impl std::fmt::Debug for Speculated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Speculated")
            .field("answer", &self.answer.as_ref().map(|(i, b)| (i, &b.range)))
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("info", &self.info)
            .field("first", &self.first.as_ref().map(|b| (&b.range, b.whole)))
            .finish_non_exhaustive()
    }
}

/// How TLS began on the connection that carried a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsStart {
    /// No TLS (plain TCP), or not known.
    #[default]
    None,
    /// A full handshake.
    Full,
    /// A resumed session (TLS 1.3 PSK from an earlier connection's ticket).
    Resumed,
    /// A resumed session whose first request went as early data the server took (TLS 1.3
    /// early data over TCP, QUIC 0-RTT).
    EarlyData,
    /// The request went as early data, which the server refused (it did not know the
    /// session); it was sent again once the handshake completed.
    EarlyDataRefused,
}

/// The round trips a lane's first request waited for before its response head arrived, as
/// its transport counts them (docs/design.md, "Start-up"). Each is one exchange with the
/// server that had to complete before the next could begin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RoundTrips {
    /// TCP's handshake: 1 for a new TCP connection, 0 for QUIC, a connection that was
    /// already open before the lane needed it, or one whose SYN carried the ClientHello and
    /// the server took it (TCP Fast Open).
    pub tcp: u8,
    /// TLS or QUIC handshake round trips before the request could go: 1 for TLS 1.3 (full or
    /// resumed) or QUIC, 2 with a HelloRetryRequest, 0 without TLS, over an open connection,
    /// or when the request rode in early data.
    pub handshake: u8,
    /// The request: 1, plus 1 per redirect followed.
    pub requests: u8,
    pub tls: TlsStart,
    /// The connection was opened while the first lane's request was learning the resource,
    /// before this lane knew what to ask: of its round trips only `requests` came after the
    /// first answer.
    pub preconnected: bool,
}

impl RoundTrips {
    /// All round trips on the lane's own path to its first byte.
    pub fn total(&self) -> u8 {
        self.tcp + self.handshake + self.requests
    }
}

impl std::fmt::Display for RoundTrips {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.tcp > 0 {
            parts.push(format!("tcp {}", self.tcp));
        }
        let tls = match self.tls {
            TlsStart::None => "",
            TlsStart::Full => " full",
            TlsStart::Resumed => " resumed",
            TlsStart::EarlyData => " 0-rtt",
            TlsStart::EarlyDataRefused => " 0-rtt refused",
        };
        if self.handshake > 0 || !tls.is_empty() {
            parts.push(format!("handshake {}{tls}", self.handshake));
        }
        parts.push(format!("request {}", self.requests));
        write!(f, "{} ({})", self.total(), parts.join(" + "))?;
        if self.preconnected {
            write!(f, ", connected during the first request")?;
        }
        Ok(())
    }
}

/// A request channel that serves one range request at a time.
pub trait Lane: Send {
    /// Send `req` and return its body once the response head has arrived.
    fn fetch<'a>(
        &'a mut self,
        req: &'a RangeRequest,
    ) -> BoxFuture<'a, Result<Box<dyn RangeBody + 'a>, TransferError>>;

    /// A short label for reports, e.g. `conn 3` or `conn 0 / stream slot 5`.
    fn label(&self) -> String;

    /// The connection this lane rides on, an index into [`Transport::connection_stats`].
    fn connection(&self) -> usize;

    /// Set up the lane's connection now if it has none, so its first request finds it ready:
    /// the engine does this for every lane while the first request learns the resource.
    fn connect(&mut self) -> BoxFuture<'_, Result<(), TransferError>> {
        Box::pin(async { Ok(()) })
    }

    /// How the first request this lane sent reached its response head, once it has.
    fn first_round_trips(&self) -> Option<RoundTrips> {
        None
    }

    /// A second handle on this lane's connection, for the request the engine sends ahead:
    /// its request goes out at once, behind this handle's (HTTP/1.1 pipelining), and its
    /// answer is read once the body before it has ended. `None` (the default) when the
    /// connection cannot carry a second request; the engine then opens another lane for it.
    fn twin(&mut self) -> Option<Box<dyn Lane>> {
        None
    }

    /// Send a whole file in one request, for the server to check against `sha256` and store.
    fn put_whole<'a>(
        &'a mut self,
        data: Bytes,
        sha256: Sha256Digest,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        let _ = (data, sha256);
        Box::pin(async { Err(uploads_unsupported()) })
    }

    /// Send one chunk of a parallel upload (docs/upload-protocol.md).
    fn put_chunk<'a>(
        &'a mut self,
        chunk: &'a ChunkUpload,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        let _ = chunk;
        Box::pin(async { Err(uploads_unsupported()) })
    }

    /// What the server holds of upload `id`; `None` when it knows no such upload.
    fn upload_status<'a>(
        &'a mut self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<UploadStatus>, TransferError>> {
        let _ = id;
        Box::pin(async { Err(uploads_unsupported()) })
    }

    /// Whether the server says it understands xfer's parallel upload protocol
    /// (docs/upload-protocol.md: `OPTIONS` answered with `Xfer-Upload-Protocol: 1`). Any
    /// other server may ignore `Content-Range` on a `PUT` and store a chunk as the whole
    /// file, so it gets whole-file requests only.
    fn speaks_upload_protocol(&mut self) -> BoxFuture<'_, Result<bool, TransferError>> {
        Box::pin(async { Ok(false) })
    }

    /// Send a whole local file as the body of one plain request (`PUT` with its
    /// `Content-Length`), read from disk as it goes out, so its size is not bounded by
    /// memory. Returns the checksums the server declared of what it stored (`Digest`,
    /// `Repr-Digest`), if any.
    fn put_file(&mut self, body: FileBody) -> BoxFuture<'_, Result<Vec<Checksum>, TransferError>> {
        let _ = body;
        Box::pin(async { Err(uploads_unsupported()) })
    }

    /// Ask the server to check upload `id` against the whole file's `sha256` and put it in
    /// place.
    fn complete_upload<'a>(
        &'a mut self,
        id: &'a str,
        sha256: Sha256Digest,
    ) -> BoxFuture<'a, Result<(), TransferError>> {
        let _ = (id, sha256);
        Box::pin(async { Err(uploads_unsupported()) })
    }
}

fn uploads_unsupported() -> TransferError {
    TransferError::Config("this transport cannot upload (use an https:// or http:// URL)".into())
}

/// A local file sent whole as one request body ([`Lane::put_file`]). Cloning it is cheap;
/// every request built from it (a retry, a redirect) reads the file again from the start.
#[derive(Debug, Clone)]
pub struct FileBody {
    pub file: Arc<std::fs::File>,
    /// For errors.
    pub path: std::path::PathBuf,
    /// The body's length, sent as `Content-Length`; the file must still hold this many bytes.
    pub size: u64,
    /// Bytes handed to the connection so far in the current attempt, for progress.
    pub sent: Arc<std::sync::atomic::AtomicU64>,
}

/// One chunk of a parallel upload.
#[derive(Debug, Clone)]
pub struct ChunkUpload {
    /// The client's id for the whole upload: the same for every chunk and on every re-run
    /// of the same upload.
    pub id: String,
    pub range: Range<u64>,
    /// Size of the whole file.
    pub total: u64,
    pub data: Bytes,
    /// SHA-256 of `data`, which the server checks on arrival.
    pub sha256: Sha256Digest,
}

/// What the server holds of a parallel upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadStatus {
    pub size: u64,
    /// Verified ranges, sorted and disjoint.
    pub received: Vec<Range<u64>>,
}

impl UploadStatus {
    /// The received ranges as servers write them, `0-1023,4096-8191` (inclusive ends), as
    /// sorted half-open ranges; what does not parse is left out, which only means it is sent
    /// again.
    pub fn parse_ranges(v: &str) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> = v
            .split(',')
            .filter_map(|part| {
                let (a, b) = part.trim().split_once('-')?;
                let (a, b) = (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?);
                (a <= b).then(|| a..b + 1)
            })
            .collect();
        out.sort_by_key(|r| r.start);
        out
    }
}

/// Which listing of a directory to ask for; `docs/listing.md` describes each format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListRequest {
    /// xfer's recursive manifest: HTTP `GET <dir>/?manifest` with
    /// `Accept: application/x-xfer-manifest+jsonl`, `xfer/1` `LIST`. A server that is not xfer
    /// may answer it with something else (nginx sends its index): look at the media type.
    Manifest,
    /// WebDAV `PROPFIND` with `Depth: 1` (HTTP only).
    Propfind,
    /// `GET <dir>/`: an index page, JSON from nginx's `autoindex_format json` (HTTP only).
    Index,
}

/// A listing response whose body is still to be read.
pub struct ListResponse {
    /// Where the listing came from after redirects (relative names resolve against it).
    pub url: String,
    /// The response's media type, lower-case, without parameters, when it has one.
    pub media_type: Option<String>,
    /// The body, pulled piece by piece; its `trailer_digest` is always `None`.
    pub body: Box<dyn RangeBody>,
}

impl std::fmt::Debug for ListResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListResponse")
            .field("url", &self.url)
            .field("media_type", &self.media_type)
            .finish_non_exhaustive()
    }
}

/// A client for one remote resource.
pub trait Transport: Send + Sync {
    /// Learn the resource's size, validators and digests (HTTP `HEAD`, or a zero-length probe).
    fn stat(&self) -> BoxFuture<'_, Result<RemoteInfo, TransferError>>;

    /// The server's `algorithm` checksum of the whole resource (HTTP: `Want-Digest`, answered
    /// by `Digest`, as gfal2 asks), `Ok(None)` when the server sent none for that algorithm.
    fn checksum(
        &self,
        algorithm: ChecksumAlgorithm,
    ) -> BoxFuture<'_, Result<Option<Checksum>, TransferError>> {
        Box::pin(async move {
            Err(TransferError::Config(format!(
                "{} cannot ask the server for a whole-file {algorithm}; use an https:// URL",
                self.protocol()
            )))
        })
    }

    /// Open lane `index` and learn the resource with its first request: for HTTP a `GET` of
    /// bytes `0..first.len` whose answer (`206` with `Content-Range`, or a `200` with the whole
    /// resource) gives size and validators, instead of a separate `HEAD`. The default asks
    /// [`Transport::stat`] and then opens the lane, with no body.
    fn open_first(
        &self,
        index: usize,
        first: FirstRequest,
    ) -> BoxFuture<'_, Result<Opened, TransferError>> {
        let _ = first;
        Box::pin(async move {
            let info = self.stat().await?;
            let lane = self.open_lane(index).await?;
            Ok(Opened {
                info,
                lane,
                first: None,
            })
        })
    }

    /// Open lane `index` and send its first request at once, before the resource is known:
    /// bytes `range`, the chunk the engine will hand this lane when the first answer shows
    /// the file is big enough (docs/design.md, "Start-up"). The lane then waits no round trip
    /// after that answer. The answer carries the body only when it is exactly those bytes
    /// (or their part up to the end of the resource), with the resource as it described it,
    /// which the engine compares with what the first request learned and drops the body on
    /// any difference. A range past the end, a server that ignores ranges, or any other
    /// answer brings back the lane alone. The default connects the lane and asks nothing.
    fn open_speculative(
        &self,
        index: usize,
        range: Range<u64>,
        want_digest: bool,
    ) -> BoxFuture<'_, Result<Speculated, TransferError>> {
        let _ = (range, want_digest);
        Box::pin(async move {
            let mut lane = self.open_lane(index).await?;
            lane.connect().await?;
            Ok(Speculated { lane, answer: None })
        })
    }

    /// Open lane number `index` (0-based). Transports map lanes onto connections as their
    /// configuration says (one connection per lane for HTTP/1.1, K streams on M connections
    /// for HTTP/2 and QUIC). Opening may connect lazily.
    fn open_lane(&self, index: usize) -> BoxFuture<'_, Result<Box<dyn Lane>, TransferError>>;

    /// Per-connection statistics from the OS or the QUIC stack, for the final report.
    fn connection_stats(&self) -> Vec<ConnectionStats> {
        Vec::new()
    }

    /// A name for reports: `http/1.1`, `h2`, `h2c`, `quic`.
    fn protocol(&self) -> String;

    /// Whether lanes may send their next request before their body ends, and whether they
    /// should by default ([`crate::get::GetConfig::request_ahead`]). `Some(true)`: yes, one
    /// more stream on a connection already open, or a request pipelined on it (HTTP/1.1).
    /// `Some(false)`: possible but not by default (a transport whose protocol is not settled
    /// until a connection's handshake). `None`: never, because the next bodies could starve
    /// the current ones: on a shared connection whose window is smaller than two stream
    /// windows per lane, unread next bodies may take the whole connection window and stall
    /// the bodies being read. Asked before each request: the answer may change as a transfer
    /// changes how many lanes share a connection.
    fn request_ahead(&self) -> Option<bool> {
        Some(true)
    }

    /// How many lanes this transport is configured for (HTTP/1.1: connections; HTTP/2 and
    /// QUIC: connections × streams per connection). The engine opens this many unless told
    /// otherwise, and only one when the server does not accept ranges.
    fn default_lanes(&self) -> usize;

    /// Ask for the listing of the directory at `dir_url` (an absolute URL ending in `/`) on
    /// this transport's connections. A status other than success is
    /// [`TransferError::Status`], so the caller can fall back to another format.
    fn list<'a>(
        &'a self,
        dir_url: &'a str,
        request: ListRequest,
    ) -> BoxFuture<'a, Result<ListResponse, TransferError>> {
        let _ = request;
        Box::pin(async move {
            Err(TransferError::Config(format!(
                "{} cannot list {dir_url}",
                self.protocol()
            )))
        })
    }

    /// Per source: what it delivered (several sources only), for the final report.
    fn source_reports(&self) -> Vec<crate::progress::SourceReport> {
        Vec::new()
    }

    /// When the transport spread its lanes over more connections than it started with, how
    /// many and why, for the final report.
    fn spread_report(&self) -> Option<crate::progress::SpreadReport> {
        None
    }

    /// Other places that hold this resource, as the server named them in its last answer to
    /// `stat` (HTTP `Link: <...>; rel=duplicate`, RFC 6249), unchecked.
    fn duplicates(&self) -> Vec<String> {
        Vec::new()
    }

    /// A transport for `url`, another resource on the same server, that shares this one's
    /// connections: a tree of files then pays one handshake per connection, not per file.
    fn sibling(&self, url: &str) -> Result<Arc<dyn Transport>, TransferError> {
        Err(TransferError::Config(format!(
            "{} cannot fetch {url} on shared connections",
            self.protocol()
        )))
    }

    /// Close the connections, and with them those of every [`Transport::sibling`], telling
    /// the peers: call it once done with all of them, before the process exits. A peer that
    /// is not told waits out its idle timeout (30 s for QUIC) with the connection counted
    /// as open; an xfer server divides a returning client's Careful Resume jump among its
    /// open connections, so a stale one shrinks the next command's start. Waits a moment
    /// at most for the goodbye to leave. Lanes opened later connect again. The default does
    /// nothing: TCP's kernel sends its FIN even after the process has exited.
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// What one connection saw, as far as the OS or the QUIC stack tells.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ConnectionStats {
    /// Index of the connection, as lanes report it.
    pub index: usize,
    /// Peer address.
    pub peer: String,
    /// Congestion control algorithm in use (`bbr`, `cubic`, ...).
    pub congestion: Option<String>,
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: Option<u64>,
    /// Congestion window in bytes (TCP: `snd_cwnd * mss`; QUIC: quinn's window).
    pub cwnd_bytes: Option<u64>,
    /// Segments (TCP) or packets (QUIC) retransmitted or declared lost.
    pub retransmits: Option<u64>,
    /// QUIC congestion events.
    pub congestion_events: Option<u64>,
    /// Bytes received on this connection, payload and framing.
    pub bytes_received: Option<u64>,
    /// Socket buffer sizes the kernel actually granted (bytes), when they were set.
    pub send_buffer: Option<u64>,
    pub recv_buffer: Option<u64>,
    /// TCP: packets that reached this side out of order (a hole before them: loss on the way
    /// here), summed over the connection's sockets. The loss signal of a download, where
    /// `retransmits` (this side's own) stays near zero. The adaptive lane count and HTTP/2's
    /// spreading over connections watch it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_order_packets: Option<u64>,
    /// QUIC: datagrams this end received, and ACK frames it sent (each rides a datagram it
    /// sends). Their ratio is how often the receiver of a download answers: once per batch of
    /// datagrams it reads once `QuicTuning::ack_eliciting_threshold` + 1 packets have come,
    /// and besides on a gap, on its delay timer and on packets it sends anyway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datagrams_received: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acks_sent: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn received_ranges_parse_and_sort() {
        assert_eq!(
            UploadStatus::parse_ranges("4096-8191, 0-1023,junk,9-3"),
            vec![0..1024, 4096..8192]
        );
        assert!(UploadStatus::parse_ranges("").is_empty());
    }
}
