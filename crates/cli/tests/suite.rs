//! The crate's integration tests, one binary: each module was a test file of its own, and
//! linking one binary instead of several is most of what a clean test build costs.

#[path = "bench.rs"]
mod bench;
#[path = "completions.rs"]
mod completions;
#[path = "docs_defaults.rs"]
mod docs_defaults;
#[path = "doctor.rs"]
mod doctor;
#[path = "doctor_lab.rs"]
mod doctor_lab;
#[path = "lab_h2_loss.rs"]
mod lab_h2_loss;
#[path = "lab_scenario.rs"]
mod lab_scenario;
#[path = "lab_startup_rtt.rs"]
mod lab_startup_rtt;
#[path = "lab_support/mod.rs"]
mod lab_support;
#[path = "lab_tcp_resume.rs"]
mod lab_tcp_resume;
#[path = "lab_tree.rs"]
mod lab_tree;
#[path = "output.rs"]
mod output;
#[path = "resume.rs"]
mod resume;
#[path = "safe_defaults.rs"]
mod safe_defaults;
#[path = "serve_config.rs"]
mod serve_config;
#[path = "serve_reload.rs"]
mod serve_reload;
#[path = "serve_signal.rs"]
mod serve_signal;
