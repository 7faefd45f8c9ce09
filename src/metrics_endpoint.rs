//! `GET /metrics` on its own listen address (`xfer serve --metrics-listen`): the Prometheus
//! text exposition of [`xfer_common::metrics`].
//!
//! Plain HTTP/1.1 and nothing else: a scraper on a management network or loopback, apart from
//! the data port so that its access rules and its load never mix with transfers'.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The exposition's media type (Prometheus text format 0.0.4).
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A bound metrics listener.
pub(crate) struct MetricsEndpoint {
    listener: TcpListener,
}

impl MetricsEndpoint {
    pub async fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot listen for metrics on {addr}: {e}"),
            )
        })?;
        Ok(Self { listener })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Answer scrapes until `stop` turns true.
    pub async fn serve(self, mut stop: watch::Receiver<bool>) {
        loop {
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                _ = stop.wait_for(|s| *s) => return,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!(error = %e, "metrics accept failed");
                    continue;
                }
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|req| async move { answer(&req) });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(%peer, error = %e, "metrics connection failed");
                }
            });
        }
    }
}

fn answer<B>(req: &Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, content_type, body) = match (req.method().as_str(), req.uri().path()) {
        ("GET" | "HEAD", "/metrics") => (
            StatusCode::OK,
            CONTENT_TYPE,
            Bytes::from(xfer_common::metrics::global().render()),
        ),
        ("GET" | "HEAD", _) => (
            StatusCode::NOT_FOUND,
            "text/plain",
            Bytes::from_static(b"metrics are at /metrics\n"),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            Bytes::from_static(b"only GET\n"),
        ),
    };
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    Ok(r)
}
