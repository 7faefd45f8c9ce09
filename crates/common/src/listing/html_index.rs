//! Reading an HTML directory index, the page nginx (`autoindex on;`), Apache (`mod_autoindex`),
//! lighttpd, Python's `http.server` and `rclone serve http` answer for a directory URL.
//!
//! The links of the page are its listing, read the way rclone's HTTP backend reads them: a link
//! counts when it resolves, against the page's own URL, to a direct child of the directory, on
//! the same scheme and host, without a query or a fragment. Everything else on the page (`../`,
//! the sort links `?C=N;O=D`, an absolute path elsewhere, another origin, a link two levels
//! down) is ignored, never followed. A link ending in `/` is a subdirectory. Each kept name is
//! percent-decoded and checked by [`RelPath::parse_segment`]: a name that would escape
//! (`%2e%2e/`, `a%2Fb`), carries NUL or a control character, or is not UTF-8 is refused, which
//! ends the page's listing as a refused name does in the other formats.
//!
//! Sizes and times come from the text that follows a link on its row when the server writes
//! them: nginx writes `28-Nov-2026 16:00    1234` (bytes), Apache `2026-11-28 16:00  1.2K`
//! (the time only: `1.2K` is not a size in bytes). A size is taken only as a plain number of
//! bytes and a time only in those two shapes, read as UTC; a page that gives neither (Python's)
//! leaves them to the file's first response.
//!
//! The tokenizer is `html5gum`: it follows the WHATWG tokenization rules (the same tag soup a
//! browser or Go's `x/net/html`, which rclone uses, accepts), reads from any `io::Read`
//! through a fixed buffer and builds no tree, so a page costs one token at a time. Each token
//! is a record of at most [`super::MAX_RECORD_BYTES`] ([`RecordLimit`]) and the page at most
//! the bytes its caller allows.

use std::collections::HashSet;
use std::io::{self, Read};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use html5gum::{IoReader, Token, Tokenizer};
use percent_encoding::percent_decode_str;

use super::limit::RecordLimit;
use super::name::{excerpt, NameError};
use super::{EntryKind, ListingEntry, ListingError, RelPath};

const FORMAT: &str = "HTML index";

/// Default bound on one index page. nginx's page of 100,000 files is about 15 MB.
pub const MAX_PAGE_BYTES: u64 = 64 * 1024 * 1024;

/// Characters of row text kept after a link, to find its time and size.
const ROW_TEXT_CHARS: usize = 256;

/// Read the index page at `page_url` (absolute, after redirects), calling `on_entry` for each
/// file and subdirectory it links to; at most `max_bytes` of it are read.
pub fn read_html_index<R: Read>(
    input: R,
    page_url: &str,
    max_bytes: u64,
    mut on_entry: impl FnMut(ListingEntry) -> Result<(), ListingError>,
) -> Result<u64, ListingError> {
    let base = Base::parse(page_url).ok_or_else(|| {
        ListingError::malformed(
            FORMAT,
            format!("not an absolute URL: {}", excerpt(page_url)),
        )
    })?;
    let bounded = PageLimit {
        inner: input,
        left: max_bytes,
        hit: false,
    };
    let (input, mark) = RecordLimit::new(bounded);
    let mut tokens = Tokenizer::new(IoReader::new_with_buffer_size::<8192>(input));
    let mut seen = HashSet::new();
    let mut row: Option<Row> = None;
    let mut count = 0u64;
    let mut emit = |row: Option<Row>, count: &mut u64| -> Result<(), ListingError> {
        if let Some(r) = row {
            *count += 1;
            on_entry(r.finish())?;
        }
        Ok(())
    };
    loop {
        mark.start_record();
        let token = match tokens.next() {
            None => break,
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                return Err(if mark.exceeded() {
                    ListingError::RecordTooLong { format: FORMAT }
                } else if e.kind() == io::ErrorKind::FileTooLarge {
                    ListingError::PageTooLarge {
                        format: FORMAT,
                        limit: max_bytes,
                    }
                } else {
                    ListingError::Io(e)
                })
            }
        };
        match token {
            Token::StartTag(tag) => {
                let name = tag.name.as_slice();
                if name == b"a" {
                    emit(row.take(), &mut count)?;
                    let Some(href) = tag.attributes.get(b"href".as_slice()) else {
                        continue;
                    };
                    let href = String::from_utf8_lossy(&href.value);
                    match base.child(&href)? {
                        Some((name, kind)) if seen.insert(name.as_str().to_string()) => {
                            row = Some(Row::new(name, kind));
                        }
                        _ => {}
                    }
                } else if ends_row(name, true) {
                    emit(row.take(), &mut count)?;
                }
            }
            Token::EndTag(tag) => {
                if ends_row(&tag.name, false) {
                    emit(row.take(), &mut count)?;
                } else if tag.name.as_slice() == b"a" {
                    if let Some(r) = row.as_mut() {
                        r.after_link = true;
                    }
                }
            }
            Token::String(text) => {
                if let Some(r) = row.as_mut() {
                    if r.push_text(&String::from_utf8_lossy(&text.value)) {
                        emit(row.take(), &mut count)?;
                    }
                }
            }
            Token::Comment(_) | Token::Doctype(_) | Token::Error(_) => {}
        }
    }
    emit(row.take(), &mut count)?;
    Ok(count)
}

