//! The held-out tables of issue 39 in `table.md`: each mechanism switched against xfer's
//! default in the same cell, with the issue's verdict, and the share a competing TCP flow is
//! left by each tool.
//!
//! The verdict rule: a mechanism that gains less than 1 % in every cell, or loses more than
//! 2 % in any cell, is a candidate for removal or for being off by default. A row that turns
//! a default mechanism off measures its gain as `baseline / off - 1`; a row that turns an
//! opt-in mechanism on, as `on / baseline - 1`. One run per cell is noisy: a verdict near the
//! thresholds wants repetitions before it is acted on.

use std::fmt::Write as _;

use super::report::Results;
use super::units::format_rate;

/// Below this gain everywhere a mechanism does not earn its place.
pub const MIN_GAIN: f64 = 0.01;
/// A loss beyond this anywhere disqualifies a mechanism.
pub const MAX_LOSS: f64 = 0.02;

/// What the rule says of one mechanism row.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Gains at least 1 % somewhere and loses at most 2 % anywhere: `best` gain at `cell`.
    Earns { best: f64, cell: String },
    /// Gains less than 1 % everywhere (`best` is the largest).
    GainsTooLittle { best: f64 },
    /// Loses more than 2 % at `cell` (`gain` is negative).
    Loses { gain: f64, cell: String },
    /// No cell has figures for both the row and its baseline.
    NoFigure,
}

impl Verdict {
    /// The judgement from the gains per cell (None where a figure is missing).
    pub fn judge(gains: &[(String, Option<f64>)]) -> Verdict {
        let known: Vec<(&String, f64)> = gains
            .iter()
            .filter_map(|(c, g)| g.map(|g| (c, g)))
            .collect();
        let Some(worst) = known.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
            return Verdict::NoFigure;
        };
        if worst.1 < -MAX_LOSS {
            return Verdict::Loses {
                gain: worst.1,
                cell: worst.0.clone(),
            };
        }
        let best = known
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or(worst);
        if best.1 < MIN_GAIN {
            return Verdict::GainsTooLittle { best: best.1 };
        }
        Verdict::Earns {
            best: best.1,
            cell: best.0.clone(),
        }
    }

    /// The verdict as the table prints it, for a row that turns a mechanism `on` or off.
    pub fn text(&self, on: bool) -> String {
        let pct = |g: f64| format!("{:+.1} %", g * 100.0);
        match (self, on) {
            (Verdict::Earns { best, cell }, false) => {
                format!("keep ({} at {cell})", pct(*best))
            }
            (Verdict::Earns { best, cell }, true) => {
                format!("could be on ({} at {cell}, no loss > 2 %)", pct(*best))
            }
            (Verdict::GainsTooLittle { best }, on) => format!(
                "{}: gains < 1 % everywhere (best {})",
                if on { "stays off" } else { "remove or off" },
                pct(*best)
            ),
            (Verdict::Loses { gain, cell }, on) => format!(
                "{}: loses {} at {cell}",
                if on { "stays off" } else { "remove or off" },
                pct(-gain).trim_start_matches('+')
            ),
            (Verdict::NoFigure, _) => "no figure".into(),
        }
    }
}

/// One mechanism case against its baseline over all cells.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldOutRow {
    pub case: String,
    pub baseline: String,
    /// `NAME=on|off` as switched.
    pub mechanisms: Vec<String>,
    /// Whether the row turns its mechanism on (an opt-in one) rather than off.
    pub on: bool,
    /// Per cell, in run order: median goodput of the case over its baseline's.
    pub ratios: Vec<(String, Option<f64>)>,
    pub verdict: Verdict,
}

