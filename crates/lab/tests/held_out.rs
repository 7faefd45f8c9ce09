//! `scenarios/held-out.toml`, issue 39's matrix, as the runner reads it (parsing only; the
//! runs are `xfer lab run scenarios/held-out.toml`).

use xfer_lab::scenario::{point_name, Scenario};

#[test]
fn the_held_out_scenario_has_every_cell_and_every_switch() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/held-out.toml");
    let s = Scenario::load(&path).expect("scenarios/held-out.toml");
    let cells: Vec<String> = s.points.iter().map(|p| point_name(p, s.rate_bps)).collect();
    assert_eq!(
        cells,
        [
            "tuned 100ms 0%",
            "queue 0.25 BDP",
            "queue 4 BDP",
            "loss 0.1%",
            "loss 1%",
            "RTT 10ms",
            "RTT 300ms",
            "100 Mbit/s",
            "competitor",
            "jitter 5ms"
        ]
    );
    assert_eq!(s.points.iter().filter(|p| p.competitor).count(), 1);
    // Every mechanism of the registry is switched: default-on ones off, opt-in ones on,
    // except adaptive-lanes (opt-in, judged before: results.md "--lanes auto").
    for m in xfer_common::mechanisms::MECHANISMS {
        let want = format!("{}={}", m.name, if m.default_on { "off" } else { "on" });
        let switched = s.cases.iter().any(|c| c.mechanisms == [want.clone()]);
        assert_eq!(switched, m.name != "adaptive-lanes", "{want}");
    }
    assert_eq!(s.cases.iter().filter(|c| c.cold).count(), 1);
    for c in s.cases.iter().filter(|c| c.baseline.is_some()) {
        let b = c.baseline.as_deref().unwrap_or_default();
        assert!(s.cases.iter().any(|d| d.name == b), "{}: {b}", c.name);
    }
}
