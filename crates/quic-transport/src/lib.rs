//! xfer-quic
