//! # xfer-fuzz-targets: what the fuzzers run
//!
//! One function per decoder of foreign bytes, taking arbitrary input. Each returns quietly on
//! input the decoder refuses and panics only when an invariant breaks: a decoded value that does
//! not survive re-encoding, a range outside the resource, a listing name that escapes its
//! directory. The same bodies run in two places:
//!
//! ```text
//!   fuzz/fuzz_targets/<name>.rs ─► libFuzzer (cargo fuzz, scripts/fuzz.sh: long runs)
//!   tests/smoke.rs ──────────────► committed corpus + seeded mutations (every test run)
//! ```
//!
//! It is a library only for those two callers; nothing else depends on it.

#![forbid(unsafe_code)]

use std::io::Write;
use std::ops::Range;
use std::path::{Component, Path};

use xfer_common::listing::{
    autoindex::read_autoindex, html_index::read_html_index, manifest::read_manifest,
    manifest::ManifestWriter, propfind::read_multistatus, ListingEntry, RelPath,
};
use xfer_common::ranges::{content_range, parse_content_range, parse_range, RangeOutcome};
use xfer_core::checksum::{
    parse_digest_field, parse_rfc9530_field, want_digest_preferences, want_repr_digest_preferences,
    Checksum,
};
use xfer_core::digest::{wants_sha256, Sha256Digest};
use xfer_core::multi::{duplicate_allowed, link_duplicates, MAX_SOURCES};
use xfer_quic::wire::{decode_trailer, Request, ResponseHead};
use xfer_service::access::jwt::{self, Alg, PublicKey, MAX_JWT_LEN};

/// A named fuzz target.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by the name of its corpus directory under `fuzz/corpus/`.
pub const TARGETS: &[Target] = &[
    ("range", range),
    ("digest_fields", digest_fields),
    ("journal", journal),
    ("quic_wire", quic_wire),
    ("listing_propfind", listing_propfind),
    ("listing_autoindex", listing_autoindex),
    ("listing_html", listing_html),
    ("listing_manifest", listing_manifest),
    ("listing_name", listing_name),
    ("jwt", jwt),
    ("link", link),
    ("http1_pipeline", http1_pipeline),
    ("copy_fields", copy_fields),
];

/// `Range` against a size (first 8 bytes, little-endian), and `Content-Range` round trips.
pub fn range(data: &[u8]) {
    let (size, rest) = split_u64(data);
    let Ok(value) = std::str::from_utf8(rest) else {
        return;
    };
    if let RangeOutcome::Partial(r) = parse_range(value, size) {
        assert!(
            r.start < r.end && r.end <= size,
            "{value:?} of {size} gave {r:?}"
        );
        let header = content_range(&r, size);
        assert_eq!(
            parse_content_range(&header),
            Some((r, Some(size))),
            "{header}"
        );
    }
    if let Some((r, total)) = parse_content_range(value) {
        assert!(r.start < r.end, "{value:?} gave an empty or inverted {r:?}");
        if let Some(total) = total {
            assert!(r.end <= total, "{value:?} gave {r:?} beyond {total}");
        }
    }
}

/// `Content-Digest` / `Repr-Digest` / `Want-*-Digest` (RFC 9530) and `Digest` /
/// `Want-Digest` (RFC 3230): what is accepted re-encodes to itself.
pub fn digest_fields(data: &[u8]) {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(Some(d)) = Sha256Digest::from_header_value(value) {
        let again = Sha256Digest::from_header_value(&d.to_header_value());
        assert!(matches!(again, Ok(Some(x)) if x == d));
    }
    let _ = wants_sha256(value);
    for c in parse_digest_field(value) {
        let again = Checksum::from_rfc3230_value(c.algorithm, &c.rfc3230_value());
        assert_eq!(again.as_ref(), Some(&c));
    }
    for c in parse_rfc9530_field(value) {
        let again = parse_rfc9530_field(&c.to_rfc9530_member());
        assert_eq!(again, vec![c]);
    }
    for prefs in [
        want_digest_preferences(value),
        want_repr_digest_preferences(value),
    ] {
        let mut dedup = prefs.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(
            dedup.len(),
            prefs.len(),
            "an algorithm listed twice: {prefs:?}"
        );
    }
}

