//! Client transport against real loopback servers: a scripted hyper server that can misbehave
//! on demand, and the xfer HTTP server itself.

mod support;

mod basics;
mod early_data;
mod failures;
mod pipelining;
mod startup;
mod tls;
mod xfer_server;

use std::time::Duration;

use xfer_core::transport::{Lane, RangeBody, RangeRequest, RemoteInfo};
use xfer_core::TransferError;
use xfer_http::{HttpClientConfig, HttpVersion};

/// A client config for loopback tests: short timeouts so failures show quickly.
pub fn client_cfg(version: HttpVersion) -> HttpClientConfig {
    HttpClientConfig {
        version,
        connect_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(10),
        ..HttpClientConfig::default()
    }
}

pub fn range_req(info: &RemoteInfo, range: std::ops::Range<u64>) -> RangeRequest {
    RangeRequest {
        range,
        expected_size: info.size,
        want_digest: true,
        validator: info.range_validator().map(str::to_string),
        whole: false,
    }
}

/// Pull a body to its end.
pub async fn read_all(body: &mut (dyn RangeBody + '_)) -> Result<Vec<u8>, TransferError> {
    let mut out = Vec::new();
    while let Some(chunk) = body.next_data().await? {
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Fetch `req` on `lane` and return the bytes and the trailer digest.
pub async fn fetch(
    lane: &mut dyn Lane,
    req: &RangeRequest,
) -> Result<(Vec<u8>, Option<xfer_core::Sha256Digest>), TransferError> {
    let mut body = lane.fetch(req).await?;
    let bytes = read_all(body.as_mut()).await?;
    Ok((bytes, body.trailer_digest()))
}