/// Tags that end a row of an index: what follows belongs to the next entry or to the page.
fn ends_row(name: &[u8], start: bool) -> bool {
    let both: &[&[u8]] = &[b"tr", b"table", b"pre", b"li", b"ul", b"ol", b"div", b"p"];
    let start_only: &[&[u8]] = &[b"hr", b"address", b"h1", b"h2", b"h3", b"footer"];
    both.contains(&name)
        || (start && start_only.contains(&name))
        || (!start && (name == b"body" || name == b"html"))
}

/// A link kept, and the text after it on its row.
struct Row {
    name: RelPath,
    kind: EntryKind,
    after_link: bool,
    text: String,
}

impl Row {
    fn new(name: RelPath, kind: EntryKind) -> Self {
        Self {
            name,
            kind,
            after_link: false,
            text: String::new(),
        }
    }

    /// Keep text that follows the link; true once the row's line has ended.
    fn push_text(&mut self, s: &str) -> bool {
        if !self.after_link {
            return false;
        }
        for c in s.chars() {
            if c == '\n' && !self.text.trim().is_empty() {
                return true;
            }
            if self.text.len() < ROW_TEXT_CHARS {
                self.text.push(if c.is_whitespace() { ' ' } else { c });
            }
        }
        false
    }

    fn finish(self) -> ListingEntry {
        let words: Vec<&str> = self.text.split_whitespace().collect();
        let size = match (self.kind, words.last()) {
            (EntryKind::File, Some(w))
                if w.len() <= 20 && w.bytes().all(|b| b.is_ascii_digit()) =>
            {
                w.parse().ok()
            }
            _ => None,
        };
        let modified = words.windows(2).find_map(|w| row_time(w[0], w[1]));
        ListingEntry {
            path: self.name,
            kind: self.kind,
            size,
            modified,
            etag: None,
            sha256: None,
        }
    }
}

/// The listed directory: scheme and authority (lower case) and its decoded path segments.
struct Base {
    scheme: String,
    authority: String,
    /// Decoded, to compare with; and as the page's URL has them, to resolve against.
    dir: Vec<String>,
    raw_dir: Vec<String>,
}

impl Base {
    fn parse(url: &str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        let rest = rest.split(['?', '#']).next().unwrap_or(rest);
        let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
        // A page at `/a/b` (no slash) resolves links against `/a/`, as a browser does.
        let dir_path = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let raw_dir: Vec<String> = raw_segments(dir_path).map(str::to_string).collect();
        let dir = raw_dir
            .iter()
            .map(|s| decode(s).unwrap_or_else(|_| s.clone()))
            .collect();
        Some(Self {
            raw_dir,
            scheme: scheme.to_ascii_lowercase(),
            authority: authority.to_ascii_lowercase(),
            dir,
        })
    }

