//! Server certificate verification for `--ca-cert`: webpki's path building, plus one case it
//! refuses on purpose.
//!
//! `openssl req -x509` writes a self-signed certificate with `basicConstraints CA:TRUE`. Used
//! as its own server certificate, webpki rejects it as a CA used as an end entity, even when
//! the user configured that very certificate as the trust anchor; curl and openssl accept
//! it. rustls leaves self-signed certificates to the application (rustls/webpki#205,
//! briansmith/webpki#114). Here a presented certificate that is byte-for-byte one of the
//! configured `--ca-cert` certificates is accepted if it names the server and is within its
//! validity period: trusting it was the user's explicit choice, and the handshake signature
//! is still checked against its key, so only the holder of that key gets through. Nothing
//! else is relaxed; every other certificate goes through webpki unchanged.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use super::validity::validity;

#[derive(Debug)]
pub(super) struct ConfiguredCertVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    /// The DER of every configured `--ca-cert` certificate.
    configured: Vec<CertificateDer<'static>>,
}

impl ConfiguredCertVerifier {
    pub(super) fn new(
        webpki: Arc<WebPkiServerVerifier>,
        configured: Vec<CertificateDer<'static>>,
    ) -> Self {
        Self { webpki, configured }
    }

    fn verify_configured(
        end_entity: &CertificateDer<'_>,
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        let parsed = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        let period = validity(end_entity).ok_or(CertificateError::BadEncoding)?;
        if now.as_secs() < period.not_before.as_secs() {
            return Err(CertificateError::NotValidYetContext {
                time: now,
                not_before: period.not_before,
            }
            .into());
        }
        if !period.contains(now) {
            return Err(CertificateError::ExpiredContext {
                time: now,
                not_after: period.not_after,
            }
            .into());
        }
        Ok(())
    }
}

impl ServerCertVerifier for ConfiguredCertVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let webpki = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match webpki {
            Ok(verified) => Ok(verified),
            Err(e)
                if self
                    .configured
                    .iter()
                    .any(|c| c.as_ref() == end_entity.as_ref()) =>
            {
                Self::verify_configured(end_entity, server_name, now)?;
                tracing::debug!(webpki = %e, "server presented a configured --ca-cert certificate itself; accepted");
                Ok(ServerCertVerified::assertion())
            }
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
