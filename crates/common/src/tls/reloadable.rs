//! A server certificate and client CAs replaced while the server runs: a renewed host
//! certificate (certbot, a grid CA's yearly renewal) or the day's CRLs (`fetch-crl`) need a
//! reload, not a restart that cuts every transfer.
//!
//! Every handshake asks [`ReloadableCert`] for the current certified key and
//! [`ReloadableClientVerifier`] for the current client verifier; their `reload` reads the files
//! again and swaps the new one in. Connections already up keep what they agreed; only new
//! handshakes see the new. Files that do not load (unreadable, not PEM, key of another
//! certificate, outside its validity period, no usable CA) leave the old in place: a
//! half-copied renewal must not take the server down.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::{client_cert, load_certs, load_key, provider, validity, TlsError};

/// An `Arc` replaced whole while readers keep the one they took. A poisoned lock still holds
/// a complete value (the writer only assigns), so it is used as is.
#[derive(Debug)]
struct Swap<T: ?Sized>(RwLock<Arc<T>>);

impl<T: ?Sized> Swap<T> {
    fn new(value: Arc<T>) -> Self {
        Self(RwLock::new(value))
    }

    fn load(&self) -> Arc<T> {
        match self.0.read() {
            Ok(c) => Arc::clone(&c),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    fn store(&self, value: Arc<T>) {
        match self.0.write() {
            Ok(mut c) => *c = value,
            Err(poisoned) => *poisoned.into_inner() = value,
        }
    }
}

/// The certificate chain and key of a server, read from PEM files and re-read on demand.
#[derive(Debug)]
pub struct ReloadableCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: Swap<CertifiedKey>,
}

impl ReloadableCert {
    /// Reads the chain in `cert` and the key in `key`, refusing a key of another certificate.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let loaded = certified_key(cert, key)?;
        Ok(Self {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            current: Swap::new(Arc::new(loaded)),
        })
    }

    /// Reads the files again and serves the new pair to new connections. On error the pair in
    /// use stays, and the error says which file is wrong; a pair that is valid now but not
    /// yet or no longer is refused too, since every client would refuse it.
    pub fn reload(&self) -> Result<(), TlsError> {
        let loaded = certified_key(&self.cert_path, &self.key_path)?;
        let leaf = loaded.cert.first().map(|c| c.as_ref()).unwrap_or_default();
        if let Some(v) = validity(leaf) {
            let now = UnixTime::now();
            if !v.contains(now) {
                return Err(TlsError::OutsideValidity {
                    path: self.cert_path.clone(),
                });
            }
        }
        self.current.store(Arc::new(loaded));
        Ok(())
    }

    /// The pair new handshakes get.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load()
    }

    /// The certificate file, for messages.
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Verifies client certificates against a CA file or hashed directory (with its CRLs), read
/// again by [`ReloadableClientVerifier::reload`].
#[derive(Debug)]
pub struct ReloadableClientVerifier {
    ca: PathBuf,
    current: Swap<dyn ClientCertVerifier>,
    /// The CA names sent in the certificate request, from the first load: rustls lends them
    /// out by reference, which a swapped verifier cannot. They only help a client choose a
    /// certificate; what is accepted is the current verifier's decision.
    hints: Vec<DistinguishedName>,
}

impl ReloadableClientVerifier {
    /// Reads the CAs (and CRLs) of `ca`, a PEM file or an OpenSSL hashed directory.
    pub fn load(ca: &Path) -> Result<Self, TlsError> {
        let verifier = client_cert::client_verifier(ca)?;
        Ok(Self {
            ca: ca.to_path_buf(),
            hints: verifier.root_hint_subjects().to_vec(),
            current: Swap::new(verifier),
        })
    }

    /// Reads the CAs and CRLs again; on error the ones in use stay.
    pub fn reload(&self) -> Result<(), TlsError> {
        self.current.store(client_cert::client_verifier(&self.ca)?);
        Ok(())
    }

    /// The CA file or directory, for messages.
    pub fn ca_path(&self) -> &Path {
        &self.ca
    }

    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        self.current.load()
    }
}

impl ClientCertVerifier for ReloadableClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.current().offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.current().client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = load_certs(cert)?;
    let key_der = load_key(key)?;
    CertifiedKey::from_der(chain, key_der, &provider()).map_err(|source| match source {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        },
        source => TlsError::Rustls {
            context: format!("certificate {} with key {}", cert.display(), key.display()),
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let out = dir.join(name);
        let made = crate::tls::self_signed(&["localhost".into()], &out).expect("certificate");
        (made.cert_path, made.key_path)
    }

    #[test]
    fn reload_swaps_a_good_pair_and_keeps_the_old_one_on_a_bad_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert, key) = pair(dir.path(), "a");
        let live = ReloadableCert::load(&cert, &key).expect("loads");
        let first = live.current().cert[0].clone();

        let (cert_b, key_b) = pair(dir.path(), "b");
        std::fs::copy(&cert_b, &cert).expect("renew cert");
        std::fs::copy(&key_b, &key).expect("renew key");
        live.reload().expect("reloads");
        let second = live.current().cert[0].clone();
        assert_ne!(first, second, "the renewed certificate is not served");

        // A renewal caught half-way: the new certificate with the old key.
        let (cert_c, _) = pair(dir.path(), "c");
        std::fs::copy(&cert_c, &cert).expect("half renew");
        let err = live.reload().expect_err("a key of another certificate");
        assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err}");
        std::fs::write(&cert, "not PEM").expect("garbage");
        let err = live.reload().expect_err("garbage");
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
        assert_eq!(
            live.current().cert[0],
            second,
            "a broken pair replaced the good one"
        );
    }
}
