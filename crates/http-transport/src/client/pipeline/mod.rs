//! HTTP/1.1 pipelining for range requests, which hyper's client does not do: each lane sends
//! its next request before the current body ends, on the same connection, so the connection
//! never idles a round trip between chunks (at 200 ms and ~120 Mbit/s per lane, a 16 MiB chunk
//! takes ~1.1 s: one idle round trip per chunk is 15% of the lane's time).
//!
//! A lane's connection starts as a hyper connection (the first request, with its redirects,
//! is hyper's); [`PipedLane`] takes its stream over once hyper has read the last response,
//! and from then on writes request heads and reads answers itself (`wire.rs`), strictly in
//! order (`conn.rs`). Anything unusual gives the connection up and sends the requests behind
//! again on a fresh one: a redirect (followed by a plain lane), an error status, a body
//! abandoned part-way, the server closing. A server that drops pipelined requests three times
//! (closing without `Connection: close`, or never answering them) is served one request at a
//! time from then on.

mod body;
mod conn;
#[doc(hidden)]
pub mod fuzzing;
mod lane;
mod wire;

pub(crate) use lane::PipedLane;
