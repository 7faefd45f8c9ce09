//! The crate's integration tests, one binary: each module was a test file of its own, and
//! linking one binary instead of several is most of what a clean test build costs.

#[path = "competitor.rs"]
mod competitor;
#[path = "held_out.rs"]
mod held_out;
#[path = "lab.rs"]
mod lab;
#[path = "scenario_server_args.rs"]
mod scenario_server_args;
#[path = "support/sys.rs"]
#[allow(unsafe_code)]
mod sys;
