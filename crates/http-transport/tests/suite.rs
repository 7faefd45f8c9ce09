//! The crate's integration tests, one binary: each module was a test file of its own, and
//! linking one binary instead of several is most of what a clean test build costs.

#[path = "admission.rs"]
mod admission;
#[path = "client_nginx.rs"]
mod client_nginx;
#[path = "client_suite/main.rs"]
mod client_suite;
#[path = "h2_wire.rs"]
mod h2_wire;
#[path = "loopback.rs"]
mod loopback;
#[path = "server_http.rs"]
mod server_http;
#[path = "server_perf.rs"]
mod server_perf;
#[path = "stall.rs"]
mod stall;
#[path = "tcp_resume.rs"]
mod tcp_resume;
