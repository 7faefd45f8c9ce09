//! rustls set-up shared by the HTTP and QUIC servers and clients.
//!
//! Everything is built with the *ring* provider (aws-lc-rs with the `aws-lc-rs` feature:
//! [`provider`]) passed explicitly (`builder_with_provider`), so no process-wide default
//! provider has to be installed and nothing depends on which rustls features another crate
//! turned on.
//!
//! - [`server_config`]: certificate chain and key from PEM files, ALPN list;
//!   [`server_config_reloadable`] with a [`ReloadableCert`] that a reload swaps (`reloadable`).
//! - [`self_signed`]: a new certificate for tests and quick starts (rcgen);
//!   [`reuse_or_generate_self_signed`] keeps the one already in its directory (`identity`).
//! - [`client_config`]: webpki roots by default, or the given CA files (a configured
//!   self-signed certificate may also be the server's own: `configured_cert`), or (footgun)
//!   [`ClientTlsOptions::dangerous_insecure`].
//! - [`handshake_error_message`]: a certificate error with what to do about it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::{Digest as _, Sha256};

mod ca_dir;
mod client_cert;
mod configured_cert;
mod identity;
mod reloadable;
mod validity;

pub use identity::{default_cert_names, host_name, reuse_or_generate_self_signed, CertOrigin};
pub use reloadable::{ReloadableCert, ReloadableClientVerifier};
pub use validity::{validity, Validity};

/// What went wrong setting up TLS. Each variant names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate (expected '-----BEGIN CERTIFICATE-----')")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    NoPrivateKey { path: PathBuf },
    #[error("{path} is not valid PEM: {message}")]
    BadPem { path: PathBuf, message: String },
    #[error("private key {key} does not belong to the certificate {cert}")]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("certificate {path} is not valid now (before its notBefore or after its notAfter)")]
    OutsideValidity { path: PathBuf },
    #[error("CA certificate in {path} is unusable: {message}")]
    BadCa { path: PathBuf, message: String },
    #[error("TLS set-up failed ({context})")]
    Rustls {
        context: String,
        #[source]
        source: rustls::Error,
    },
    #[error("cannot generate a self-signed certificate for {names:?}")]
    Generate {
        names: Vec<String>,
        #[source]
        source: rcgen::Error,
    },
}

/// The crypto provider every xfer TLS configuration is built with (`xfer bench --floor`
/// measures its ciphers): *ring*, or aws-lc-rs with the `aws-lc-rs` feature.
pub fn provider() -> Arc<CryptoProvider> {
    #[cfg(feature = "aws-lc-rs")]
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    #[cfg(not(feature = "aws-lc-rs"))]
    let provider = rustls::crypto::ring::default_provider();
    Arc::new(provider)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// All certificates in a PEM file, in order.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoPrivateKey {
            path: path.to_path_buf(),
        },
        other => TlsError::BadPem {
            path: path.to_path_buf(),
            message: other.to_string(),
        },
    })
}

/// A server configuration from a PEM certificate chain and key, offering `alpn` in order of
/// preference (e.g. `[b"h2", b"http/1.1"]`). TLS 1.2 and 1.3, no client authentication.
pub fn server_config(
    cert_pem: &Path,
    key_pem: &Path,
    alpn: &[&[u8]],
) -> Result<rustls::ServerConfig, TlsError> {
    server_config_with_client_ca(cert_pem, key_pem, alpn, None)
}

