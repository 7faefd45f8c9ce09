//! The request core every xfer server shares: a decoded [`Request`] in, a [`ResponsePlan`]
//! out, and the [`BodyStream`] that produces the body.
//!
//! The codecs (HTTP/1.1 and HTTP/2 in `xfer-http`, `xfer/1` over QUIC in `xfer-quic`) only
//! translate: they decode their wire form into a [`Request`], call [`Service::respond`], and
//! encode the plan back. Every decision — which resource, which status, which range, which
//! validators and digests, whether the body is hashed, whether a fault is injected, whether
//! the digest is remembered — is made here once, so the servers cannot drift apart.
//!
//! ```text
//!  wire ──codec──▶ Request ──Service::respond──▶ ResponsePlan ──codec──▶ wire head
//!                                                   │
//!                                                   └ body: BodyStream ──pump──▶ wire body
//!                                                        │  reads blocks ahead on the blocking pool
//!                                                        │  hashes (large blocks on the blocking pool)
//!                                                        │  flips the test fault byte
//!                                                        └▶ Trailer(digest) ─▶ DigestCache
//!                                                           (whole resource, still the same)
//! ```
//!
//! What it does not do: sockets, framing, TLS, connection limits or timeouts (the codecs'
//! business), authentication (the [`Identity`] hook is there; only `Anonymous` exists).

mod body;
mod plan;
mod request;
mod respond;

pub use body::{BodyEvent, BodyStream};
pub use plan::{Body, ContentRange, ResponsePlan, CONTENT_TYPE_BYTES, CONTENT_TYPE_TEXT};
pub use request::{Identity, Method, Request};
pub use respond::{check_stream_options, status, Service, ServiceConfig};
