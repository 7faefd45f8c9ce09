//! The crate's integration tests, one binary: each module was a test file of its own, and
//! linking one binary instead of several is most of what a clean test build costs.

#[path = "access.rs"]
mod access;
#[path = "dav_write.rs"]
mod dav_write;
#[path = "decisions.rs"]
mod decisions;
#[path = "imports.rs"]
mod imports;
#[path = "listing.rs"]
mod listing;
#[path = "no_replace.rs"]
mod no_replace;
#[path = "resumable.rs"]
mod resumable;
#[path = "token_table.rs"]
mod token_table;
#[path = "tokens.rs"]
mod tokens;
#[path = "tpc.rs"]
mod tpc;
#[path = "upload.rs"]
mod upload;
