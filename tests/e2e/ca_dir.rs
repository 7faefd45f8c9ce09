//! Grid-style trust: `xfer serve --client-ca-dir` and `xfer get --ca-dir` read an OpenSSL
//! hashed directory (`<hash>.0` CA certificates, `<hash>.r0` CRLs, beside files that are
//! neither), and a client certificate its CA has revoked fails the handshake while one of the
//! same CA that is not revoked gets its scope, until a reload of a newer CRL revokes it too.

use std::path::{Path, PathBuf};

use crate::access::CERT_ACCESS;
use crate::support::{get_args, run_xfer, sha256_file, Fixture, Proto, TestResult};
use xfer_test_support::write_random_file;

/// A test CA kept as a grid site keeps its CAs: an OpenSSL hashed directory `certificates`
/// with `1a2b3c4d.0` (the CA) and `1a2b3c4d.r0` (its CRL), beside files that are neither.
struct GridCa {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    dir: PathBuf,
}

impl GridCa {
    fn new(base: &Path) -> Result<Self, crate::support::BoxError> {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        let dir = base.join("certificates");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("1a2b3c4d.0"), cert.pem())?;
        std::fs::write(
            dir.join("TestCA.signing_policy"),
            "access_id_CA X509 '/CN=x'\n",
        )?;
        std::fs::write(dir.join("TestCA.namespaces"), "TO Issuer \"/CN=x\"\n")?;
        Ok(Self { cert, key, dir })
    }

    /// A client certificate for `name` with `serial`: `base/<file>.pem` and `.key`.
    fn client(
        &self,
        base: &Path,
        file: &str,
        name: &str,
        serial: u64,
    ) -> Result<(), crate::support::BoxError> {
        use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair, SerialNumber};
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![name.to_string()])?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.serial_number = Some(SerialNumber::from(serial));
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        std::fs::write(base.join(format!("{file}.pem")), cert.pem())?;
        std::fs::write(base.join(format!("{file}.key")), key.serialize_pem())?;
        Ok(())
    }

    /// Writes the CRL, revoking `serials`, as `fetch-crl` would.
    fn revoke(&self, serials: &[u64], number: u64) -> Result<(), crate::support::BoxError> {
        use rcgen::{
            date_time_ymd, CertificateRevocationListParams, KeyIdMethod, RevokedCertParams,
            SerialNumber,
        };
        let crl = CertificateRevocationListParams {
            this_update: date_time_ymd(2024, 1, 1),
            next_update: date_time_ymd(2099, 1, 1),
            crl_number: SerialNumber::from(number),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| RevokedCertParams {
                    serial_number: SerialNumber::from(*s),
                    revocation_time: date_time_ymd(2024, 1, 1),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        }
        .signed_by(&self.cert, &self.key)?;
        std::fs::write(self.dir.join("1a2b3c4d.r0"), crl.pem()?)?;
        Ok(())
    }
}

async fn revoked_client_certificate_is_refused(proto: Proto) -> TestResult {
    let pki = tempfile::tempdir()?;
    let ca = GridCa::new(pki.path())?;
    ca.client(pki.path(), "good", "pipeline.example.org", 1)?;
    ca.client(pki.path(), "revoked", "pipeline.example.org", 2)?;
    ca.revoke(&[2], 1)?;
    let fx = Fixture::start_with(proto, |cfg, dir| {
        cfg.access_file = Some(xfer_test_support::write_access_file(dir, CERT_ACCESS));
        cfg.anonymous_read = false;
        cfg.client_ca = Some(ca.dir.clone());
    })
    .await?;
    // CERT_ACCESS gives pipeline.example.org read access under /data.
    std::fs::create_dir_all(fx.root().join("data"))?;
    let sha = write_random_file(&fx.root().join("data/a.bin"), 1_000_000, 11)?;
    // The client trusts the server through a hashed directory too.
    let server_cas = fx.dir.path().join("server-cas");
    std::fs::create_dir_all(&server_cas)?;
    let server_cert = fx.ca_cert().ok_or("the fixture runs TLS")?;
    std::fs::copy(server_cert, server_cas.join("0a0b0c0d.0"))?;
    let ca_dir = server_cas.display().to_string();

    let fetch = |who: &str| {
        let dest = fx.out().join(format!("{who}.bin"));
        let _ = std::fs::remove_file(&dest);
        let cert = pki.path().join(format!("{who}.pem")).display().to_string();
        let key = pki.path().join(format!("{who}.key")).display().to_string();
        let args = get_args(
            &fx.url("/data/a.bin"),
            &dest,
            &[
                "--ca-dir",
                &ca_dir,
                "--client-cert",
                &cert,
                "--client-key",
                &key,
            ],
        );
        (args, dest)
    };
    let (args, good) = fetch("good");
    let out = run_xfer(args).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{proto:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sha256_file(&good)?, sha);

    let (args, revoked) = fetch("revoked");
    let out = run_xfer(args).await?;
    assert_ne!(
        out.status.code(),
        Some(0),
        "{proto:?}: a revoked certificate got in"
    );
    assert!(!revoked.exists());

    // The next day's CRL revokes the other one too; a reload (what SIGHUP does) applies it.
    ca.revoke(&[1, 2], 2)?;
    let live = fx.servers.live_tls.as_ref().ok_or("the fixture runs TLS")?;
    let failed = live.reload();
    assert!(failed.is_empty(), "{proto:?}: reload failed: {failed:?}");
    let (args, good) = fetch("good");
    let out = run_xfer(args).await?;
    assert_ne!(
        out.status.code(),
        Some(0),
        "{proto:?}: revoked on reload, still let in"
    );
    assert!(!good.exists());
    fx.shutdown().await;
    Ok(())
}

mod revoked {
    use crate::support::{Proto, TestResult};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn http1_tls() -> TestResult {
        super::revoked_client_certificate_is_refused(Proto::Http1Tls).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn quic() -> TestResult {
        super::revoked_client_certificate_is_refused(Proto::Quic).await
    }
}