/// [`server_config`], asking clients for a certificate signed by a CA in `client_ca` (a PEM
/// file, or an OpenSSL hashed directory whose CRLs are honoured) when given. A client without one may still connect, as anonymous: what it may do is the
/// access rules' decision, not the handshake's.
pub fn server_config_with_client_ca(
    cert_pem: &Path,
    key_pem: &Path,
    alpn: &[&[u8]],
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, TlsError> {
    let cert = ReloadableCert::load(cert_pem, key_pem)?;
    let clients = match client_ca {
        Some(ca) => Some(Arc::new(ReloadableClientVerifier::load(ca)?)),
        None => None,
    };
    server_config_reloadable(Arc::new(cert), alpn, clients)
}

/// [`server_config_with_client_ca`] serving whatever `cert` holds at each handshake and
/// verifying client certificates with whatever `clients` holds, so that a reload of either
/// reaches every listener built from this configuration (and from its clones).
pub fn server_config_reloadable(
    cert: Arc<ReloadableCert>,
    alpn: &[&[u8]],
    clients: Option<Arc<ReloadableClientVerifier>>,
) -> Result<rustls::ServerConfig, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            context: "protocol versions".into(),
            source,
        })?;
    let builder = match clients {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_cert_resolver(cert);
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// A generated certificate written to disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfSigned {
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
    /// SHA-256 of the DER certificate, upper-case hex pairs joined by `:` (as `openssl x509
    /// -fingerprint -sha256` prints it), for users to compare out of band.
    pub sha256_fingerprint: String,
}

/// Generate a self-signed certificate for `names` (DNS names or IP addresses) and write
/// `cert.pem` and `key.pem` (mode 0600) into `out_dir`, which is created if missing.
pub fn self_signed(names: &[String], out_dir: &Path) -> Result<SelfSigned, TlsError> {
    let generated = rcgen::generate_simple_self_signed(names.to_vec()).map_err(|source| {
        TlsError::Generate {
            names: names.to_vec(),
            source,
        }
    })?;
    std::fs::create_dir_all(out_dir).map_err(|source| TlsError::Write {
        path: out_dir.to_path_buf(),
        source,
    })?;
    let cert_path = out_dir.join("cert.pem");
    let key_path = out_dir.join("key.pem");
    write_file(&cert_path, generated.cert.pem().as_bytes(), 0o644)?;
    write_file(
        &key_path,
        generated.key_pair.serialize_pem().as_bytes(),
        0o600,
    )?;
    Ok(SelfSigned {
        cert_path,
        key_path,
        sha256_fingerprint: fingerprint(generated.cert.der()),
    })
}

/// SHA-256 fingerprint of a DER certificate, `AB:CD:...`.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    let mut out = String::with_capacity(95);
    for (i, b) in digest.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        let _ = write!(out, "{b:02X}");
    }
    out
}

fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), TlsError> {
    let err = |source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = opts.open(path).map_err(err)?;
    // `mode` only applies to new files; an existing key file keeps its old permissions otherwise.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(err)?;
    }
    f.write_all(data).map_err(err)
}

/// How a client decides whom to trust.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTlsOptions {
    /// PEM files of CA (or self-signed server) certificates, or OpenSSL hashed directories
    /// (`/etc/grid-security/certificates`: `<hash>.0` CAs, `<hash>.r0` CRLs, which are
    /// honoured; `ca_dir`). When non-empty they are the only roots; when empty the Mozilla
    /// roots from `webpki-roots` are used.
    pub ca_certs: Vec<PathBuf>,
    /// Accept any server certificate, for any name, expired or not. **Footgun**: it removes
    /// all protection against an active attacker and is meant only for labs and tests. The
    /// handshake signature is still verified (the peer must hold the key of the certificate
    /// it presents), which stops nothing an attacker could not do with their own certificate.
    pub dangerous_insecure: bool,
    /// A client certificate and key (PEM) to present when the server asks for one.
    pub client_identity: Option<ClientIdentity>,
}

