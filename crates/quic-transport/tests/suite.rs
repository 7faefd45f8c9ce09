//! The crate's integration tests, one binary: each module was a test file of its own, and
//! linking one binary instead of several is most of what a clean test build costs.

#[path = "careful_resume.rs"]
mod careful_resume;
#[path = "quic.rs"]
mod quic;
