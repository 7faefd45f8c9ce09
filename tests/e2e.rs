//! The end-to-end suite: real servers and clients on loopback, real TLS, real files.
//!
//! One test binary (modules under `tests/e2e/`) keeps link time low. Most cases run once per
//! transport (HTTP/1.1 over TLS, HTTP/2 over TLS, h2c, QUIC) through the `each_transport!`
//! macro, with the servers in-process on port 0. Cases that check the command line run the
//! `xfer` binary built by `cargo build -p xfer-cli`; interop cases run nginx, curl, davix-ls
//! and rclone as child processes and skip when they are missing, except under `CI=true`.
//!
//! Kill-and-resume through the real binary lives in `crates/cli/tests/resume.rs`, where Cargo
//! hands the test the binary's path.

#[path = "e2e/support.rs"]
mod support;

#[path = "e2e/transfer.rs"]
mod transfer;

#[path = "e2e/corruption.rs"]
mod corruption;

#[path = "e2e/rejection.rs"]
mod rejection;

#[path = "e2e/cli.rs"]
mod cli;

#[path = "e2e/interop.rs"]
mod interop;

#[path = "e2e/disk_full.rs"]
mod disk_full;

#[path = "e2e/identity.rs"]
mod identity;

#[path = "e2e/tiny_server.rs"]
mod tiny_server;

#[path = "e2e/hostile_server.rs"]
mod hostile_server;

#[path = "e2e/verification.rs"]
mod verification;

#[path = "e2e/faults.rs"]
mod faults;

#[path = "e2e/tree.rs"]
mod tree;

#[path = "e2e/listing_limits.rs"]
mod listing_limits;

#[path = "e2e/html_index.rs"]
mod html_index;

#[path = "e2e/staging.rs"]
mod staging;
#[path = "e2e/tree_sync.rs"]
mod tree_sync;

#[path = "e2e/access.rs"]
mod access;

#[path = "e2e/gfal_tokens.rs"]
mod gfal_tokens;
#[path = "../crates/service/tests/token_table.rs"]
mod token_table;
#[path = "e2e/tokens.rs"]
mod tokens;
#[path = "e2e/xrootd_tokens.rs"]
mod xrootd_tokens;

#[path = "e2e/upload.rs"]
mod upload;

#[path = "e2e/put_tree.rs"]
mod put_tree;

#[path = "e2e/fair_shares.rs"]
mod fair_shares;
#[path = "e2e/memory.rs"]
mod memory;
#[path = "e2e/multi_source.rs"]
mod multi_source;

#[path = "e2e/adaptive.rs"]
mod adaptive;
#[path = "e2e/package.rs"]
mod package;
#[path = "e2e/resumable.rs"]
mod resumable;
#[path = "e2e/tpc.rs"]
mod tpc;
#[path = "e2e/tpc_tokens.rs"]
mod tpc_tokens;

#[path = "e2e/tpc_push.rs"]
mod tpc_push;

#[path = "e2e/dav_ops.rs"]
mod dav_ops;
#[path = "e2e/tpc_policy.rs"]
mod tpc_policy;
#[path = "e2e/wlcg.rs"]
mod wlcg;

#[path = "e2e/load.rs"]
mod load;

#[path = "e2e/ca_dir.rs"]
mod ca_dir;
#[path = "e2e/cert_reload.rs"]
mod cert_reload;
#[path = "e2e/monitoring.rs"]
mod monitoring;

#[path = "examples.rs"]
mod examples;
#[path = "guide.rs"]
mod guide;
#[path = "parity.rs"]
mod parity;

#[path = "e2e/limit_rate.rs"]
mod limit_rate;
