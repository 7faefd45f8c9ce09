//! nginx's `autoindex_format json`: one JSON array per directory of
//! `{"name", "type": "file"|"directory"|"other", "mtime": HTTP-date, "size"}` objects.
//!
//! Read element by element (a `SeqAccess` visitor), so a huge directory is never held whole,
//! and each element is a record of at most [`super::MAX_RECORD_BYTES`], refused while it
//! arrives ([`RecordLimit`]): serde_json would otherwise gather a whole string first.
//! `other` entries (sockets, dangling links) are skipped; names must be single segments.

use std::fmt;
use std::io::{BufReader, Read};

use serde::de::{self, SeqAccess, Visitor};
use serde::Deserialize;

use super::limit::{RecordLimit, RecordMark};
use super::{EntryKind, ListingEntry, ListingError, RelPath};

const FORMAT: &str = "nginx autoindex";

#[derive(Deserialize)]
struct RawEntry {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    mtime: Option<String>,
    size: Option<u64>,
}

/// Read one nginx JSON index, calling `on_entry` for each file and directory in it.
pub fn read_autoindex<R: Read>(
    input: R,
    mut on_entry: impl FnMut(ListingEntry) -> Result<(), ListingError>,
) -> Result<u64, ListingError> {
    // serde_json takes its input a byte at a time: the buffer saves a call per byte.
    let (input, mark) = RecordLimit::new(BufReader::new(input));
    let mut de = serde_json::Deserializer::from_reader(input);
    let mut failure = None;
    let visitor = EntryVisitor {
        on_entry: &mut on_entry,
        failure: &mut failure,
        mark: mark.clone(),
        count: 0,
    };
    let result = de::Deserializer::deserialize_seq(&mut de, visitor);
    if let Some(e) = failure {
        return Err(e);
    }
    let parse_error = |e: serde_json::Error| {
        if mark.exceeded() {
            ListingError::RecordTooLong { format: FORMAT }
        } else {
            ListingError::malformed(FORMAT, e.to_string())
        }
    };
    let count = result.map_err(parse_error)?;
    mark.start_record();
    de.end().map_err(parse_error)?;
    Ok(count)
}

struct EntryVisitor<'a, F> {
    on_entry: &'a mut F,
    failure: &'a mut Option<ListingError>,
    mark: RecordMark,
    count: u64,
}

impl<'de, F> Visitor<'de> for EntryVisitor<'_, F>
where
    F: FnMut(ListingEntry) -> Result<(), ListingError>,
{
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of index entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<u64, A::Error> {
        loop {
            self.mark.start_record();
            let Some(raw) = seq.next_element::<RawEntry>()? else {
                break;
            };
            let kind = match raw.kind.as_str() {
                "file" => EntryKind::File,
                "directory" => EntryKind::Directory,
                _ => continue,
            };
            let entry = RelPath::parse_segment(&raw.name)
                .map_err(ListingError::from)
                .map(|path| ListingEntry {
                    path,
                    kind,
                    size: if kind == EntryKind::File {
                        raw.size
                    } else {
                        None
                    },
                    modified: raw
                        .mtime
                        .as_deref()
                        .and_then(|t| httpdate::parse_http_date(t).ok()),
                    etag: None,
                    sha256: None,
                });
            if let Err(e) = entry.and_then(|e| (self.on_entry)(e)) {
                let msg = e.to_string();
                *self.failure = Some(e);
                return Err(de::Error::custom(msg));
            }
            self.count += 1;
        }
        Ok(self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: &str) -> Result<Vec<ListingEntry>, ListingError> {
        let mut out = Vec::new();
        read_autoindex(body.as_bytes(), |e| {
            out.push(e);
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn reads_nginx_output() {
        let body = r#"[
{ "name":"a b.bin", "type":"file", "mtime":"Mon, 23 Nov 2026 05:46:00 GMT", "size":1234 },
{ "name":"sub", "type":"directory", "mtime":"Mon, 23 Nov 2026 05:46:00 GMT" },
{ "name":"sock", "type":"other", "mtime":"Mon, 23 Nov 2026 05:46:00 GMT" }
]"#;
        let entries = read(body).expect("valid");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].path.as_str(), "a b.bin");
        assert_eq!(entries[0].size, Some(1234));
        assert!(entries[0].modified.is_some());
        assert!(entries[1].is_dir());
        assert_eq!(read("[]").expect("empty").len(), 0);
    }

    #[test]
    fn hostile_names_and_bad_json_are_refused() {
        for name in ["..", "../x", "a/b", "/etc/passwd", "a\\b", "a\u{0}b", ""] {
            let body = format!(
                r#"[{{"name":{},"type":"file","size":1}}]"#,
                serde_json::json!(name)
            );
            assert!(
                matches!(read(&body), Err(ListingError::Name(_))),
                "{name:?} accepted"
            );
        }
        assert!(read("{}").is_err());
        assert!(read("[").is_err());
        assert!(read(r#"[{"name":"a","type":"file","size":-1}]"#).is_err());
        assert!(read("[] trailing").is_err());
    }

    #[test]
    fn an_endless_name_or_object_is_refused_while_it_streams() {
        for prefix in [
            &br#"[{"name":""#[..],
            &br#"[{"name":"a","type":"file","x":["#[..],
            &br#"[{"name":"a","type":"file"},          "#[..],
        ] {
            let mut endless = crate::listing::limit::Endless {
                prefix: prefix.to_vec(),
                fill: if prefix.ends_with(b"[") { b'1' } else { b' ' },
                served: 0,
            };
            if prefix.ends_with(b"\"") {
                endless.fill = b'x';
            }
            let r = read_autoindex(&mut endless, |_| Ok(()));
            assert!(
                matches!(r, Err(ListingError::RecordTooLong { .. })),
                "{r:?}"
            );
            assert!(
                endless.served < 2 * crate::listing::MAX_RECORD_BYTES as u64 + 16 * 1024,
                "{} bytes read",
                endless.served
            );
        }
    }

    #[test]
    fn consumer_errors_stop_the_read() {
        let body = r#"[{"name":"a","type":"file"},{"name":"b","type":"file"}]"#;
        let mut seen = 0;
        let r = read_autoindex(body.as_bytes(), |_| {
            seen += 1;
            Err(ListingError::Stopped("enough".into()))
        });
        assert!(matches!(r, Err(ListingError::Stopped(_))));
        assert_eq!(seen, 1);
    }
}