/// A client certificate chain and its key, as PEM files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientIdentity {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A client configuration offering `alpn` (e.g. `[b"h2", b"http/1.1"]`).
pub fn client_config(
    opts: &ClientTlsOptions,
    alpn: &[&[u8]],
) -> Result<rustls::ClientConfig, TlsError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            context: "protocol versions".into(),
            source,
        })?;
    let mut cfg = if opts.dangerous_insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate { provider }))
            .with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        if opts.ca_certs.is_empty() {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            builder.with_root_certificates(roots).with_no_client_auth()
        } else {
            let paths: Vec<&Path> = opts.ca_certs.iter().map(PathBuf::as_path).collect();
            let trust = ca_dir::Trust::load(&paths)?;
            let mut configured = Vec::new();
            for (path, cert) in trust.certs {
                roots.add(cert.clone()).map_err(|e| TlsError::BadCa {
                    path,
                    message: e.to_string(),
                })?;
                configured.push(cert);
            }
            let mut webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            );
            if !trust.crls.is_empty() {
                webpki = webpki
                    .with_crls(trust.crls)
                    .allow_unknown_revocation_status();
            }
            let webpki = webpki.build().map_err(|e| TlsError::BadCa {
                path: opts.ca_certs[0].clone(),
                message: e.to_string(),
            })?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(
                    configured_cert::ConfiguredCertVerifier::new(webpki, configured),
                ))
                .with_no_client_auth()
        }
    };
    if let Some(id) = &opts.client_identity {
        cfg.client_auth_cert_resolver = client_cert::resolver(id)?;
    }
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// What to tell the user when a server's certificate is signed by no CA the client trusts.
pub const UNKNOWN_ISSUER_HINT: &str = "the server's certificate is not signed by a CA this \
     client trusts; if the server uses its own certificate (xfer serve --self-signed writes \
     <cert-dir>/cert.pem), pass --ca-cert FILE or set XFER_CA_CERT=FILE";

/// A failed handshake's message, with [`UNKNOWN_ISSUER_HINT`] when the issuer is unknown.
pub fn handshake_error_message(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
            format!("{e}: {UNKNOWN_ISSUER_HINT}")
        }
        _ => e.to_string(),
    }
}

/// See [`ClientTlsOptions::dangerous_insecure`].
#[derive(Debug)]
struct AcceptAnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["localhost".into(), "127.0.0.1".into()]
    }

    #[test]
    fn self_signed_round_trips_into_configs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ss = self_signed(&names(), dir.path()).expect("generate");
        assert_eq!(ss.sha256_fingerprint.len(), 95);
        assert_eq!(ss.sha256_fingerprint.matches(':').count(), 31);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&ss.key_path)
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let server = server_config(&ss.cert_path, &ss.key_path, &[b"h2", b"http/1.1"])
            .expect("server config");
        assert_eq!(
            server.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        let opts = ClientTlsOptions {
            client_identity: None,
            ca_certs: vec![ss.cert_path.clone()],
            dangerous_insecure: false,
        };
        client_config(&opts, &[b"h2"]).expect("client config");
        client_config(&ClientTlsOptions::default(), &[]).expect("webpki roots");
        let insecure = ClientTlsOptions {
            dangerous_insecure: true,
            ..Default::default()
        };
        client_config(&insecure, &[]).expect("insecure");
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = self_signed(&names(), &dir.path().join("a")).expect("a");
        let b = self_signed(&names(), &dir.path().join("b")).expect("b");
        let err = server_config(&a.cert_path, &b.key_path, &[]).expect_err("mismatch");
        assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err}");

        let missing = dir.path().join("missing.pem");
        let err = server_config(&missing, &a.key_path, &[]).expect_err("missing");
        assert!(err.to_string().contains("missing.pem"), "{err}");

        // A key file where the certificate should be, and vice versa.
        let err = server_config(&a.key_path, &a.key_path, &[]).expect_err("no cert");
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
        let err = server_config(&a.cert_path, &a.cert_path, &[]).expect_err("no key");
        assert!(matches!(err, TlsError::NoPrivateKey { .. }), "{err}");

        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "hello").expect("write");
        let opts = ClientTlsOptions {
            client_identity: None,
            ca_certs: vec![junk],
            dangerous_insecure: false,
        };
        let err = client_config(&opts, &[]).expect_err("junk ca");
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
    }
}
