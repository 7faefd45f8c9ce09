//! The pipelined HTTP/1.1 response decoder on arbitrary bytes, for the fuzz targets: the
//! decoder is crate-private, so its one outside caller goes through here.

use bytes::BytesMut;
use http::HeaderMap;

use super::wire::{framing, parse_head, BodyEnd, Decoder, Piece};

/// What a connection's bytes decoded to: each response's status, body and trailers, then the
/// error that ended the decoding, if one did.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    responses: Vec<(u16, Vec<u8>, Option<HeaderMap>)>,
    error: Option<String>,
}

/// Decodes `wire` as the responses of pipelined requests, handing the decoder `step` bytes at a
/// time as reads from a socket would.
fn decode(wire: &[u8], step: usize) -> Decoded {
    let mut out = Decoded {
        responses: Vec::new(),
        error: None,
    };
    let mut buf = BytesMut::new();
    let mut fed = 0;
    // Every turn of the loop consumes bytes, feeds bytes or returns, so this bound is never
    // reached by a decoder that makes progress.
    let mut turns = 4 * (wire.len() + 16);
    let mut feed = |buf: &mut BytesMut| -> bool {
        if fed == wire.len() {
            return false;
        }
        let n = step.min(wire.len() - fed);
        buf.extend_from_slice(&wire[fed..fed + n]);
        fed += n;
        true
    };
    'responses: loop {
        let (head, used) = loop {
            turns -= 1;
            assert!(turns > 0, "the decoder stopped making progress on a head");
            match parse_head(&buf) {
                Ok(Some(found)) => break found,
                Ok(None) if feed(&mut buf) => {}
                Ok(None) => return out,
                Err(e) => {
                    out.error = Some(e);
                    return out;
                }
            }
        };
        assert!(used <= buf.len(), "a head took more bytes than were read");
        let _ = buf.split_to(used);
        let frame = match framing(&head) {
            Ok(f) => f,
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        };
        let mut decoder = Decoder::new(frame.body);
        let mut body = Vec::new();
        loop {
            turns -= 1;
            assert!(turns > 0, "the decoder stopped making progress on a body");
            let before = buf.len();
            let piece = match decoder.decode(&mut buf) {
                Ok(Piece::NeedMore) if feed(&mut buf) => continue,
                Ok(Piece::NeedMore) => decoder.at_eof(),
                other => other,
            };
            match piece {
                Ok(Piece::Data(d)) => {
                    assert!(!d.is_empty(), "an empty data piece");
                    assert!(d.len() <= before, "a piece larger than what was buffered");
                    body.extend_from_slice(&d);
                }
                Ok(Piece::End(trailers)) => {
                    if let BodyEnd::Length(n) = frame.body {
                        assert_eq!(
                            body.len() as u64,
                            n,
                            "a Content-Length body of another size"
                        );
                    }
                    out.responses.push((head.status.as_u16(), body, trailers));
                    if !frame.keep_alive {
                        return out;
                    }
                    continue 'responses;
                }
                Ok(Piece::NeedMore) => unreachable!("handled above"),
                Err(e) => {
                    out.error = Some(e);
                    return out;
                }
            }
        }
    }
}

/// The first byte picks how many bytes each read brings (1 to 256); the rest is what the
/// server sent. Read in those steps, the bytes must decode exactly as they do when they all
/// arrive at once: the decoder's answer may not depend on how the network cut the stream.
pub fn pipelined_responses(data: &[u8]) {
    let Some((&step, wire)) = data.split_first() else {
        return;
    };
    // At most 512 reads: a head is parsed again after each, and the run must stay short.
    let step = (usize::from(step) + 1).max(wire.len().div_ceil(512));
    let whole = decode(wire, wire.len().max(1));
    let cut = decode(wire, step);
    assert_eq!(whole.responses, cut.responses, "reads of {step} bytes");
    // Cut into reads, a stream may fail at another point of the same response, but never
    // succeed where the whole one failed, or the reverse.
    assert_eq!(
        whole.error.is_some(),
        cut.error.is_some(),
        "reads of {step} bytes"
    );
}
