//! The bytes of pipelined HTTP/1.1: request heads out, response heads and bodies in. Bodies are
//! framed by `Content-Length`, by chunked coding (with trailers), or by the end of the
//! connection (RFC 9112 §6.3). A pure decoder over a buffer, so every framing case is tested
//! without sockets; everything it reads came from the network and is checked.

use bytes::{Buf as _, Bytes, BytesMut};
use http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};

/// A response head longer than this is refused (hyper's limit is of the same order).
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Header fields per response head or trailer section.
const MAX_FIELDS: usize = 128;
/// Longest chunk-size line (size, extensions, CRLF) before it counts as hostile.
const MAX_CHUNK_LINE: usize = 4096;

/// `GET path HTTP/1.1` and its header fields, names in title case (XRootD 5.5 recognises
/// `Want-Digest` only spelled so; every server reads title case).
pub(crate) fn request_head(path: &str, fields: &[(HeaderName, HeaderValue)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in fields {
        let mut upper = true;
        for &c in name.as_str().as_bytes() {
            out.push(if upper { c.to_ascii_uppercase() } else { c });
            upper = c == b'-';
        }
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// A parsed response head.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub status: StatusCode,
    /// `HTTP/1.x`: 0 or 1.
    pub minor: u8,
    pub headers: HeaderMap,
}

/// Parse a response head at the start of `buf`: `Ok(None)` until it is complete, then the
/// head and the bytes it took.
pub(crate) fn parse_head(buf: &[u8]) -> Result<Option<(ResponseHead, usize)>, String> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut resp = httparse::Response::new(&mut fields);
    let used = match resp.parse(buf) {
        // The same limit whether the head came in one read or many.
        Ok(httparse::Status::Complete(n)) if n > MAX_HEAD => {
            return Err(format!("response head longer than {MAX_HEAD} bytes"))
        }
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err(format!("response head longer than {MAX_HEAD} bytes"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("unreadable response head: {e}")),
    };
    let status = resp
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| "response head without a valid status".to_string())?;
    let minor = resp.version.unwrap_or(0);
    let headers = to_map(resp.headers)?;
    Ok(Some((
        ResponseHead {
            status,
            minor,
            headers,
        },
        used,
    )))
}

fn to_map(fields: &[httparse::Header<'_>]) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::with_capacity(fields.len());
    for f in fields {
        let name = HeaderName::from_bytes(f.name.as_bytes())
            .map_err(|_| format!("invalid header field name {:?}", f.name))?;
        let value = HeaderValue::from_bytes(f.value)
            .map_err(|_| format!("invalid value of header field {:?}", f.name))?;
        map.append(name, value);
    }
    Ok(map)
}

/// How a response's body ends, and whether the connection carries more after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Framing {
    pub body: BodyEnd,
    pub keep_alive: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyEnd {
    Length(u64),
    Chunked,
    /// Read until the server closes the connection.
    Close,
}

/// The framing of a response to a `GET` (RFC 9112 §6.3).
pub(crate) fn framing(head: &ResponseHead) -> Result<Framing, String> {
    let tokens = |name: header::HeaderName| -> Vec<String> {
        head.headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect()
    };
    let connection = tokens(header::CONNECTION);
    let mut keep_alive = head.minor >= 1 && !connection.iter().any(|t| t == "close");
    let status = head.status.as_u16();
    if head.status.is_informational() || status == 204 || status == 304 {
        return Ok(Framing {
            body: BodyEnd::Length(0),
            keep_alive,
        });
    }
    let codings = tokens(header::TRANSFER_ENCODING);
    if !codings.is_empty() {
        // With both, Transfer-Encoding wins and the connection must not be trusted further.
        if head.headers.contains_key(header::CONTENT_LENGTH) {
            keep_alive = false;
        }
        return Ok(if codings.last().is_some_and(|c| c == "chunked") {
            Framing {
                body: BodyEnd::Chunked,
                keep_alive,
            }
        } else {
            Framing {
                body: BodyEnd::Close,
                keep_alive: false,
            }
        });
    }
    let mut length = None;
    for v in head.headers.get_all(header::CONTENT_LENGTH) {
        for part in v
            .to_str()
            .map_err(|_| "unreadable content-length")?
            .split(',')
        {
            let n: u64 = part
                .trim()
                .parse()
                .map_err(|_| format!("invalid content-length {part:?}"))?;
            if length.is_some_and(|l| l != n) {
                return Err("conflicting content-length values".to_string());
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(n) => Framing {
            body: BodyEnd::Length(n),
            keep_alive,
        },
        None => Framing {
            body: BodyEnd::Close,
            keep_alive: false,
        },
    })
}

/// What the decoder found in the buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    Data(Bytes),
    /// The buffer holds no complete piece: read more.
    NeedMore,
    /// The body ended; trailer fields, if it had any.
    End(Option<HeaderMap>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length { left: u64 },
    ChunkSize,
    ChunkData { left: u64 },
    ChunkEnd,
    Trailers,
    Close,
    Done,
}

/// Takes one body's bytes off the front of the connection's buffer, leaving what follows it
/// (the next pipelined response) in place.
#[derive(Debug)]
pub(crate) struct Decoder {
    state: State,
}

impl Decoder {
    pub fn new(end: BodyEnd) -> Self {
        Self {
            state: match end {
                BodyEnd::Length(0) => State::Done,
                BodyEnd::Length(n) => State::Length { left: n },
                BodyEnd::Chunked => State::ChunkSize,
                BodyEnd::Close => State::Close,
            },
        }
    }

    /// The next piece from `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Piece, String> {
        loop {
            match self.state {
                State::Done => return Ok(Piece::End(None)),
                State::Length { left } | State::ChunkData { left } => {
                    if buf.is_empty() {
                        return Ok(Piece::NeedMore);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let data = buf.split_to(n).freeze();
                    let left = left - n as u64;
                    self.state = match self.state {
                        State::Length { .. } if left == 0 => State::Done,
                        State::Length { .. } => State::Length { left },
                        _ if left == 0 => State::ChunkEnd,
                        _ => State::ChunkData { left },
                    };
                    return Ok(Piece::Data(data));
                }
                State::Close => {
                    if buf.is_empty() {
                        return Ok(Piece::NeedMore);
                    }
                    return Ok(Piece::Data(buf.split().freeze()));
                }
                State::ChunkSize => match httparse::parse_chunk_size(buf) {
                    Ok(httparse::Status::Complete((used, _))) if used > MAX_CHUNK_LINE => {
                        return Err("chunk-size line too long".to_string())
                    }
                    Ok(httparse::Status::Complete((used, 0))) => {
                        buf.advance(used);
                        self.state = State::Trailers;
                    }
                    Ok(httparse::Status::Complete((used, size))) => {
                        buf.advance(used);
                        self.state = State::ChunkData { left: size };
                    }
                    Ok(httparse::Status::Partial) if buf.len() > MAX_CHUNK_LINE => {
                        return Err("chunk-size line too long".to_string())
                    }
                    Ok(httparse::Status::Partial) => return Ok(Piece::NeedMore),
                    Err(_) => return Err("invalid chunk size".to_string()),
                },
                State::ChunkEnd => {
                    if buf.len() < 2 {
                        return Ok(Piece::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err("chunk not followed by CRLF".to_string());
                    }
                    buf.advance(2);
                    self.state = State::ChunkSize;
                }
                State::Trailers => {
                    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
                    match httparse::parse_headers(buf, &mut fields) {
                        Ok(httparse::Status::Complete((used, _))) if used > MAX_HEAD => {
                            return Err(format!("trailer section longer than {MAX_HEAD} bytes"))
                        }
                        Ok(httparse::Status::Complete((used, fields))) => {
                            let map = to_map(fields)?;
                            buf.advance(used);
                            self.state = State::Done;
                            return Ok(Piece::End((!map.is_empty()).then_some(map)));
                        }
                        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
                            return Err(format!("trailer section longer than {MAX_HEAD} bytes"))
                        }
                        Ok(httparse::Status::Partial) => return Ok(Piece::NeedMore),
                        Err(e) => return Err(format!("unreadable trailer section: {e}")),
                    }
                }
            }
        }
    }

    /// The connection ended with `buf` empty: the end of a body read to the close, else a
    /// truncation.
    pub fn at_eof(&mut self) -> Result<Piece, String> {
        match self.state {
            State::Close | State::Done => {
                self.state = State::Done;
                Ok(Piece::End(None))
            }
            _ => Err("connection closed before the body's end".to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> ResponseHead {
        match parse_head(text.as_bytes()) {
            Ok(Some((h, n))) => {
                assert_eq!(n, text.len());
                h
            }
            other => panic!("{other:?}"),
        }
    }

    /// Feed `wire` in pieces of `step` bytes and collect the body and trailers.
    fn decode_all(end: BodyEnd, wire: &[u8], step: usize) -> (Vec<u8>, Option<HeaderMap>, usize) {
        let mut d = Decoder::new(end);
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match d.decode(&mut buf).expect("valid") {
                Piece::Data(b) => body.extend_from_slice(&b),
                Piece::End(t) => return (body, t, buf.len() + wire.len() - fed),
                Piece::NeedMore => {
                    if fed == wire.len() {
                        match d.at_eof().expect("ends at eof") {
                            Piece::End(t) => return (body, t, 0),
                            p => panic!("{p:?}"),
                        }
                    }
                    let n = step.min(wire.len() - fed);
                    buf.extend_from_slice(&wire[fed..fed + n]);
                    fed += n;
                }
            }
        }
    }

    #[test]
    fn request_head_is_title_cased_and_ends_with_a_blank_line() {
        let fields = [
            (header::HOST, HeaderValue::from_static("h:8443")),
            (
                HeaderName::from_static("want-content-digest"),
                HeaderValue::from_static("sha-256"),
            ),
            (header::RANGE, HeaderValue::from_static("bytes=0-9")),
        ];
        let text = String::from_utf8(request_head("/a%20b?x=1", &fields)).expect("ascii");
        assert_eq!(
            text,
            "GET /a%20b?x=1 HTTP/1.1\r\nHost: h:8443\r\nWant-Content-Digest: sha-256\r\nRange: bytes=0-9\r\n\r\n"
        );
    }

    #[test]
    fn heads_are_parsed_only_when_complete() {
        let text = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nContent-Length: 10\r\n\r\nbody";
        let end = text.len() - 4;
        for cut in [0, 5, 20, end - 1] {
            assert!(
                matches!(parse_head(&text.as_bytes()[..cut]), Ok(None)),
                "{cut}"
            );
        }
        let (h, used) = parse_head(text.as_bytes()).expect("ok").expect("complete");
        assert_eq!(used, end);
        assert_eq!(h.status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(
            framing(&h),
            Ok(Framing {
                body: BodyEnd::Length(10),
                keep_alive: true
            })
        );
    }

    #[test]
    fn hostile_heads_are_refused() {
        assert!(parse_head(b"HTTP/1.1 abc OK\r\n\r\n").is_err());
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
        let long = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(MAX_HEAD + 1));
        assert!(parse_head(long.as_bytes()).is_err());
        let many: String = (0..MAX_FIELDS + 1)
            .map(|i| format!("X-{i}: 1\r\n"))
            .collect();
        assert!(parse_head(format!("HTTP/1.1 200 OK\r\n{many}\r\n").as_bytes()).is_err());
        let conflicting = head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
        assert!(framing(&conflicting).is_err());
        let bad = head("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n");
        assert!(framing(&bad).is_err());
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let f = |t: &str| framing(&head(t)).expect("valid");
        assert_eq!(
            f("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            Framing {
                body: BodyEnd::Chunked,
                keep_alive: true
            }
        );
        // Both: chunked wins and the connection is not reused.
        assert_eq!(
            f("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"),
            Framing {
                body: BodyEnd::Chunked,
                keep_alive: false
            }
        );
        assert_eq!(
            f("HTTP/1.1 200 OK\r\n\r\n"),
            Framing {
                body: BodyEnd::Close,
                keep_alive: false
            }
        );
        assert_eq!(
            f("HTTP/1.1 206 P\r\nConnection: keep-alive, Close\r\nContent-Length: 1\r\n\r\n"),
            Framing {
                body: BodyEnd::Length(1),
                keep_alive: false
            }
        );
        assert!(!f("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n").keep_alive);
        assert_eq!(
            f("HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n").body,
            BodyEnd::Length(0)
        );
    }

    #[test]
    fn length_bodies_leave_the_next_response_in_the_buffer() {
        let wire = b"0123456789HTTP/1.1 206";
        for step in [1, 3, 64] {
            let (body, trailers, rest) = decode_all(BodyEnd::Length(10), wire, step);
            assert_eq!(body, b"0123456789");
            assert!(trailers.is_none());
            assert_eq!(rest, 12, "step {step}");
        }
    }

    #[test]
    fn chunked_bodies_with_extensions_and_trailers() {
        let wire = b"4;ext=1\r\nabcd\r\n10\r\n0123456789abcdef\r\n0\r\nContent-Digest: sha-256=:x:\r\n\r\nNEXT";
        for step in [1, 2, 7, 1000] {
            let (body, trailers, rest) = decode_all(BodyEnd::Chunked, wire, step);
            assert_eq!(body, b"abcd0123456789abcdef");
            let t = trailers.expect("trailers");
            assert_eq!(
                t.get("content-digest").map(|v| v.as_bytes()),
                Some(&b"sha-256=:x:"[..])
            );
            assert_eq!(rest, 4, "step {step}");
        }
        let (body, trailers, rest) = decode_all(BodyEnd::Chunked, b"3\r\nabc\r\n0\r\n\r\n", 5);
        assert_eq!((body.as_slice(), trailers, rest), (&b"abc"[..], None, 0));
    }

    #[test]
    fn hostile_chunked_bodies_are_errors() {
        for wire in [
            &b"zz\r\nab\r\n"[..],
            &b"2\r\nabXX0\r\n\r\n"[..],
            &b"2\r\nab\r\n0\r\nbad header\r\n\r\n"[..],
        ] {
            let mut d = Decoder::new(BodyEnd::Chunked);
            let mut buf = BytesMut::from(wire);
            let mut failed = false;
            for _ in 0..10 {
                match d.decode(&mut buf) {
                    Err(_) => {
                        failed = true;
                        break;
                    }
                    Ok(Piece::End(_)) | Ok(Piece::NeedMore) => break,
                    Ok(Piece::Data(_)) => {}
                }
            }
            assert!(failed, "{:?}", String::from_utf8_lossy(wire));
        }
        let mut d = Decoder::new(BodyEnd::Chunked);
        let mut buf = BytesMut::from(&b"1"[..]);
        buf.extend_from_slice(&vec![b' '; MAX_CHUNK_LINE + 1]);
        assert!(d.decode(&mut buf).is_err());
    }

    #[test]
    fn eof_ends_only_a_body_read_to_the_close() {
        let (body, _, _) = decode_all(BodyEnd::Close, b"all of it", 4);
        assert_eq!(body, b"all of it");
        let mut d = Decoder::new(BodyEnd::Length(5));
        let mut buf = BytesMut::from(&b"abc"[..]);
        assert!(matches!(d.decode(&mut buf), Ok(Piece::Data(_))));
        assert!(d.at_eof().is_err());
        let mut d = Decoder::new(BodyEnd::Chunked);
        assert!(d.at_eof().is_err());
    }
}
