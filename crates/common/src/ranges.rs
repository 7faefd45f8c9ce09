//! HTTP byte ranges (RFC 9110 §14): reading a request's `Range` against a resource size, and
//! writing and reading `Content-Range`.
//!
//! Only single ranges are served. A multi-range request, an unknown unit or a malformed value is
//! answered with the whole representation (RFC 9110 §14.2 lets a server ignore `Range`), which
//! every client handles; `multipart/byteranges` is not produced.

use std::ops::Range;

/// What to do with a request's `Range` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Ignore the header and send the whole representation with 200.
    Full,
    /// Send this half-open byte range with 206 and `Content-Range`.
    Partial(Range<u64>),
    /// Answer 416 with `Content-Range: bytes */<size>`.
    Unsatisfiable,
}

/// Read a `Range` header value against a representation of `size` bytes.
///
/// Numbers too large for `u64` are treated as "larger than any size": a huge first position is
/// unsatisfiable, a huge last position or suffix length means "to the end".
pub fn parse_range(value: &str, size: u64) -> RangeOutcome {
    let Some((unit, set)) = value.trim().split_once('=') else {
        return RangeOutcome::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") || set.contains(',') {
        return RangeOutcome::Full;
    }
    let Some((first, last)) = set.trim().split_once('-') else {
        return RangeOutcome::Full;
    };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        // Suffix range: the last N bytes.
        let Some(n) = parse_pos(last) else {
            return RangeOutcome::Full;
        };
        if n == 0 {
            return RangeOutcome::Unsatisfiable;
        }
        if size == 0 {
            // Satisfiable per RFC 9110 §14.1.1, but there is no byte to name in a
            // Content-Range: the whole (empty) representation is the answer.
            return RangeOutcome::Full;
        }
        return RangeOutcome::Partial(size.saturating_sub(n)..size);
    }
    let Some(start) = parse_pos(first) else {
        return RangeOutcome::Full;
    };
    let end_inclusive = if last.is_empty() {
        u64::MAX
    } else {
        match parse_pos(last) {
            Some(l) if l >= start => l,
            _ => return RangeOutcome::Full,
        }
    };
    if start >= size {
        return RangeOutcome::Unsatisfiable;
    }
    RangeOutcome::Partial(start..end_inclusive.min(size - 1) + 1)
}

