//! `xfer get` with the lane count chosen as it goes (`--lanes auto`)
//! over real sockets and TLS: the file arrives byte for byte while lanes are added and
//! retired, and the `--json` report says what was chosen and why.

use crate::support::*;

/// Bounds, window and file sized so that on loopback the controller takes several decisions
/// however fast the machine (and however slow its first request under load, which sets
/// the warm-up): a 20 ms window, 1 MiB chunks, `mib` MiB. HTTP/1.1 × 8, the fastest here,
/// moved 256 MiB within the warm-up of a loaded CI machine (no decision at all), so it gets
/// twice that.
async fn case(proto: Proto, mib: u64, extra: &[&str]) -> Result<serde_json::Value, BoxError> {
    let fx = Fixture::start(proto).await?;
    let src = fx.root().join("big.bin");
    write_random_file(&src, mib * MIB, 14)?;
    let dest = fx.out().join("big.bin");
    let mut args = get_args(
        &fx.url("/big.bin"),
        &dest,
        &["--json", "--chunk-size", "1MiB", "--lanes-window", "20ms"],
    );
    if let Some(ca) = fx.ca_cert() {
        args.extend(["--ca-cert".to_string(), ca.display().to_string()]);
    }
    match proto {
        Proto::Http1Tls => args.extend(["--protocol".into(), "http1".into()]),
        Proto::Http2Tls | Proto::H2c => args.extend(["--protocol".into(), "http2".into()]),
        Proto::Quic => {}
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = run_xfer(args).await?;
    let report = json_report(&out)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sha256_file(&dest)?, sha256_file(&src)?, "{proto:?}");
    fx.shutdown().await;
    Ok(report)
}

/// What every report of an adaptive run must hold, whatever the machine's pace.
fn check(report: &serde_json::Value, min: u64, max: u64) -> Result<(), BoxError> {
    let a = &report["adaptive_lanes"];
    assert_eq!(u64_field(a, "min_lanes")?, min, "{report}");
    assert_eq!(u64_field(a, "max_lanes")?, max);
    let initial = u64_field(a, "initial_lanes")?;
    assert_eq!(initial, 8u64.clamp(min, max));
    let decisions = a["decisions"].as_array().ok_or("no decisions array")?;
    assert!(
        !decisions.is_empty(),
        "the transfer spans windows of 20 ms: {a}"
    );
    let mut added = 0;
    for d in decisions {
        let lanes = u64_field(d, "lanes")?;
        assert!((min..=max).contains(&lanes), "{d}");
        assert!(d["goodput_bps"].as_f64().is_some_and(|g| g > 0.0), "{d}");
        assert!(d["reason"].as_str().is_some_and(|r| !r.is_empty()), "{d}");
        assert!(d["at_seconds"].as_f64().is_some(), "{d}");
        if d["action"]["kind"] == "add" {
            added += d["action"]["lanes"].as_u64().ok_or("add without a count")?;
        }
    }
    let final_lanes = u64_field(a, "final_lanes")?;
    assert!((min..=max).contains(&final_lanes));
    // One lane report per lane started: the first ones and every one added.
    let lanes = report["lanes"].as_array().ok_or("no lanes")?;
    assert_eq!(lanes.len() as u64, initial + added, "{a}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn auto_adapts_over_http1_and_reports_its_decisions() -> TestResult {
    let report = case(Proto::Http1Tls, 512, &["--lanes", "auto"]).await?;
    check(&report, 2, 64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bounded_auto_over_http2_and_quic() -> TestResult {
    for proto in [Proto::Http2Tls, Proto::Quic] {
        let report = case(proto, 256, &["--lanes", "auto:3-12"]).await?;
        check(&report, 3, 12)?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fixed_count_stays_fixed() -> TestResult {
    let fx = Fixture::start(Proto::Http1Tls).await?;
    write_random_file(&fx.root().join("f.bin"), 8 * MIB, 3)?;
    let dest = fx.out().join("f.bin");
    let mut args = get_args(&fx.url("/f.bin"), &dest, &["--chunk-size", "1MiB"]);
    args.extend(["--lanes", "5", "--protocol", "http1"].map(String::from));
    if let Some(ca) = fx.ca_cert() {
        args.extend(["--ca-cert".to_string(), ca.display().to_string()]);
    }
    // A window for a count that does not adapt is a mistake worth saying.
    let mut with_window = args.clone();
    with_window.extend(["--lanes-window", "20ms"].map(String::from));
    let out = run_xfer(with_window).await?;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--lanes-window"));
    assert!(!dest.exists());

    args.push("--json".into());
    let out = run_xfer(args).await?;
    let report = json_report(&out)?;
    assert!(report.get("adaptive_lanes").is_none(), "{report}");
    assert_eq!(report["lanes"].as_array().map(Vec::len), Some(5));
    assert_eq!(sha256_file(&dest)?, sha256_file(&fx.root().join("f.bin"))?);
    fx.shutdown().await;
    Ok(())
}

/// A tree with `--tree-lanes auto:MIN-MAX`: the pool of lanes over all files grows and
/// shrinks as the same controller decides, every file arrives intact, and the tree's report
/// says what it chose.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tree_budget_adapts_with_the_same_controller() -> TestResult {
    // HTTP/1.1, whose budget (64 connections) lies inside the bounds: room to add and retire.
    let fx = Fixture::start(Proto::Http1Tls).await?;
    let mut expected = Vec::new();
    for i in 0..160u64 {
        let dir = fx.root().join(format!("d{}", i % 4));
        std::fs::create_dir_all(&dir)?;
        // Mostly small files, one big one in sixteen: one request each and chunked ones.
        let size = if i % 16 == 0 {
            6 * MIB
        } else {
            300_000 + i * 1000
        };
        let path = dir.join(format!("f{i}.bin"));
        let digest = write_random_file(&path, size, i)?;
        expected.push((format!("d{}/f{i}.bin", i % 4), digest));
    }
    let dest = fx.out().join("tree");
    let ca = fx.ca_cert().ok_or("no CA")?;
    let mut args = get_args(&fx.url("/"), &dest, &[]);
    // `get URL/ DEST/` rather than -o.
    args.truncate(2);
    args.push(dest.display().to_string());
    args.extend(
        [
            "--ca-cert",
            &ca.display().to_string(),
            "--chunk-size",
            "1MiB",
            "--protocol",
            "http1",
            "--tree-lanes",
            "auto:8-96",
            "--lanes-window",
            "20ms",
            "--json",
        ]
        .map(String::from),
    );
    let out = run_xfer(args).await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_report(&out)?;
    for (rel, digest) in &expected {
        assert_eq!(&sha256_file(&dest.join(rel))?, digest, "{rel}");
    }
    let a = &report["adaptive_lanes"];
    assert_eq!(u64_field(a, "min_lanes")?, 8, "{report}");
    assert_eq!(u64_field(a, "max_lanes")?, 96);
    // The HTTP/1.1 budget, within the bounds.
    assert_eq!(u64_field(a, "initial_lanes")?, 64);
    let decisions = a["decisions"].as_array().ok_or("no decisions array")?;
    assert!(
        !decisions.is_empty(),
        "~140 MiB spans windows of 20 ms: {a}"
    );
    for d in decisions {
        assert!((8..=96).contains(&u64_field(d, "lanes")?), "{d}");
    }
    assert!((8..=96).contains(&u64_field(a, "final_lanes")?));
    fx.shutdown().await;
    Ok(())
}