/// The mechanism rows of a run: every case with a baseline, in the order cases first ran.
/// Cells with a competing flow are in the ratios but not in the verdict: there a mechanism
/// can gain goodput by taking it from the competitor, which the fairness table judges.
pub fn held_out_rows(res: &Results, points: &[String]) -> Vec<HeldOutRow> {
    let contended: Vec<String> = res
        .points
        .iter()
        .filter(|p| p.competitor)
        .map(|p| p.key())
        .collect();
    let mut rows = Vec::new();
    for case in res.cases() {
        let Some(first) = res.runs.iter().find(|r| r.case == case) else {
            continue;
        };
        let Some(baseline) = first.baseline.clone() else {
            continue;
        };
        let on = first.mechanisms.iter().any(|m| m.ends_with("=on"));
        let ratios: Vec<(String, Option<f64>)> = points
            .iter()
            .map(|p| {
                let ratio = match (res.cell(&case, p), res.cell(&baseline, p)) {
                    (Some((num, _)), Some((den, _))) if den > 0.0 => Some(num / den),
                    _ => None,
                };
                (p.clone(), ratio)
            })
            .collect();
        let gains: Vec<(String, Option<f64>)> = ratios
            .iter()
            .map(|(p, r)| {
                let r = r.filter(|_| !contended.contains(p));
                let gain = r.and_then(|r| match on {
                    true => Some(r - 1.0),
                    false => (r > 0.0).then(|| 1.0 / r - 1.0),
                });
                (p.clone(), gain)
            })
            .collect();
        rows.push(HeldOutRow {
            case,
            baseline,
            mechanisms: first.mechanisms.clone(),
            on,
            verdict: Verdict::judge(&gains),
            ratios,
        });
    }
    rows
}

/// The held-out table; empty when no case switches a mechanism.
pub fn held_out_markdown(res: &Results, points: &[String]) -> String {
    let rows = held_out_rows(res, points);
    let mut s = String::new();
    if rows.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\nMechanisms (issue 39): median goodput with the switch over the same transfer without it, same cell, warm runs. \
         Verdict: a mechanism that gains < 1 % everywhere or loses > 2 % anywhere is a candidate for removal or off by default \
         (off rows: gain = 1 / ratio - 1; on rows: gain = ratio - 1). Cells with a competing flow are shown but left out of the verdict \
         (goodput taken from the competitor is no gain; see the fairness table). One run per cell: treat verdicts near 1 % or 2 % as open.\n"
    );
    let _ = writeln!(s, "| switch | against | {} | verdict |", points.join(" | "));
    let _ = writeln!(s, "|---|---|{}---|", "---:|".repeat(points.len()));
    for r in &rows {
        let cells: Vec<String> = r
            .ratios
            .iter()
            .map(|(_, v)| v.map_or("✗".to_string(), |v| format!("{v:.3}")))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            r.mechanisms.join(" "),
            r.baseline,
            cells.join(" | "),
            r.verdict.text(r.on)
        );
    }
    s
}

