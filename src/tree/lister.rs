//! Listing a remote tree, streamed: entries reach the tree driver as they are parsed, so files
//! start before the listing ends.
//!
//! ```text
//!  Transport::list ─► body pump (async) ─► 4-piece channel ─► parser (blocking pool)
//!                                                              │ manifest / PROPFIND / nginx JSON
//!                                                              ▼ RelPath checked, prefixed
//!                                                       entries channel ─► tree driver
//! ```
//!
//! Format: xfer's manifest first (one request for the whole tree). A server that answers it
//! with nginx's JSON index is listed that way, one directory per request; otherwise
//! `PROPFIND Depth: 1`, one directory per request; then `GET <dir>/` as JSON.
//!
//! Bounds ([`ListingLimits`]): entries, directories and depth are counted as entries pass to
//! the driver, the time spent waiting for the server as each answer and each piece of a body
//! arrives; the first bound reached ends the listing with [`ListError::Cap`]. A subdirectory
//! whose listing fails is reported ([`Listed::failed_dirs`]) and the rest of the tree goes on.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::io::{self, BufReader, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use tokio::sync::mpsc;
use xfer_common::listing::html_index::{read_html_index, MAX_PAGE_BYTES};
use xfer_common::listing::manifest::{read_manifest, MANIFEST_MEDIA_TYPE};
use xfer_common::listing::name::MAX_DEPTH;
use xfer_common::listing::{autoindex, propfind, ListingEntry, ListingError, RelPath};
use xfer_core::transport::{ListRequest, ListResponse, RangeBody, Transport};
use xfer_core::TransferError;

/// Everything but RFC 3986's unreserved characters is percent-encoded in a path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Pieces of a listing body in flight between the pump and the parser.
const BODY_PIECES: usize = 4;

/// Attempts per listing request on transient errors (reset, 5xx).
const LIST_ATTEMPTS: u32 = 4;

/// Bounds on what one tree listing may cost. A hostile or broken server decides how many
/// entries and directories it lists and how fast it sends them; each of these caps ends the
/// listing with an error that names it ([`ListError::Cap`]) rather than letting it grow
/// without end.
#[derive(Debug, Clone, PartialEq)]
pub struct ListingLimits {
    /// Entries (files and directories) over the whole tree. Default 10,000,000: far above the
    /// datasets xfer is sized for (thousands to a million files), low enough that the
    /// per-entry state a run keeps (queued files, directory times, case-folded names) stays
    /// within a few GB.
    pub max_entries: u64,
    /// Directories over the whole tree: each is a local directory and, in the one-level
    /// formats, a request. Default 100,000 (the 50-wide listing of issue 42 reaches it in
    /// three levels).
    pub max_dirs: u64,
    /// Levels below the listed directory, 1 to 64. Default 64, the most a name may have
    /// ([`MAX_DEPTH`]).
    pub max_depth: usize,
    /// Time spent waiting for the server's listing answers: request heads and body pieces,
    /// not the time the listing is paused because files wait for lanes. Default 1 h. Each
    /// single read is also bounded by the transport's idle timeout; this bounds a listing that
    /// drips an entry just often enough to pass that.
    pub max_time: Duration,
}

impl Default for ListingLimits {
    fn default() -> Self {
        Self {
            max_entries: 10_000_000,
            max_dirs: 100_000,
            max_depth: MAX_DEPTH,
            max_time: Duration::from_secs(3600),
        }
    }
}

impl ListingLimits {
    /// Refuse bounds that would stop every listing or that names could never reach.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_entries == 0 || self.max_dirs == 0 || self.max_time.is_zero() {
            return Err("listing limits (entries, directories, time) must be above 0".into());
        }
        if !(1..=MAX_DEPTH).contains(&self.max_depth) {
            return Err(format!(
                "listing depth {} is outside 1-{MAX_DEPTH}",
                self.max_depth
            ));
        }
        Ok(())
    }
}

/// Which bound of [`ListingLimits`] a listing reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListingCap {
    Entries,
    Directories,
    Depth,
    Time,
}

