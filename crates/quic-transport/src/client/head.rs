//! Reading a response head off a request's stream.

use std::time::Duration;

use quinn::{ReadError, ReadExactError, RecvStream};
use xfer_core::TransferError;

use crate::wire::ResponseHead;

use super::errors::*;

/// Why an exchange failed: the server refused the early data it was sent in, or anything else.
pub(super) enum Exchange {
    Rejected,
    Failed(TransferError),
}

pub(super) enum HeadError {
    Rejected,
    Failed(TransferError),
}

pub(super) async fn read_head(
    peer: &str,
    recv: &mut RecvStream,
    idle: Duration,
) -> Result<ResponseHead, HeadError> {
    let fail = |e: ReadExactError| match e {
        ReadExactError::ReadError(ReadError::ZeroRttRejected) => HeadError::Rejected,
        e => HeadError::Failed(read_exact_error(peer, e, "response head", idle)),
    };
    let mut prefix = [0u8; 2];
    recv.read_exact(&mut prefix).await.map_err(fail)?;
    let len =
        ResponseHead::decode_len(prefix).map_err(|e| HeadError::Failed(protocol(peer, &e)))?;
    let mut buf = vec![0u8; len];
    recv.read_exact(&mut buf).await.map_err(fail)?;
    ResponseHead::decode(&buf).map_err(|e| HeadError::Failed(protocol(peer, &e)))
}
