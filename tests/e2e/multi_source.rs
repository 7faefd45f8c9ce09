//! One file from several xfer servers over real sockets and TLS: both used, a server with
//! another file refused, a server dying mid-file, mirrors found in `Link: rel=duplicate`.

use std::sync::Arc;
use std::time::Duration;

use xfer::{ClientConfig, ClientTlsOptions, Download, GetConfig, Report};
use xfer_test_support::fault_proxy::{Fault, FaultProxy};

use crate::support::*;

const NO_HANG: Duration = Duration::from_secs(240);

/// A client that trusts every fixture's self-signed certificate, 4 HTTP/1.1 connections each.
fn client_for(fixtures: &[&Fixture]) -> ClientConfig {
    let mut client = fixtures[0].client.clone();
    client = client.with_tls(ClientTlsOptions {
        client_identity: None,
        ca_certs: fixtures.iter().filter_map(|f| f.ca_cert()).collect(),
        dangerous_insecure: false,
    });
    client.http.lanes.connections = Some(4);
    client
}

async fn fetch(
    urls: &[&str],
    dest: &std::path::Path,
    client: &ClientConfig,
) -> Result<Report, BoxError> {
    let get = GetConfig {
        chunk_size: MIB,
        ..GetConfig::default()
    };
    let report = tokio::time::timeout(NO_HANG, xfer::download_from(urls, dest, client, get))
        .await
        .map_err(|_| "the download hung")??;
    Ok(report)
}