/// The fairness table: every run at a point with a competing flow; empty without one.
pub fn fairness_markdown(res: &Results) -> String {
    let mut s = String::new();
    let cells: Vec<_> = res.points.iter().filter(|p| p.competitor).collect();
    if cells.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\nFairness (issue 39): one bulk TCP flow shares the bottleneck with each transfer. Competitor = its goodput over the \
         transfer's wall time; share = of the link rate; per connection = the tool's goodput over the connections it used. \
         ✔ the competitor got at least what one of the tool's connections got on average.\n"
    );
    let _ = writeln!(
        s,
        "| cell | case | goodput Mbit/s | connections | per connection | competitor Mbit/s | competitor share | ≥ one connection |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|:-:|");
    for p in cells {
        let key = p.key();
        for r in res.runs.iter().filter(|r| r.point_key() == key) {
            let good = super::report::run_bps(r);
            let conns = r.connections_in_use();
            let per = good.map(|g| g / f64::from(conns));
            let fair = match (per, r.competitor_bps) {
                (Some(per), Some(c)) if c >= per => "✔",
                (Some(_), Some(_)) => "✘",
                _ => "✗",
            };
            let mbit = |v: Option<f64>| v.map_or("✗".to_string(), |v| format!("{:.0}", v / 1e6));
            let share = r
                .competitor_bps
                .map(|c| format!("{:.1} %", c / p.rate_bps.max(1) as f64 * 100.0))
                .unwrap_or_else(|| "✗".into());
            let _ = writeln!(
                s,
                "| {key} | {} | {} | {conns} | {} | {} | {share} | {fair} |",
                r.case,
                mbit(good),
                mbit(per),
                mbit(r.competitor_bps),
            );
        }
        let _ = writeln!(
            s,
            "\nLink rate at {key}: {}; the competitor's congestion control: {}.",
            format_rate(p.rate_bps),
            p.competitor_congestion.as_deref().unwrap_or("?")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::report::tests::{record, results};

    fn judge(gains: &[f64]) -> Verdict {
        let g: Vec<(String, Option<f64>)> = gains
            .iter()
            .enumerate()
            .map(|(i, g)| (format!("c{i}"), Some(*g)))
            .collect();
        Verdict::judge(&g)
    }

    #[test]
    fn the_issue_rule() {
        assert_eq!(
            judge(&[0.005, 0.009, -0.01]),
            Verdict::GainsTooLittle { best: 0.009 }
        );
        assert_eq!(
            judge(&[0.10, -0.021]),
            Verdict::Loses {
                gain: -0.021,
                cell: "c1".into()
            }
        );
        assert_eq!(
            judge(&[0.0, 0.015, -0.019]),
            Verdict::Earns {
                best: 0.015,
                cell: "c1".into()
            }
        );
        assert_eq!(Verdict::judge(&[("c".into(), None)]), Verdict::NoFigure);
        assert_eq!(
            judge(&[0.10, -0.03]).text(false),
            "remove or off: loses 3.0 % at c1"
        );
        assert_eq!(
            judge(&[0.004]).text(true),
            "stays off: gains < 1 % everywhere (best +0.4 %)"
        );
    }

    fn mech(case: &str, rtt: f64, bps: f64, setting: &str) -> crate::scenario::RunRecord {
        let mut r = record(case, rtt, Some(bps), false);
        r.mechanisms = vec![setting.into()];
        r.baseline = Some("xfer default".into());
        r
    }

    #[test]
    fn rows_compare_with_the_baseline_in_each_cell() {
        let res = results(vec![
            record("xfer default", 100.0, Some(900e6), false),
            mech("xfer default, taper off", 100.0, 800e6, "taper=off"),
            mech("xfer default, tcp-resume on", 100.0, 906e6, "tcp-resume=on"),
            record("xfer default", 50.0, Some(900e6), false),
            mech("xfer default, taper off", 50.0, 930e6, "taper=off"),
            mech("xfer default, tcp-resume on", 50.0, 900e6, "tcp-resume=on"),
        ]);
        let points = res.point_keys();
        let rows = held_out_rows(&res, &points);
        assert_eq!(rows.len(), 2);
        let taper = &rows[0];
        assert!(!taper.on);
        let r100 = taper.ratios[0].1.unwrap_or_default();
        assert!((r100 - 800.0 / 900.0).abs() < 1e-9, "{r100}");
        // Off at 50 ms is 3.3 % faster: the mechanism loses there.
        assert!(
            matches!(&taper.verdict, Verdict::Loses { cell, .. } if cell == &points[1]),
            "{:?}",
            taper.verdict
        );
        let resume = &rows[1];
        assert!(resume.on);
        assert_eq!(
            resume.verdict,
            Verdict::GainsTooLittle {
                best: 906.0 / 900.0 - 1.0
            }
        );
        let md = res.markdown();
        assert!(
            md.contains("| taper=off | xfer default | 0.889 | 1.033 | remove or off: loses"),
            "{md}"
        );
        // With a competitor at 50 ms, only 100 ms counts: taper gains 12.5 % there.
        let mut res = res;
        res.points[1].competitor = true;
        let rows = held_out_rows(&res, &points);
        assert!(
            matches!(&rows[0].verdict, Verdict::Earns { cell, .. } if cell == &points[0]),
            "{:?}",
            rows[0].verdict
        );
    }

    #[test]
    fn fairness_rows_read_per_connection_share() {
        let mut res = results(vec![
            record("xfer default", 100.0, Some(800e6), false),
            record("aria2c nginx c=16", 100.0, Some(900e6), false),
        ]);
        res.points[0].competitor = true;
        res.runs[0].connections_used = Some(8);
        res.runs[0].competitor_bps = Some(150e6);
        res.runs[1].connections = 16;
        res.runs[1].competitor_bps = Some(40e6);
        let md = res.markdown();
        assert!(
            md.contains("| tuned 100ms 0% | xfer default | 800 | 8 | 100 | 150 | 15.0 % | ✔ |"),
            "{md}"
        );
        assert!(
            md.contains("| tuned 100ms 0% | aria2c nginx c=16 | 900 | 16 | 56 | 40 | 4.0 % | ✘ |"),
            "{md}"
        );
    }
}
