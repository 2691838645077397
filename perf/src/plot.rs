//! `--plot FILE.svg`: a run's figures against message size, rnic beside
//! its baselines, drawn with plotters.

use std::path::Path;

use plotters::prelude::*;

/// One size's figures: rnic's and the baselines' of the same run (`None`
/// when the run measured none).
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub size: usize,
    pub rnic: f64,
    pub tcp: Option<f64>,
    pub memcpy: Option<f64>,
}

/// What the y axis shows.
#[derive(Debug, Clone, Copy)]
pub enum Measure {
    /// t_typical in µs.
    Latency,
    /// Average bandwidth in this unit (`MB/s` or `Gb/s`).
    Bandwidth(&'static str),
}

/// Draws `rows` to the SVG file `path`: x is the message size (log 2), y
/// the figure (log 10), one line for rnic, one per baseline measured.
pub fn draw(path: &Path, title: &str, m: Measure, rows: &[Figures]) -> Result<(), String> {
    if rows.is_empty() {
        return Err("no figures to plot".into());
    }
    let lines: [Line; 3] = [
        ("rnic", BLUE, pick(rows, |r| Some(r.rnic))),
        ("TCP loopback", RED, pick(rows, |r| r.tcp)),
        ("one core's memcpy", GREEN, pick(rows, |r| r.memcpy)),
    ];
    let ys = || lines.iter().flat_map(|l| l.2.iter().map(|p| p.1));
    let lo = ys().fold(f64::INFINITY, f64::min);
    let hi = ys().fold(0.0, f64::max);
    let (x0, x1) = (rows[0].size as f64, rows[rows.len() - 1].size as f64);
    // A single size still needs an x range, and a flat line a y range.
    let (x0, x1) = (x0 / 2.0, x1 * 2.0);
    let (lo, hi) = (lo / 2.0, hi * 2.0);
    let y_desc = match m {
        Measure::Latency => "t_typical [usec]".to_string(),
        Measure::Bandwidth(unit) => format!("BW average [{unit}]"),
    };
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    let e = |e: DrawingAreaErrorKind<std::io::Error>| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((x0..x1).log_scale().base(2.0), (lo..hi).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("message size [bytes]")
        .y_desc(y_desc)
        .x_label_formatter(&|x| size_label(*x))
        .y_label_formatter(&|y| value_label(*y))
        .draw()
        .map_err(e)?;
    for (label, color, points) in lines {
        if points.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

/// A labelled, coloured line of (size, figure) points.
type Line = (&'static str, RGBColor, Vec<(f64, f64)>);

fn pick(rows: &[Figures], f: impl Fn(&Figures) -> Option<f64>) -> Vec<(f64, f64)> {
    rows.iter()
        .filter_map(|r| f(r).filter(|v| *v > 0.0).map(|v| (r.size as f64, v)))
        .collect()
}

/// `8`, `4K`, `2M`: sizes as perftest users read them.
fn size_label(x: f64) -> String {
    let x = x.round() as u64;
    match x {
        0..=1023 => x.to_string(),
        1024..=1048575 => format!("{}K", x >> 10),
        _ => format!("{}M", x >> 20),
    }
}

/// Three significant digits at most, without trailing noise.
fn value_label(y: f64) -> String {
    match y {
        y if y >= 100.0 => format!("{y:.0}"),
        y if y >= 1.0 => format!("{y:.1}"),
        y => format!("{y:.3}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_line_measured() {
        let dir = std::env::temp_dir().join(format!("rnic-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bw.svg");
        let rows: Vec<Figures> = (1..=4)
            .map(|p| Figures {
                size: 1 << p,
                rnic: 10.0 * p as f64,
                tcp: Some(5.0 * p as f64),
                memcpy: (p > 1).then_some(100.0),
            })
            .collect();
        draw(&path, "write_bw", Measure::Bandwidth("MB/s"), &rows).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for text in [
            "rnic",
            "TCP loopback",
            "memcpy",
            "BW average [MB/s]",
            "write_bw",
        ] {
            assert!(svg.contains(text), "{text} missing from the plot");
        }
        // Four rnic points, four TCP points, three memcpy points.
        assert_eq!(svg.matches("<circle").count(), 11);
        assert!(draw(&path, "x", Measure::Latency, &[]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sizes_read_as_perftest_prints_them() {
        assert_eq!(size_label(8.0), "8");
        assert_eq!(size_label(4096.0), "4K");
        assert_eq!(size_label(8.0 * 1048576.0), "8M");
        assert_eq!(value_label(100000.0), "100000");
        assert_eq!(value_label(2.5), "2.5");
        assert_eq!(value_label(0.25), "0.250");
    }
}