impl ListingCap {
    /// The `xfer get` flag that raises it.
    pub fn flag(self) -> &'static str {
        match self {
            Self::Entries => "--max-listing-entries",
            Self::Directories => "--max-listing-dirs",
            Self::Depth => "--max-listing-depth",
            Self::Time => "--listing-timeout",
        }
    }

    fn describe(self, limits: &ListingLimits) -> String {
        match self {
            Self::Entries => format!("{} entries", limits.max_entries),
            Self::Directories => format!("{} directories", limits.max_dirs),
            Self::Depth => format!("{} levels deep", limits.max_depth),
            Self::Time => format!("{:?} waiting for the server", limits.max_time),
        }
    }
}

/// How a listing ended well: its format, and the subdirectories whose listing failed (each
/// with the error), which the rest of the tree went on without.
#[derive(Debug)]
pub struct Listed {
    pub format: ListingFormat,
    pub failed_dirs: Vec<(RelPath, ListError)>,
}

/// Which format the tree was listed in, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ListingFormat {
    XferManifest,
    Propfind,
    NginxJson,
    /// The links of an HTML index page (nginx, Apache, Python's `http.server`, rclone).
    HtmlIndex,
}

impl ListingFormat {
    /// The format an index answer (`GET <dir>/`) is in, by its media type.
    fn of_index(media_type: Option<&str>) -> Option<Self> {
        match media_type {
            Some("application/json") => Some(Self::NginxJson),
            Some("text/html" | "application/xhtml+xml") => Some(Self::HtmlIndex),
            _ => None,
        }
    }
}

/// Why a tree could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("listing {url}")]
    Request {
        url: String,
        #[source]
        source: TransferError,
    },
    #[error("listing {url}")]
    Read {
        url: String,
        #[source]
        source: ListingError,
    },
    #[error("{url} offers no listing xfer reads (xfer manifest, WebDAV PROPFIND, nginx autoindex JSON, an HTML index); the last answer was {last}")]
    NoFormat { url: String, last: String },
    #[error("listing {url}: it leads to {to}, a directory already listed (a loop through a link or a redirect); not listed again")]
    Revisit { url: String, to: String },
    #[error("listing {url} stopped at {limit}; raise {flag} to list more", flag = cap.flag())]
    Cap {
        url: String,
        cap: ListingCap,
        limit: String,
    },
}

impl ListError {
    /// Whether the error comes from the network or server rather than from the listing's text.
    pub fn is_remote(&self) -> bool {
        matches!(self, Self::Request { .. } | Self::NoFormat { .. })
    }

    /// Whether the whole listing must stop, not only the directory it came from: a cap, or
    /// the driver gone.
    fn ends_listing(&self) -> bool {
        matches!(
            self,
            Self::Cap { .. }
                | Self::Read {
                    source: ListingError::Stopped(_),
                    ..
                }
        )
    }
}

/// What the listing has cost so far, shared by the lister and the parsers it runs.
struct Tally {
    limits: ListingLimits,
    entries: AtomicU64,
    dirs: AtomicU64,
    /// The cap an entry ran into, set before the parser is told to stop.
    reached: OnceLock<ListingCap>,
}

impl Tally {
    fn new(limits: ListingLimits) -> Self {
        Self {
            limits,
            entries: AtomicU64::new(0),
            dirs: AtomicU64::new(0),
            reached: OnceLock::new(),
        }
    }

    /// Count `entry` (its full path); an error once it exceeds a cap.
    fn count(&self, entry: &ListingEntry) -> Result<(), ListingError> {
        let l = &self.limits;
        let cap = if entry.path.segments().count() > l.max_depth {
            Some(ListingCap::Depth)
        } else if self.entries.fetch_add(1, Ordering::Relaxed) >= l.max_entries {
            Some(ListingCap::Entries)
        } else if entry.is_dir() && self.dirs.fetch_add(1, Ordering::Relaxed) >= l.max_dirs {
            Some(ListingCap::Directories)
        } else {
            None
        };
        match cap {
            None => Ok(()),
            Some(cap) => {
                let _ = self.reached.set(cap);
                Err(ListingError::Stopped(cap.describe(l)))
            }
        }
    }

