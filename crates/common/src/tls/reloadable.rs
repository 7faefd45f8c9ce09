//! A server certificate replaced while the server runs: a renewed host certificate (certbot,
//! a grid CA's yearly renewal) needs a reload, not a restart that cuts every transfer.
//!
//! Every handshake asks [`ReloadableCert`] for the current certified key; [`ReloadableCert::reload`]
//! reads the files again and swaps it in. Connections already up keep the key they agreed;
//! only new handshakes see the new one. A new pair that does not load (unreadable, not PEM,
//! key of another certificate, outside its validity period) leaves the old one in place: a
//! half-copied renewal must not take the server down.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::UnixTime;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::{load_certs, load_key, provider, validity, TlsError};

/// The certificate chain and key of a server, read from PEM files and re-read on demand.
#[derive(Debug)]
pub struct ReloadableCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadableCert {
    /// Reads the chain in `cert` and the key in `key`, refusing a key of another certificate.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let loaded = certified_key(cert, key)?;
        Ok(Self {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            current: RwLock::new(Arc::new(loaded)),
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
        let loaded = Arc::new(loaded);
        match self.current.write() {
            Ok(mut c) => *c = loaded,
            Err(poisoned) => *poisoned.into_inner() = loaded,
        }
        Ok(())
    }

    /// The pair new handshakes get.
    pub fn current(&self) -> Arc<CertifiedKey> {
        match self.current.read() {
            Ok(c) => Arc::clone(&c),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
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
