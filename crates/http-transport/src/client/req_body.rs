//! Request bodies: small ones from memory, and a whole local file read from disk while it is
//! sent (a plain `PUT` of any size), with bounded memory: a blocking reader stays at most
//! [`QUEUE`] pieces of [`PIECE`] bytes ahead of the connection.

use std::convert::Infallible;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use tokio::sync::mpsc;
use xfer_core::transport::FileBody;

/// Bytes per read from the file.
const PIECE: usize = 1 << 20;
/// Pieces read ahead of the connection.
const QUEUE: usize = 4;

/// What a request carries, before it is sent; cloned for each attempt.
#[derive(Debug, Clone)]
pub(crate) enum BodySource {
    Bytes(Bytes),
    File(FileBody),
}

impl BodySource {
    /// A fresh body for one attempt: a file is read again from its start.
    pub(crate) fn open(&self) -> ReqBody {
        match self {
            BodySource::Bytes(b) => ReqBody::Full(Full::new(b.clone())),
            BodySource::File(f) => ReqBody::File(FileStream::start(f.clone())),
        }
    }
}

impl From<Bytes> for BodySource {
    fn from(b: Bytes) -> Self {
        BodySource::Bytes(b)
    }
}

/// The body type of every request the client sends.
#[derive(Debug)]
pub(crate) enum ReqBody {
    Full(Full<Bytes>),
    File(FileStream),
}

/// A file's bytes as they come off the disk.
#[derive(Debug)]
pub(crate) struct FileStream {
    pieces: mpsc::Receiver<std::io::Result<Bytes>>,
    remaining: u64,
    body: FileBody,
}

impl FileStream {
    fn start(body: FileBody) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        body.sent.store(0, Ordering::Relaxed);
        let (file, size) = (body.file.clone(), body.size);
        // Ends when the file is read or the request is dropped (the receiver with it).
        tokio::task::spawn_blocking(move || {
            let mut offset = 0u64;
            while offset < size {
                let want = (size - offset).min(PIECE as u64) as usize;
                let mut buf = vec![0u8; want];
                let piece = match file.read_at(&mut buf, offset) {
                    Ok(0) => Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("the file ended at byte {offset} of {size}"),
                    )),
                    Ok(n) => {
                        buf.truncate(n);
                        offset += n as u64;
                        Ok(Bytes::from(buf))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => Err(e),
                };
                let failed = piece.is_err();
                if tx.blocking_send(piece).is_err() || failed {
                    return;
                }
            }
        });
        Self {
            pieces: rx,
            remaining: size,
            body,
        }
    }
}

/// Why a file body could not be sent, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("reading {path} to send it")]
pub(crate) struct FileReadError {
    path: String,
    #[source]
    source: std::io::Error,
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            ReqBody::Full(f) => Pin::new(f)
                .poll_frame(cx)
                .map_err(|e: Infallible| match e {}),
            ReqBody::File(s) => {
                if s.remaining == 0 {
                    return Poll::Ready(None);
                }
                match s.pieces.poll_recv(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Some(Ok(piece))) => {
                        // A file that grew is cut at the declared length.
                        let piece = piece.slice(..piece.len().min(s.remaining as usize));
                        s.remaining -= piece.len() as u64;
                        s.body.sent.fetch_add(piece.len() as u64, Ordering::Relaxed);
                        Poll::Ready(Some(Ok(Frame::data(piece))))
                    }
                    Poll::Ready(Some(Err(source))) => {
                        Poll::Ready(Some(Err(Box::new(FileReadError {
                            path: s.body.path.display().to_string(),
                            source,
                        }))))
                    }
                    Poll::Ready(None) => Poll::Ready(Some(Err(Box::new(FileReadError {
                        path: s.body.path.display().to_string(),
                        source: std::io::Error::other("the reader stopped early"),
                    })))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Full(f) => f.is_end_stream(),
            ReqBody::File(s) => s.remaining == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::Full(f) => f.size_hint(),
            ReqBody::File(s) => SizeHint::with_exact(s.remaining),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;
    use std::io::Write as _;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_file_body_is_the_file_in_bounded_pieces_and_ends_where_declared() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(3 * PIECE + 17)).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(&data))
            .expect("write");
        let body = FileBody {
            file: Arc::new(std::fs::File::open(&path).expect("open")),
            path: path.clone(),
            size: data.len() as u64,
            sent: Arc::new(AtomicU64::new(0)),
        };
        let source = BodySource::File(body.clone());
        for _ in 0..2 {
            let mut req = source.open();
            assert_eq!(req.size_hint().exact(), Some(data.len() as u64));
            let mut got = Vec::new();
            while let Some(frame) = req.frame().await {
                let piece = frame.expect("frame").into_data().expect("data");
                assert!(piece.len() <= PIECE);
                got.extend_from_slice(&piece);
            }
            assert!(got == data, "every attempt sends the whole file");
            assert_eq!(body.sent.load(Ordering::Relaxed), data.len() as u64);
        }

        // A file shorter than declared is an error naming it, not a short body.
        let short = FileBody {
            size: data.len() as u64 + 5,
            ..body
        };
        let mut req = BodySource::File(short).open();
        let mut err = None;
        while let Some(frame) = req.frame().await {
            if let Err(e) = frame {
                err = Some(e.to_string());
                break;
            }
        }
        assert!(err.is_some_and(|e| e.contains(&path.display().to_string())));
    }
}