    fn cap_error(&self, cap: ListingCap, url: &str) -> ListError {
        ListError::Cap {
            url: url.to_string(),
            cap,
            limit: cap.describe(&self.limits),
        }
    }

    /// A parser's error, or the cap that made it stop.
    fn explain(&self, e: ListError, url: &str) -> ListError {
        match self.reached.get() {
            Some(cap) if !matches!(e, ListError::Cap { .. }) => self.cap_error(*cap, url),
            _ => e,
        }
    }
}

/// Time spent waiting for the server, against [`ListingLimits::max_time`].
struct Clock {
    limit: Duration,
    spent: Duration,
}

impl Clock {
    /// `fut`'s output, or `None` once the listing's time is used up.
    async fn wait<T>(&mut self, fut: impl Future<Output = T>) -> Option<T> {
        let left = self.limit.saturating_sub(self.spent);
        let start = Instant::now();
        let out = tokio::time::timeout(left, fut).await.ok();
        self.spent += start.elapsed();
        out
    }
}

/// `root` (ending in `/`) joined with `rel`'s segments, each percent-encoded.
pub fn url_of(root: &str, rel: &RelPath) -> String {
    let mut url = root.to_string();
    for (i, seg) in rel.segments().enumerate() {
        if i > 0 {
            url.push('/');
        }
        url.extend(utf8_percent_encode(seg, SEGMENT));
    }
    url
}

