//! xfer
