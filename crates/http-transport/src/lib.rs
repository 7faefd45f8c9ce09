//! xfer-http
