//! docs/benchmarks-ratios.svg: the pair tables' ratios as one picture,
//! a panel per transport, a row per cell (test and size), the ratio on a
//! log axis. So that right means better on every row, a latency row
//! shows the inverse of the table's ratio: each row is how fast ferrovia
//! is against its reference, 1 being the same.

use plotters::prelude::*;

use super::parse::Record;
use super::plan::{self, Kind, Tool, Transport};
use super::report::{self, median};

/// One row of a panel.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Row {
    /// `write_bw 4 KiB`, `write_bw 64 KiB -q 4`.
    pub(super) label: String,
    /// ferrovia's speed against the reference: bandwidth ratio, or the
    /// reference's latency over ferrovia's.
    pub(super) speed: f64,
    pub(super) kind: Kind,
}

/// The rows of `transport`: the cells where both tools have a median.
pub(super) fn rows(records: &[Record], transport: Transport) -> Vec<Row> {
    plan::cases(transport)
        .into_iter()
        .filter_map(|case| {
            let ours = median(&report::runs(records, &case, Tool::Ferrovia).values)?;
            let theirs = median(&report::runs(records, &case, Tool::Reference).values)?;
            let speed = match case.pair.kind {
                Kind::Bandwidth => ours / theirs,
                Kind::Latency => theirs / ours,
            };
            let qps = if case.qps > 1 {
                format!(" -q {}", case.qps)
            } else {
                String::new()
            };
            (speed.is_finite() && speed > 0.0).then(|| Row {
                label: format!("{} {}{qps}", case.pair.name, report::size_name(case.size)),
                speed,
                kind: case.pair.kind,
            })
        })
        .collect()
}

const WIDTH: u32 = 900;
/// Pixels per row, and around each panel's rows (title, axis, margins).
const ROW: u32 = 17;
const PANEL: u32 = 80;
const BANDWIDTH: RGBColor = RGBColor(31, 119, 180);
const LATENCY: RGBColor = RGBColor(214, 39, 40);

/// The SVG, or `None` if no cell has both medians.
pub(super) fn svg(records: &[Record], device: &str) -> Option<String> {
    let panels: Vec<(String, Vec<Row>)> = plan::TRANSPORTS
        .into_iter()
        .map(|t| (report::transport_title(t, device), rows(records, t)))
        .filter(|(_, rows)| !rows.is_empty())
        .collect();
    if panels.is_empty() {
        return None;
    }
    let height: u32 = 40
        + panels
            .iter()
            .map(|(_, r)| PANEL + ROW * r.len() as u32)
            .sum::<u32>();
    let mut out = String::new();
    draw(&mut out, &panels, height).ok()?;
    Some(out)
}

type Failure = Box<dyn std::error::Error>;

