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

use std::collections::VecDeque;
use std::io::{self, BufReader, Read};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Buf, Bytes};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use tokio::sync::mpsc;
use xfer_common::listing::manifest::{read_manifest, MANIFEST_MEDIA_TYPE};
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

/// Which format the tree was listed in, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ListingFormat {
    XferManifest,
    Propfind,
    NginxJson,
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
    #[error("{url} offers no listing xfer reads (xfer manifest, WebDAV PROPFIND, nginx autoindex JSON); the last answer was {last}")]
    NoFormat { url: String, last: String },
}

impl ListError {
    /// Whether the error comes from the network or server rather than from the listing's text.
    pub fn is_remote(&self) -> bool {
        matches!(self, Self::Request { .. } | Self::NoFormat { .. })
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
/// `root`, to `out`, after recording the format in `chosen`. Ends when the listing is complete
/// or `out` is closed.
pub async fn list_tree(
    transport: Arc<dyn Transport>,
    root: String,
    chosen: Arc<OnceLock<ListingFormat>>,
    out: mpsc::Sender<ListingEntry>,
) -> Result<ListingFormat, ListError> {
    let first = list_once(transport.as_ref(), &root, ListRequest::Manifest).await;
    let (format, response) = match first {
        Ok(r) if r.media_type.as_deref() == Some(MANIFEST_MEDIA_TYPE) => {
            (ListingFormat::XferManifest, r)
        }
        Ok(r) if r.media_type.as_deref() == Some("application/json") => {
            (ListingFormat::NginxJson, r)
        }
        other => {
            let last = describe(&other);
            drop(other);
            match list_once(transport.as_ref(), &root, ListRequest::Propfind).await {
                Ok(r) => (ListingFormat::Propfind, r),
                Err(ListError::Request { source, .. }) if !source.is_retryable() => {
                    match list_once(transport.as_ref(), &root, ListRequest::Index).await {
                        Ok(r) if r.media_type.as_deref() == Some("application/json") => {
                            (ListingFormat::NginxJson, r)
                        }
                        other => {
                            let last = if other.is_ok() {
                                describe(&other)
                            } else {
                                last
                            };
                            return Err(ListError::NoFormat { url: root, last });
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
    };
    tracing::info!(url = %root, ?format, "listing");
    let _ = chosen.set(format);
    if format == ListingFormat::XferManifest {
        let tx = out.clone();
        parse(response, &root, move |input| {
            read_manifest(BufReader::new(input), |e| forward(&tx, e, None))
        })
        .await?;
        return Ok(format);
    }
    // One directory per request, breadth first.
    let mut pending: VecDeque<(Option<RelPath>, ListResponse)> = VecDeque::from([(None, response)]);
    let mut dirs: VecDeque<RelPath> = VecDeque::new();
    loop {
        let Some((prefix, response)) = pending.pop_front() else {
            let Some(dir) = dirs.pop_front() else {
                return Ok(format);
            };
            let url = format!("{}/", url_of(&root, &dir));
            let request = match format {
                ListingFormat::Propfind => ListRequest::Propfind,
                _ => ListRequest::Index,
            };
            pending.push_back((
                Some(dir),
                list_once(transport.as_ref(), &url, request).await?,
            ));
            continue;
        };
        let tx = out.clone();
        let base = url_path(&response.url).to_string();
        let listed = response.url.clone();
        let found = parse(response, &listed, move |input| {
            let mut subdirs = Vec::new();
            let mut on_entry = |e: ListingEntry| {
                if e.is_dir() {
                    subdirs.push(e.path.clone());
                }
                forward(&tx, e, prefix.as_ref())
            };
            match format {
                ListingFormat::Propfind => {
                    propfind::read_multistatus(BufReader::new(input), &base, &mut on_entry)?
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
        .await?;
        dirs.extend(found);
    }
}

/// Send `entry` (below `prefix`) to the driver; a closed channel stops the reader.
fn forward(
    tx: &mpsc::Sender<ListingEntry>,
    mut entry: ListingEntry,
    prefix: Option<&RelPath>,
) -> Result<(), ListingError> {
    if let Some(p) = prefix {
        entry.path = p.join(&entry.path)?;
    }
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
) -> Result<ListResponse, ListError> {
    let mut attempt = 0;
    loop {
        match transport.list(url, request).await {
            Ok(r) => return Ok(r),
            Err(e) if e.is_retryable() && attempt + 1 < LIST_ATTEMPTS => {
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
    parser: impl FnOnce(ChannelReader) -> Result<T, ListingError> + Send + 'static,
) -> Result<T, ListError> {
    let (tx, rx) = mpsc::channel(BODY_PIECES);
    let reader = ChannelReader {
        rx,
        current: Bytes::new(),
    };
    let parsing = tokio::task::spawn_blocking(move || parser(reader));
    let pumped = pump(response.body, tx).await;
    let parsed = parsing.await.map_err(|e| ListError::Read {
        url: url.to_string(),
        source: ListingError::Stopped(format!("the listing parser panicked: {e}")),
    })?;
    match (pumped, parsed) {
        // The transport's error says more than the parser's echo of it.
        (Err(source), _) => Err(ListError::Request {
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

/// Move the body into the parser's channel; stop early when the parser is gone.
async fn pump(
    mut body: Box<dyn RangeBody>,
    tx: mpsc::Sender<io::Result<Bytes>>,
) -> Result<(), TransferError> {
    loop {
        match body.next_data().await {
            Ok(Some(bytes)) => {
                if tx.send(Ok(bytes)).await.is_err() {
                    return Ok(());
                }
            }
            Ok(None) => return Ok(()),
            Err(e) => {
                let _ = tx.send(Err(io::Error::other(e.to_string()))).await;
                return Err(e);
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
