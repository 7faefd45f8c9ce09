//! quinn's batches of datagrams, sent within what one system call may carry.
//!
//! quinn hands the socket up to 10 equal datagrams at once for one GSO send (`UDP_SEGMENT`).
//! The kernel takes at most one IP packet's worth of payload per send, 65,507 bytes, and
//! refuses a larger batch with `EMSGSIZE`, which quinn-udp drops as silently as a too-large MTU
//! probe: every batch of 9000-byte jumbo datagrams was lost that way, until quinn's black-hole
//! detector fell back to 1200 bytes. Capping the datagram at a tenth of that limit (6550 bytes)
//! avoided the loss but kept loopback and jumbo-frame paths at small datagrams, and each
//! datagram costs both ends a packet's work (sealing, framing, bookkeeping, an
//! acknowledgement share). [`SplitBatches`] lets datagrams be as large as the route takes by
//! sending a batch that exceeds the limit as several sends, each of whole datagrams.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

/// Most UDP payload bytes one send may carry: one IPv4 packet (65,535) less its IP (20) and
/// UDP (8) headers. IPv6 allows 20 more; one bound for both keeps IPv4-mapped peers of a
/// dual-stack socket safe.
pub const MAX_SEND_BYTES: usize = 65_507;

/// An [`AsyncUdpSocket`] that passes everything to `inner` but sends a GSO batch larger than
/// [`MAX_SEND_BYTES`] as consecutive sends of as many whole datagrams as fit.
///
/// When a later part finds the socket's buffer full, the batch reports `WouldBlock` and quinn
/// sends all of it again: the parts already sent arrive twice, and the receiver drops the
/// duplicates by packet number. A batch is never partly dropped, so a full buffer is not
/// mistaken for loss. With xfer's 32 MiB send buffers this is rare.
pub struct SplitBatches {
    inner: Arc<dyn AsyncUdpSocket>,
}

impl SplitBatches {
    pub fn new(inner: Arc<dyn AsyncUdpSocket>) -> Self {
        Self { inner }
    }
}

impl fmt::Debug for SplitBatches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SplitBatches")
            .field("inner", &self.inner)
            .finish()
    }
}

/// The sends `transmit` goes out as: itself when it fits one, otherwise runs of whole datagrams
/// of at most [`MAX_SEND_BYTES`] (a single datagram larger than that stays alone, and the
/// kernel decides).
fn parts<'a>(transmit: &'a Transmit<'a>) -> impl Iterator<Item = Transmit<'a>> + 'a {
    let whole = transmit.contents.len() <= MAX_SEND_BYTES || transmit.segment_size.is_none();
    let segment = transmit
        .segment_size
        .unwrap_or(transmit.contents.len())
        .max(1);
    let per_send = match whole {
        true => transmit.contents.len().max(1),
        false => (MAX_SEND_BYTES / segment).max(1) * segment,
    };
    transmit
        .contents
        .chunks(per_send)
        .map(move |contents| Transmit {
            destination: transmit.destination,
            ecn: transmit.ecn,
            contents,
            // A part of one datagram is a plain send.
            segment_size: transmit.segment_size.filter(|&s| contents.len() > s),
            src_ip: transmit.src_ip,
        })
}

impl AsyncUdpSocket for SplitBatches {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        if transmit.contents.len() <= MAX_SEND_BYTES {
            return self.inner.try_send(transmit);
        }
        for part in parts(transmit) {
            self.inner.try_send(&part)?;
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    fn transmit(contents: &[u8], segment_size: Option<usize>) -> Transmit<'_> {
        Transmit {
            destination: "127.0.0.1:9".parse().expect("literal address"),
            ecn: None,
            contents,
            segment_size,
            src_ip: None,
        }
    }

    fn shape(t: &Transmit) -> Vec<(usize, Option<usize>)> {
        parts(t)
            .map(|p| (p.contents.len(), p.segment_size))
            .collect()
    }

