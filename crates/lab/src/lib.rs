//! xfer-lab