/// A resume journal read from disk: records never point outside the file and never repeat.
pub fn journal(data: &[u8]) {
    // One directory per process: creating one per input would cost more than the parse.
    static DIR: std::sync::OnceLock<Option<tempfile::TempDir>> = std::sync::OnceLock::new();
    let Some(dir) = DIR.get_or_init(|| tempfile::tempdir().ok()) else {
        return;
    };
    let path = dir.path().join("f.xfer-journal");
    let written = std::fs::File::create(&path).and_then(|mut f| f.write_all(data));
    if written.is_err() {
        return;
    }
    if let Ok(Some(loaded)) = xfer_core::journal::load(&path) {
        let mut seen = std::collections::HashSet::new();
        for c in &loaded.chunks {
            assert!(c.len > 0, "empty chunk record");
            let end = c.offset.checked_add(c.len).expect("record end overflows");
            assert!(end <= loaded.header.size, "record beyond the file");
            assert!(seen.insert(c.chunk), "chunk recorded twice");
        }
    }
}

/// `xfer/1` requests, response heads and trailers: decode, encode, decode gives the same.
pub fn quic_wire(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => {
            if let Ok(req) = Request::decode(rest) {
                if let Some(r) = &req.range {
                    assert!(r.start < r.end, "decoded an empty range {r:?}");
                }
                let bytes = req.encode().expect("a decoded request re-encodes");
                assert_eq!(Request::decode(&bytes).expect("re-decodes"), req);
            }
        }
        1 => {
            if let Ok(head) = ResponseHead::decode(rest) {
                let bytes = head.encode().expect("a decoded head re-encodes");
                assert_eq!(ResponseHead::decode(&bytes[2..]).expect("re-decodes"), head);
                let _: Range<u64> = 0..head.body_len();
            }
        }
        _ => {
            let _ = decode_trailer(rest);
        }
    }
}

/// A `PROPFIND` multistatus listing `/d/`.
pub fn listing_propfind(data: &[u8]) {
    let _ = read_multistatus(data, "/d/", |e| {
        assert_inside(&e);
        Ok(())
    });
}

/// An nginx JSON index.
pub fn listing_autoindex(data: &[u8]) {
    let _ = read_autoindex(data, |e| {
        assert_inside(&e);
        assert!(
            !e.path.as_str().contains('/'),
            "a nested name in a flat index"
        );
        Ok(())
    });
}

/// An HTML index page of `http://h/d/`, read within a 1 MiB page bound.
pub fn listing_html(data: &[u8]) {
    let _ = read_html_index(data, "http://h/d/", 1 << 20, |e| {
        assert_inside(&e);
        assert!(
            !e.path.as_str().contains('/'),
            "a nested name in a one-level index"
        );
        Ok(())
    });
}

/// xfer's manifest: what is read writes back to a manifest that reads the same.
pub fn listing_manifest(data: &[u8]) {
    let mut entries = Vec::new();
    let read = read_manifest(data, |e| {
        assert_inside(&e);
        entries.push(e);
        Ok(())
    });
    if read.is_ok() {
        let mut w = ManifestWriter::new(Vec::new()).expect("vec");
        for e in &entries {
            w.write_entry(e).expect("vec");
        }
        let bytes = w.finish().expect("vec");
        let mut again = Vec::new();
        read_manifest(bytes.as_slice(), |e| {
            again.push(e);
            Ok(())
        })
        .expect("own output reads back");
        assert_eq!(again, entries);
    }
}

/// A name from a listing: accepted names stay under the destination.
pub fn listing_name(data: &[u8]) {
    let Ok(name) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = RelPath::parse(name) {
        assert_under(&p);
    }
}

