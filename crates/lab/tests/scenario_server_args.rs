//! Per-transfer server arguments and fresh servers in scenario files (parsing only; the
//! runner's restarts are exercised by `xfer lab run scenarios/careful-resume.toml`).

use xfer_lab::scenario::Scenario;

#[test]
fn transfers_carry_their_server_arguments_and_restarts() {
    let s = Scenario::from_toml(
        r#"
name = "t"
[link]
rate = "1G"
rtt = ["10ms"]
[[transfer]]
tool = "xfer"
protocol = "quic"
label = "off"
server_args = ["--no-careful-resume"]
fresh_server = true
[[transfer]]
tool = "xfer"
protocol = "quic"
label = "on"
"#,
    )
    .expect("valid scenario");
    assert_eq!(s.cases.len(), 2);
    assert_eq!(s.cases[0].server_args, ["--no-careful-resume"]);
    assert!(s.cases[0].fresh_server);
    assert!(s.cases[1].server_args.is_empty());
    assert!(!s.cases[1].fresh_server);
}

#[test]
fn the_careful_resume_scenario_parses() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/careful-resume.toml");
    let s = Scenario::load(&path).expect("scenarios/careful-resume.toml");
    assert_eq!(s.cases.len(), 8);
    assert_eq!(s.cases.iter().filter(|c| c.fresh_server).count(), 4);
}
