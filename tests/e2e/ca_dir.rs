//! Grid-style trust: `xfer serve --client-ca-dir` and `xfer get --ca-dir` read an OpenSSL
//! hashed directory (`<hash>.0` CA certificates, `<hash>.r0` CRLs, beside files that are
//! neither), and a client certificate its CA has revoked fails the handshake while one of the
//! same CA that is not revoked gets its scope.

use std::path::Path;

use crate::access::CERT_ACCESS;
use crate::support::{get_args, run_xfer, sha256_file, Fixture, Proto, TestResult};
use xfer_test_support::write_random_file;

/// A CA with a CRL revoking serial 2, as a hashed directory `dir/certificates`, and two client
/// certificates for `name`: `good.pem`/`good.key` (serial 1) and `revoked.pem`/`revoked.key`
/// (serial 2).
fn grid_pki(dir: &Path, name: &str) -> Result<(), crate::support::BoxError> {
    use rcgen::{
        date_time_ymd, BasicConstraints, CertificateParams, CertificateRevocationListParams,
        ExtendedKeyUsagePurpose, IsCa, KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams,
        SerialNumber,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key)?;
    for (file, serial) in [("good", 1u64), ("revoked", 2)] {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![name.to_string()])?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.serial_number = Some(SerialNumber::from(serial));
        let cert = params.signed_by(&key, &ca, &ca_key)?;
        std::fs::write(dir.join(format!("{file}.pem")), cert.pem())?;
        std::fs::write(dir.join(format!("{file}.key")), key.serialize_pem())?;
    }
    let crl = CertificateRevocationListParams {
        this_update: date_time_ymd(2024, 1, 1),
        next_update: date_time_ymd(2099, 1, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: vec![RevokedCertParams {
            serial_number: SerialNumber::from(2u64),
            revocation_time: date_time_ymd(2024, 1, 1),
            reason_code: None,
            invalidity_date: None,
        }],
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&ca, &ca_key)?;
    let certs = dir.join("certificates");
    std::fs::create_dir_all(&certs)?;
    std::fs::write(certs.join("1a2b3c4d.0"), ca.pem())?;
    std::fs::write(certs.join("1a2b3c4d.r0"), crl.pem()?)?;
    // What a real grid directory also holds, none of it a certificate to load.
    std::fs::write(
        certs.join("TestCA.signing_policy"),
        "access_id_CA X509 '/CN=x'\n",
    )?;
    std::fs::write(certs.join("TestCA.namespaces"), "TO Issuer \"/CN=x\"\n")?;
    Ok(())
}

async fn revoked_client_certificate_is_refused(proto: Proto) -> TestResult {
    let fx = Fixture::start_with(proto, |cfg, dir| {
        grid_pki(dir, "pipeline.example.org").expect("grid certificates");
        let file = dir.join("access.toml");
        std::fs::write(&file, CERT_ACCESS).expect("writing the access file");
        cfg.access_file = Some(file);
        cfg.anonymous_read = false;
        cfg.client_ca = Some(dir.join("certificates"));
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

    let fetch = |who: &str, dest: &Path| {
        let cert = fx
            .dir
            .path()
            .join(format!("{who}.pem"))
            .display()
            .to_string();
        let key = fx
            .dir
            .path()
            .join(format!("{who}.key"))
            .display()
            .to_string();
        get_args(
            &fx.url("/data/a.bin"),
            dest,
            &[
                "--ca-dir",
                &ca_dir,
                "--client-cert",
                &cert,
                "--client-key",
                &key,
            ],
        )
    };
    let good = fx.out().join("good.bin");
    let out = run_xfer(fetch("good", &good)).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{proto:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sha256_file(&good)?, sha);

    let revoked = fx.out().join("revoked.bin");
    let out = run_xfer(fetch("revoked", &revoked)).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(0),
        "{proto:?}: a revoked certificate got in"
    );
    assert!(!revoked.exists(), "{proto:?}: {stderr}");
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