    #[test]
    fn batches_are_cut_at_whole_datagrams() {
        let buf = vec![7u8; 10 * 65_507];
        // Ten 6550-byte datagrams fit one send: untouched.
        assert_eq!(
            shape(&transmit(&buf[..65_500], Some(6550))),
            [(65_500, Some(6550))]
        );
        // Ten jumbo datagrams: 7 (62,804 bytes) and 3.
        assert_eq!(
            shape(&transmit(&buf[..89_720], Some(8972))),
            [(62_804, Some(8972)), (26_916, Some(8972))]
        );
        // Loopback-sized datagrams go one per send, as plain sends.
        assert_eq!(
            shape(&transmit(&buf[..3 * 65_507], Some(65_507))),
            [(65_507, None); 3]
        );
        // A short last datagram stays with its run; a lone one is a plain send.
        assert_eq!(
            shape(&transmit(&buf[..9 * 8972 + 100], Some(8972))),
            [(62_804, Some(8972)), (2 * 8972 + 100, Some(8972))]
        );
        assert_eq!(
            shape(&transmit(&buf[..14 * 8972 + 100], Some(8972))),
            [(62_804, Some(8972)), (62_804, Some(8972)), (100, None)]
        );
        // Every byte goes out once, in order.
        let t = transmit(&buf[..89_720], Some(8972));
        let total: usize = parts(&t).map(|p| p.contents.len()).sum();
        assert_eq!(total, 89_720);
    }

    /// Records each send; refuses the `fail_at`th with `WouldBlock`.
    #[derive(Debug, Default)]
    struct Recorder {
        sends: Mutex<Vec<(usize, Option<usize>)>>,
        fail_at: Option<usize>,
    }

    impl AsyncUdpSocket for Recorder {
        fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
            unreachable!("not polled in these tests")
        }
        fn try_send(&self, t: &Transmit) -> io::Result<()> {
            let mut sends = self.sends.lock().expect("not poisoned");
            if Some(sends.len()) == self.fail_at {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            sends.push((t.contents.len(), t.segment_size));
            Ok(())
        }
        fn poll_recv(
            &self,
            _: &mut Context,
            _: &mut [IoSliceMut<'_>],
            _: &mut [RecvMeta],
        ) -> Poll<io::Result<usize>> {
            Poll::Pending
        }
        fn local_addr(&self) -> io::Result<SocketAddr> {
            Ok("127.0.0.1:1".parse().expect("literal address"))
        }
    }

    #[test]
    fn a_full_buffer_mid_batch_reports_would_block() {
        let buf = vec![0u8; 89_720];
        let inner = Arc::new(Recorder {
            fail_at: Some(1),
            ..Recorder::default()
        });
        let socket = SplitBatches::new(inner.clone());
        let err = socket
            .try_send(&transmit(&buf, Some(8972)))
            .expect_err("second part refused");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(
            *inner.sends.lock().expect("not poisoned"),
            [(62_804, Some(8972))]
        );
    }

    /// The kernel takes every datagram of a batch that one send could not carry. Without the
    /// split, quinn-udp drops the whole batch (`EMSGSIZE`) and reports success.
    #[tokio::test]
    async fn a_jumbo_batch_arrives_whole_over_loopback() {
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
        receiver
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let to = receiver.local_addr().expect("bound");
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind sender");
        sender.set_nonblocking(true).expect("non-blocking");
        let runtime = quinn::default_runtime().expect("inside a tokio runtime");
        let inner = runtime.wrap_udp_socket(sender).expect("wrap");
        let segments = inner.max_transmit_segments();
        if segments < 10 {
            xfer_test_support::gate::absent(
                "a_jumbo_batch_arrives_whole_over_loopback",
                format!("the kernel offers no GSO here ({segments} segments per send)"),
            );
            return;
        }
        let socket = Arc::new(SplitBatches::new(inner));
        let payload: Vec<u8> = (0..10 * 8972).map(|i| (i / 8972) as u8).collect();
        let batch = Transmit {
            destination: to,
            ecn: None,
            contents: &payload,
            segment_size: Some(8972),
            src_ip: None,
        };
        let mut poller = socket.clone().create_io_poller();
        // As quinn does: wait until writable, send, and on `WouldBlock` wait again.
        loop {
            std::future::poll_fn(|cx| poller.as_mut().poll_writable(cx))
                .await
                .expect("writable");
            match socket.try_send(&batch) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                sent => break sent.expect("sent"),
            }
        }
        let mut buf = vec![0u8; 65_536];
        for i in 0..10u8 {
            let n = receiver.recv(&mut buf).expect("datagram arrives");
            assert_eq!(n, 8972, "datagram {i}");
            assert!(buf[..n].iter().all(|&b| b == i), "datagram {i} in order");
        }
    }
}
