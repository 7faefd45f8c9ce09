//! A bound on each record a listing reader takes in, enforced as the bytes arrive.
//!
//! A parser given an ordinary reader buffers a whole token before it looks at it: quick-xml a
//! whole text node, serde_json a whole string. One 400 MB name would then cost 400 MB (and
//! more as it is unescaped and copied) before any check could refuse it. [`RecordLimit`] sits
//! between the body and the parser and counts what the parser takes since the reader last
//! called [`RecordMark::start_record`]; past [`MAX_RECORD_BYTES`] it hands out nothing more
//! and fails every read, so the parser stops with at most one record's worth buffered.
//!
//! ```text
//!   body ─► BufReader (8 KiB) ─► RecordLimit ──► quick-xml / serde_json
//!                                    ▲ used        │
//!                                    └─ RecordMark ◄┘ start_record() after each event/element
//! ```

use std::cell::Cell;
use std::io::{self, BufRead, Read};
use std::rc::Rc;

use super::MAX_RECORD_BYTES;

/// A reader that fails once more than `limit` bytes were taken since the last record began.
pub struct RecordLimit<R> {
    inner: R,
    used: Rc<Cell<usize>>,
    limit: usize,
}

/// The reader's side of a [`RecordLimit`]: where records begin, and whether one ran over.
#[derive(Clone)]
pub struct RecordMark {
    used: Rc<Cell<usize>>,
    limit: usize,
}

impl<R> RecordLimit<R> {
    /// `inner` with records of at most [`MAX_RECORD_BYTES`].
    pub fn new(inner: R) -> (Self, RecordMark) {
        Self::with_limit(inner, MAX_RECORD_BYTES)
    }

    pub fn with_limit(inner: R, limit: usize) -> (Self, RecordMark) {
        let used = Rc::new(Cell::new(0));
        let mark = RecordMark {
            used: Rc::clone(&used),
            limit,
        };
        (Self { inner, used, limit }, mark)
    }

    /// Bytes the current record may still take, one more than the limit so that running over
    /// is seen; an error once it has run over.
    fn room(&self) -> io::Result<usize> {
        let used = self.used.get();
        if used > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a listing record longer than {} bytes", self.limit),
            ));
        }
        Ok(self.limit + 1 - used)
    }
}

impl RecordMark {
    /// The parser finished a record: the next one starts with the full allowance.
    pub fn start_record(&self) {
        self.used.set(0);
    }

    /// Whether the current record ran over the limit (a parse error is then this, whatever
    /// the parser made of the failed read).
    pub fn exceeded(&self) -> bool {
        self.used.get() > self.limit
    }
}

impl<R: Read> Read for RecordLimit<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.room()?;
        let take = buf.len().min(room);
        let n = self.inner.read(&mut buf[..take])?;
        self.used.set(self.used.get() + n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for RecordLimit<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        let room = self.room()?;
        let available = self.inner.fill_buf()?;
        Ok(&available[..available.len().min(room)])
    }

    fn consume(&mut self, amt: usize) {
        self.used.set(self.used.get() + amt);
        self.inner.consume(amt);
    }
}

/// An endless stream of one byte, for tests: a record of any length without holding it.
#[cfg(test)]
pub(crate) struct Endless {
    pub prefix: Vec<u8>,
    pub fill: u8,
    pub served: u64,
}

#[cfg(test)]
impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len();
        for (i, b) in buf.iter_mut().enumerate() {
            let at = self.served + i as u64;
            *b = usize::try_from(at)
                .ok()
                .and_then(|at| self.prefix.get(at).copied())
                .unwrap_or(self.fill);
        }
        self.served += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_within_the_limit_pass_and_a_longer_one_fails() {
        let data = b"aaaa|bbbbbbbb|cc".to_vec();
        let (mut r, mark) = RecordLimit::with_limit(std::io::Cursor::new(data), 5);
        let mut rec = Vec::new();
        r.read_until(b'|', &mut rec).expect("first record fits");
        assert_eq!(rec, b"aaaa|");
        mark.start_record();
        rec.clear();
        let err = r
            .read_until(b'|', &mut rec)
            .expect_err("second is too long");
        assert!(mark.exceeded());
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(rec.len() <= 6, "{} bytes buffered", rec.len());
    }

    #[test]
    fn an_endless_record_stops_after_the_limit() {
        let endless = Endless {
            prefix: Vec::new(),
            fill: b'x',
            served: 0,
        };
        let (mut r, mark) = RecordLimit::new(std::io::BufReader::new(endless));
        let mut sink = Vec::new();
        assert!(r.read_to_end(&mut sink).is_err());
        assert!(mark.exceeded());
        assert_eq!(sink.len(), MAX_RECORD_BYTES + 1);
    }
}
