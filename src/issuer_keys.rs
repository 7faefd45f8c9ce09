//! The HTTPS client behind the request core's [`HttpsGet`]: it fetches issuers' discovery
//! documents and key sets for JWT validation. One `GET` over HTTP/1.1 on a fresh
//! connection, the certificate verified against the issuer's `ca_file` (else the Mozilla
//! roots), within a deadline and a body cap; no redirects, no cookies, no credentials.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio_rustls::rustls::pki_types::ServerName;
use xfer_common::tls::{client_config, ClientTlsOptions};
use xfer_service::HttpsGet;

/// Fetches issuer documents for [`xfer_service::AccessControl::with_key_source`].
#[derive(Debug, Default, Clone, Copy)]
pub struct IssuerKeyFetcher;

impl HttpsGet for IssuerKeyFetcher {
    fn get<'a>(
        &'a self,
        url: &'a str,
        ca_file: Option<&'a Path>,
        limit: usize,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send + 'a>> {
        Box::pin(async move {
            tokio::time::timeout(timeout, get(url, ca_file, limit))
                .await
                .map_err(|_| format!("no answer within {timeout:?}"))?
        })
    }
}

/// Ends the connection's driver task when the fetch ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn get(url: &str, ca_file: Option<&Path>, limit: usize) -> Result<Vec<u8>, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("not an https URL".into());
    }
    let (Some(authority), Some(host)) = (uri.authority(), uri.host()) else {
        return Err("no host in the URL".into());
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let opts = ClientTlsOptions {
        ca_certs: ca_file.map(|p| vec![p.to_path_buf()]).unwrap_or_default(),
        ..ClientTlsOptions::default()
    };
    let tls = client_config(&opts, &[b"http/1.1"]).map_err(|e| e.to_string())?;
    let name = ServerName::try_from(host.clone()).map_err(|e| format!("host {host}: {e}"))?;
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let _ = conn.await;
    }));
    let request = http::Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(http::header::HOST, authority.as_str())
        .header(http::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    if response.status() != http::StatusCode::OK {
        return Err(format!("status {}", response.status()));
    }
    let body = Limited::new(response.into_body(), limit)
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?;
    Ok(body.to_bytes().to_vec())
}
