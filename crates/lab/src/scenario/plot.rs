//! SVG figures of a scenario's results, drawn with plotters: goodput against parallelism (one
//! figure per link point where some transfer sweeps its connections) and goodput against RTT
//! (one figure per profile and loss rate when the scenario has several RTTs). One line per
//! transfer, median over repetitions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::report::{median, run_bps, Results};
use super::units::{format_loss, trim_float};
use super::ScenarioError;

type Series = BTreeMap<String, Vec<(f64, f64)>>;

/// Draws every figure the results support into `dir`; returns the files written.
pub fn draw_all(results: &Results, dir: &Path) -> Result<Vec<PathBuf>, ScenarioError> {
    let mut written = Vec::new();
    for p in &results.points {
        let key = p.key();
        let mut series: Series = BTreeMap::new();
        for case in results.cases() {
            let runs: Vec<_> = results
                .runs
                .iter()
                .filter(|r| r.case == case && r.point_key() == key)
                .collect();
            let Some(first) = runs.first() else { continue };
            let Some(m) = median(runs.iter().filter_map(|r| run_bps(r)).collect()) else {
                continue;
            };
            // The series is the case without its connection count.
            let name = without_connections(&case);
            series
                .entry(name)
                .or_default()
                .push((first.connections as f64, m / 1e6));
        }
        series.retain(|_, v| v.len() >= 2);
        if series.is_empty() {
            continue;
        }
        let file = dir.join(format!(
            "parallelism-{}-{}ms-loss{}.svg",
            p.profile,
            trim_float(p.rtt_ms),
            trim_float(p.loss * 100.0)
        ));
        let title = format!("goodput vs parallel connections, {key}");
        draw(
            &file,
            &title,
            "connections",
            true,
            p.rate_bps as f64 / 1e6,
            &series,
        )?;
        written.push(file);
    }
    let mut groups: Vec<(String, f64)> = Vec::new();
    for p in &results.points {
        if !groups
            .iter()
            .any(|(pr, l)| *pr == p.profile && *l == p.loss)
        {
            groups.push((p.profile.clone(), p.loss));
        }
    }
    for (profile, loss) in groups {
        let points: Vec<_> = results
            .points
            .iter()
            .filter(|p| p.profile == profile && p.loss == loss)
            .collect();
        if points.len() < 2 {
            continue;
        }
        let mut series: Series = BTreeMap::new();
        for case in results.cases() {
            for p in &points {
                let key = p.key();
                let bps: Vec<f64> = results
                    .runs
                    .iter()
                    .filter(|r| r.case == case && r.point_key() == key)
                    .filter_map(run_bps)
                    .collect();
                if let Some(m) = median(bps) {
                    series
                        .entry(case.clone())
                        .or_default()
                        .push((p.rtt_ms, m / 1e6));
                }
            }
        }
        series.retain(|_, v| v.len() >= 2);
        if series.is_empty() {
            continue;
        }
        let file = dir.join(format!(
            "rtt-{profile}-loss{}.svg",
            trim_float(loss * 100.0)
        ));
        let title = format!("goodput vs RTT, {profile}, loss {}", format_loss(loss));
        let rate = points
            .first()
            .map(|p| p.rate_bps as f64 / 1e6)
            .unwrap_or(1000.0);
        draw(&file, &title, "RTT (ms)", false, rate, &series)?;
        written.push(file);
    }
    Ok(written)
}

fn without_connections(case: &str) -> String {
    case.split(' ')
        .filter(|w| !w.starts_with("c="))
        .collect::<Vec<_>>()
        .join(" ")
}

fn draw(
    file: &Path,
    title: &str,
    x_desc: &str,
    log_x: bool,
    rate_mbit: f64,
    series: &Series,
) -> Result<(), ScenarioError> {
    let err = |e: &dyn std::fmt::Display| ScenarioError::Plot {
        path: file.to_path_buf(),
        reason: e.to_string(),
    };
    let xs = series.values().flatten().map(|p| p.0);
    let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let y_max = series
        .values()
        .flatten()
        .map(|p| p.1)
        .fold(rate_mbit, f64::max)
        * 1.08;
    let root = SVGBackend::new(file, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(65);
    macro_rules! finish {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc("goodput (Mbit/s)")
                .x_label_formatter(&|x: &f64| format!("{x:.0}"))
                .y_label_formatter(&|y: &f64| format!("{y:.0}"))
                .draw()
                .map_err(|e| err(&e))?;
            chart
                .draw_series(LineSeries::new(
                    [(x_min, rate_mbit), (x_max, rate_mbit)],
                    BLACK.mix(0.4).stroke_width(1),
                ))
                .map_err(|e| err(&e))?
                .label("link rate")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
            for (i, (name, pts)) in series.iter().enumerate() {
                let mut pts = pts.clone();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let color = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                    .map_err(|e| err(&e))?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled())))
                    .map_err(|e| err(&e))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
        }};
    }
    let pad = if x_max > x_min {
        (x_max - x_min) * 0.05
    } else {
        1.0
    };
    if log_x && x_min > 0.0 {
        finish!(builder
            .build_cartesian_2d((x_min * 0.8..x_max * 1.25).log_scale(), 0f64..y_max)
            .map_err(|e| err(&e))?);
    } else {
        finish!(builder
            .build_cartesian_2d((x_min - pad)..(x_max + pad), 0f64..y_max)
            .map_err(|e| err(&e))?);
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::report::tests::{record, results};

    #[test]
    fn figures_are_written() {
        let res = results(vec![
            record("xfer http1 c=1", 100.0, Some(3.0e8), false),
            record("xfer http1 c=8", 100.0, Some(9.3e8), false),
            record("xfer http1 c=1", 50.0, Some(5.0e8), false),
            record("xfer http1 c=8", 50.0, Some(9.4e8), false),
        ]);
        let dir = std::env::temp_dir().join(format!("xfer-lab-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let files = draw_all(&res, &dir).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<String> = files
            .iter()
            .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        assert_eq!(
            names,
            [
                "parallelism-tuned-100ms-loss0.svg",
                "parallelism-tuned-50ms-loss0.svg",
                "rtt-tuned-loss0.svg"
            ]
        );
        let svg = std::fs::read_to_string(&files[0]).unwrap_or_default();
        assert!(svg.contains("<svg") && svg.contains("xfer http1"), "{svg}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
