//! The competing bulk TCP flow of the held-out matrix's fairness cell: it crosses the same
//! emulated bottleneck as the measured transfers, and the runner reads its bytes. Needs root,
//! /dev/net/tun and iproute2; without them the test prints why and passes, except under
//! CI=true, where it fails with the reason.

use std::time::{Duration, Instant};

use xfer_lab::scenario::Competitor;
use xfer_lab::{cleanup, Lab, LabConfig, LinkConfig};

#[test]
fn the_competitor_flows_through_the_emulated_link_and_is_counted() {
    if !xfer_test_support::gate::available("the competitor test", xfer_lab::check_prerequisites()) {
        return;
    }
    let prefix = "xfertest-comp";
    let _ = cleanup(prefix);
    let rate_bps = 20_000_000;
    let lab = Lab::start(LabConfig::new(
        prefix,
        LinkConfig::new(rate_bps, Duration::from_millis(20)),
    ))
    .unwrap_or_else(|e| panic!("lab {prefix}: {e}"));
    let relay_before = lab.relay_stats().server_to_client.bytes_forwarded;
    let started = Instant::now();
    let competitor =
        Competitor::start(&lab, 9551, Some("cubic")).unwrap_or_else(|e| panic!("competitor: {e}"));
    assert_eq!(competitor.congestion(), Some("cubic"));
    // Poll until a few hundred kilobytes arrived: well into the flow, far below a second's
    // worth at the link's rate.
    let deadline = started + Duration::from_secs(20);
    while competitor.received() < 400_000 {
        assert!(
            Instant::now() < deadline && competitor.running(),
            "the competitor received {} bytes in {:?}",
            competitor.received(),
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let received = competitor.received();
    let elapsed = started.elapsed().as_secs_f64();
    let forwarded = lab.relay_stats().server_to_client.bytes_forwarded - relay_before;
    // Every byte it counts crossed the relay (with headers), so the link carried it.
    assert!(
        forwarded >= received,
        "relay forwarded {forwarded} bytes server to client, the competitor counted {received}"
    );
    // Not a speed check: a flow that beat the emulated rate did not cross the bottleneck.
    let bps = received as f64 * 8.0 / elapsed;
    assert!(
        bps <= rate_bps as f64 * 1.02,
        "{bps} bit/s through a {rate_bps} bit/s link"
    );
    drop(competitor);
    lab.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
}