fn assert_inside(e: &ListingEntry) {
    assert_under(&e.path);
}

fn assert_under(p: &RelPath) {
    let root = Path::new("/dest");
    let joined = p.under(root);
    assert!(joined.starts_with(root), "{p} leaves the destination");
    assert!(
        joined
            .components()
            .skip(2)
            .all(|c| matches!(c, Component::Normal(_))),
        "{p} has a special component"
    );
    assert_eq!(joined.components().count(), 2 + p.segments().count(), "{p}");
}

fn split_u64(data: &[u8]) -> (u64, &[u8]) {
    if data.len() < 8 {
        return (0, data);
    }
    let (head, rest) = data.split_at(8);
    let mut b = [0u8; 8];
    b.copy_from_slice(head);
    (u64::from_le_bytes(b), rest)
}

/// A bearer token as the server receives it: the input as token text, and the input split at
/// its first two `0x01` bytes into header, claims and signature, each base64url-encoded, so
/// that mutations reach the JSON and the algorithm checks too. What parses has an accepted
/// algorithm, a `kid` and a length within the cap, and never verifies against a key that did
/// not sign it. The input as a JWKS: every key it yields is usable.
pub fn jwt(data: &[u8]) {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    if let Ok(text) = std::str::from_utf8(data) {
        check_jwt(text);
    }
    let mut parts = data.splitn(3, |b| *b == 1);
    let (h, p, s) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let token = [h, p, s].map(|part| URL_SAFE_NO_PAD.encode(part)).join(".");
    check_jwt(&token);
    if let Ok(keys) = jwt::parse_jwks(data) {
        for (kid, key) in keys {
            assert!(!kid.is_empty());
            if let PublicKey::P256(point) = key {
                assert!(point.len() == 65 && point[0] == 4, "{point:?}");
            }
        }
    }
}

fn check_jwt(token: &str) {
    let Ok(jws) = jwt::parse(token) else {
        return;
    };
    assert!(token.len() <= MAX_JWT_LEN);
    assert!(matches!(jws.alg, Alg::Rs256 | Alg::Es256));
    assert!(!jws.kid.is_empty());
    let mut point = vec![4u8];
    point.extend_from_slice(&[7u8; 64]);
    assert!(jws.verify(&PublicKey::P256(point)).is_err());
    let rsa = PublicKey::Rsa {
        n: vec![0xc5; 256],
        e: vec![1, 0, 1],
    };
    assert!(jws.verify(&rsa).is_err());
}

/// `Link` field values (one per line): every duplicate found is the text between a `<` and
/// its `>` in the input, found once, and no more of them than a download may use; any the
/// check accepts from a TLS origin stays on TLS.
pub fn link(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let found = link_duplicates(text.lines());
    assert!(found.len() <= MAX_SOURCES, "{} duplicates", found.len());
    for (i, target) in found.iter().enumerate() {
        assert!(
            text.contains(&format!("<{target}>")),
            "{target:?} is not a bracketed target of {text:?}"
        );
        assert!(!found[..i].contains(target), "{target:?} twice");
        // Whatever a target resolves to from a TLS origin is itself over TLS.
        if let Ok(url) = duplicate_allowed("https://origin.example/d/f", target) {
            assert!(
                url.starts_with("https://") || url.starts_with("quic://"),
                "{target:?} stepped down to {url:?}"
            );
        }
    }
}

/// Pipelined HTTP/1.1 responses, cut into reads of every size (see
/// [`xfer_http::fuzzing::pipelined_responses`]).
pub fn http1_pipeline(data: &[u8]) {
    xfer_http::fuzzing::pipelined_responses(data);
}

/// A `COPY` request's fields, as `Name: value` lines (see
/// [`xfer_service::tpc::fuzzing::copy_fields`]).
pub fn copy_fields(data: &[u8]) {
    xfer_service::tpc::fuzzing::copy_fields(data);
}
