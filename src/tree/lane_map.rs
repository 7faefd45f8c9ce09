//! A file's share of the tree's lanes: its download opens lanes `0..k`, which this adapter
//! maps onto the lane numbers the tree driver gave it, so files spread over the transport's
//! connections instead of all riding lane 0's.

use std::sync::Arc;

use xfer_core::transport::{
    BoxFuture, ConnectionStats, Lane, ListRequest, ListResponse, RemoteInfo, Transport,
};
use xfer_core::TransferError;

pub(super) struct LaneMap {
    pub inner: Arc<dyn Transport>,
    /// Lane numbers in the tree's budget; the download's lane `i` is `lanes[i]`.
    pub lanes: Vec<usize>,
}

impl Transport for LaneMap {
    fn stat(&self) -> BoxFuture<'_, Result<RemoteInfo, TransferError>> {
        self.inner.stat()
    }

    fn open_lane(&self, index: usize) -> BoxFuture<'_, Result<Box<dyn Lane>, TransferError>> {
        let mapped = self.lanes.get(index).copied().unwrap_or(index);
        self.inner.open_lane(mapped)
    }

    fn connection_stats(&self) -> Vec<ConnectionStats> {
        self.inner.connection_stats()
    }

    fn spread_report(&self) -> Option<xfer_core::progress::SpreadReport> {
        self.inner.spread_report()
    }

    fn protocol(&self) -> String {
        self.inner.protocol()
    }

    fn request_ahead(&self) -> Option<bool> {
        self.inner.request_ahead()
    }

    fn default_lanes(&self) -> usize {
        self.lanes.len()
    }

    fn list<'a>(
        &'a self,
        dir_url: &'a str,
        request: ListRequest,
    ) -> BoxFuture<'a, Result<ListResponse, TransferError>> {
        self.inner.list(dir_url, request)
    }

    fn checksum(
        &self,
        algorithm: xfer_core::checksum::ChecksumAlgorithm,
    ) -> BoxFuture<'_, Result<Option<xfer_core::checksum::Checksum>, TransferError>> {
        self.inner.checksum(algorithm)
    }

    fn sibling(&self, url: &str) -> Result<Arc<dyn Transport>, TransferError> {
        self.inner.sibling(url)
    }
}
