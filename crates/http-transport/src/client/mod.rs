//! The HTTP/1.1 and HTTP/2 client transport: [`HttpTransport`] implements
//! [`xfer_core::transport::Transport`] on hyper's low-level connection API over our own tuned
//! TCP sockets (and rustls), so the number of connections and streams is exactly what the
//! configuration says.
//!
//! ```text
//!  HttpTransport ─open_first()─► GET Range: bytes=0-(chunk-1) (+ Want-Repr-Digest) ─► size,
//!       │                       ETag, Repr-Digest from 206/200, and the first chunk's body
//!       │                       └─ size unknown ─► stat()
//!       ├─stat()──► HEAD (+ Want-Repr-Digest) ─► size, ETag, Repr-Digest, ranges?
//!       │           └─ 405/501/no length ─► GET Range: bytes=0-0
//!       ├─list(dir)───► GET <dir>/?manifest | PROPFIND Depth: 1 | GET <dir>/ ─► ListingBody
//!       ├─sibling(url)─► another resource, the same connections (HTTP/2 slots, parked
//!       │                HTTP/1.1 connections)
//!       └─open_lane(i)─► HttpLane ─fetch()─► GET Range / If-Range / Want-Content-Digest
//!             HTTP/1.1: connection i (keep-alive, reconnect on failure); with request
//!                       ahead, its twin pipelines on it (pipeline/)
//!             HTTP/2:   stream slot on shared connection (i / K) mod M; with the default
//!                       layout, spread over more connections once loss is seen
//!                       (loss_spread.rs), from the start when the last transfer to
//!                       the peer saw it (path_memory.rs)
//!                                  └─► HttpRangeBody: Bytes as hyper yields them,
//!                                      exact length, Content-Digest trailer
//! ```
//!
//! Redirects (301/302/303/307/308, relative `Location` too) are followed by `stat` and by range
//! requests, up to [`HttpClientConfig::max_redirects`]. With
//! [`HttpClientConfig::address_policy`] every address a name resolves to is judged before a
//! connection goes to it, for redirects too (a server's third-party copies keep away from
//! internal addresses this way). `http://` with [`HttpVersion::Http2`]
//! is h2c with prior knowledge; `https://` negotiates by ALPN.
//!
//! Not here: proxies, cookies, authentication, content codings (`Accept-Encoding: identity` is
//! sent so ranges address stored bytes), HTTP/3.
//!
//! [`HttpVersion::Http2`]: crate::config::HttpVersion::Http2

mod body;
mod config;
mod connect;
mod early;
mod errors;
mod first;
mod lane;
mod listing;
mod loss_spread;
mod path_memory;
pub(crate) mod pipeline;
mod req_body;
mod response;
mod stats;
mod target;
mod transport;
mod upload;
mod window;

pub use config::{AddressPolicy, ConnectionWatch, HttpClientConfig};
pub use connect::h2_builder as h2_client_builder;
pub use transport::HttpTransport;
pub use xfer_common::tls::ClientTlsOptions;
