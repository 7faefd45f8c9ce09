//! A plain HTML index of one directory, for browsers: a table of names, sizes and
//! modification times, written one row at a time.
//!
//! Names are escaped for HTML and links are percent-encoded and relative, prefixed with `./`
//! so that a name such as `javascript:x` or `a:b` is never read as a URL scheme.

use std::io::Write;
use std::time::SystemTime;

use percent_encoding::utf8_percent_encode;

use super::propfind::{xml_escape, HREF_ENCODE};
use super::EntryKind;

/// Writes an index page one entry at a time.
pub struct HtmlIndexWriter<W: Write> {
    out: W,
}

impl<W: Write> HtmlIndexWriter<W> {
    /// Start the page for the directory at `dir_path` (decoded, absolute, ending in `/`).
    pub fn new(mut out: W, dir_path: &str) -> std::io::Result<Self> {
        let title = xml_escape(dir_path);
        write!(
            out,
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n\
             <body>\n<h1>Index of {title}</h1>\n<table>\n\
             <tr><th>Name</th><th>Size</th><th>Last modified</th></tr>\n"
        )?;
        if dir_path != "/" {
            out.write_all(b"<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n")?;
        }
        Ok(Self { out })
    }

    /// One row. `name` is a single decoded segment; directories get a trailing `/`.
    pub fn write_entry(
        &mut self,
        name: &str,
        kind: EntryKind,
        size: Option<u64>,
        modified: Option<SystemTime>,
    ) -> std::io::Result<()> {
        let slash = if kind == EntryKind::Directory {
            "/"
        } else {
            ""
        };
        let href = utf8_percent_encode(name, HREF_ENCODE).to_string();
        write!(
            self.out,
            "<tr><td><a href=\"./{}{slash}\">{}{slash}</a></td><td>",
            xml_escape(&href),
            xml_escape(name)
        )?;
        if let Some(size) = size {
            write!(self.out, "{size}")?;
        }
        self.out.write_all(b"</td><td>")?;
        if let Some(t) = modified {
            self.out.write_all(httpdate::fmt_http_date(t).as_bytes())?;
        }
        self.out.write_all(b"</td></tr>\n")
    }

    /// Close the page. With `truncated_after`, say that only that many entries are shown and
    /// point at the manifest, which has them all.
    pub fn finish(mut self, truncated_after: Option<usize>) -> std::io::Result<W> {
        self.out.write_all(b"</table>\n")?;
        if let Some(n) = truncated_after {
            writeln!(
                self.out,
                "<p>Truncated: only the first {n} entries are shown. \
                 The whole tree is in the <a href=\"./?manifest\">manifest</a>.</p>"
            )?;
        }
        self.out.write_all(b"</body></html>\n")?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_and_links_encoded() {
        let mut w = HtmlIndexWriter::new(Vec::new(), "/a&b/").expect("vec");
        w.write_entry("<a&b>.txt", EntryKind::File, Some(3), None)
            .expect("vec");
        w.write_entry("x:y %", EntryKind::Directory, None, None)
            .expect("vec");
        let page = String::from_utf8(w.finish(Some(2)).expect("vec")).expect("utf8");
        assert!(page.contains("<title>Index of /a&amp;b/</title>"), "{page}");
        assert!(
            page.contains("<a href=\"./%3Ca%26b%3E.txt\">&lt;a&amp;b&gt;.txt</a>"),
            "{page}"
        );
        assert!(
            page.contains("<a href=\"./x:y%20%25/\">x:y %/</a>"),
            "{page}"
        );
        assert!(page.contains("href=\"../\""));
        assert!(page.contains("first 2 entries"));
        assert!(!page.contains("<a&b>"));
    }
}
