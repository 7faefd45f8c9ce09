//! The TLS material `xfer serve` replaces without a restart: its certificate and key, and the
//! CAs and CRLs it checks client certificates against. SIGHUP reads them again, as it does
//! the access file (`AccessControl::spawn_reloader`).

use std::future::Future;
use std::sync::Arc;

use tokio::signal::unix::Signal;
use xfer_common::tls::{ReloadableCert, ReloadableClientVerifier, TlsError};

/// What a reload replaces, shared with every listener's TLS configuration.
#[derive(Debug, Clone)]
pub struct LiveTls {
    /// The certificate HTTP and QUIC present.
    pub cert: Arc<ReloadableCert>,
    /// The client-certificate CAs (and CRLs), when clients are asked for one.
    pub clients: Option<Arc<ReloadableClientVerifier>>,
}

impl LiveTls {
    /// Reads the certificate and key, and the client CAs and CRLs, again. A part that does
    /// not load keeps the one in use; the log says why, and the errors are returned.
    pub fn reload(&self) -> Vec<TlsError> {
        let mut failed = Vec::new();
        match self.cert.reload() {
            Ok(()) => tracing::info!(
                cert = %self.cert.cert_path().display(),
                "TLS certificate reloaded"
            ),
            Err(e) => {
                tracing::error!(
                    error = %xfer_core::error::error_chain(&e),
                    "TLS certificate not reloaded; the previous one stays in use"
                );
                failed.push(e);
            }
        }
        if let Some(clients) = &self.clients {
            match clients.reload() {
                Ok(()) => tracing::info!(
                    ca = %clients.ca_path().display(),
                    "client CAs and CRLs reloaded"
                ),
                Err(e) => {
                    tracing::error!(
                        error = %xfer_core::error::error_chain(&e),
                        "client CAs not reloaded; the previous ones stay in use"
                    );
                    failed.push(e);
                }
            }
        }
        failed
    }

    /// Reloads on every SIGHUP until `stop` completes.
    pub(super) async fn reload_on_hangup(self, mut hup: Signal, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                got = hup.recv() => if got.is_none() { return },
            }
            self.reload();
        }
    }
}