/// List the tree under `root` (a URL ending in `/`), sending every entry, its path relative to
/// `root`, to `out`, after recording the format in `chosen`. Ends when the listing is complete,
/// a cap of `limits` is reached, or `out` is closed.
pub async fn list_tree(
    transport: Arc<dyn Transport>,
    root: String,
    limits: ListingLimits,
    chosen: Arc<OnceLock<ListingFormat>>,
    out: mpsc::Sender<ListingEntry>,
) -> Result<Listed, ListError> {
    let tally = Arc::new(Tally::new(limits));
    let mut clock = Clock {
        limit: tally.limits.max_time,
        spent: Duration::ZERO,
    };
    let t = transport.as_ref();
    let first = list_once(t, &root, ListRequest::Manifest, &tally, &mut clock).await;
    let (format, response) = match first {
        Err(e @ ListError::Cap { .. }) => return Err(e),
        Ok(r) if r.media_type.as_deref() == Some(MANIFEST_MEDIA_TYPE) => {
            (ListingFormat::XferManifest, r)
        }
        Ok(r) if r.media_type.as_deref() == Some("application/json") => {
            (ListingFormat::NginxJson, r)
        }
        other => {
            let last = describe(&other);
            drop(other);
            match list_once(t, &root, ListRequest::Propfind, &tally, &mut clock).await {
                Ok(r) => (ListingFormat::Propfind, r),
                // 405 and 501 say "no such method here": the next format, at once.
                Err(ListError::Request { source, .. })
                    if !source.is_retryable() || is_unsupported(&source) =>
                {
                    match list_once(t, &root, ListRequest::Index, &tally, &mut clock).await {
                        Err(e @ ListError::Cap { .. }) => return Err(e),
                        Ok(r) => match ListingFormat::of_index(r.media_type.as_deref()) {
                            Some(f) => (f, r),
                            None => {
                                let last = describe(&Ok(r));
                                return Err(ListError::NoFormat { url: root, last });
                            }
                        },
                        Err(_) => return Err(ListError::NoFormat { url: root, last }),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    };
    tracing::info!(url = %root, ?format, "listing");
    let _ = chosen.set(format);
    if format == ListingFormat::XferManifest {
        let (tx, counted) = (out.clone(), Arc::clone(&tally));
        parse(response, &root, &mut clock, move |input| {
            read_manifest(BufReader::new(input), |e| forward(&tx, e, None, &counted))
        })
        .await
        .map_err(|e| tally.explain(e, &root))?;
        return Ok(Listed {
            format,
            failed_dirs: Vec::new(),
        });
    }
    // One directory per request, breadth first. The root's failure ends the listing; a
    // subdirectory's is recorded and the others go on.
    let mut failed_dirs = Vec::new();
    let mut pending: Option<(Option<RelPath>, ListResponse)> = Some((None, response));
    let mut dirs: VecDeque<RelPath> = VecDeque::new();
    // Where each listed directory's answer came from after redirects: a directory that leads
    // back to one already listed (a redirect loop) is not listed twice.
    let mut visited: HashSet<String> = HashSet::new();
    loop {
        let Some((prefix, response)) = pending.take() else {
            let Some(dir) = dirs.pop_front() else {
                return Ok(Listed {
                    format,
                    failed_dirs,
                });
            };
            let url = format!("{}/", url_of(&root, &dir));
            let request = match format {
                ListingFormat::Propfind => ListRequest::Propfind,
                _ => ListRequest::Index,
            };
            match list_once(t, &url, request, &tally, &mut clock).await {
                Ok(r) if visited.contains(&r.url) => {
                    let to = r.url.clone();
                    subdir_failed(&mut failed_dirs, dir, ListError::Revisit { url, to });
                }
                Ok(r) => pending = Some((Some(dir), r)),
                Err(e) if e.ends_listing() => return Err(e),
                Err(e) => subdir_failed(&mut failed_dirs, dir, e),
            }
            continue;
        };
        let (tx, counted) = (out.clone(), Arc::clone(&tally));
        let base = url_path(&response.url).to_string();
        let listed = response.url.clone();
        visited.insert(listed.clone());
        let page_url = listed.clone();
        let dir = prefix.clone();
        let found = parse(response, &listed, &mut clock, move |input| {
            let mut subdirs = Vec::new();
            let mut on_entry = |e: ListingEntry| {
                if e.is_dir() {
                    subdirs.push(e.path.clone());
                }
                forward(&tx, e, prefix.as_ref(), &counted)
            };
            match format {
                ListingFormat::Propfind => {
                    propfind::read_multistatus(BufReader::new(input), &base, &mut on_entry)?
                }
                ListingFormat::HtmlIndex => {
                    read_html_index(input, &page_url, MAX_PAGE_BYTES, &mut on_entry)?
                }
                _ => autoindex::read_autoindex(input, &mut on_entry)?,
            };
            let prefix = prefix.clone();
            subdirs
                .into_iter()
                .map(|d| match &prefix {
                    Some(p) => p.join(&d).map_err(ListingError::from),
                    None => Ok(d),
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| tally.explain(e, &listed));
        match (found, dir) {
            (Ok(found), _) => dirs.extend(found),
            (Err(e), None) => return Err(e),
            (Err(e), Some(_)) if e.ends_listing() => return Err(e),
            (Err(e), Some(dir)) => subdir_failed(&mut failed_dirs, dir, e),
        }
    }
}

fn subdir_failed(failed: &mut Vec<(RelPath, ListError)>, dir: RelPath, e: ListError) {
    tracing::warn!(dir = %dir, error = %xfer_core::error::error_chain(&e), "listing a subdirectory failed; going on with the rest");
    failed.push((dir, e));
}

/// A status that says the server does not do this request at all (RFC 9110 §15.5.6, §15.6.2),
/// which no retry changes.
fn is_unsupported(e: &TransferError) -> bool {
    matches!(
        e,
        TransferError::Status {
            status: 405 | 501,
            ..
        }
    )
}

/// Send `entry` (below `prefix`) to the driver; a closed channel stops the reader.
fn forward(
    tx: &mpsc::Sender<ListingEntry>,
    mut entry: ListingEntry,
    prefix: Option<&RelPath>,
    tally: &Tally,
) -> Result<(), ListingError> {
    if let Some(p) = prefix {
        entry.path = p.join(&entry.path)?;
    }
    tally.count(&entry)?;
    tx.blocking_send(entry)
        .map_err(|_| ListingError::Stopped("the transfer ended".into()))
}

fn describe(r: &Result<ListResponse, ListError>) -> String {
    match r {
        Ok(r) => format!("a {} body", r.media_type.as_deref().unwrap_or("untyped")),
        Err(e) => match e {
            ListError::Request { source, .. } => source.to_string(),
            other => other.to_string(),
        },
    }
}

/// The path of an absolute URL, without query or fragment.
fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    path.split(['?', '#']).next().unwrap_or(path)
}

/// One listing request, retried with backoff while the failure is transient.
async fn list_once(
    transport: &dyn Transport,
    url: &str,
    request: ListRequest,
    tally: &Tally,
    clock: &mut Clock,
) -> Result<ListResponse, ListError> {
    let mut attempt = 0;
    loop {
        let Some(answer) = clock.wait(transport.list(url, request)).await else {
            return Err(tally.cap_error(ListingCap::Time, url));
        };
        match answer {
            Ok(r) => return Ok(r),
            Err(e) if e.is_retryable() && !is_unsupported(&e) && attempt + 1 < LIST_ATTEMPTS => {
                attempt += 1;
                let wait = Duration::from_millis(250 << attempt);
                tracing::warn!(%url, error = %e, ?wait, "listing failed; retrying");
                tokio::time::sleep(wait).await;
            }
            Err(source) => {
                return Err(ListError::Request {
                    url: url.to_string(),
                    source,
                })
            }
        }
    }
}

/// Run `parser` on the blocking pool over `response`'s body, fed by an async pump.
async fn parse<T: Send + 'static>(
    response: ListResponse,
    url: &str,
    clock: &mut Clock,
    parser: impl FnOnce(ChannelReader) -> Result<T, ListingError> + Send + 'static,
) -> Result<T, ListError> {
    let (tx, rx) = mpsc::channel(BODY_PIECES);
    let reader = ChannelReader {
        rx,
        current: Bytes::new(),
    };
    let parsing = tokio::task::spawn_blocking(move || parser(reader));
    let pumped = pump(response.body, tx, clock).await;
    let parsed = parsing.await.map_err(|e| ListError::Read {
        url: url.to_string(),
        source: ListingError::Stopped(format!("the listing parser panicked: {e}")),
    })?;
    match (pumped, parsed) {
        (Err(Pumped::OutOfTime), _) => Err(ListError::Cap {
            url: url.to_string(),
            cap: ListingCap::Time,
            limit: format!("{:?} waiting for the server", clock.limit),
        }),
        // The transport's error says more than the parser's echo of it.
        (Err(Pumped::Failed(source)), _) => Err(ListError::Request {
            url: url.to_string(),
            source,
        }),
        (Ok(()), Err(source)) => Err(ListError::Read {
            url: url.to_string(),
            source,
        }),
        (Ok(()), Ok(v)) => Ok(v),
    }
}

/// Why the body stopped before its end.
enum Pumped {
    Failed(TransferError),
    OutOfTime,
}

/// Move the body into the parser's channel; stop early when the parser is gone. Only the
/// waits for the server count against the listing's time, not those for the parser.
async fn pump(
    mut body: Box<dyn RangeBody>,
    tx: mpsc::Sender<io::Result<Bytes>>,
    clock: &mut Clock,
) -> Result<(), Pumped> {
    loop {
        let Some(next) = clock.wait(body.next_data()).await else {
            // Dropping the sender ends the parser's input; this error is the one reported.
            return Err(Pumped::OutOfTime);
        };
        match next {
            Ok(Some(bytes)) => {
                if tx.send(Ok(bytes)).await.is_err() {
                    return Ok(());
                }
            }
            Ok(None) => return Ok(()),
            Err(e) => {
                let _ = tx.send(Err(io::Error::other(e.to_string()))).await;
                return Err(Pumped::Failed(e));
            }
        }
    }
}

/// The parser's side of the body channel, as a blocking `Read`.
pub(crate) struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_built_segment_by_segment() {
        let rel = RelPath::parse("a b/100%/ünï?#.bin").expect("valid");
        assert_eq!(
            url_of("https://h/run/", &rel),
            "https://h/run/a%20b/100%25/%C3%BCn%C3%AF%3F%23.bin"
        );
        assert_eq!(url_path("https://h:1/run/x/?manifest"), "/run/x/");
        assert_eq!(url_path("https://h"), "/");
    }
}
