//! xfer-lab: a user-space long-RTT link emulator for testing and benchmarking xfer.
//!
//! A [`Lab`] creates two network namespaces, `<prefix>-srv` and `<prefix>-cli`, each holding one
//! TUN device, and relays packets between the two devices from the initial namespace, applying
//! per direction: a rate limit (serialization at the bottleneck), a drop-tail queue in bytes,
//! random loss, one-way propagation delay (`rtt / 2`) and optional jitter that never reorders.
//! Host TCP settings inside the namespaces come from a [`HostProfile`].
//!
//! ```text
//!   <prefix>-srv                      initial namespace                     <prefix>-cli
//!  10.77.0.1 xlab0 <==TUN fd==> [relay: s2c link model] ==TUN fd==> xlab0 10.77.0.2
//!                  <==========  [relay: c2s link model] <==========
//! ```
//!
//! What it does not do: reordering, duplication, corruption, time-varying rates or loss
//! bursts (Gilbert-Elliott); IPv6 between the hosts; emulating more than one path. It needs
//! root (namespaces and TUN devices) and never routes anywhere but between its two namespaces.
//! The kernel's `netem` is not used (not every kernel has it).
//!
//! Key types: [`LabConfig`], [`LinkConfig`], [`HostProfile`], [`Lab`], [`RelayStats`]; the
//! [`scenario`] module runs whole measurement matrices through labs (`xfer lab run`).
//!
//! ```no_run
//! use std::time::Duration;
//! use xfer_lab::{Lab, LabConfig, LinkConfig};
//!
//! let lab = Lab::start(LabConfig::new("demo", LinkConfig::new(100_000_000, Duration::from_millis(20))))?;
//! let out = lab.command_in_client("ping").args(["-c", "3", &lab.server_addr().to_string()]).output();
//! println!("{:?}", lab.relay_stats());
//! # Ok::<(), xfer_lab::LabError>(())
//! ```
#![deny(unsafe_code)]

mod config;
mod error;
mod lab;
mod netns;
mod relay;
mod rng;
pub mod scenario;
#[allow(unsafe_code)]
mod sys;

pub use config::{HostProfile, LabConfig, LinkConfig, LINK_MTU};
pub use error::LabError;
pub use lab::{
    check_prerequisites, cleanup, Lab, SettingsInForce, CLIENT_ADDR, DEVICE, SERVER_ADDR,
};
pub use relay::stats::{DirectionStats, RelayStats};
