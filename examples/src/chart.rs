//! The benchmarks' charts: log-log lines, such as throughput against writers, one line per mode.

use plotters::prelude::*;

/// One line of the chart.
pub struct Series {
    /// The legend.
    pub name: String,
    /// (x, y) points, such as (writers, transactions per second).
    pub points: Vec<(u32, f64)>,
}

/// Draws `series` into an SVG file at `path`, log-scaled on both axes: throughput against
/// writers.
pub fn throughput_chart(
    path: &std::path::Path,
    title: &str,
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    log_chart(
        path,
        title,
        ("concurrent writers", "transactions / s"),
        series,
    )
}

/// Draws `series` into an SVG file at `path`, log-scaled on both axes, the axes described by
/// `(x, y)`; the x ticks are the measured points' x values.
pub fn log_chart(
    path: &std::path::Path,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    // Ticks at the measured x values only (and, below, at each power of ten of y); the x range
    // from the smallest to the largest of them.
    let mut writers: Vec<u32> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    writers.sort_unstable();
    writers.dedup();
    let min_writers = writers.first().copied().unwrap_or(1).max(1);
    let max_writers = writers.last().copied().unwrap_or(1).max(2);
    let max_tps = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0_f64, f64::max);
    // The y range: from the power of ten below the slowest point to 1.5 times the fastest.
    let min_tps = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(max_tps, f64::min)
        .max(1.0);
    let bottom = 10f64.powf((min_tps / 1.2).log10().floor());
    let top = max_tps * 1.5;
    let mut ticks = vec![];
    let mut decade = bottom;
    while decade <= top {
        ticks.extend(
            [decade, 2.0 * decade, 5.0 * decade]
                .into_iter()
                .filter(|&t| t <= top),
        );
        decade *= 10.0;
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(
            (min_writers - min_writers / 4..max_writers + max_writers / 4)
                .log_scale()
                .with_key_points(writers),
            (bottom..top).log_scale().with_key_points(ticks),
        )?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .bold_line_style(BLACK.mix(0.15))
        .light_line_style(TRANSPARENT)
        .y_label_formatter(&|tps| format!("{tps:.0}"))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}