    /// The direct child `href` names, if it names one; `Ok(None)` for a link that is not part
    /// of the listing; an error for a child whose name is refused.
    fn child(&self, href: &str) -> Result<Option<(RelPath, EntryKind)>, ListingError> {
        let href = href.trim_matches(|c: char| c.is_ascii_whitespace() || c.is_ascii_control());
        if href.is_empty() || href.contains(['?', '#']) {
            return Ok(None);
        }
        let path = match split_scheme(href) {
            Some((scheme, rest)) => {
                let Some(rest) = rest.strip_prefix("//") else {
                    return Ok(None); // mailto:, javascript:, data:
                };
                if !scheme.eq_ignore_ascii_case(&self.scheme) {
                    return Ok(None);
                }
                match self.same_authority(rest) {
                    Some(path) => path,
                    None => return Ok(None),
                }
            }
            None => match href.strip_prefix("//") {
                Some(rest) => match self.same_authority(rest) {
                    Some(path) => path,
                    None => return Ok(None),
                },
                None => href,
            },
        };
        let mut segments: Vec<String> = if path.starts_with('/') {
            Vec::new()
        } else {
            self.raw_dir.clone()
        };
        let raw: Vec<&str> = raw_segments(path).collect();
        let is_dir = path.ends_with('/');
        for seg in raw {
            match seg {
                "." => {}
                ".." => {
                    segments.pop();
                }
                s => segments.push(s.to_string()),
            }
        }
        // Only what lies below the directory, exactly one level down.
        if segments.len() != self.dir.len() + 1 {
            return Ok(None);
        }
        let (name, parents) = segments
            .split_last()
            .map(|(n, p)| (n.clone(), p))
            .unwrap_or_default();
        let parents_match = parents
            .iter()
            .zip(&self.dir)
            .all(|(raw, dir)| decode(raw).is_ok_and(|d| d == *dir));
        if !parents_match {
            return Ok(None);
        }
        let decoded = decode(&name).map_err(|_| NameError {
            name: excerpt(&String::from_utf8_lossy(
                &percent_decode_str(&name).collect::<Vec<u8>>(),
            )),
            reason: "not UTF-8 after percent-decoding",
        })?;
        let rel = RelPath::parse_segment(&decoded)?;
        let kind = if is_dir {
            EntryKind::Directory
        } else {
            EntryKind::File
        };
        Ok(Some((rel, kind)))
    }

    /// The path of `rest` (after `//`) when its authority is the page's.
    fn same_authority<'a>(&self, rest: &'a str) -> Option<&'a str> {
        let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
        authority
            .eq_ignore_ascii_case(&self.authority)
            .then_some(path)
    }
}

/// The segments of an encoded path, without the empty ones its slashes leave at either end.
fn raw_segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

fn decode(s: &str) -> Result<String, std::str::Utf8Error> {
    percent_decode_str(s).decode_utf8().map(|c| c.into_owned())
}

/// `scheme:` at the start of an href, per RFC 3986 §3.1.
fn split_scheme(href: &str) -> Option<(&str, &str)> {
    let colon = href.find(':')?;
    let scheme = &href[..colon];
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)))
        .then(|| (scheme, &href[colon + 1..]))
}