fn draw(out: &mut String, panels: &[(String, Vec<Row>)], height: u32) -> Result<(), Failure> {
    let root = SVGBackend::with_string(out, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, mut rest) = root.split_vertically(40);
    title.draw(&Text::new(
        "ferrovia against its reference, per cell: right of 1 is faster \
         (bandwidth: ferrovia / reference; latency: reference / ferrovia)",
        (10, 14),
        ("sans-serif", 14).into_font(),
    ))?;
    for (name, rows) in panels {
        let (area, below) = rest.split_vertically(PANEL + ROW * rows.len() as u32);
        panel(&area, name, rows)?;
        rest = below;
    }
    root.present()?;
    Ok(())
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    name: &str,
    rows: &[Row],
) -> Result<(), Failure> {
    let lo = rows.iter().map(|r| r.speed).fold(0.5, f64::min) / 1.25;
    let hi = rows.iter().map(|r| r.speed).fold(2.0, f64::max) * 1.25;
    let n = rows.len() as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(name, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(190)
        // A linear axis of log2(speed), labelled with the speeds: every
        // label shows (plotters' log axis labels only some decades).
        .build_cartesian_2d(lo.log2()..hi.log2(), -1..n)?;
    chart
        .configure_mesh()
        .y_labels(rows.len() + 2)
        .y_label_formatter(&|y| {
            usize::try_from(n - 1 - *y)
                .ok()
                .and_then(|i| rows.get(i))
                .map_or_else(String::new, |r| r.label.clone())
        })
        .x_labels(10)
        .x_label_formatter(&|v| report::number(v.exp2()))
        .x_desc("ferrovia's speed against the reference (log scale)")
        .draw()?;
    // Speed 1 (log2: 0), where both tools are as fast.
    chart.draw_series(LineSeries::new(
        [(0.0, -1), (0.0, n)],
        BLACK.stroke_width(1),
    ))?;
    for (kind, color, label) in [
        (Kind::Bandwidth, BANDWIDTH, "bandwidth"),
        (Kind::Latency, LATENCY, "latency"),
    ] {
        chart
            .draw_series(
                rows.iter()
                    .enumerate()
                    .filter(|(_, r)| r.kind == kind)
                    // The first row at the top.
                    .map(|(i, r)| {
                        Circle::new((r.speed.log2(), n - 1 - i as i32), 4, color.filled())
                    }),
            )?
            .label(label)
            .legend(move |(x, y)| Circle::new((x, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_compare::parse::Outcome;

    fn run(transport: Transport, test: &str, size: usize, tool: Tool, v: f64) -> Record {
        Record {
            transport,
            test: test.into(),
            size,
            qps: 1,
            tool,
            rep: 1,
            outcome: Outcome::Measured {
                value: v,
                secs: 1.0,
            },
        }
    }

    #[test]
    fn right_of_one_is_faster_for_both_kinds() {
        let t = Transport::UcxSm;
        let records = vec![
            run(t, "write_bw", 4096, Tool::Ferrovia, 2000.0),
            run(t, "write_bw", 4096, Tool::Reference, 1000.0),
            run(t, "send_lat", 8, Tool::Ferrovia, 1.0),
            run(t, "send_lat", 8, Tool::Reference, 4.0),
            // Only one side: no row.
            run(t, "read_bw", 8, Tool::Ferrovia, 5.0),
        ];
        let rows = rows(&records, t);
        assert_eq!(
            rows,
            vec![
                Row {
                    label: "write_bw 4 KiB".into(),
                    speed: 2.0,
                    kind: Kind::Bandwidth
                },
                Row {
                    label: "send_lat 8 B".into(),
                    speed: 4.0,
                    kind: Kind::Latency
                },
            ]
        );
    }

    #[test]
    fn the_svg_has_a_panel_per_transport_and_a_label_per_row() {
        let mut records = Vec::new();
        for (t, f) in [(Transport::Verbs, 0.8), (Transport::UcxTcp, 1.3)] {
            records.push(run(t, "write_bw", 65536, Tool::Ferrovia, 100.0 * f));
            records.push(run(t, "write_bw", 65536, Tool::Reference, 100.0));
            records.push(run(t, "write_lat", 8, Tool::Ferrovia, 3.0));
            records.push(run(t, "write_lat", 8, Tool::Reference, 3.0 * f));
        }
        let svg = svg(&records, "rxe0").expect("a plot");
        assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
        assert!(svg.trim_end().ends_with("</svg>"));
        for text in [
            "rxe0",
            "UCX tcp",
            "write_bw 64 KiB",
            "write_lat 8 B",
            "latency",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(!svg.contains("UCX sm,self"), "no records, no panel");
        // Two points a panel, plus one in each legend entry.
        assert_eq!(svg.matches("<circle").count(), 2 * 2 + 2 * 2, "{svg}");
        assert_eq!(super::svg(&[], "rxe0"), None);
    }

    #[test]
    fn a_cell_as_fast_as_its_reference_sits_on_the_line_of_one() {
        let t = Transport::UcxTcp;
        let records = vec![
            run(t, "write_bw", 8, Tool::Ferrovia, 10.0),
            run(t, "write_bw", 8, Tool::Reference, 10.0),
            run(t, "send_bw", 8, Tool::Ferrovia, 40.0),
            run(t, "send_bw", 8, Tool::Reference, 10.0),
        ];
        let svg = svg(&records, "rxe0").unwrap();
        let attr = |tag: &str, name: &str| -> String {
            let at = tag.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            tag[at..].split('"').next().unwrap().to_string()
        };
        let circles: Vec<&str> = svg.split("<circle").skip(1).collect();
        let same = attr(circles[0], "cx");
        let faster = attr(circles[1], "cx");
        assert!(faster.parse::<i32>().unwrap() > same.parse::<i32>().unwrap());
        // A long vertical line through the first point.
        let line = svg.split("<polyline").skip(1).any(|l| {
            let pts: Vec<(i32, i32)> = attr(l, "points")
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            pts.len() == 2
                && pts[0].0 == pts[1].0
                && (pts[1].1 - pts[0].1).abs() > 30
                && pts[0].0.to_string() == same
        });
        assert!(line, "no line of 1 through x = {same}");
    }
}
