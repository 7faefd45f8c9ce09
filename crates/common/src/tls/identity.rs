//! The server's own certificate for `--self-signed`, kept in a directory across restarts.
//!
//! Clients are told to trust the certificate in `--cert-dir` once; a new one at every start
//! would break them all, and with them any transfer running across a restart. So the
//! certificate and key already there are used as long as they are usable, and replaced only
//! when they are missing, unreadable, mismatched, outside their validity period, do not name
//! what the server must answer to, or when the operator asks for a new one.

use std::net::IpAddr;
use std::path::Path;

use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;

use super::validity::validity;
use super::{fingerprint, load_certs, self_signed, server_config, SelfSigned, TlsError};

/// Where the certificate in use came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertOrigin {
    /// The certificate already in the directory.
    Reused,
    /// A new certificate, and why the old one (if any) was not used.
    Generated { reason: String },
}

/// The certificate in `dir` if it is usable for `names` now, else a new one written there.
/// With `renew`, always a new one.
pub fn reuse_or_generate_self_signed(
    names: &[String],
    dir: &Path,
    renew: bool,
) -> Result<(SelfSigned, CertOrigin), TlsError> {
    let reason = if renew {
        "a new certificate was asked for".to_string()
    } else {
        match reusable(names, dir, UnixTime::now()) {
            Ok(found) => return Ok((found, CertOrigin::Reused)),
            Err(reason) => reason,
        }
    };
    let made = self_signed(names, dir)?;
    Ok((made, CertOrigin::Generated { reason }))
}

/// The certificate and key in `dir`, or why they cannot be used.
fn reusable(names: &[String], dir: &Path, now: UnixTime) -> Result<SelfSigned, String> {
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    if !cert_path.exists() && !key_path.exists() {
        return Err(format!("there was none in {}", dir.display()));
    }
    // Also proves the key belongs to the certificate.
    server_config(&cert_path, &key_path, &[]).map_err(|e| format!("{e}"))?;
    let certs = load_certs(&cert_path).map_err(|e| e.to_string())?;
    let leaf: &CertificateDer<'_> = certs
        .first()
        .ok_or_else(|| format!("{} holds no certificate", cert_path.display()))?;
    let period = validity(leaf)
        .ok_or_else(|| format!("{} has no readable validity period", cert_path.display()))?;
    if !period.contains(now) {
        return Err(format!(
            "{} is valid only from {} to {} (Unix seconds), not now",
            cert_path.display(),
            period.not_before.as_secs(),
            period.not_after.as_secs()
        ));
    }
    let parsed = ParsedCertificate::try_from(leaf).map_err(|e| e.to_string())?;
    for name in names {
        let Ok(server_name) = ServerName::try_from(name.as_str()) else {
            continue;
        };
        if rustls::client::verify_server_name(&parsed, &server_name).is_err() {
            return Err(format!("{} does not name {name}", cert_path.display()));
        }
    }
    Ok(SelfSigned {
        sha256_fingerprint: fingerprint(leaf),
        cert_path,
        key_path,
    })
}

/// The names a generated certificate carries by default: `localhost`, `127.0.0.1`, `::1`,
/// this host's name, and each listen address that is not a wildcard.
pub fn default_cert_names(listen: &[IpAddr]) -> Vec<String> {
    let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut add = |name: String| {
        if !name.is_empty() && !names.contains(&name) && ServerName::try_from(name.as_str()).is_ok()
        {
            names.push(name);
        }
    };
    if let Some(host) = host_name() {
        add(host);
    }
    for ip in listen {
        if !ip.is_unspecified() {
            add(ip.to_string());
        }
    }
    names
}

/// This host's name as `gethostname(2)` gives it, lower-cased.
pub fn host_name() -> Option<String> {
    let name = crate::sys::host_name()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["localhost".into(), "127.0.0.1".into()]
    }

    fn read(path: &Path) -> Vec<u8> {
        std::fs::read(path).expect("read")
    }

    #[test]
    fn a_second_start_reuses_the_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (first, origin) =
            reuse_or_generate_self_signed(&names(), dir.path(), false).expect("first");
        assert!(matches!(origin, CertOrigin::Generated { .. }), "{origin:?}");
        let cert = read(&first.cert_path);
        let (second, origin) =
            reuse_or_generate_self_signed(&names(), dir.path(), false).expect("second");
        assert_eq!(origin, CertOrigin::Reused);
        assert_eq!(second, first);
        assert_eq!(read(&second.cert_path), cert);

        let (third, origin) =
            reuse_or_generate_self_signed(&names(), dir.path(), true).expect("renew");
        assert!(matches!(origin, CertOrigin::Generated { .. }), "{origin:?}");
        assert_ne!(third.sha256_fingerprint, first.sha256_fingerprint);
    }

    #[test]
    fn unusable_certificates_are_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (first, _) = reuse_or_generate_self_signed(&names(), dir.path(), false).expect("a");

        // A name the certificate lacks.
        let mut more = names();
        more.push("data.example.org".into());
        let (renamed, origin) =
            reuse_or_generate_self_signed(&more, dir.path(), false).expect("names");
        let CertOrigin::Generated { reason } = origin else {
            panic!("reused a certificate without data.example.org");
        };
        assert!(reason.contains("data.example.org"), "{reason}");
        assert_ne!(renamed.sha256_fingerprint, first.sha256_fingerprint);

        // Unreadable: junk where the certificate should be.
        std::fs::write(dir.path().join("cert.pem"), "junk").expect("write");
        let (_, origin) = reuse_or_generate_self_signed(&names(), dir.path(), false).expect("junk");
        assert!(matches!(origin, CertOrigin::Generated { .. }), "{origin:?}");

        // Expired.
        let mut params = rcgen::CertificateParams::new(names()).expect("params");
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let key = rcgen::KeyPair::generate().expect("key");
        let old = params.self_signed(&key).expect("cert");
        std::fs::write(dir.path().join("cert.pem"), old.pem()).expect("write cert");
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).expect("write key");
        let (_, origin) =
            reuse_or_generate_self_signed(&names(), dir.path(), false).expect("expired");
        let CertOrigin::Generated { reason } = origin else {
            panic!("reused an expired certificate");
        };
        assert!(reason.contains("not now"), "{reason}");

        // A key from another certificate.
        let other = tempfile::tempdir().expect("tempdir");
        let (b, _) = reuse_or_generate_self_signed(&names(), other.path(), false).expect("b");
        std::fs::copy(&b.key_path, dir.path().join("key.pem")).expect("copy key");
        let (_, origin) = reuse_or_generate_self_signed(&names(), dir.path(), false).expect("key");
        assert!(matches!(origin, CertOrigin::Generated { .. }), "{origin:?}");
    }

    #[test]
    fn default_names_include_the_host_and_listen_addresses() {
        let names = default_cert_names(&[
            "0.0.0.0".parse().expect("ip"),
            "192.0.2.7".parse().expect("ip"),
            "::1".parse().expect("ip"),
        ]);
        assert_eq!(&names[..3], ["localhost", "127.0.0.1", "::1"]);
        assert!(names.contains(&"192.0.2.7".to_string()), "{names:?}");
        assert!(!names.contains(&"0.0.0.0".to_string()), "{names:?}");
        assert_eq!(names.iter().filter(|n| *n == "::1").count(), 1);
        if let Some(host) = host_name() {
            assert!(names.contains(&host), "{names:?} lacks {host}");
        }
    }
}
