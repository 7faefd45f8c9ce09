//! Trust anchors from PEM files or from OpenSSL hashed directories, with their CRLs.
//!
//! A grid site keeps its CAs the way OpenSSL looks them up: `/etc/grid-security/certificates`
//! holds `<hash>.0` (one CA certificate each, PEM; `.1`, `.2` on hash collisions) and
//! `<hash>.r0` (that CA's CRL, refreshed by `fetch-crl`), beside `.pem`, `.signing_policy`,
//! `.namespaces` and `.info` files that name the same CAs or are not certificates. Only the
//! hashed names are read, so each CA is loaded once; the hash itself is not recomputed (all
//! anchors go into one store, so which name a certificate has does not matter).
//!
//! Hostile-input stance: the directory is the operator's, but a broken entry in a bundle of a
//! hundred CAs must not take the server down: an unreadable or unparsable certificate or CRL
//! is skipped with a warning naming it, and a directory with no usable CA is refused.
//! A CA whose CRL is missing or skipped is not checked for revocation (rustls's
//! `allow_unknown_revocation_status`); a CA with a CRL is checked, through the whole chain.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer};

use super::{load_certs, TlsError};

/// CA certificates and the CRLs found beside them.
#[derive(Debug, Default)]
pub(crate) struct Trust {
    /// Each certificate with the file it came from, for messages.
    pub certs: Vec<(PathBuf, CertificateDer<'static>)>,
    pub crls: Vec<CertificateRevocationListDer<'static>>,
}

impl Trust {
    /// Reads each of `paths`: a directory as a hashed directory, anything else as a PEM file
    /// of certificates (every one of which must parse).
    pub(crate) fn load(paths: &[&Path]) -> Result<Self, TlsError> {
        let mut trust = Self::default();
        for path in paths {
            if path.is_dir() {
                trust.load_dir(path)?;
            } else {
                for cert in load_certs(path)? {
                    trust.certs.push((path.to_path_buf(), cert));
                }
            }
        }
        Ok(trust)
    }

    fn load_dir(&mut self, dir: &Path) -> Result<(), TlsError> {
        let read_err = |source| TlsError::Read {
            path: dir.to_path_buf(),
            source,
        };
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        // Sorted, so that the store (and any message) does not depend on directory order.
        names.sort();
        let before = self.certs.len();
        for path in names {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            match hashed_kind(name) {
                Some(Kind::Certificate) => match load_certs(&path) {
                    Ok(certs) => self
                        .certs
                        .extend(certs.into_iter().map(|c| (path.clone(), c))),
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %e, "CA certificate skipped")
                    }
                },
                Some(Kind::Crl) => match load_crls(&path) {
                    Ok(crls) => self.crls.extend(crls),
                    Err(why) => {
                        tracing::warn!(file = %path.display(), error = %why, "CRL skipped: its CA's certificates are not checked for revocation")
                    }
                },
                None => {}
            }
        }
        if self.certs.len() == before {
            return Err(TlsError::BadCa {
                path: dir.to_path_buf(),
                message: "no CA certificate in it (OpenSSL hashed names: <hash>.0)".into(),
            });
        }
        Ok(())
    }
}

enum Kind {
    Certificate,
    Crl,
}

/// `5f7a3b1c.0` is a certificate, `5f7a3b1c.r0` a CRL; anything else is neither.
fn hashed_kind(name: &str) -> Option<Kind> {
    let (hash, suffix) = name.split_once('.')?;
    if hash.len() != 8 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(suffix) {
        return Some(Kind::Certificate);
    }
    suffix
        .strip_prefix('r')
        .filter(|d| digits(d))
        .map(|_| Kind::Crl)
}

/// The CRLs of a file: PEM (`-----BEGIN X509 CRL-----`), or one DER CRL.
fn load_crls(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let pem: Vec<_> = CertificateRevocationListDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if !pem.is_empty() {
        return Ok(pem);
    }
    // DER starts with a SEQUENCE; anything else is not a CRL at all.
    if bytes.first() == Some(&0x30) {
        return Ok(vec![CertificateRevocationListDer::from(bytes)]);
    }
    Err("neither a PEM nor a DER CRL".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hashed_names_count() {
        assert!(matches!(hashed_kind("5f7a3b1c.0"), Some(Kind::Certificate)));
        assert!(matches!(
            hashed_kind("5F7A3B1C.12"),
            Some(Kind::Certificate)
        ));
        assert!(matches!(hashed_kind("5f7a3b1c.r0"), Some(Kind::Crl)));
        for other in [
            "5f7a3b1c.pem",
            "5f7a3b1c.signing_policy",
            "CERN-Root.pem",
            "5f7a3b1.0",
            "5f7a3b1c.r",
            "5f7a3b1c.",
            "zzzzzzzz.0",
        ] {
            assert!(hashed_kind(other).is_none(), "{other}");
        }
    }

    #[test]
    fn a_directory_without_a_ca_is_refused_and_broken_entries_are_skipped() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("0badc0de.0"), "not PEM").expect("write");
        std::fs::write(dir.path().join("0badc0de.r0"), "not a CRL").expect("write");
        let err = Trust::load(&[dir.path()]).expect_err("no usable CA");
        assert!(
            err.to_string().contains(&dir.path().display().to_string()),
            "{err}"
        );

        let made = crate::tls::self_signed(&["ca.example".into()], &dir.path().join("gen"))
            .expect("certificate");
        std::fs::copy(&made.cert_path, dir.path().join("1234abcd.0")).expect("copy");
        let trust = Trust::load(&[dir.path()]).expect("one usable CA");
        assert_eq!(trust.certs.len(), 1);
        assert!(trust.crls.is_empty());
    }
}