#[tokio::test]
async fn two_servers_share_one_file() -> TestResult {
    let a = Fixture::start(Proto::Http1Tls).await?;
    let b = Fixture::start(Proto::Http1Tls).await?;
    let size = 24 * MIB + 123;
    let expected = write_random_file(&a.root().join("f.bin"), size, 41)?;
    write_random_file(&b.root().join("f.bin"), size, 41)?;
    let dest = a.out().join("f.bin");
    let (ua, ub) = (a.url("/f.bin"), b.url("/f.bin"));
    let report = fetch(&[&ua, &ub], &dest, &client_for(&[&a, &b])).await?;
    assert_eq!(sha256_file(&dest)?, expected);
    assert_eq!(report.sources.len(), 2, "{:?}", report.sources);
    for s in &report.sources {
        assert!(s.bytes > 0, "both sources carry chunks: {s:?}");
        assert!(s.dropped.is_none(), "{s:?}");
        assert!(s.lanes_max > 0, "{s:?}");
    }
    assert!(
        report.lanes.len() >= 8,
        "lanes for both sources: {}",
        report.lanes.len()
    );
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_server_with_another_file_is_refused() -> TestResult {
    let a = Fixture::start(Proto::Http1Tls).await?;
    let b = Fixture::start(Proto::Http1Tls).await?;
    let size = 6 * MIB;
    let expected = write_random_file(&a.root().join("f.bin"), size, 42)?;
    // Same name, same size, other bytes.
    write_random_file(&b.root().join("f.bin"), size, 43)?;
    let dest = a.out().join("f.bin");
    let mut args = vec!["get".to_string(), a.url("/f.bin"), b.url("/f.bin")];
    args.push(dest.display().to_string());
    for f in [&a, &b] {
        args.push("--ca-cert".into());
        args.push(f.ca_cert().ok_or("no CA")?.display().to_string());
    }
    args.extend(["--json".into(), "--chunk-size".into(), "1MiB".into()]);
    let out = run_xfer(args).await?;
    let report = json_report(&out)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sha256_file(&dest)?, expected);
    let sources = report["sources"]
        .as_array()
        .ok_or("no sources in the report")?;
    assert_eq!(sources.len(), 2, "{report}");
    assert_eq!(sources[1]["bytes"].as_u64(), Some(0), "{report}");
    // The report's field says why, not the wording of a log line.
    let why = sources[1]["dropped"].as_str().unwrap_or_default();
    assert!(why.contains("SHA-256"), "{why}");

    // Alone with the wrong file: an error, and nothing under the final name.
    let wrong = a.out().join("wrong.bin");
    let out = run_xfer(vec![
        "get".into(),
        b.url("/f.bin"),
        a.url("/f.bin"),
        wrong.display().to_string(),
        "--ca-cert".into(),
        b.ca_cert().ok_or("no CA")?.display().to_string(),
        "--ca-cert".into(),
        a.ca_cert().ok_or("no CA")?.display().to_string(),
        "--expect-sha256".into(),
        "00".repeat(32),
    ])
    .await?;
    // Every source declares another digest than the expected one: a verification failure
    // (exit 4), each source's reason in its warning.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(!wrong.exists());
    assert!(stderr.contains(&"00".repeat(32)), "{stderr}");
    // A failed run's report has no sources, so the warnings are what says each was dropped.
    assert_eq!(stderr.matches("source dropped").count(), 2, "{stderr}");
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_server_dying_mid_file_leaves_the_rest_to_the_other() -> TestResult {
    let a = Fixture::start(Proto::Http1Tls).await?;
    let b = Fixture::start(Proto::Http1Tls).await?;
    let size = 24 * MIB + 5;
    let expected = write_random_file(&a.root().join("f.bin"), size, 44)?;
    write_random_file(&b.root().join("f.bin"), size, 44)?;
    // Every connection to b is reset after 1 MiB: it serves part of a chunk, then dies, and
    // every reconnection dies the same way. (With 3 MiB, a's lanes sometimes took the whole
    // file before any of b's connections got that far, and the fault never fired: 1 run in 8.)
    let proxy =
        FaultProxy::tcp(b.servers.http_addr, vec![Fault::Reset { after: MIB }; 256]).await?;
    let ub = format!("https://127.0.0.1:{}/f.bin", proxy.addr().port());
    let ua = a.url("/f.bin");
    let dest = a.out().join("f.bin");
    let report = fetch(&[&ua, &ub], &dest, &client_for(&[&a, &b])).await?;
    assert_eq!(sha256_file(&dest)?, expected);
    assert!(proxy.stats().faults_fired() > 0, "the fault never fired");
    assert!(report.sources[1].errors > 0, "{:?}", report.sources);
    assert!(report.sources[0].bytes >= size / 2, "{:?}", report.sources);
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn mirrors_named_in_link_headers_are_used() -> TestResult {
    let b = Fixture::start(Proto::Http1Tls).await?;
    let mirror = b.servers.http_base();
    let a = Fixture::start_with(Proto::Http1Tls, |cfg, _| {
        cfg.http.mirrors = vec![mirror.clone(), "http://127.0.0.1:9/plain-text".into()];
    })
    .await?;
    let size = 16 * MIB;
    let expected = write_random_file(&a.root().join("f.bin"), size, 45)?;
    write_random_file(&b.root().join("f.bin"), size, 45)?;
    let client = client_for(&[&a, &b]);
    let dest = a.out().join("f.bin");
    let ua = a.url("/f.bin");
    let report = fetch(&[&ua], &dest, &client).await?;
    assert_eq!(sha256_file(&dest)?, expected);
    // The https mirror joins; the http one would step down from TLS and is ignored.
    let urls: Vec<&str> = report.sources.iter().map(|s| s.url.as_str()).collect();
    assert_eq!(
        urls,
        vec![ua.clone(), b.url("/f.bin")],
        "{:?}",
        report.sources
    );
    assert!(report.sources[1].bytes > 0, "{:?}", report.sources);

    // Resume with another list of sources: the journal is about the file.
    let dest2 = a.out().join("g.bin");
    let multi = xfer::sources_transport(&[&ua], &client, None, true)?;
    let dl = Download::new(
        Arc::new(multi),
        &ua,
        &dest2,
        GetConfig {
            chunk_size: MIB,
            ..GetConfig::default()
        },
    );
    let progress = dl.progress();
    let stop = async move {
        while progress.snapshot().verified < 2 * MIB {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let first = tokio::time::timeout(NO_HANG, dl.run_until(stop)).await?;
    let report = match first {
        // Too quick to interrupt on this machine: nothing to resume, the file is whole.
        Ok(r) => r,
        Err(xfer::GetError::Interrupted) => {
            let ub = b.url("/f.bin");
            let multi = xfer::sources_transport(&[&ub], &client, None, false)?;
            let dl = Download::new(
                Arc::new(multi),
                &ub,
                &dest2,
                GetConfig {
                    chunk_size: MIB,
                    ..GetConfig::default()
                },
            );
            let r = tokio::time::timeout(NO_HANG, dl.run()).await??;
            assert!(r.resumed_bytes >= 2 * MIB, "resumed {}", r.resumed_bytes);
            r
        }
        Err(e) => return Err(e.into()),
    };
    assert_eq!(report.size, size);
    assert_eq!(sha256_file(&dest2)?, expected);
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}
