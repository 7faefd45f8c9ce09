//! WebDAV `PROPFIND` (RFC 4918 §9.1): the request body a client sends, a reader for the
//! `207 Multi-Status` answer, and a writer for servers.
//!
//! Only `Depth: 0` and `Depth: 1` are meant to be used (RFC 4918 lets a server refuse
//! `infinity`, and xfer's does). The reader matches elements by local name, whatever prefix
//! the server bound to `DAV:` (`D:`, `d:`, `lp1:` are all seen in the field), takes properties
//! only from a `propstat` whose status is 200, and resolves every `href` against the listed
//! collection: an `href` outside it is an error, the collection itself is skipped.

use std::borrow::Cow;
use std::io::{BufRead, Write};
use std::time::SystemTime;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use quick_xml::events::Event;
use quick_xml::Reader;

use super::limit::RecordLimit;
use super::name::excerpt;
use super::{EntryKind, ListingEntry, ListingError, RelPath, MAX_RECORD_BYTES};

const FORMAT: &str = "PROPFIND";

/// The body of a `PROPFIND` asking for exactly the properties a tree transfer needs.
pub const REQUEST_BODY: &str = concat!(
    r#"<?xml version="1.0" encoding="utf-8"?>"#,
    r#"<D:propfind xmlns:D="DAV:"><D:prop>"#,
    "<D:resourcetype/><D:getcontentlength/><D:getlastmodified/><D:getetag/>",
    "</D:prop></D:propfind>"
);

/// Which properties were found for one `response` element.
#[derive(Debug, Default)]
struct Pending {
    href: Option<String>,
    collection: bool,
    size: Option<u64>,
    modified: Option<SystemTime>,
    etag: Option<String>,
    // Per propstat, before its status is known.
    ps_collection: bool,
    ps_size: Option<u64>,
    ps_modified: Option<SystemTime>,
    ps_etag: Option<String>,
    ps_ok: bool,
}

