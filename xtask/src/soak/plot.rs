//! Draws the soak's series over time as one SVG: a panel per series, so a
//! flat line reads as "it holds".

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use super::Sample;

/// (title with unit, value of a sample) of each panel.
type Series = (&'static str, fn(&Sample) -> f64);

const PANELS: [Series; 6] = [
    ("operations per second", |s| s.ops_per_s),
    ("open block files (all datanodes)", |s| s.open_files as f64),
    ("peak in-flight payload of one datanode, MiB", |s| {
        s.peak_inflight_bytes as f64 / 1_048_576.0
    }),
    ("disk used, MiB", |s| s.disk_bytes as f64 / 1_048_576.0),
    ("process RSS, MiB", |s| s.rss_bytes as f64 / 1_048_576.0),
    ("failed operations per interval", |s| s.errors as f64),
];

/// Writes the panels of `samples` to `path`.
///
/// # Errors
/// Drawing or file errors.
pub(crate) fn draw(samples: &[Sample], path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900, 1200)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let t_max = samples.iter().map(|s| s.t_s).fold(1.0, f64::max);
    for (area, (title, value)) in root.split_evenly((PANELS.len(), 1)).iter().zip(PANELS) {
        let y_max = samples.iter().map(value).fold(0.0, f64::max).max(1.0) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..t_max, 0.0..y_max)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .x_labels(8)
            .y_labels(4)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .draw_series(LineSeries::new(
                samples.iter().map(|s| (s.t_s, value(s))),
                &BLUE,
            ))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("writing {}", path.display()))
}