/// A time written as `28-Nov-2026 16:00` (nginx) or `2026-11-28 16:00` (Apache), seconds
/// optional, read as UTC.
fn row_time(date: &str, time: &str) -> Option<SystemTime> {
    let mut parts = date.split('-');
    let (a, b, c) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (year, month, day) = if a.len() == 4 {
        (a.parse().ok()?, b.parse().ok()?, c.parse().ok()?)
    } else {
        let months = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let month = months.iter().position(|m| m.eq_ignore_ascii_case(b))? as u32 + 1;
        (c.parse().ok()?, month, a.parse().ok()?)
    };
    let mut hms = time.split(':');
    let hour: u64 = hms.next()?.parse().ok()?;
    let minute: u64 = hms.next()?.parse().ok()?;
    let second: u64 = match hms.next() {
        Some(s) => s.parse().ok()?,
        None => 0,
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day)?;
    let secs = u64::try_from(days).ok()? * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> Option<i64> {
    if !(1970..=9999).contains(&year) {
        return None;
    }
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

/// A reader that fails once more than `left` bytes were asked of it.
struct PageLimit<R> {
    inner: R,
    left: u64,
    hit: bool,
}

impl<R: Read> Read for PageLimit<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 || self.hit {
            // One more byte tells a page of exactly the limit from a longer one.
            let mut probe = [0u8; 1];
            if self.hit || self.inner.read(&mut probe)? > 0 {
                self.hit = true;
                return Err(io::Error::new(
                    io::ErrorKind::FileTooLarge,
                    "index page over its byte limit",
                ));
            }
            return Ok(0);
        }
        let take = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.inner.read(&mut buf[..take])?;
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "http://127.0.0.1:8080/data/run%2042/";
    /// A directory whose name holds an encoded `%`: relative links resolve against it as sent.
    const PERCENT_BASE: &str = "http://127.0.0.1:8080/d%2520e/";

    fn read(body: &str) -> Result<Vec<ListingEntry>, ListingError> {
        let mut out = Vec::new();
        read_html_index(body.as_bytes(), BASE, MAX_PAGE_BYTES, |e| {
            out.push(e);
            Ok(())
        })?;
        Ok(out)
    }

    fn names(entries: &[ListingEntry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| format!("{}{}", e.path.as_str(), if e.is_dir() { "/" } else { "" }))
            .collect()
    }

    #[test]
    fn reads_nginx_autoindex_with_sizes_and_times() {
        let page = "<html>\r\n<head><title>Index of /data/run 42/</title></head>\r\n<body>\r\n<h1>Index of /data/run 42/</h1><hr><pre><a href=\"../\">../</a>\r\n\
<a href=\"sub%20dir/\">sub dir/</a>                                           28-Nov-2026 16:00                   -\r\n\
<a href=\"a%26b.bin\">a&amp;b.bin</a>                                          28-Nov-2026 16:01                1234\r\n\
</pre><hr></body>\r\n</html>\r\n";
        let entries = read(page).expect("valid");
        assert_eq!(names(&entries), ["sub dir/", "a&b.bin"]);
        assert_eq!(entries[0].size, None);
        assert_eq!(entries[1].size, Some(1234));
        let t = entries[1].modified.expect("time");
        assert_eq!(httpdate::fmt_http_date(t), "Sat, 28 Nov 2026 16:01:00 GMT");
    }

    #[test]
    fn reads_apache_fancy_index_times_but_not_rounded_sizes() {
        let page = r#"<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 3.2 Final//EN">
<html><head><title>Index of /data/run 42</title></head><body>
<h1>Index of /data/run 42</h1>
<table>
<tr><th valign="top"><img src="/icons/blank.gif" alt="[ICO]"></th><th><a href="?C=N;O=D">Name</a></th><th><a href="?C=M;O=A">Last modified</a></th><th><a href="?C=S;O=A">Size</a></th></tr>
<tr><td valign="top"><img src="/icons/back.gif" alt="[PARENTDIR]"></td><td><a href="/data/">Parent Directory</a></td><td>&nbsp;</td><td align="right">  - </td></tr>
<tr><td valign="top"><img src="/icons/unknown.gif" alt="[   ]"></td><td><a href="big.bin">big.bin</a></td><td align="right">2026-11-28 16:02  </td><td align="right">1.2M</td></tr>
<tr><td valign="top"><img src="/icons/unknown.gif" alt="[   ]"></td><td><a href="small.txt">small.txt</a></td><td align="right">2026-11-28 16:03  </td><td align="right">812 </td></tr>
<tr><td valign="top"><img src="/icons/folder.gif" alt="[DIR]"></td><td><a href="nested/">nested/</a></td><td align="right">2026-11-28 16:04  </td><td align="right">  - </td></tr>
</table>
<address>Apache/2.4.62 (Debian) Server at 127.0.0.1 Port 8080</address>
</body></html>"#;
        let entries = read(page).expect("valid");
        assert_eq!(names(&entries), ["big.bin", "small.txt", "nested/"]);
        assert_eq!(entries[0].size, None, "1.2M is not a size in bytes");
        assert_eq!(entries[1].size, Some(812));
        assert!(entries.iter().all(|e| e.modified.is_some()));
    }

    #[test]
    fn reads_python_http_server_links_only() {
        let page = "<!DOCTYPE HTML>\n<html lang=\"en\">\n<head><title>Directory listing for /data/run 42/</title>\n</head>\n<body>\n<h1>Directory listing for /data/run 42/</h1>\n<hr>\n<ul>\n<li><a href=\"%C3%BCn%C3%AF.bin\">ünï.bin</a></li>\n<li><a href=\"deep/\">deep/</a></li>\n</ul>\n<hr>\n</body>\n</html>\n";
        let entries = read(page).expect("valid");
        assert_eq!(names(&entries), ["ünï.bin", "deep/"]);
        assert!(entries
            .iter()
            .all(|e| e.size.is_none() && e.modified.is_none()));
    }

    #[test]
    fn a_directory_named_with_a_percent_keeps_its_links() {
        let mut out = Vec::new();
        let page = "<a href=\"x\">x</a><a href=\"/d%2520e/y\">y</a><a href=\"/d%20e/z\">z</a>";
        read_html_index(page.as_bytes(), PERCENT_BASE, MAX_PAGE_BYTES, |e| {
            out.push(e);
            Ok(())
        })
        .expect("valid");
        assert_eq!(names(&out), ["x", "y"]);
    }

    #[test]
    fn links_outside_the_directory_are_ignored() {
        let page = r##"<a href="../">up</a><a href="/etc/passwd">abs</a>
<a href="http://other.example/data/run%2042/x">origin</a><a href="https://127.0.0.1:8080/data/run%2042/y">scheme</a>
<a href="//other.example/data/run%2042/z">net</a><a href="x?download=1">query</a><a href="#top">frag</a>
<a href="sub/deeper.bin">two levels</a><a href="./">self</a><a href="mailto:a@b">mail</a><a href="javascript:alert(1)">js</a>
<a href="../run%2042/ok.bin">back in</a><a href="http://127.0.0.1:8080/data/run%2042/abs.bin">same origin</a>
<a href="/data/run%2042/rooted/">rooted</a><a href="ok.bin">dup</a><a name="x">no href</a>"##;
        let entries = read(page).expect("valid");
        assert_eq!(names(&entries), ["ok.bin", "abs.bin", "rooted/"]);
    }

    #[test]
    fn names_that_escape_are_refused() {
        for href in [
            "%2e%2e/", "a%2Fb", "a%00b", "%2E%2E", "a%5Cb", "x%0ay", "%ff%fe",
        ] {
            let page = format!("<a href=\"{href}\">x</a>");
            assert!(
                matches!(read(&page), Err(ListingError::Name(_))),
                "{href} accepted: {:?}",
                read(&page)
            );
        }
    }

    #[test]
    fn huge_pages_and_tokens_are_refused_while_they_stream() {
        let endless = crate::listing::limit::Endless {
            prefix: b"<html><body>".to_vec(),
            fill: b' ',
            served: 0,
        };
        // Whitespace is one text token: the record bound ends it.
        let r = read_html_index(endless, BASE, MAX_PAGE_BYTES, |_| Ok(()));
        assert!(
            matches!(r, Err(ListingError::RecordTooLong { .. })),
            "{r:?}"
        );
        // Many small tokens: the page bound ends it.
        struct Tags(u64);
        impl Read for Tags {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = b"<br>"[(self.0 as usize + i) % 4];
                }
                self.0 += buf.len() as u64;
                Ok(buf.len())
            }
        }
        let mut tags = Tags(0);
        let r = read_html_index(&mut tags, BASE, 1 << 20, |_| Ok(()));
        assert!(
            matches!(r, Err(ListingError::PageTooLarge { limit, .. }) if limit == 1 << 20),
            "{r:?}"
        );
        assert!(tags.0 < (1 << 20) + 64 * 1024, "{} bytes read", tags.0);
    }

    #[test]
    fn times() {
        let t = row_time("01-Mar-2024", "00:00").expect("nginx");
        assert_eq!(httpdate::fmt_http_date(t), "Fri, 01 Mar 2024 00:00:00 GMT");
        let t = row_time("2024-02-29", "23:59:58").expect("apache");
        assert_eq!(httpdate::fmt_http_date(t), "Thu, 29 Feb 2024 23:59:58 GMT");
        assert!(row_time("2024-13-01", "00:00").is_none());
        assert!(row_time("1.2K", "-").is_none());
    }
}