/// Read a multistatus body listing the collection at `base_path` (the request path, still
/// percent-encoded as sent, e.g. `/run-42/`), calling `on_entry` for every member.
pub fn read_multistatus<R: BufRead>(
    input: R,
    base_path: &str,
    mut on_entry: impl FnMut(ListingEntry) -> Result<(), ListingError>,
) -> Result<u64, ListingError> {
    let base = decode_path(base_path)?;
    let base = base.trim_end_matches('/');
    // quick-xml gathers a whole text node before returning it: the limit stops a huge one
    // while it arrives.
    let (input, mark) = RecordLimit::new(input);
    let mut reader = Reader::from_reader(input);
    reader.config_mut().trim_text(true);
    let mut buf = Vec::new();
    let mut stack: Vec<Vec<u8>> = Vec::new();
    let mut pending: Option<Pending> = None;
    let mut saw_multistatus = false;
    let mut count = 0u64;
    loop {
        // The previous event is done with: check how much it took before reusing the buffer.
        if buf.len() > MAX_RECORD_BYTES {
            return Err(ListingError::RecordTooLong { format: FORMAT });
        }
        buf.clear();
        mark.start_record();
        let event = reader.read_event_into(&mut buf).map_err(|e| {
            if mark.exceeded() {
                ListingError::RecordTooLong { format: FORMAT }
            } else {
                ListingError::malformed(FORMAT, e.to_string())
            }
        })?;
        match event {
            Event::Start(e) => {
                let name = e.local_name().as_ref().to_vec();
                on_open(&name, &mut pending, &mut saw_multistatus);
                stack.push(name);
                if stack.len() > 32 {
                    return Err(ListingError::malformed(FORMAT, "elements nested too deep"));
                }
            }
            Event::Empty(e) => {
                let name = e.local_name().as_ref().to_vec();
                on_open(&name, &mut pending, &mut saw_multistatus);
                on_close(&name, &mut pending, base, &mut on_entry, &mut count)?;
            }
            Event::End(_) => {
                let Some(name) = stack.pop() else {
                    return Err(ListingError::malformed(FORMAT, "unbalanced end tag"));
                };
                on_close(&name, &mut pending, base, &mut on_entry, &mut count)?;
            }
            Event::Text(t) => {
                let text = t
                    .unescape()
                    .map_err(|e| ListingError::malformed(FORMAT, e.to_string()))?;
                on_text(&stack, &mut pending, &text)?;
            }
            Event::CData(t) => {
                let text = String::from_utf8_lossy(&t);
                on_text(&stack, &mut pending, &text)?;
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !saw_multistatus {
        return Err(ListingError::malformed(FORMAT, "no multistatus element"));
    }
    if !stack.is_empty() {
        return Err(ListingError::Truncated { format: FORMAT });
    }
    Ok(count)
}

fn on_open(name: &[u8], pending: &mut Option<Pending>, saw_multistatus: &mut bool) {
    match name {
        b"multistatus" => *saw_multistatus = true,
        b"response" => *pending = Some(Pending::default()),
        b"propstat" => {
            if let Some(p) = pending.as_mut() {
                p.ps_collection = false;
                p.ps_size = None;
                p.ps_modified = None;
                p.ps_etag = None;
                // A propstat without a status element is taken as 200, as lenient servers omit it.
                p.ps_ok = true;
            }
        }
        b"collection" => {
            if let Some(p) = pending.as_mut() {
                p.ps_collection = true;
            }
        }
        _ => {}
    }
}

fn on_text(
    stack: &[Vec<u8>],
    pending: &mut Option<Pending>,
    text: &str,
) -> Result<(), ListingError> {
    let (Some(p), Some(element)) = (pending.as_mut(), stack.last()) else {
        return Ok(());
    };
    let in_propstat = stack.iter().any(|n| n == b"propstat");
    match element.as_slice() {
        b"href" if !in_propstat => p.href = Some(text.to_string()),
        b"status" if in_propstat => {
            p.ps_ok = text.split_whitespace().nth(1) == Some("200");
        }
        b"getcontentlength" => {
            let size = text.trim().parse::<u64>().map_err(|_| {
                ListingError::malformed(
                    FORMAT,
                    format!("getcontentlength {} is not a size", excerpt(text)),
                )
            })?;
            p.ps_size = Some(size);
        }
        // An unreadable date is dropped, not fatal: the file can still be fetched.
        b"getlastmodified" => p.ps_modified = httpdate::parse_http_date(text.trim()).ok(),
        b"getetag" => p.ps_etag = Some(text.trim().to_string()),
        _ => {}
    }
    Ok(())
}

fn on_close(
    name: &[u8],
    pending: &mut Option<Pending>,
    base: &str,
    on_entry: &mut impl FnMut(ListingEntry) -> Result<(), ListingError>,
    count: &mut u64,
) -> Result<(), ListingError> {
    match name {
        b"propstat" => {
            if let Some(p) = pending.as_mut() {
                if p.ps_ok {
                    p.collection |= p.ps_collection;
                    p.size = p.size.or(p.ps_size);
                    p.modified = p.modified.or(p.ps_modified);
                    p.etag = p.etag.take().or(p.ps_etag.take());
                }
            }
        }
        b"response" => {
            let Some(p) = pending.take() else {
                return Ok(());
            };
            let href = p
                .href
                .ok_or_else(|| ListingError::malformed(FORMAT, "response without href"))?;
            let Some(path) = member_path(&href, base)? else {
                return Ok(()); // the listed collection itself
            };
            let kind = if p.collection {
                EntryKind::Directory
            } else {
                EntryKind::File
            };
            *count += 1;
            on_entry(ListingEntry {
                path,
                kind,
                size: if kind == EntryKind::File {
                    p.size
                } else {
                    None
                },
                modified: p.modified,
                etag: p.etag,
                sha256: None,
            })?;
        }
        _ => {}
    }
    Ok(())
}

/// The member's path relative to the collection, or `None` for the collection itself.
fn member_path(href: &str, base: &str) -> Result<Option<RelPath>, ListingError> {
    let path = strip_origin(href);
    let decoded = decode_path(path)?;
    let trimmed = decoded.trim_end_matches('/');
    if trimmed == base {
        return Ok(None);
    }
    let rest = trimmed
        .strip_prefix(base)
        .and_then(|r| r.strip_prefix('/'))
        .ok_or_else(|| {
            ListingError::malformed(
                FORMAT,
                format!("href {} is outside the listed collection", excerpt(href)),
            )
        })?;
    Ok(Some(RelPath::parse(rest)?))
}

/// `https://host:port/a/b` → `/a/b`; a path stays as it is.
fn strip_origin(href: &str) -> &str {
    for scheme in ["http://", "https://"] {
        // `get`, not indexing: the prefix of a hostile href may end inside a UTF-8 character.
        let prefix = href.get(..scheme.len());
        if prefix.is_some_and(|p| p.eq_ignore_ascii_case(scheme)) {
            let rest = &href[scheme.len()..];
            return rest.find('/').map_or("/", |i| &rest[i..]);
        }
    }
    href
}

fn decode_path(path: &str) -> Result<Cow<'_, str>, ListingError> {
    percent_decode_str(path).decode_utf8().map_err(|_| {
        ListingError::malformed(FORMAT, format!("href {} is not UTF-8", excerpt(path)))
    })
}

/// Characters percent-encoded in an `href` path: everything but unreserved characters and `/`.
pub const HREF_ENCODE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}')
    .add(b'&')
    .add(b'\'')
    .add(b'+')
    .add(b';')
    .add(b'=');

/// Writes a `207 Multi-Status` body one member at a time.
pub struct MultistatusWriter<W: Write> {
    out: W,
}

impl<W: Write> MultistatusWriter<W> {
    pub fn new(mut out: W) -> std::io::Result<Self> {
        out.write_all(br#"<?xml version="1.0" encoding="utf-8"?>"#)?;
        out.write_all(b"\n<D:multistatus xmlns:D=\"DAV:\">\n")?;
        Ok(Self { out })
    }

    /// One `response` element. `href_path` is the decoded absolute path of the member
    /// (directories end in `/`).
    pub fn write_member(
        &mut self,
        href_path: &str,
        kind: EntryKind,
        size: Option<u64>,
        modified: Option<SystemTime>,
        etag: Option<&str>,
    ) -> std::io::Result<()> {
        let href = utf8_percent_encode(href_path, HREF_ENCODE).to_string();
        write!(
            self.out,
            "<D:response><D:href>{}</D:href><D:propstat><D:prop>",
            xml_escape(&href)
        )?;
        match kind {
            EntryKind::Directory => {
                self.out
                    .write_all(b"<D:resourcetype><D:collection/></D:resourcetype>")?;
            }
            EntryKind::File => {
                self.out.write_all(b"<D:resourcetype/>")?;
                if let Some(size) = size {
                    write!(self.out, "<D:getcontentlength>{size}</D:getcontentlength>")?;
                }
            }
        }
        if let Some(t) = modified {
            write!(
                self.out,
                "<D:getlastmodified>{}</D:getlastmodified>",
                httpdate::fmt_http_date(t)
            )?;
        }
        if let Some(tag) = etag {
            write!(self.out, "<D:getetag>{}</D:getetag>", xml_escape(tag))?;
        }
        self.out
            .write_all(b"</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>\n")
    }

    /// Close the document and return the writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.write_all(b"</D:multistatus>\n")?;
        Ok(self.out)
    }
}

/// Escape text for XML content and attribute values.
pub fn xml_escape(s: &str) -> Cow<'_, str> {
    if !s.contains(['&', '<', '>', '"', '\'']) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn read(body: &str, base: &str) -> Result<Vec<ListingEntry>, ListingError> {
        let mut out = Vec::new();
        read_multistatus(body.as_bytes(), base, |e| {
            out.push(e);
            Ok(())
        })?;
        Ok(out)
    }

    const APACHE_STYLE: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<D:multistatus xmlns:D="DAV:" xmlns:lp1="DAV:">
<D:response><D:href>/run-42/</D:href><D:propstat><D:prop><lp1:resourcetype><D:collection/></lp1:resourcetype></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
<D:response><D:href>https://example.org:8443/run-42/a%20b.bin</D:href>
 <D:propstat><D:prop><lp1:resourcetype/><lp1:getcontentlength>1234</lp1:getcontentlength>
  <lp1:getlastmodified>Sun, 06 Nov 1994 08:49:37 GMT</lp1:getlastmodified><lp1:getetag>"abc&amp;1"</lp1:getetag></D:prop>
  <D:status>HTTP/1.1 200 OK</D:status></D:propstat>
 <D:propstat><D:prop><D:getcontentlength>999</D:getcontentlength></D:prop><D:status>HTTP/1.1 404 Not Found</D:status></D:propstat>
</D:response>
<D:response><D:href>/run-42/sub/</D:href><D:propstat><D:prop><D:resourcetype><D:collection/></D:resourcetype></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
<D:response><D:href>/run-42/%C3%BCn%C3%AF</D:href><D:propstat><D:prop><D:getcontentlength>0</D:getcontentlength></D:prop></D:propstat></D:response>
</D:multistatus>"#;

    #[test]
    fn reads_members_skips_self_and_failed_propstats() {
        let entries = read(APACHE_STYLE, "/run-42/").expect("valid listing");
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].path.as_str(), "a b.bin");
        assert_eq!(entries[0].kind, EntryKind::File);
        assert_eq!(entries[0].size, Some(1234), "the 404 propstat is ignored");
        assert_eq!(entries[0].etag.as_deref(), Some("\"abc&1\""));
        assert_eq!(
            entries[0].modified,
            Some(UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
        assert_eq!(entries[1].path.as_str(), "sub");
        assert!(entries[1].is_dir());
        assert_eq!(entries[1].size, None);
        assert_eq!(entries[2].path.as_str(), "ünï");
        assert_eq!(entries[2].size, Some(0));
    }

    #[test]
    fn base_without_trailing_slash_and_encoded_base() {
        let body = r#"<d:multistatus xmlns:d="DAV:"><d:response><d:href>/a%20dir/x</d:href></d:response></d:multistatus>"#;
        let entries = read(body, "/a%20dir").expect("valid");
        assert_eq!(entries[0].path.as_str(), "x");
    }

    #[test]
    fn hostile_hrefs_are_refused() {
        for href in [
            "/other/x",
            "/run-42/../etc/passwd",
            "/run-42/%2e%2e/x",
            "/run-42/a%00b",
            "/run-42/a%5C..%5Cb",
            "/run-42x/file",
            "/run-42/%FF",
            "httpéé/x",
            "httpsééé/x",
        ] {
            let body = format!(
                r#"<D:multistatus xmlns:D="DAV:"><D:response><D:href>{href}</D:href></D:response></D:multistatus>"#
            );
            assert!(read(&body, "/run-42/").is_err(), "{href} accepted");
        }
    }

    #[test]
    fn malformed_documents_are_errors() {
        assert!(read("not xml at all", "/").is_err());
        assert!(read(r#"<D:multistatus xmlns:D="DAV:"><D:response>"#, "/").is_err());
        let bad_len = r#"<D:multistatus xmlns:D="DAV:"><D:response><D:href>/x</D:href><D:propstat><D:prop><D:getcontentlength>-1</D:getcontentlength></D:prop></D:propstat></D:response></D:multistatus>"#;
        assert!(read(bad_len, "/").is_err());
        let huge = format!(
            r#"<D:multistatus xmlns:D="DAV:"><D:response><D:href>/{}</D:href></D:response></D:multistatus>"#,
            "x".repeat(MAX_RECORD_BYTES + 1)
        );
        assert!(matches!(
            read(&huge, "/"),
            Err(ListingError::RecordTooLong { .. })
        ));
    }

    #[test]
    fn an_endless_href_is_refused_while_it_streams() {
        let endless = crate::listing::limit::Endless {
            prefix: br#"<D:multistatus xmlns:D="DAV:"><D:response><D:href>/"#.to_vec(),
            fill: b'x',
            served: 0,
        };
        let mut input = std::io::BufReader::new(endless);
        let r = read_multistatus(&mut input, "/", |_| Ok(()));
        assert!(
            matches!(r, Err(ListingError::RecordTooLong { .. })),
            "{r:?}"
        );
        let served = input.into_inner().served;
        assert!(served < 2 * MAX_RECORD_BYTES as u64, "{served} bytes read");
    }

    #[test]
    fn writer_output_reads_back() {
        let mut w = MultistatusWriter::new(Vec::new()).expect("vec");
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        w.write_member("/d/", EntryKind::Directory, None, Some(t), None)
            .expect("vec");
        w.write_member(
            "/d/a b&c<%.bin",
            EntryKind::File,
            Some(7),
            Some(t),
            Some("\"e\""),
        )
        .expect("vec");
        w.write_member("/d/sub/", EntryKind::Directory, None, None, None)
            .expect("vec");
        let body = String::from_utf8(w.finish().expect("vec")).expect("utf8");
        let entries = read(&body, "/d/").expect("own output parses");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].path.as_str(), "a b&c<%.bin");
        assert_eq!(entries[0].size, Some(7));
        assert_eq!(entries[0].modified, Some(t));
        assert_eq!(entries[0].etag.as_deref(), Some("\"e\""));
        assert!(entries[1].is_dir());
    }
}
