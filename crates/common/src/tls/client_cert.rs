//! Client certificates: the server's verifier (against `--client-ca`) and the client's
//! certificate, presented when a server asks.

use std::path::Path;
use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, SignatureScheme};

use super::ca_dir::Trust;
use super::{load_certs, load_key, provider, ClientIdentity, TlsError};

/// Verify client certificates against the CAs in `ca`: a PEM file, or an OpenSSL hashed
/// directory whose CRLs are honoured (`ca_dir`). Clients without a certificate are let
/// through, as anonymous; a revoked one fails the handshake.
pub(crate) fn client_verifier(ca: &Path) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let trust = Trust::load(&[ca])?;
    let mut roots = RootCertStore::empty();
    for (path, cert) in trust.certs {
        roots.add(cert).map_err(|e| TlsError::BadCa {
            path,
            message: e.to_string(),
        })?;
    }
    let mut builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .allow_unauthenticated();
    if !trust.crls.is_empty() {
        builder = builder
            .with_crls(trust.crls)
            .allow_unknown_revocation_status();
    }
    builder.build().map_err(|e| TlsError::BadCa {
        path: ca.to_path_buf(),
        message: e.to_string(),
    })
}

/// Always the same certificate, whatever CAs the server names.
#[derive(Debug)]
struct OneCertificate(Arc<CertifiedKey>);

impl ResolvesClientCert for OneCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

pub(crate) fn resolver(id: &ClientIdentity) -> Result<Arc<dyn ResolvesClientCert>, TlsError> {
    let certs = load_certs(&id.cert)?;
    let key = load_key(&id.key)?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|source| TlsError::Rustls {
            context: format!("client key {}", id.key.display()),
            source,
        })?;
    Ok(Arc::new(OneCertificate(Arc::new(CertifiedKey::new(
        certs, signing,
    )))))
}
