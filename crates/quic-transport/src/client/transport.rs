//! [`Transport`] for [`QuicTransport`]: stat, lanes, listings and close.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use xfer_core::checksum::{Checksum, ChecksumAlgorithm};
use xfer_core::transport::{
    BoxFuture, ConnectionStats, FirstRequest, Lane, ListRequest, ListResponse, Opened, RemoteInfo,
    Speculated, Transport,
};
use xfer_core::TransferError;

use crate::wire::status;

use super::*;

impl Transport for QuicTransport {
    fn stat(&self) -> BoxFuture<'_, Result<RemoteInfo, TransferError>> {
        Box::pin(async move {
            let inner = &self.inner;
            let req = inner.stat_request(Vec::new());
            let (head, _recv) = inner.exchange(0, &req).await?;
            if head.status != status::OK {
                return Err(inner.status_error(&head, format!("STAT {}", req.path)));
            }
            Ok(inner.remote_info(&head))
        })
    }

    fn checksum(
        &self,
        algorithm: ChecksumAlgorithm,
    ) -> BoxFuture<'_, Result<Option<Checksum>, TransferError>> {
        Box::pin(async move {
            let inner = &self.inner;
            // A server that predates CHECKSUMS resets the stream as malformed: an error, not a
            // silent "no checksum".
            let req = inner.stat_request(vec![algorithm]);
            let (head, _recv) = inner.exchange(0, &req).await?;
            if head.status != status::OK {
                return Err(
                    inner.status_error(&head, format!("STAT {} (checksum {algorithm})", req.path))
                );
            }
            Ok(head
                .checksums
                .into_iter()
                .find(|c| c.algorithm == algorithm))
        })
    }

    fn open_first(
        &self,
        index: usize,
        first: FirstRequest,
    ) -> BoxFuture<'_, Result<Opened, TransferError>> {
        Box::pin(self.open_with_first_range(index, first))
    }

    fn open_speculative(
        &self,
        index: usize,
        range: Range<u64>,
        want_digest: bool,
    ) -> BoxFuture<'_, Result<Speculated, TransferError>> {
        Box::pin(self.open_speculative_range(index, range, want_digest))
    }

    fn open_lane(&self, index: usize) -> BoxFuture<'_, Result<Box<dyn Lane>, TransferError>> {
        Box::pin(async move {
            let layout = self.inner.config.layout();
            let conn = layout.connection_of(index);
            let created = Instant::now();
            // Connect now so a bad certificate or unreachable server shows at lane set-up.
            self.inner.connection(conn).await?;
            Ok(Box::new(QuicLane {
                inner: self.inner.clone(),
                conn,
                slot: layout.slot_of(index),
                created,
                first: None,
            }) as Box<dyn Lane>)
        })
    }

    fn connection_stats(&self) -> Vec<ConnectionStats> {
        let congestion = self.inner.config.tuning.congestion.name().to_string();
        self.inner
            .slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                let live = slot.live.lock().ok()?.clone()?;
                let c = &live.connection;
                let s = c.stats();
                Some(ConnectionStats {
                    index,
                    peer: c.remote_address().to_string(),
                    congestion: Some(congestion.clone()),
                    rtt_us: Some(u64::try_from(c.rtt().as_micros()).unwrap_or(u64::MAX)),
                    cwnd_bytes: Some(s.path.cwnd),
                    retransmits: Some(s.path.lost_packets),
                    // quinn counts what this end sent and lost, not what it received out
                    // of order.
                    out_of_order_packets: None,
                    congestion_events: Some(s.path.congestion_events),
                    bytes_received: Some(s.udp_rx.bytes),
                    send_buffer: Some(live.buffers.send as u64),
                    recv_buffer: Some(live.buffers.recv as u64),
                    datagrams_received: Some(s.udp_rx.datagrams),
                    acks_sent: Some(s.frame_tx.acks),
                })
            })
            .collect()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let closing: Vec<Closing> = self.inner.slots.iter().filter_map(Slot::close).collect();
            // The CONNECTION_CLOSE leaves when the endpoint's driver next runs: within a
            // millisecond or so, but not before the process exits unless something waits.
            // quinn tells nobody when it has sent it (`Endpoint::wait_idle` waits for the
            // connection to drain, 3 PTOs, most of a second on a long path), so its datagram
            // counter is watched, for a bounded time.
            let deadline = Instant::now() + CLOSE_GRACE;
            while !closing.iter().all(Closing::sent) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    }

    fn protocol(&self) -> String {
        "quic".to_string()
    }

    fn request_ahead(&self) -> Option<bool> {
        let t = &self.inner.config.tuning;
        let lanes = self.inner.config.layout().streams_per_connection as u64;
        (t.connection_receive_window >= 2 * lanes * t.stream_receive_window).then_some(true)
    }

    fn default_lanes(&self) -> usize {
        self.inner.config.layout().count()
    }

    fn list<'a>(
        &'a self,
        dir_url: &'a str,
        request: ListRequest,
    ) -> BoxFuture<'a, Result<ListResponse, TransferError>> {
        Box::pin(async move {
            match request {
                ListRequest::Manifest => self.list_manifest(dir_url).await,
                // xfer/1 has one listing; a QUIC server is xfer's.
                ListRequest::Propfind | ListRequest::Index => Err(TransferError::Config(format!(
                    "xfer/1 lists {dir_url} with LIST only"
                ))),
            }
        })
    }

    fn sibling(&self, url: &str) -> Result<Arc<dyn Transport>, TransferError> {
        Ok(Arc::new(QuicTransport::sibling(self, url)?))
    }
}