/// A run of ASCII digits as a `u64`, saturating at `u64::MAX`; `None` when not all digits.
fn parse_pos(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// `Content-Range` for a 206: `bytes <first>-<last>/<size>`. `range` must be non-empty.
pub fn content_range(range: &Range<u64>, size: u64) -> String {
    format!(
        "bytes {}-{}/{}",
        range.start,
        range.end.saturating_sub(1),
        size
    )
}

/// `Content-Range` for a 416: `bytes */<size>`.
pub fn unsatisfied_content_range(size: u64) -> String {
    format!("bytes */{size}")
}

/// Read a 206's `Content-Range` (`bytes 0-99/1000` or `bytes 0-99/*`) into the half-open range
/// and the complete length when given. `None` for anything else, including `bytes */1000`.
pub fn parse_content_range(value: &str) -> Option<(Range<u64>, Option<u64>)> {
    let rest = strip_bytes_unit(value)?;
    let (span, total) = rest.split_once('/')?;
    let (first, last) = span.trim().split_once('-')?;
    let first = parse_exact(first.trim())?;
    let last = parse_exact(last.trim())?;
    if last < first {
        return None;
    }
    let end = last.checked_add(1)?;
    let total = match total.trim() {
        "*" => None,
        t => {
            let t = parse_exact(t)?;
            if end > t {
                return None;
            }
            Some(t)
        }
    };
    Some((first..end, total))
}

/// As [`parse_content_range`], but a span that runs past the complete length is read as
/// ending there: XRootD 5.5 answers a range beyond a file's end with `bytes 0-16777215/4194309`
/// and the file's 4,194,309 bytes. For the answer to a first range, whose end the client chose
/// blind; the bytes that follow are still counted against `Content-Length` and the range.
pub fn parse_content_range_clamped(value: &str) -> Option<(Range<u64>, Option<u64>)> {
    if let Some(found) = parse_content_range(value) {
        return Some(found);
    }
    let rest = strip_bytes_unit(value)?;
    let (span, total) = rest.split_once('/')?;
    let (first, last) = span.trim().split_once('-')?;
    let first = parse_exact(first.trim())?;
    let last = parse_exact(last.trim())?;
    let total = parse_exact(total.trim())?;
    (first <= last && first < total && last >= total).then_some((first..total, Some(total)))
}

/// Read a 416's `Content-Range: bytes */<size>` into the size.
pub fn parse_unsatisfied_content_range(value: &str) -> Option<u64> {
    let rest = strip_bytes_unit(value)?;
    let (star, total) = rest.split_once('/')?;
    if star.trim() != "*" {
        return None;
    }
    parse_exact(total.trim())
}

fn strip_bytes_unit(value: &str) -> Option<&str> {
    let v = value.trim();
    let (unit, rest) = v.split_once(' ')?;
    unit.eq_ignore_ascii_case("bytes").then_some(rest)
}

/// Digits that fit a `u64` exactly (a response claiming more is not trusted).
fn parse_exact(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::RangeOutcome::{Full, Partial, Unsatisfiable};
    use super::*;

    #[test]
    fn an_overlong_first_range_is_clamped_to_the_length_and_nothing_else_is_accepted() {
        assert_eq!(
            parse_content_range_clamped("bytes 0-16777215/4194309"),
            Some((0..4_194_309, Some(4_194_309)))
        );
        assert_eq!(parse_content_range("bytes 0-16777215/4194309"), None);
        assert_eq!(
            parse_content_range_clamped("bytes 0-99/1000"),
            Some((0..100, Some(1000)))
        );
        for bad in [
            "bytes 5000-6000/4000",
            "bytes 9-3/100",
            "bytes 0-99/*x",
            "bytes 0-+99/10",
        ] {
            assert_eq!(parse_content_range_clamped(bad), None, "{bad}");
        }
    }

    #[test]
    fn simple_forms() {
        assert_eq!(parse_range("bytes=0-499", 1000), Partial(0..500));
        assert_eq!(parse_range("bytes=500-999", 1000), Partial(500..1000));
        assert_eq!(parse_range("bytes=500-", 1000), Partial(500..1000));
        assert_eq!(parse_range("bytes=-500", 1000), Partial(500..1000));
        assert_eq!(parse_range("bytes=0-0", 1000), Partial(0..1));
        assert_eq!(parse_range("bytes=999-999", 1000), Partial(999..1000));
    }

    #[test]
    fn clamping_and_suffixes_longer_than_the_file() {
        assert_eq!(parse_range("bytes=900-5000", 1000), Partial(900..1000));
        assert_eq!(parse_range("bytes=-5000", 1000), Partial(0..1000));
        assert_eq!(parse_range("bytes=0-", 1000), Partial(0..1000));
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(parse_range("bytes=1000-", 1000), Unsatisfiable);
        assert_eq!(parse_range("bytes=1000-2000", 1000), Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 1000), Unsatisfiable);
        assert_eq!(parse_range("bytes=0-", 0), Unsatisfiable);
        assert_eq!(parse_range("bytes=0-0", 0), Unsatisfiable);
    }

    #[test]
    fn empty_representation_with_suffix_is_whole() {
        assert_eq!(parse_range("bytes=-5", 0), Full);
    }

    #[test]
    fn ignorable_headers_mean_full() {
        for v in [
            "bytes=0-1,5-6",
            "bytes=0-1, 5-6",
            "items=0-5",
            "bytes=",
            "bytes=-",
            "bytes=abc",
            "bytes=5-1",
            "bytes=1-2-3",
            "bytes=+1-2",
            "bytes=0x10-20",
            "bytes 0-5",
            "",
            "=",
            "bytes=\u{0660}-1",
        ] {
            assert_eq!(parse_range(v, 1000), Full, "{v:?}");
        }
    }

    #[test]
    fn whitespace_and_case() {
        assert_eq!(parse_range("  Bytes = 1 - 2 ", 10), Partial(1..3));
        assert_eq!(parse_range("BYTES=-3", 10), Partial(7..10));
    }

    #[test]
    fn huge_numbers_do_not_wrap() {
        let huge = "99999999999999999999999999999";
        assert_eq!(parse_range(&format!("bytes={huge}-"), 1000), Unsatisfiable);
        assert_eq!(
            parse_range(&format!("bytes=5-{huge}"), 1000),
            Partial(5..1000)
        );
        assert_eq!(
            parse_range(&format!("bytes=-{huge}"), 1000),
            Partial(0..1000)
        );
        assert_eq!(
            parse_range("bytes=18446744073709551615-", u64::MAX),
            Unsatisfiable
        );
        assert_eq!(
            parse_range("bytes=18446744073709551614-18446744073709551615", u64::MAX),
            Partial(u64::MAX - 1..u64::MAX)
        );
    }

    #[test]
    fn content_range_round_trip() {
        let s = content_range(&(500..1000), 1000);
        assert_eq!(s, "bytes 500-999/1000");
        assert_eq!(parse_content_range(&s), Some((500..1000, Some(1000))));
        assert_eq!(parse_content_range("bytes 0-0/*"), Some((0..1, None)));
        assert_eq!(unsatisfied_content_range(7), "bytes */7");
        assert_eq!(parse_unsatisfied_content_range("bytes */7"), Some(7));
    }

    #[test]
    fn bad_content_ranges() {
        for v in [
            "bytes */1000",
            "bytes 5-4/1000",
            "bytes 0-1000/1000",
            "bytes 0-18446744073709551615/*",
            "bytes 0-99999999999999999999/*",
            "items 0-1/2",
            "bytes=0-1/2",
            "bytes 0-1",
            "",
        ] {
            assert_eq!(parse_content_range(v), None, "{v:?}");
        }
        assert_eq!(parse_unsatisfied_content_range("bytes 0-1/2"), None);
    }
}
